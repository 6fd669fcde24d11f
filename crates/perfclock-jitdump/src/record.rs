//! The bytes of perf's jitdump format (`tools/perf/Documentation/jitdump-specification.txt`,
//! `tools/perf/util/jitdump.h`), in the writer's native byte order as the format requires.
//!
//! Pure encoding: every record is built whole in a buffer so the writer can hand it to the file
//! in one `write`. Private to the crate: users write through [`crate::JitDump`], and readers
//! (tests, the test bed) read dumps with an independent reader (`linux-perf-data`), so they do
//! not agree with this encoder by construction.

use crate::JitDumpError;

/// `JITHEADER_MAGIC`: "JiTD" read as a native-endian `u32`; readers detect byte order by it.
pub(crate) const MAGIC: u32 = 0x4A69_5444;
/// `JITHEADER_VERSION`.
pub(crate) const VERSION: u32 = 1;
/// Size of the file header in bytes.
pub(crate) const HEADER_SIZE: usize = 40;
/// `JITDUMP_FLAGS_ARCH_TIMESTAMP`: timestamps are raw counter values that `perf inject --jit`
/// converts with the recording's `PERF_RECORD_TIME_CONV`.
pub(crate) const FLAGS_ARCH_TIMESTAMP: u64 = 1;
/// Size of the prefix every record starts with (`id`, `total_size`, `timestamp`).
pub(crate) const PREFIX_SIZE: usize = 16;
/// Size of a `JIT_CODE_LOAD` record before its name: the prefix, `pid`, `tid`, `vma`,
/// `code_addr`, `code_size`, `code_index`.
pub(crate) const CODE_LOAD_FIXED_SIZE: usize = PREFIX_SIZE + 4 + 4 + 8 + 8 + 8 + 8;

/// The record ids this writer emits (perf's `enum jit_record_type` in `jitdump.h`). perf also
/// defines `JIT_CODE_MOVE` (1) and `JIT_CODE_UNWINDING_INFO` (4), which perfclock never writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum RecordId {
    /// `JIT_CODE_LOAD`: code was placed at an address.
    Load = 0,
    /// `JIT_CODE_DEBUG_INFO`: source lines of the code in the `JIT_CODE_LOAD` that follows it.
    DebugInfo = 2,
    /// `JIT_CODE_CLOSE`: the writer closed the file.
    Close = 3,
}

/// The ELF `e_machine` of this architecture, which perf writes into the ELF images it generates.
#[cfg(target_arch = "x86_64")]
pub(crate) const ELF_MACH: u32 = 62; // EM_X86_64
/// The ELF `e_machine` of this architecture, which perf writes into the ELF images it generates.
#[cfg(target_arch = "aarch64")]
pub(crate) const ELF_MACH: u32 = 183; // EM_AARCH64
/// `EM_NONE`: perfclock has no counter here, so no dump is ever created (`perfclock::init` fails).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) const ELF_MACH: u32 = 0;

/// The file header; `flags` is [`FLAGS_ARCH_TIMESTAMP`] for raw-counter stamps, else 0.
pub(crate) fn header(pid: u32, timestamp: u64, flags: u64) -> [u8; HEADER_SIZE] {
    let mut bytes = [0u8; HEADER_SIZE];
    let fields: [&[u8]; 8] = [
        &MAGIC.to_ne_bytes(),
        &VERSION.to_ne_bytes(),
        &(HEADER_SIZE as u32).to_ne_bytes(),
        &ELF_MACH.to_ne_bytes(),
        &0u32.to_ne_bytes(), // pad1
        &pid.to_ne_bytes(),
        &timestamp.to_ne_bytes(),
        &flags.to_ne_bytes(),
    ];
    let mut at = 0;
    for field in fields {
        bytes[at..at + field.len()].copy_from_slice(field);
        at += field.len();
    }
    bytes
}

/// The fields of one `JIT_CODE_LOAD` record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CodeLoad<'a> {
    /// Counter value at the load.
    pub(crate) timestamp: u64,
    /// Process id.
    pub(crate) pid: u32,
    /// Thread id of the loading thread.
    pub(crate) tid: u32,
    /// Address of the code (perf uses it as both `vma` and `code_addr`).
    pub(crate) addr: u64,
    /// Unique, increasing index; perf names the generated image `jitted-<pid>-<index>.so`.
    pub(crate) code_index: u64,
    /// Symbol name, without NUL.
    pub(crate) name: &'a [u8],
    /// The machine code.
    pub(crate) code: &'a [u8],
}

