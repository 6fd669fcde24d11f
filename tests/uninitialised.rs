//! Before `init`, the signal-safe calls answer without opening anything. A test binary of its
//! own, so no other test has initialised the process-wide clock.

use perfclock_testutil::{skip, Need};

#[test]
fn signal_safe_calls_do_not_initialise() {
    assert_eq!(perfclock::try_now_ns(), None);
    assert_eq!(perfclock::mode(), None);
    assert_eq!(perfclock::error_bound_ns(), u64::MAX);
    let first = perfclock::now_ns();
    if first == 0 {
        // now_ns tried to open the clock; the error says why there is none.
        let error = perfclock::init().expect_err("now_ns gave 0 without an open error");
        skip("signal_safe_calls_do_not_initialise", Need::Perf, error);
        return;
    }
    let later = perfclock::try_now_ns().expect("initialised by now_ns");
    assert!(later >= first);
    assert!(perfclock::mode().is_some());
}
