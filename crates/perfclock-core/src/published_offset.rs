//! The published paravirt offset: the small file in which root publishes, once per boot, the
//! constant `C` of a KVM guest (perf time = pvclock + `C`), so that processes without access to
//! the kernel log read it instead of measuring it.
//!
//! `C` is fixed for the life of a boot, so the file has a boot id and no heartbeat; a client reads
//! it once, with `read()` (never a mapping: nothing done to the file later can fault a reader).
//!
//! # Format (ASCII, one `key value` pair a line, in this order, at most [`MAX_BYTES`])
//! ```text
//! perfclock-offset 1
//! boot_id 01234567-89ab-cdef-0123-456789abcdef
//! offset_ns -1234567
//! source kernel-log
//! intersection_ns -1234890 -1234100
//! brackets 400
//! writer_pid 812
//! ```
//! `source` is where the publisher took `C` from (`kernel-log` or `brackets`); `intersection_ns`
//! is the intersection of the kernel-stamped brackets that cross-checked it (it must contain
//! `offset_ns`), `brackets` how many brackets formed it. [`parse`] is pure (the fuzzer drives it
//! with arbitrary bytes) and accepts exactly what [`PublishedOffset::encode`] writes.

use core::fmt::{self, Write as _};

use crate::{BootId, PageDefect};

/// The first line's keyword.
pub const MAGIC: &str = "perfclock-offset";
/// The format version this build reads and writes.
pub const VERSION: u32 = 1;
/// The largest file a reader accepts (an encoded file is under 300 bytes).
pub const MAX_BYTES: usize = 512;

/// Where the publisher took `C` from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffsetOrigin {
    /// The kernel log's `kvm-clock: using sched offset` and `sched_clock: Marking stable`
    /// records, inside the brackets' intersection.
    KernelLog,
    /// The middle of the brackets' intersection.
    Brackets,
}

impl OffsetOrigin {
    /// The word the file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            OffsetOrigin::KernelLog => "kernel-log",
            OffsetOrigin::Brackets => "brackets",
        }
    }

    fn parse(word: &str) -> Option<OffsetOrigin> {
        match word {
            "kernel-log" => Some(OffsetOrigin::KernelLog),
            "brackets" => Some(OffsetOrigin::Brackets),
            _ => None,
        }
    }
}

/// What the file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishedOffset {
    /// The boot `C` belongs to.
    pub boot_id: BootId,
    /// `C`, ns.
    pub offset_ns: i64,
    /// Where the publisher took it from.
    pub origin: OffsetOrigin,
    /// The brackets' intersection that cross-checked it, `[lo, hi]` ns (contains `offset_ns`).
    pub intersection_ns: (i64, i64),
    /// How many brackets formed the intersection (at least one).
    pub brackets: u32,
    /// The publishing process.
    pub writer_pid: u32,
}

impl PublishedOffset {
    /// The file's bytes. Fails (with `fmt::Error`) only if `out` does.
    ///
    /// # Errors
    /// `out`'s.
    pub fn encode(&self, out: &mut impl fmt::Write) -> fmt::Result {
        writeln!(out, "{MAGIC} {VERSION}")?;
        writeln!(out, "boot_id {}", self.boot_id)?;
        writeln!(out, "offset_ns {}", self.offset_ns)?;
        writeln!(out, "source {}", self.origin.as_str())?;
        writeln!(
            out,
            "intersection_ns {} {}",
            self.intersection_ns.0, self.intersection_ns.1
        )?;
        writeln!(out, "brackets {}", self.brackets)?;
        writeln!(out, "writer_pid {}", self.writer_pid)
    }

    /// The bound of `C` the brackets alone give: the larger distance from `offset_ns` to an end
    /// of the intersection, ns.
    pub fn bracket_bound_ns(&self) -> u64 {
        let (lo, hi) = self.intersection_ns;
        let below = self.offset_ns.abs_diff(lo);
        let above = hi.abs_diff(self.offset_ns);
        below.max(above)
    }
}

