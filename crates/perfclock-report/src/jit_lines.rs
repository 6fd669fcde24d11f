//! Source lines of JIT code from the jitdump's `JIT_CODE_DEBUG_INFO` records, as `perf script
//! -F+srcline` shows them.
//!
//! `perf inject --jit` writes each `JIT_CODE_LOAD` of a dump `jit-PID.dump` as an image
//! `jitted-PID-N.so` beside it (`N`, the load's `code_index`), with the `JIT_CODE_DEBUG_INFO`
//! record before the load as the image's DWARF line table; perf's srcline then reads that
//! table. [`DumpLines`] reads the same records from the dump: for an address in the code of load
//! `N`, the line of the last entry at or below it. perf's `genelf_debug.c` ends the line
//! sequence at the last entry's own address, so code from the last entry on, like code before
//! the first, has no line.
//!
//! perf prints a call chain's frames in an image at their address in the image (perf 6.1:
//! `jitted-*.so`'s code starts at [`GEN_ELF_TEXT_OFFSET`]) and a sample's own address, without
//! a call chain, as the process saw it; [`DumpLines::line_at`] takes either.
//!
//! The dump is a runtime's file, read record by record through
//! [`perfclock_jitdump::foreign::DumpReader`] (each record bounded); the fields of a debug-info
//! and a code-load record are read here, every length checked against the record's.

use std::collections::HashMap;
use std::io::Read;

use perfclock_jitdump::foreign::{DumpReader, JIT_CODE_LOAD};
use perfclock_jitdump::ForeignDumpError;

/// `JIT_CODE_DEBUG_INFO`'s record type.
const JIT_CODE_DEBUG_INFO: u32 = 2;
/// A record's header: `id`, `total_size`, `timestamp`.
const RECORD_HEADER_BYTES: usize = 16;
/// Where a `JIT_CODE_LOAD`'s `code_index` is (after pid, tid, vma, code_addr, code_size).
const LOAD_CODE_INDEX_AT: usize = RECORD_HEADER_BYTES + 32;
/// A debug entry before its file name: `addr`, `lineno`, `discrim`.
const ENTRY_FIXED_BYTES: usize = 16;

/// Where perf's `genelf.c` puts the code in a `jitted-*.so` (`GEN_ELF_TEXT_OFFSET`: after the
/// ELF header and one program header, 64 + 56 bytes, rounded up to 16); the image's mapping
/// starts there too (its MMAP record's offset).
pub const GEN_ELF_TEXT_OFFSET: u64 = 0x80;

/// A code load's place and its line entries, sorted by address.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Load {
    code_addr: u64,
    code_size: u64,
    entries: Vec<Entry>,
}

/// One line entry: from `addr` on, the code is line `line` of file `file` (an index into
/// [`DumpLines`]'s files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    addr: u64,
    line: u32,
    file: usize,
}

/// The source lines of a dump's code loads, by `code_index`.
#[derive(Debug, Clone, Default)]
pub struct DumpLines {
    files: Vec<String>,
    file_indices: HashMap<String, usize>,
    /// Each load with lines, by `code_index`.
    loads: HashMap<u64, Load>,
}

/// What [`DumpLines::read`] found besides the lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpCounts {
    /// Code loads read.
    pub loads: usize,
    /// Code loads with line entries.
    pub with_lines: usize,
    /// Debug-info or code-load records too short for their fields, skipped.
    pub malformed: usize,
}

impl DumpLines {
    /// Reads the dump `dump` yields (at most `len` bytes): every code load and the debug-info
    /// record before it. A record too short for its fields is counted and skipped; a dump cut
    /// off mid-record ends there, as perf's reader does.
    ///
    /// # Errors
    /// [`ForeignDumpError`]: no jitdump header, a record of an impossible size, a read error.
    pub fn read(dump: impl Read, len: u64) -> Result<(DumpLines, DumpCounts), ForeignDumpError> {
        let mut magic = [0u8; 4];
        let mut dump = dump;
        let got =
            read_up_to(&mut dump, &mut magic).map_err(|e| ForeignDumpError::Read(e.kind()))?;
        let big_endian = &magic[..got] == b"JiTD";
        let mut reader = DumpReader::new(
            std::io::Cursor::new(magic).take(got as u64).chain(dump),
            len,
        )?;
        let mut lines = DumpLines::default();
        let mut counts = DumpCounts::default();
        let mut pending: Option<Vec<(u64, u32, String)>> = None;
        while let Some(record) = reader.next_record()? {
            let bytes = record.bytes;
            match record.kind {
                JIT_CODE_DEBUG_INFO => match debug_entries(bytes, big_endian) {
                    Some(entries) => pending = Some(entries),
                    None => {
                        counts.malformed += 1;
                        pending = None;
                    }
                },
                JIT_CODE_LOAD => {
                    let entries = pending.take();
                    let (Some(index), Some((code_addr, code_size))) =
                        (u64_at(bytes, LOAD_CODE_INDEX_AT, big_endian), record.code)
                    else {
                        counts.malformed += 1;
                        continue;
                    };
                    counts.loads += 1;
                    let Some(entries) = entries.filter(|entries| !entries.is_empty()) else {
                        continue;
                    };
                    counts.with_lines += 1;
                    let mut table: Vec<Entry> = entries
                        .into_iter()
                        .map(|(addr, line, file)| Entry {
                            addr,
                            line,
                            file: lines.intern(file),
                        })
                        .collect();
                    table.sort_by_key(|entry| entry.addr);
                    lines.loads.insert(
                        index,
                        Load {
                            code_addr,
                            code_size,
                            entries: table,
                        },
                    );
                }
                _ => {}
            }
        }
        Ok((lines, counts))
    }

