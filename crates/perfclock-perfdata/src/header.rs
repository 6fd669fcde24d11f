//! `perf_file_header`: magic, sizes, the attribute, data and event-type sections, and the
//! feature bits.

use std::io::{self, Read};

use crate::bounds::FILE_HEADER_SIZE;
use crate::error::{FormatError, PerfDataError};
use crate::features::FeatureSet;
use crate::section::{u64_at, Section};

/// `perf_file_header.magic` of a little-endian perf.data.
pub(crate) const MAGIC: &[u8; 8] = b"PERFILE2";
/// The magic of a perf.data written on a machine of the other byte order.
pub(crate) const MAGIC_SWAPPED: &[u8; 8] = b"2ELIFREP";
/// The magic of perf's first file format (before 2009).
pub(crate) const MAGIC_V1: &[u8; 8] = b"PERFFILE";
/// `sizeof(struct perf_pipe_file_header)`: what the size field holds in pipe mode.
pub(crate) const PIPE_HEADER_SIZE: u64 = 16;

/// Where the header's fields are.
pub(crate) mod at {
    pub(crate) const SIZE: usize = 8;
    pub(crate) const ATTR_SIZE: usize = 16;
    pub(crate) const ATTRS: usize = 24;
    pub(crate) const DATA: usize = 40;
    pub(crate) const DATA_SIZE: usize = 48;
    pub(crate) const EVENT_TYPES: usize = 56;
    pub(crate) const FEATURES: usize = 72;
}

/// A file-mode, little-endian `perf_file_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// The size of one entry of the attribute section (`perf_file_attr`).
    pub attr_size: u64,
    /// The attribute section.
    pub attrs: Section,
    /// The data section (the records).
    pub data: Section,
    /// The event type section (unused by current perf, but moved like the others).
    pub event_types: Section,
    /// Which feature sections follow the data.
    pub features: FeatureSet,
}

impl FileHeader {
    /// Reads the header from the start of `reader` (positioned at 0); `file_len` is the file's
    /// length, for the error of a short file.
    ///
    /// # Errors
    /// [`PerfDataError`]: not a perf.data, pipe mode, the other byte order, the first format,
    /// a header size other than 104, or a read error.
    pub fn read<R: Read>(reader: &mut R, file_len: u64) -> Result<Self, PerfDataError> {
        let mut header = [0u8; FILE_HEADER_SIZE as usize];
        let header_len = read_up_to(reader, &mut header)?;
        if header_len >= 8 {
            let mut magic = [0u8; 8];
            magic.copy_from_slice(&header[..8]);
            match &magic {
                MAGIC => {}
                MAGIC_SWAPPED => return Err(FormatError::ByteSwapped.into()),
                MAGIC_V1 => return Err(FormatError::VersionOne.into()),
                _ => return Err(FormatError::NotPerfData { magic }.into()),
            }
            if header_len >= 16 && u64_at(&header, at::SIZE) == PIPE_HEADER_SIZE {
                return Err(FormatError::PipeMode.into());
            }
        }
        if (header_len as u64) < FILE_HEADER_SIZE {
            return Err(FormatError::TooShort { len: file_len }.into());
        }
        let header_size = u64_at(&header, at::SIZE);
        if header_size != FILE_HEADER_SIZE {
            return Err(FormatError::HeaderSize(header_size).into());
        }
        let mut features = FeatureSet::default();
        for (index, word) in features.0.iter_mut().enumerate() {
            *word = u64_at(&header, at::FEATURES + 8 * index);
        }
        Ok(Self {
            attr_size: u64_at(&header, at::ATTR_SIZE),
            attrs: Section::parse(&header[at::ATTRS..]),
            data: Section::parse(&header[at::DATA..]),
            event_types: Section::parse(&header[at::EVENT_TYPES..]),
            features,
        })
    }
}

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
fn read_up_to<R: Read>(reader: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}
