//! [`CalibratedClock`]: the handle of a calibrated perf-domain clock. A named background thread
//! ([`crate::calibration`](self)) brackets kernel-stamped records, fits them ([`crate::fit`]), and
//! publishes the result ([`crate::published`]) into a page of our own memory with the kernel's
//! seqlock protocol, so the facade reads it with the same [`PageReader`] as the kernel's page.
//!
//! # Lifecycle
//! [`CalibratedClock::start`] spawns the thread ([`THREAD_NAME`]), which opens its events (per
//! thread: the records are the calibration thread's own), collects brackets for the options'
//! init budget, fits, publishes, and reports back; `start` returns then. With refinement on,
//! the thread keeps going: every so often it brackets a small batch, checks it against what is
//! published (a batch that mostly falls outside the published bound is a clock jump: suspend,
//! host migration; the thread then starts over from scratch and counts it), adds it to a sliding
//! window of history (longer baseline, tighter slope), refits and republishes. The interval is
//! chosen so the published bound grows by at most the allowed growth between republishes.
//!
//! The thread blocks every signal for its whole life, so no signal handler ever runs on it while
//! it holds the page's sequence odd (a handler reading the clock there would spin). A process
//! that forks registers [`crate::fork_gate`]'s handlers (the facade does), so no fork copies the
//! page mid-update.
//!
//! # Safety
//! Unsafe code here builds the [`PageReader`] over the page and its mirror, two
//! `perfclock_os::Mapping`s that live until the last owner (the clock handle or the thread)
//! drops the shared state; only the thread writes them (through `PageWriter`), everyone else
//! reads them through atomics.
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use perfclock_core::page::PerfEventMmapPage;
use perfclock_core::{counter, PageReader};

use crate::calibration::run;
use crate::error::CalibError;
use crate::fork_gate;
use crate::kind::RecordKind;
use crate::options::CalibrationOptions;
use crate::published::{BoundCell, BoundModel, Solution};
use crate::shared::{OwnedPage, Shared};
use crate::source::{open_ground_truth, BracketSource, Probe};
use crate::stats::{AtomicStats, CalibStats};

/// Name of the background thread (at most 15 bytes, the kernel's limit).
pub const THREAD_NAME: &str = "perfclock-calib";

/// The refiner thread of the process the clock lives in.
#[derive(Debug)]
struct Refiner {
    /// Its handle. In a fork child it names the parent's thread, which does not exist there.
    thread: Option<JoinHandle<()>>,
    /// The fork generation ([`fork_gate::generation`]) that last tried to start one: one
    /// attempt per process, so a refiner that timed out (and may still be running) stays the
    /// page's only writer.
    attempted: u64,
}

/// A calibrated perf-domain clock with its own published page. See the module docs.
#[derive(Debug)]
pub struct CalibratedClock {
    shared: Arc<Shared>,
    /// `'static` only inside this clock, which keeps `shared` (the pages) alive; handed out
    /// borrowed from the clock ([`CalibratedClock::reader`]).
    reader: PageReader<'static>,
    /// Boxed: kept for a restart in a fork child, read there, by the bound check and by
    /// [`CalibratedClock::options`].
    options: Box<CalibrationOptions>,
    /// The fork generation of the process whose refiner keeps the page up to date. Anything
    /// else: this is a fork child's copy, published by no one (see
    /// [`CalibratedClock::error_bound_ns`]).
    refined_in: AtomicU64,
    refiner: Mutex<Refiner>,
}

/// What `start` and `resume_after_fork` hand the thread: how to open its bracket source.
type OpenProbe = Box<dyn FnOnce(&CalibrationOptions) -> Result<Probe, CalibError> + Send>;

/// Where the thread reports its first result.
type FirstResult = mpsc::Receiver<Result<(), CalibError>>;

/// Spawns the calibration thread over `shared`. Its first result arrives on the receiver.
fn spawn_thread(
    shared: &Arc<Shared>,
    options: CalibrationOptions,
    open_probe: OpenProbe,
    inherited: Option<Solution>,
) -> Result<(JoinHandle<()>, FirstResult), CalibError> {
    let (tx, rx) = mpsc::sync_channel::<Result<(), CalibError>>(1);
    let thread_shared = shared.clone();
    let spawned_at = Instant::now();
    let thread = std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .spawn(move || {
            run(
                thread_shared,
                options,
                open_probe,
                tx,
                spawned_at,
                inherited,
            )
        })
        .map_err(|e| CalibError::Spawn(e.kind()))?;
    Ok((thread, rx))
}