    fn intern(&mut self, file: String) -> usize {
        if let Some(&index) = self.file_indices.get(&file) {
            return index;
        }
        self.files.push(file.clone());
        self.file_indices.insert(file, self.files.len() - 1);
        self.files.len() - 1
    }

    /// The file and line of `address` in the code of load `code_index`, as perf's srcline
    /// reads the image's line table: the last entry at or below the address, if the address
    /// lies below the last entry. `address` is the process's, or the image's (from
    /// [`GEN_ELF_TEXT_OFFSET`]).
    pub fn line_at(&self, code_index: u64, address: u64) -> Option<(&str, u32)> {
        let load = self.loads.get(&code_index)?;
        let code = load.code_addr..load.code_addr.saturating_add(load.code_size);
        let address = if code.contains(&address) {
            address
        } else {
            let offset = address
                .checked_sub(GEN_ELF_TEXT_OFFSET)
                .filter(|&offset| offset < load.code_size)?;
            load.code_addr.checked_add(offset)?
        };
        let table = &load.entries;
        let after = table.partition_point(|entry| entry.addr <= address);
        if after == 0 || after == table.len() {
            return None;
        }
        let entry = table[after - 1];
        Some((self.files[entry.file].as_str(), entry.line))
    }
}

/// The dump and load of a JIT image's name, `jitted-PID-N.so`: `(PID, N)`.
pub fn jitted_image(file_name: &str) -> Option<(u32, u64)> {
    let ids = file_name.strip_prefix("jitted-")?.strip_suffix(".so")?;
    let (pid, index) = ids.split_once('-')?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(index) {
        return None;
    }
    Some((pid.parse().ok()?, index.parse().ok()?))
}

/// A `JIT_CODE_DEBUG_INFO` record's entries `(addr, line, file)`, or `None` if it is too short
/// for what it says it holds.
fn debug_entries(record: &[u8], big_endian: bool) -> Option<Vec<(u64, u32, String)>> {
    let count = u64_at(record, RECORD_HEADER_BYTES + 8, big_endian)?;
    let mut at = RECORD_HEADER_BYTES + 16;
    // Each entry takes its fixed fields and a NUL at least.
    if count > ((record.len().saturating_sub(at)) / (ENTRY_FIXED_BYTES + 1)) as u64 {
        return None;
    }
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let addr = u64_at(record, at, big_endian)?;
        let line = u32_at(record, at + 8, big_endian)?;
        let name_at = at + ENTRY_FIXED_BYTES;
        let name_len = record.get(name_at..)?.iter().position(|&b| b == 0)?;
        let name = String::from_utf8_lossy(&record[name_at..name_at + name_len]).into_owned();
        entries.push((addr, line, name));
        at = name_at + name_len + 1;
    }
    Some(entries)
}

fn u64_at(bytes: &[u8], at: usize, big_endian: bool) -> Option<u64> {
    let word: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(if big_endian {
        u64::from_be_bytes(word)
    } else {
        u64::from_le_bytes(word)
    })
}

fn u32_at(bytes: &[u8], at: usize, big_endian: bool) -> Option<u32> {
    let word: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(if big_endian {
        u32::from_be_bytes(word)
    } else {
        u32::from_le_bytes(word)
    })
}

