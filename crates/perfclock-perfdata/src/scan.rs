//! The record scan: walks the data section's 8-byte record headers, reads only the bodies it
//! needs (MMAP/MMAP2 file names, compressed records), and reports whether a TIME_CONV is there
//! and which jitdumps were mapped. Linear in the records, bounded in memory.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::bounds::{MAX_JIT_DUMPS, MAX_JIT_DUMP_NAME_BYTES, MAX_MARKER_PLACES};
use crate::error::{PerfDataError, RecordsError};
use crate::jitdump_name::jitdump_pid;
use crate::layout::Layout;
use crate::record::{
    RecordHeader, RecordType, MMAP2_FILENAME_AT, MMAP_FILENAME_AT, RECORD_HEADER_SIZE,
};
use crate::section::u64_at;

/// A jitdump one process of the recording mapped (perf's marker that the JIT wrote one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitDumpMap {
    /// The pid in the name: the writer's own, in its pid namespace.
    pub pid: u32,
    /// The pid of the process that mapped it, as the recording names it (its first map
    /// record's): another than [`JitDumpMap::pid`] for a process in another pid namespace.
    pub process: u32,
    /// The path as the MMAP record names it.
    pub path: PathBuf,
    /// The file offset of the first MMAP/MMAP2 record that names it, unless that record was
    /// inside a compressed record.
    pub first_record: Option<u64>,
    /// For every record that names it outside compressed records, the file offset of the `/`
    /// before `jit-` in its name: what perf matches (`/jit-<pid>.dump`).
    pub marker_slashes: Vec<u64>,
}

/// What [`scan_records`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Scan {
    /// Whether a `PERF_RECORD_TIME_CONV` is present (perf record wrote one: kernel mode).
    pub has_time_conv: bool,
    /// The MMAP/MMAP2 records whose file name is `jit-<pid>.dump`, in file order, each
    /// process's path once (two containers' processes may map one path).
    pub jit_dumps: Vec<JitDumpMap>,
    /// How many records the data section holds (compressed ones count once, and so does each
    /// record inside them).
    pub records: u64,
    /// Whether a jitdump's map was found inside a compressed record (`perf record -z`).
    pub compressed_markers: bool,
    /// The earliest and the latest time of a sample outside compressed records, where the
    /// samples stamp one ([`Layout::sample_time_at`]).
    pub sample_times: Option<(u64, u64)>,
}

/// Accumulates a scan: the result and the set that finds repeated names in O(1).
#[derive(Debug, Default)]
pub(crate) struct Inspector {
    pub scan: Scan,
    /// Each (process, name)'s index in `scan.jit_dumps`.
    seen: HashMap<(u32, PathBuf), usize>,
    name_bytes: usize,
    /// How many marker places were kept, over all names.
    places: usize,
}

impl Inspector {
    /// Notes what one record tells: a TIME_CONV, or the map of a jitdump; `offset` is the
    /// record's (or, `compressed`, its compressed record's) file offset.
    pub(crate) fn inspect(
        &mut self,
        kind: RecordType,
        body: &[u8],
        offset: u64,
        compressed: bool,
    ) -> Result<(), PerfDataError> {
        self.scan.records += 1;
        let name_at = match kind {
            RecordType::TIME_CONV => {
                self.scan.has_time_conv = true;
                return Ok(());
            }
            RecordType::MMAP => MMAP_FILENAME_AT,
            RecordType::MMAP2 => MMAP2_FILENAME_AT,
            _ => return Ok(()),
        };
        let Some(name) = body.get(name_at..) else {
            return Ok(());
        };
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        let path = Path::new(OsStr::from_bytes(name));
        let Some(pid) = jitdump_pid(path) else {
            return Ok(());
        };
        // MMAP and MMAP2 bodies start with the process's pid.
        let process = body
            .first_chunk::<4>()
            .map_or(0, |pid| u32::from_le_bytes(*pid));
        // perf matches `/jit-<pid>.dump` after the last `/`: a name without one is no marker
        // to it, and has no place to keep.
        let slash_at = name
            .iter()
            .rposition(|&b| b == b'/')
            .map(|slash| offset + (RECORD_HEADER_SIZE + name_at + slash) as u64);
        let key = (process, path.to_path_buf());
        let index = match self.seen.get(&key) {
            Some(&index) => index,
            None => {
                self.name_bytes += 2 * name.len();
                if self.seen.len() >= MAX_JIT_DUMPS || self.name_bytes > MAX_JIT_DUMP_NAME_BYTES {
                    return Err(RecordsError::TooManyJitDumps { offset }.into());
                }
                self.seen.insert(key, self.scan.jit_dumps.len());
                self.scan.jit_dumps.push(JitDumpMap {
                    pid,
                    process,
                    path: path.to_path_buf(),
                    first_record: (!compressed).then_some(offset),
                    marker_slashes: Vec::new(),
                });
                self.scan.jit_dumps.len() - 1
            }
        };
        if let (false, Some(slash_at)) = (compressed, slash_at) {
            self.places += 1;
            if self.places > MAX_MARKER_PLACES {
                return Err(RecordsError::TooManyMarkerRecords { offset }.into());
            }
            self.scan.jit_dumps[index].marker_slashes.push(slash_at);
        }
        Ok(())
    }
}

