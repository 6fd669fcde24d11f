//! The server's run: one calibration per machine. Calibrates the perf clock in this process
//! (perfclock-calib's refiner, as a client would) and mirrors its conversion and bound into a
//! shared page (`perfclock_core::shared_page`) that every client maps read-only instead of
//! calibrating on its own. On a KVM guest read through paravirt mode it publishes the boot's
//! constant offset instead (`perfclock_core::published_offset`) and stops: nothing to refresh.
//! In kernel mode it publishes nothing.
//!
//! Two steps, so that the caller can install its stop signals between them: [`prepare`] (the
//! mode, the directory's lock, the paravirt offset, the page left by an earlier server) and
//! [`Server::run`] (the calibration, the page's claim, the poll loop until `stop`). What there is
//! to say on the way is handed to the caller as an [`Event`]; the caller prints it.
//!
//! # The page and the file ([`publisher`])
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
//! [`line`](crate::line) (a line that continues the one in the page); every poll refreshes the
//! heartbeat. It polls as often as the in-process refiner refines (every 5 ms while a young fit's
//! bound grows fast, by the cadence of the [`CalibrationOptions`] it is run with), at most every
//! [`POLL_INTERVAL`]. When `stop` is set the page stays; its heartbeat stops, so clients' bound
//! turns unknown after `STALE_AFTER_NS`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use perfclock::paravirt::{self, MeasuredOffset, OffsetSource};
use perfclock::shared_page::socket_path;
use perfclock::{Clock, Error, Withheld};
use perfclock_calib::published::{slope_of, Solution};
use perfclock_calib::{CalibStats, CalibratedClock, CalibrationOptions};
use perfclock_core::counter;
use perfclock_core::published_offset::{OffsetOrigin, PublishedOffset};
use perfclock_core::shared_page::{parse, SharedPageWriter, HEARTBEAT_INTERVAL_NS};
use perfclock_core::BootId;

use crate::line::{Publication, PublishedLine};
use crate::publisher::{self, LivePage, PageDir};
use crate::{PublishError, ServeError};

/// How often the server looks for a new in-process publication and refreshes the heartbeat
/// (at most [`HEARTBEAT_INTERVAL_NS`]).
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// A status event this often.
const STATUS_INTERVAL: Duration = Duration::from_secs(60);
/// Kernel-stamped brackets per record kind that cross-check the published offset (taken once).
const OFFSET_BRACKETS_PER_KIND: usize = 200;

const _: () = assert!(POLL_INTERVAL.as_nanos() <= HEARTBEAT_INTERVAL_NS as u128);

