//! One marker as one line of samply's format, and the placement of lines in the file.
//!
//! samply (`src/shared/marker_file.rs`) reads `START END NAME` lines (`splitn(3, ' ')`, both times
//! parsed as `u64`, the name non-empty, to the end of the line) and stops reading the file at the
//! first line that is not valid UTF-8 or does not parse. So one bad line hides every marker after
//! it, and a line cut inside its name would show a wrong name: this module makes both impossible.
//!
//! # Why lines never cross a 4 KiB boundary
//! A `write(2)` to a regular file copies page by page and stops between pages when the process
//! gets a fatal signal or the file system runs out of space (`generic_perform_write`), so a write
//! cut short ends on a page boundary of the file. Lines are placed so that every multiple of
//! [`BLOCK`] in the file is also a line boundary: a cut write then leaves whole lines only. A line
//! that would cross a boundary is moved past it by lengthening the line before it with leading
//! zeros in its START field, which samply's `u64` parse ignores.

/// Line placement granularity: a divisor of every Linux page and folio size.
pub const BLOCK: usize = 4096;

/// Longest name kept, in bytes; longer names are cut at a character boundary so a line always
/// fits in one 4 KiB block (see the crate docs on why lines never cross one).
pub const MAX_NAME_BYTES: usize = 1024;

/// Appends `START END NAME\n` to `out`, the name cleaned by [`clean_name`].
pub fn push_line(out: &mut Vec<u8>, start_ns: u64, end_ns: u64, name: &str) {
    push_line_with(out, start_ns, end_ns, |out| clean_name(name, out));
}

/// Appends `START END ` , then whatever `name` appends (a cleaned name), then `\n`.
pub fn push_line_with(
    out: &mut Vec<u8>,
    start_ns: u64,
    end_ns: u64,
    name: impl FnOnce(&mut Vec<u8>),
) {
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(digits.format(start_ns).as_bytes());
    out.push(b' ');
    out.extend_from_slice(digits.format(end_ns).as_bytes());
    out.push(b' ');
    name(out);
    out.push(b'\n');
}

/// Appends `name` with every control character replaced, so a marker stays one line: tab becomes
/// a space, any other control character (newline, carriage return, NUL, DEL, C1) becomes U+FFFD.
/// At most [`MAX_NAME_BYTES`] bytes are appended, cut at a character boundary.
pub fn clean_name(name: &str, out: &mut Vec<u8>) {
    let limit = out.len() + MAX_NAME_BYTES;
    clean_str(name, out, limit);
}

/// As [`clean_name`] for bytes that may not be UTF-8: each invalid sequence becomes one U+FFFD
/// (as [`String::from_utf8_lossy`] does), without allocating.
pub fn clean_name_bytes(name: &[u8], out: &mut Vec<u8>) {
    let limit = out.len() + MAX_NAME_BYTES;
    for chunk in name.utf8_chunks() {
        if !clean_str(chunk.valid(), out, limit) {
            return;
        }
        if !chunk.invalid().is_empty() && !push_char(char::REPLACEMENT_CHARACTER, out, limit) {
            return;
        }
    }
}

/// Appends `name` cleaned, up to `out.len() == limit`; false if it had to stop short.
fn clean_str(name: &str, out: &mut Vec<u8>, limit: usize) -> bool {
    // Fast path: every control character's UTF-8 holds a byte below 0x20, 0x7f (DEL) or 0xc2
    // (the lead byte of C1 controls, U+0080..U+009F); a name without them is copied as is.
    let plain = |b: &u8| *b >= 0x20 && *b != 0x7f && *b != 0xc2;
    if out.len() + name.len() <= limit && name.as_bytes().iter().all(plain) {
        out.extend_from_slice(name.as_bytes());
        return true;
    }
    for c in name.chars() {
        let c = match c {
            '\t' => ' ',
            c if c.is_control() => char::REPLACEMENT_CHARACTER,
            c => c,
        };
        if !push_char(c, out, limit) {
            return false;
        }
    }
    true
}

fn push_char(c: char, out: &mut Vec<u8>, limit: usize) -> bool {
    if out.len() + c.len_utf8() > limit {
        return false;
    }
    let mut utf8 = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
    true
}

/// Room that [`layout_in`] needs for the lines of one thread's buffer (under 20 KiB: the
/// threshold plus one line), their padding (less than one line per block boundary crossed) and
/// a rewritten last line (under one block).
pub const MAX_LAYOUT_BYTES: usize = 64 * 1024;

/// A line already in the file that a flush may rewrite, lengthened, to pad the block it ends in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastLine {
    /// File offset of its first byte.
    pub offset: u64,
    /// Its bytes as written, newline included.
    pub bytes: Vec<u8>,
}

