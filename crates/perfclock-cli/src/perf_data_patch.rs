//! perf.data in file mode: check its layout, scan its records, and copy it with one record
//! inserted at the start of the data section.
//!
//! Nothing in the ecosystem writes perf.data, so the insertion is done here, by hand, against
//! the layout perf's `tools/perf/util/header.c` reads (`perf_file_header`, `perf_file_attr`,
//! the feature-section table right after the data). Inserting `n` bytes at the data section's
//! start grows the data size by `n` and moves every section that starts at or after that point
//! by `n`: the feature table entries, and the attribute and ID sections if they were written
//! after the data. Sections inside the data section, feature sections holding offsets into the
//! data (`HEADER_AUXTRACE`) and directory-format recordings (`HEADER_DIR_FORMAT`) are refused.
//!
//! The record scan is also by hand rather than through `linux-perf-data`, because that crate
//! panics or aborts on some malformed inputs (an MMAP2 build-id length above 20, an attribute
//! size of 0, an `EVENT_DESC` count it pre-allocates) and reads every feature section into
//! memory first; this scan needs only the 8-byte record headers and two file names, in constant
//! memory. Records inside zstd-compressed records (`perf record -z`) are scanned through one
//! streaming decompressor, as perf's `perf_session__process_compressed_event` does: a frame, and
//! a record, may continue in the next compressed record. The tests read the output back with
//! `linux-perf-data` as an independent check.

use std::ffi::OsStr;
use std::fmt;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `perf_file_header.magic` of a little-endian perf.data, as bytes.
const MAGIC: &[u8; 8] = b"PERFILE2";
/// The magic of a perf.data written on a machine of the other byte order.
const MAGIC_SWAPPED: &[u8; 8] = b"2ELIFREP";
/// The magic of perf's first file format (before 2009).
const MAGIC_V1: &[u8; 8] = b"PERFFILE";
/// `sizeof(struct perf_file_header)`.
const FILE_HEADER_SIZE: u64 = 104;
/// `sizeof(struct perf_pipe_file_header)`: what the size field holds in pipe mode.
const PIPE_HEADER_SIZE: u64 = 16;
/// `sizeof(struct perf_file_section)`.
const SECTION_SIZE: u64 = 16;
/// `PERF_ATTR_SIZE_VER0`: the smallest `perf_event_attr`, and what `size == 0` means.
const ATTR_SIZE_VER0: u64 = 64;
/// Larger attribute entries than this are no `perf_event_attr` any kernel defines.
const MAX_ATTR_SIZE: u64 = 4096;
/// More events than this in one recording is no file perf writes; the limit keeps a hostile
/// attribute section from costing minutes of reads.
const MAX_ATTRS: u64 = 65_536;

/// Record types (`perf_event_type` and perf's user record types).
const RECORD_MMAP: u32 = 1;
const RECORD_MMAP2: u32 = 10;
const RECORD_AUXTRACE: u32 = 71;
/// `PERF_RECORD_TIME_CONV`.
pub const RECORD_TIME_CONV: u32 = 79;
const RECORD_COMPRESSED: u32 = 81;
const RECORD_COMPRESSED2: u32 = 83;
/// Where the file name starts in an MMAP record's body (pid, tid, addr, len, pgoff).
const MMAP_FILENAME_AT: usize = 32;
/// Where the file name starts in an MMAP2 record's body (MMAP's fields, then maj, min, ino,
/// ino_generation or the build id, then prot and flags).
const MMAP2_FILENAME_AT: usize = 64;

/// Feature bits whose sections hold absolute offsets into the data section, or say the data is
/// elsewhere.
const FEATURE_AUXTRACE: u32 = 18;
const FEATURE_DIR_FORMAT: u32 = 24;

/// `perf_event_attr`: where its flag bits are, the `use_clockid` bit, and where `clockid` is.
const ATTR_FLAGS_AT: usize = 40;
const ATTR_USE_CLOCKID_BIT: u32 = 25;
const ATTR_CLOCKID_AT: usize = 92;

/// Offsets of the header fields this module rewrites.
const HEADER_ATTRS_OFFSET_AT: u64 = 24;
const HEADER_DATA_AT: u64 = 40;
const HEADER_DATA_SIZE_AT: u64 = HEADER_DATA_AT + 8;
const HEADER_EVENT_TYPES_OFFSET_AT: u64 = 56;

/// Why a perf.data cannot be scanned or patched. Each message says what to do.
#[derive(Debug)]
pub enum PerfDataError {
    /// Reading failed.
    Io(io::Error),
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
    /// A metadata section lies inside the data section, or straddles its start.
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
    /// A section would end past 2^64 once moved.
    OffsetOverflow,
    /// Two offset fields of the file overlap (sections written over each other).
    OverlappingFields,
    /// The header's data size is 0 though records follow it: perf record never finished.
    Unfinished {
        /// Bytes after the data section's start.
        trailing: u64,
    },
}