/// What the server has to say while it runs, in the order it happens; the caller prints it.
#[derive(Debug)]
pub enum Event<'a> {
    /// The kernel publishes the perf clock's conversion (`cap_user_time_zero=1`): every process
    /// reads it exactly and needs no server; nothing is published.
    KernelMode,
    /// The paravirt offset was published in `path`; clients read it once at init(): nothing to
    /// refresh, so the server stops.
    OffsetPublished {
        /// What was published.
        offset: &'a PublishedOffset,
        /// Where `C` was measured from.
        source: OffsetSource,
        /// The offset's file.
        path: &'a Path,
    },
    /// No paravirt offset could be published (the error says why): a calibration is served
    /// instead.
    NoOffset(&'a ServeError),
    /// Calibrated mode: why the kernel withholds the conversion.
    CalibratedMode(&'a Withheld),
    /// The in-process calibration started.
    Calibrated {
        /// How long it took.
        elapsed: Duration,
        /// Its bound then, ns.
        bound_ns: u64,
    },
    /// The page continues the conversion of the earlier server in `path`.
    Continuing {
        /// The page's file.
        path: &'a Path,
    },
    /// The page is served: clients map it through `socket` or read `path`.
    Serving {
        /// The page's file.
        path: &'a Path,
        /// The socket that hands the page to clients.
        socket: &'a Path,
    },
    /// The clock jumped: the refiner saw this many jumps, and the new line is published as it
    /// is.
    Jumped(u64),
    /// The in-process conversion could not be read (the error says why): the last publication
    /// stays.
    KeptLast(&'a ServeError),
    /// The page's file could not be refreshed; the page itself was.
    NotPersisted(&'a PublishError),
    /// Every minute while serving.
    Status {
        /// The page's bound now, ns (`u64::MAX` before a first publication).
        bound_ns: u64,
        /// What the refiner has done so far.
        stats: CalibStats,
    },
    /// `stop` was set: the page's file stays, its heartbeat stops.
    Stopping {
        /// The page's file.
        path: &'a Path,
    },
}

/// The page's directory, locked, with what an earlier server left in it: ready to
/// [`run`](Server::run).
#[derive(Debug)]
pub struct Server {
    path: PathBuf,
    dir_lock: PageDir,
    boot_id: BootId,
    existing: Option<(File, Vec<u8>)>,
    inherited: Option<Solution>,
}

/// Prepares a server on `path` (or the default location): `None` when there is nothing to
/// serve (kernel mode, or the paravirt offset was published); with `once`, publishes the
/// paravirt offset or fails.
///
/// # Errors
/// [`ServeError`] saying which step failed.
pub fn prepare(
    path: Option<PathBuf>,
    once: bool,
    mut report: impl FnMut(Event<'_>),
) -> Result<Option<Server>, ServeError> {
    let report: &mut dyn FnMut(Event<'_>) = &mut report;
    let Some(withheld) = kernel_withholds_time(report)? else {
        return Ok(None);
    };
    let path = page_path(path)?;
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_owned();
    let dir_lock = PageDir::lock(&dir).map_err(ServeError::Publish)?;
    let boot_id = boot_id()?;
    if published_paravirt_offset(&dir, boot_id, once, report)? {
        return Ok(None);
    }
    report(Event::CalibratedMode(&withheld));
    let existing = publisher::reuse_existing(&path).map_err(ServeError::Publish)?;
    let inherited = inherited_solution(
        existing.as_ref().map(|(_, bytes)| bytes.as_slice()),
        boot_id,
    );
    Ok(Some(Server {
        path,
        dir_lock,
        boot_id,
        existing,
        inherited,
    }))
}

impl Server {
    /// Calibrates in this process with `cadence` and serves the page until `stop` is set.
    ///
    /// # Errors
    /// [`ServeError`] saying which step failed.
    pub fn run(
        self,
        cadence: CalibrationOptions,
        stop: &AtomicBool,
        mut report: impl FnMut(Event<'_>),
    ) -> Result<(), ServeError> {
        let report: &mut dyn FnMut(Event<'_>) = &mut report;
        let Server {
            path,
            dir_lock,
            boot_id,
            existing,
            inherited,
        } = self;
        let mut calibration = start_calibration(inherited, cadence, report)?;
        let (page, file) = open_page(
            &mut calibration,
            existing,
            inherited,
            &path,
            boot_id,
            report,
        )?;
        let socket = socket_path(&path);
        page.seal()
            .and_then(|()| page.serve(&socket))
            .map_err(ServeError::Publish)?;
        report(Event::Serving {
            path: &path,
            socket: &socket,
        });
        poll_until_stopped(&mut calibration, &page, &file, &path, stop, report)?;
        report(Event::Stopping { path: &path });
        let _ = std::fs::remove_file(&socket);
        drop(dir_lock);
        Ok(())
    }
}

/// Why the kernel withholds the perf clock's conversion, or `None` in kernel mode.
fn kernel_withholds_time(
    report: &mut dyn FnMut(Event<'_>),
) -> Result<Option<Withheld>, ServeError> {
    match Clock::open_kernel_only() {
        Ok(_) => {
            report(Event::KernelMode);
            Ok(None)
        }
        Err(Error::KernelWithholdsTime(why)) => Ok(Some(why)),
        Err(other) => Err(ServeError::NoPerfClock(other)),
    }
}

/// `path`, or the default location.
fn page_path(path: Option<PathBuf>) -> Result<PathBuf, ServeError> {
    match path {
        Some(path) => Ok(path),
        None => perfclock::shared_page::default_server_path().ok_or(ServeError::NoDefaultPath),
    }
}

/// Publishes the paravirt offset in `dir` unless `PERFCLOCK_PARAVIRT=off`; `true` when it did
/// (nothing more to serve). Without `once`, an offset that cannot be published is reported and
/// a calibration is served instead.
fn published_paravirt_offset(
    dir: &Path,
    boot_id: BootId,
    once: bool,
    report: &mut dyn FnMut(Event<'_>),
) -> Result<bool, ServeError> {
    if paravirt::disabled_by_environment() {
        return if once {
            Err(ServeError::OnceWithParavirtOff)
        } else {
            Ok(false)
        };
    }
    match publish_paravirt_offset(dir, boot_id, report) {
        Ok(()) => Ok(true),
        Err(error) if once => Err(error),
        Err(error) => {
            report(Event::NoOffset(&error));
            Ok(false)
        }
    }
}

/// The line of a page an earlier server of this boot left, to continue.
fn inherited_solution(existing: Option<&[u8]>, boot_id: BootId) -> Option<Solution> {
    let snapshot = parse(existing?).ok()?;
    (snapshot.boot_id == boot_id).then_some(Solution {
        conversion: snapshot.conversion,
        bound: snapshot.bound,
    })
}

/// Calibrates in this process with `cadence`; the server starts from `inherited`, the line in
/// the page.
fn start_calibration(
    inherited: Option<Solution>,
    cadence: CalibrationOptions,
    report: &mut dyn FnMut(Event<'_>),
) -> Result<Calibration, ServeError> {
    let started = Instant::now();
    let clock = CalibratedClock::start(cadence.clone()).map_err(ServeError::Calibration)?;
    report(Event::Calibrated {
        elapsed: started.elapsed(),
        bound_ns: clock.error_bound_ns(),
    });
    let line = PublishedLine::new(inherited, clock.stats().jumps);
    Ok(Calibration {
        clock,
        line,
        cadence,
    })
}

/// The live page, claimed by this process with the first publication, and its file: the
/// earlier server's `existing` one (continued) or a new one at `path`.
fn open_page(
    calibration: &mut Calibration,
    existing: Option<(File, Vec<u8>)>,
    inherited: Option<Solution>,
    path: &Path,
    boot_id: BootId,
    report: &mut dyn FnMut(Event<'_>),
) -> Result<(LivePage, File), ServeError> {
    let target = calibration.target()?;
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
        calibration.publish(writer, target, now, report);
    });
    let file = match existing {
        Some((file, _)) => {
            page.persist(&file, path).map_err(ServeError::Publish)?;
            if inherited.is_some() {
                report(Event::Continuing { path });
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

/// Until `stop`, at every poll ([`Calibration::next_poll`]): publishes the in-process line,
/// refreshes the heartbeat and the file; a status event every [`STATUS_INTERVAL`].
fn poll_until_stopped(
    calibration: &mut Calibration,
    page: &LivePage,
    file: &File,
    path: &Path,
    stop: &AtomicBool,
    report: &mut dyn FnMut(Event<'_>),
) -> Result<(), ServeError> {
    let mut last_status = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(calibration.next_poll());
        let now = counter_now()?;
        match calibration.target() {
            Ok(target) => {
                page.with_writer(|writer| calibration.publish(writer, target, now, report));
            }
            Err(error) => report(Event::KeptLast(&error)),
        }
        if let Err(error) = page.persist(file, path) {
            report(Event::NotPersisted(&error));
        }
        if last_status.elapsed() >= STATUS_INTERVAL {
            last_status = Instant::now();
            let stats = calibration.clock.stats();
            let bound_ns = calibration
                .line
                .current()
                .map_or(u64::MAX, |sol| sol.bound.at(counter_now().unwrap_or(0)));
            report(Event::Status { bound_ns, stats });
        }
    }
    Ok(())
}

/// On a KVM guest read through paravirt mode: measures `C` (the kernel log, cross-checked
/// against brackets) and publishes it in `dir` (see `perfclock::shared_page::offset_system_path`).
/// `C` is fixed for the boot: there is nothing to refresh afterwards.
fn publish_paravirt_offset(
    dir: &Path,
    boot_id: BootId,
    report: &mut dyn FnMut(Event<'_>),
) -> Result<(), ServeError> {
    let measured =
        paravirt::measure_offset(OFFSET_BRACKETS_PER_KIND).map_err(ServeError::NoOffset)?;
    let offset = offset_to_publish(&measured, boot_id, std::process::id())?;
    let text = encoded(&offset)?;
    let path = dir.join(perfclock::shared_page::OFFSET_FILE_NAME);
    publisher::create_new(&path, text.as_bytes()).map_err(ServeError::Publish)?;
    report(Event::OffsetPublished {
        offset: &offset,
        source: measured.source,
        path: &path,
    });
    Ok(())
}

/// What is published of `measured`: only an offset from the kernel log or the brackets, and
/// only one a bracket intersection checked.
fn offset_to_publish(
    measured: &MeasuredOffset,
    boot_id: BootId,
    writer_pid: u32,
) -> Result<PublishedOffset, ServeError> {
    let origin = match measured.source {
        OffsetSource::KernelLog => OffsetOrigin::KernelLog,
        OffsetSource::Brackets => OffsetOrigin::Brackets,
        other => return Err(ServeError::OffsetFromUnpublished(other)),
    };
    let intersection = measured.intersection.ok_or(ServeError::OffsetUnchecked)?;
    Ok(PublishedOffset {
        boot_id,
        offset_ns: measured.offset_ns,
        origin,
        intersection_ns: (intersection.lo(), intersection.hi()),
        brackets: intersection.brackets(),
        writer_pid,
    })
}

/// The offset file's text.
fn encoded(offset: &PublishedOffset) -> Result<String, ServeError> {
    let mut text = String::new();
    offset
        .encode(&mut text)
        .map_err(|_| ServeError::OffsetFormat)?;
    Ok(text)
}

/// The in-process calibration and the line the page carries.
struct Calibration {
    clock: CalibratedClock,
    line: PublishedLine,
    /// The options the clock was started with: the poll follows the refiner's cadence.
    cadence: CalibrationOptions,
}

impl Calibration {
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
            self.cadence
                .pause_after(&sol.bound, ns_per_tick)
                .min(POLL_INTERVAL)
        })
    }

    /// Publishes `target` at counter value `now` (see [`line`](crate::line)).
    fn publish(
        &mut self,
        writer: &SharedPageWriter,
        target: Solution,
        now: u64,
        report: &mut dyn FnMut(Event<'_>),
    ) {
        let jumps = self.clock.stats().jumps;
        if let Publication::Jumped(seen) = self.line.publish(writer, target, jumps, now) {
            report(Event::Jumped(seen));
        }
    }
}

fn counter_now() -> Result<u64, ServeError> {
    counter::read_counter().ok_or(ServeError::NoCounter)
}

fn boot_id() -> Result<BootId, ServeError> {
    perfclock_os::time::boot_id().map_err(ServeError::BootId)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: BootId = BootId::from_words([0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);

    /// A page claimed in boot `BOOT`, its first line `line` published as the server does; the
    /// line the page carries.
    fn page_of(line: Solution) -> (Vec<u8>, Solution) {
        let page = LivePage::new(None).expect("a page");
        let now = line.bound.counter_ref;
        let mut published = PublishedLine::new(None, 0);
        let publication = page.with_writer(|writer| {
            writer.claim(BOOT, 1, now);
            published.publish(writer, line, 0, now)
        });
        assert_eq!(publication, Publication::First);
        let carried = published.current().expect("a line");
        (page.bytes().expect("the page's bytes"), carried)
    }

    #[test]
    fn a_page_of_this_boot_is_continued_another_boot_s_is_not() {
        let (bytes, carried) = page_of(crate::line::tests::line(1_000_000, 40, 5_000_000_000));
        assert_eq!(inherited_solution(Some(&bytes), BOOT), Some(carried));
        let other_boot = BootId::from_words([BOOT.words()[0], BOOT.words()[1] + 1]);
        assert_eq!(inherited_solution(Some(&bytes), other_boot), None);
        assert_eq!(inherited_solution(Some(b"not a page"), BOOT), None);
        assert_eq!(inherited_solution(None, BOOT), None);
    }

    #[test]
    fn the_published_offset_reads_back_as_written() {
        let offset = PublishedOffset {
            boot_id: BOOT,
            offset_ns: -1_234_567,
            origin: OffsetOrigin::KernelLog,
            intersection_ns: (-1_234_600, -1_234_500),
            brackets: 600,
            writer_pid: 42,
        };
        let text = encoded(&offset).expect("an encoding");
        assert_eq!(
            perfclock_core::published_offset::parse(text.as_bytes()),
            Ok(offset)
        );
    }

    #[test]
    fn an_unchecked_or_unpublishable_offset_is_refused() {
        let measured = |source| MeasuredOffset {
            offset_ns: 1_000,
            source,
            bound_ns: 0,
            intersection: None,
        };
        assert!(matches!(
            offset_to_publish(&measured(OffsetSource::KernelLog), BOOT, 42),
            Err(ServeError::OffsetUnchecked)
        ));
        assert!(matches!(
            offset_to_publish(&measured(OffsetSource::Published), BOOT, 42),
            Err(ServeError::OffsetFromUnpublished(OffsetSource::Published))
        ));
    }
}
