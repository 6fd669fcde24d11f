//! `perfclock record [OPTIONS] [PERF-OPTIONS]... -- CMD [ARGS]`: profile a command, JIT code
//! included, in one step.
//!
//! 1. Runs `perf record -g [PERF-OPTIONS] -o OUT.raw -- CMD [ARGS]` with perf's default clock,
//!    with perfclock's JVMTI agent appended to `JAVA_TOOL_OPTIONS` so every JVM in CMD's tree
//!    writes a jitdump into one fresh private directory next to OUT.
//! 2. Forwards SIGINT/SIGTERM to perf, which stops the workload and writes its file as
//!    `perf record` always does on those signals; then waits for perf.
//! 3. Adds the TIME_CONV record `perf inject --jit` needs where the recording lacks one
//!    (`inject-time-conv`, run in-process: [`post_process`]), runs `perf inject --jit` when a
//!    jitdump was mapped (else renames), and leaves OUT ready for `perf report`, `perf script`
//!    and `samply import`. OUT appears complete or not at all; OUT.raw is kept on any error.
//!
//! Exit status: CMD's when it failed (128 + the signal when a signal ended it), 128 + the signal
//! when perfclock itself was interrupted, 1 when perfclock or perf failed, else 0.

mod anchors;
mod jvm_agent;
mod perf;
mod perf_options;
mod post_process;
mod runtimes;
mod target;
mod work_dir;

use std::process::ExitCode;

use perfclock_cli::RecordArgs;
use perfclock_inject::DumpReport;
use perfclock_perfdata::check_output_path;

use crate::error::RecordError;
use crate::output::{chain, errln};
use crate::signals;
use jvm_agent::{
    agent, attach_pids, java_tool_options, make_command_dump_dir, make_dump_root, Dumps,
};
use perf::run_perf_record;
use post_process::finish;
use runtimes::{remove_caused, runtime_flags, RuntimeFlags};
use target::{check_arguments, Target};
use work_dir::WorkDir;

const NAME: &str = "perfclock record";

/// Why the run ended badly: the message, and the exit code.
struct Failure(String, u8);

/// Runs `perfclock record`.
pub(crate) fn run(options: RecordArgs) -> ExitCode {
    match record(&options) {
        Ok(code) => ExitCode::from(code),
        Err(Failure(message, code)) => {
            errln!("{NAME}: error: {message}");
            ExitCode::from(code)
        }
    }
}

fn usage(message: String) -> Failure {
    Failure(message, 2)
}

fn fail(message: String) -> Failure {
    Failure(message, 1)
}

/// `error` and its causes, as the command's failure.
fn failed(error: RecordError) -> Failure {
    fail(chain(&error))
}

