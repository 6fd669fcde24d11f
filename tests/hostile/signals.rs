//! Signals: a SIGPROF handler that reads the clock fires at a high rate while two threads read
//! it in loops. No deadlock (a watchdog kills a stuck child), no read that fails, and no value
//! going back on any thread.
//!
//! SIGPROF comes from two sources at once: `setitimer(ITIMER_PROF)` (process-directed, at the
//! kernel's tick granularity, as profilers use it) and, for the high rate, one POSIX timer per
//! reader thread on CLOCK_MONOTONIC every [`TIMER_INTERVAL_NS`] delivering SIGPROF to that thread
//! (`SIGEV_THREAD_ID`). (A thread that sends signals with `pthread_kill` was tried first: on 2
//! shared cores most of its signals merge into one still pending, and it steals a core.) "Going back" is checked per thread against what that thread
//! saw before: each loop read against the thread's previous loop read and against every handler
//! read that finished on the thread before it began; each handler read against the interrupted
//! thread's last stored loop read and the previous handler read on the thread.
// The report counts the refiner's republishes (`Clock::calibrated`, built with `calibrated`
// only).
#![cfg(feature = "calibrated")]

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hostile::{child_case, run_child, watchdog};
use perfclock_testutil::hostile;
use perfclock_testutil::{child_skipped, skip_child, Need};

/// The readers run at least this long, and on until [`TARGET_HANDLER_READS`] or [`RUN_AT_MOST`].
const RUN_FOR: Duration = Duration::from_secs(3);
/// Handler reads to reach before stopping (a loaded machine delivers fewer per second).
const TARGET_HANDLER_READS: u64 = 100_000;
/// The longest the readers run.
const RUN_AT_MOST: Duration = Duration::from_secs(15);
/// Fewer handler reads than this means the signals did not really fire: the test fails.
const MIN_HANDLER_READS: u64 = 20_000;
/// Fewer loop reads than this per reader means a reader was starved: the test fails.
const MIN_LOOP_READS: u64 = 100_000;
/// Period of each reader's own SIGPROF timer.
const TIMER_INTERVAL_NS: i64 = 20_000;

#[test]
fn sigprof_handler_reads_while_threads_read() {
    let _turn = perfclock_testutil::one_at_a_time();
    let test = perfclock_testutil::test_path!();
    if child_case().is_some() {
        signal_child(&test);
        return;
    }
    let run = run_child(&test, "storm", Duration::from_secs(60));
    if child_skipped(run.status, &run.stderr) {
        return;
    }
    run.expect_success("SIGNALS-OK");
}

thread_local! {
    /// The last value this thread's loop stored (0 before the first).
    static LOOP_LAST: Cell<u64> = const { Cell::new(0) };
    /// The last value a handler read on this thread.
    static HANDLER_LAST: Cell<u64> = const { Cell::new(0) };
}

static HANDLER_READS: AtomicU64 = AtomicU64::new(0);
static HANDLER_FAILED: AtomicU64 = AtomicU64::new(0);
static HANDLER_BACK: AtomicU64 = AtomicU64::new(0);
static HANDLER_WORST_BACK_NS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_sigprof(_signal: libc::c_int) {
    // Only loads, the counter and TLS cells without destructors: async-signal-safe.
    let Some(now) = perfclock::try_now_ns() else {
        HANDLER_FAILED.fetch_add(1, Ordering::Relaxed);
        return;
    };
    HANDLER_READS.fetch_add(1, Ordering::Relaxed);
    let before = LOOP_LAST.with(Cell::get).max(HANDLER_LAST.with(Cell::get));
    if now < before {
        HANDLER_BACK.fetch_add(1, Ordering::Relaxed);
        HANDLER_WORST_BACK_NS.fetch_max(before - now, Ordering::Relaxed);
    }
    HANDLER_LAST.with(|last| last.set(now));
}

#[derive(Debug, Default)]
struct LoopReport {
    reads: u64,
    failed: u64,
    back: u64,
    worst_back_ns: u64,
}

fn reader_loop(clock: &perfclock::Clock, stop: &AtomicBool) -> LoopReport {
    let mut report = LoopReport::default();
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..1_000 {
            let handler_before = HANDLER_LAST.with(Cell::get);
            let Ok(now) = clock.now_ns() else {
                report.failed += 1;
                continue;
            };
            report.reads += 1;
            let before = LOOP_LAST.with(Cell::get).max(handler_before);
            if now < before {
                report.back += 1;
                report.worst_back_ns = report.worst_back_ns.max(before - now);
            }
            LOOP_LAST.with(|last| last.set(now));
        }
    }
    report
}

