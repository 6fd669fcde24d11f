//! A jitdump as perf reads it, whoever wrote it (perfclock's writers, V8/Node, CPython, .NET,
//! Wasmtime, LLVM's listener, perf's own JVMTI agent): read record by record, and copied with
//! only some of its code loads, its timestamps in another clock, or another pid.
//!
//! Those writers stamp their records with `CLOCK_MONOTONIC` (flags 0), which `perf inject
//! --jit` accepts only from a recording made with `perf record -k 1`; or with the raw counter
//! (`JITDUMP_FLAGS_ARCH_TIMESTAMP`), which needs a `PERF_RECORD_TIME_CONV` that a default
//! recording lacks where the kernel withholds the conversion. [`DumpReader`] reads a dump's
//! header and then one whole record at a time from any reader, within a length the caller
//! knows (a file's size when it was opened); [`copy`] writes a copy as a [`CopyPolicy`] says:
//! the code loads it keeps (with the debug-info and unwinding records before each, which perf
//! applies to the next load), each record's timestamp (the same, or mapped to the counter
//! value the recording's TIME_CONV converts to the same perf time), and the pid. Nothing else
//! of the dump changes.
//!
//! Memory is one record and the records waiting for the next load's fate, each bounded
//! ([`MAX_RECORD_BYTES`], [`MAX_HELD_BYTES`]): a dump of any length streams through. The
//! format is read with linux-perf-data's header and record parsers; the reading itself is this
//! module's, because that crate's `JitDumpReader` asserts on a header longer than its buffer
//! and reserves whatever size a record claims.

use std::io::{self, Read, Write};

use linux_perf_data::jitdump::{JitDumpHeader, JitDumpRecordHeader};
use linux_perf_data::linux_perf_event_reader::RawData;
use linux_perf_data::Endianness;

use crate::error::ForeignDumpError;

/// `JITDUMP_FLAGS_ARCH_TIMESTAMP` (perf's `jitdump.h`): record timestamps are counter values.
pub const FLAGS_ARCH_TIMESTAMP: u64 = 1;
/// `JIT_CODE_LOAD`'s record type.
pub const JIT_CODE_LOAD: u32 = 0;
/// `JIT_CODE_DEBUG_INFO`'s and `JIT_CODE_UNWINDING_INFO`'s: they describe the next code load.
pub const DESCRIBES_NEXT_LOAD: [u32; 2] = [2, 4];
/// The longest header read: perf's is 40 bytes; the format lets it grow, not by pages.
pub const MAX_HEADER_BYTES: u32 = 4096;
/// The longest record read: one function's code, name and header (runtimes emit at most a few
/// MiB per function).
pub const MAX_RECORD_BYTES: u32 = 64 << 20;
/// The most bytes of records held back while waiting for the code load they describe.
pub const MAX_HELD_BYTES: usize = 64 << 20;

/// The size of a record's header (`id`, `total_size`, `timestamp`).
const RECORD_HEADER_BYTES: usize = JitDumpRecordHeader::SIZE;
/// The offset of the header's `pid` (after magic, version, total_size, elf_mach, pad1).
const HEADER_PID_AT: usize = 20;
/// The offset of the header's `flags` (after pid and timestamp).
const HEADER_FLAGS_AT: usize = 32;
/// The offset of a record's `timestamp` in its header.
const RECORD_TIMESTAMP_AT: usize = 8;
/// A `JIT_CODE_LOAD`'s `pid` and `tid`, the first two fields of its body.
const LOAD_PID_AT: usize = RECORD_HEADER_BYTES;
const LOAD_TID_AT: usize = RECORD_HEADER_BYTES + 4;
/// Where `code_addr` and `code_size` are in a `JIT_CODE_LOAD` (after pid, tid, vma).
const LOAD_CODE_ADDR_AT: usize = RECORD_HEADER_BYTES + 16;

/// One whole record, borrowed from the reader until the next is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Where its header starts in the dump.
    pub offset: u64,
    /// Its type (`JIT_CODE_LOAD` is 0, `JIT_CODE_MOVE` 1, `JIT_CODE_DEBUG_INFO` 2,
    /// `JIT_CODE_CLOSE` 3, `JIT_CODE_UNWINDING_INFO` 4).
    pub kind: u32,
    /// Its timestamp, in the dump's clock.
    pub timestamp: u64,
    /// For a `JIT_CODE_LOAD`, the code's address and size.
    pub code: Option<(u64, u64)>,
    /// Its bytes, header included.
    pub bytes: &'a [u8],
}

