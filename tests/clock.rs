//! The facade against this machine's kernel: modes, errors and readings (that readings hold
//! against timestamps the kernel stamped is perfclock-check's `tests/facade.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use perfclock::{Clock, Error, Mode};
use perfclock_core::page::caps;

#[test]
fn kernel_only_mode_grants_exactness_or_says_why_not() {
    match Clock::open_kernel_only() {
        Ok(clock) => {
            println!("kernel publishes the parameters: kernel mode");
            assert_eq!(clock.mode(), Mode::Kernel);
            assert_eq!(clock.error_bound_ns(), 0);
            let conversion = clock.conversion().expect("the kernel's conversion");
            assert!(conversion.mult() > 0);
        }
        Err(Error::KernelWithholdsTime(withheld)) => {
            println!("kernel withholds the parameters: {withheld}");
            assert_eq!(withheld.capabilities & caps::USER_TIME_ZERO, 0);
            let message = withheld.to_string();
            assert!(message.contains("cap_user_time_zero=0"), "{message}");
            assert!(message.contains("What you can do"), "{message}");
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
}

#[test]
fn readings_handed_between_threads_never_go_back() {
    const READS: usize = 1_000_000;
    let clock = perfclock::init().expect("a perf clock");
    let latest = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let latest = Arc::clone(&latest);
            std::thread::spawn(move || {
                for _ in 0..READS {
                    // ATOMICS: Acquire pairs with the other thread's fetch_max, so its reading
                    // happened before ours.
                    let seen = latest.load(Ordering::Acquire);
                    let now = clock.now_ns().expect("clock read");
                    assert!(now >= seen, "went back: {now} after {seen}");
                    latest.fetch_max(now, Ordering::AcqRel);
                }
            })
        })
        .collect();
    for reader in readers {
        reader.join().expect("reader thread");
    }
}

#[test]
fn fork_child_reads_the_same_clock() {
    let clock = perfclock::init().expect("a perf clock");
    let mut pipe = [0; 2];
    // SAFETY: `pipe` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let before = clock.now_ns().expect("parent read");
    // SAFETY: the child only reads the clock, writes to the pipe and `_exit`s.
    let child = unsafe { libc::fork() };
    if child == 0 {
        let value = clock.now_ns().unwrap_or(0).to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our pipe, then leaves at once.
        unsafe {
            libc::write(pipe[1], value.as_ptr().cast(), value.len());
            libc::_exit(0);
        }
    }
    assert!(child > 0, "fork failed");
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    let after = clock.now_ns().expect("parent read");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    let mut value = [0u8; 8];
    // SAFETY: reads at most 8 bytes into a live buffer.
    let got = unsafe { libc::read(pipe[0], value.as_mut_ptr().cast(), value.len()) };
    assert_eq!(got, 8, "child wrote nothing");
    let in_child = u64::from_ne_bytes(value);
    assert!(
        before <= in_child && in_child <= after,
        "{before} <= {in_child} <= {after} fails"
    );
}
