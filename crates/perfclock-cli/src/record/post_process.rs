//! What follows `perf record`: whether it left a complete recording, the exit code, and turning
//! the raw recording into OUT (the TIME_CONV record and clock data added in-process, then
//! `perf inject --jit` when a jitdump was mapped), OUT appearing only complete.

use std::fs;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus};

use perfclock_cli::RecordArgs;
use perfclock_perfdata::check_output_path;

use super::anchors::ClockAnchors;
use super::target::Target;
use super::work_dir::WorkDir;
use super::{fail, Failure, NAME};
use crate::error::RecordError;
use crate::output::{chain, errln};
use crate::{children, inject, signals};

/// Whether `path` is a perf.data that perf finished writing: its header names a data section
/// with records (perf writes the final header when it stops).
fn recording_complete(path: &Path) -> bool {
    let mut header = [0u8; 56];
    let read = fs::File::open(path).and_then(|mut file| file.read_exact(&mut header));
    if read.is_err() || &header[..8] != b"PERFILE2" {
        return false;
    }
    // perf_file_header: magic, size, attr_size, attrs {offset, size}, data {offset, size}.
    let data_size = u64::from_le_bytes(header[48..56].try_into().unwrap_or([0; 8]));
    data_size > 0
}

/// What [`add_time_conv`] did.
enum TimeConvStep {
    /// The recording maps no jitdump: nothing for `perf inject --jit` to do, and nothing
    /// written.
    NoJitdump,
    /// The recording maps no jitdump: `out_tmp` is the recording with its HEADER_CLOCK_DATA.
    ClockDataOnly,
    /// Written to `out_tmp`, with the TIME_CONV the recording had or one perfclock added (and
    /// HEADER_CLOCK_DATA, given a snapshot), for `perf inject --jit`.
    Written(String),
}

/// The `inject-time-conv` step, in-process: `raw` to `out_tmp` with a TIME_CONV record where
/// it lacks one, from the sidecars next to the dumps (the one call site for that code).
fn add_time_conv(
    raw: &Path,
    out_tmp: &Path,
    output: &Path,
    anchors: &ClockAnchors,
    all_jit_code: bool,
    cleanup: &signals::TempCleanup,
) -> Result<TimeConvStep, RecordError> {
    // The sidecars are looked for next to each dump the recording names: every JVM has a
    // directory of its own (pid namespaces may give two JVMs one pid).
    let options = inject::InjectOptions {
        input: raw.to_path_buf(),
        output: out_tmp.to_path_buf(),
        dump_dirs: Vec::new(),
        clock_data: match anchors.start {
            Some(snapshot) => inject::ClockDataSource::Recorded(snapshot),
            None => inject::ClockDataSource::None,
        },
        pairings: anchors.pairings.clone(),
        copies_beside: output.to_path_buf(),
        all_jit_code,
    };
    match inject::run(&options, cleanup) {
        Ok((outcome, _)) => {
            for line in outcome.foreign_lines() {
                errln!("{NAME}: {line}");
            }
            if outcome.maps_jitdumps() {
                Ok(TimeConvStep::Written(outcome.time_conv_line()))
            } else {
                Ok(TimeConvStep::ClockDataOnly)
            }
        }
        Err(crate::error::InjectError::NoJitMarker) => Ok(TimeConvStep::NoJitdump),
        Err(error) => Err(RecordError::TimeConv(error)),
    }
}

/// The exit code that reports `status` the way a shell does.
fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