/// The recording from the checks to OUT: the agent and the dump directories, the attaches of
/// `-p`, `perf record`, then [`finish`]; the exit code, or why it failed.
fn record(options: &RecordArgs) -> Result<u8, Failure> {
    let target = check_arguments(options)?;
    let output = &options.output;
    // Before anything starts: a device, FIFO, socket, directory or symlink is never replaced.
    check_output_path(output).map_err(|e| fail(e.to_string()))?;
    let (agent, no_agent) = match agent(options, &target)? {
        Ok(agent) => (agent, None),
        Err(why) => (None, Some(why)),
    };
    let work = WorkDir::create(output).map_err(failed)?;
    let mut dumps = Dumps {
        root: None,
        dirs: Vec::new(),
        attached: Vec::new(),
        private: Vec::new(),
    };
    let RuntimeFlags { mut env, turned_on } = command_runtime_flags(options, &target);
    if let Some(agent) = &agent {
        let root = make_dump_root(output).map_err(failed)?;
        dumps.root = Some(root.clone());
        if let Target::Command(_) = target {
            let dir = make_command_dump_dir(&root).map_err(failed)?;
            let value = java_tool_options(std::env::var_os("JAVA_TOOL_OPTIONS"), agent, &dir);
            dumps.dirs.push(dir.clone());
            env.push(("JAVA_TOOL_OPTIONS", value.map_err(failed)?));
            errln!(
                "{NAME}: JVMs in the command write their jitdumps into {}",
                dir.display()
            );
        }
    }
    let signals = signals::TempCleanup::install()
        .map_err(|e| fail(format!("cannot handle SIGINT/SIGTERM/SIGHUP/SIGQUIT: {e}")))?;
    signals.forward_to(0);
    if let (Target::Pids(pids), Some(agent)) = (&target, &agent) {
        attach_pids(pids, agent, &mut dumps, options.allow_unattached)?;
    }
    if let Some(signal) = signals.received() {
        return Err(Failure(
            format!("interrupted (signal {signal}) before recording"),
            u8::try_from(128 + signal).unwrap_or(1),
        ));
    }
    let started = std::time::SystemTime::now();
    let recorded = run_perf_record(
        options,
        &target,
        &work,
        &env,
        &signals,
        agent.clone(),
        &mut dumps,
    );
    dumps.release();
    let (status, anchors, held) = match recorded {
        Ok(recorded) => recorded,
        Err(failure) => {
            drop(work);
            return Err(failure);
        }
    };
    if let (Some(why), Some(held)) = (&no_agent, &held) {
        if held.commands_seen().iter().any(|command| command == "java") {
            errln!(
                "{NAME}: warning: a JVM ran, and it is recorded without its JIT code's names: \
                 {why}; pass --agent PATH"
            );
        }
    }
    let (code, reports) = finish(&target, work, status, &anchors, held, &signals, options)?;
    cpython_notes(options, &reports);
    for (path, error) in remove_caused(&turned_on, &reports, started) {
        errln!(
            "{NAME}: warning: cannot remove {}, which a runtime wrote because perfclock turned \
             its writer on: {error}",
            perfclock_core::untrusted::Untrusted(path.as_os_str().as_encoded_bytes())
        );
    }
    Ok(code)
}

/// The runtime flags `record` sets for a command (none with --no-runtime-flags, or for -p and
/// -a), said when there are any.
fn command_runtime_flags(options: &RecordArgs, target: &Target<'_>) -> RuntimeFlags {
    let (Target::Command(command), false) = (target, options.no_runtime_flags) else {
        return RuntimeFlags::default();
    };
    let flags = runtime_flags(command, |name| std::env::var_os(name));
    let named: Vec<String> = flags
        .env
        .iter()
        .map(|(name, value)| format!("{name}={}", value.to_string_lossy()))
        .collect();
    if !named.is_empty() {
        errln!(
            "{NAME}: the command's runtimes write jitdumps: {} (--no-runtime-flags leaves them \
             alone)",
            named.join(" ")
        );
    }
    flags
}

/// What a recording of CPython's dumps needs said: a CPython still running has not written all
/// of its dump, and its Python frames need --call-graph dwarf.
fn cpython_notes(options: &RecordArgs, reports: &[DumpReport]) {
    let dwarf = options
        .perf_args
        .iter()
        .any(|arg| arg.to_string_lossy().contains("dwarf"));
    let cpython = |report: &&DumpReport| {
        report
            .command
            .as_deref()
            .is_some_and(|command| command.starts_with("python"))
    };
    let cpython_running = reports
        .iter()
        .filter(cpython)
        .any(|report| std::path::Path::new(&format!("/proc/{}", report.process)).exists());
    if cpython_running {
        errln!(
            "{NAME}: note: CPython writes its jitdump through a 2 MiB buffer, and the rest when it \
             exits: the code of a CPython still running is named as far as it has written it \
             (docs/recorders.md)"
        );
    }
    if reports.iter().any(|report| cpython(&report)) && !dwarf {
        errln!(
            "{NAME}: note: CPython's Python functions are named in the call chains perf unwinds \
             with --call-graph dwarf (its interpreter keeps no frame pointers): record with \
             `perfclock record --call-graph dwarf -- ...` (each sample then carries 8 KiB of \
             stack; docs/recorders.md)"
        );
    }
}

/// A command line's arguments as clap hands them over, for the tests.
#[cfg(test)]
fn args(list: &[&str]) -> Vec<std::ffi::OsString> {
    list.iter().map(std::ffi::OsString::from).collect()
}