/// Where and what one flush writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// File offset of the first byte of `bytes`: the file's end, or the start of the rewritten
    /// last line.
    pub offset: u64,
    /// Complete lines, none crossing a multiple of [`BLOCK`] in the file.
    pub bytes: Vec<u8>,
    /// Length of the file's last line as rewritten at the start of `bytes` (lengthened), or 0.
    pub rewritten_len: usize,
}

impl Layout {
    /// The last of the whole lines in `bytes[..end]` (`end` just past a newline).
    fn line_ending_at(&self, end: usize) -> Option<LastLine> {
        let before = self.bytes.get(..end.checked_sub(1)?)?;
        let start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        Some(LastLine {
            offset: self.offset + start as u64,
            bytes: self.bytes[start..end].to_vec(),
        })
    }

    /// The layout's last line, or `None` if it is empty.
    pub fn last_line(&self) -> Option<LastLine> {
        self.line_ending_at(self.bytes.len())
    }

    /// Makes `last` the layout's last line if it has one, reusing `last`'s buffer: no
    /// allocation once that buffer has held a line of [`BLOCK`] bytes (a line is shorter).
    pub fn update_last_line(&self, last: &mut Option<LastLine>) {
        let end = self.bytes.len();
        let Some(before) = end.checked_sub(1).map(|e| &self.bytes[..e]) else {
            return;
        };
        let start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let offset = self.offset + start as u64;
        match last {
            Some(line) => {
                line.offset = offset;
                line.bytes.clear();
                line.bytes.extend_from_slice(&self.bytes[start..end]);
            }
            None => {
                let mut bytes = Vec::with_capacity(BLOCK);
                bytes.extend_from_slice(&self.bytes[start..end]);
                *last = Some(LastLine { offset, bytes });
            }
        }
    }

    /// After a write that stopped after `written` bytes: how many bytes of whole lines made it,
    /// and the last of them.
    pub fn whole_prefix(&self, written: usize) -> (usize, Option<LastLine>) {
        let written = written.min(self.bytes.len());
        match self.bytes[..written].iter().rposition(|&b| b == b'\n') {
            Some(i) => (i + 1, self.line_ending_at(i + 1)),
            None => (0, None),
        }
    }

    /// New lines (not the rewritten one) in `bytes[from..]`.
    pub fn new_lines_from(&self, from: usize) -> u64 {
        let from = from.max(self.rewritten_len).min(self.bytes.len());
        self.bytes[from..].iter().filter(|&&b| b == b'\n').count() as u64
    }
}

/// Places `lines` (complete lines, each shorter than [`BLOCK`]) after a file of `file_len` bytes
/// whose last line is `last` (`None` for an empty file). Padding goes into the START field of the
/// line before a boundary; if that line is already in the file it is rewritten. Only the lines
/// around block boundaries are looked at; the rest is copied in runs.
pub fn layout(file_len: u64, last: Option<&LastLine>, lines: &[u8]) -> Layout {
    layout_in(Vec::new(), file_len, last, lines)
}

/// As [`layout`], building the layout's bytes in `out` (emptied first): with room for
/// [`MAX_LAYOUT_BYTES`] it never allocates.
pub fn layout_in(mut out: Vec<u8>, file_len: u64, last: Option<&LastLine>, lines: &[u8]) -> Layout {
    out.clear();
    out.reserve(lines.len() + lines.len() / 16 + 64);
    let mut offset = file_len;
    let mut rewritten_len = 0;
    let mut pos = file_len; // file offset just past `out`
    let mut src = lines;
    while !src.is_empty() {
        let room = BLOCK - block_offset(pos);
        if src.len() <= room {
            out.extend_from_slice(src);
            break;
        }
        // Lines that end at or before the boundary go in whole.
        let whole = src[..room]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        out.extend_from_slice(&src[..whole]);
        src = &src[whole..];
        pos += whole as u64;
        let gap = room - whole;
        if gap == 0 {
            continue;
        }
        // The next line would cross the boundary: lengthen the line before it by `gap` zeros.
        if !out.is_empty() {
            let start = out[..out.len() - 1]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            out.splice(start..start, std::iter::repeat_n(b'0', gap));
            if start == 0 && rewritten_len > 0 {
                rewritten_len += gap;
            }
        } else if let Some(last) = last.filter(|l| l.offset + l.bytes.len() as u64 == file_len) {
            // The file's last line ends where this flush starts, inside this block (lines
            // never cross one): rewrite it lengthened.
            out.resize(gap, b'0');
            out.extend_from_slice(&last.bytes);
            offset = last.offset;
            rewritten_len = out.len();
        } else {
            // The file does not end in a line this writer wrote (cannot happen: the file is
            // created empty): the line goes where it is, unpadded.
            let line = src
                .iter()
                .position(|&b| b == b'\n')
                .map_or(src.len(), |i| i + 1);
            out.extend_from_slice(&src[..line]);
            src = &src[line..];
            pos += line as u64;
            continue;
        }
        pos += gap as u64;
    }
    Layout {
        offset,
        bytes: out,
        rewritten_len,
    }
}

