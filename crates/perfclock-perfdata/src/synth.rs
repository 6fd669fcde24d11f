//! Synthetic perf.data files, for tests, fuzzing and scaling runs (the `synth` feature): a
//! header, one event attribute with one ID, records, and feature sections, laid out as `perf
//! record` writes them or with the attribute and ID sections after the data. Written from the
//! layout perf documents, independently of the reader's code.

use crate::{Feature, RecordType};

/// `sizeof(struct perf_event_attr)` (version 8) plus the ID section.
pub const ATTR_SIZE: usize = 136;
/// Offset of the data section's size in the header.
pub const DATA_SIZE_AT: usize = 48;

/// The longest body a record can have (its size is a u16, header included, 8-byte aligned).
pub const MAX_BODY: usize = 65_520;

/// A record: 8-byte header (`type`, `misc` 0, `size`) and `body` padded to 8 bytes (cut to
/// [`MAX_BODY`]).
pub fn record(kind: RecordType, body: &[u8]) -> Vec<u8> {
    let mut body = body[..body.len().min(MAX_BODY)].to_vec();
    body.resize(body.len().div_ceil(8) * 8, 0);
    let mut out = Vec::new();
    out.extend_from_slice(&kind.0.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&((8 + body.len()) as u16).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// `PERF_RECORD_MMAP2` of `filename` by `pid`, executable.
pub fn mmap2(pid: u32, filename: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&pid.to_le_bytes());
    body.extend_from_slice(&pid.to_le_bytes());
    body.extend_from_slice(&0x7f00_0000_0000u64.to_le_bytes()); // addr
    body.extend_from_slice(&4096u64.to_le_bytes()); // len
    body.extend_from_slice(&0u64.to_le_bytes()); // pgoff
    body.extend_from_slice(&[0; 24]); // maj, min, ino, ino_generation
    body.extend_from_slice(&5u32.to_le_bytes()); // PROT_READ | PROT_EXEC
    body.extend_from_slice(&2u32.to_le_bytes()); // MAP_PRIVATE
    body.extend_from_slice(filename.as_bytes());
    body.push(0);
    record(RecordType::MMAP2, &body)
}

/// `PERF_RECORD_MMAP` of `filename` by `pid`.
pub fn mmap(pid: u32, filename: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&pid.to_le_bytes());
    body.extend_from_slice(&pid.to_le_bytes());
    body.extend_from_slice(&0x7f00_0000_0000u64.to_le_bytes());
    body.extend_from_slice(&4096u64.to_le_bytes());
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend_from_slice(filename.as_bytes());
    body.push(0);
    record(RecordType::MMAP, &body)
}

/// `PERF_RECORD_COMM` of `pid`.
pub fn comm(pid: u32, name: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&pid.to_le_bytes());
    body.extend_from_slice(&pid.to_le_bytes());
    body.extend_from_slice(name.as_bytes());
    body.push(0);
    record(RecordType::COMM, &body)
}

/// A perf.data to build.
#[derive(Debug, Clone, Default)]
pub struct Synth {
    /// The data section's records, in order.
    pub records: Vec<Vec<u8>>,
    /// Feature bits and their sections' contents, in bit order.
    pub features: Vec<(Feature, Vec<u8>)>,
    /// Write the ID and attribute sections after the features instead of before the data.
    pub attrs_after_data: bool,
}

/// Where the parts of a built file are.
#[derive(Debug, Clone, Default)]
pub struct Built {
    /// The file.
    pub bytes: Vec<u8>,
    /// Data section offset and size.
    pub data: (usize, usize),
    /// Attribute section offset.
    pub attrs: usize,
    /// ID section offset.
    pub ids: usize,
    /// Each feature section's offset.
    pub feature_offsets: Vec<usize>,
}

fn attr_entry(ids_offset: usize) -> Vec<u8> {
    let mut attr = vec![0u8; ATTR_SIZE];
    attr[0..4].copy_from_slice(&1u32.to_le_bytes()); // PERF_TYPE_SOFTWARE
    attr[4..8].copy_from_slice(&120u32.to_le_bytes()); // attr.size
    attr[120..128].copy_from_slice(&(ids_offset as u64).to_le_bytes());
    attr[128..136].copy_from_slice(&8u64.to_le_bytes());
    attr
}

impl Synth {
    /// Lays the file out.
    ///
    /// # Panics
    /// If a feature bit is 256 or more.
    pub fn build(&self) -> Built {
        let data: Vec<u8> = self.records.concat();
        let mut built = Built::default();
        let mut out = vec![0u8; 104];
        let ids_bytes = 42u64.to_le_bytes();
        let place_attrs = |out: &mut Vec<u8>, built: &mut Built| {
            built.ids = out.len();
            out.extend_from_slice(&ids_bytes);
            built.attrs = out.len();
            let entry = attr_entry(built.ids);
            out.extend_from_slice(&entry);
        };
        if !self.attrs_after_data {
            place_attrs(&mut out, &mut built);
        }
        built.data = (out.len(), data.len());
        out.extend_from_slice(&data);
        let table_at = out.len();
        out.resize(table_at + 16 * self.features.len(), 0);
        for (index, (_, contents)) in self.features.iter().enumerate() {
            let offset = out.len();
            built.feature_offsets.push(offset);
            out.extend_from_slice(contents);
            let entry = table_at + 16 * index;
            out[entry..entry + 8].copy_from_slice(&(offset as u64).to_le_bytes());
            out[entry + 8..entry + 16].copy_from_slice(&(contents.len() as u64).to_le_bytes());
        }
        if self.attrs_after_data {
            place_attrs(&mut out, &mut built);
        }
        out[0..8].copy_from_slice(b"PERFILE2");
        out[8..16].copy_from_slice(&104u64.to_le_bytes());
        out[16..24].copy_from_slice(&(ATTR_SIZE as u64).to_le_bytes());
        out[24..32].copy_from_slice(&(built.attrs as u64).to_le_bytes());
        out[32..40].copy_from_slice(&(ATTR_SIZE as u64).to_le_bytes());
        out[40..48].copy_from_slice(&(built.data.0 as u64).to_le_bytes());
        out[48..56].copy_from_slice(&(built.data.1 as u64).to_le_bytes());
        for (Feature(bit), _) in &self.features {
            let word = 72 + 8 * (*bit as usize / 64);
            let mut value = u64::from_le_bytes(out[word..word + 8].try_into().unwrap());
            value |= 1 << (bit % 64);
            out[word..word + 8].copy_from_slice(&value.to_le_bytes());
        }
        built.bytes = out;
        built
    }
}

/// u64 at `at`, little-endian: the reader's own, for tests that check fields of what they built.
///
/// # Panics
/// If `bytes` is shorter than `at + 8`.
pub fn u64_at(bytes: &[u8], at: usize) -> u64 {
    crate::section::u64_at(bytes, at)
}