impl fmt::Display for PerfDataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(error) => write!(f, "reading IN failed: {error}"),
            Self::TooShort { len: 0 } => write!(f, "IN is empty: not a perf.data"),
            Self::TooShort { len } => write!(
                f,
                "IN has {len} bytes, fewer than a perf.data header ({FILE_HEADER_SIZE}): not a \
                 perf.data, or truncated"
            ),
            Self::NotPerfData { magic } => write!(
                f,
                "IN is not a perf.data: it starts with {:?}, not \"PERFILE2\"",
                String::from_utf8_lossy(magic)
            ),
            Self::PipeMode => write!(
                f,
                "IN is a pipe-mode perf.data (perf record -o - | ...), which has no header to \
                 patch: record to a file instead, or convert it first with `perf inject -i IN -o \
                 FILE`"
            ),
            Self::ByteSwapped => write!(
                f,
                "IN is a perf.data of the other byte order (recorded on a big-endian machine): \
                 not supported; run inject-time-conv on a machine of the recording's byte order"
            ),
            Self::VersionOne => write!(
                f,
                "IN is in perf's first file format (PERFFILE): not supported; re-record with a \
                 current perf"
            ),
            Self::HeaderSize(size) => write!(
                f,
                "IN's header says it is {size} bytes, not {FILE_HEADER_SIZE}: a perf.data format \
                 this tool does not know, or a corrupt file"
            ),
            Self::AttrSize(size) => write!(
                f,
                "IN's attribute entries are {size} bytes, no perf_file_attr size: corrupt perf.data"
            ),
            Self::OutOfFile {
                what,
                offset,
                size,
                file_len,
            } => write!(
                f,
                "IN's {what} ({size} bytes at offset {offset}) reaches past the end of the file \
                 ({file_len} bytes): IN is truncated (was perf record stopped before it finished \
                 writing?)"
            ),
            Self::InsideData { what } => write!(
                f,
                "IN's {what} lies inside the data section: a layout perf does not write, refused \
                 rather than guessed at"
            ),
            Self::TooManyAttrs(count) => write!(
                f,
                "IN claims {count} event attributes, more than the {MAX_ATTRS} this tool accepts: \
                 corrupt perf.data"
            ),
            Self::AttrLayout { index } => write!(
                f,
                "IN's event attribute {index} has a size that disagrees with the header's \
                 attr_size: corrupt perf.data"
            ),
            Self::Auxtrace => write!(
                f,
                "IN has an AUX area trace index (HEADER_AUXTRACE, e.g. intel_pt), whose absolute \
                 offsets into the data this tool does not rewrite: record without AUX tracing"
            ),
            Self::DirFormat => write!(
                f,
                "IN is a directory-format perf.data (perf record --threads): not supported; \
                 record without --threads"
            ),
            Self::RecordTooSmall { offset, size } => write!(
                f,
                "IN's record at offset {offset} claims {size} bytes, less than its own header: \
                 the data section is corrupt or truncated"
            ),
            Self::RecordPastData { offset } => write!(
                f,
                "IN's record at offset {offset} runs past the end of the data section: IN is \
                 truncated or corrupt"
            ),
            Self::Compressed { offset, reason } => write!(
                f,
                "IN's compressed record at offset {offset} (perf record -z) is corrupt: {reason}"
            ),
            Self::OffsetOverflow => write!(f, "IN's sections would end past 2^64 bytes once moved"),
            Self::Unfinished { trailing } => write!(
                f,
                "IN's header says its data section is empty, but {trailing} bytes follow it: perf \
                 record did not finish writing IN (killed?); re-record and stop perf record with \
                 Ctrl-C or by ending the command"
            ),
            Self::OverlappingFields => write!(
                f,
                "IN's header, attribute and feature tables overlap each other: corrupt perf.data"
            ),
        }
    }
}

impl std::error::Error for PerfDataError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(error) => Some(error),
            _ => None,
        }
    }
}

impl From<io::Error> for PerfDataError {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

/// `perf_file_section`: a region of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// Absolute file offset.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

impl Section {
    fn end(self) -> Option<u64> {
        self.offset.checked_add(self.size)
    }

    fn parse(bytes: &[u8]) -> Self {
        Self {
            offset: u64_at(bytes, 0),
            size: u64_at(bytes, 8),
        }
    }
}

/// Little-endian u64 at `at`; callers pass slices checked to be long enough.
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(field)
}

/// Little-endian u32 at `at`; callers pass slices checked to be long enough.
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut field = [0; 4];
    field.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(field)
}

/// An offset field of IN, at `position`, holding `offset`: moved if `offset` is at or after the
/// insertion point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OffsetField {
    position: u64,
    offset: u64,
}

/// A checked perf.data layout: every section inside the file and outside the data section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The file's length when checked.
    pub file_len: u64,
    /// The data section (the records).
    pub data: Section,
    /// The clock of the first event opened with `use_clockid` (`perf record -k`), if any:
    /// such samples are not stamped with the perf clock.
    pub clockid: Option<i32>,
    /// Every offset field of the file (header, attribute ID sections, feature table).
    offset_fields: Vec<OffsetField>,
}

/// What the scan of the data section found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Whether a `PERF_RECORD_TIME_CONV` is present (perf record wrote one: kernel mode).
    pub has_time_conv: bool,
    /// The file names of MMAP/MMAP2 records whose basename is `jit-<pid>.dump`, with the pid,
    /// in file order, each once.
    pub jit_dumps: Vec<(u32, PathBuf)>,
    /// How many records the data section holds.
    pub records: u64,
    /// Whether a jitdump's map was found inside a compressed record (`perf record -z`).
    pub compressed_markers: bool,
}

