//! `perfclock serve`: one calibration per machine, served in a shared page that every client
//! maps read-only instead of calibrating on its own; on a KVM guest read through paravirt mode,
//! the boot's constant offset instead. The server is `perfclock_serve::server`; this module is
//! the command around it: flags, signals, what is printed.
//!
//! ```text
//! perfclock serve [--path P] [--once]
//! ```
//! Foreground, logs to stderr, stops on SIGINT/SIGTERM (the page stays; its heartbeat stops, so
//! clients' bound turns unknown after `STALE_AFTER_NS`). In kernel mode it says so and exits.
//! `--once` publishes the paravirt offset and exits (an error where there is none to publish).
//! SIGINT and SIGTERM set a flag through signal-hook, installed once the server is about to
//! calibrate.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use perfclock_calib::CalibrationOptions;
use perfclock_serve::server::{self, Event};
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::error::ServeError;
use crate::output::chain;
use crate::output::errln;

const NAME: &str = "perfclock serve";

/// Runs the server on `path` (or the default location) until SIGINT or SIGTERM; with `once`,
/// publishes the paravirt offset and exits.
pub(crate) fn run(path: Option<PathBuf>, once: bool) -> ExitCode {
    match serve(path, once) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            errln!("{NAME}: error: {}", chain(&error));
            ExitCode::FAILURE
        }
    }
}

fn serve(path: Option<PathBuf>, once: bool) -> Result<(), ServeError> {
    let Some(server) = server::prepare(path, once, print)? else {
        return Ok(());
    };
    let stop = stop_on_signals()?;
    server.run(CalibrationOptions::default(), &stop, print)?;
    Ok(())
}

/// Says on stderr what the server has to say.
fn print(event: Event<'_>) {
    match event {
        Event::KernelMode => errln!(
            "{NAME}: kernel mode: the kernel publishes the perf clock's conversion \
             (cap_user_time_zero=1), so every process reads it exactly and needs no server; \
             publishing nothing"
        ),
        Event::OffsetPublished {
            offset,
            source,
            path,
        } => errln!(
            "{NAME}: paravirt mode: published C = {} ns ({}, inside the intersection [{}, {}] ns \
             of {} kernel-stamped brackets) in {}; clients read it once at init(): nothing to \
             refresh, exiting",
            offset.offset_ns,
            source,
            offset.intersection_ns.0,
            offset.intersection_ns.1,
            offset.brackets,
            path.display()
        ),
        Event::NoOffset(error) => {
            errln!("{NAME}: {}; serving a calibration instead", chain(error));
        }
        Event::CalibratedMode(withheld) => errln!("{NAME}: calibrated mode: {withheld}"),
        Event::Calibrated { elapsed, bound_ns } => errln!(
            "{NAME}: calibrated in {:.1} ms, bound {bound_ns} ns",
            elapsed.as_secs_f64() * 1e3
        ),
        Event::Continuing { path } => errln!(
            "{NAME}: continuing the conversion of the earlier server in {}",
            path.display()
        ),
        Event::Serving { path, socket } => errln!(
            "{NAME}: serving (pid {}) {} through {}; clients read it through \
             PERFCLOCK_SHARED_PAGE={} or the default location; SIGINT/SIGTERM stops",
            std::process::id(),
            path.display(),
            socket.display(),
            path.display()
        ),
        Event::Jumped(seen) => errln!(
            "{NAME}: the clock jumped (the refiner saw {seen} jumps); published the new line as \
             it is"
        ),
        Event::KeptLast(error) => {
            errln!("{NAME}: {}; keeping the last publication", chain(error));
        }
        Event::NotPersisted(error) => errln!("{NAME}: {}", chain(error)),
        Event::Status { bound_ns, stats } => errln!(
            "{NAME}: bound {bound_ns} ns, {} refinements, {} jumps, refiner CPU {:.1} ms",
            stats.refinements,
            stats.jumps,
            stats.thread_cpu_ns as f64 / 1e6
        ),
        Event::Stopping { path } => errln!(
            "{NAME}: stopping; {} stays, its heartbeat stops, so clients report an unknown bound \
             after {} s until a server runs again",
            path.display(),
            perfclock_core::shared_page::STALE_AFTER_NS / 1_000_000_000
        ),
    }
}

/// A flag SIGINT and SIGTERM set (the handler stores to it and does nothing else).
fn stop_on_signals() -> Result<Arc<AtomicBool>, ServeError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).map_err(ServeError::Signals)?;
    }
    Ok(stop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock::Error;
    use perfclock_os::{Op, SysError};
    use perfclock_testutil::error_chain::assert_each_cause_once;

    /// The server's error through the command's: its message and each cause once.
    #[test]
    fn serve_errors_print_each_cause_once() {
        let refused = SysError::new(Op::PerfEventOpen, libc::EACCES);
        let error = ServeError::Server(perfclock_serve::ServeError::NoPerfClock(Error::PerfEvent(
            refused,
        )));
        let printed = assert_each_cause_once(&error);
        assert!(printed.starts_with("no perf clock"), "{printed}");
        assert!(printed.contains("perf_event_paranoid"), "{printed}");
    }
}
