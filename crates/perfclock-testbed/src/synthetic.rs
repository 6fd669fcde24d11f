//! Wrap-around of a narrow counter (`cap_user_time_short`), with a synthetic page.
//!
//! The guests' counters are 56 bits or wider and never wrap during a run, so the wrap is
//! tested here: a page of ordinary memory written with the kernel's protocol
//! ([`PageWriter`]), a 12-bit counter that wraps many times, and a "kernel" that re-anchors
//! `time_cycles`/`time_zero` the way arm64's sched_clock does (`epoch_cyc`, `epoch_ns -
//! cyc_to_ns(epoch_cyc)`) before the counter has advanced by half its range.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use perfclock_core::page::PerfEventMmapPage;
use perfclock_core::{PageReader, PageWriter, ReadError, TimeConversion};

const BITS: u32 = 12;
const MASK: u64 = (1 << BITS) - 1;
/// 16 ns per tick with shift 0: every conversion is exact, so the truth is simply `16 * ticks`.
const MULT: u32 = 16;
const SHIFT: u16 = 0;
const BASE_NS: u64 = 1_000_000_007;

/// The true perf time after `ticks` ticks since the start.
fn truth(ticks: u64) -> u64 {
    BASE_NS + u64::from(MULT) * ticks
}

/// The conversion the "kernel" publishes when it anchors at `ticks`.
fn anchored(ticks: u64) -> TimeConversion {
    let epoch_cyc = ticks & MASK;
    let epoch_ns = truth(ticks);
    let zero = epoch_ns.wrapping_sub(epoch_cyc * u64::from(MULT));
    TimeConversion::new_short(MULT, SHIFT, zero, epoch_cyc, MASK).unwrap()
}

fn page() -> NonNull<PerfEventMmapPage> {
    // Leaked: readers on other threads may still hold it when a test ends.
    NonNull::from(Box::leak(Box::new(PerfEventMmapPage::zeroed())))
}

#[test]
fn wrapped_counter_converts_through_the_page() {
    let page = page();
    // SAFETY: the page is leaked (lives forever) and this is its only writer.
    let writer = unsafe { PageWriter::new(page) };
    // SAFETY: as above; accessed only through the writer and readers.
    let reader = unsafe { PageReader::new(page) };
    let mut last = 0;
    // Ten wraps of the 12-bit counter, re-anchoring every quarter range.
    for ticks in 0..10 * (MASK + 1) {
        if ticks % ((MASK + 1) / 4) == 0 {
            writer.publish(&anchored(ticks));
        }
        let raw = ticks & MASK;
        let reading = reader.read_with(|| raw).unwrap();
        assert!(reading.conversion.is_short());
        let ns = reading.ns();
        assert_eq!(ns, truth(ticks), "ticks={ticks} raw={raw}");
        assert!(ns > last || ticks == 0, "not increasing at ticks={ticks}");
        last = ns;
    }
}

#[test]
fn wrap_just_past_the_anchor_is_not_a_jump_back() {
    // Anchored 5 ticks before the wrap; the counter reads small values after it.
    let anchor = 3 * (MASK + 1) - 5;
    let conv = anchored(anchor);
    for d in 0..=MASK {
        let ticks = anchor + d;
        assert_eq!(conv.cycles_to_ns(ticks & MASK), truth(ticks), "d={d}");
    }
    // A full range later the value aliases back to the anchor: that is what time_mask means,
    // and why the kernel re-anchors well within the range.
    assert_eq!(conv.cycles_to_ns((anchor + MASK + 1) & MASK), truth(anchor));
}

#[test]
fn inverse_of_a_wrapped_reading_gives_its_counter_value() {
    let anchor = 7 * (MASK + 1) - 100;
    let conv = anchored(anchor);
    for d in [0, 1, 99, 100, 101, 2000, MASK] {
        let raw = (anchor + d) & MASK;
        let ns = conv.cycles_to_ns(raw);
        // ns_to_cycles answers in the unwrapped domain (time_cycles + delta); masked, it is
        // the raw counter value that produced `ns`.
        let back = conv.ns_to_cycles(ns);
        assert_eq!(back & MASK, raw, "d={d}");
        assert_eq!(back, (anchor & MASK) + d, "d={d}");
    }
}

#[test]
fn readers_never_see_time_go_back_while_the_kernel_re_anchors() {
    let page = page();
    // SAFETY: leaked page, single writer (the thread below).
    let writer = unsafe { PageWriter::new(page) };
    // SAFETY: as above.
    let reader = unsafe { PageReader::new(page) };
    let ticks = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    writer.publish(&anchored(0));
    std::thread::scope(|scope| {
        let (ticks, done) = (&ticks, &done);
        scope.spawn(move || {
            // The "kernel": the counter advances, and the page is re-anchored at every step, so
            // a reader delayed across a step is caught by the seqlock and retries.
            for t in 1..20 * (MASK + 1) {
                ticks.store(t, Ordering::Release);
                writer.publish(&anchored(t));
            }
            done.store(true, Ordering::Release);
        });
        let mut last = 0;
        let mut reads = 0u64;
        while !done.load(Ordering::Acquire) || reads == 0 {
            let mut seen = 0;
            let reading = reader.read_with(|| {
                seen = ticks.load(Ordering::Acquire);
                seen & MASK
            });
            // A writer that republishes back to back can keep a reader retrying past its bound
            // on a loaded machine: that is the typed error by design, not a wrong time.
            let reading = match reading {
                Err(ReadError::Contended) => continue,
                other => other.unwrap(),
            };
            let ns = reading.ns();
            assert_eq!(ns, truth(seen), "counter value {seen}");
            assert!(ns >= last, "went back from {last} to {ns}");
            last = ns;
            reads += 1;
        }
    });
}