/// The file's contents, judged: a [`PublishedOffset`] whose fields are consistent, or why not.
/// Does not compare the boot id with this boot's (the caller does).
///
/// # Errors
/// [`PageDefect::Garbage`] naming the first thing wrong, or [`PageDefect::Version`].
pub fn parse(bytes: &[u8]) -> Result<PublishedOffset, PageDefect> {
    if bytes.len() > MAX_BYTES {
        return Err(PageDefect::Garbage("larger than a published offset"));
    }
    let text = core::str::from_utf8(bytes).map_err(|_| PageDefect::Garbage("not text"))?;
    let body = text
        .strip_suffix('\n')
        .ok_or(PageDefect::Garbage("no final newline (incomplete)"))?;
    let mut lines = body.split('\n');
    let mut field = |key: &'static str, what: &'static str| -> Result<&str, PageDefect> {
        let line = lines.next().ok_or(PageDefect::Garbage(what))?;
        match line.split_once(' ') {
            Some((found, value)) if found == key => Ok(value),
            _ => Err(PageDefect::Garbage(what)),
        }
    };
    let version = field(MAGIC, "not a published offset (no perfclock-offset line)")?;
    let version: u32 = number(version, "the version is not a number")?;
    if version != VERSION {
        return Err(PageDefect::Version {
            found: version,
            expected: VERSION,
        });
    }
    let boot_id = canonical_boot_id(field("boot_id", "no boot_id line")?).ok_or(
        PageDefect::Garbage("the boot id is not as the kernel prints it"),
    )?;
    let offset_ns: i64 = number(field("offset_ns", "no offset_ns line")?, "bad offset_ns")?;
    let origin = OffsetOrigin::parse(field("source", "no source line")?).ok_or(
        PageDefect::Garbage("source is neither kernel-log nor brackets"),
    )?;
    let (lo, hi) = field("intersection_ns", "no intersection_ns line")?
        .split_once(' ')
        .ok_or(PageDefect::Garbage("intersection_ns is not two numbers"))?;
    let intersection_ns: (i64, i64) = (
        number(lo, "bad intersection_ns")?,
        number(hi, "bad intersection_ns")?,
    );
    let brackets: u32 = number(field("brackets", "no brackets line")?, "bad brackets")?;
    let writer_pid: u32 = number(field("writer_pid", "no writer_pid line")?, "bad writer_pid")?;
    if lines.next().is_some() {
        return Err(PageDefect::Garbage("lines after writer_pid"));
    }
    if intersection_ns.0 > intersection_ns.1 || brackets == 0 {
        return Err(PageDefect::Garbage("an empty bracket intersection"));
    }
    if !(intersection_ns.0..=intersection_ns.1).contains(&offset_ns) {
        return Err(PageDefect::Garbage(
            "offset_ns outside the bracket intersection",
        ));
    }
    if writer_pid == 0 {
        return Err(PageDefect::Garbage("writer_pid 0"));
    }
    Ok(PublishedOffset {
        boot_id,
        offset_ns,
        origin,
        intersection_ns,
        brackets,
        writer_pid,
    })
}

/// A boot id in the kernel's spelling only (lower-case, dashes where it puts them).
fn canonical_boot_id(text: &str) -> Option<BootId> {
    let boot_id = BootId::parse(text).filter(|_| text.len() == 36)?;
    let mut canonical = Canonical {
        expected: text.as_bytes(),
        matches: true,
    };
    write!(canonical, "{boot_id}").ok()?;
    (canonical.matches && canonical.expected.is_empty()).then_some(boot_id)
}

/// A decimal number in its canonical form only (no sign on zero, no `+`, no leading zeros), so
/// that a file has one spelling.
fn number<T: core::str::FromStr + fmt::Display>(
    text: &str,
    what: &'static str,
) -> Result<T, PageDefect> {
    let value: T = text.parse().map_err(|_| PageDefect::Garbage(what))?;
    let mut canonical = Canonical {
        expected: text.as_bytes(),
        matches: true,
    };
    write!(canonical, "{value}").map_err(|_| PageDefect::Garbage(what))?;
    if canonical.matches && canonical.expected.is_empty() {
        Ok(value)
    } else {
        Err(PageDefect::Garbage(what))
    }
}

/// Compares what is written to it with `expected`, without allocating.
struct Canonical<'a> {
    expected: &'a [u8],
    matches: bool,
}

impl fmt::Write for Canonical<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        match self.expected.strip_prefix(s.as_bytes()) {
            Some(rest) => self.expected = rest,
            None => self.matches = false,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;
    use std::string::String;

    fn sample() -> PublishedOffset {
        PublishedOffset {
            boot_id: BootId::from_words([0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]),
            offset_ns: -1_234_567,
            origin: OffsetOrigin::KernelLog,
            intersection_ns: (-1_234_890, -1_234_100),
            brackets: 400,
            writer_pid: 812,
        }
    }

    fn encoded(offset: &PublishedOffset) -> String {
        let mut text = String::new();
        offset.encode(&mut text).unwrap();
        text
    }

    #[test]
    fn what_is_encoded_parses_back() {
        let text = encoded(&sample());
        assert!(
            text.contains("boot_id 01234567-89ab-cdef-fedc-ba9876543210\n"),
            "{text}"
        );
        assert!(text.len() < MAX_BYTES);
        assert_eq!(parse(text.as_bytes()), Ok(sample()));
        assert_eq!(sample().bracket_bound_ns(), 467);
    }

    #[test]
    fn every_inconsistency_is_refused() {
        let good = encoded(&sample());
        let cases: &[(&str, &str)] = &[
            ("perfclock-offset 1", "perfclock-offset 2"),
            ("offset_ns -1234567", "offset_ns -1234000"),
            ("offset_ns -1234567", "offset_ns -01234567"),
            ("source kernel-log", "source guess"),
            ("boot_id 01234567", "boot_id 01234567-"),
            ("89ab-cdef", "89AB-cdef"),
            ("brackets 400", "brackets 0"),
            ("writer_pid 812", "writer_pid 0"),
            (
                "intersection_ns -1234890 -1234100",
                "intersection_ns -1234100 -1234890",
            ),
        ];
        for (from, to) in cases {
            let bad = good.replace(from, to);
            assert_ne!(bad, good, "{from}");
            assert!(parse(bad.as_bytes()).is_err(), "{to} accepted");
        }
        assert_eq!(
            parse(
                good.replace("perfclock-offset 1", "perfclock-offset 2")
                    .as_bytes()
            ),
            Err(PageDefect::Version {
                found: 2,
                expected: VERSION,
            })
        );
        assert!(
            parse(&good.as_bytes()[..good.len() - 1]).is_err(),
            "incomplete"
        );
        assert!(
            parse(format!("{good}x 1\n").as_bytes()).is_err(),
            "trailing line"
        );
        assert!(parse(b"").is_err());
        assert!(parse(&[b'\n'; MAX_BYTES + 1]).is_err());
    }
}
