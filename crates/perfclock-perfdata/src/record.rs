//! Record types and the 8-byte `perf_event_header` that starts every record.

use std::fmt;

use crate::error::{PatchError, PerfDataError};

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

/// `record`, a whole MMAP or MMAP2 record as the file holds it, naming `file_name` instead: the
/// same header fields, the same fields before the name and the same sample-id fields after it
/// (`sample_id_all`), the name NUL-terminated and padded to 8 bytes as perf and the kernel pad
/// it.
///
/// # Errors
/// [`PatchError::BadInsertion`] if `record` is not a whole MMAP/MMAP2 record with a
/// NUL-terminated name, if `file_name` holds a NUL, or if the result exceeds a record's 64 KiB.
pub fn with_file_name(record: &[u8], file_name: &[u8]) -> Result<Vec<u8>, PerfDataError> {
    let bad = |why: &str| {
        PerfDataError::Patch(PatchError::BadInsertion(format!(
            "cannot rename the map: {why}"
        )))
    };
    let header = record
        .first_chunk::<RECORD_HEADER_SIZE>()
        .map(|header| RecordHeader::parse(*header))
        .ok_or_else(|| bad("no record header"))?;
    if usize::from(header.size) != record.len() {
        return Err(bad("the record's size is not its length"));
    }
    let name_at = RECORD_HEADER_SIZE
        + match header.kind {
            RecordType::MMAP => MMAP_FILENAME_AT,
            RecordType::MMAP2 => MMAP2_FILENAME_AT,
            _ => return Err(bad("not an MMAP or MMAP2 record")),
        };
    let old_name = record.get(name_at..).ok_or_else(|| bad("no file name"))?;
    let nul = old_name
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| bad("the file name has no NUL"))?;
    let trailer_at = name_at + (nul + 1).next_multiple_of(8);
    let trailer = record
        .get(trailer_at..)
        .ok_or_else(|| bad("the file name's padding runs past the record"))?;
    if file_name.contains(&0) {
        return Err(bad("the new name holds a NUL"));
    }
    let padded = (file_name.len() + 1).next_multiple_of(8);
    let size = u16::try_from(name_at + padded + trailer.len())
        .map_err(|_| bad("the renamed record would exceed 64 KiB"))?;
    let mut renamed = RecordHeader { size, ..header }.to_bytes().to_vec();
    renamed.extend_from_slice(&record[RECORD_HEADER_SIZE..name_at]);
    renamed.extend_from_slice(file_name);
    renamed.resize(name_at + padded, 0);
    renamed.extend_from_slice(trailer);
    Ok(renamed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An MMAP2 record: fixed fields, `name`, then a sample-id trailer.
    fn mmap2(name: &[u8], trailer: &[u8]) -> Vec<u8> {
        let padded = (name.len() + 1).next_multiple_of(8);
        let size = RECORD_HEADER_SIZE + MMAP2_FILENAME_AT + padded + trailer.len();
        let header = RecordHeader {
            kind: RecordType::MMAP2,
            misc: 2,
            size: size as u16,
        };
        let mut record = header.to_bytes().to_vec();
        record.extend((0..MMAP2_FILENAME_AT as u8).map(|i| i + 1));
        record.extend_from_slice(name);
        record.resize(RECORD_HEADER_SIZE + MMAP2_FILENAME_AT + padded, 0);
        record.extend_from_slice(trailer);
        record
    }

    #[test]
    fn a_renamed_map_keeps_its_fields_and_sample_id() {
        let trailer = [9u8; 24];
        let original = mmap2(b"/tmp/jit-7.dump", &trailer);
        let renamed = with_file_name(&original, b"/out/a-longer/place/jit-7.dump").unwrap();
        assert_eq!(renamed, mmap2(b"/out/a-longer/place/jit-7.dump", &trailer));
        let shorter = with_file_name(&renamed, b"/j/jit-7.dump").unwrap();
        assert_eq!(shorter, mmap2(b"/j/jit-7.dump", &trailer));
    }

    #[test]
    fn what_is_not_a_whole_named_map_is_refused() {
        let original = mmap2(b"/tmp/jit-7.dump", &[1; 8]);
        assert!(with_file_name(&original[..original.len() - 8], b"/x").is_err());
        assert!(with_file_name(&original, b"/x\0y").is_err());
        let mut comm = original.clone();
        comm[0] = 3;
        assert!(with_file_name(&comm, b"/x").is_err());
        let mut unterminated = mmap2(b"/tmp/jit-7.dump", &[]);
        let len = unterminated.len();
        unterminated[len - 1] = b'x';
        assert!(with_file_name(&unterminated, b"/x").is_err());
        assert!(with_file_name(&original, &vec![b'a'; 70_000]).is_err());
    }
}