/// Waits at most `timeout` for the thread's first result.
fn first_result(rx: &FirstResult, timeout: Duration) -> Result<(), CalibError> {
    match rx.recv_timeout(timeout) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(CalibError::Timeout),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(CalibError::ThreadDied),
    }
}

/// Tells the thread to stop and lets it finish on its own, never waiting for it: a thread that
/// has not reported may be unable to finish (blocked on the dynamic loader's lock that a
/// `dlopen` in progress on the caller's thread holds, until the caller returns). It publishes
/// nothing more; the shared state lives until it lets go of it.
fn detach(shared: &Shared, thread: JoinHandle<()>) {
    shared.stop.store(true, Ordering::Relaxed);
    thread.thread().unpark();
    // Dropping the handle detaches the thread.
    drop(thread);
}

impl CalibratedClock {
    /// Calibrate against the kernel's records, publish the first result, and (with refinement
    /// on) keep refining in a background thread named [`THREAD_NAME`].
    ///
    /// # Errors
    /// [`CalibError`] if the options are invalid, the records cannot be had, the fit fails, or
    /// the thread cannot run.
    ///
    /// # Example
    /// ```no_run
    /// use perfclock_calib::{CalibratedClock, CalibrationOptions};
    ///
    /// let clock = CalibratedClock::start(CalibrationOptions::default())?;
    /// println!("{:?} +- {} ns", clock.reader().now_ns(), clock.error_bound_ns());
    /// # Ok::<(), perfclock_calib::CalibError>(())
    /// ```
    pub fn start(options: CalibrationOptions) -> Result<Self, CalibError> {
        Self::start_with(options, open_ground_truth)
    }

    /// As [`CalibratedClock::start`], with brackets from the source `open` returns. `open` runs
    /// on the calibration thread (perf events are per thread) with the options' record kinds
    /// (empty: every kind available). Tests use it to distort what the calibrator sees.
    ///
    /// # Errors
    /// As [`CalibratedClock::start`], and `open`'s error.
    pub fn start_with<S, F>(options: CalibrationOptions, open: F) -> Result<Self, CalibError>
    where
        S: BracketSource + 'static,
        F: FnOnce(&[RecordKind]) -> Result<S, CalibError> + Send + 'static,
    {
        options.validate()?;
        let shared = Arc::new(Shared {
            page: OwnedPage::new()?,
            bound: BoundCell::default(),
            stats: AtomicStats::default(),
            stop: AtomicBool::new(false),
        });
        // SAFETY: the pages are page-aligned, distinct, live as long as `shared`, which the
        // reader's owner (this clock) keeps, and are only written by the thread.
        let reader = unsafe { PageReader::new_mirrored(shared.page.page(), shared.page.mirror()) };
        let timeout = options.start_timeout;
        let open_probe: OpenProbe = Box::new(move |options: &CalibrationOptions| {
            let source = open(&options.kinds)?;
            Ok(Probe::new(Box::new(source)))
        });
        let generation = fork_gate::generation();
        let (thread, rx) = spawn_thread(&shared, options.clone(), open_probe, None)?;
        match first_result(&rx, timeout) {
            Ok(()) => {
                // A clock that does not refine has a thread that ends right after reporting: wait
                // for it, so that the process is single-threaded again when `start` returns (a
                // raw `clone` or `vfork` then copies no thread in the middle of `free`).
                let thread = if options.refine {
                    Some(thread)
                } else {
                    // A panic on the thread has already been reported; nothing to add here.
                    let _ = thread.join();
                    None
                };
                Ok(Self {
                    shared,
                    reader,
                    options: Box::new(options),
                    refined_in: AtomicU64::new(generation),
                    refiner: Mutex::new(Refiner {
                        thread,
                        attempted: generation,
                    }),
                })
            }
            Err(error) => {
                detach(&shared, thread);
                Err(error)
            }
        }
    }