/// Checks a load's name and code before anything is written.
///
/// # Errors
/// [`JitDumpError::NameContainsNul`] (perf reads the name as a C string, so the rest would be
/// lost), [`JitDumpError::EmptyCode`] (perf would map a zero-length image that no sample can
/// hit), [`JitDumpError::RecordTooLarge`] (the record's size field is 32 bits).
pub(crate) fn check_load(name: &[u8], code_len: usize) -> Result<usize, JitDumpError> {
    if let Some(position) = name.iter().position(|&b| b == 0) {
        return Err(JitDumpError::NameContainsNul { position });
    }
    if code_len == 0 {
        return Err(JitDumpError::EmptyCode);
    }
    let size = CODE_LOAD_FIXED_SIZE
        .checked_add(name.len())
        .and_then(|s| s.checked_add(1))
        .and_then(|s| s.checked_add(code_len))
        .filter(|&s| u32::try_from(s).is_ok())
        .ok_or(JitDumpError::RecordTooLarge {
            name_len: name.len(),
            code_len,
        })?;
    Ok(size)
}

/// Appends a `JIT_CODE_LOAD` record to `out`.
///
/// # Errors
/// As [`check_load`].
pub(crate) fn code_load(out: &mut Vec<u8>, load: &CodeLoad<'_>) -> Result<(), JitDumpError> {
    code_load_head(out, load, load.code.len())?;
    out.extend_from_slice(load.code);
    Ok(())
}

/// Appends the part of a `JIT_CODE_LOAD` record before its code, for `code_len` bytes of code
/// the caller writes right after it (`load.code` is not written).
///
/// # Errors
/// As [`check_load`].
pub(crate) fn code_load_head(
    out: &mut Vec<u8>,
    load: &CodeLoad<'_>,
    code_len: usize,
) -> Result<(), JitDumpError> {
    let size = check_load(load.name, code_len)?;
    out.reserve(size - code_len);
    prefix(out, RecordId::Load, size as u32, load.timestamp);
    out.extend_from_slice(&load.pid.to_ne_bytes());
    out.extend_from_slice(&load.tid.to_ne_bytes());
    out.extend_from_slice(&load.addr.to_ne_bytes()); // vma
    out.extend_from_slice(&load.addr.to_ne_bytes()); // code_addr
    out.extend_from_slice(&(code_len as u64).to_ne_bytes());
    out.extend_from_slice(&load.code_index.to_ne_bytes());
    out.extend_from_slice(load.name);
    out.push(0);
    Ok(())
}

/// Where every record's prefix holds its timestamp (after `id` and `total_size`).
const PREFIX_TIMESTAMP_AT: usize = 4 + 4;
/// Where a `JIT_CODE_LOAD` holds `code_index` (after the prefix, `pid`, `tid`, `vma`, `code_addr`
/// and `code_size`).
const LOAD_CODE_INDEX_AT: usize = PREFIX_SIZE + 4 + 4 + 8 + 8 + 8;

/// Sets the timestamp of the record that starts at `record[0]`: a writer builds records outside
/// its lock and stamps them under it.
pub(crate) fn patch_timestamp(record: &mut [u8], timestamp: u64) {
    record[PREFIX_TIMESTAMP_AT..PREFIX_TIMESTAMP_AT + 8].copy_from_slice(&timestamp.to_ne_bytes());
}

/// Sets the `code_index` of the `JIT_CODE_LOAD` that starts at `load[0]`.
pub(crate) fn patch_code_index(load: &mut [u8], code_index: u64) {
    load[LOAD_CODE_INDEX_AT..LOAD_CODE_INDEX_AT + 8].copy_from_slice(&code_index.to_ne_bytes());
}

/// Appends a `JIT_CODE_CLOSE` record (the prefix alone) to `out`.
pub(crate) fn code_close(out: &mut Vec<u8>, timestamp: u64) {
    prefix(out, RecordId::Close, PREFIX_SIZE as u32, timestamp);
}