fn block_offset(pos: u64) -> usize {
    // The remainder is below BLOCK, which fits in usize.
    (pos % BLOCK as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_testutil::samply::parse_like_samply;

    fn line(start: u64, end: u64, name: &str) -> Vec<u8> {
        let mut out = Vec::new();
        push_line(&mut out, start, end, name);
        out
    }

    #[test]
    fn names_stay_on_one_line() {
        let l = line(5, 7, "a\nb\rc\td\0e\u{7f}f\u{85}g");
        let text = std::str::from_utf8(&l).unwrap();
        assert_eq!(text.matches('\n').count(), 1);
        assert!(text.ends_with('\n'));
        assert_eq!(
            parse_like_samply(text.trim_end_matches('\n')),
            Some((5, 7, "a\u{fffd}b\u{fffd}c d\u{fffd}e\u{fffd}f\u{fffd}g"))
        );
    }

    #[test]
    fn bytes_are_cleaned_as_their_lossy_text() {
        let cases: [&[u8]; 5] = [
            b"bad \xff\xfe utf8",
            b"\xe2\x82 cut sequence\n",
            b"plain",
            &[0xc2, 0x85, b'a', 0xf0, 0x9f, 0x98],
            &[b'x'; 2000],
        ];
        for bytes in cases {
            let mut from_bytes = Vec::new();
            clean_name_bytes(bytes, &mut from_bytes);
            let mut from_text = Vec::new();
            clean_name(&String::from_utf8_lossy(bytes), &mut from_text);
            assert_eq!(from_bytes, from_text, "{bytes:?}");
        }
    }

    #[test]
    fn long_names_are_cut_at_a_character_boundary() {
        let name = "é".repeat(MAX_NAME_BYTES);
        let l = line(1, 2, &name);
        let text = std::str::from_utf8(&l).unwrap();
        let (_, _, parsed) = parse_like_samply(text.trim_end()).unwrap();
        assert_eq!(parsed.len(), MAX_NAME_BYTES);
        assert!(l.len() < BLOCK);
    }

    #[test]
    fn padded_lines_parse_to_the_same_times() {
        let mut l = vec![b'0'; 3000];
        l.extend_from_slice(&line(123, 456, "x"));
        let text = std::str::from_utf8(&l).unwrap();
        assert_eq!(parse_like_samply(text.trim_end()), Some((123, 456, "x")));
    }

    /// Simulates many flushes of random lines into one file image and checks the invariant.
    #[test]
    fn no_line_crosses_a_block_and_every_line_survives() {
        let mut file: Vec<u8> = Vec::new();
        let mut last: Option<LastLine> = None;
        let mut expected = Vec::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for flush in 0..400 {
            let mut lines = Vec::new();
            let n = (seed % 40) as usize;
            for i in 0..n {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let name_len = (seed >> 40) as usize % 1500;
                let name = "n".repeat(name_len.max(1));
                let (start, end) = (seed >> 20, (seed >> 20) + i as u64);
                push_line(&mut lines, start, end, &name);
                expected.push((
                    start,
                    end,
                    name[..name.len().min(MAX_NAME_BYTES)].to_string(),
                ));
            }
            seed ^= flush;
            let plan = layout(file.len() as u64, last.as_ref(), &lines);
            let at = plan.offset as usize;
            file.truncate(at);
            file.extend_from_slice(&plan.bytes);
            assert!(plan.bytes.is_empty() || plan.bytes.ends_with(b"\n"));
            if let Some(l) = plan.last_line() {
                last = Some(l);
            }
        }
        let mut offset = 0;
        let mut got = Vec::new();
        for l in file.split_inclusive(|&b| b == b'\n') {
            assert_eq!(
                offset / BLOCK,
                (offset + l.len() - 1) / BLOCK,
                "a line crosses a block boundary at {offset}"
            );
            offset += l.len();
            let text = std::str::from_utf8(l).unwrap();
            let (s, e, n) = parse_like_samply(text.strip_suffix('\n').unwrap()).unwrap();
            got.push((s, e, n.to_string()));
        }
        assert_eq!(got, expected);
    }
}