    /// In a fork child, starts the refiner again over the publication the child inherited
    /// (`fork` copies the page but not the thread; without it the child's clock is frozen:
    /// its bound grows, and a clock jump such as a restored VM snapshot goes unnoticed). The
    /// new thread first checks fresh brackets against the inherited conversion (a jump makes it
    /// start over), then calibrates and publishes without stepping the clock back, waiting for
    /// that as [`CalibratedClock::start`] does. Returns whether it started a refiner: `false`
    /// where one already runs (the process that started the clock, or a child that resumed),
    /// for a clock that does not refine, or while another thread of this process is resuming.
    ///
    /// One attempt per process: after a failure the clock stays as inherited, and its bound
    /// becomes unknown once the parent's jump-detection latency has passed (see
    /// [`CalibratedClock::error_bound_ns`]). Forks are counted by [`fork_gate::child`], so a
    /// child made without the `pthread_atfork` handlers (a raw `clone`) is not recognised.
    /// The new thread opens the kernel's records ([`open_ground_truth`]), whatever source
    /// [`CalibratedClock::start_with`] was given.
    ///
    /// # Errors
    /// As [`CalibratedClock::start`] (thread, records, fit, [`CalibError::Timeout`]).
    pub fn resume_after_fork(&self) -> Result<bool, CalibError> {
        let generation = fork_gate::generation();
        if !self.options.refine || self.refined_in.load(Ordering::Acquire) == generation {
            return Ok(false);
        }
        // try_lock: in a fork child, a lock a vanished parent thread held stays held.
        let mut refiner = match self.refiner.try_lock() {
            Ok(refiner) => refiner,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(false),
        };
        if refiner.attempted == generation {
            return Ok(false);
        }
        refiner.attempted = generation;
        // The handle names a thread of another process: joining it would wait for ever and
        // detaching it would write into that thread's descriptor. Forget it.
        if let Some(parent) = refiner.thread.take() {
            std::mem::forget(parent);
        }
        let inherited = self.reader.conversion().ok().map(|conversion| Solution {
            conversion,
            bound: self.shared.bound.load(),
        });
        let open_probe: OpenProbe = Box::new(|options: &CalibrationOptions| {
            let source = open_ground_truth(&options.kinds)?;
            Ok(Probe::new(Box::new(source)))
        });
        let (thread, rx) =
            spawn_thread(&self.shared, (*self.options).clone(), open_probe, inherited)?;
        match first_result(&rx, self.options.start_timeout) {
            Ok(()) => {
                refiner.thread = Some(thread);
                self.refined_in.store(generation, Ordering::Release);
                Ok(true)
            }
            Err(error) => {
                detach(&self.shared, thread);
                Err(error)
            }
        }
    }

