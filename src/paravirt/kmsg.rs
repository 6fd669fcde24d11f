//! The two boot constants of a KVM guest's perf clock, read from the kernel log (`/dev/kmsg`).
//!
//! With kvm-clock as sched_clock and a stable sched_clock, the perf clock is
//! `pvclock(tsc) - kvm_sched_clock_offset + __sched_clock_offset`, and the kernel logs both
//! offsets once at boot:
//! - `kvm_sched_clock_init()` (`arch/x86/kernel/kvmclock.c`):
//!   `kvm-clock: using sched offset of N cycles` (N is in nanoseconds: it is a `kvm_clock_read()`);
//! - `__set_sched_clock_stable()` (`kernel/sched/clock.c`):
//!   `sched_clock: Marking stable (a, b)->(c, d)` with `a = tick_gtod`, `b = __gtod_offset`,
//!   `c = tick_raw` and `d = __sched_clock_offset = a + b - c` (checked here as a parse check).
//!
//! `sched_clock: Marking unstable` after the last `Marking stable` means the perf clock is no
//! longer that sum: [`KmsgError::MarkedUnstable`]. Only records of facility 0 (the kernel's) are
//! read: the kernel forces records that user space writes to `/dev/kmsg` to facility 1 (user)
//! at least, so they cannot forge these lines.
//!
//! The parser ([`SchedOffsets::feed`]) is pure and fuzzed (`fuzz/fuzz_targets/kmsg_offsets.rs`);
//! [`read_offset`] is the reader: one record per `read`, `EPIPE` (records overwritten while we
//! read) skipped, nonblocking until `EAGAIN`.

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;

/// Where the kernel log is read.
pub const KMSG_PATH: &str = "/dev/kmsg";

/// One `/dev/kmsg` record's header fields and message (`Documentation/ABI/testing/dev-kmsg`:
/// `prio,seq,ts_usec,flags[,...];message\n` then continuation lines that start with a space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KmsgRecord<'a> {
    /// `prio >> 3`: 0 for the kernel's own records.
    pub facility: u32,
    /// The record's sequence number.
    pub seq: u64,
    /// The message's first line (the kernel escapes non-printable bytes as `\xNN`).
    pub message: &'a [u8],
}

/// Parses one record as `read` returned it; `None` for anything that is not one.
pub fn parse_record(bytes: &[u8]) -> Option<KmsgRecord<'_>> {
    let semicolon = bytes.iter().position(|&b| b == b';')?;
    let (header, rest) = (&bytes[..semicolon], &bytes[semicolon + 1..]);
    let mut fields = header.split(|&b| b == b',');
    let prio = parse_decimal(fields.next()?)?;
    let seq = parse_decimal(fields.next()?)?;
    let message_end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    Some(KmsgRecord {
        facility: u32::try_from(prio >> 3).ok()?,
        seq,
        message: &rest[..message_end],
    })
}

/// `kvm-clock: using sched offset of N cycles` and `sched_clock: Marking stable (a, b)->(c, d)`,
/// as found so far in the log, in order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedOffsets {
    /// `kvm_sched_clock_offset`, ns.
    pub kvm_sched_offset_ns: Option<u64>,
    /// The last `Marking stable` record's four numbers.
    pub marking_stable: Option<[i64; 4]>,
    /// A `Marking unstable` record came after the last `Marking stable`.
    pub unstable_after_stable: bool,
    /// A `Marking stable` record whose `d` is not `a + b - c`.
    pub inconsistent: Option<[i64; 4]>,
}

const KVM_OFFSET_PREFIX: &[u8] = b"kvm-clock: using sched offset of ";
const KVM_OFFSET_SUFFIX: &[u8] = b" cycles";
const STABLE_PREFIX: &[u8] = b"sched_clock: Marking stable (";
const UNSTABLE_PREFIX: &[u8] = b"sched_clock: Marking unstable";

impl SchedOffsets {
    /// Takes one record (the bytes of one `read` of `/dev/kmsg`); ignores records of any
    /// facility but the kernel's and every other message.
    pub fn feed(&mut self, record: &[u8]) {
        let Some(record) = parse_record(record) else {
            return;
        };
        if record.facility != 0 {
            return;
        }
        let message = trim_end(record.message);
        if let Some(rest) = message.strip_prefix(KVM_OFFSET_PREFIX) {
            if let Some(number) = rest.strip_suffix(KVM_OFFSET_SUFFIX) {
                if let Some(ns) = parse_decimal(number) {
                    self.kvm_sched_offset_ns = Some(ns);
                }
            }
        } else if let Some(rest) = message.strip_prefix(STABLE_PREFIX) {
            if let Some(numbers) = parse_stable(rest) {
                let [a, b, c, d] = numbers;
                let expected = a.checked_add(b).and_then(|sum| sum.checked_sub(c));
                if expected == Some(d) {
                    self.marking_stable = Some(numbers);
                    self.unstable_after_stable = false;
                } else {
                    self.inconsistent = Some(numbers);
                }
            }
        } else if message.starts_with(UNSTABLE_PREFIX) && self.marking_stable.is_some() {
            self.unstable_after_stable = true;
        }
    }