/// A jitdump read from `R`, one whole record at a time.
#[derive(Debug)]
pub struct DumpReader<R> {
    reader: io::Take<R>,
    header: JitDumpHeader,
    header_bytes: Vec<u8>,
    big_endian: bool,
    /// Where the next record starts.
    offset: u64,
    /// The current record's bytes.
    record: Vec<u8>,
}

impl<R: Read> DumpReader<R> {
    /// Reads the header of the dump `reader` yields, of which at most `len` bytes are read.
    ///
    /// # Errors
    /// [`ForeignDumpError::Header`] if it does not start with a jitdump header of at most
    /// [`MAX_HEADER_BYTES`]; [`ForeignDumpError::Read`] if reading fails.
    pub fn new(reader: R, len: u64) -> Result<Self, ForeignDumpError> {
        let mut reader = reader.take(len);
        let mut start = [0u8; 12];
        read_whole(&mut reader, &mut start)?
            .then_some(())
            .ok_or_else(|| ForeignDumpError::Header("shorter than a header".to_owned()))?;
        let big_endian = match &start[..4] {
            b"JiTD" => true,
            b"DTiJ" => false,
            _ => return Err(ForeignDumpError::Header("no JiTD magic".to_owned())),
        };
        let size_bytes = [start[8], start[9], start[10], start[11]];
        let total_size = if big_endian {
            u32::from_be_bytes(size_bytes)
        } else {
            u32::from_le_bytes(size_bytes)
        };
        if !(JitDumpHeader::SIZE as u32..=MAX_HEADER_BYTES).contains(&total_size) {
            return Err(ForeignDumpError::Header(format!(
                "a header of {total_size} bytes"
            )));
        }
        let mut header_bytes = vec![0u8; total_size as usize];
        header_bytes[..12].copy_from_slice(&start);
        read_whole(&mut reader, &mut header_bytes[12..])?
            .then_some(())
            .ok_or_else(|| ForeignDumpError::Header("shorter than its header".to_owned()))?;
        let header = JitDumpHeader::parse(RawData::Single(&header_bytes))
            .map_err(|error| ForeignDumpError::Header(error.to_string()))?;
        Ok(DumpReader {
            reader,
            header,
            header_bytes,
            big_endian,
            offset: u64::from(total_size),
            record: Vec::new(),
        })
    }

    /// The writer's pid, as its header gives it.
    pub fn pid(&self) -> u32 {
        self.header.pid
    }

    /// The header's flags.
    pub fn flags(&self) -> u64 {
        self.header.flags
    }

    /// Whether the records hold counter values (`JITDUMP_FLAGS_ARCH_TIMESTAMP`).
    pub fn has_arch_timestamps(&self) -> bool {
        self.header.flags & FLAGS_ARCH_TIMESTAMP != 0
    }

    /// The next whole record; `None` at the end, or where the last record is cut off (one
    /// still being written), where perf's reader stops too.
    ///
    /// # Errors
    /// [`ForeignDumpError::RecordSize`] for a record shorter than its own header or longer than
    /// [`MAX_RECORD_BYTES`]; [`ForeignDumpError::Read`].
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, ForeignDumpError> {
        let mut head = [0u8; RECORD_HEADER_BYTES];
        if !read_whole(&mut self.reader, &mut head)? {
            return Ok(None);
        }
        let endian = if self.big_endian {
            Endianness::BigEndian
        } else {
            Endianness::LittleEndian
        };
        let parsed = JitDumpRecordHeader::parse(endian, RawData::Single(&head))
            .map_err(|error| ForeignDumpError::Read(error.kind()))?;
        let size = parsed.total_size;
        if (size as usize) < RECORD_HEADER_BYTES || size > MAX_RECORD_BYTES {
            return Err(ForeignDumpError::RecordSize {
                offset: self.offset,
                size,
            });
        }
        self.record.clear();
        self.record.extend_from_slice(&head);
        self.record.resize(size as usize, 0);
        if !read_whole(&mut self.reader, &mut self.record[RECORD_HEADER_BYTES..])? {
            return Ok(None);
        }
        let offset = self.offset;
        self.offset += u64::from(size);
        let kind = parsed.record_type.0;
        let code =
            (kind == JIT_CODE_LOAD && self.record.len() >= LOAD_CODE_ADDR_AT + 16).then(|| {
                (
                    self.u64_at(&self.record, LOAD_CODE_ADDR_AT),
                    self.u64_at(&self.record, LOAD_CODE_ADDR_AT + 8),
                )
            });
        Ok(Some(Record {
            offset,
            kind,
            timestamp: parsed.timestamp,
            code,
            bytes: &self.record,
        }))
    }

