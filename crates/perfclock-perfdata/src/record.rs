//! Record types and the 8-byte `perf_event_header` that starts every record.

use std::fmt;

/// `sizeof(struct perf_event_header)`.
pub const RECORD_HEADER_SIZE: usize = 8;

/// A record type: the kernel's `perf_event_type`, or one of perf's user record types (64 and
/// up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordType(pub u32);

impl RecordType {
    /// `PERF_RECORD_MMAP`.
    pub const MMAP: Self = Self(1);
    /// `PERF_RECORD_COMM`.
    pub const COMM: Self = Self(3);
    /// `PERF_RECORD_SAMPLE`.
    pub const SAMPLE: Self = Self(9);
    /// `PERF_RECORD_MMAP2`.
    pub const MMAP2: Self = Self(10);
    /// `PERF_RECORD_AUXTRACE`: followed by AUX data outside its own size.
    pub const AUXTRACE: Self = Self(71);
    /// `PERF_RECORD_TIME_CONV`.
    pub const TIME_CONV: Self = Self(79);
    /// `PERF_RECORD_COMPRESSED`: zstd data, unpadded.
    pub const COMPRESSED: Self = Self(81);
    /// `PERF_RECORD_COMPRESSED2`: its data's size, zstd data, padding to 8 bytes.
    pub const COMPRESSED2: Self = Self(83);
}

impl fmt::Display for RecordType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::MMAP => f.write_str("PERF_RECORD_MMAP"),
            Self::COMM => f.write_str("PERF_RECORD_COMM"),
            Self::SAMPLE => f.write_str("PERF_RECORD_SAMPLE"),
            Self::MMAP2 => f.write_str("PERF_RECORD_MMAP2"),
            Self::AUXTRACE => f.write_str("PERF_RECORD_AUXTRACE"),
            Self::TIME_CONV => f.write_str("PERF_RECORD_TIME_CONV"),
            Self::COMPRESSED => f.write_str("PERF_RECORD_COMPRESSED"),
            Self::COMPRESSED2 => f.write_str("PERF_RECORD_COMPRESSED2"),
            Self(kind) => write!(f, "record type {kind}"),
        }
    }
}

/// Where the file name starts in an MMAP record's body (pid, tid, addr, len, pgoff).
pub(crate) const MMAP_FILENAME_AT: usize = 32;
/// Where the file name starts in an MMAP2 record's body (MMAP's fields, then maj, min, ino,
/// ino_generation or the build id, then prot and flags).
pub(crate) const MMAP2_FILENAME_AT: usize = 64;

/// `perf_event_header`: type, misc, size (header included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// The record's type.
    pub kind: RecordType,
    /// `misc` flags.
    pub misc: u16,
    /// The record's size, header included.
    pub size: u16,
}

impl RecordHeader {
    /// Parses 8 little-endian bytes.
    pub fn parse(bytes: [u8; RECORD_HEADER_SIZE]) -> Self {
        Self {
            kind: RecordType(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            misc: u16::from_le_bytes([bytes[4], bytes[5]]),
            size: u16::from_le_bytes([bytes[6], bytes[7]]),
        }
    }

    /// The 8 little-endian bytes.
    pub fn to_bytes(self) -> [u8; RECORD_HEADER_SIZE] {
        let mut out = [0; RECORD_HEADER_SIZE];
        out[0..4].copy_from_slice(&self.kind.0.to_le_bytes());
        out[4..6].copy_from_slice(&self.misc.to_le_bytes());
        out[6..8].copy_from_slice(&self.size.to_le_bytes());
        out
    }
}
