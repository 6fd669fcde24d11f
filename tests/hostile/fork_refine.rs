//! A fork child's calibrated clock: `fork` copies the published page but not the
//! refiner thread, so the child's clock is frozen: it would never notice a clock jump (a
//! restored VM snapshot, a host migration) while still claiming its bound. Checked here, each in
//! a child process with a watchdog:
//!
//! - `frozen`: a fork child that does not call `init()` again claims a bound only for the
//!   parent's jump-detection latency (the longest refinement pause) after the last publication
//!   it inherited, then `u64::MAX`;
//! - `resume`: `init()` in the fork child starts a refiner there: the bound is finite again,
//!   refinements are counted in the child, and readings do not go back across the restart;
//! - `drop`: a calibrated `Clock` the parent opened can be dropped in a fork child, and a
//!   second one keeps working in the parent (the child's handle names the parent's thread; glibc
//!   marks such threads finished in a fork child, so joining would return too; the handle is
//!   forgotten instead: this case guards against a regression only).
//!
//! Calibrated mode only: where the kernel publishes the parameters the test says `SKIPPED`.
#![cfg(feature = "calibrated")]

use std::time::Duration;

use hostile::{child_case, describe_status, fork, run_child, wait, watchdog};
use perfclock::{Clock, Mode, Options};
use perfclock_calib::CalibrationOptions;
use perfclock_testutil::hostile;
use perfclock_testutil::{child_skipped, skip_child, Need};

/// The longest refinement pause the cases use: the jump-detection latency.
const MAX_PAUSE: Duration = Duration::from_millis(200);

fn options() -> Options {
    Options::default().paravirt(false).calibration(
        CalibrationOptions::default().refine_interval(Duration::from_millis(5), MAX_PAUSE),
    )
}

#[test]
fn fork_child_clock_is_bounded_then_refined_again() {
    let _turn = perfclock_testutil::one_at_a_time();
    if let Some(case) = child_case() {
        fork_refine_case(&case);
        return;
    }
    let test = perfclock_testutil::test_path!();
    let mut failed = Vec::new();
    for case in ["frozen", "resume", "drop"] {
        let run = run_child(&test, case, Duration::from_secs(60));
        if child_skipped(run.status, &run.stderr) {
            continue;
        }
        if !(run.status.success() && run.stdout.contains(&format!("FORK-REFINE-OK {case}"))) {
            failed.push(format!(
                "{case}: {:?} signal {:?}\n{}\n{}",
                run.status,
                run.signal(),
                run.stdout,
                run.stderr
            ));
        }
    }
    assert!(failed.is_empty(), "cases failed:\n{}", failed.join("\n"));
}

/// Exit codes of the fork child.
const FROZEN_BOUND_CLAIMED: i32 = 10;
const NOT_RESUMED: i32 = 11;
const NO_REFINEMENT: i32 = 12;
const WENT_BACK: i32 = 13;
const NO_READING: i32 = 14;

fn fork_refine_case(case: &str) {
    watchdog(40);
    let clock = perfclock::init_with(options())
        .unwrap_or_else(|e| skip_child(&format!("fork refine case {case}"), Need::Perf, e));
    if clock.mode() == Mode::Kernel {
        skip_child(
            &format!("fork refine case {case}"),
            Need::CalibratedMode,
            "kernel mode has no refiner to restart",
        );
    }
    // A second calibrated clock the child drops (case `drop`).
    let mut local = Some(options().open().expect("open a local clock"));
    // SAFETY: the child runs only in this function and leaves with `_exit`; it uses malloc and
    // starts a thread (case `resume`), which glibc allows in a fork child of a threaded parent.
    let pid = unsafe { fork() };
    if pid == 0 {
        // SAFETY: alarm has no memory effects: a stuck child dies of SIGALRM.
        unsafe { libc::alarm(30) };
        let code = in_child(case, clock, &mut local);
        // SAFETY: leaves at once, running none of the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let status = wait(pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "fork child of case {case}: {}",
        describe_status(status)
    );
    drop(local);
    println!("FORK-REFINE-OK {case}");
}

fn in_child(case: &str, clock: &'static Clock, local: &mut Option<Clock>) -> i32 {
    match case {
        "frozen" => {
            // Past the latency a refiner would have taken to notice a jump.
            std::thread::sleep(MAX_PAUSE * 3);
            let bound = clock.error_bound_ns();
            if bound != u64::MAX {
                eprintln!("a frozen fork child claims {bound} ns");
                return FROZEN_BOUND_CLAIMED;
            }
            0
        }
        "resume" => {
            std::thread::sleep(MAX_PAUSE * 3);
            let Ok(before) = clock.now_ns() else {
                return NO_READING;
            };
            let again = perfclock::init().expect("init in the fork child");
            let bound = again.error_bound_ns();
            if bound == u64::MAX {
                eprintln!("init in the fork child left the bound unknown");
                return NOT_RESUMED;
            }
            let Ok(after) = clock.now_ns() else {
                return NO_READING;
            };
            if after < before {
                eprintln!("went back across the restart: {before} -> {after}");
                return WENT_BACK;
            }
            let calibrated = again.calibrated().expect("calibrated mode");
            let start = calibrated.stats().refinements;
            // The watchdog ends a wait for a refiner that never runs.
            while calibrated.stats().refinements < start + 3 {
                std::thread::sleep(Duration::from_millis(10));
            }
            if again.error_bound_ns() == u64::MAX {
                return NO_REFINEMENT;
            }
            println!("resumed: bound {bound} ns, {:?}", calibrated.stats());
            0
        }
        "drop" => {
            // The parent's thread does not exist here: nothing to stop or join.
            drop(local.take());
            0
        }
        _ => panic!("unknown case {case}"),
    }
}