/// The pid of a jitdump file name (`jit-<pid>.dump`, as perf's `jit_detect` matches it).
pub fn jitdump_pid(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let digits = name.strip_prefix("jit-")?.strip_suffix(".dump")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Checks `reader`'s header and sections.
///
/// # Errors
/// [`PerfDataError`]: not a file-mode little-endian perf.data, a section outside the file or
/// inside the data, or a feature this module cannot move (AUX trace index, directory format).
pub fn read_layout<R: Read + Seek>(reader: &mut R) -> Result<Layout, PerfDataError> {
    let file_len = reader.seek(SeekFrom::End(0))?;
    reader.seek(SeekFrom::Start(0))?;
    let mut header = [0u8; FILE_HEADER_SIZE as usize];
    let header_len = read_up_to(reader, &mut header)?;
    if header_len >= 8 {
        let magic: [u8; 8] = header[..8].try_into().unwrap_or_default();
        match &magic {
            MAGIC => {}
            MAGIC_SWAPPED => return Err(PerfDataError::ByteSwapped),
            MAGIC_V1 => return Err(PerfDataError::VersionOne),
            _ => return Err(PerfDataError::NotPerfData { magic }),
        }
        if header_len >= 16 && u64_at(&header, 8) == PIPE_HEADER_SIZE {
            return Err(PerfDataError::PipeMode);
        }
    }
    if (header_len as u64) < FILE_HEADER_SIZE {
        return Err(PerfDataError::TooShort { len: file_len });
    }
    let header_size = u64_at(&header, 8);
    if header_size != FILE_HEADER_SIZE {
        return Err(PerfDataError::HeaderSize(header_size));
    }
    let attr_size = u64_at(&header, 16);
    let attrs = Section::parse(&header[24..40]);
    let data = Section::parse(&header[40..56]);
    let event_types = Section::parse(&header[56..72]);
    let features: Vec<u32> = (0..256u32)
        .filter(|bit| {
            let word = u64_at(&header, 72 + 8 * (*bit as usize / 64));
            word & (1 << (bit % 64)) != 0
        })
        .collect();
    if features.contains(&FEATURE_DIR_FORMAT) {
        return Err(PerfDataError::DirFormat);
    }
    if features.contains(&FEATURE_AUXTRACE) {
        return Err(PerfDataError::Auxtrace);
    }

    let data_end = data.end().ok_or(PerfDataError::OffsetOverflow)?;
    let within_file = |what: &str, section: Section| match section.end() {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(PerfDataError::OutOfFile {
            what: what.to_owned(),
            offset: section.offset,
            size: section.size,
            file_len,
        }),
    };
    // A metadata section must lie wholly before or wholly after the data: it is moved with the
    // data or not at all. Empty sections are never read, only moved if after the insertion.
    let outside_data = |what: &str, section: Section| {
        if section.size == 0 {
            return Ok(());
        }
        within_file(what, section)?;
        let end = section.offset + section.size;
        if end <= data.offset || section.offset >= data_end {
            Ok(())
        } else {
            Err(PerfDataError::InsideData {
                what: what.to_owned(),
            })
        }
    };
    within_file("data section", data)?;
    // perf record writes a header with no data and no features first, and the real one when
    // it finishes.
    if data.size == 0 && features.is_empty() && file_len > data.offset {
        return Err(PerfDataError::Unfinished {
            trailing: file_len - data.offset,
        });
    }
    if data.offset < FILE_HEADER_SIZE {
        return Err(PerfDataError::InsideData {
            what: "header".to_owned(),
        });
    }
    outside_data("attribute section", attrs)?;
    outside_data("event type section", event_types)?;

    let mut offset_fields = vec![
        OffsetField {
            position: HEADER_ATTRS_OFFSET_AT,
            offset: attrs.offset,
        },
        OffsetField {
            position: HEADER_EVENT_TYPES_OFFSET_AT,
            offset: event_types.offset,
        },
    ];

    if !(ATTR_SIZE_VER0 + SECTION_SIZE..=MAX_ATTR_SIZE).contains(&attr_size) || attr_size % 8 != 0 {
        return Err(PerfDataError::AttrSize(attr_size));
    }
    if attrs.size % attr_size != 0 {
        return Err(PerfDataError::AttrSize(attr_size));
    }
    let attr_count = attrs.size / attr_size;
    if attr_count > MAX_ATTRS {
        return Err(PerfDataError::TooManyAttrs(attr_count));
    }
    reader.seek(SeekFrom::Start(attrs.offset))?;
    let mut entry = vec![0u8; attr_size as usize];
    let mut clockid = None;
    for index in 0..attr_count {
        reader.read_exact(&mut entry)?;
        // perf's read_attr reads `attr.size` bytes (0 meaning VER0), then the ID section: the
        // entry is only where this module expects it when the two agree.
        let own_size = match u64::from(u32_at(&entry, 4)) {
            0 => ATTR_SIZE_VER0,
            size => size,
        };
        if own_size + SECTION_SIZE != attr_size {
            return Err(PerfDataError::AttrLayout { index });
        }
        let flags = u64_at(&entry, ATTR_FLAGS_AT);
        if flags & (1 << ATTR_USE_CLOCKID_BIT) != 0 && clockid.is_none() {
            clockid = Some(match entry.get(ATTR_CLOCKID_AT..ATTR_CLOCKID_AT + 4) {
                Some(field) if own_size >= (ATTR_CLOCKID_AT + 4) as u64 => {
                    i32::from_le_bytes(field.try_into().unwrap_or_default())
                }
                _ => -1,
            });
        }
        let ids_at = own_size as usize;
        let ids = Section::parse(&entry[ids_at..ids_at + SECTION_SIZE as usize]);
        outside_data(&format!("ID section of event attribute {index}"), ids)?;
        offset_fields.push(OffsetField {
            position: attrs.offset + index * attr_size + own_size,
            offset: ids.offset,
        });
    }

    let table = Section {
        offset: data_end,
        size: SECTION_SIZE * features.len() as u64,
    };
    within_file("feature section table", table)?;
    reader.seek(SeekFrom::Start(table.offset))?;
    let mut table_entry = [0u8; SECTION_SIZE as usize];
    for (index, bit) in features.iter().enumerate() {
        reader.read_exact(&mut table_entry)?;
        let section = Section::parse(&table_entry);
        outside_data(&format!("feature section {bit}"), section)?;
        offset_fields.push(OffsetField {
            position: table.offset + SECTION_SIZE * index as u64,
            offset: section.offset,
        });
    }
    // The copy rewrites offset fields in one pass, in file order: no two section descriptors
    // (offset, size) may overlap, or one rewrite would change another descriptor.
    let mut descriptors: Vec<u64> = offset_fields.iter().map(|field| field.position).collect();
    descriptors.push(HEADER_DATA_AT);
    descriptors.sort_unstable();
    if descriptors
        .windows(2)
        .any(|pair| pair[1] - pair[0] < SECTION_SIZE)
    {
        return Err(PerfDataError::OverlappingFields);
    }
    Ok(Layout {
        file_len,
        data,
        clockid,
        offset_fields,
    })
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

/// Notes what one record tells: a TIME_CONV, or the map of a jitdump.
fn inspect(scan: &mut Scan, kind: u32, body: &[u8]) {
    scan.records += 1;
    let name_at = match kind {
        RECORD_TIME_CONV => {
            scan.has_time_conv = true;
            return;
        }
        RECORD_MMAP => MMAP_FILENAME_AT,
        RECORD_MMAP2 => MMAP2_FILENAME_AT,
        _ => return,
    };
    if let Some(name) = body.get(name_at..) {
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        let path = Path::new(OsStr::from_bytes(name));
        if let Some(pid) = jitdump_pid(path) {
            if !scan.jit_dumps.iter().any(|(_, seen)| seen == path) {
                scan.jit_dumps.push((pid, path.to_path_buf()));
            }
        }
    }
}

/// The records inside `PERF_RECORD_COMPRESSED`/`COMPRESSED2`: one zstd stream across all of
/// them, and the tail of a record cut by a compressed record's end.
struct Decompressed {
    decoder: zstd::stream::raw::Decoder<'static>,
    /// Decompressed bytes not yet a whole record (less than one record, at most 64 KiB, after
    /// each chunk is parsed).
    pending: Vec<u8>,
    chunk: Vec<u8>,
}

impl Decompressed {
    fn new(offset: u64) -> Result<Self, PerfDataError> {
        Ok(Self {
            decoder: zstd::stream::raw::Decoder::new().map_err(|error| {
                PerfDataError::Compressed {
                    offset,
                    reason: format!("no zstd decompressor: {error}"),
                }
            })?,
            pending: Vec::new(),
            chunk: vec![0; 1 << 16],
        })
    }

    /// Decompresses `compressed` (the record at `offset`) and inspects every whole record.
    fn feed(
        &mut self,
        scan: &mut Scan,
        compressed: &[u8],
        offset: u64,
    ) -> Result<(), PerfDataError> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let corrupt = |reason: String| PerfDataError::Compressed { offset, reason };
        let mut input = InBuffer::around(compressed);
        loop {
            let mut output = OutBuffer::around(&mut self.chunk[..]);
            self.decoder
                .run(&mut input, &mut output)
                .map_err(|error| corrupt(format!("zstd: {error}")))?;
            let produced = output.pos();
            self.pending.extend_from_slice(&self.chunk[..produced]);
            let mut at = 0;
            while self.pending.len() - at >= 8 {
                let kind = u32_at(&self.pending, at);
                let size = usize::from(u16::from_le_bytes([
                    self.pending[at + 6],
                    self.pending[at + 7],
                ]));
                if size < 8 {
                    return Err(corrupt(format!(
                        "a record inside claims {size} bytes, less than its own header"
                    )));
                }
                if self.pending.len() - at < size {
                    break;
                }
                let markers = scan.jit_dumps.len();
                inspect(scan, kind, &self.pending[at + 8..at + size]);
                scan.compressed_markers |= scan.jit_dumps.len() > markers;
                at += size;
            }
            self.pending.drain(..at);
            // Done when the input is used up and the last run did not fill the chunk (a full
            // chunk may mean more output is buffered in the decoder).
            if input.pos() == compressed.len() && produced < self.chunk.len() {
                return Ok(());
            }
        }
    }
}

/// Walks the data section's records: whether a TIME_CONV is there, and which jitdumps were
/// mapped. Reads record headers and MMAP bodies only, and decompresses compressed records in
/// 64 KiB chunks; constant memory.
///
/// # Errors
/// [`PerfDataError`]: a record smaller than its header or running past the data, a corrupt
/// compressed record, or a read error.
pub fn scan_records<R: Read + Seek>(reader: R, layout: &Layout) -> Result<Scan, PerfDataError> {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    reader.seek(SeekFrom::Start(layout.data.offset))?;
    let data_end = layout.data.offset + layout.data.size;
    let mut scan = Scan::default();
    let mut offset = layout.data.offset;
    let mut body = Vec::new();
    let mut decompressed: Option<Decompressed> = None;
    while offset < data_end {
        if data_end - offset < 8 {
            return Err(PerfDataError::RecordPastData { offset });
        }
        let mut header = [0u8; 8];
        reader.read_exact(&mut header)?;
        let kind = u32_at(&header, 0);
        let size = u64::from(u16::from_le_bytes([header[6], header[7]]));
        if size < 8 {
            return Err(PerfDataError::RecordTooSmall { offset, size });
        }
        if size > data_end - offset {
            return Err(PerfDataError::RecordPastData { offset });
        }
        let body_len = (size - 8) as usize;
        let mut extra = 0u64;
        match kind {
            RECORD_MMAP | RECORD_MMAP2 => {
                body.resize(body_len, 0);
                reader.read_exact(&mut body)?;
                inspect(&mut scan, kind, &body);
            }
            RECORD_COMPRESSED | RECORD_COMPRESSED2 => {
                body.resize(body_len, 0);
                reader.read_exact(&mut body)?;
                // COMPRESSED2 says how much of its body is data (the rest is padding).
                let compressed = if kind == RECORD_COMPRESSED {
                    &body[..]
                } else {
                    let data_size = body.get(..8).map(|field| u64_at(field, 0));
                    match data_size {
                        Some(data_size) if data_size <= body_len as u64 - 8 => {
                            &body[8..8 + data_size as usize]
                        }
                        _ => {
                            return Err(PerfDataError::Compressed {
                                offset,
                                reason: "its data size exceeds the record".to_owned(),
                            })
                        }
                    }
                };
                let decompressor = match &mut decompressed {
                    Some(decompressor) => decompressor,
                    empty => empty.insert(Decompressed::new(offset)?),
                };
                decompressor.feed(&mut scan, compressed, offset)?;
                scan.records += 1;
            }
            RECORD_AUXTRACE => {
                // The AUX data follows the record, outside its size: its length is the body's
                // first field.
                let mut aux_size = [0u8; 8];
                if body_len < 8 {
                    return Err(PerfDataError::RecordTooSmall { offset, size });
                }
                reader.read_exact(&mut aux_size)?;
                reader.seek_relative(body_len as i64 - 8)?;
                extra = u64::from_le_bytes(aux_size);
                scan.records += 1;
            }
            _ => {
                inspect(&mut scan, kind, &[]);
                reader.seek_relative(body_len as i64)?;
            }
        }
        offset += size;
        if extra > data_end - offset {
            return Err(PerfDataError::RecordPastData { offset });
        }
        if extra > 0 {
            reader.seek(SeekFrom::Start(offset + extra))?;
            offset += extra;
        }
    }
    if let Some(decompressor) = decompressed {
        if !decompressor.pending.is_empty() {
            return Err(PerfDataError::Compressed {
                offset,
                reason: "the compressed stream ends inside a record".to_owned(),
            });
        }
    }
    Ok(scan)
}

/// Copies `reader` (laid out as `layout`) to `writer` with `record` inserted at the start of
/// the data section, the data size grown by its length, and every section offset at or after
/// that point moved by the same amount.
///
/// # Errors
/// A read or write error; [`PerfDataError::OffsetOverflow`] if a moved offset would overflow;
/// [`PerfDataError::TooShort`] if the input shrank since `layout` was read.
pub fn write_with_record<R: Read + Seek, W: Write>(
    reader: &mut R,
    writer: &mut W,
    layout: &Layout,
    record: &[u8],
) -> Result<(), PerfDataError> {
    let grown = record.len() as u64;
    let insert_at = layout.data.offset;
    let mut patches: Vec<(u64, u64)> = layout
        .offset_fields
        .iter()
        .filter(|field| field.offset >= insert_at)
        .map(|field| {
            field
                .offset
                .checked_add(grown)
                .map(|moved| (field.position, moved))
                .ok_or(PerfDataError::OffsetOverflow)
        })
        .collect::<Result<_, _>>()?;
    let data_size = layout
        .data
        .size
        .checked_add(grown)
        .ok_or(PerfDataError::OffsetOverflow)?;
    patches.push((HEADER_DATA_SIZE_AT, data_size));
    patches.sort_unstable();

    reader.seek(SeekFrom::Start(0))?;
    let mut position = 0u64;
    let copy_to = |reader: &mut R, writer: &mut W, position: &mut u64, end: u64| {
        let wanted = end
            .checked_sub(*position)
            .ok_or(PerfDataError::OverlappingFields)?;
        let copied = io::copy(&mut reader.by_ref().take(wanted), writer)?;
        *position += copied;
        if copied == wanted {
            Ok(())
        } else {
            Err(PerfDataError::TooShort { len: *position })
        }
    };
    let mut inserted = false;
    for (field_at, value) in patches {
        if !inserted && field_at >= insert_at {
            copy_to(reader, writer, &mut position, insert_at)?;
            writer.write_all(record)?;
            inserted = true;
        }
        copy_to(reader, writer, &mut position, field_at)?;
        let mut old = [0u8; 8];
        reader.read_exact(&mut old)?;
        writer.write_all(&value.to_le_bytes())?;
        position += 8;
    }
    if !inserted {
        copy_to(reader, writer, &mut position, insert_at)?;
        writer.write_all(record)?;
    }
    copy_to(reader, writer, &mut position, layout.file_len)?;
    Ok(())
}

/// The synthetic perf.data builder shared with the integration tests (each uses part of it).
#[cfg(test)]
#[allow(dead_code)]
#[path = "../tests/common/synth.rs"]
mod synth;

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::synth::{self, Synth};
    use super::*;

    const HOSTNAME: u32 = 3;
    const CMDLINE: u32 = 11;

    fn record_56() -> Vec<u8> {
        let mut record = synth::record(RECORD_TIME_CONV, &[0xAB; 48]);
        record[48 + 8 - 8] = 1;
        record
    }

    fn sample(attrs_after_data: bool) -> synth::Built {
        Synth {
            records: vec![
                synth::comm(7, "java"),
                synth::mmap2(7, "/usr/lib/libc.so.6"),
                synth::mmap2(7, "/tmp/x/jit-7.dump"),
                synth::mmap(8, "/tmp/y/jit-8.dump"),
                synth::mmap2(7, "/tmp/x/jit-7.dump"),
                synth::mmap2(9, "/tmp/jit-9.dumpx"),
            ],
            // perf_header_string: u32 length, then the NUL-padded string.
            features: vec![
                (HOSTNAME, b"\x08\0\0\0host\0\0\0\0".to_vec()),
                (CMDLINE, vec![5; 24]),
            ],
            attrs_after_data,
        }
        .build()
    }

    fn patch(bytes: &[u8], record: &[u8]) -> Result<Vec<u8>, PerfDataError> {
        let mut input = Cursor::new(bytes);
        let layout = read_layout(&mut input)?;
        scan_records(&mut input, &layout)?;
        let mut out = Vec::new();
        write_with_record(&mut input, &mut out, &layout, record)?;
        Ok(out)
    }

    #[test]
    fn scan_finds_jitdump_maps_once_each_and_no_time_conv() {
        let built = sample(false);
        let mut input = Cursor::new(&built.bytes);
        let layout = read_layout(&mut input).unwrap();
        assert_eq!(layout.data.offset as usize, built.data.0);
        let scan = scan_records(&mut input, &layout).unwrap();
        assert_eq!(scan.records, 6);
        assert!(!scan.has_time_conv);
        assert_eq!(
            scan.jit_dumps,
            vec![
                (7, PathBuf::from("/tmp/x/jit-7.dump")),
                (8, PathBuf::from("/tmp/y/jit-8.dump"))
            ]
        );
    }

    /// `PERF_RECORD_COMPRESSED`: unpadded, its whole body is zstd data.
    fn compressed(data: &[u8]) -> Vec<u8> {
        let mut record = Vec::new();
        record.extend_from_slice(&RECORD_COMPRESSED.to_le_bytes());
        record.extend_from_slice(&0u16.to_le_bytes());
        record.extend_from_slice(&u16::try_from(8 + data.len()).unwrap().to_le_bytes());
        record.extend_from_slice(data);
        record
    }

    /// `PERF_RECORD_COMPRESSED2`: the data's size, the data, padding to 8 bytes.
    fn compressed2(data: &[u8]) -> Vec<u8> {
        let mut body = (data.len() as u64).to_le_bytes().to_vec();
        body.extend_from_slice(data);
        synth::record(RECORD_COMPRESSED2, &body)
    }

    fn scan_of(records: Vec<Vec<u8>>) -> Result<Scan, PerfDataError> {
        let built = Synth {
            records,
            ..Synth::default()
        }
        .build();
        let mut input = Cursor::new(&built.bytes);
        let layout = read_layout(&mut input)?;
        scan_records(&mut input, &layout)
    }

    #[test]
    fn scans_inside_compressed_records_split_anywhere() {
        let inner = [
            synth::comm(5, "java"),
            synth::mmap2(5, "/tmp/jit-5.dump"),
            synth::comm(5, "java"),
        ]
        .concat();
        let frame = zstd::bulk::compress(&inner, 1).unwrap();
        // The frame, and so a record inside, cut in two at every point, in both record kinds.
        for cut in 1..frame.len() {
            for wrap in [compressed, compressed2] {
                let scan = scan_of(vec![
                    synth::comm(1, "perf"),
                    wrap(&frame[..cut]),
                    synth::comm(1, "perf"),
                    wrap(&frame[cut..]),
                ])
                .unwrap();
                assert_eq!(scan.jit_dumps, vec![(5, PathBuf::from("/tmp/jit-5.dump"))]);
                assert_eq!(scan.records, 7);
                assert!(scan.compressed_markers);
            }
        }
        // A stream that ends inside a record, and data that is no zstd.
        let cut_record = zstd::bulk::compress(&inner[..inner.len() - 8], 1).unwrap();
        for records in [vec![compressed(&cut_record)], vec![compressed(&[7; 40])]] {
            assert!(matches!(
                scan_of(records),
                Err(PerfDataError::Compressed { .. })
            ));
        }
        // A record inside claiming less than its header.
        let zero = zstd::bulk::compress(&[0; 16], 1).unwrap();
        let message = scan_of(vec![compressed2(&zero)]).unwrap_err().to_string();
        assert!(message.contains("less than its own header"), "{message}");
    }

    #[test]
    fn scan_sees_a_time_conv() {
        let built = Synth {
            records: vec![record_56(), synth::comm(1, "x")],
            ..Synth::default()
        }
        .build();
        let mut input = Cursor::new(&built.bytes);
        let layout = read_layout(&mut input).unwrap();
        assert!(scan_records(&mut input, &layout).unwrap().has_time_conv);
    }

    /// Checks `out` is `built` with `record` inserted, every section found at its moved place.
    fn assert_inserted(built: &synth::Built, out: &[u8], record: &[u8]) {
        let (data_at, data_len) = built.data;
        let input = &built.bytes;
        assert_eq!(out.len(), input.len() + 56);
        assert_eq!(synth::u64_at(out, 40), data_at as u64, "data offset kept");
        assert_eq!(
            synth::u64_at(out, 48),
            data_len as u64 + 56,
            "data size grown"
        );
        assert_eq!(&out[data_at..data_at + 56], record);
        assert_eq!(
            &out[data_at + 56..data_at + 56 + data_len],
            &input[data_at..data_at + data_len]
        );
        let moved = |offset: usize| {
            if offset >= data_at {
                offset + 56
            } else {
                offset
            }
        };
        // Feature table: right after the data; each entry points at its unchanged contents.
        let table = data_at + 56 + data_len;
        for (index, old) in built.feature_offsets.iter().enumerate() {
            let entry = table + 16 * index;
            let size = synth::u64_at(input, data_at + data_len + 16 * index + 8) as usize;
            assert_eq!(synth::u64_at(out, entry) as usize, moved(*old));
            assert_eq!(synth::u64_at(out, entry + 8) as usize, size);
            assert_eq!(
                &out[moved(*old)..moved(*old) + size],
                &input[*old..*old + size]
            );
        }
        // Attribute section and its ID section.
        let attrs = synth::u64_at(out, 24) as usize;
        assert_eq!(attrs, moved(built.attrs));
        let ids = synth::u64_at(out, attrs + 120) as usize;
        assert_eq!(ids, moved(built.ids));
        assert_eq!(synth::u64_at(out, ids), 42);
        assert_eq!(
            &out[attrs..attrs + 120],
            &input[built.attrs..built.attrs + 120]
        );
    }

    #[test]
    fn inserts_and_moves_what_follows_the_data_as_perf_lays_it_out() {
        let built = sample(false);
        let record = record_56();
        let out = patch(&built.bytes, &record).unwrap();
        assert_inserted(&built, &out, &record);
        // Read back: the first record is the inserted one, the rest as before.
        let mut reread = Cursor::new(&out);
        let layout = read_layout(&mut reread).unwrap();
        let scan = scan_records(&mut reread, &layout).unwrap();
        assert!(scan.has_time_conv);
        assert_eq!(scan.records, 7);
    }

    #[test]
    fn moves_attribute_and_id_sections_written_after_the_data() {
        let built = sample(true);
        assert!(built.attrs > built.data.0);
        let record = record_56();
        let out = patch(&built.bytes, &record).unwrap();
        assert_inserted(&built, &out, &record);
    }

    #[test]
    fn an_independent_reader_parses_the_output() {
        use linux_perf_data::{PerfFileReader, PerfFileRecord, UserRecordType};
        let built = sample(false);
        let out = patch(&built.bytes, &record_56()).unwrap();
        let PerfFileReader {
            mut perf_file,
            mut record_iter,
        } = PerfFileReader::parse_file(Cursor::new(&out)).unwrap();
        assert_eq!(perf_file.hostname().unwrap(), Some("host"));
        let mut kinds = Vec::new();
        while let Some(record) = record_iter.next_record(&mut perf_file).unwrap() {
            kinds.push(match record {
                PerfFileRecord::EventRecord { record, .. } => record.record_type.0,
                PerfFileRecord::UserRecord(record) => {
                    assert_eq!(record.record_type, UserRecordType::PERF_TIME_CONV);
                    RECORD_TIME_CONV
                }
            });
        }
        assert_eq!(kinds, [79, 3, 10, 10, 1, 10, 10]);
    }

    #[test]
    fn refuses_what_it_cannot_patch_with_typed_errors() {
        let built = sample(false);
        let err = |bytes: &[u8]| patch(bytes, &record_56()).unwrap_err();
        assert!(matches!(err(b""), PerfDataError::TooShort { len: 0 }));
        assert!(matches!(
            err(b"PERFILE2"),
            PerfDataError::TooShort { len: 8 }
        ));
        assert!(matches!(err(&[7; 200]), PerfDataError::NotPerfData { .. }));
        let mut pipe = b"PERFILE2".to_vec();
        pipe.extend_from_slice(&16u64.to_le_bytes());
        assert!(matches!(err(&pipe), PerfDataError::PipeMode));
        let mut swapped = built.bytes.clone();
        swapped[..8].copy_from_slice(b"2ELIFREP");
        assert!(matches!(err(&swapped), PerfDataError::ByteSwapped));
        let mut v1 = built.bytes.clone();
        v1[..8].copy_from_slice(b"PERFFILE");
        assert!(matches!(err(&v1), PerfDataError::VersionOne));
        for (bit, expected) in [(18, "HEADER_AUXTRACE"), (24, "--threads")] {
            let with_feature = Synth {
                records: vec![synth::comm(1, "x")],
                features: vec![(bit, vec![0; 16])],
                ..Synth::default()
            };
            let message = err(&with_feature.build().bytes).to_string();
            assert!(message.contains(expected), "{message}");
        }
        let mut zero_size = built.bytes.clone();
        zero_size[built.data.0 + 6..built.data.0 + 8].copy_from_slice(&0u16.to_le_bytes());
        assert!(matches!(
            err(&zero_size),
            PerfDataError::RecordTooSmall { size: 0, .. }
        ));
        let mut past = built.bytes.clone();
        let short_data = built.data.1 as u64 - 8;
        past[48..56].copy_from_slice(&short_data.to_le_bytes());
        // The feature table now starts inside the last record: its entries are garbage, or
        // the last record runs past the data.
        assert!(patch(&past, &record_56()).is_err());
        let mut unfinished = Synth {
            records: vec![synth::comm(1, "x")],
            ..Synth::default()
        }
        .build()
        .bytes;
        unfinished[48..56].copy_from_slice(&0u64.to_le_bytes());
        assert!(matches!(
            err(&unfinished),
            PerfDataError::Unfinished { trailing: 24 }
        ));
        let mut attr_zero = built.bytes.clone();
        attr_zero[16..24].copy_from_slice(&0u64.to_le_bytes());
        assert!(matches!(err(&attr_zero), PerfDataError::AttrSize(0)));
    }

    #[test]
    fn reports_events_recorded_with_another_clock() {
        let built = sample(false);
        assert_eq!(
            read_layout(&mut Cursor::new(&built.bytes)).unwrap().clockid,
            None
        );
        let mut monotonic = built.bytes.clone();
        let attr = built.attrs;
        monotonic[attr + ATTR_FLAGS_AT + 3] |= 1 << (ATTR_USE_CLOCKID_BIT - 24);
        monotonic[attr + ATTR_CLOCKID_AT..attr + ATTR_CLOCKID_AT + 4]
            .copy_from_slice(&1i32.to_le_bytes());
        let layout = read_layout(&mut Cursor::new(&monotonic)).unwrap();
        assert_eq!(layout.clockid, Some(1));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let built = sample(false);
        for len in 0..built.bytes.len() {
            assert!(
                patch(&built.bytes[..len], &record_56()).is_err(),
                "truncated to {len} bytes was accepted"
            );
        }
    }

    /// Corrupts each byte of the header, the attribute entry and the feature table with several
    /// values, and random files: errors or a consistent output, never a panic.
    #[test]
    fn corrupted_files_never_panic() {
        let built = sample(false);
        let metadata_end = built.data.0;
        let table = built.data.0 + built.data.1;
        let positions: Vec<usize> = (0..metadata_end).chain(table..built.bytes.len()).collect();
        for at in positions {
            for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut bytes = built.bytes.clone();
                bytes[at] = value;
                if let Ok(out) = patch(&bytes, &record_56()) {
                    assert_eq!(out.len(), bytes.len() + 56);
                }
            }
        }
        // xorshift: random bodies under a valid magic and header size.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            let mut bytes = vec![0u8; 512];
            for byte in bytes.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *byte = state as u8;
            }
            bytes[..8].copy_from_slice(b"PERFILE2");
            bytes[8..16].copy_from_slice(&104u64.to_le_bytes());
            let _ = patch(&bytes, &record_56());
        }
    }

    #[test]
    fn jitdump_names_match_perfs_pattern() {
        assert_eq!(jitdump_pid(Path::new("/a/jit-12.dump")), Some(12));
        assert_eq!(jitdump_pid(Path::new("jit-0.dump")), Some(0));
        for name in [
            "/a/jit-.dump",
            "/a/jit-1x.dump",
            "/a/jit-1.dump.timeconv",
            "/jit-1.dump/x",
        ] {
            assert_eq!(jitdump_pid(Path::new(name)), None, "{name}");
        }
    }
}
