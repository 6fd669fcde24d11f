//! The bytes of perf's jitdump format (`tools/perf/Documentation/jitdump-specification.txt`,
//! `tools/perf/util/jitdump.h`), in the writer's native byte order as the format requires.
//!
//! Pure encoding: every record is built whole in a buffer so the writer can hand it to the file
//! in one `write`.

use crate::JitDumpError;

/// `JITHEADER_MAGIC`: "JiTD" read as a native-endian `u32`; readers detect byte order by it.
pub const MAGIC: u32 = 0x4A69_5444;
/// `JITHEADER_VERSION`.
pub const VERSION: u32 = 1;
/// Size of the file header in bytes.
pub const HEADER_SIZE: usize = 40;
/// `JITDUMP_FLAGS_ARCH_TIMESTAMP`: timestamps are raw counter values that `perf inject --jit`
/// converts with the recording's `PERF_RECORD_TIME_CONV`.
pub const FLAGS_ARCH_TIMESTAMP: u64 = 1;
/// Size of the prefix every record starts with (`id`, `total_size`, `timestamp`).
pub const PREFIX_SIZE: usize = 16;
/// Size of a `JIT_CODE_LOAD` record before its name: the prefix, `pid`, `tid`, `vma`,
/// `code_addr`, `code_size`, `code_index`.
pub const CODE_LOAD_FIXED_SIZE: usize = PREFIX_SIZE + 4 + 4 + 8 + 8 + 8 + 8;

/// Record ids (`enum jit_record_type`).
pub const JIT_CODE_LOAD: u32 = 0;
/// `JIT_CODE_CLOSE`: the writer closed the file.
pub const JIT_CODE_CLOSE: u32 = 3;

/// The ELF `e_machine` of this architecture, which perf writes into the ELF images it generates.
#[cfg(target_arch = "x86_64")]
pub const ELF_MACH: u32 = 62; // EM_X86_64
/// The ELF `e_machine` of this architecture, which perf writes into the ELF images it generates.
#[cfg(target_arch = "aarch64")]
pub const ELF_MACH: u32 = 183; // EM_AARCH64
/// `EM_NONE`: perfclock has no counter here, so no dump is ever created (`perfclock::init` fails).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const ELF_MACH: u32 = 0;

/// The file header; `flags` is [`FLAGS_ARCH_TIMESTAMP`] for raw-counter stamps, else 0.
pub fn header(pid: u32, timestamp: u64, flags: u64) -> [u8; HEADER_SIZE] {
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
pub struct CodeLoad<'a> {
    /// Counter value at the load.
    pub timestamp: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id of the loading thread.
    pub tid: u32,
    /// Address of the code (perf uses it as both `vma` and `code_addr`).
    pub addr: u64,
    /// Unique, increasing index; perf names the generated image `jitted-<pid>-<index>.so`.
    pub code_index: u64,
    /// Symbol name, without NUL.
    pub name: &'a [u8],
    /// The machine code.
    pub code: &'a [u8],
}

/// Checks a load's name and code before anything is written.
///
/// # Errors
/// [`JitDumpError::NameContainsNul`] (perf reads the name as a C string, so the rest would be
/// lost), [`JitDumpError::EmptyCode`] (perf would map a zero-length image that no sample can
/// hit), [`JitDumpError::RecordTooLarge`] (the record's size field is 32 bits).
pub fn check_load(name: &[u8], code: &[u8]) -> Result<usize, JitDumpError> {
    if let Some(position) = name.iter().position(|&b| b == 0) {
        return Err(JitDumpError::NameContainsNul { position });
    }
    if code.is_empty() {
        return Err(JitDumpError::EmptyCode);
    }
    let size = CODE_LOAD_FIXED_SIZE
        .checked_add(name.len())
        .and_then(|s| s.checked_add(1))
        .and_then(|s| s.checked_add(code.len()))
        .filter(|&s| u32::try_from(s).is_ok())
        .ok_or(JitDumpError::RecordTooLarge {
            name_len: name.len(),
            code_len: code.len(),
        })?;
    Ok(size)
}

/// Appends a `JIT_CODE_LOAD` record to `out`.
///
/// # Errors
/// As [`check_load`].
pub fn code_load(out: &mut Vec<u8>, load: &CodeLoad<'_>) -> Result<(), JitDumpError> {
    let size = check_load(load.name, load.code)?;
    out.reserve(size);
    prefix(out, JIT_CODE_LOAD, size as u32, load.timestamp);
    out.extend_from_slice(&load.pid.to_ne_bytes());
    out.extend_from_slice(&load.tid.to_ne_bytes());
    out.extend_from_slice(&load.addr.to_ne_bytes()); // vma
    out.extend_from_slice(&load.addr.to_ne_bytes()); // code_addr
    out.extend_from_slice(&(load.code.len() as u64).to_ne_bytes());
    out.extend_from_slice(&load.code_index.to_ne_bytes());
    out.extend_from_slice(load.name);
    out.push(0);
    out.extend_from_slice(load.code);
    Ok(())
}

/// Appends a `JIT_CODE_CLOSE` record (the prefix alone) to `out`.
pub fn code_close(out: &mut Vec<u8>, timestamp: u64) {
    prefix(out, JIT_CODE_CLOSE, PREFIX_SIZE as u32, timestamp);
}

fn prefix(out: &mut Vec<u8>, id: u32, total_size: u32, timestamp: u64) {
    out.extend_from_slice(&id.to_ne_bytes());
    out.extend_from_slice(&total_size.to_ne_bytes());
    out.extend_from_slice(&timestamp.to_ne_bytes());
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
        assert_eq!(
            u32::from_ne_bytes(out[4..8].try_into().unwrap()) as usize,
            out.len()
        );
        assert_eq!(&out[56..60], b"f\n\xff\0");
        assert_eq!(&out[60..], &[0xc3, 0x90]);
    }

    #[test]
    fn rejects_what_perf_cannot_represent() {
        assert!(matches!(
            check_load(b"a\0b", &[0xc3]),
            Err(JitDumpError::NameContainsNul { position: 1 })
        ));
        assert!(matches!(
            check_load(b"a", &[]),
            Err(JitDumpError::EmptyCode)
        ));
        assert_eq!(check_load(b"", &[0xc3]).unwrap(), CODE_LOAD_FIXED_SIZE + 2);
    }
}