    /// `C = __sched_clock_offset - kvm_sched_clock_offset`, ns.
    ///
    /// # Errors
    /// A [`KmsgError`] naming the missing or contradicting line.
    pub fn offset(&self) -> Result<i64, KmsgError> {
        if let Some(numbers) = self.inconsistent {
            return Err(KmsgError::Inconsistent(numbers));
        }
        let kvm = self
            .kvm_sched_offset_ns
            .ok_or(KmsgError::NoKvmSchedOffset)?;
        let [_, _, _, sched_clock_offset] =
            self.marking_stable.ok_or(KmsgError::NoMarkingStable)?;
        if self.unstable_after_stable {
            return Err(KmsgError::MarkedUnstable);
        }
        i64::try_from(kvm)
            .ok()
            .and_then(|kvm| sched_clock_offset.checked_sub(kvm))
            .ok_or(KmsgError::OutOfRange)
    }
}

/// Reads every record `/dev/kmsg` still holds and returns the offsets found.
///
/// # Errors
/// [`KmsgError::Unreadable`] if it cannot be opened or a read fails (other than `EPIPE`).
pub fn read_offsets() -> Result<SchedOffsets, KmsgError> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(KMSG_PATH)
        .map_err(|error| KmsgError::Unreadable {
            errno: error.raw_os_error().unwrap_or(0),
        })?;
    let mut offsets = SchedOffsets::default();
    // A record is at most about 1 KiB of text plus its dictionary; `read` fails with EINVAL if
    // the buffer is too small for one.
    let mut buffer = vec![0u8; 16 * 1024];
    // Bounded: the ring holds at most its size in records; a log written faster than we read
    // would otherwise keep us here.
    for _ in 0..1_000_000 {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => offsets.feed(&buffer[..n]),
            Err(error) if error.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => {
                return Err(KmsgError::Unreadable {
                    errno: error.raw_os_error().unwrap_or(0),
                })
            }
        }
    }
    Ok(offsets)
}

/// [`read_offsets`] then [`SchedOffsets::offset`]: `C` in ns.
///
/// # Errors
/// As both.
pub fn read_offset() -> Result<i64, KmsgError> {
    read_offsets()?.offset()
}

fn trim_end(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &bytes[..end]
}

/// An unsigned decimal of at most 19 digits (no sign, no spaces).
fn parse_decimal(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 19 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// A signed decimal (`%lld`).
fn parse_signed(bytes: &[u8]) -> Option<i64> {
    let bytes = trim_end(bytes);
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    let bytes = &bytes[start..];
    let (negative, digits) = match bytes.strip_prefix(b"-") {
        Some(digits) => (true, digits),
        None => (false, bytes),
    };
    let magnitude = i64::try_from(parse_decimal(digits)?).ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// `a, b)->(c, d)` (what follows the prefix).
fn parse_stable(rest: &[u8]) -> Option<[i64; 4]> {
    let arrow = rest.windows(4).position(|w| w == b")->(")?;
    let (left, right) = (&rest[..arrow], &rest[arrow + 4..]);
    let right = right.strip_suffix(b")")?;
    let (a, b) = split_pair(left)?;
    let (c, d) = split_pair(right)?;
    Some([a, b, c, d])
}

fn split_pair(pair: &[u8]) -> Option<(i64, i64)> {
    let comma = pair.iter().position(|&b| b == b',')?;
    Some((
        parse_signed(&pair[..comma])?,
        parse_signed(&pair[comma + 1..])?,
    ))
}

/// Why the kernel log gave no offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KmsgError {
    /// `/dev/kmsg` could not be opened or read (errno): `kernel.dmesg_restrict = 1` without
    /// `CAP_SYSLOG`, or a container without the device.
    Unreadable {
        /// The errno.
        errno: i32,
    },
    /// No `kvm-clock: using sched offset of N cycles` from the kernel: not kvm-clock's
    /// sched_clock, or the record was overwritten since boot.
    NoKvmSchedOffset,
    /// No `sched_clock: Marking stable` from the kernel (never stable, or overwritten).
    NoMarkingStable,
    /// `sched_clock: Marking unstable` after the last `Marking stable`.
    MarkedUnstable,
    /// A `Marking stable (a, b)->(c, d)` with `d != a + b - c`: not the line this parser knows.
    Inconsistent([i64; 4]),
    /// The difference does not fit an `i64`.
    OutOfRange,
}

impl fmt::Display for KmsgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KmsgError::Unreadable { errno } => write!(
                f,
                "{KMSG_PATH} is unreadable ({}; kernel.dmesg_restrict = 1 needs CAP_SYSLOG)",
                io::Error::from_raw_os_error(*errno)
            ),
            KmsgError::NoKvmSchedOffset => f.write_str(
                "the kernel log has no 'kvm-clock: using sched offset' record (not a kvm-clock \
                 sched_clock, or the record was overwritten since boot)",
            ),
            KmsgError::NoMarkingStable => f.write_str(
                "the kernel log has no 'sched_clock: Marking stable' record (overwritten since \
                 boot, or sched_clock never stable)",
            ),
            KmsgError::MarkedUnstable => f.write_str(
                "the kernel log says 'sched_clock: Marking unstable' after 'Marking stable'",
            ),
            KmsgError::Inconsistent([a, b, c, d]) => write!(
                f,
                "the kernel log's 'Marking stable ({a}, {b})->({c}, {d})' has d != a + b - c"
            ),
            KmsgError::OutOfRange => f.write_str("the logged offsets' difference overflows"),
        }
    }
}

