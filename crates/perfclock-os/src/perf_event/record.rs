//! Decoding perf records: a pure module over byte slices (no system call, no unsafe code), so
//! that it can be fuzzed.
//!
//! Records are `perf_event_header`-framed (`u32 type, u16 misc, u16 size`), 8-byte aligned and
//! sized. [`Record::parse`] decodes the fields perfclock needs for an event opened with a given
//! `sample_type` and `sample_id_all`; a record too short for them is [`RingError::Truncated`],
//! never a panic.

use perf_event_open_sys::bindings as sys;

use super::attr::sample;
use crate::error::RingError;

/// `PERF_RECORD_LOST`.
pub const RECORD_LOST: u32 = sys::PERF_RECORD_LOST;
/// `PERF_RECORD_COMM`.
pub const RECORD_COMM: u32 = sys::PERF_RECORD_COMM;
/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = sys::PERF_RECORD_SAMPLE;
/// `PERF_RECORD_MMAP2`.
pub const RECORD_MMAP2: u32 = sys::PERF_RECORD_MMAP2;

/// Bytes of `struct perf_event_header`.
pub const HEADER_BYTES: usize = 8;

/// One record, header included: borrowed from the ring, or copied out of it if it wraps.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// `perf_event_header.type`.
    pub record_type: u32,
    /// `perf_event_header.misc`.
    pub misc: u16,
    /// The whole record, header included, `size` bytes.
    pub bytes: &'a [u8],
}

/// The `sample_type` fields of a sample record or of a side-band record's `sample_id` trailer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleId {
    /// `PERF_SAMPLE_TID` pid.
    pub pid: Option<u32>,
    /// `PERF_SAMPLE_TID` tid.
    pub tid: Option<u32>,
    /// `PERF_SAMPLE_TIME`.
    pub time: Option<u64>,
    /// `PERF_SAMPLE_ADDR` (samples only).
    pub addr: Option<u64>,
    /// `PERF_SAMPLE_CPU`.
    pub cpu: Option<u32>,
}

/// A record decoded as far as perfclock needs.
#[derive(Debug, Clone, Copy)]
pub enum Parsed<'a> {
    /// `PERF_RECORD_COMM`.
    Comm {
        /// pid in the record body.
        pid: u32,
        /// tid in the record body.
        tid: u32,
        /// The name, without its NUL padding.
        comm: &'a [u8],
        /// `PERF_RECORD_MISC_COMM_EXEC`: the name changed because of exec.
        exec: bool,
        /// The trailer (needs `sample_id_all`).
        id: SampleId,
    },
    /// `PERF_RECORD_MMAP2`.
    Mmap2 {
        /// pid in the record body.
        pid: u32,
        /// tid in the record body.
        tid: u32,
        /// Start of the mapping.
        addr: u64,
        /// Length of the mapping.
        len: u64,
        /// `PROT_*` of the mapping.
        prot: u32,
        /// The file name (`//anon` for anonymous memory), without NUL padding.
        filename: &'a [u8],
        /// The trailer (needs `sample_id_all`).
        id: SampleId,
    },
    /// `PERF_RECORD_SAMPLE`.
    Sample(SampleId),
    /// `PERF_RECORD_LOST`: the kernel dropped `lost` records because the ring was full.
    Lost {
        /// How many records were dropped.
        lost: u64,
    },
    /// Any other record type.
    Other {
        /// `perf_event_header.type`.
        record_type: u32,
    },
}

