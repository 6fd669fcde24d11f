//! What follows `perf record`: whether it left a complete recording, the exit code, and turning
//! the raw recording into OUT (the TIME_CONV record and clock data added in-process, then
//! `perf inject --jit` when a jitdump was mapped), OUT appearing only complete.

use std::fs;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::Arc;

use perfclock_cli::RecordArgs;
use perfclock_core::untrusted::Untrusted;
use perfclock_inject::{
    images, ClockDataSource, DumpReport, HeldDumps, InjectError, InjectOptions, Injected,
    InputError,
};
use perfclock_os::untrusted_file::Root;
use perfclock_perfdata::check_output_path;

use super::anchors::ClockAnchors;
use super::target::Target;
use super::work_dir::WorkDir;
use super::{fail, Failure, NAME};
use crate::error::RecordError;
use crate::output::{chain, errln};
use crate::{children, signals};

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

/// The post-processing step, in-process: `raw` to `out_tmp` with its TIME_CONV, clock data
/// and the jitdumps' copies (`perfclock_inject`); `None` where the recording maps no jitdump
/// and has no clock data to add (nothing to write).
fn add_time_conv(
    raw: &Path,
    out_tmp: &Path,
    output: &Path,
    anchors: &ClockAnchors,
    held: Option<Arc<HeldDumps>>,
    all_jit_code: bool,
    cleanup: &signals::TempCleanup,
) -> Result<Option<Injected>, RecordError> {
    let mut options = InjectOptions::new(raw.to_path_buf(), out_tmp.to_path_buf());
    options.copies_beside = output.to_path_buf();
    if let Some(snapshot) = anchors.start {
        options.clock_data = ClockDataSource::Recorded(snapshot);
    }
    options.pairings = anchors.pairings.clone();
    options.all_jit_code = all_jit_code;
    options.held = held;
    match perfclock_inject::inject(&options, cleanup) {
        Ok(injected) => {
            for line in injected.outcome.lines() {
                errln!("{NAME}: {line}");
            }
            Ok(Some(injected))
        }
        Err(InjectError::Input(InputError::NoJitMarker)) => Ok(None),
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
    held: Option<Arc<HeldDumps>>,
    signals: &signals::TempCleanup,
    options: &RecordArgs,
) -> Result<(u8, Vec<DumpReport>), Failure> {
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
    let dumps = match post_process(&work, output, anchors, held, options.all_jit_code, signals) {
        Ok(dumps) => dumps,
        Err(error) => {
            let raw = work.raw.display().to_string();
            work.keep_raw();
            return Err(fail(format!(
                "{}; the recording is kept in {raw} (the jitdumps' copies and perf's \
                 intermediate files were removed)",
                chain(&error)
            )));
        }
    };
    drop(work);
    let out = output.display();
    errln!(
        "{NAME}: wrote {out}; next:\n  perf report -i {out}\n  perf script -i {out}\n  samply \
         import {out}"
    );
    Ok((code, dumps))
}

/// Renames `from` over `output` (checked again first), with signals held off.
fn commit(from: &Path, output: &Path, signals: &signals::TempCleanup) -> Result<(), RecordError> {
    signals.commit(from, || {
        check_output_path(output)
            .map_err(|error| RecordError::Output(InputError::Output(error)))?;
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
    held: Option<Arc<HeldDumps>>,
    all_jit_code: bool,
    signals: &signals::TempCleanup,
) -> Result<Vec<DumpReport>, RecordError> {
    let message = format!(
        "{NAME}: interrupted (signal {{signal}}) while writing {}: it was not written; the \
         recording is kept in {} (the jitdumps' copies and perf's intermediate files were \
         removed)",
        output.display(),
        work.raw.display()
    );
    signals.fatal(None, Some(message.clone()));
    let converted = work.path("conv.data");
    signals.register(&converted);
    let injected = add_time_conv(
        &work.raw,
        &converted,
        output,
        anchors,
        held,
        all_jit_code,
        signals,
    )?;
    let dumps = match injected {
        None => {
            errln!("{NAME}: no jitdump was mapped: no JIT code to inject");
            commit(&work.raw, output, signals)?;
            Vec::new()
        }
        Some(mut injected) if !injected.outcome.maps_jitdumps() => {
            if injected.outcome.dumps.is_empty() {
                errln!("{NAME}: no jitdump was mapped: no JIT code to inject");
            } else {
                errln!(
                    "{NAME}: no jitdump could be read (see the warnings): no JIT code to inject"
                );
            }
            commit(&converted, output, signals)?;
            std::mem::take(&mut injected.outcome.dumps)
        }
        Some(mut injected) => {
            errln!("{NAME}: {}; perf inject --jit", injected.outcome.time_conv);
            let injected_data = work.path("jit.data");
            signals.register(&injected_data);
            run_perf_inject(&converted, &injected_data, signals, &message)?;
            let outcome = &injected.outcome;
            let in_container = outcome.dumps.iter().any(|dump| dump.root != Root::Here)
                || outcome.maps.iter().any(|map| map.root != Root::Here);
            if let (true, Some(copies)) = (in_container, &injected.copies) {
                // A container's process that still lives when perf reports would have its JIT
                // images looked for inside its mount namespace (perfclock_inject::images).
                if let Err(error) = images::register(&injected_data, copies.path()) {
                    errln!(
                        "{NAME}: warning: {} (the JIT code of processes in containers is named \
                         once they have exited)",
                        chain(&error)
                    );
                }
            }
            commit(&injected_data, output, signals)?;
            let dumps = std::mem::take(&mut injected.outcome.dumps);
            // OUT names the copies and the images perf inject wrote beside them.
            let copies = injected.keep_copies(signals);
            if let Some(copies) = copies {
                errln!(
                    "{NAME}: the JIT code's images are in {} (private), which {} names",
                    Untrusted(copies.as_os_str().as_encoded_bytes()),
                    Untrusted(output.as_os_str().as_encoded_bytes())
                );
            }
            dumps
        }
    };
    // OUT is complete: a signal now only ends the process.
    signals.fatal(None, None);
    Ok(dumps)
}

/// `perf inject --jit -i converted -o injected`, stopped by a signal meanwhile (which then
/// removes what is registered and prints `message`).
fn run_perf_inject(
    converted: &Path,
    injected: &Path,
    signals: &signals::TempCleanup,
    message: &str,
) -> Result<(), RecordError> {
    let mut inject = Command::new("perf");
    inject
        .args(["inject", "--jit", "-i"])
        .arg(converted)
        .arg("-o")
        .arg(injected);
    children::die_with_parent(&mut inject, libc::SIGTERM);
    let mut child = inject.spawn().map_err(RecordError::RunInject)?;
    signals.fatal(Some(child.id()), Some(message.to_owned()));
    let result = child.wait();
    signals.fatal(None, Some(message.to_owned()));
    let result = result.map_err(RecordError::WaitInject)?;
    if !result.success() {
        return Err(RecordError::InjectFailed(result));
    }
    Ok(())
}