impl std::error::Error for KmsgError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The records of this project's guest (kernel 6.18), as `/dev/kmsg` returns them.
    const KVM_LINE: &[u8] = b"6,7,0,-;kvm-clock: using sched offset of 70626496 cycles\n";
    const STABLE_LINE: &[u8] =
        b"6,402,481531,-;sched_clock: Marking stable (476016508, 1542558)->(510341990, -32782924)\n";

    fn offsets_of(records: &[&[u8]]) -> SchedOffsets {
        let mut offsets = SchedOffsets::default();
        for record in records {
            offsets.feed(record);
        }
        offsets
    }

    #[test]
    fn this_guests_log_gives_its_offset() {
        let offsets = offsets_of(&[KVM_LINE, b"6,8,1,-;unrelated\n", STABLE_LINE]);
        assert_eq!(offsets.offset(), Ok(-32_782_924 - 70_626_496));
    }

    #[test]
    fn a_record_with_a_dictionary_parses() {
        let record =
            b"6,402,481531,-,caller=T1;sched_clock: Marking stable (1, 2)->(3, 0)\n SUBSYSTEM=x\n";
        let parsed = parse_record(record).unwrap();
        assert_eq!(parsed.facility, 0);
        assert_eq!(parsed.seq, 402);
        assert_eq!(
            parsed.message,
            b"sched_clock: Marking stable (1, 2)->(3, 0)"
        );
    }

    #[test]
    fn user_space_records_are_ignored() {
        // Facility 1 (user): what a `echo ... > /dev/kmsg` becomes.
        let forged = b"14,9,2,-;kvm-clock: using sched offset of 1 cycles\n";
        let offsets = offsets_of(&[KVM_LINE, STABLE_LINE, forged]);
        assert_eq!(offsets.kvm_sched_offset_ns, Some(70_626_496));
    }

    #[test]
    fn missing_lines_are_named() {
        assert_eq!(
            offsets_of(&[STABLE_LINE]).offset(),
            Err(KmsgError::NoKvmSchedOffset)
        );
        assert_eq!(
            offsets_of(&[KVM_LINE]).offset(),
            Err(KmsgError::NoMarkingStable)
        );
    }

    #[test]
    fn unstable_after_stable_refuses() {
        let unstable: &[u8] = b"4,500,900000,-;sched_clock: Marking unstable (1, 2)<-(3, 4)\n";
        assert_eq!(
            offsets_of(&[KVM_LINE, STABLE_LINE, unstable]).offset(),
            Err(KmsgError::MarkedUnstable)
        );
        // Unstable first, then stable: the stable one stands.
        assert!(offsets_of(&[KVM_LINE, unstable, STABLE_LINE])
            .offset()
            .is_ok());
    }

    #[test]
    fn an_inconsistent_marking_stable_refuses() {
        let wrong: &[u8] = b"6,402,1,-;sched_clock: Marking stable (1, 2)->(3, 5)\n";
        assert_eq!(
            offsets_of(&[KVM_LINE, wrong]).offset(),
            Err(KmsgError::Inconsistent([1, 2, 3, 5]))
        );
    }

    #[test]
    fn garbage_is_no_record() {
        for bytes in [
            &b""[..],
            b";",
            b"x,1,2,-;m",
            b"6;m",
            b"99999999999999999999,1,2,-;m",
            b"6,1,2,-;kvm-clock: using sched offset of -5 cycles",
            b"6,1,2,-;sched_clock: Marking stable (9223372036854775807, 1)->(0, 0)",
        ] {
            let offsets = offsets_of(&[bytes]);
            assert_eq!(offsets.kvm_sched_offset_ns, None, "{bytes:?}");
            assert_eq!(offsets.marking_stable, None, "{bytes:?}");
        }
    }
}