fn prefix(out: &mut Vec<u8>, id: RecordId, total_size: u32, timestamp: u64) {
    out.extend_from_slice(&(id as u32).to_ne_bytes());
    out.extend_from_slice(&total_size.to_ne_bytes());
    out.extend_from_slice(&timestamp.to_ne_bytes());
}

/// Size of a `JIT_CODE_DEBUG_INFO` record before its entries: the prefix, `code_addr`,
/// `nr_entry`.
pub(crate) const DEBUG_INFO_FIXED_SIZE: usize = PREFIX_SIZE + 8 + 8;
/// Size of one debug entry before its file name: `addr`, `lineno`, `discrim`.
pub(crate) const DEBUG_ENTRY_FIXED_SIZE: usize = 8 + 4 + 4;

/// One line of a `JIT_CODE_DEBUG_INFO` record (perf's `struct debug_entry`): the code from
/// `addr` up to the next entry's address comes from `file`:`line`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DebugEntry<'a> {
    /// Address of the first instruction of the line (absolute, like the load's `addr`).
    pub addr: u64,
    /// Source line number (perf's `lineno`, a C `int`).
    pub line: i32,
    /// DWARF discriminator; 0 when unused.
    pub discriminator: i32,
    /// Source file name, without NUL (perf writes it into the image's `.debug_line`).
    pub file: &'a [u8],
}