fn install_handler() {
    // SAFETY: a zeroed sigaction is valid; the handler is a plain `extern "C" fn` that only
    // does async-signal-safe work; SA_RESTART keeps interrupted system calls of other threads
    // going.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigprof as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut()),
            0
        );
    }
}

fn set_prof_timer(interval_us: i64) {
    let interval = libc::timeval {
        tv_sec: 0,
        tv_usec: interval_us,
    };
    let timer = libc::itimerval {
        it_interval: interval,
        it_value: interval,
    };
    // SAFETY: a valid itimerval; the old value is not wanted.
    let rc = unsafe { libc::setitimer(libc::ITIMER_PROF, &timer, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "setitimer: {}", std::io::Error::last_os_error());
}

/// A CLOCK_MONOTONIC timer that sends SIGPROF to the thread that created it. Deleted on drop.
struct ThreadTimer(libc::timer_t);

impl ThreadTimer {
    fn start(interval_ns: i64) -> Self {
        // SAFETY: a zeroed sigevent is valid; the fields set select thread-directed SIGPROF.
        let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
        event.sigev_notify = libc::SIGEV_THREAD_ID;
        event.sigev_signo = libc::SIGPROF;
        // SAFETY: gettid has no preconditions.
        event.sigev_notify_thread_id = unsafe { libc::gettid() };
        let mut timer: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid pointers to a live sigevent and an out-parameter.
        let rc = unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut timer) };
        assert_eq!(rc, 0, "timer_create: {}", std::io::Error::last_os_error());
        let period = libc::timespec {
            tv_sec: 0,
            tv_nsec: interval_ns,
        };
        let spec = libc::itimerspec {
            it_interval: period,
            it_value: period,
        };
        // SAFETY: `timer` was just created; `spec` is a valid itimerspec.
        let rc = unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) };
        assert_eq!(rc, 0, "timer_settime: {}", std::io::Error::last_os_error());
        ThreadTimer(timer)
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        // SAFETY: deletes our own timer once.
        unsafe { libc::timer_delete(self.0) };
    }
}

fn signal_child(test: &str) {
    watchdog(30);
    let clock = match perfclock::init() {
        Ok(clock) => clock,
        Err(error) => skip_child(test, Need::Perf, error),
    };
    println!(
        "mode {:?}, bound {} ns",
        clock.mode(),
        clock.error_bound_ns()
    );
    install_handler();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let reports = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let stop = &stop;
                scope.spawn(move || {
                    let timer = ThreadTimer::start(TIMER_INTERVAL_NS);
                    let report = reader_loop(clock, stop);
                    drop(timer);
                    report
                })
            })
            .collect();
        set_prof_timer(100);
        while started.elapsed() < RUN_FOR
            || (HANDLER_READS.load(Ordering::Relaxed) < TARGET_HANDLER_READS
                && started.elapsed() < RUN_AT_MOST)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        set_prof_timer(0);
        stop.store(true, Ordering::Relaxed);
        let reports: Vec<LoopReport> = readers
            .into_iter()
            .map(|r| r.join().expect("reader thread"))
            .collect();
        reports
    });
    let elapsed = started.elapsed();
    let handler_reads = HANDLER_READS.load(Ordering::Relaxed);
    let handler_failed = HANDLER_FAILED.load(Ordering::Relaxed);
    let handler_back = HANDLER_BACK.load(Ordering::Relaxed);
    let refinements = clock.calibrated().map(|c| c.stats().refinements);
    println!(
        "{elapsed:?}: handler: {handler_reads} reads, \
         {handler_failed} failed, {handler_back} went back (worst {} ns); loops: {reports:?}; \
         refinements meanwhile: {refinements:?}",
        HANDLER_WORST_BACK_NS.load(Ordering::Relaxed)
    );
    assert!(
        handler_reads >= MIN_HANDLER_READS,
        "the signals barely fired: {handler_reads} handler reads"
    );
    assert_eq!(handler_failed, 0, "reads in the handler failed");
    assert_eq!(handler_back, 0, "a handler read went back");
    for report in &reports {
        assert!(
            report.reads >= MIN_LOOP_READS,
            "a reader barely ran: {report:?}"
        );
        assert_eq!(report.failed, 0, "loop reads failed: {report:?}");
        assert_eq!(report.back, 0, "a loop read went back: {report:?}");
    }
    println!("SIGNALS-OK");
}
