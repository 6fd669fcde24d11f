//! A jitdump as perf reads it, whoever wrote it (perfclock's writers, V8/Node, CPython, .NET,
//! Wasmtime, LLVM's listener, perf's own JVMTI agent): read, and copied with its record
//! timestamps in another clock, or with only some of its records.
//!
//! Those writers stamp their records with `CLOCK_MONOTONIC` (flags 0), which `perf inject
//! --jit` accepts only from a recording made with `perf record -k 1`; or with the raw counter
//! (`JITDUMP_FLAGS_ARCH_TIMESTAMP`), which needs a `PERF_RECORD_TIME_CONV` that a default
//! recording lacks where the kernel withholds the conversion. [`ForeignDump::parse`] reads a
//! dump's header and record headers; [`ForeignDump::with_counter_timestamps`] writes a copy in
//! the arch form, each timestamp mapped by the caller (for example `CLOCK_MONOTONIC` to the perf
//! clock through pairs taken during the recording, then to the counter value that the
//! recording's TIME_CONV converts back to that perf time); [`ForeignDump::copy`] keeps only the
//! records the caller chooses (the code loads a recording sampled, with the records that
//! describe them). Nothing else of the dump changes.
//!
//! Reading goes through linux-perf-data's jitdump reader; each record header is checked against
//! the bytes at hand before the reader is asked for the record (its reader subtracts the header
//! size from a record's size unchecked, and would reserve whatever size a record claims).

use std::io::Cursor;

use linux_perf_data::jitdump::{JitDumpHeader, JitDumpReader, JitDumpRecordType};
use linux_perf_data::Endianness;

use crate::error::ForeignDumpError;

/// `JITDUMP_FLAGS_ARCH_TIMESTAMP` (perf's `jitdump.h`): record timestamps are counter values.
pub const FLAGS_ARCH_TIMESTAMP: u64 = 1;

/// The size of a record's header (`id`, `total_size`, `timestamp`).
const RECORD_HEADER_BYTES: usize = 16;
/// The offset of the header's `flags` (after magic, version, total_size, elf_mach, pad1, pid,
/// timestamp).
const FLAGS_AT: usize = 32;
/// The offset of a record's `timestamp` in its header.
const RECORD_TIMESTAMP_AT: usize = 8;

/// One record's place in the dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordAt {
    /// Where its header starts.
    pub offset: usize,
    /// Its size, header included.
    pub size: u32,
    /// Its type (`JIT_CODE_LOAD` is 0, `JIT_CODE_MOVE` 1, `JIT_CODE_DEBUG_INFO` 2,
    /// `JIT_CODE_CLOSE` 3, `JIT_CODE_UNWINDING_INFO` 4).
    pub kind: u32,
    /// Its timestamp, in the dump's clock.
    pub timestamp: u64,
    /// For a `JIT_CODE_LOAD`, the code's address and size.
    pub code: Option<(u64, u64)>,
}

/// `JIT_CODE_LOAD`'s record type.
pub const JIT_CODE_LOAD: u32 = 0;
/// `JIT_CODE_DEBUG_INFO`'s and `JIT_CODE_UNWINDING_INFO`'s: they describe the next code load.
pub const DESCRIBES_NEXT_LOAD: [u32; 2] = [2, 4];
/// Where `code_addr` and `code_size` are in a `JIT_CODE_LOAD`'s body (after pid, tid, vma).
const CODE_ADDR_AT: usize = 16;

/// A jitdump's header and the places of its whole records.
#[derive(Debug, Clone)]
pub struct ForeignDump {
    header: JitDumpHeader,
    big_endian: bool,
    records: Vec<RecordAt>,
    /// The whole records end here; bytes after it are a record still being written (or cut
    /// off), which perf's reader stops at too.
    complete_len: usize,
}

