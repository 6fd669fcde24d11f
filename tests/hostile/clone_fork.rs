//! `fork()` inside a child made by a raw `clone` system call. A raw clone runs no
//! `pthread_atfork` handler, so the child can inherit the fork gate held by the calibration
//! thread (a thread it does not have), and must not spin for ever in the gate's prepare handler
//! when it forks. That case is reproduced deterministically by
//! `perfclock-calib`'s `fork_gate` test (a gate held across the clone). Here, end to end:
//!
//! - `without_refiner` (CI): with `refine(false)` the calibration thread has ended after the
//!   first calibration, so a raw-clone child is a copy of a single-threaded process: every one
//!   of its forks must return. This is the configuration the documentation recommends for
//!   programs that raw-clone.
//! - `with_refiner` (CI: 10,000 clones; `PERFCLOCK_STRESS=1`: 20,000): with the refiner
//!   running, the gate can no longer hang a child, and a raw clone copies a multi-threaded
//!   process whose refiner never holds a `malloc` arena lock: its loop calls no allocator once
//!   `init` has returned (`perfclock-calib`'s `refiner_allocates_nothing` test). Before that,
//!   glibc's `fork()` in the copy could wait for ever for an arena lock the refiner held at
//!   the instant of the clone (`__malloc_fork_lock_parent`), a few children in 20,000. Any
//!   hung or failed child fails the run.
//!
//! Each run is a child process with a watchdog; each clone child has its own `alarm`, and a
//! child that dies of it is counted as a hang.
// Both cases are about the calibration thread (refine on or off).
#![cfg(feature = "calibrated")]

use std::time::Duration;

use hostile::{child_case, run_child, watchdog};
use perfclock::Options;
use perfclock_testutil::{child_skipped, hostile, skip_child, Need};

const CI_CLONES: u32 = 2_000;
/// With the refiner: more clones, since the hazard it guards against was a few in 20,000.
const CI_REFINER_CLONES: u32 = 10_000;
const STRESS_CLONES: u32 = 20_000;
/// A clone child whose fork has not returned by then is hung.
const CHILD_ALARM_S: u32 = 5;

#[test]
fn fork_in_raw_clone_children_without_refiner() {
    let _turn = perfclock_testutil::one_at_a_time();
    if child_case().is_some() {
        clone_fork_case(false, CI_CLONES);
        return;
    }
    let run = run_child(
        &perfclock_testutil::test_path!(),
        "without_refiner",
        Duration::from_secs(120),
    );
    if !child_skipped(run.status, &run.stderr) {
        run.expect_success("CLONE-FORK-OK");
    }
}

/// Set to 1 for the stress size of the refiner case.
const STRESS_ENV: &str = "PERFCLOCK_STRESS";

#[test]
fn fork_in_raw_clone_children_with_refiner() {
    let _turn = perfclock_testutil::one_at_a_time();
    if child_case().is_some() {
        // The re-executed child inherits the environment.
        let stress = std::env::var(STRESS_ENV).as_deref() == Ok("1");
        let clones = if stress {
            STRESS_CLONES
        } else {
            CI_REFINER_CLONES
        };
        clone_fork_case(true, clones);
        return;
    }
    let run = run_child(
        &perfclock_testutil::test_path!(),
        "with_refiner",
        Duration::from_secs(1200),
    );
    if !child_skipped(run.status, &run.stderr) {
        run.expect_success("CLONE-FORK-OK");
    }
}

/// Raw-clones `clones` children; each forks once and reaps its own child. Prints the count of
/// hung children and fails if there was any.
fn clone_fork_case(refine: bool, clones: u32) {
    watchdog(1100);
    let clock = perfclock::init_with(Options::default().refine(refine)).unwrap_or_else(|e| {
        skip_child(
            &format!("raw clone and fork (refine {refine})"),
            Need::Perf,
            e,
        )
    });
    println!("CLONE-FORK-MODE {:?}", clock.mode());
    let mut hung = 0u32;
    let mut failed = 0u32;
    for _ in 0..clones {
        // SAFETY: clone(SIGCHLD) without CLONE_VM gives the child its own copy of memory, as
        // fork does but without the pthread_atfork handlers; the child runs only
        // `clone_child` (alarm, fork, waitpid, _exit) and never returns here.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                libc::SIGCHLD as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        };
        if pid == 0 {
            clone_child();
        }
        assert!(pid > 0, "clone: {}", std::io::Error::last_os_error());
        let status = hostile::wait(pid as libc::pid_t);
        if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM {
            hung += 1;
        } else if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            failed += 1;
        }
    }
    println!("CLONE-FORK hung {hung} failed {failed} of {clones} (refine {refine})");
    assert_eq!((hung, failed), (0, 0), "clone children hung or failed");
    println!("CLONE-FORK-OK");
}

fn clone_child() -> ! {
    // SAFETY: alarm has no memory effects: a child whose fork never returns dies of SIGALRM.
    unsafe { libc::alarm(CHILD_ALARM_S) };
    // SAFETY: this copy has one thread; the grandchild leaves at once with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: leaves at once.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child into a live integer.
    let reaped = pid > 0 && unsafe { libc::waitpid(pid, &mut status, 0) } == pid;
    // SAFETY: leaves at once, running nothing of the parent's.
    unsafe { libc::_exit(if reaped { 0 } else { 1 }) };
}
