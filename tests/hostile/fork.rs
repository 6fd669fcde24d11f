//! fork: a child reads the clock in the same domain as its parent, and so does a child of that
//! child, while two threads of the parent read the clock in loops (so a fork regularly lands in
//! the middle of a read: the child must not be left stuck or faulting).
//!
//! Whichever mode `init()` grants is tested. On our KVM machines that is calibrated mode (the
//! page is our own heap memory, copied into the child; the refiner thread does not exist there,
//! so the child keeps the last conversion and its bound grows). Kernel mode needs a kernel that
//! publishes `cap_user_time_zero`; there the same test exercises the `pthread_atfork` remap of
//! the perf page. Where kernel mode is not available the test says so (`SKIPPED`); the remap
//! itself is covered by `src/kernel.rs`'s test against this machine's page and by the qemu test
//! bed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hostile::{child_case, describe_status, fork, run_child, wait, watchdog};
use perfclock::Mode;
use perfclock_testutil::hostile;
use perfclock_testutil::{child_skipped, skip, skip_child, Need};

const FORKS: u32 = 300;

#[test]
fn fork_children_and_grandchildren_read_the_same_clock() {
    let _turn = perfclock_testutil::one_at_a_time();
    let test = perfclock_testutil::test_path!();
    if child_case().is_some() {
        fork_case(&test);
        return;
    }
    let run = run_child(&test, "fork", Duration::from_secs(120));
    if child_skipped(run.status, &run.stderr) {
        return;
    }
    run.expect_success("FORK-OK");
    if run
        .stdout
        .contains(&format!("FORK-MODE {:?}", Mode::Calibrated))
    {
        skip(
            "fork in kernel mode",
            Need::KernelMode,
            "this kernel withholds cap_user_time_zero, so only calibrated mode was tested here \
             (kernel mode's remap: src/kernel.rs test, qemu test bed)",
        );
    }
}

/// Exit codes of a child or grandchild that saw something wrong.
const NO_READING: i32 = 10;
const WENT_BACK: i32 = 11;
const GRANDCHILD_FAILED: i32 = 12;
const PIPE_FAILED: i32 = 13;

/// Runs in a fork child: only async-signal-safe calls (reads, fork, write, waitpid, _exit).
fn in_child(pipe_write: i32) -> ! {
    // SAFETY: alarm has no memory effects: a stuck child dies of SIGALRM.
    unsafe { libc::alarm(10) };
    let exit = |code: i32| -> ! {
        // SAFETY: leaves at once, running nothing of the parent's.
        unsafe { libc::_exit(code) }
    };
    let Some(child_ns) = perfclock::try_now_ns() else {
        exit(NO_READING)
    };
    let mut pipe = [0; 2];
    // SAFETY: room for two descriptors.
    if unsafe { libc::pipe(pipe.as_mut_ptr()) } != 0 {
        exit(PIPE_FAILED)
    }
    // SAFETY: this process has one thread now; the grandchild runs async-signal-safe code.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above.
        unsafe { libc::alarm(10) };
        let value = match perfclock::try_now_ns() {
            Some(ns) => ns,
            None => exit(NO_READING),
        };
        write_u64(pipe[1], value);
        exit(0)
    }
    let mut status = 0;
    // SAFETY: waits for our own child into a live integer.
    if pid < 0 || unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        exit(GRANDCHILD_FAILED)
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        exit(GRANDCHILD_FAILED)
    }
    let Some(grandchild_ns) = read_u64(pipe[0]) else {
        exit(PIPE_FAILED)
    };
    // Same conversion (the grandchild's copy is the child's), later read: must not be earlier.
    if grandchild_ns < child_ns {
        exit(WENT_BACK)
    }
    write_u64(pipe_write, child_ns);
    write_u64(pipe_write, grandchild_ns);
    exit(0)
}

fn write_u64(fd: i32, value: u64) {
    let bytes = value.to_ne_bytes();
    // SAFETY: writes 8 bytes of a live buffer (a pipe write of 8 bytes is atomic).
    unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
}

fn read_u64(fd: i32) -> Option<u64> {
    let mut bytes = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live buffer.
    let got = unsafe { libc::read(fd, bytes.as_mut_ptr().cast(), bytes.len()) };
    (got == 8).then(|| u64::from_ne_bytes(bytes))
}

fn fork_case(test: &str) {
    watchdog(100);
    let clock = match perfclock::init() {
        Ok(clock) => clock,
        Err(error) => skip_child(test, Need::Perf, error),
    };
    println!("FORK-MODE {:?}", clock.mode());
    let stop = AtomicBool::new(false);
    let loop_reads = AtomicU64::new(0);
    let started = Instant::now();
    let (mut min_offset_ns, mut max_offset_ns) = (i64::MAX, i64::MIN);
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                let mut last = 0;
                while !stop.load(Ordering::Relaxed) {
                    let now = clock.now_ns().expect("parent thread read");
                    assert!(now >= last, "parent thread went back: {now} after {last}");
                    last = now;
                    loop_reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for round in 0..FORKS {
            let mut pipe = [0; 2];
            // SAFETY: room for two descriptors.
            assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
            let before = clock.now_ns().expect("parent read");
            // SAFETY: the child runs only `in_child`: async-signal-safe calls.
            let pid = unsafe { fork() };
            if pid == 0 {
                in_child(pipe[1]);
            }
            let status = wait(pid);
            let after = clock.now_ns().expect("parent read");
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "round {round}: child {} (10 no reading, 11 went back, 12 grandchild failed, \
                 13 pipe)",
                describe_status(status)
            );
            let child_ns = read_u64(pipe[0]).expect("child's reading");
            let grandchild_ns = read_u64(pipe[0]).expect("grandchild's reading");
            // SAFETY: our own descriptors, closed once.
            unsafe {
                libc::close(pipe[0]);
                libc::close(pipe[1]);
            }
            // Same domain: the child's copy of the conversion may be older than the parent's
            // latest, so allow the clock's own error bound (twice: either side may be off).
            let tolerance = 2 * clock.error_bound_ns();
            assert!(
                before <= child_ns.saturating_add(tolerance)
                    && grandchild_ns <= after.saturating_add(tolerance),
                "round {round}: not in the parent's domain: parent {before} child {child_ns} \
                 grandchild {grandchild_ns} parent {after} (tolerance {tolerance} ns)"
            );
            let offset = child_ns as i64 - before as i64;
            min_offset_ns = min_offset_ns.min(offset);
            max_offset_ns = max_offset_ns.max(offset);
        }
        stop.store(true, Ordering::Relaxed);
    });
    println!(
        "{FORKS} forks (each child forked a grandchild) in {:?}, parent threads read {} times \
         meanwhile; child's reading minus the parent's before the fork: {min_offset_ns}..{max_offset_ns} ns",
        started.elapsed(),
        loop_reads.load(Ordering::Relaxed)
    );
    assert!(
        loop_reads.load(Ordering::Relaxed) > u64::from(FORKS),
        "the reader threads barely ran"
    );
    println!("FORK-OK");
}