/// Walks the data section's records of a file laid out as `layout`: whether a TIME_CONV is
/// there, and which jitdumps were mapped. Reads record headers, MMAP bodies and compressed
/// records only; memory is bounded by one record (64 KiB), the decompressor's window, and
/// [`MAX_JIT_DUMP_NAME_BYTES`].
///
/// # Errors
/// [`PerfDataError`]: a record smaller than its header or running past the data, a corrupt
/// compressed record (or one without the `zstd` feature), too many distinct jitdumps, or a
/// read error.
pub fn scan_records<R: Read + Seek>(reader: R, layout: &Layout) -> Result<Scan, PerfDataError> {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    reader.seek(SeekFrom::Start(layout.data.offset))?;
    let data_end = layout.data.offset + layout.data.size;
    let mut inspector = Inspector::default();
    let mut offset = layout.data.offset;
    let mut body = Vec::new();
    let mut decompressed: Option<crate::decompress::Decompressed> = None;
    let time_at = layout.sample_time_at();
    while offset < data_end {
        let (kind, size) = read_record_header(&mut reader, offset, data_end)?;
        let body_len = (size - RECORD_HEADER_SIZE as u64) as usize;
        let mut extra = 0u64;
        match kind {
            RecordType::MMAP | RecordType::MMAP2 => {
                body.resize(body_len, 0);
                reader.read_exact(&mut body)?;
                inspector.inspect(kind, &body, offset, false)?;
            }
            RecordType::COMPRESSED | RecordType::COMPRESSED2 => {
                body.resize(body_len, 0);
                reader.read_exact(&mut body)?;
                let compressed = compressed_data(kind, &body, offset)?;
                let decompressor = match &mut decompressed {
                    Some(decompressor) => decompressor,
                    empty => empty.insert(crate::decompress::Decompressed::new(offset)?),
                };
                decompressor.feed(&mut inspector, compressed, offset)?;
                inspector.scan.records += 1;
            }
            RecordType::SAMPLE if time_at.is_some_and(|at| at + 8 <= body_len) => {
                let at = time_at.unwrap_or_default();
                body.resize(body_len, 0);
                reader.read_exact(&mut body)?;
                let time = u64_at(&body, at);
                let times = inspector.scan.sample_times.get_or_insert((time, time));
                *times = (times.0.min(time), times.1.max(time));
                inspector.inspect(kind, &[], offset, false)?;
            }
            RecordType::AUXTRACE => {
                extra = aux_data_size(&mut reader, offset, size)?;
                inspector.scan.records += 1;
            }
            _ => {
                inspector.inspect(kind, &[], offset, false)?;
                reader.seek_relative(body_len as i64)?;
            }
        }
        offset = past_aux_data(&mut reader, offset + size, extra, data_end)?;
    }
    if let Some(decompressor) = decompressed {
        decompressor.finish(offset)?;
    }
    Ok(inspector.scan)
}

