//! `perfclock serve`: one calibration per machine. Calibrates the perf clock in this process
//! (perfclock-calib's refiner, as a client would) and mirrors its conversion and bound into a
//! shared page (`perfclock_core::shared_page`) that every client maps read-only instead of
//! calibrating on its own. On a KVM guest read through paravirt mode it publishes the boot's
//! constant offset instead (`perfclock_core::published_offset`) and exits: nothing to refresh.
//!
//! ```text
//! perfclock serve [--path P] [--once]
//! ```
//! Foreground, logs to stderr, stops on SIGINT/SIGTERM (the page stays; its heartbeat stops, so
//! clients' bound turns unknown after `STALE_AFTER_NS`). In kernel mode it says so and exits.
//! `--once` publishes the paravirt offset and exits (an error where there is none to publish).
//!
//! # The page and the file (`perfclock_serve::publisher`)
//! The page lives in a memfd sealed against shrinking, growing and other writers
//! (`perfclock_os::memfd`), mapped writable by this process alone; a thread hands its
//! descriptor to every client that connects to the socket `P.sock`, and clients map it
//! read-only: no truncation can fault them. The file `P` holds a copy, written with `pwrite`
//! every poll (never mapped: nothing done to it can fault the server either), for the trust
//! checks clients make and for a server started later to continue the conversion.
//!
//! Default [`perfclock::shared_page::SYSTEM_PATH`] as root, `$XDG_RUNTIME_DIR/perfclock/clock`
//! otherwise. Its directory is created with mode 0755 if missing and must be a real directory
//! owned by this user and writable by no one else (so nobody else can put a file there). A new
//! file is written complete under a temporary name (`O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0644,
//! `write` and `fsync`: a full file system is an error, never a fault) and renamed into place; a
//! page left by an earlier server of this user is continued (never stepped back); a file there
//! that is not a perfclock page is an error, never overwritten. One server per directory: it
//! holds an exclusive `flock` on the directory.
//!
//! # What is published
//! At every poll the server takes the in-process conversion and bound and publishes them through
//! `perfclock_serve::line` (a line that continues the one in the page); every poll refreshes the
//! heartbeat. It polls as often as the in-process refiner refines (every 5 ms while a young fit's
//! bound grows fast), at most every [`POLL_INTERVAL`].
//!
//! The page, its file, its socket and its directory are `perfclock_serve::publisher`'s; this
//! module is the command around them: modes, the poll loop, logging. SIGINT and SIGTERM set a
//! flag through signal-hook.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perfclock::paravirt::{self, OffsetSource};
use perfclock::shared_page::socket_path;
use perfclock::{Clock, Error, Withheld};
use perfclock_calib::published::{slope_of, Solution};
use perfclock_calib::{CalibratedClock, CalibrationOptions};
use perfclock_core::counter;
use perfclock_core::published_offset::{OffsetOrigin, PublishedOffset};
use perfclock_core::shared_page::{parse, SharedPageWriter, HEARTBEAT_INTERVAL_NS};
use perfclock_serve::line::{Publication, PublishedLine};
use perfclock_serve::publisher::{self, LivePage, PageDir};
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::error::ServeError;
use crate::output::chain;
use crate::output::errln;

const NAME: &str = "perfclock serve";
/// How often the server looks for a new in-process publication and refreshes the heartbeat
/// (at most [`HEARTBEAT_INTERVAL_NS`]).
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// A status line this often.
const STATUS_INTERVAL: Duration = Duration::from_secs(60);