/// Fills as much of `buf` as `reader` holds: how many bytes were read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_give_the_dump_and_the_load() {
        assert_eq!(jitted_image("jitted-4242-17.so"), Some((4242, 17)));
        for name in [
            "jitted-4242.so",
            "jitted--1.so",
            "jitted-1-x.so",
            "jit-1.dump",
            "jitted-1-2.so.1",
        ] {
            assert_eq!(jitted_image(name), None, "{name}");
        }
    }

    /// A little-endian jitdump as perf's `jitdump.h` lays it out: the header, then each record
    /// (`id`, `total_size`, `timestamp`, its body).
    fn dump(records: &[(u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"DTiJ");
        for word in [1u32, 40, 62, 0, 4242] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(&[0u8; 16]); // timestamp, flags
        for (id, body) in records {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
            out.extend_from_slice(&[0u8; 8]);
            out.extend_from_slice(body);
        }
        out
    }

    fn load(code_index: u64, code_addr: u64) -> (u32, Vec<u8>) {
        let mut body = Vec::new();
        body.extend_from_slice(&4242u32.to_le_bytes()); // pid
        body.extend_from_slice(&4242u32.to_le_bytes()); // tid
        for word in [code_addr, code_addr, 64, code_index] {
            body.extend_from_slice(&word.to_le_bytes()); // vma, code_addr, code_size, index
        }
        body.extend_from_slice(b"Hot.alpha(long)\0");
        body.extend_from_slice(&[0x90; 64]);
        (JIT_CODE_LOAD, body)
    }

    fn debug_info(code_addr: u64, entries: &[(u64, u32, &str)]) -> (u32, Vec<u8>) {
        let mut body = Vec::new();
        body.extend_from_slice(&code_addr.to_le_bytes());
        body.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for (addr, line, file) in entries {
            body.extend_from_slice(&addr.to_le_bytes());
            body.extend_from_slice(&line.to_le_bytes());
            body.extend_from_slice(&0u32.to_le_bytes());
            body.extend_from_slice(file.as_bytes());
            body.push(0);
        }
        (JIT_CODE_DEBUG_INFO, body)
    }

    #[test]
    fn each_loads_lines_come_from_the_debug_info_before_it() {
        let bytes = dump(&[
            load(0, 0x1000),
            debug_info(
                0x1000,
                &[
                    (0x1010, 12, "Hot.java"),
                    (0x1000, 10, "Hot.java"),
                    (0x1020, 12, "Other.java"),
                ],
            ),
            load(1, 0x1000),
            (JIT_CODE_DEBUG_INFO, vec![0; 8]),
            load(2, 0x2000),
            (7, vec![1, 2, 3]),
        ]);
        let (lines, counts) = DumpLines::read(&bytes[..], bytes.len() as u64).unwrap();
        assert_eq!(
            counts,
            DumpCounts {
                loads: 3,
                with_lines: 1,
                malformed: 1
            }
        );
        assert_eq!(lines.line_at(0, 0x1000), None, "load 0 has no lines");
        assert_eq!(
            lines.line_at(2, 0x2000),
            None,
            "its debug info was malformed"
        );
        assert_eq!(lines.line_at(1, 0xfff), None, "before the first entry");
        assert_eq!(lines.line_at(1, 0x1000), Some(("Hot.java", 10)));
        assert_eq!(lines.line_at(1, 0x100f), Some(("Hot.java", 10)));
        assert_eq!(lines.line_at(1, 0x1010), Some(("Hot.java", 12)));
        assert_eq!(lines.line_at(1, 0x101f), Some(("Hot.java", 12)));
        assert_eq!(
            lines.line_at(1, 0x1020),
            None,
            "the last entry ends the sequence"
        );
        // The same addresses in the image.
        assert_eq!(
            lines.line_at(1, GEN_ELF_TEXT_OFFSET),
            Some(("Hot.java", 10))
        );
        assert_eq!(
            lines.line_at(1, GEN_ELF_TEXT_OFFSET + 0x10),
            Some(("Hot.java", 12))
        );
        assert_eq!(
            lines.line_at(1, GEN_ELF_TEXT_OFFSET - 1),
            None,
            "before the image's code"
        );
        assert_eq!(
            lines.line_at(1, GEN_ELF_TEXT_OFFSET + 64),
            None,
            "past the code"
        );
        // A load that claims the whole address space: no address overflows.
        let whole = dump(&[
            debug_info(u64::MAX - 1, &[(u64::MAX - 1, 1, "a"), (u64::MAX, 2, "a")]),
            (JIT_CODE_LOAD, {
                let (_, mut body) = load(0, u64::MAX - 1);
                body[24..32].copy_from_slice(&u64::MAX.to_le_bytes()); // code_size
                body
            }),
        ]);
        let (huge, _) = DumpLines::read(&whole[..], whole.len() as u64).unwrap();
        for address in [0, GEN_ELF_TEXT_OFFSET, u64::MAX - 1, u64::MAX] {
            let _ = huge.line_at(0, address);
        }
        assert_eq!(huge.line_at(0, u64::MAX - 1), Some(("a", 1)));
        // Cut off inside its last record: the records before it are read.
        let (cut, _) = DumpLines::read(&bytes[..bytes.len() - 1], bytes.len() as u64).unwrap();
        assert_eq!(cut.line_at(1, 0x1000), Some(("Hot.java", 10)));
        assert!(DumpLines::read(&b"not a dump"[..], 10).is_err());
    }

    #[test]
    fn a_debug_info_record_too_short_for_its_entries_is_skipped() {
        let mut record = vec![0u8; RECORD_HEADER_BYTES + 16];
        record[RECORD_HEADER_BYTES + 8..RECORD_HEADER_BYTES + 16]
            .copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(debug_entries(&record, false), None);
        // One entry whose name has no NUL.
        record[RECORD_HEADER_BYTES + 8..RECORD_HEADER_BYTES + 16]
            .copy_from_slice(&1u64.to_le_bytes());
        record.extend_from_slice(&[0u8; ENTRY_FIXED_BYTES]);
        record.extend_from_slice(b"Hot.java");
        assert_eq!(debug_entries(&record, false), None);
        record.push(0);
        assert_eq!(
            debug_entries(&record, false),
            Some(vec![(0, 0, "Hot.java".to_owned())])
        );
    }
}
