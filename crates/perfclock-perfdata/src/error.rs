//! The crate's one error type, nested by the stage that raises it.
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors"): one enum per
//! stage, each `Display` a plain exhaustive match, so a variant added without its message does
//! not compile.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::bounds::{FILE_HEADER_SIZE, MAX_ATTRS, MAX_JIT_DUMPS};
use crate::features::Feature;

/// Why a perf.data cannot be read, scanned, patched or written. Each message says what is wrong
/// with the perf.data read (or the file written) and what to do.
#[derive(Debug)]
#[non_exhaustive]
pub enum PerfDataError {
    /// Reading failed.
    Io(io::Error),
    /// The file as a whole: not a perf.data, or one of a format this crate does not read.
    Format(FormatError),
    /// The header's sections and tables.
    Layout(LayoutError),
    /// The records of the data section.
    Records(RecordsError),
    /// The patch and the file it is written to.
    Patch(PatchError),
}

/// The file as a whole: not a perf.data, or one of a format this crate does not read.
#[derive(Debug)]
#[non_exhaustive]
pub enum FormatError {
    /// The file holds fewer bytes than a perf.data header.
    TooShort {
        /// The file's length.
        len: u64,
    },
    /// The first 8 bytes are no perf.data magic.
    NotPerfData {
        /// The first bytes found.
        magic: [u8; 8],
    },
    /// A perf.data written to a pipe (`perf record -o -`): it has no sections to patch.
    PipeMode,
    /// A perf.data from a machine of the other byte order.
    ByteSwapped,
    /// perf's first file format.
    VersionOne,
    /// The header's size field is not the 104 bytes of `perf_file_header`.
    HeaderSize(u64),
    /// The attribute entry size is no `perf_file_attr`.
    AttrSize(u64),
}

/// The header's sections and tables.
#[derive(Debug)]
#[non_exhaustive]
pub enum LayoutError {
    /// A section reaches past the end of the file.
    OutOfFile {
        /// Which section.
        what: String,
        /// Its offset.
        offset: u64,
        /// Its size.
        size: u64,
        /// The file's length.
        file_len: u64,
    },
    /// A metadata section lies inside the data section or the feature table, or straddles a
    /// point where bytes are inserted.
    InsideData {
        /// Which section.
        what: String,
    },
    /// More attributes than any recording has.
    TooManyAttrs(u64),
    /// An attribute's own size disagrees with the header's entry size.
    AttrLayout {
        /// Which attribute.
        index: u64,
    },
    /// `HEADER_AUXTRACE` is present: its index holds absolute offsets into the data.
    Auxtrace,
    /// `HEADER_DIR_FORMAT` is present: the data lives in other files.
    DirFormat,
    /// Two offset fields of the file overlap (sections written over each other).
    OverlappingFields,
    /// The header's data size is 0 though records follow it: perf record never finished.
    Unfinished {
        /// Bytes after the data section's start.
        trailing: u64,
    },
}