const _: () = assert!(POLL_INTERVAL.as_nanos() <= HEARTBEAT_INTERVAL_NS as u128);

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
    let Some(withheld) = kernel_withholds_time()? else {
        return Ok(());
    };
    let path = page_path(path)?;
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_owned();
    let dir_lock = PageDir::lock(&dir).map_err(ServeError::Publish)?;
    let boot_id = boot_id()?;
    if published_paravirt_offset(&dir, boot_id, once)? {
        return Ok(());
    }
    errln!("{NAME}: calibrated mode: {withheld}");
    let existing = publisher::reuse_existing(&path).map_err(ServeError::Publish)?;
    let inherited = inherited_solution(
        existing.as_ref().map(|(_, bytes)| bytes.as_slice()),
        boot_id,
    );
    let stop = stop_on_signals()?;
    let mut server = start_calibration(inherited)?;
    let (page, file) = open_page(&mut server, existing, inherited, &path, boot_id)?;
    let socket = socket_path(&path);
    page.seal()
        .and_then(|()| page.serve(&socket))
        .map_err(ServeError::Publish)?;
    errln!(
        "{NAME}: serving (pid {}) {} through {}; clients read it through \
         PERFCLOCK_SHARED_PAGE={} or the default location; SIGINT/SIGTERM stops",
        std::process::id(),
        path.display(),
        socket.display(),
        path.display()
    );
    poll_until_stopped(&mut server, &page, &file, &path, &stop)?;
    errln!(
        "{NAME}: stopping; {} stays, its heartbeat stops, so clients report an unknown bound \
         after {} s until a server runs again",
        path.display(),
        perfclock_core::shared_page::STALE_AFTER_NS / 1_000_000_000
    );
    let _ = std::fs::remove_file(&socket);
    drop(dir_lock);
    Ok(())
}

/// Why the kernel withholds the perf clock's conversion, or `None` in kernel mode (said on
/// stderr: every process reads the clock exactly and needs no server).
fn kernel_withholds_time() -> Result<Option<Withheld>, ServeError> {
    match Clock::open_kernel_only() {
        Ok(_) => {
            errln!(
                "{NAME}: kernel mode: the kernel publishes the perf clock's conversion \
                 (cap_user_time_zero=1), so every process reads it exactly and needs no server; \
                 publishing nothing"
            );
            Ok(None)
        }
        Err(Error::KernelWithholdsTime(why)) => Ok(Some(why)),
        Err(other) => Err(ServeError::NoPerfClock(other)),
    }
}

/// `--path`, or the default location.
fn page_path(path: Option<PathBuf>) -> Result<PathBuf, ServeError> {
    match path {
        Some(path) => Ok(path),
        None => perfclock::shared_page::default_server_path().ok_or(ServeError::NoDefaultPath),
    }
}

/// Publishes the paravirt offset in `dir` unless `PERFCLOCK_PARAVIRT=off`; `true` when it did
/// (nothing more to serve). Without `once`, an offset that cannot be published is said on
/// stderr and a calibration is served instead.
fn published_paravirt_offset(
    dir: &Path,
    boot_id: [u64; 2],
    once: bool,
) -> Result<bool, ServeError> {
    if paravirt::disabled_by_environment() {
        return if once {
            Err(ServeError::OnceWithParavirtOff)
        } else {
            Ok(false)
        };
    }
    match publish_paravirt_offset(dir, boot_id) {
        Ok(()) => Ok(true),
        Err(error) if once => Err(error),
        Err(error) => {
            errln!("{NAME}: {}; serving a calibration instead", chain(&error));
            Ok(false)
        }
    }
}

/// The line of a page an earlier server of this boot left, to continue.
fn inherited_solution(existing: Option<&[u8]>, boot_id: [u64; 2]) -> Option<Solution> {
    let snapshot = parse(existing?).ok()?;
    (snapshot.boot_id == boot_id).then_some(Solution {
        conversion: snapshot.conversion,
        bound: snapshot.bound,
    })
}

/// Calibrates in this process; the server starts from `inherited`, the line in the page.
fn start_calibration(inherited: Option<Solution>) -> Result<Server, ServeError> {
    let started = Instant::now();
    let clock =
        CalibratedClock::start(CalibrationOptions::default()).map_err(ServeError::Calibration)?;
    errln!(
        "{NAME}: calibrated in {:.1} ms, bound {} ns",
        started.elapsed().as_secs_f64() * 1e3,
        clock.error_bound_ns()
    );
    let line = PublishedLine::new(inherited, clock.stats().jumps);
    Ok(Server { clock, line })
}