/// Checks that the AUX data every AUXTRACE record claims lies inside the data section, walking
/// the record headers only. linux-perf-data sizes a buffer by that claim before reading it, so a
/// file must pass this before that crate reads it.
///
/// # Errors
/// [`PerfDataError`]: a record smaller than its header, a record or its AUX data running past
/// the data, or a read error.
pub(crate) fn check_aux_data<R: Read + Seek>(
    reader: R,
    layout: &Layout,
) -> Result<(), PerfDataError> {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    reader.seek(SeekFrom::Start(layout.data.offset))?;
    let data_end = layout.data.offset + layout.data.size;
    let mut offset = layout.data.offset;
    while offset < data_end {
        let (kind, size) = read_record_header(&mut reader, offset, data_end)?;
        let extra = if kind == RecordType::AUXTRACE {
            aux_data_size(&mut reader, offset, size)?
        } else {
            reader.seek_relative((size - RECORD_HEADER_SIZE as u64) as i64)?;
            0
        };
        offset = past_aux_data(&mut reader, offset + size, extra, data_end)?;
    }
    Ok(())
}

/// The offset past the `extra` bytes of AUX data that follow a record ending at `offset`, with
/// the reader moved there, checked to lie inside the data section.
fn past_aux_data<R: Read + Seek>(
    reader: &mut BufReader<R>,
    offset: u64,
    extra: u64,
    data_end: u64,
) -> Result<u64, PerfDataError> {
    if extra > data_end - offset {
        return Err(RecordsError::RecordPastData { offset }.into());
    }
    if extra > 0 {
        reader.seek(SeekFrom::Start(offset + extra))?;
    }
    Ok(offset + extra)
}

/// The length of the AUX data that follows the AUXTRACE record at `offset` of `size` bytes,
/// outside its size: the body's first field. Reads the body, whose header was just read.
fn aux_data_size<R: Read + Seek>(
    reader: &mut BufReader<R>,
    offset: u64,
    size: u64,
) -> Result<u64, PerfDataError> {
    let body_len = size - RECORD_HEADER_SIZE as u64;
    if body_len < 8 {
        return Err(RecordsError::RecordTooSmall { offset, size }.into());
    }
    let mut aux_size = [0u8; 8];
    reader.read_exact(&mut aux_size)?;
    reader.seek_relative(body_len as i64 - 8)?;
    Ok(u64::from_le_bytes(aux_size))
}

/// The kind and size of the record at `offset`, checked to lie inside the data section.
fn read_record_header<R: Read>(
    reader: &mut R,
    offset: u64,
    data_end: u64,
) -> Result<(RecordType, u64), PerfDataError> {
    if data_end - offset < RECORD_HEADER_SIZE as u64 {
        return Err(RecordsError::RecordPastData { offset }.into());
    }
    let mut header = [0u8; RECORD_HEADER_SIZE];
    reader.read_exact(&mut header)?;
    let RecordHeader { kind, size, .. } = RecordHeader::parse(header);
    let size = u64::from(size);
    if size < RECORD_HEADER_SIZE as u64 {
        return Err(RecordsError::RecordTooSmall { offset, size }.into());
    }
    if size > data_end - offset {
        return Err(RecordsError::RecordPastData { offset }.into());
    }
    Ok((kind, size))
}

/// The zstd data of a compressed record's `body`: all of it for COMPRESSED; for COMPRESSED2
/// the part its first field says is data (the rest is padding).
fn compressed_data(kind: RecordType, body: &[u8], offset: u64) -> Result<&[u8], PerfDataError> {
    if kind == RecordType::COMPRESSED {
        return Ok(body);
    }
    match body.get(..8).map(|field| u64_at(field, 0)) {
        Some(data_size) if data_size <= body.len() as u64 - 8 => {
            Ok(&body[8..8 + data_size as usize])
        }
        _ => Err(RecordsError::Compressed {
            offset,
            reason: "its data size exceeds the record".to_owned(),
        }
        .into()),
    }
}