/// The records of the data section.
#[derive(Debug)]
#[non_exhaustive]
pub enum RecordsError {
    /// A record's size is below its 8-byte header.
    RecordTooSmall {
        /// The record's file offset.
        offset: u64,
        /// The size it claims.
        size: u64,
    },
    /// A record runs past the end of the data section.
    RecordPastData {
        /// The record's file offset.
        offset: u64,
    },
    /// A zstd-compressed record (`perf record -z`) does not decompress to whole records.
    Compressed {
        /// The compressed record's file offset.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A compressed record was found but the crate was built without its `zstd` feature.
    CompressedUnsupported {
        /// The compressed record's file offset.
        offset: u64,
    },
    /// More distinct `jit-<pid>.dump` maps than [`MAX_JIT_DUMPS`].
    TooManyJitDumps {
        /// The record's file offset where the limit was passed.
        offset: u64,
    },
    /// More records naming jitdumps than [`MAX_MARKER_PLACES`](crate::MAX_MARKER_PLACES).
    TooManyMarkerRecords {
        /// The record's file offset where the limit was passed.
        offset: u64,
    },
    /// linux-perf-data could not read the recording's samples (its reason).
    Unreadable(String),
}

/// The patch and the file it is written to.
#[derive(Debug)]
#[non_exhaustive]
pub enum PatchError {
    /// A section would end past 2^64 once moved.
    OffsetOverflow,
    /// A feature section is to be added that the file has already.
    FeaturePresent(Feature),
    /// A record or feature section to insert is malformed (size not a multiple of 8, or its
    /// header disagrees with its length).
    BadInsertion(String),
    /// OUT exists and is not a regular file (a device, FIFO, socket, directory or symlink).
    OutputKind {
        /// OUT.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// OUT could not be written.
    Output {
        /// OUT.
        path: PathBuf,
        /// Why.
        error: io::Error,
    },
}

impl fmt::Display for PerfDataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(_) => f.write_str("reading the perf.data failed"),
            Self::Format(error) => fmt::Display::fmt(error, f),
            Self::Layout(error) => fmt::Display::fmt(error, f),
            Self::Records(error) => fmt::Display::fmt(error, f),
            Self::Patch(error) => fmt::Display::fmt(error, f),
        }
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort { len: 0 } => f.write_str("the file is empty: not a perf.data"),
            Self::TooShort { len } => write!(
                f,
                "the file has {len} bytes, fewer than a perf.data header ({FILE_HEADER_SIZE}): \
                 not a perf.data, or truncated"
            ),
            Self::NotPerfData { magic } => write!(
                f,
                "not a perf.data: the file starts with {:?}, not \"PERFILE2\"",
                String::from_utf8_lossy(magic)
            ),
            Self::PipeMode => f.write_str(
                "a pipe-mode perf.data (perf record -o - | ...) has no header to patch: record \
                 to a file instead, or convert it first with `perf inject -i PIPE.data -o \
                 FILE.data`",
            ),
            Self::ByteSwapped => f.write_str(
                "a perf.data of the other byte order (recorded on a big-endian machine): not \
                 supported; patch it on a machine of the recording's byte order",
            ),
            Self::VersionOne => f.write_str(
                "a perf.data in perf's first file format (PERFFILE): not supported; re-record \
                 with a current perf",
            ),
            Self::HeaderSize(size) => write!(
                f,
                "the perf.data header says it is {size} bytes, not {FILE_HEADER_SIZE}: a \
                 perf.data format this crate does not know, or a corrupt file"
            ),
            Self::AttrSize(size) => write!(
                f,
                "the perf.data's attribute entries are {size} bytes, no perf_file_attr size: \
                 corrupt perf.data"
            ),
        }
    }
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfFile {
                what,
                offset,
                size,
                file_len,
            } => write!(
                f,
                "the perf.data's {what} ({size} bytes at offset {offset}) reaches past the end \
                 of the file ({file_len} bytes): it is truncated (was perf record stopped before \
                 it finished writing?)"
            ),
            Self::InsideData { what } => write!(
                f,
                "the perf.data's {what} lies inside the data section or the feature table: a \
                 layout perf does not write, refused rather than guessed at"
            ),
            Self::TooManyAttrs(count) => write!(
                f,
                "the perf.data claims {count} event attributes, more than the {MAX_ATTRS} this \
                 crate accepts: corrupt perf.data"
            ),
            Self::AttrLayout { index } => write!(
                f,
                "the perf.data's event attribute {index} has a size that disagrees with the \
                 header's attr_size: corrupt perf.data"
            ),
            Self::Auxtrace => f.write_str(
                "the perf.data has an AUX area trace index (HEADER_AUXTRACE, e.g. intel_pt), \
                 whose absolute offsets into the data are not rewritten: record without AUX \
                 tracing",
            ),
            Self::DirFormat => f.write_str(
                "a directory-format perf.data (perf record --threads): not supported; record \
                 without --threads",
            ),
            Self::OverlappingFields => f.write_str(
                "the perf.data's header, attribute and feature tables overlap each other: \
                 corrupt perf.data",
            ),
            Self::Unfinished { trailing } => write!(
                f,
                "the perf.data's header says its data section is empty, but {trailing} bytes \
                 follow it: perf record did not finish writing it (killed?); re-record and stop \
                 perf record with Ctrl-C or by ending the command"
            ),
        }
    }
}

