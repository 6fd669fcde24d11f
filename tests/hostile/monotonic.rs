//! No value going back across republishes. In calibrated mode the refiner republishes the
//! conversion when a new line would lie nearer the fit's band (here, fitting a short window and
//! told to republish for a gain of 1 ns, every few milliseconds); a new line through the middle of
//! the new fit's band can sit below the old one at the switch (the calibrator then slews
//! instead). Were it published as it
//! is, a thread reading the old conversion and, nanoseconds later, the new one would see time go
//! back.
//!
//! This test reads the clock's page in a tight loop (the reading and the conversion it used
//! together, `PageReader::read_with`) and, at every change of conversion, measures the step
//! `new(c) - old(c)` at the first counter value `c` read with the new one. A negative step is
//! a backward jump for any reader fast enough; an actual backward reading is counted too.
//!
//! Run in release in CI (`cargo test --release -p perfclock --test hostile monotonic::`): the
//! faster the loop, the more likely it catches a step; the debug build runs it too. The clock is
//! the process-wide one, opened in a child process (with a watchdog): the other tests of this
//! binary share the parent's process.

use std::time::{Duration, Instant};

use hostile::{child_case, run_child, watchdog};
use perfclock::{Mode, Options};
use perfclock_testutil::{child_skipped, hostile, skip_child, Need};

const RUN_FOR: Duration = Duration::from_secs(5);

#[test]
fn republishing_never_steps_the_clock_back() {
    let _turn = perfclock_testutil::one_at_a_time();
    let test = perfclock_testutil::test_path!();
    if child_case().is_some() {
        republish_case(&test);
        return;
    }
    let run = run_child(&test, "republish", Duration::from_secs(60));
    if child_skipped(run.status, &run.stderr) {
        return;
    }
    run.expect_success("MONOTONIC-OK");
}

fn republish_case(test: &str) {
    watchdog(50);
    let clock =
        perfclock::init_with(options()).unwrap_or_else(|error| skip_child(test, Need::Perf, error));
    let reader = clock
        .reader()
        .expect("a perf-format page outside paravirt mode");
    let counter = || clock.read_counter().expect("a counter");
    let first = reader.read_with(counter).expect("first read");
    let (mut previous, mut previous_ns) = (first, first.ns());
    let (mut reads, mut republishes, mut steps_back, mut worst_step_ns) = (0u64, 0u64, 0u64, 0i64);
    let (mut readings_back, mut worst_reading_back_ns) = (0u64, 0u64);
    let started = Instant::now();
    while started.elapsed() < RUN_FOR {
        for _ in 0..10_000 {
            let reading = reader.read_with(counter).expect("clock read");
            let ns = reading.ns();
            reads += 1;
            if ns < previous_ns {
                readings_back += 1;
                worst_reading_back_ns = worst_reading_back_ns.max(previous_ns - ns);
            }
            if reading.conversion != previous.conversion {
                republishes += 1;
                let old = previous.conversion.cycles_to_ns(reading.cycles);
                let step = ns.wrapping_sub(old) as i64;
                if step < 0 {
                    steps_back += 1;
                    worst_step_ns = worst_step_ns.min(step);
                }
            }
            previous = reading;
            previous_ns = ns;
        }
    }
    println!(
        "mode {:?}: {reads} reads in {RUN_FOR:?}, {republishes} republishes, {steps_back} stepped \
         back (worst {worst_step_ns} ns), {readings_back} readings went back (worst \
         {worst_reading_back_ns} ns)",
        clock.mode()
    );
    if clock.mode() == Mode::Calibrated {
        assert!(republishes > 100, "the refiner barely republished");
    }
    assert_eq!(readings_back, 0, "a reading went back");
    assert_eq!(steps_back, 0, "a republish stepped the clock back");
    println!("MONOTONIC-OK");
}

/// The clock under test: calibrated (the republishing under test is the calibrator's; paravirt
/// mode's entry is the host's), fitting a short window so that the fit's line keeps moving by far
/// more than over the default window, and told to republish for a gain of 1 ns: the refiner
/// keeps stepping forward and slewing back.
#[cfg(feature = "calibrated")]
fn options() -> Options {
    let churn = perfclock_calib::CalibrationOptions::default()
        .allowed_growth_ns(1)
        .refine_interval(Duration::from_millis(5), Duration::from_millis(50))
        .window(Duration::from_millis(100));
    Options::default().paravirt(false).calibration(churn)
}

/// The clock under test, in a build without calibrated mode: kernel mode's page, which only the
/// kernel republishes.
#[cfg(not(feature = "calibrated"))]
fn options() -> Options {
    Options::default().paravirt(false)
}