    fn u64_at(&self, bytes: &[u8], at: usize) -> u64 {
        let word: [u8; 8] = bytes[at..at + 8].try_into().unwrap_or([0; 8]);
        if self.big_endian {
            u64::from_be_bytes(word)
        } else {
            u64::from_le_bytes(word)
        }
    }
}

/// Fills `buf` from `reader`: `false` if the input ends first (nothing or part was read).
fn read_whole(reader: &mut impl Read, buf: &mut [u8]) -> Result<bool, ForeignDumpError> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => return Ok(false),
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(ForeignDumpError::Read(error.kind())),
        }
    }
    Ok(true)
}

/// What a copy keeps and changes; see [`copy`].
pub trait CopyPolicy {
    /// What makes a copy fail (with [`ForeignDumpError`] and write errors among them).
    type Error: From<ForeignDumpError> + From<io::Error>;

    /// Whether the code load `record` goes into the copy.
    fn keep_load(&mut self, record: &Record<'_>) -> bool;

    /// The timestamp the copy gives `record`, asked of every record, kept or not: an error
    /// leaves the dump uncopied.
    fn timestamp(&mut self, record: &Record<'_>) -> Result<u64, Self::Error>;

    /// Whether the copy's timestamps are counter values (its header then says so).
    fn arch_timestamps(&self) -> bool;

    /// The pid the copy names in its header and in each load's `pid` and `tid` (`None`: as the
    /// dump has them).
    fn pid(&self) -> Option<u32>;
}

/// How many code loads a dump held, and how many its copy keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyCounts {
    /// Code loads read.
    pub loads: usize,
    /// Code loads written.
    pub kept: usize,
}

/// Writes to `out` the copy of `dump` (its header read, no record yet) that `policy` asks for:
/// exactly the code loads it keeps, each with the debug-info and unwinding records before it
/// that describe it, and every other record (moves, close, types perf does not know), in the
/// dump's order; a partial last record is left out.
///
/// # Errors
/// The first error of `policy`, of reading `dump` ([`ForeignDumpError`]) or of writing `out`;
/// [`ForeignDumpError::HeldTooLong`] when more than [`MAX_HELD_BYTES`] of records wait for the
/// load they describe. `out` then holds part of a copy: discard it.
pub fn copy<R: Read, P: CopyPolicy>(
    dump: &mut DumpReader<R>,
    out: &mut impl Write,
    policy: &mut P,
) -> Result<CopyCounts, P::Error> {
    let big_endian = dump.big_endian;
    let mut header = dump.header_bytes.clone();
    if policy.arch_timestamps() {
        let flags = dump.header.flags | FLAGS_ARCH_TIMESTAMP;
        put_u64(&mut header, HEADER_FLAGS_AT, flags, big_endian);
    }
    let pid = policy.pid();
    if let Some(pid) = pid {
        put_u32(&mut header, HEADER_PID_AT, pid, big_endian);
    }
    out.write_all(&header)?;
    let mut held = Held::default();
    let mut counts = CopyCounts::default();
    let mut bytes = Vec::new();
    while let Some(record) = dump.next_record()? {
        let stamp = policy.timestamp(&record)?;
        let is_load = record.kind == JIT_CODE_LOAD;
        let keep = is_load && policy.keep_load(&record);
        let describes = DESCRIBES_NEXT_LOAD.contains(&record.kind);
        let offset = record.offset;
        bytes.clear();
        bytes.extend_from_slice(record.bytes);
        put_u64(&mut bytes, RECORD_TIMESTAMP_AT, stamp, big_endian);
        if let (true, Some(pid)) = (is_load, pid) {
            if bytes.len() >= LOAD_TID_AT + 4 {
                put_u32(&mut bytes, LOAD_PID_AT, pid, big_endian);
                put_u32(&mut bytes, LOAD_TID_AT, pid, big_endian);
            }
        }
        if is_load {
            counts.loads += 1;
            counts.kept += usize::from(keep);
            held.write(out, keep)?;
            if keep {
                out.write_all(&bytes)?;
            }
        } else if describes || !held.is_empty() {
            held.push(&bytes, describes, offset)?;
        } else {
            out.write_all(&bytes)?;
        }
    }
    // Describing records with no load after them stay, as perf would read them.
    held.write(out, true)?;
    Ok(counts)
}

/// Records after a describing one, waiting for the next load's fate.
#[derive(Debug, Default)]
struct Held {
    bytes: Vec<u8>,
    /// Each record's end in `bytes`, and whether it describes the next load.
    records: Vec<(usize, bool)>,
}

impl Held {
    fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn push(
        &mut self,
        record: &[u8],
        describes: bool,
        offset: u64,
    ) -> Result<(), ForeignDumpError> {
        if self.bytes.len() + record.len() > MAX_HELD_BYTES {
            return Err(ForeignDumpError::HeldTooLong {
                offset,
                limit: MAX_HELD_BYTES,
            });
        }
        self.bytes.extend_from_slice(record);
        self.records.push((self.bytes.len(), describes));
        Ok(())
    }

