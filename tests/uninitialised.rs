//! Before `init`, the signal-safe calls answer without opening anything. A test binary of its
//! own, so no other test has initialised the process-wide clock.

#[test]
fn signal_safe_calls_do_not_initialise() {
    assert_eq!(perfclock::try_now_ns(), None);
    assert_eq!(perfclock::mode(), None);
    assert_eq!(perfclock::error_bound_ns(), u64::MAX);
    let first = perfclock::now_ns();
    assert_ne!(first, 0, "now_ns opens the clock on first use");
    let later = perfclock::try_now_ns().expect("initialised by now_ns");
    assert!(later >= first);
    assert!(perfclock::mode().is_some());
}
