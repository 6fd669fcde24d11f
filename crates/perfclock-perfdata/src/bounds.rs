//! What this crate takes as given of a perf.data, and what it allows: perf's fixed header size,
//! and the bounds that keep a hostile file's cost in proportion to its size. The parsers check
//! them and the errors name them.

/// `sizeof(struct perf_file_header)`.
pub const FILE_HEADER_SIZE: u64 = 104;
/// More events than this in one recording is no file perf writes; the limit keeps a hostile
/// attribute section from costing minutes of reads.
pub const MAX_ATTRS: u64 = 65_536;
/// The most distinct `jit-<pid>.dump` names a scan keeps; one more is
/// [`RecordsError::TooManyJitDumps`](crate::RecordsError::TooManyJitDumps). One per JIT process of the recording.
pub const MAX_JIT_DUMPS: usize = 131_072;
/// The most bytes of distinct jitdump names a scan keeps (each name is stored twice: in file
/// order and in the set that finds repeats); more is [`RecordsError::TooManyJitDumps`](crate::RecordsError::TooManyJitDumps).
pub const MAX_JIT_DUMP_NAME_BYTES: usize = 32 << 20;
/// The most record places ([`JitDumpMap::marker_slashes`](crate::JitDumpMap::marker_slashes)) a scan keeps in all; more is
/// [`RecordsError::TooManyJitDumps`](crate::RecordsError::TooManyJitDumps).
pub const MAX_MARKER_PLACES: usize = 1 << 20;