fn u32_at(bytes: &[u8], off: usize) -> Option<u32> {
    let b = bytes.get(off..off.checked_add(4)?)?;
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

pub(crate) fn u64_at(bytes: &[u8], off: usize) -> Option<u64> {
    let b = bytes.get(off..off.checked_add(8)?)?;
    Some(u64::from_ne_bytes(b.try_into().ok()?))
}

fn trim_nul(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

/// Bytes of the `sample_id` trailer that `sample_id_all` appends for `sample_type`.
fn trailer_len(sample_type: u64) -> usize {
    let mut len = 0;
    for (bit, bytes) in [
        (sample::TID, 8),
        (sample::TIME, 8),
        (sys::PERF_SAMPLE_ID as u64, 8),
        (sys::PERF_SAMPLE_STREAM_ID as u64, 8),
        (sample::CPU, 8),
        (sys::PERF_SAMPLE_IDENTIFIER as u64, 8),
    ] {
        if sample_type & bit != 0 {
            len += bytes;
        }
    }
    len
}

/// Parses the `sample_id` trailer starting at `off` (layout: TID, TIME, ID, STREAM_ID, CPU,
/// IDENTIFIER).
fn parse_trailer(bytes: &[u8], off: usize, sample_type: u64) -> Option<SampleId> {
    parse_from_tid(bytes, off, sample_type, false)
}

/// Parses a sample record's leading fields (IDENTIFIER, IP, TID, TIME, ADDR, ID, STREAM_ID,
/// CPU); later fields are ignored.
fn parse_sample(bytes: &[u8], sample_type: u64) -> Option<SampleId> {
    let mut off = HEADER_BYTES;
    if sample_type & sys::PERF_SAMPLE_IDENTIFIER as u64 != 0 {
        u64_at(bytes, off)?;
        off += 8;
    }
    if sample_type & sys::PERF_SAMPLE_IP as u64 != 0 {
        u64_at(bytes, off)?;
        off += 8;
    }
    parse_from_tid(bytes, off, sample_type, true)
}

/// The fields a sample and a `sample_id` trailer lay out alike, from TID on: TID, TIME, ADDR
/// (samples only: `with_addr`), ID, STREAM_ID, CPU.
fn parse_from_tid(
    bytes: &[u8],
    mut off: usize,
    sample_type: u64,
    with_addr: bool,
) -> Option<SampleId> {
    let mut id = SampleId::default();
    if sample_type & sample::TID != 0 {
        id.pid = Some(u32_at(bytes, off)?);
        id.tid = Some(u32_at(bytes, off + 4)?);
        off += 8;
    }
    if sample_type & sample::TIME != 0 {
        id.time = Some(u64_at(bytes, off)?);
        off += 8;
    }
    if with_addr && sample_type & sample::ADDR != 0 {
        id.addr = Some(u64_at(bytes, off)?);
        off += 8;
    }
    if sample_type & sys::PERF_SAMPLE_ID as u64 != 0 {
        off += 8;
    }
    if sample_type & sys::PERF_SAMPLE_STREAM_ID as u64 != 0 {
        off += 8;
    }
    if sample_type & sample::CPU != 0 {
        id.cpu = Some(u32_at(bytes, off)?);
    }
    Some(id)
}

impl<'a> Record<'a> {
    /// The record at the start of `bytes`, framed by its header's size.
    ///
    /// # Errors
    /// [`RingError::BadRecordSize`] for a size below the header, not a multiple of 8, or beyond
    /// `bytes`.
    ///
    /// ```
    /// use perfclock_os::perf_event::record::{Parsed, Record, RECORD_LOST};
    ///
    /// let mut bytes = Vec::new();
    /// bytes.extend_from_slice(&RECORD_LOST.to_ne_bytes());
    /// bytes.extend_from_slice(&0u16.to_ne_bytes());
    /// bytes.extend_from_slice(&24u16.to_ne_bytes());
    /// bytes.extend_from_slice(&7u64.to_ne_bytes()); // id
    /// bytes.extend_from_slice(&5u64.to_ne_bytes()); // lost
    /// let record = Record::from_bytes(&bytes)?;
    /// assert!(matches!(record.parse(0, false)?, Parsed::Lost { lost: 5 }));
    /// # Ok::<(), perfclock_os::RingError>(())
    /// ```
    pub fn from_bytes(bytes: &'a [u8]) -> Result<Self, RingError> {
        let available = bytes.len() as u64;
        let bad = |size| RingError::BadRecordSize { size, available };
        let header = bytes.get(..HEADER_BYTES).ok_or(bad(0))?;
        let record_type = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
        let misc = u16::from_ne_bytes([header[4], header[5]]);
        let size = u16::from_ne_bytes([header[6], header[7]]);
        if usize::from(size) < HEADER_BYTES || size % 8 != 0 {
            return Err(bad(size));
        }
        let bytes = bytes.get(..usize::from(size)).ok_or(bad(size))?;
        Ok(Self {
            record_type,
            misc,
            bytes,
        })
    }
    /// Decodes the record for an event opened with `sample_type` and `sample_id_all`.
    ///
    /// # Errors
    /// [`RingError::Truncated`] when the record is shorter than its fields.
    pub fn parse(&self, sample_type: u64, sample_id_all: bool) -> Result<Parsed<'a>, RingError> {
        let bytes = self.bytes;
        let truncated = RingError::Truncated {
            record_type: self.record_type,
            size: bytes.len(),
        };
        let trailer = if sample_id_all {
            trailer_len(sample_type)
        } else {
            0
        };
        let body_end = bytes.len().checked_sub(trailer).ok_or(truncated)?;
        if body_end < HEADER_BYTES {
            return Err(truncated);
        }
        let id = || -> Result<SampleId, RingError> {
            if sample_id_all {
                parse_trailer(bytes, body_end, sample_type).ok_or(truncated)
            } else {
                Ok(SampleId::default())
            }
        };
        match self.record_type {
            RECORD_COMM => {
                // struct { header; u32 pid, tid; char comm[]; sample_id }
                let pid = u32_at(bytes, 8).ok_or(truncated)?;
                let tid = u32_at(bytes, 12).ok_or(truncated)?;
                let comm = bytes.get(16..body_end).ok_or(truncated)?;
                Ok(Parsed::Comm {
                    pid,
                    tid,
                    comm: trim_nul(comm),
                    exec: u32::from(self.misc) & sys::PERF_RECORD_MISC_COMM_EXEC != 0,
                    id: id()?,
                })
            }
            RECORD_MMAP2 => {
                // struct { header; u32 pid, tid; u64 addr, len, pgoff;
                //          union { u32 maj, min; u64 ino, ino_generation; } |
                //                { u8 build_id_size, __reserved_1; u16 __reserved_2;
                //                  u8 build_id[20]; };   (24 bytes either way)
                //          u32 prot, flags; char filename[]; sample_id }
                let pid = u32_at(bytes, 8).ok_or(truncated)?;
                let tid = u32_at(bytes, 12).ok_or(truncated)?;
                let addr = u64_at(bytes, 16).ok_or(truncated)?;
                let len = u64_at(bytes, 24).ok_or(truncated)?;
                let prot = u32_at(bytes, 64).ok_or(truncated)?;
                let filename = bytes.get(72..body_end).ok_or(truncated)?;
                Ok(Parsed::Mmap2 {
                    pid,
                    tid,
                    addr,
                    len,
                    prot,
                    filename: trim_nul(filename),
                    id: id()?,
                })
            }
            RECORD_SAMPLE => Ok(Parsed::Sample(
                parse_sample(bytes, sample_type).ok_or(truncated)?,
            )),
            RECORD_LOST => {
                // struct { header; u64 id; u64 lost; sample_id }
                let lost = u64_at(bytes, 16).ok_or(truncated)?;
                Ok(Parsed::Lost { lost })
            }
            record_type => Ok(Parsed::Other { record_type }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(record_type: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let size = (8 + body.len()) as u16;
        let mut v = Vec::new();
        v.extend_from_slice(&record_type.to_ne_bytes());
        v.extend_from_slice(&misc.to_ne_bytes());
        v.extend_from_slice(&size.to_ne_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn parses_comm_with_trailer() {
        let st = sample::TID | sample::TIME | sample::CPU;
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend_from_slice(&8u32.to_ne_bytes());
        body.extend_from_slice(b"abc\0\0\0\0\0");
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend_from_slice(&8u32.to_ne_bytes());
        body.extend_from_slice(&123_456u64.to_ne_bytes());
        body.extend_from_slice(&1u32.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        let bytes = record(RECORD_COMM, 0, &body);
        let rec = Record {
            record_type: RECORD_COMM,
            misc: 0,
            bytes: &bytes,
        };
        match rec.parse(st, true).unwrap() {
            Parsed::Comm {
                pid,
                tid,
                comm,
                exec,
                id,
            } => {
                assert_eq!((pid, tid, comm, exec), (7, 8, &b"abc"[..], false));
                assert_eq!(id.time, Some(123_456));
                assert_eq!(id.cpu, Some(1));
                assert_eq!((id.pid, id.tid), (Some(7), Some(8)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn truncated_records_are_errors_not_panics() {
        let st = sample::TID | sample::TIME | sample::CPU | sample::ADDR;
        for ty in [RECORD_COMM, RECORD_MMAP2, RECORD_SAMPLE, RECORD_LOST] {
            for len in (0..96).step_by(8) {
                let bytes = record(ty, 0, &vec![0u8; len]);
                let rec = Record {
                    record_type: ty,
                    misc: 0,
                    bytes: &bytes,
                };
                // Must not panic; short ones must be Truncated.
                let r = rec.parse(st, true);
                if len < 8 {
                    assert!(matches!(r, Err(RingError::Truncated { .. })), "{ty} {len}");
                }
            }
        }
    }

    #[test]
    fn sample_fields_in_kernel_order() {
        let st = sample::TID | sample::TIME | sample::ADDR | sample::CPU;
        let mut body = Vec::new();
        body.extend_from_slice(&1u32.to_ne_bytes());
        body.extend_from_slice(&2u32.to_ne_bytes());
        body.extend_from_slice(&99u64.to_ne_bytes());
        body.extend_from_slice(&0xdead_b000u64.to_ne_bytes());
        body.extend_from_slice(&3u32.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        let bytes = record(RECORD_SAMPLE, 0, &body);
        let rec = Record {
            record_type: RECORD_SAMPLE,
            misc: 0,
            bytes: &bytes,
        };
        let Parsed::Sample(id) = rec.parse(st, true).unwrap() else {
            panic!("not a sample")
        };
        assert_eq!(
            id,
            SampleId {
                pid: Some(1),
                tid: Some(2),
                time: Some(99),
                addr: Some(0xdead_b000),
                cpu: Some(3)
            }
        );
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(
            ty in 0u32..20,
            misc in proptest::num::u16::ANY,
            st in proptest::num::u64::ANY,
            all in proptest::bool::ANY,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
        ) {
            let bytes = record(ty, misc, &body);
            let rec = Record { record_type: ty, misc, bytes: &bytes };
            let _ = rec.parse(st, all);
        }

        #[test]
        fn framing_stays_inside_the_bytes(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            st in proptest::num::u64::ANY,
        ) {
            let mut rest = &bytes[..];
            while let Ok(rec) = Record::from_bytes(rest) {
                let size = rec.bytes.len();
                proptest::prop_assert!(size >= HEADER_BYTES && size % 8 == 0 && size <= rest.len());
                let _ = rec.parse(st, true);
                rest = &rest[size..];
            }
        }
    }
}
