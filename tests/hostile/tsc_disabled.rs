//! `prctl(PR_SET_TSC, PR_TSC_SIGSEGV)` before the clock is opened: every counter read of that
//! thread (and of threads it spawns later) would die with SIGSEGV. `init()` and `Clock::open()`
//! must notice (`PR_GET_TSC`) and return [`Error::Unsupported`] with a message that names the
//! prctl, without ever reading the counter. A second test asks the same of the reading calls
//! when no clock is open (`try_now_ns`, and `now_ns`, whose first call opens the clock).
//! x86_64 only: elsewhere the prctl does not exist.

use std::time::Duration;

use hostile::{child_case, run_child, watchdog};
use perfclock::{Clock, Error};
use perfclock_testutil::hostile;
use perfclock_testutil::{skip, Need};

#[test]
fn tsc_disabled_by_prctl_is_unsupported() {
    let _turn = perfclock_testutil::one_at_a_time();
    in_children_with_the_tsc_disabled(&perfclock_testutil::test_path!(), &["init", "open"]);
}

/// Reading calls without a clock must answer "no clock" (and `now_ns` must return 0 after its
/// `init` fails) rather than read the TSC first and die.
#[test]
fn reads_without_a_clock_on_a_tsc_disabled_thread() {
    let _turn = perfclock_testutil::one_at_a_time();
    in_children_with_the_tsc_disabled(&perfclock_testutil::test_path!(), &["try_now_ns", "now_ns"]);
}

/// Runs each of `cases` of `test` in a child process that disables its TSC first; in such a
/// child, runs its case.
fn in_children_with_the_tsc_disabled(test: &str, cases: &[&str]) {
    if !cfg!(target_arch = "x86_64") {
        skip(test, Need::X86_64, "PR_SET_TSC exists on x86 only");
        return;
    }
    if let Some(case) = child_case() {
        tsc_disabled_child(&case);
        return;
    }
    for case in cases {
        let run = run_child(test, case, Duration::from_secs(30));
        run.expect_success(&format!("TSC-DISABLED-OK {case}"));
    }
}

#[cfg(target_arch = "x86_64")]
fn disable_tsc() {
    // SAFETY: PR_SET_TSC changes only this thread's TSC permission; nothing here reads the TSC
    // before perfclock is asked to.
    let rc = unsafe { libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_SIGSEGV, 0, 0, 0) };
    assert_eq!(
        rc,
        0,
        "prctl(PR_SET_TSC): {}",
        std::io::Error::last_os_error()
    );
}

#[cfg(not(target_arch = "x86_64"))]
fn disable_tsc() {}

fn tsc_disabled_child(case: &str) {
    watchdog(20);
    disable_tsc();
    match case {
        "init" => {
            let error = perfclock::init().expect_err("init must refuse a disabled TSC");
            check_error(&error);
            // Remembered, and the calls that need no counter say "no clock".
            assert_eq!(perfclock::init().err(), Some(error));
            assert_eq!(perfclock::mode(), None);
            assert_eq!(perfclock::error_bound_ns(), u64::MAX);
        }
        "try_now_ns" => assert_eq!(perfclock::try_now_ns(), None),
        "open" => {
            check_error(&Clock::open().expect_err("Clock::open must refuse a disabled TSC"));
            check_error(
                &Clock::open_kernel_only().expect_err("kernel-only open must refuse it too"),
            );
        }
        // The lazy path: the first read opens the clock, and must answer 0, not crash.
        "now_ns" => assert_eq!(perfclock::now_ns(), 0),
        other => panic!("unknown case {other}"),
    }
    println!("TSC-DISABLED-OK {case}");
}

fn check_error(error: &Error) {
    assert_eq!(*error, Error::Unsupported, "{error:?}");
    let message = error.to_string();
    println!("message: {message}");
    assert!(
        message.contains("PR_SET_TSC") && message.contains("PR_TSC_ENABLE"),
        "the message does not say what to change: {message}"
    );
}