    /// The primary page readers use (valid as long as this clock lives); read it together with
    /// its mirror through [`CalibratedClock::reader`].
    pub fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.shared.page.page()
    }

    /// A reader of [`CalibratedClock::page`], borrowed from the clock that keeps it mapped.
    /// ```compile_fail,E0716
    /// use perfclock_calib::{CalibratedClock, CalibrationOptions};
    /// let reader = CalibratedClock::start(CalibrationOptions::default())?.reader();
    /// let _ = reader.now_ns(); // the clock, and its pages, are gone
    /// # Ok::<(), perfclock_calib::CalibError>(())
    /// ```
    pub fn reader(&self) -> PageReader<'_> {
        self.reader
    }

    /// The current error bound: how far the published conversion can be from the kernel's perf
    /// clock at the counter value read now (see [`crate::published`] for the definition).
    /// `u64::MAX` when unknown. Lock-free, syscall-free. Async-signal-safe.
    ///
    /// In a fork child whose refiner has not been started again
    /// ([`CalibratedClock::resume_after_fork`]), nothing would notice a clock jump (a restored
    /// VM snapshot, a host migration), so the bound is claimed only for as long as the parent's
    /// refiner would have taken to notice one (the longest refinement pause,
    /// [`CalibrationOptions::refine_interval`]) after the last publication the child inherited;
    /// after that it is `u64::MAX`.
    pub fn error_bound_ns(&self) -> u64 {
        match counter::read_counter() {
            Some(now) => self.error_bound_at(now),
            None => u64::MAX,
        }
    }

    /// The error bound at counter value `counter` (see [`CalibratedClock::error_bound_ns`]).
    pub fn error_bound_at(&self, counter: u64) -> u64 {
        let bound = self.shared.bound.load();
        if self.unrefined_here() && !self.within_jump_latency(&bound, counter) {
            return u64::MAX;
        }
        bound.at(counter)
    }

    /// Whether this is a fork child's copy of a refining clock whose refiner has not been
    /// started again here.
    fn unrefined_here(&self) -> bool {
        self.options.refine && self.refined_in.load(Ordering::Acquire) != fork_gate::generation()
    }

    /// Whether `counter` is within the longest refinement pause after the publication `bound`
    /// belongs to: as long as a refiner would have taken to notice a jump.
    fn within_jump_latency(&self, bound: &BoundModel, counter: u64) -> bool {
        let Ok(conversion) = self.reader.conversion() else {
            return false;
        };
        let since_ns = conversion
            .cycles_to_ns(counter)
            .saturating_sub(conversion.cycles_to_ns(bound.counter_ref));
        u128::from(since_ns) <= self.options.max_refine_interval.as_nanos()
    }

    /// The bound model currently published.
    pub fn bound_model(&self) -> BoundModel {
        self.shared.bound.load()
    }

    /// The options the clock was started with.
    pub fn options(&self) -> &CalibrationOptions {
        &self.options
    }

    /// What the calibrator has done so far.
    pub fn stats(&self) -> CalibStats {
        self.shared.stats.snapshot()
    }

    /// Stop the background thread and wait for it to end (the last published conversion stays
    /// readable). The thread has reported its first calibration by then (or was detached), so it
    /// only has a refinement round (bounded by `refine_batch`) to finish. In a fork child that
    /// did not start a refiner again there is none to stop: the handle names the parent's thread,
    /// and is forgotten.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let here = self.refined_in.load(Ordering::Acquire) == fork_gate::generation();
        let refiner = self
            .refiner
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = refiner.thread.take() {
            if here {
                t.thread().unpark();
                // A panic on the thread has already been reported; nothing to add here.
                let _ = t.join();
            } else {
                std::mem::forget(t);
            }
        }
    }
}

impl Drop for CalibratedClock {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn refinement_republishes_and_tightens_the_slope() {
        let clock = CalibratedClock::start(CalibrationOptions::default()).expect("calibration");
        let first = clock.bound_model();
        std::thread::sleep(Duration::from_millis(400));
        let st = clock.stats();
        assert!(st.refinements >= 3, "{st:?}");
        assert_eq!(st.jumps, 0, "{st:?}");
        assert!(
            clock.bound_model().growth_q48 < first.growth_q48,
            "{:?} vs {first:?}",
            clock.bound_model()
        );
        assert!(st.thread_tid != 0 && st.thread_cpu_ns > 0, "{st:?}");
    }

    #[test]
    fn start_gives_up_at_its_timeout_without_waiting_for_a_stuck_thread() {
        let (release, released) = mpsc::channel::<()>();
        let options = CalibrationOptions::default()
            .init_budget(Duration::from_millis(20))
            .start_timeout(Duration::from_millis(50));
        let result = CalibratedClock::start_with(options, move |kinds| {
            // Stands for a thread that cannot go on until `start` returns (blocked on the loader's
            // lock that a dlopen in progress on the caller's thread holds). The bounded wait only
            // keeps a broken `start` (one that joins) from hanging the test.
            let _ = released.recv_timeout(Duration::from_secs(30));
            open_ground_truth(kinds)
        });
        // A `start` that waited for the thread returns only after the receiver above is gone.
        assert!(
            release.send(()).is_ok(),
            "start waited for the calibration thread"
        );
        assert_eq!(result.err(), Some(CalibError::Timeout));
    }

    #[test]
    fn invalid_options_fail_before_a_thread_runs() {
        let error = CalibratedClock::start(CalibrationOptions::default().refine_batch(0))
            .expect_err("invalid options");
        assert!(matches!(
            error,
            CalibError::InvalidOptions {
                setting: "refine_batch",
                ..
            }
        ));
    }
}