/// The live page, claimed by this process with the first publication, and its file: the
/// earlier server's `existing` one (continued) or a new one at `path`.
fn open_page(
    server: &mut Server,
    existing: Option<(File, Vec<u8>)>,
    inherited: Option<Solution>,
    path: &Path,
    boot_id: [u64; 2],
) -> Result<(LivePage, File), ServeError> {
    let target = server.target()?;
    let now = counter_now()?;
    let page = LivePage::new(existing.as_ref().map(|(_, bytes)| bytes.as_slice()))
        .map_err(ServeError::Publish)?;
    page.with_writer(|writer| {
        writer.claim(boot_id, std::process::id(), now);
        if let Some(old) = inherited {
            // The same line again, so that every lock word of the page moves past the earlier
            // server's: its clients then move over to this page (perfclock::shared_page).
            writer.publish(&old.conversion);
        }
        server.publish(writer, target, now);
    });
    let file = match existing {
        Some((file, _)) => {
            page.persist(&file, path).map_err(ServeError::Publish)?;
            if inherited.is_some() {
                errln!(
                    "{NAME}: continuing the conversion of the earlier server in {}",
                    path.display()
                );
            }
            file
        }
        None => page
            .bytes()
            .and_then(|bytes| publisher::create_new(path, &bytes))
            .map_err(ServeError::Publish)?,
    };
    Ok((page, file))
}

/// Until SIGINT/SIGTERM, at every poll ([`Server::next_poll`]): publishes the in-process line,
/// refreshes the heartbeat and the file; a status line every [`STATUS_INTERVAL`].
fn poll_until_stopped(
    server: &mut Server,
    page: &LivePage,
    file: &File,
    path: &Path,
    stop: &AtomicBool,
) -> Result<(), ServeError> {
    let mut last_status = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(server.next_poll());
        let now = counter_now()?;
        match server.target() {
            Ok(target) => page.with_writer(|writer| server.publish(writer, target, now)),
            Err(error) => errln!("{NAME}: {}; keeping the last publication", chain(&error)),
        }
        if let Err(error) = page.persist(file, path) {
            errln!("{NAME}: {}", chain(&error));
        }
        if last_status.elapsed() >= STATUS_INTERVAL {
            last_status = Instant::now();
            let stats = server.clock.stats();
            errln!(
                "{NAME}: bound {} ns, {} refinements, {} jumps, refiner CPU {:.1} ms",
                server
                    .line
                    .current()
                    .map_or(u64::MAX, |sol| sol.bound.at(counter_now().unwrap_or(0))),
                stats.refinements,
                stats.jumps,
                stats.thread_cpu_ns as f64 / 1e6
            );
        }
    }
    Ok(())
}

/// Kernel-stamped brackets per record kind that cross-check the published offset (taken once).
const OFFSET_BRACKETS_PER_KIND: usize = 200;

