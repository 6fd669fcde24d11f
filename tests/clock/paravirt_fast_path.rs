//! The process-wide fast path in paravirt mode (the tagged pointer to the pvclock entry): every
//! read lies between the exact conversions of counter values read around it, and a deferred
//! stamp converts exactly.

use perfclock::{CounterStamp, Mode};
use perfclock_core::counter;
use perfclock_testutil::{ok_or_skip, skip, Need};

#[test]
fn fast_path_reads_the_pvclock_entry_exactly() {
    let test = "fast_path_reads_the_pvclock_entry_exactly";
    let Some(clock) = ok_or_skip(test, Need::Perf, perfclock::init()) else {
        return;
    };
    if clock.mode() != Mode::Paravirt {
        skip(
            test,
            Need::ParavirtMode,
            format_args!("the clock opened in {:?} mode", clock.mode()),
        );
        return;
    }
    let exact = |cycles: u64| clock.cycles_to_ns(cycles).expect("exact conversion");
    for _ in 0..100_000 {
        let before = counter::read_counter_ordered().unwrap();
        let ordered = perfclock::now_ns_ordered();
        let unordered = perfclock::try_now_ns().expect("a reading");
        let after = counter::read_counter_ordered().unwrap();
        let (low, high) = (exact(before), exact(after));
        assert!(low <= ordered && ordered <= high, "{low} {ordered} {high}");
        // An unordered read may run a little ahead of `before`'s fence, never past `after`.
        assert!(unordered <= high, "{unordered} > {high}");
        let stamp = CounterStamp::now();
        assert_eq!(stamp.ns(), Some(exact(stamp.cycles())));
    }
    assert_eq!(perfclock::mode(), Some(Mode::Paravirt));
    assert_eq!(perfclock::error_bound_ns(), clock.error_bound_ns());
}
