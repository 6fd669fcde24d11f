//! [`CalibratedClock`]: the handle of a calibrated perf-domain clock. A named background thread
//! ([`crate::thread`](self)) brackets kernel-stamped records, fits them ([`crate::fit`]), and
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
//! The page is a `Box<PerfEventMmapPage>` turned into a raw pointer, freed when the last owner
//! (the clock handle or the thread) drops the shared state; only the thread writes it (through
//! `PageWriter`) and everyone else reads it through atomics ([`PageReader`]).
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant;

use perfclock_core::{counter, PageReader, PerfEventMmapPage};

use crate::error::CalibError;
use crate::ground_truth::RecordKind;
use crate::options::CalibrationOptions;
use crate::published::{BoundCell, BoundModel};
use crate::source::{open_ground_truth, BracketSource, Probe};
use crate::stats::{AtomicStats, CalibStats};
use crate::thread::run;

/// Name of the background thread (at most 15 bytes, the kernel's limit).
pub const THREAD_NAME: &str = "perfclock-calib";

/// The published page and its mirror (see `PageWriter::new_mirrored`): the writer finishes the
/// mirror before it touches the page, so a writer preempted mid-update never blocks readers.
/// Owns both allocations.
#[derive(Debug)]
pub(crate) struct OwnedPage {
    pub(crate) page: NonNull<PerfEventMmapPage>,
    pub(crate) mirror: NonNull<PerfEventMmapPage>,
}

impl OwnedPage {
    fn new() -> Self {
        let leak = || NonNull::from(Box::leak(Box::new(PerfEventMmapPage::zeroed())));
        Self {
            page: leak(),
            mirror: leak(),
        }
    }
}

impl Drop for OwnedPage {
    fn drop(&mut self) {
        // SAFETY: both pointers came from Box::leak in new() and are freed only here, once;
        // every reader and the writer hold the Arc that owns this value, so none outlives it.
        unsafe {
            drop(Box::from_raw(self.page.as_ptr()));
            drop(Box::from_raw(self.mirror.as_ptr()));
        }
    }
}

// SAFETY: the page is only accessed through atomics (PageReader/PageWriter), so sharing the
// pointer between threads is sound.
unsafe impl Send for OwnedPage {}
// SAFETY: as above.
unsafe impl Sync for OwnedPage {}

/// What the handle and the thread share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) page: OwnedPage,
    pub(crate) bound: BoundCell,
    pub(crate) stats: AtomicStats,
    pub(crate) stop: AtomicBool,
}

/// A calibrated perf-domain clock with its own published page. See the module docs.
#[derive(Debug)]
pub struct CalibratedClock {
    shared: Arc<Shared>,
    reader: PageReader,
    thread: Option<JoinHandle<()>>,
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
            page: OwnedPage::new(),
            bound: BoundCell::default(),
            stats: AtomicStats::default(),
            stop: AtomicBool::new(false),
        });
        // SAFETY: the pages are 8-aligned (Boxes of an 8-aligned type), distinct, live as long as
        // `shared`, which the reader's owner (this clock) keeps, and are only written by the thread.
        let reader = unsafe { PageReader::new_mirrored(shared.page.page, shared.page.mirror) };
        let (tx, rx) = mpsc::sync_channel::<Result<(), CalibError>>(1);
        let thread_shared = shared.clone();
        let spawned_at = Instant::now();
        let timeout = options.start_timeout;
        let open_probe = move |options: &CalibrationOptions| {
            let source = open(&options.kinds)?;
            Ok(Probe::new(Box::new(source)))
        };
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || run(thread_shared, options, open_probe, tx, spawned_at))
            .map_err(|e| CalibError::Spawn(e.kind()))?;
        let mut clock = Self {
            shared,
            reader,
            thread: Some(thread),
        };
        let error = match rx.recv_timeout(timeout) {
            Ok(Ok(())) => return Ok(clock),
            Ok(Err(e)) => e,
            Err(mpsc::RecvTimeoutError::Timeout) => CalibError::Timeout,
            Err(mpsc::RecvTimeoutError::Disconnected) => CalibError::ThreadDied,
        };
        clock.detach();
        Err(error)
    }

    /// Tells the thread to stop and lets it finish on its own, never waiting for it: a thread
    /// that has not reported may be unable to finish (blocked on the dynamic loader's lock that
    /// a `dlopen` in progress on this very thread holds, until `start` returns). It publishes
    /// nothing more; the shared state lives until it lets go of it.
    fn detach(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            // Dropping the handle detaches the thread.
            drop(t);
        }
    }

    /// The primary page readers use (valid as long as this clock lives); read it together with
    /// its mirror through [`CalibratedClock::reader`].
    pub fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.shared.page.page
    }

    /// A reader of [`CalibratedClock::page`].
    pub fn reader(&self) -> PageReader {
        self.reader
    }

    /// The current error bound: how far the published conversion can be from the kernel's perf
    /// clock at the counter value read now (see [`crate::published`] for the definition).
    /// `u64::MAX` when unknown. Lock-free, syscall-free, signal-safe.
    pub fn error_bound_ns(&self) -> u64 {
        match counter::read_counter() {
            Some(now) => self.error_bound_at(now),
            None => u64::MAX,
        }
    }

    /// The error bound at counter value `counter`.
    pub fn error_bound_at(&self, counter: u64) -> u64 {
        self.shared.bound.load().at(counter)
    }

    /// The bound model currently published.
    pub fn bound_model(&self) -> BoundModel {
        self.shared.bound.load()
    }

    /// What the calibrator has done so far.
    pub fn stats(&self) -> CalibStats {
        self.shared.stats.snapshot()
    }

    /// Stop the background thread and wait for it to end (the last published conversion stays
    /// readable). The thread has reported its first calibration by then (or `start` detached
    /// it), so it only has a refinement round (bounded by `refine_batch`) to finish.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            // A panic on the thread has already been reported; nothing to add here.
            let _ = t.join();
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