/// On a KVM guest read through paravirt mode: measures `C` (the kernel log, cross-checked
/// against brackets) and publishes it in `dir` (see `perfclock::shared_page::offset_system_path`).
/// `C` is fixed for the boot: there is nothing to refresh afterwards.
fn publish_paravirt_offset(dir: &Path, boot_id: [u64; 2]) -> Result<(), ServeError> {
    let measured =
        paravirt::measure_offset(OFFSET_BRACKETS_PER_KIND).map_err(ServeError::NoOffset)?;
    let origin = match measured.source {
        OffsetSource::KernelLog => OffsetOrigin::KernelLog,
        OffsetSource::Brackets => OffsetOrigin::Brackets,
        other => return Err(ServeError::OffsetFromUnpublished(other)),
    };
    let intersection = measured.intersection.ok_or(ServeError::OffsetUnchecked)?;
    let offset = PublishedOffset {
        boot_id,
        offset_ns: measured.offset_ns,
        origin,
        intersection_ns: (intersection.lo(), intersection.hi()),
        brackets: intersection.brackets(),
        writer_pid: std::process::id(),
    };
    let mut text = String::new();
    offset
        .encode(&mut text)
        .map_err(|_| ServeError::OffsetFormat)?;
    let path = dir.join(perfclock::shared_page::OFFSET_FILE_NAME);
    publisher::create_new(&path, text.as_bytes()).map_err(ServeError::Publish)?;
    errln!(
        "{NAME}: paravirt mode: published C = {} ns ({}, inside the intersection [{}, {}] ns of \
         {} kernel-stamped brackets) in {}; clients read it once at init(): nothing to refresh, \
         exiting",
        offset.offset_ns,
        measured.source,
        offset.intersection_ns.0,
        offset.intersection_ns.1,
        offset.brackets,
        path.display()
    );
    Ok(())
}

struct Server {
    clock: CalibratedClock,
    line: PublishedLine,
}

impl Server {
    /// The in-process conversion and the bound that belongs to it (re-read if the refiner
    /// republished in between).
    fn target(&self) -> Result<Solution, ServeError> {
        for _ in 0..100 {
            let bound = self.clock.bound_model();
            let conversion = self.clock.reader().conversion();
            if self.clock.bound_model() == bound {
                let conversion = conversion.map_err(ServeError::PageUnreadable)?;
                return Ok(Solution { conversion, bound });
            }
        }
        Err(ServeError::KeptRepublishing)
    }

    /// The pause before the next poll: until the page's bound has grown by what the refiner
    /// allows between its own refinements (a young fit's bound grows by tens of ns per ms), at
    /// most [`POLL_INTERVAL`].
    fn next_poll(&self) -> Duration {
        self.line.current().map_or(POLL_INTERVAL, |sol| {
            let ns_per_tick = slope_of(&sol.conversion);
            self.clock
                .options()
                .pause_after(&sol.bound, ns_per_tick)
                .min(POLL_INTERVAL)
        })
    }

    /// Publishes `target` at counter value `now` (see `perfclock_serve::line`).
    fn publish(&mut self, writer: &SharedPageWriter, target: Solution, now: u64) {
        let jumps = self.clock.stats().jumps;
        if let Publication::Jumped(seen) = self.line.publish(writer, target, jumps, now) {
            errln!(
                "{NAME}: the clock jumped (the refiner saw {seen} jumps); published the new \
                 line as it is"
            );
        }
    }
}

fn counter_now() -> Result<u64, ServeError> {
    counter::read_counter().ok_or(ServeError::NoCounter)
}

fn boot_id() -> Result<[u64; 2], ServeError> {
    perfclock_os::time::boot_id().map_err(ServeError::BootId)
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
    use perfclock::ReadError;
    use perfclock_calib::CalibError;
    use perfclock_core::ParamError;
    use perfclock_os::{Op, SysError};
    use perfclock_testutil::error_chain::assert_each_cause_once;

    /// What failed, then each cause once, down to the errno and its knob.
    #[test]
    fn serve_errors_print_each_cause_once() {
        let refused = || SysError::new(Op::PerfEventOpen, libc::EACCES);
        for error in [
            ServeError::NoPerfClock(Error::PerfEvent(refused())),
            ServeError::Calibration(CalibError::Open(refused())),
        ] {
            let printed = assert_each_cause_once(&error);
            assert!(printed.contains("Permission denied"), "{printed}");
            assert!(printed.contains("perf_event_paranoid"), "{printed}");
        }
        let unreadable =
            ServeError::PageUnreadable(ReadError::InvalidParameters(ParamError::ZeroMultiplier));
        let printed = assert_each_cause_once(&unreadable);
        assert!(printed.ends_with("time_mult is 0"), "{printed}");
    }
}
