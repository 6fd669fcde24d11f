//! This crate's errors: why a jitdump could not be created or written ([`JitDumpError`]), why a
//! time conversion record could not be parsed ([`TimeConvError`]); each message says what to
//! change.
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors").

use std::fmt;
use std::io;
use std::path::PathBuf;

use perfclock_core::{ParamError, ReadError};
use perfclock_process_files::{ClockMismatch, ForkChild, LiveName, TakenName};

use crate::JitClock;

/// Why [`crate::JitDump`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum JitDumpError {
    /// The process clock could not be opened (`perfclock::init`).
    Clock(perfclock::Error),
    /// The clock's conversion could not be read for the timeconv record.
    ClockRead(ReadError),
    /// A file operation failed: the directory is missing or not writable, or the disk is full.
    Io {
        /// What was being done (`"create"`, `"write record"`, ...).
        op: &'static str,
        /// The file it was done to.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// Something else is at the dump's or the sidecar's name (a link, a FIFO, another user's
    /// file): it was left as it was, and no dump was created.
    NameTaken(TakenName),
    /// A regular file of this user is at the dump's name that another writer holds open (a
    /// process with the same pid number in another pid namespace), so it is not stale: it was
    /// left as it was, and no dump was created.
    NameLive(LiveName),
    /// The handle was opened by another process (this is a fork child of it): a child never
    /// writes into its parent's dump, nor closes it. Create a dump in the child: it gets its own
    /// `jit-<pid>.dump`.
    ForkChild(ForkChild),
    /// This process already has a dump open in the directory, in another clock: one dump per
    /// process and directory, and one clock per dump.
    ClockMismatch(ClockMismatch<JitClock>),
    /// An earlier failed write left bytes that could not be truncated away, so further records
    /// would follow a torn one; the dump is closed for writing.
    Torn {
        /// The dump file.
        path: PathBuf,
    },
    /// The name holds a NUL byte: perf reads names as C strings and would cut it there.
    NameContainsNul {
        /// Offset of the first NUL in the name.
        position: usize,
    },
    /// The code is empty: perf would map a zero-length image that no sample can hit.
    EmptyCode,
    /// The record would exceed the format's 32-bit size field.
    RecordTooLarge {
        /// Name length in bytes.
        name_len: usize,
        /// Code length in bytes.
        code_len: usize,
    },
}

impl fmt::Display for JitDumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JitDumpError::Clock(_) => f.write_str("cannot open the perf clock for a jitdump"),
            JitDumpError::ClockRead(_) => {
                f.write_str("cannot read the perf clock's conversion for the timeconv record")
            }
            JitDumpError::Io { op, path, .. } => write!(
                f,
                "jitdump {op} failed for {} (the dump directory must exist, be writable and \
                 have free space)",
                path.display()
            ),
            JitDumpError::NameTaken(taken) => write!(f, "cannot create the jitdump: {taken}"),
            JitDumpError::NameLive(live) => write!(f, "cannot create the jitdump: {live}"),
            JitDumpError::ForkChild(child) => write!(f, "jitdump: {child}"),
            JitDumpError::ClockMismatch(mismatch) => write!(f, "jitdump: {mismatch}"),
            JitDumpError::Torn { path } => write!(
                f,
                "{} ends in a partial record an earlier failed write left behind and could not \
                 remove; create a new dump",
                path.display()
            ),
            JitDumpError::NameContainsNul { position } => write!(
                f,
                "the code's name holds a NUL byte at offset {position}; perf reads names as C \
                 strings"
            ),
            JitDumpError::EmptyCode => {
                f.write_str("the code is empty (size 0); perf cannot attribute samples to it")
            }
            JitDumpError::RecordTooLarge { name_len, code_len } => write!(
                f,
                "a name of {name_len} bytes and code of {code_len} bytes exceed a jitdump \
                 record's 4 GiB limit"
            ),
        }
    }
}

impl std::error::Error for JitDumpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JitDumpError::Clock(error) => Some(error),
            JitDumpError::ClockRead(error) => Some(error),
            JitDumpError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why a record could not be parsed. Each names the key (or line) to fix, never the record's
/// text: a record may be another user's file, shown to whoever reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeConvError {
    /// The first line is not `expected` ([`MAGIC_LINE`](crate::timeconv::MAGIC_LINE)): not a
    /// record, or a version this reader predates.
    NotARecord {
        /// The first line a record has.
        expected: &'static str,
    },
    /// A line has no `=`.
    MalformedLine {
        /// 1-based line number.
        line: usize,
    },
    /// A required key is absent.
    MissingKey(&'static str),
    /// A key appears twice.
    DuplicateKey(&'static str),
    /// A value does not parse as the key's type.
    InvalidValue {
        /// The key.
        key: &'static str,
    },
    /// The conversion's parameters are ones no kernel publishes.
    InvalidConversion(ParamError),
}

impl fmt::Display for TimeConvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeConvError::NotARecord { expected } => write!(
                f,
                "not a perfclock time conversion record: the first line is not {expected:?}"
            ),
            TimeConvError::MalformedLine { line } => {
                write!(f, "time conversion record line {line} is not key=value")
            }
            TimeConvError::MissingKey(key) => {
                write!(f, "time conversion record lacks the key {key}")
            }
            TimeConvError::DuplicateKey(key) => {
                write!(f, "time conversion record has the key {key} twice")
            }
            TimeConvError::InvalidValue { key } => {
                write!(
                    f,
                    "time conversion record: the value of {key} does not parse"
                )
            }
            TimeConvError::InvalidConversion(error) => write!(
                f,
                "time conversion record: time_mult/time_shift/time_mask unusable: {error}"
            ),
        }
    }
}

impl std::error::Error for TimeConvError {}

/// Why a jitdump could not be read or copied ([`crate::foreign::DumpReader`],
/// [`crate::foreign::copy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForeignDumpError {
    /// The bytes do not start with a jitdump header (the reason, in the reader's words).
    Header(String),
    /// A record claims fewer bytes than its own 16-byte header, or more than
    /// [`crate::foreign::MAX_RECORD_BYTES`].
    RecordSize {
        /// Where the record starts.
        offset: u64,
        /// The size it claims.
        size: u32,
    },
    /// More than `limit` bytes ([`crate::foreign::MAX_HELD_BYTES`]) of records wait for the
    /// code load they describe.
    HeldTooLong {
        /// Where the record that went past the bound starts.
        offset: u64,
        /// The bytes of records a copy holds at most.
        limit: usize,
    },
    /// Reading failed.
    Read(std::io::ErrorKind),
}

impl fmt::Display for ForeignDumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ForeignDumpError::Header(reason) => write!(f, "not a jitdump: {reason}"),
            ForeignDumpError::RecordSize { offset, size } => write!(
                f,
                "the jitdump's record at byte {offset} claims {size} bytes, fewer than its \
                 16-byte header or more than any function's: the file is corrupt"
            ),
            ForeignDumpError::HeldTooLong { offset, limit } => write!(
                f,
                "the jitdump holds more than {} MiB of records before the code load they \
                 describe (at byte {offset}): not a runtime's dump",
                limit >> 20
            ),
            ForeignDumpError::Read(kind) => write!(f, "reading the jitdump failed: {kind}"),
        }
    }
}

impl std::error::Error for ForeignDumpError {}
