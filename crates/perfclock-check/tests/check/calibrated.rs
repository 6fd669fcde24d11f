//! A calibrated clock judged against fresh kernel records: every stamp inside its readings
//! widened by its bound, with and without refinement, and a clock jump caught.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perfclock_calib::{
    open_ground_truth, Bracket, BracketSource, CalibError, CalibratedClock, CalibrationOptions,
    GroundTruth, RecordKind,
};
use perfclock_check::{monotonic_offset, verify};
use perfclock_core::counter;

/// End to end against the kernel's own records: fresh kernel stamps of every kind, on every
/// CPU, taken on the test thread (not used in the fit), must fall inside the clock's readings
/// around them widened by the published bound.
#[test]
fn calibrates_against_kernel_records_and_fresh_records_agree() {
    let _turn = perfclock_testutil::one_at_a_time();
    let t = Instant::now();
    let clock = CalibratedClock::start(CalibrationOptions::default()).expect("calibration");
    let took = t.elapsed();
    let st = clock.stats();
    assert_eq!(st.calibrations, 1);
    let bound = clock.error_bound_ns();
    // Generous: a loaded 2-core machine can preempt the calibration; the real check is below.
    assert!(bound < 20_000, "first bound {bound} ns");
    let report = verify(&clock, 2_000).expect("verify");
    println!("start {took:?}, bound {bound} ns\n{report}");
    assert!(
        report.events() >= 6_000 || report.rows.len() < 3,
        "{report}"
    );
    assert_eq!(report.violations(), 0, "{report}");
}

#[test]
fn monotonic_offset_is_measured_in_calibrated_mode() {
    let _turn = perfclock_testutil::one_at_a_time();
    let clock = CalibratedClock::start(CalibrationOptions::default()).expect("calibration");
    let m = monotonic_offset(&clock).expect("offset");
    println!(
        "CLOCK_MONOTONIC - perf clock = {} ns +- {} ns",
        m.offset_ns, m.uncertainty_ns
    );
    assert!(m.uncertainty_ns < 100_000, "{m:?}");
    // Both clocks count from about boot: they cannot be a whole day apart.
    assert!(m.offset_ns.unsigned_abs() < 86_400_000_000_000, "{m:?}");
}

#[test]
fn refinement_off_means_no_refinements_and_a_growing_bound() {
    let _turn = perfclock_testutil::one_at_a_time();
    let clock =
        CalibratedClock::start(CalibrationOptions::default().refine(false)).expect("calibration");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(clock.stats().refinements, 0);
    let now = counter::read_counter().expect("counter");
    assert!(clock.error_bound_at(now + 3_000_000_000) > clock.error_bound_at(now));
    let report = verify(&clock, 300).expect("verify");
    assert_eq!(report.violations(), 0, "{report}");
}

/// The kernel's records, with `skew_ns` added to every stamp: what the calibrator sees after
/// the clock jumped.
struct Skewed {
    truth: GroundTruth,
    skew_ns: Arc<AtomicU64>,
}

impl BracketSource for Skewed {
    fn kinds(&self) -> Vec<RecordKind> {
        self.truth.kinds()
    }

    fn collect(
        &mut self,
        kind: RecordKind,
        n: usize,
        out: &mut Vec<Bracket>,
    ) -> Result<(), CalibError> {
        let from = out.len();
        self.truth.collect(kind, n, out)?;
        let skew = self.skew_ns.load(Ordering::Relaxed);
        out[from..].iter_mut().for_each(|b| b.kernel_ns += skew);
        Ok(())
    }
}

#[test]
fn a_clock_jump_is_detected_and_recalibrated() {
    let _turn = perfclock_testutil::one_at_a_time();
    let skew_ns = Arc::new(AtomicU64::new(0));
    let thread_skew = skew_ns.clone();
    let clock = CalibratedClock::start_with(CalibrationOptions::default(), move |kinds| {
        Ok(Skewed {
            truth: open_ground_truth(kinds)?,
            skew_ns: thread_skew,
        })
    })
    .expect("calibration");
    std::thread::sleep(Duration::from_millis(50));
    // From now on the thread sees the kernel clock 1 ms later than it is.
    skew_ns.store(1_000_000, Ordering::Relaxed);
    let t = Instant::now();
    while clock.stats().calibrations < 2 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let st = clock.stats();
    assert!(st.jumps >= 1 && st.calibrations >= 2, "{st:?}");
    assert!((st.last_jump_ns - 1_000_000).abs() < 10_000, "{st:?}");
    // Let the recalibration publish, then the clock runs 1 ms ahead of the kernel: verify
    // must now see violations (the check can fail).
    std::thread::sleep(Duration::from_millis(100));
    let report = verify(&clock, 200).expect("verify");
    assert!(report.violations() > 0, "{report}");
}