/// Checks a debug record's entries and returns the record's size.
///
/// # Errors
/// [`JitDumpError::NameContainsNul`] for a file name with a NUL (`position` is its offset in
/// that name), [`JitDumpError::RecordTooLarge`] if the record's size does not fit its 32-bit
/// size field (`name_len` is then the entries' count).
pub(crate) fn check_debug_info(entries: &[DebugEntry<'_>]) -> Result<usize, JitDumpError> {
    let mut size = DEBUG_INFO_FIXED_SIZE;
    for entry in entries {
        if let Some(position) = entry.file.iter().position(|&b| b == 0) {
            return Err(JitDumpError::NameContainsNul { position });
        }
        size = size.saturating_add(DEBUG_ENTRY_FIXED_SIZE + entry.file.len() + 1);
    }
    if u32::try_from(size).is_err() {
        return Err(JitDumpError::RecordTooLarge {
            name_len: entries.len(),
            code_len: 0,
        });
    }
    Ok(size)
}

/// Appends a `JIT_CODE_DEBUG_INFO` record for the code at `code_addr` to `out`. perf's layout
/// (`tools/perf/util/jitdump.h`): no padding, each entry's file name NUL-terminated in place.
///
/// # Errors
/// As [`check_debug_info`].
pub(crate) fn code_debug_info(
    out: &mut Vec<u8>,
    timestamp: u64,
    code_addr: u64,
    entries: &[DebugEntry<'_>],
) -> Result<(), JitDumpError> {
    let size = check_debug_info(entries)?;
    out.reserve(size);
    prefix(out, RecordId::DebugInfo, size as u32, timestamp);
    out.extend_from_slice(&code_addr.to_ne_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_ne_bytes());
    for entry in entries {
        out.extend_from_slice(&entry.addr.to_ne_bytes());
        out.extend_from_slice(&entry.line.to_ne_bytes());
        out.extend_from_slice(&entry.discriminator.to_ne_bytes());
        out.extend_from_slice(entry.file);
        out.push(0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let bytes = header(77, 0x0102_0304_0506_0708, FLAGS_ARCH_TIMESTAMP);
        assert_eq!(&bytes[0..4], &MAGIC.to_ne_bytes());
        assert_eq!(u32::from_ne_bytes(bytes[8..12].try_into().unwrap()), 40);
        assert_eq!(u32::from_ne_bytes(bytes[20..24].try_into().unwrap()), 77);
        assert_eq!(
            u64::from_ne_bytes(bytes[24..32].try_into().unwrap()),
            0x0102_0304_0506_0708
        );
        assert_eq!(u64::from_ne_bytes(bytes[32..40].try_into().unwrap()), 1);
    }

    #[test]
    fn code_load_layout() {
        let mut out = Vec::new();
        let load = CodeLoad {
            timestamp: 5,
            pid: 1,
            tid: 2,
            addr: 0x1000,
            code_index: 9,
            name: b"f\n\xff",
            code: &[0xc3, 0x90],
        };
        code_load(&mut out, &load).unwrap();
        assert_eq!(out.len(), CODE_LOAD_FIXED_SIZE + 4 + 2);
        assert_eq!(u32::from_ne_bytes(out[0..4].try_into().unwrap()), 0); // JIT_CODE_LOAD
        assert_eq!(
            u32::from_ne_bytes(out[4..8].try_into().unwrap()) as usize,
            out.len()
        );
        assert_eq!(&out[56..60], b"f\n\xff\0");
        assert_eq!(&out[60..], &[0xc3, 0x90]);
    }

    #[test]
    fn patched_load_equals_one_built_with_those_values() {
        let load = |timestamp, code_index| CodeLoad {
            timestamp,
            pid: 1,
            tid: 2,
            addr: 0x1000,
            code_index,
            name: b"f",
            code: &[0xc3],
        };
        let mut patched = Vec::new();
        code_load(&mut patched, &load(0, 0)).unwrap();
        patch_timestamp(&mut patched, 0x0102_0304_0506_0708);
        patch_code_index(&mut patched, 0x1112_1314_1516_1718);
        let mut built = Vec::new();
        code_load(
            &mut built,
            &load(0x0102_0304_0506_0708, 0x1112_1314_1516_1718),
        )
        .unwrap();
        assert_eq!(patched, built);
    }

    #[test]
    fn code_close_layout() {
        let mut out = Vec::new();
        code_close(&mut out, 0x0102_0304_0506_0708);
        assert_eq!(out.len(), PREFIX_SIZE);
        assert_eq!(u32::from_ne_bytes(out[0..4].try_into().unwrap()), 3); // JIT_CODE_CLOSE
        assert_eq!(u32::from_ne_bytes(out[4..8].try_into().unwrap()), 16);
        assert_eq!(
            u64::from_ne_bytes(out[8..16].try_into().unwrap()),
            0x0102_0304_0506_0708
        );
    }

    #[test]
    fn rejects_what_perf_cannot_represent() {
        assert!(matches!(
            check_load(b"a\0b", 1),
            Err(JitDumpError::NameContainsNul { position: 1 })
        ));
        assert!(matches!(check_load(b"a", 0), Err(JitDumpError::EmptyCode)));
        assert_eq!(check_load(b"", 1).unwrap(), CODE_LOAD_FIXED_SIZE + 2);
    }
    #[test]
    fn debug_info_layout() {
        let mut out = Vec::new();
        let entries = [
            DebugEntry {
                addr: 0x1000,
                line: 7,
                discriminator: 0,
                file: b"a/B.java",
            },
            DebugEntry {
                addr: 0x1010,
                line: -1,
                discriminator: 3,
                file: b"",
            },
        ];
        code_debug_info(&mut out, 5, 0x1000, &entries).unwrap();
        let expected_size = DEBUG_INFO_FIXED_SIZE + 2 * DEBUG_ENTRY_FIXED_SIZE + 9 + 1;
        assert_eq!(out.len(), expected_size);
        assert_eq!(u32::from_ne_bytes(out[0..4].try_into().unwrap()), 2); // JIT_CODE_DEBUG_INFO
        assert_eq!(
            u32::from_ne_bytes(out[4..8].try_into().unwrap()) as usize,
            out.len()
        );
        assert_eq!(u64::from_ne_bytes(out[16..24].try_into().unwrap()), 0x1000);
        assert_eq!(u64::from_ne_bytes(out[24..32].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(out[32..40].try_into().unwrap()), 0x1000);
        assert_eq!(i32::from_ne_bytes(out[40..44].try_into().unwrap()), 7);
        assert_eq!(&out[48..57], b"a/B.java\0");
        assert_eq!(u64::from_ne_bytes(out[57..65].try_into().unwrap()), 0x1010);
        assert_eq!(i32::from_ne_bytes(out[65..69].try_into().unwrap()), -1);
        assert_eq!(i32::from_ne_bytes(out[69..73].try_into().unwrap()), 3);
        assert_eq!(&out[73..], b"\0");
    }

    #[test]
    fn debug_info_refuses_nul_in_a_file_name() {
        let entries = [DebugEntry {
            addr: 1,
            line: 1,
            discriminator: 0,
            file: b"a\0b",
        }];
        assert!(matches!(
            check_debug_info(&entries),
            Err(JitDumpError::NameContainsNul { position: 1 })
        ));
    }
}
