//! Running `perf record`: its command line for the target, starting it with the agent in the
//! command's environment and, for `-a`, the watcher that attaches JVMs as they start; then
//! waiting for it while pairing the clocks, stopping it at `--duration` or a signal, and
//! stopping what it left of the command if it died.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use std::sync::Arc;

use perfclock_cli::RecordArgs;
use perfclock_inject::{HeldDumps, Scope, Watch};

use super::anchors::{take_snapshot, ClockAnchors, PAIRING_INTERVAL};
use super::jvm_agent::{list_unattached, report, Dumps};
use super::target::Target;
use super::work_dir::WorkDir;
use super::{fail, Failure, NAME};
use crate::output::errln;
use crate::{children, signals};
use perfclock_attach::jvms::Watcher;
use perfclock_attach::DEFAULT_TIMEOUT;

/// `perf record` for `target`, writing `raw`.
fn perf_record(options: &RecordArgs, target: &Target<'_>, raw: &Path) -> Command {
    let mut perf = Command::new("perf");
    perf.arg("record").arg("-g").args(&options.perf_args);
    match target {
        Target::Pids(pids) => {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            perf.arg("-p").arg(list.join(","));
        }
        Target::SystemWide => {
            perf.arg("-a");
        }
        Target::Command(_) => {}
    }
    perf.arg("-o").arg(raw);
    if let Target::Command(command) = target {
        perf.arg("--").args(*command);
    }
    // perf writes its file on SIGINT, and stops the command it runs.
    children::die_with_parent(&mut perf, libc::SIGINT);
    perf
}

/// Waits for perf, sending it SIGINT once `duration` has passed or a signal was received (the
/// signal thread forwards it too; this retries, as a send fails while an attach runs as the
/// JVM's user).
fn wait_for_perf(
    perf: &mut std::process::Child,
    signals: &signals::TempCleanup,
    duration: Option<Duration>,
    pairings: &mut Vec<perfclock::ClockSnapshot>,
) -> io::Result<ExitStatus> {
    let start = Instant::now();
    let mut stopped = false;
    let mut paired = Instant::now();
    loop {
        if let Some(status) = perf.try_wait()? {
            return Ok(status);
        }
        if paired.elapsed() >= PAIRING_INTERVAL {
            paired = Instant::now();
            pairings.extend(perfclock::snapshot().ok());
        }
        let due = duration.is_some_and(|d| start.elapsed() >= d) || signals.received().is_some();
        if due && !stopped {
            stopped = children::kill(perf.id(), libc::SIGINT).is_ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `perf record` (and, for `-a`, the watcher that attaches JVMs), waits for it, and
/// stops what it left of the command if it died.
pub(super) fn run_perf_record(
    options: &RecordArgs,
    target: &Target<'_>,
    work: &WorkDir,
    env: &[(&'static str, OsString)],
    signals: &signals::TempCleanup,
    agent: Option<PathBuf>,
    dumps: &mut Dumps,
) -> Result<(ExitStatus, ClockAnchors, Option<Arc<HeldDumps>>), Failure> {
    if let Target::Command(_) = target {
        // If perf dies without stopping the command (SIGKILL), the command becomes ours.
        if let Err(error) = children::become_subreaper() {
            errln!("{NAME}: warning: cannot adopt what perf leaves running: {error}");
        }
    }
    let start = take_snapshot("start");
    let mut perf = perf_record(options, target, &work.raw);
    perf.envs(env.iter().map(|(name, value)| (name, value)));
    let mut child = perf.spawn().map_err(|error| {
        fail(if error.kind() == io::ErrorKind::NotFound {
            "no `perf` on PATH: install it (Debian: linux-perf; Fedora: perf) or add its \
             directory to PATH"
                .into()
        } else {
            format!("cannot run perf: {error}")
        })
    })?;
    signals.forward_to(child.id());
    errln!(
        "{NAME}: recording to {} (perf record -g)",
        work.raw.display()
    );
    let watcher = match (target, agent, &dumps.root) {
        (Target::SystemWide, Some(agent), Some(root)) => {
            let skip = vec![std::process::id(), child.id()];
            match Watcher::start(agent, root.clone(), skip, report, DEFAULT_TIMEOUT) {
                Ok(watcher) => Some(watcher),
                Err(error) => {
                    errln!("{NAME}: warning: cannot watch for JVMs: {error}");
                    None
                }
            }
        }
        _ => None,
    };
    let dump_watch = start_dump_watch(target, child.id());
    let mut pairings: Vec<perfclock::ClockSnapshot> = start.iter().copied().collect();
    let waited = wait_for_perf(&mut child, signals, options.duration, &mut pairings);
    let held = dump_watch.map(Watch::finish);
    if let Some(watcher) = watcher {
        let outcomes = watcher.finish();
        list_unattached(&outcomes);
        for outcome in outcomes {
            dumps.keep(outcome);
        }
    }
    let status = waited.map_err(|e| fail(format!("waiting for perf: {e}")))?;
    if let (Target::Command(_), Some(signal)) = (target, status.signal()) {
        let stopped = children::stop_adopted(Duration::from_secs(2));
        errln!(
            "{NAME}: perf record was killed by signal {signal}; stopped the {} process(es) of \
             the command it left running",
            stopped.len()
        );
    }
    let end = take_snapshot("end");
    pairings.extend(end);
    let anchors = ClockAnchors {
        start,
        end,
        pairings,
    };
    Ok((status, anchors, held))
}

/// The watch that opens the dumps the recorded processes map while they live (a container's,
/// one its runtime removes: `perfclock_inject::held`): the command's tree under perf, the
/// pids' trees, or every process.
fn start_dump_watch(target: &Target<'_>, perf: u32) -> Option<Watch> {
    let scope = match target {
        Target::Command(_) => Scope::Trees(vec![perf]),
        Target::Pids(pids) => Scope::Trees(pids.to_vec()),
        Target::SystemWide => Scope::All,
    };
    match Watch::start(scope, vec![std::process::id(), perf]) {
        Ok(watch) => Some(watch),
        Err(error) => {
            errln!("{NAME}: warning: cannot watch for jitdumps while recording: {error}");
            None
        }
    }
}
