//! The marker-line sanitizer and layout (`perfclock_markers::line`) on arbitrary names from C
//! (bytes that need not be UTF-8): a cleaned name is what `String::from_utf8_lossy` and the
//! `&str` cleaner make of it, valid UTF-8, without control characters, at most MAX_NAME_BYTES;
//! its line parses as samply parses one, to the times and name written; and laid out over
//! several flushes, no line crosses a 4 KiB block and every marker reads back, in order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_markers::line::{
    clean_name, clean_name_bytes, layout, push_line_with, LastLine, BLOCK,
};
use perfclock_markers::line::MAX_NAME_BYTES;

/// Names per input (several blocks' worth of lines, many flushes).
const MAX_NAMES: usize = 64;

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

fn cleaned(name: &[u8]) -> String {
    let mut from_bytes = Vec::new();
    clean_name_bytes(name, &mut from_bytes);
    let mut from_text = Vec::new();
    clean_name(&String::from_utf8_lossy(name), &mut from_text);
    assert_eq!(from_bytes, from_text);
    assert!(from_bytes.len() <= MAX_NAME_BYTES);
    let text = String::from_utf8(from_bytes).expect("a cleaned name is UTF-8");
    assert!(!text.chars().any(char::is_control), "{text:?}");
    text
}

fuzz_target!(|data: &[u8]| {
    // Names are the input's 0xfe-separated pieces (0xfe never occurs in UTF-8); the first bytes
    // of the input choose the times and how many lines go into each flush.
    let Some((head, rest)) = data.split_first_chunk::<9>() else {
        return;
    };
    let base = u64::from_le_bytes(head[..8].try_into().unwrap());
    let per_flush = usize::from(head[8] % 16) + 1;
    let mut file: Vec<u8> = Vec::new();
    let mut last: Option<LastLine> = None;
    let mut expected = Vec::new();
    // At most MAX_NAMES names: every flush may start a new 4 KiB block, so an input of
    // thousands of one-byte names would cost megabytes of layout per run and nothing more.
    let names: Vec<&[u8]> = rest.split(|&b| b == 0xfe).take(MAX_NAMES).collect();
    for chunk in names.chunks(per_flush) {
        let mut lines = Vec::new();
        for (i, name) in chunk.iter().enumerate() {
            let text = cleaned(name);
            if text.is_empty() {
                continue; // the writer refuses empty names
            }
            let (start, end) = (base.wrapping_add(expected.len() as u64), base | i as u64);
            let (start, end) = (start.min(end), start.max(end));
            let at = lines.len();
            push_line_with(&mut lines, start, end, |out| clean_name_bytes(name, out));
            let line = std::str::from_utf8(&lines[at..lines.len() - 1]).unwrap();
            assert_eq!(parse_like_samply(line), Some((start, end, text.as_str())));
            expected.push((start, end, text));
        }
        let plan = layout(file.len() as u64, last.as_ref(), &lines);
        file.truncate(plan.offset as usize);
        file.extend_from_slice(&plan.bytes);
        plan.update_last_line(&mut last);
    }
    let mut offset = 0;
    let mut got = Vec::new();
    for line in file.split_inclusive(|&b| b == b'\n') {
        assert_eq!(
            offset / BLOCK,
            (offset + line.len() - 1) / BLOCK,
            "a line crosses a block"
        );
        offset += line.len();
        let text = std::str::from_utf8(line)
            .unwrap()
            .strip_suffix('\n')
            .unwrap();
        let (s, e, n) = parse_like_samply(text).expect("samply parses every line");
        got.push((s, e, n.to_owned()));
    }
    assert_eq!(got, expected);
});