    /// Writes what waited, the describing records only if `keep_described`, and empties.
    fn write(&mut self, out: &mut impl Write, keep_described: bool) -> io::Result<()> {
        let mut start = 0;
        for &(end, describes) in &self.records {
            if keep_described || !describes {
                out.write_all(&self.bytes[start..end])?;
            }
            start = end;
        }
        self.bytes.clear();
        self.records.clear();
        Ok(())
    }
}

fn put_u64(bytes: &mut [u8], at: usize, value: u64, big_endian: bool) {
    let encoded = if big_endian {
        value.to_be_bytes()
    } else {
        value.to_le_bytes()
    };
    bytes[at..at + 8].copy_from_slice(&encoded);
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32, big_endian: bool) {
    let encoded = if big_endian {
        value.to_be_bytes()
    } else {
        value.to_le_bytes()
    };
    bytes[at..at + 4].copy_from_slice(&encoded);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian dump of pid 4242 with `flags` and `records` (kind, timestamp, body).
    fn dump(flags: u64, records: &[(u32, u64, Vec<u8>)]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"DTiJ");
        for word in [1u32, 40, 62, 0, 4242] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend_from_slice(&123u64.to_le_bytes());
        bytes.extend_from_slice(&flags.to_le_bytes());
        for (kind, timestamp, body) in records {
            bytes.extend_from_slice(&kind.to_le_bytes());
            bytes.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&timestamp.to_le_bytes());
            bytes.extend_from_slice(body);
        }
        bytes
    }

    /// A CODE_LOAD body: pid, tid, vma, code_addr, code_size, code_index, name, code.
    fn load(addr: u64, size: u64, index: u64) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_le_bytes());
        body.extend_from_slice(&8u32.to_le_bytes());
        for word in [addr, addr, size, index] {
            body.extend_from_slice(&word.to_le_bytes());
        }
        body.extend_from_slice(b"f\0");
        body.extend(std::iter::repeat_n(0xc3, size as usize));
        body
    }

    fn reader(bytes: &[u8]) -> DumpReader<&[u8]> {
        DumpReader::new(bytes, bytes.len() as u64).unwrap()
    }

    /// A record's kind, timestamp and code.
    type Seen = (u32, u64, Option<(u64, u64)>);

    /// Every record's (kind, timestamp, code).
    fn records(bytes: &[u8]) -> Vec<Seen> {
        let mut reader = reader(bytes);
        let mut out = Vec::new();
        while let Some(r) = reader.next_record().unwrap() {
            out.push((r.kind, r.timestamp, r.code));
        }
        out
    }

    /// A policy of closures over the record.
    struct Policy<K, T> {
        keep: K,
        stamp: T,
        arch: bool,
        pid: Option<u32>,
    }

    impl<K: FnMut(&Record<'_>) -> bool, T: FnMut(u64) -> Result<u64, ForeignDumpError>> CopyPolicy
        for Policy<K, T>
    {
        type Error = ForeignDumpError;
        fn keep_load(&mut self, record: &Record<'_>) -> bool {
            (self.keep)(record)
        }
        fn timestamp(&mut self, record: &Record<'_>) -> Result<u64, ForeignDumpError> {
            (self.stamp)(record.timestamp)
        }
        fn arch_timestamps(&self) -> bool {
            self.arch
        }
        fn pid(&self) -> Option<u32> {
            self.pid
        }
    }

    impl From<io::Error> for ForeignDumpError {
        fn from(error: io::Error) -> Self {
            ForeignDumpError::Read(error.kind())
        }
    }

    fn copied(bytes: &[u8], policy: &mut impl CopyPolicy<Error = ForeignDumpError>) -> Vec<u8> {
        let mut out = Vec::new();
        copy(&mut reader(bytes), &mut out, policy).unwrap();
        out
    }

    #[test]
    fn a_monotonic_dump_is_copied_in_the_arch_form() {
        let bytes = dump(
            0,
            &[
                (0, 1_000, load(0x10, 4, 0)),
                (2, 1_500, vec![8; 24]),
                (3, 2_000, vec![]),
            ],
        );
        let r = reader(&bytes);
        assert_eq!(r.pid(), 4242);
        assert!(!r.has_arch_timestamps());
        let mut policy = Policy {
            keep: |_: &Record<'_>| true,
            stamp: |t| Ok(t * 3),
            arch: true,
            pid: None,
        };
        let copy = copied(&bytes, &mut policy);
        assert!(reader(&copy).has_arch_timestamps());
        let stamps: Vec<u64> = records(&copy).iter().map(|r| r.1).collect();
        assert_eq!(stamps, [3_000, 4_500, 6_000]);
        // Everything but the flags and the timestamps is the original's.
        let mut expected = bytes.clone();
        expected[HEADER_FLAGS_AT] |= 1;
        let mut at = 40;
        for stamp in [3_000u64, 4_500, 6_000] {
            expected[at + 8..at + 16].copy_from_slice(&stamp.to_le_bytes());
            at += u32::from_le_bytes(expected[at + 4..at + 8].try_into().unwrap()) as usize;
        }
        assert_eq!(copy, expected);
    }

    #[test]
    fn a_partial_last_record_is_left_out_as_perf_leaves_it() {
        let mut bytes = dump(0, &[(0, 10, vec![1; 8])]);
        let whole = bytes.len();
        bytes.extend_from_slice(&dump(0, &[(0, 20, vec![2; 64])])[40..60]);
        assert_eq!(records(&bytes).len(), 1);
        let mut policy = Policy {
            keep: |_: &Record<'_>| true,
            stamp: Ok,
            arch: false,
            pid: None,
        };
        assert_eq!(copied(&bytes, &mut policy).len(), whole);
        // Bytes past the length given are not read.
        let mut short = DumpReader::new(&bytes[..], whole as u64 - 1).unwrap();
        assert_eq!(short.next_record().unwrap(), None);
    }

    #[test]
    fn hostile_sizes_are_errors_not_panics() {
        let mut bytes = dump(0, &[(0, 10, vec![1; 8])]);
        bytes[44..48].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(
            reader(&bytes).next_record(),
            Err(ForeignDumpError::RecordSize {
                offset: 40,
                size: 3
            })
        );
        bytes[44..48].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            reader(&bytes).next_record(),
            Err(ForeignDumpError::RecordSize { .. })
        ));
        // A record within the bound that the file does not hold: the end, read no further.
        bytes[44..48].copy_from_slice(&(1u32 << 20).to_le_bytes());
        assert_eq!(reader(&bytes).next_record(), Ok(None));
        let text = b"not a dump at all, not even close to forty bytes";
        assert!(matches!(
            DumpReader::new(&text[..], 48),
            Err(ForeignDumpError::Header(_))
        ));
        let mut long_header = dump(0, &[]);
        long_header[8..12].copy_from_slice(&(MAX_HEADER_BYTES + 1).to_le_bytes());
        assert!(matches!(
            DumpReader::new(&long_header[..], 1 << 20),
            Err(ForeignDumpError::Header(_))
        ));
    }

    #[test]
    fn a_big_endian_dump_keeps_its_byte_order() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"JiTD");
        for word in [1u32, 40, 62, 0, 7] {
            bytes.extend_from_slice(&word.to_be_bytes());
        }
        bytes.extend_from_slice(&0u64.to_be_bytes());
        bytes.extend_from_slice(&0u64.to_be_bytes());
        bytes.extend_from_slice(&3u32.to_be_bytes());
        bytes.extend_from_slice(&24u32.to_be_bytes());
        bytes.extend_from_slice(&5u64.to_be_bytes());
        bytes.extend_from_slice(&[0; 8]);
        assert_eq!(reader(&bytes).pid(), 7);
        let mut policy = Policy {
            keep: |_: &Record<'_>| true,
            stamp: |t| Ok(t + 1),
            arch: true,
            pid: Some(9),
        };
        let copy = copied(&bytes, &mut policy);
        assert_eq!(&copy[20..24], &9u32.to_be_bytes());
        assert_eq!(&copy[32..40], &1u64.to_be_bytes());
        assert_eq!(&copy[48..56], &6u64.to_be_bytes());
    }

    #[test]
    fn only_the_wanted_loads_stay_with_what_describes_them() {
        let bytes = dump(
            0,
            &[
                (2, 1, vec![7; 16]),
                (0, 2, load(0x1000, 16, 0)),
                (4, 3, vec![8; 24]),
                (1, 4, vec![9; 40]),
                (0, 5, load(0x2000, 32, 1)),
                (2, 6, vec![7; 16]),
                (3, 7, vec![]),
            ],
        );
        assert_eq!(
            records(&bytes).iter().map(|r| r.2).collect::<Vec<_>>(),
            [
                None,
                Some((0x1000, 16)),
                None,
                None,
                Some((0x2000, 32)),
                None,
                None
            ]
        );
        let mut policy = Policy {
            keep: |r: &Record<'_>| r.code == Some((0x2000, 32)),
            stamp: Ok,
            arch: false,
            pid: Some(99),
        };
        let mut out = Vec::new();
        let counts = copy(&mut reader(&bytes), &mut out, &mut policy).unwrap();
        assert_eq!(counts, CopyCounts { loads: 2, kept: 1 });
        // The first load and its debug info go; the move between the unwinding record and
        // the second load stays in its place; debug info with no load after it stays.
        let kept: Vec<(u32, u64)> = records(&out).iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(kept, [(4, 3), (1, 4), (0, 5), (2, 6), (3, 7)]);
        let mut copy = reader(&out);
        assert_eq!(copy.pid(), 99);
        while let Some(r) = copy.next_record().unwrap() {
            if r.kind == JIT_CODE_LOAD {
                assert_eq!(&r.bytes[16..24], &[99, 0, 0, 0, 99, 0, 0, 0]);
            }
        }
    }

    #[test]
    fn a_failing_timestamp_stops_the_copy() {
        let bytes = dump(0, &[(0, 10, load(1, 1, 0)), (3, 0, vec![])]);
        let mut policy = Policy {
            keep: |_: &Record<'_>| false,
            stamp: |t| {
                if t == 0 {
                    Err(ForeignDumpError::Header("stamp 0".to_owned()))
                } else {
                    Ok(t)
                }
            },
            arch: true,
            pid: None,
        };
        let mut out = Vec::new();
        assert_eq!(
            copy(&mut reader(&bytes), &mut out, &mut policy),
            Err(ForeignDumpError::Header("stamp 0".to_owned()))
        );
    }

    #[test]
    fn records_held_past_the_bound_are_an_error() {
        let mut bytes = dump(0, &[(2, 1, vec![0; 16])]);
        // Moves (32 MiB) after the debug info, with no load: held until the bound is passed.
        let big = vec![1u8; 32 << 20];
        for _ in 0..3 {
            bytes.extend_from_slice(&dump(0, &[(1, 2, big.clone())])[40..]);
        }
        let mut policy = Policy {
            keep: |_: &Record<'_>| true,
            stamp: Ok,
            arch: false,
            pid: None,
        };
        let mut out = Vec::new();
        assert!(matches!(
            copy(&mut reader(&bytes), &mut out, &mut policy),
            Err(ForeignDumpError::HeldTooLong { .. })
        ));
    }
}