/// After perf record: the exit code, the messages, and OUT.
pub(super) fn finish(
    target: &Target<'_>,
    work: WorkDir,
    status: ExitStatus,
    anchors: &ClockAnchors,
    signals: &signals::TempCleanup,
    options: &RecordArgs,
) -> Result<u8, Failure> {
    let output = &options.output;
    if !recording_complete(&work.raw) {
        return Err(fail(match status.signal() {
            Some(signal) => format!(
                "perf record was killed by signal {signal} before it finished its file: nothing \
                 recorded"
            ),
            None => format!(
                "perf record ended with {status} and left no complete recording (see perf's \
                 message above: a missing event, or perf_event_open refused, which \
                 /proc/sys/kernel/perf_event_paranoid or CAP_PERFMON decides; or the command \
                 could not start)"
            ),
        }));
    }
    let interrupted = signals.received();
    let code = match (target, interrupted) {
        (_, Some(signal)) if signal != libc::SIGINT || matches!(target, Target::Command(_)) => {
            errln!("{NAME}: interrupted (signal {signal}); perf stopped recording");
            u8::try_from(128 + signal).unwrap_or(1)
        }
        (Target::Command(_), None) => {
            if !status.success() {
                errln!("{NAME}: the command failed ({status}); post-processing what was recorded");
            }
            // perf record exits with the workload's status (and dies by the workload's signal).
            status_code(status)
        }
        _ => 0,
    };
    anchors.report();
    if let Err(error) = post_process(&work, output, anchors, options.all_jit_code, signals) {
        let raw = work.raw.display().to_string();
        work.keep_raw();
        return Err(fail(format!(
            "{}; the recording is kept in {raw}",
            chain(&error)
        )));
    }
    drop(work);
    let out = output.display();
    errln!(
        "{NAME}: wrote {out}; next:\n  perf report -i {out}\n  perf script -i {out}\n  samply \
         import {out}"
    );
    Ok(code)
}

/// Renames `from` over `output` (checked again first), with signals held off.
fn commit(from: &Path, output: &Path, signals: &signals::TempCleanup) -> Result<(), RecordError> {
    signals.commit(from, || {
        check_output_path(output).map_err(RecordError::Output)?;
        fs::rename(from, output).map_err(|source| RecordError::Rename {
            output: output.to_owned(),
            source,
        })
    })
}

/// The raw recording to `output`: TIME_CONV where missing, then `perf inject --jit` when a
/// jitdump was mapped. `output` appears only complete; a signal meanwhile removes the
/// intermediate files, keeps the raw recording and says so.
fn post_process(
    work: &WorkDir,
    output: &Path,
    anchors: &ClockAnchors,
    all_jit_code: bool,
    signals: &signals::TempCleanup,
) -> Result<(), RecordError> {
    let message = format!(
        "{NAME}: interrupted (signal {{signal}}) while writing {}: it was not written; the \
         recording is kept in {}",
        output.display(),
        work.raw.display()
    );
    signals.fatal(None, Some(message.clone()));
    let converted = work.path("conv.data");
    signals.register(&converted);
    match add_time_conv(
        &work.raw,
        &converted,
        output,
        anchors,
        all_jit_code,
        signals,
    )? {
        TimeConvStep::ClockDataOnly => {
            errln!("{NAME}: no jitdump was mapped: no JIT code to inject");
            commit(&converted, output, signals)?;
        }
        TimeConvStep::NoJitdump => {
            errln!("{NAME}: no jitdump was mapped: no JIT code to inject");
            commit(&work.raw, output, signals)?;
        }
        TimeConvStep::Written(what) => {
            errln!("{NAME}: {what}; perf inject --jit");
            let injected = work.path("jit.data");
            signals.register(&injected);
            let mut inject = Command::new("perf");
            inject
                .args(["inject", "--jit", "-i"])
                .arg(&converted)
                .arg("-o")
                .arg(&injected);
            children::die_with_parent(&mut inject, libc::SIGTERM);
            let mut child = inject.spawn().map_err(RecordError::RunInject)?;
            signals.fatal(Some(child.id()), Some(message.clone()));
            let result = child.wait();
            signals.fatal(None, Some(message));
            let result = result.map_err(RecordError::WaitInject)?;
            if !result.success() {
                return Err(RecordError::InjectFailed(result));
            }
            commit(&injected, output, signals)?;
        }
    }
    // OUT is complete: a signal now only ends the process.
    signals.fatal(None, None);
    Ok(())
}
