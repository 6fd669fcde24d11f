//! Calibration options that made the calibration thread panic, the process abort (an
//! allocation of 2^40 brackets, or any panic under `panic = "abort"`), a duration overflow, or
//! recalibrate endlessly (an `init_budget` of 5 s with a `start_timeout` of 100 ms).
//! Each must make `Options::open` return `Error::Calibration` with `CalibError::InvalidOptions`
//! naming the setter to change, before any thread runs; each case runs in a child process with a
//! watchdog, so an abort or a hang fails the test instead of the harness.
//!
//! On a kernel that publishes `cap_user_time_zero` the clock opens in kernel mode and never
//! looks at calibration options: the test says so (`SKIPPED`).
#![cfg(feature = "calibrated")]

use std::time::Duration;

use hostile::{child_case, run_child, watchdog};
use perfclock::{Error, Mode, Options};
use perfclock_calib::{CalibError, CalibrationOptions};
use perfclock_testutil::hostile;
use perfclock_testutil::{child_skipped, skip_child, Need};

/// Each case: its name, the options, and the setter the error must name.
fn cases() -> Vec<(&'static str, CalibrationOptions, &'static str)> {
    let default = CalibrationOptions::default;
    vec![
        ("batch0", default().refine_batch(0), "refine_batch"),
        ("batch1", default().refine_batch(1), "refine_batch"),
        ("batch2", default().refine_batch(2), "refine_batch"),
        ("batch2^40", default().refine_batch(1 << 40), "refine_batch"),
        (
            "max<min",
            default().refine_interval(Duration::from_millis(50), Duration::from_millis(10)),
            "refine_interval",
        ),
        (
            "init_budget=MAX",
            default()
                .init_budget(Duration::MAX)
                .start_timeout(Duration::MAX),
            "init_budget",
        ),
        ("window0", default().window(Duration::ZERO), "window"),
        (
            "budget>timeout",
            default()
                .init_budget(Duration::from_secs(5))
                .start_timeout(Duration::from_millis(100)),
            "start_timeout",
        ),
    ]
}

#[test]
fn options_that_panicked_or_aborted_are_typed_errors() {
    let _turn = perfclock_testutil::one_at_a_time();
    if let Some(case) = child_case() {
        options_child(&case);
        return;
    }
    let test = perfclock_testutil::test_path!();
    // Every case runs, so a failure lists all the cases that still go wrong.
    let mut failed = Vec::new();
    for (name, _, _) in cases() {
        let run = run_child(&test, name, Duration::from_secs(60));
        if child_skipped(run.status, &run.stderr) {
            continue;
        }
        if !(run.status.success() && run.stdout.contains(&format!("OPTIONS-OK {name}"))) {
            // The panic's message is the line after "panicked at".
            let why = run
                .stderr
                .lines()
                .skip_while(|l| !l.contains("panicked at"))
                .nth(1);
            failed.push(format!(
                "{name}: {:?} signal {:?}: {}",
                run.status,
                run.signal(),
                why.unwrap_or_default()
            ));
        }
    }
    assert!(failed.is_empty(), "cases failed:\n{}", failed.join("\n"));
}

fn options_child(case: &str) {
    watchdog(40);
    let (name, options, setter) = cases()
        .into_iter()
        .find(|(name, _, _)| *name == case)
        .expect("known case");
    match Options::default()
        .paravirt(false)
        .calibration(options)
        .open()
    {
        Ok(clock) if clock.mode() == Mode::Kernel => skip_child(
            &format!("options case {name}"),
            Need::CalibratedMode,
            "the clock opened in kernel mode, which uses no calibration options",
        ),
        Ok(clock) => panic!("{name}: opened a {:?} clock", clock.mode()),
        Err(Error::Calibration {
            reason: reason @ CalibError::InvalidOptions { setting, .. },
            ..
        }) => {
            assert_eq!(setting, setter, "{name}: {reason}");
            assert!(reason.to_string().contains(setter), "{reason}");
            println!("OPTIONS-OK {name}: {reason}");
        }
        Err(other) => panic!("{name}: {other}"),
    }
}

#[test]
fn the_smallest_valid_batch_keeps_refining() {
    let _turn = perfclock_testutil::one_at_a_time();
    if child_case().is_some() {
        watchdog(40);
        let options = CalibrationOptions::default()
            .refine_batch(3)
            .refine_interval(Duration::from_millis(5), Duration::from_millis(20))
            .window(Duration::from_millis(40));
        let clock = Options::default()
            .paravirt(false)
            .calibration(options)
            .open()
            .expect("open with the smallest batch");
        let Some(calibrated) = clock.calibrated() else {
            skip_child(
                "the_smallest_valid_batch_keeps_refining",
                Need::CalibratedMode,
                "kernel mode has no refiner",
            );
        };
        // A thread that panicked stops counting; the watchdog ends a wait that never ends.
        while calibrated.stats().refinements < 20 {
            std::thread::sleep(Duration::from_millis(10));
        }
        println!("SMALL-BATCH-OK {:?}", calibrated.stats());
        return;
    }
    let run = run_child(
        &perfclock_testutil::test_path!(),
        "small-batch",
        Duration::from_secs(60),
    );
    if child_skipped(run.status, &run.stderr) {
        return;
    }
    run.expect_success("SMALL-BATCH-OK");
}