impl fmt::Display for RecordsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RecordTooSmall { offset, size } => write!(
                f,
                "the perf.data's record at offset {offset} claims {size} bytes, less than its \
                 own header: the data section is corrupt or truncated"
            ),
            Self::RecordPastData { offset } => write!(
                f,
                "the perf.data's record at offset {offset} runs past the end of the data \
                 section: the file is truncated or corrupt"
            ),
            Self::Compressed { offset, reason } => write!(
                f,
                "the perf.data's compressed record at offset {offset} (perf record -z) is \
                 corrupt: {reason}"
            ),
            Self::CompressedUnsupported { offset } => write!(
                f,
                "the perf.data holds a compressed record at offset {offset} (perf record -z), \
                 and this build has no zstd: enable perfclock-perfdata's `zstd` feature, or \
                 record without -z"
            ),
            Self::TooManyJitDumps { offset } => write!(
                f,
                "the perf.data maps more than {MAX_JIT_DUMPS} distinct jit-<pid>.dump files \
                 (the limit was passed at the record at offset {offset}): no recording of \
                 ordinary JIT processes has that many; split the recording (perf record with a \
                 shorter run), or report the workload if it is real"
            ),
            Self::TooManyMarkerRecords { offset } => write!(
                f,
                "the perf.data has more than {} records that map jitdumps (the limit was passed \
                 at the record at offset {offset}): split the recording",
                crate::MAX_MARKER_PLACES
            ),
            Self::Unreadable(reason) => {
                write!(f, "the perf.data's samples cannot be read: {reason}")
            }
        }
    }
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OffsetOverflow => {
                f.write_str("the perf.data's sections would end past 2^64 bytes once moved")
            }
            Self::FeaturePresent(feature) => write!(
                f,
                "the perf.data has a {feature} section already: it is kept, not replaced (was it \
                 recorded with -k/--clockid, or patched before?)"
            ),
            Self::BadInsertion(reason) => write!(f, "cannot insert into the perf.data: {reason}"),
            Self::OutputKind { path, kind } => write!(
                f,
                "{} is {kind}, not a regular file: it would be replaced by a regular file; \
                 write to a new path or an existing regular file",
                path.display()
            ),
            Self::Output { path, .. } => write!(
                f,
                "cannot write {} (nothing was left there)",
                path.display()
            ),
        }
    }
}

// The nested enum's message is this one's message, so its source is this one's source: a
// chain printed from the top shows each cause once.
impl std::error::Error for PerfDataError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(error) => Some(error),
            Self::Format(error) => error.source(),
            Self::Layout(error) => error.source(),
            Self::Records(error) => error.source(),
            Self::Patch(error) => error.source(),
        }
    }
}

impl std::error::Error for FormatError {}

impl std::error::Error for LayoutError {}

impl std::error::Error for RecordsError {}

impl std::error::Error for PatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Output { error, .. } => Some(error),
            Self::OffsetOverflow
            | Self::FeaturePresent(_)
            | Self::BadInsertion(_)
            | Self::OutputKind { .. } => None,
        }
    }
}

impl From<io::Error> for PerfDataError {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

impl From<FormatError> for PerfDataError {
    fn from(error: FormatError) -> Self {
        Self::Format(error)
    }
}

impl From<LayoutError> for PerfDataError {
    fn from(error: LayoutError) -> Self {
        Self::Layout(error)
    }
}

impl From<RecordsError> for PerfDataError {
    fn from(error: RecordsError) -> Self {
        Self::Records(error)
    }
}

impl From<PatchError> for PerfDataError {
    fn from(error: PatchError) -> Self {
        Self::Patch(error)
    }
}
