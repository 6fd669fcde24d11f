//! File descriptors exhausted: a child process lowers RLIMIT_NOFILE to its lowest free
//! descriptor, so the first `perf_event_open` fails with EMFILE; `init()` must return
//! `Error::PerfEvent` of kind `FdExhausted` (C code -3) saying to raise the limit. A sweep then allows 1 to
//! 12 more descriptors (one child each), so the limit bites later: in the calibrated clock's
//! ground-truth events, or not at all. Each must end in a working clock or a typed error: no
//! panic, no hang, no clock that reads garbage.
// The +1 case's error is calibration's (`Error::Calibration`, built with `calibrated` only).
#![cfg(feature = "calibrated")]

use std::time::Duration;

use hostile::{child_case, run_child, watchdog};
use perfclock::error_chain as chain;
use perfclock::{Clock, Error};
use perfclock_os::ErrorKind;
use perfclock_testutil::hostile;

/// Descriptors allowed above the lowest free one, in the sweep.
const SWEEP: u32 = 12;

#[test]
fn fd_exhaustion_is_a_typed_error() {
    let _turn = perfclock_testutil::one_at_a_time();
    if let Some(case) = child_case() {
        let extra: u32 = case.parse().expect("case is a descriptor count");
        fd_child(extra);
        return;
    }
    let test = perfclock_testutil::test_path!();
    let run = run_child(&test, "0", Duration::from_secs(30));
    run.expect_success("FD-OK 0 error FdExhausted");
    let mut outcomes = Vec::new();
    for extra in 1..=SWEEP {
        let run = run_child(&test, &extra.to_string(), Duration::from_secs(30));
        run.expect_success(&format!("FD-OK {extra} "));
        outcomes.push(format!(
            "+{extra}: {}",
            run.field(&format!("FD-OK {extra}")).unwrap_or("?")
        ));
    }
    println!("sweep: {}", outcomes.join("; "));
}

/// The lowest descriptor number that `open` would return now.
fn lowest_free_fd() -> u32 {
    // SAFETY: a NUL-terminated path; the descriptor is closed at once.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open /dev/null");
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    fd as u32
}

fn fd_child(extra: u32) {
    watchdog(20);
    let limit = u64::from(lowest_free_fd() + extra);
    let rlimit = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: a valid, initialised struct.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
    match perfclock::init() {
        Ok(clock) => {
            assert_ne!(extra, 0, "init succeeded without a free descriptor");
            // A clock that opened must read: monotonic, non-zero, signal-safe calls agree.
            let mut last = 0;
            for _ in 0..100_000 {
                let now = clock.now_ns().expect("a read of an opened clock");
                assert!(now >= last, "went back: {now} after {last}");
                last = now;
            }
            let global = perfclock::try_now_ns().expect("try_now_ns after a successful init");
            assert!(global >= last);
            assert!(perfclock::error_bound_ns() < u64::MAX);
            println!("FD-OK {extra} ok {:?}", clock.mode());
        }
        Err(error) => {
            let message = chain(&error);
            println!("limit {limit}: init() -> {error:?}\n  message: {message}");
            assert!(!message.is_empty());
            assert_eq!(perfclock::try_now_ns(), None);
            assert_eq!(perfclock::now_ns(), 0);
            assert_eq!(perfclock::mode(), None);
            assert_eq!(perfclock::error_bound_ns(), u64::MAX);
            let kind = match &error {
                Error::PerfEvent(sys) if sys.kind() == ErrorKind::FdExhausted => {
                    assert_eq!(sys.errno(), libc::EMFILE);
                    // The kind the C ABI maps to PERFCLOCK_E_FD_EXHAUSTED (-3).
                    assert_eq!(
                        error.sys_error().map(|e| e.kind()),
                        Some(ErrorKind::FdExhausted)
                    );
                    assert!(
                        message.contains("RLIMIT_NOFILE") && message.contains("ulimit -n"),
                        "the message does not say what to change: {message}"
                    );
                    "FdExhausted"
                }
                Error::Calibration { reason, .. } => {
                    // The limit bit in the calibrator's own events: the reason must say so.
                    let reason = chain(reason);
                    assert!(
                        reason.contains("EMFILE") || reason.contains("descriptor"),
                        "calibration failure that does not name the descriptor limit: {reason}"
                    );
                    // The C ABI maps the cause's kind: PERFCLOCK_E_FD_EXHAUSTED (-3).
                    assert_eq!(
                        error.sys_error().map(|e| e.kind()),
                        Some(ErrorKind::FdExhausted),
                        "the C code must name the cause: {error:?}"
                    );
                    "Calibration"
                }
                other => panic!("unexpected error for a descriptor limit: {other:?}"),
            };
            if extra == 0 {
                assert_eq!(kind, "FdExhausted", "{error:?}");
                assert_eq!(
                    Clock::open()
                        .err()
                        .and_then(|e| e.sys_error().map(|e| e.kind())),
                    Some(ErrorKind::FdExhausted)
                );
            }
            println!("FD-OK {extra} error {kind}");
        }
    }
}
