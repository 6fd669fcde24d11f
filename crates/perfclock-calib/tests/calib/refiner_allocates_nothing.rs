//! The refiner's steady-state loop must not allocate or free: a raw `clone()`
//! copies the process without pthread_atfork, and if the copy's `fork()` finds a glibc malloc
//! arena lock held by the refiner at the moment of the copy, it waits for ever. A counting
//! global allocator counts the calls made on the calibration thread (by its tid) after its
//! first calibration, over refinements and over recalibrations driven by an injected clock jump.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::skip_perf_refused;
use perfclock_calib::{
    open_ground_truth, Bracket, BracketSource, CalibError, CalibratedClock, CalibrationOptions,
    GroundTruth, RecordKind,
};

/// The tid whose calls are counted (0: none yet).
static WATCHED_TID: AtomicU64 = AtomicU64::new(0);
static WATCHED_CALLS: AtomicUsize = AtomicUsize::new(0);

struct Counting;

impl Counting {
    fn note(&self) {
        let watched = WATCHED_TID.load(Ordering::Relaxed);
        if watched == 0 {
            return;
        }
        // SAFETY: gettid has no memory effects; it does not allocate, so no reentrancy.
        let tid = unsafe { libc::gettid() } as u64;
        if tid == watched {
            WATCHED_CALLS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only
// atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.note();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Ground truth whose kernel stamps jump 5 ms ahead once the test sets [`JUMPED`], so the
/// refiner sees a clock jump and calibrates again from scratch.
struct Jumping {
    inner: GroundTruth,
}

static JUMPED: AtomicBool = AtomicBool::new(false);
const JUMP_NS: u64 = 5_000_000;

impl BracketSource for Jumping {
    fn kinds(&self) -> Vec<RecordKind> {
        self.inner.kinds()
    }

    fn collect(
        &mut self,
        kind: RecordKind,
        n: usize,
        out: &mut Vec<Bracket>,
    ) -> Result<(), CalibError> {
        let start = out.len();
        let result = self.inner.collect(kind, n, out);
        if JUMPED.load(Ordering::Relaxed) {
            for b in &mut out[start..] {
                b.kernel_ns += JUMP_NS;
            }
        }
        result
    }
}

/// Starts the clock, or prints `SKIPPED` when perf events are refused here (and
/// PERFCLOCK_REQUIRE_PERF is unset).
fn start_or_skip(test: &str, options: CalibrationOptions) -> Option<CalibratedClock> {
    let started = CalibratedClock::start_with(options, |kinds: &[RecordKind]| {
        Ok(Jumping {
            inner: open_ground_truth(kinds)?,
        })
    });
    match started {
        Ok(c) => Some(c),
        Err(e) if skip_perf_refused(test, &e) => None,
        Err(e) => panic!("{test}: cannot start the calibrated clock: {e}"),
    }
}

#[test]
fn the_refiner_loop_neither_allocates_nor_frees() {
    let _turn = perfclock_testutil::one_at_a_time();
    let options = CalibrationOptions::default()
        .init_budget(Duration::from_millis(100))
        .refine_interval(Duration::from_millis(5), Duration::from_millis(50))
        // A short window, so the history is trimmed and pruned in steady state too.
        .window(Duration::from_millis(200));
    let Some(clock) = start_or_skip("the_refiner_loop_neither_allocates_nor_frees", options) else {
        return;
    };
    let first = clock.stats();
    assert!(first.thread_tid != 0, "{first:?}");
    WATCHED_TID.store(first.thread_tid, Ordering::Relaxed);
    // A few seconds, until the refiner has refined many times and recalibrated after the
    // injected jump.
    let armed = Instant::now();
    let deadline = armed + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let st = clock.stats();
        if st.refinements >= first.refinements + 20 {
            JUMPED.store(true, Ordering::Relaxed);
        }
        let done = st.jumps >= 1
            && st.refinements >= first.refinements + 100
            && armed.elapsed() >= Duration::from_secs(3);
        if done || Instant::now() > deadline {
            break;
        }
    }
    let calls = WATCHED_CALLS.load(Ordering::Relaxed);
    let st = clock.stats();
    WATCHED_TID.store(0, Ordering::Relaxed);
    drop(clock);
    println!(
        "refiner: {} refinements, {} calibrations, {} jumps; allocator calls: {calls}",
        st.refinements - first.refinements,
        st.calibrations - first.calibrations,
        st.jumps,
    );
    assert!(
        st.refinements > first.refinements,
        "the refiner never refined: {st:?}"
    );
    assert!(
        st.jumps >= 1 && st.calibrations > first.calibrations,
        "the injected jump was not seen: {st:?}"
    );
    assert_eq!(
        calls, 0,
        "the calibration thread called the allocator {calls} times after its first calibration"
    );
}
