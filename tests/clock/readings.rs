//! The facade against this machine's kernel: modes, errors and readings (that readings hold
//! against timestamps the kernel stamped is perfclock-check's `tests/check/facade.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use perfclock::{Clock, Error, Mode};
use perfclock_core::counter;
use perfclock_core::page::caps;
use perfclock_testutil::handoff::{HandoffCell, Reading, Verdict};
use perfclock_testutil::{ok_or_skip, Need};

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

/// The process's clock, or `None` after a skip (fatal under `PERFCLOCK_REQUIRE_PERF`, as in CI):
/// without perf events, or in a build without calibration on a kernel that withholds the time
/// conversion, there is no clock to test.
fn clock_or_skip(test: &str) -> Option<&'static Clock> {
    ok_or_skip(test, Need::Perf, perfclock::init())
}

/// Handoffs needed before a verdict means anything.
const ENOUGH_HANDOFFS: u64 = 10_000;

/// The handoff tests take turns: run together, their four spinning threads share the two CPUs of
/// a small machine and hardly interleave.
static HANDOFF_TURN: Mutex<()> = Mutex::new(());

/// Rounds of [`handoff_round`] until [`ENOUGH_HANDOFFS`] were seen, or for at most a minute (a
/// loaded machine interleaves the threads less); the verdict on all of them.
fn handoffs(read: fn() -> Reading) -> Verdict {
    const PATIENCE: Duration = Duration::from_secs(60);
    let _turn = HANDOFF_TURN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let started = Instant::now();
    let mut verdict = Verdict::default();
    while verdict.handoffs <= ENOUGH_HANDOFFS && started.elapsed() < PATIENCE {
        verdict.merge(&handoff_round(read));
    }
    verdict
}

/// Two threads, each publishing its readings in a [`HandoffCell`] of its own and taking the
/// other's latest before each reading of its own (Acquire, so the handed reading happened
/// before ours); the verdict on every new reading taken over.
fn handoff_round(read: fn() -> Reading) -> Verdict {
    const READS: usize = 2_000_000;
    let cells = Arc::new([HandoffCell::default(), HandoffCell::default()]);
    let arrived = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..2)
        .map(|me| {
            let (cells, arrived) = (Arc::clone(&cells), Arc::clone(&arrived));
            std::thread::spawn(move || {
                // Start together (a spinning barrier), so the readings interleave instead of
                // one thread finishing before the other starts.
                arrived.fetch_add(1, Ordering::AcqRel);
                while arrived.load(Ordering::Acquire) < 2 {
                    std::hint::spin_loop();
                }
                let (mut verdict, mut seen) = (Verdict::default(), 0u64);
                for _ in 0..READS {
                    let theirs = cells[1 - me].take();
                    let ours = read();
                    assert_ne!(ours.ns, 0, "clock read failed");
                    if let Some((sequence, theirs)) = theirs.filter(|(seq, _)| *seq != seen) {
                        seen = sequence;
                        verdict.record(theirs, ours);
                    }
                    cells[me].publish(ours);
                }
                verdict
            })
        })
        .collect();
    let mut verdict = Verdict::default();
    for thread in threads {
        verdict.merge(&thread.join().expect("reader thread"));
    }
    verdict
}

/// A reading of the process-wide clock with the counter read by `counter` inside the seqlock
/// section (the facade's `now_ns_ordered` / `now_ns` read, the counter kept).
fn reading_with(counter: fn() -> u64) -> Reading {
    let clock = perfclock::global().expect("an open clock");
    if let Some(paravirt) = clock.paravirt() {
        let (params, cycles) = paravirt
            .reader()
            .read_with(counter)
            .expect("a pvclock reading");
        return Reading {
            cycles,
            ns: params.perf_ns(cycles, paravirt.offset().offset_ns),
        };
    }
    let reading = clock
        .reader()
        .expect("a perf-format page outside paravirt mode")
        .read_with(counter)
        .expect("a clock reading");
    Reading {
        cycles: reading.cycles,
        ns: reading.ns(),
    }
}

/// No reading below one handed over unless the counter was (the clock's share: 0), and a
/// counter step back never magnified by the conversion (at most 1 ns per tick, plus the floor).
fn assert_clock_never_went_back(what: &str, verdict: &Verdict) {
    println!("{what}: {}", verdict.line("verdict"));
    // Only readings not seen before count.
    assert!(
        verdict.handoffs > ENOUGH_HANDOFFS,
        "too few handoffs to judge within a minute of rounds (is the machine overloaded?): \
         {verdict:?}"
    );
    assert_eq!(
        verdict.clock_backs, 0,
        "{what} went back although the counter did not: {verdict:?}"
    );
    assert!(
        verdict.counter_worst_ns <= verdict.counter_worst_ticks + 1,
        "{what}: a counter step back magnified: {verdict:?}"
    );
}

/// The ordered read's contract: never below a reading handed over by another thread, as far as
/// the counter allows: the counters of two CPUs can disagree by a few ticks (a KVM guest's vCPUs
/// do, see perfclock_testutil::handoff), and those steps are reported; an ordered read that ran
/// ahead of the load that received the other reading would go back by that load's wait instead
/// (hundreds of ns when the threads contend for its cache line; the unordered test shows it).
/// Run it in release builds too, where the unordered read does go back.
#[test]
fn ordered_readings_handed_between_threads_never_go_back() {
    /// Far above two CPUs' counter skew, below a contended load's wait.
    const SKEW_LIMIT_NS: u64 = 50;
    if clock_or_skip("ordered_readings_handed_between_threads_never_go_back").is_none() {
        return;
    }
    let verdict = handoffs(|| reading_with(counter::read_counter_ordered_or_zero));
    assert_clock_never_went_back("now_ns_ordered", &verdict);
    if verdict.counter_backs > 0 {
        eprintln!(
            "the counter itself went back between CPUs in {} of {} handoffs (worst {} ticks)",
            verdict.counter_backs, verdict.handoffs, verdict.counter_worst_ticks
        );
    }
    assert!(
        verdict.counter_worst_ns <= SKEW_LIMIT_NS,
        "ordered readings went back by {} ns: more than counter skew explains (did the counter \
         read run ahead of the load?)",
        verdict.counter_worst_ns
    );
}

/// The unordered read may go back across threads by as long as the load that received the other
/// thread's reading waited (the count is reported, not judged): its counter was read first, so
/// the clock itself still never goes back; a step back far beyond any such wait would be a
/// clock that jumps.
#[test]
fn unordered_readings_handed_between_threads_go_back_only_by_reordering() {
    /// Far above any wait for a contended cache line, far below a clock jump.
    const REORDERING_LIMIT_NS: u64 = 100_000;
    if clock_or_skip("unordered_readings_handed_between_threads_go_back_only_by_reordering")
        .is_none()
    {
        return;
    }
    let verdict = handoffs(|| reading_with(counter::read_counter_or_zero));
    assert_clock_never_went_back("now_ns (unordered)", &verdict);
    assert!(
        verdict.counter_worst_ns < REORDERING_LIMIT_NS,
        "now_ns went back by {} ns: more than reordering explains",
        verdict.counter_worst_ns
    );
}

/// A deferred stamp converts to a reading between the readings around it.
#[test]
fn a_deferred_stamp_converts_between_the_readings_around_it() {
    let Some(clock) = clock_or_skip("a_deferred_stamp_converts_between_the_readings_around_it")
    else {
        return;
    };
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
    let Some(clock) = clock_or_skip("fork_child_reads_the_same_clock") else {
        return;
    };
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
