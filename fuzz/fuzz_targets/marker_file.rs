//! A marker file as `perfclock report` reads it (`perfclock_report::markers`), on arbitrary
//! bytes: it is another process's file. Reading never fails and never panics; every line is a
//! span, an instant or counted as no marker, and the spans are exactly the lines samply 0.13
//! parses (an end not before the start, at most `MAX_LINE_BYTES`). Each sample, at a time the
//! input picks, gets the innermost span holding it (the latest start, then the earliest end,
//! then the later line) and `during` says whether any span of the wanted name holds it, as a
//! brute-force reading of the same spans says.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_report::markers::{Spans, MAX_LINE_BYTES};
use perfclock_report::{Frame, FrameKind, Sample};

/// samply 0.13's reading of a marker line (`process_marker_span_line`).
fn parse_like_samply(line: &str) -> Option<(u64, u64, &str)> {
    let mut split = line.splitn(3, ' ');
    let start = split.next()?;
    let end = split.next()?;
    let name = split.next()?;
    if name.is_empty() {
        return None;
    }
    Some((start.parse().ok()?, end.parse().ok()?, name))
}

fuzz_target!(|data: &[u8]| {
    let (head, file) = data.split_at(data.len().min(16));
    let mut spans = Spans::new();
    let counts = spans
        .read_spans(7, file)
        .expect("reading bytes in memory does not fail");
    let lines: Vec<&[u8]> = file
        .split_inclusive(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\n").unwrap_or(line))
        .collect();
    assert_eq!(
        counts.spans + counts.instants + counts.unreadable,
        lines.len()
    );
    // The spans by brute force: (start, end, name, line).
    let expected: Vec<(u64, u64, &str, usize)> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.len() <= MAX_LINE_BYTES)
        .filter_map(|(at, line)| {
            let (start, end, name) = parse_like_samply(std::str::from_utf8(line).ok()?)?;
            (end > start).then_some((start, end, name, at))
        })
        .collect();
    assert_eq!(counts.spans, expected.len());
    for name in spans.names() {
        assert!(!name.is_empty() && !name.contains('\n'), "{name:?}");
    }

    // Samples at times near the spans' edges, picked by the input's head.
    let edges: Vec<u64> = expected.iter().flat_map(|&(s, e, _, _)| [s, e]).collect();
    let times: Vec<u64> = head
        .iter()
        .map(|&b| {
            let edge = edges
                .get(usize::from(b) % edges.len().max(1))
                .copied()
                .unwrap_or(0);
            edge.wrapping_add(u64::from(b % 3)).wrapping_sub(1)
        })
        .collect();
    let mut samples: Vec<Sample> = times
        .iter()
        .enumerate()
        .map(|(i, &time_ns)| Sample {
            comm: "a".into(),
            pid: if i % 5 == 4 { 8 } else { 7 },
            tid: 7,
            time_ns,
            period: 1,
            event: "cpu-clock".into(),
            frames: vec![Frame::new(1, "f", "/a", FrameKind::Native)],
            marker: None,
        })
        .collect();
    let wanted = expected.first().map(|&(_, _, name, _)| name.to_owned());
    let inside = spans.assign(&mut samples, wanted.as_slice());
    for (sample, inside) in samples.iter().zip(inside) {
        let holding: Vec<&(u64, u64, &str, usize)> = expected
            .iter()
            .filter(|&&(s, e, _, _)| sample.pid == 7 && s <= sample.time_ns && sample.time_ns < e)
            .collect();
        let innermost = holding
            .iter()
            .max_by_key(|&&&(s, e, _, at)| (s, std::cmp::Reverse(e), at))
            .map(|&&(_, _, name, _)| name);
        assert_eq!(sample.marker.as_deref(), innermost, "{sample:?}");
        let during = holding
            .iter()
            .any(|&&(_, _, name, _)| Some(name) == wanted.as_deref());
        assert_eq!(inside, during, "{sample:?}");
    }
});
