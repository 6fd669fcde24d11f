//! `perf_file_section` and the little-endian field reads every part of the format uses.

/// `sizeof(struct perf_file_section)`.
pub const SECTION_SIZE: u64 = 16;

/// `perf_file_section`: a region of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// Absolute file offset.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

impl Section {
    /// Where the section ends, or `None` past 2^64.
    pub fn end(self) -> Option<u64> {
        self.offset.checked_add(self.size)
    }

    /// Parses the 16 bytes of a `perf_file_section`; `bytes` holds at least 16.
    pub(crate) fn parse(bytes: &[u8]) -> Self {
        Self {
            offset: u64_at(bytes, 0),
            size: u64_at(bytes, 8),
        }
    }
}

/// Little-endian u64 at `at`; callers pass slices checked to be long enough.
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(field)
}

/// Little-endian u32 at `at`; callers pass slices checked to be long enough.
pub(crate) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut field = [0; 4];
    field.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(field)
}
