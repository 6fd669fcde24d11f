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

/// Two threads hand readings to each other through `latest` (Acquire/AcqRel, so each handed
/// reading happened before the read that follows); returns how many readings were below the
/// reading handed over, and by how much at most.
fn handoff_backsteps(read: fn() -> u64) -> (u64, u64) {
    const READS: usize = 1_000_000;
    let latest = Arc::new(AtomicU64::new(0));
    let arrived = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (latest, arrived) = (Arc::clone(&latest), Arc::clone(&arrived));
            std::thread::spawn(move || {
                // Start together (a spinning barrier), so the readings interleave instead of
                // one thread finishing before the other starts.
                arrived.fetch_add(1, Ordering::AcqRel);
                while arrived.load(Ordering::Acquire) < 2 {
                    std::hint::spin_loop();
                }
                let (mut backsteps, mut worst) = (0u64, 0u64);
                for _ in 0..READS {
                    // ATOMICS: Acquire pairs with the other thread's fetch_max, so its reading
                    // happened before ours.
                    let seen = latest.load(Ordering::Acquire);
                    let now = read();
                    assert_ne!(now, 0, "clock read failed");
                    if now < seen {
                        backsteps += 1;
                        worst = worst.max(seen - now);
                    }
                    latest.fetch_max(now, Ordering::AcqRel);
                }
                (backsteps, worst)
            })
        })
        .collect();
    readers
        .into_iter()
        .map(|reader| reader.join().expect("reader thread"))
        .fold((0, 0), |(count, worst), (c, w)| (count + c, worst.max(w)))
}

/// The ordered read's contract: never below a reading handed over by another thread. Run it in
/// release builds too, where the unordered read does go back.
#[test]
fn ordered_readings_handed_between_threads_never_go_back() {
    perfclock::init().expect("a perf clock");
    let (backsteps, worst) = handoff_backsteps(perfclock::now_ns_ordered);
    println!("now_ns_ordered: {backsteps} backsteps of 2000000 handoffs, worst {worst} ns");
    assert_eq!(
        backsteps, 0,
        "now_ns_ordered went back, by up to {worst} ns"
    );
}

/// The unordered read may go back across threads by as long as the load that received the other
/// thread's reading waited (the count is reported, not judged); a step back far beyond any such
/// wait would be a clock that jumps.
#[test]
fn unordered_readings_handed_between_threads_go_back_only_by_reordering() {
    /// Far above any wait for a contended cache line, far below a clock jump.
    const REORDERING_LIMIT_NS: u64 = 100_000;
    perfclock::init().expect("a perf clock");
    let (backsteps, worst) = handoff_backsteps(perfclock::now_ns);
    println!("now_ns (unordered): {backsteps} backsteps of 2000000 handoffs, worst {worst} ns");
    assert!(
        worst < REORDERING_LIMIT_NS,
        "now_ns went back by {worst} ns: more than reordering explains"
    );
}

/// A deferred stamp converts to a reading between the readings around it.
#[test]
fn a_deferred_stamp_converts_between_the_readings_around_it() {
    let clock = perfclock::init().expect("a perf clock");
    let before = perfclock::now_ns_ordered();
    let stamp = perfclock::CounterStamp::now();
    let after = perfclock::now_ns_ordered();
    let ns = stamp.ns().expect("conversion");
    assert_eq!(stamp.ns_with(clock), Ok(ns));
    assert_eq!(
        perfclock::CounterStamp::from_cycles(stamp.cycles()).ns(),
        Some(ns)
    );
    // The unordered counter read may run early (before earlier loads complete), and in calibrated
    // mode a refit between the readings and the conversion may move it within the bound.
    let slack = 1_000 + clock.error_bound_ns();
    assert!(
        before.saturating_sub(slack) <= ns && ns <= after + slack,
        "{before} <= {ns} <= {after} (slack {slack} ns)"
    );
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