impl ForeignDump {
    /// Reads the header and the record headers of `bytes`.
    ///
    /// # Errors
    /// [`ForeignDumpError::Header`] if `bytes` do not start with a jitdump header;
    /// [`ForeignDumpError::RecordSize`] for a record shorter than its own header.
    pub fn parse(bytes: &[u8]) -> Result<Self, ForeignDumpError> {
        let mut reader = JitDumpReader::new(Cursor::new(bytes))
            .map_err(|error| ForeignDumpError::Header(error.to_string()))?;
        let header = reader.header().clone();
        let big_endian = matches!(reader.endian(), Endianness::BigEndian);
        let mut records = Vec::new();
        let mut complete_len = header.total_size as usize;
        loop {
            let offset = reader.next_record_offset();
            let Ok(Some(record_header)) = reader.next_record_header() else {
                break;
            };
            let size = record_header.total_size;
            if (size as usize) < RECORD_HEADER_BYTES {
                return Err(ForeignDumpError::RecordSize { offset, size });
            }
            let end = offset.saturating_add(u64::from(size));
            if end > bytes.len() as u64 {
                break;
            }
            match reader.next_record() {
                Ok(Some(record)) => {
                    let offset = record.start_offset as usize;
                    let kind = record.record_type.0;
                    let body = offset + RECORD_HEADER_BYTES;
                    let code = (kind == JIT_CODE_LOAD && end as usize >= body + CODE_ADDR_AT + 16)
                        .then(|| {
                            let at = body + CODE_ADDR_AT;
                            (
                                read_u64(bytes, at, big_endian),
                                read_u64(bytes, at + 8, big_endian),
                            )
                        });
                    records.push(RecordAt {
                        offset,
                        size: record.record_size,
                        kind,
                        timestamp: record.timestamp,
                        code,
                    });
                    complete_len = end as usize;
                }
                _ => break,
            }
        }
        Ok(ForeignDump {
            header,
            big_endian,
            records,
            complete_len,
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

    /// The whole records, in file order.
    pub fn records(&self) -> &[RecordAt] {
        &self.records
    }

    /// The timestamp of the first code load, if there is one.
    pub fn first_code_load(&self) -> Option<u64> {
        self.records
            .iter()
            .find(|record| record.kind == JitDumpRecordType::JIT_CODE_LOAD.0)
            .map(|record| record.timestamp)
    }

    /// A copy of `bytes` (the bytes this dump was parsed from) with
    /// `JITDUMP_FLAGS_ARCH_TIMESTAMP` set and every whole record's timestamp replaced by
    /// `counter_of(timestamp)`; a partial last record is left out.
    ///
    /// # Errors
    /// The first error `counter_of` returns; [`ForeignDumpError::NotTheParsedBytes`] (wrapped
    /// by the caller's `From`) if `bytes` are shorter than what was parsed.
    pub fn with_counter_timestamps<E: From<ForeignDumpError>>(
        &self,
        bytes: &[u8],
        counter_of: impl FnMut(u64) -> Result<u64, E>,
    ) -> Result<Vec<u8>, E> {
        self.copy(bytes, |_, _| true, Some(counter_of))
    }

    /// A copy of `bytes` (the bytes this dump was parsed from) with the header and the whole
    /// records `keep` accepts (given each one's index in [`ForeignDump::records`]), in order;
    /// with `counter_of`, in the arch form as
    /// [`ForeignDump::with_counter_timestamps`] makes it.
    ///
    /// # Errors
    /// As [`ForeignDump::with_counter_timestamps`].
    pub fn copy<E: From<ForeignDumpError>>(
        &self,
        bytes: &[u8],
        mut keep: impl FnMut(usize, &RecordAt) -> bool,
        mut counter_of: Option<impl FnMut(u64) -> Result<u64, E>>,
    ) -> Result<Vec<u8>, E> {
        let parsed = bytes
            .get(..self.complete_len)
            .ok_or(ForeignDumpError::NotTheParsedBytes)?;
        let header_len = self.header.total_size as usize;
        let mut copy = parsed[..header_len].to_vec();
        if counter_of.is_some() {
            let flags = self.header.flags | FLAGS_ARCH_TIMESTAMP;
            self.put_u64(&mut copy, FLAGS_AT, flags);
        }
        for (index, record) in self.records.iter().enumerate() {
            if !keep(index, record) {
                continue;
            }
            let at = copy.len();
            copy.extend_from_slice(&parsed[record.offset..record.offset + record.size as usize]);
            if let Some(counter_of) = counter_of.as_mut() {
                let counter = counter_of(record.timestamp)?;
                self.put_u64(&mut copy, at + RECORD_TIMESTAMP_AT, counter);
            }
        }
        Ok(copy)
    }

    /// Which records to keep so that exactly the code loads `wanted` accepts reach perf, each
    /// with the debug-info and unwinding records before it that describe it (perf applies
    /// those to the next load), and every other record (moves, close, unknown types) kept.
    pub fn keep_loads(&self, mut wanted: impl FnMut(&RecordAt) -> bool) -> Vec<bool> {
        let mut keep = vec![true; self.records.len()];
        let mut describing = Vec::new();
        for (index, record) in self.records.iter().enumerate() {
            if DESCRIBES_NEXT_LOAD.contains(&record.kind) {
                describing.push(index);
            } else if record.kind == JIT_CODE_LOAD {
                let kept = wanted(record);
                keep[index] = kept;
                for &described in &describing {
                    keep[described] = kept;
                }
                describing.clear();
            }
        }
        keep
    }

    /// Reads the u64 at `at` in the dump's byte order (within a parsed record).
    #[cfg(test)]
    fn get_u64(&self, bytes: &[u8], at: usize) -> u64 {
        read_u64(bytes, at, self.big_endian)
    }

    /// Writes `value` at `at` in the dump's byte order (`at + 8` lies within `bytes`: a field of
    /// the parsed header or of a whole record).
    fn put_u64(&self, bytes: &mut [u8], at: usize, value: u64) {
        let encoded = if self.big_endian {
            value.to_be_bytes()
        } else {
            value.to_le_bytes()
        };
        bytes[at..at + 8].copy_from_slice(&encoded);
    }
}

/// The u64 at `at` of `bytes` (8 bytes there, checked by the caller) in the given byte order.
fn read_u64(bytes: &[u8], at: usize, big_endian: bool) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    if big_endian {
        u64::from_be_bytes(word)
    } else {
        u64::from_le_bytes(word)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian dump: header, then (kind, timestamp, body) records.
    /// A dump of pid 4242 with `flags` and `records` (kind, timestamp, body).
    pub(super) fn dump(flags: u64, records: &[(u32, u64, &[u8])]) -> Vec<u8> {
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

    #[test]
    fn a_monotonic_dump_is_copied_in_the_arch_form() {
        let bytes = dump(
            0,
            &[(0, 1_000, &[7; 40]), (2, 1_500, &[8; 24]), (3, 2_000, &[])],
        );
        let parsed = ForeignDump::parse(&bytes).unwrap();
        assert_eq!(parsed.pid(), 4242);
        assert!(!parsed.has_arch_timestamps());
        assert_eq!(parsed.first_code_load(), Some(1_000));
        let copy = parsed
            .with_counter_timestamps::<ForeignDumpError>(&bytes, |t| Ok(t * 3))
            .unwrap();
        let reparsed = ForeignDump::parse(&copy).unwrap();
        assert!(reparsed.has_arch_timestamps());
        let stamps: Vec<u64> = reparsed.records().iter().map(|r| r.timestamp).collect();
        assert_eq!(stamps, [3_000, 4_500, 6_000]);
        // Everything but the flags and the timestamps is the original's.
        let mut expected = bytes.clone();
        expected[FLAGS_AT] |= 1;
        for (record, stamp) in parsed.records().iter().zip([3_000u64, 4_500, 6_000]) {
            let at = record.offset + RECORD_TIMESTAMP_AT;
            expected[at..at + 8].copy_from_slice(&stamp.to_le_bytes());
        }
        assert_eq!(copy, expected);
    }

    #[test]
    fn a_partial_last_record_is_left_out_as_perf_leaves_it() {
        let mut bytes = dump(0, &[(0, 10, &[1; 8])]);
        let whole = bytes.len();
        bytes.extend_from_slice(&dump(0, &[(0, 20, &[2; 64])])[40..60]);
        let parsed = ForeignDump::parse(&bytes).unwrap();
        assert_eq!(parsed.records().len(), 1);
        let copy = parsed
            .with_counter_timestamps::<ForeignDumpError>(&bytes, Ok)
            .unwrap();
        assert_eq!(copy.len(), whole);
    }

    #[test]
    fn hostile_sizes_are_errors_not_panics() {
        let mut bytes = dump(0, &[(0, 10, &[1; 8])]);
        bytes[44..48].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            ForeignDump::parse(&bytes),
            Err(ForeignDumpError::RecordSize { size: 3, .. })
        ));
        let mut huge = dump(0, &[(0, 10, &[1; 8])]);
        huge[44..48].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(ForeignDump::parse(&huge).unwrap().records().len(), 0);
        assert!(matches!(
            ForeignDump::parse(b"not a dump at all, not even close to forty bytes"),
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
        bytes.extend_from_slice(&0u32.to_be_bytes());
        bytes.extend_from_slice(&24u32.to_be_bytes());
        bytes.extend_from_slice(&5u64.to_be_bytes());
        bytes.extend_from_slice(&[0; 8]);
        let parsed = ForeignDump::parse(&bytes).unwrap();
        assert_eq!(parsed.pid(), 7);
        let copy = parsed
            .with_counter_timestamps::<ForeignDumpError>(&bytes, |t| Ok(t + 1))
            .unwrap();
        assert_eq!(&copy[32..40], &1u64.to_be_bytes());
        assert_eq!(&copy[48..56], &6u64.to_be_bytes());
    }
}

#[cfg(test)]
mod keep_tests {
    use super::*;

    /// A CODE_LOAD body: pid, tid, vma, code_addr, code_size, code_index, name, code.
    fn load(addr: u64, size: u64, index: u64) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes());
        for word in [addr, addr, size, index] {
            body.extend_from_slice(&word.to_le_bytes());
        }
        body.extend_from_slice(b"f\0");
        body.extend(std::iter::repeat_n(0xc3, size as usize));
        body
    }

    fn dump(records: &[(u32, u64, Vec<u8>)]) -> Vec<u8> {
        let records: Vec<(u32, u64, &[u8])> = records
            .iter()
            .map(|(kind, timestamp, body)| (*kind, *timestamp, body.as_slice()))
            .collect();
        super::tests::dump(0, &records)
    }

    #[test]
    fn only_the_wanted_loads_stay_with_what_describes_them() {
        let bytes = dump(&[
            (2, 1, vec![7; 16]),
            (0, 2, load(0x1000, 16, 0)),
            (4, 3, vec![8; 24]),
            (0, 4, load(0x2000, 32, 1)),
            (1, 5, vec![9; 40]),
            (3, 6, vec![]),
        ]);
        let parsed = ForeignDump::parse(&bytes).unwrap();
        let codes: Vec<_> = parsed.records().iter().map(|r| r.code).collect();
        assert_eq!(
            codes,
            [
                None,
                Some((0x1000, 16)),
                None,
                Some((0x2000, 32)),
                None,
                None
            ]
        );
        let keep = parsed.keep_loads(|record| record.code == Some((0x2000, 32)));
        assert_eq!(keep, [false, false, true, true, true, true]);
        let copy = parsed
            .copy::<ForeignDumpError>(
                &bytes,
                |index, _| keep[index],
                None::<fn(u64) -> Result<u64, ForeignDumpError>>,
            )
            .unwrap();
        let again = ForeignDump::parse(&copy).unwrap();
        let kinds: Vec<u32> = again.records().iter().map(|r| r.kind).collect();
        assert_eq!(kinds, [4, 0, 1, 3]);
        assert!(!again.has_arch_timestamps());
        assert_eq!(again.records()[1].code, Some((0x2000, 32)));
        assert_eq!(again.get_u64(&copy, again.records()[1].offset + 8), 4);
    }
}
