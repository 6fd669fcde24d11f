//! The published paravirt offset file from arbitrary bytes: a file a client reads but did not
//! write. `parse` must return (never panic); whatever it accepts must encode back to exactly the
//! same bytes (one spelling per file) and have `offset_ns` inside its bracket intersection.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_core::published_offset::{parse, MAX_BYTES};

fuzz_target!(|data: &[u8]| {
    let Ok(offset) = parse(data) else {
        return;
    };
    assert!(data.len() <= MAX_BYTES);
    let (lo, hi) = offset.intersection_ns;
    assert!(lo <= offset.offset_ns && offset.offset_ns <= hi);
    let _ = offset.bracket_bound_ns();
    let mut text = String::new();
    offset.encode(&mut text).expect("a String takes every write");
    assert_eq!(text.as_bytes(), data, "accepted bytes encode back unchanged");
});
