//! Reading the records a perf event writes into its ring buffer.
//!
//! Protocol (include/uapi/linux/perf_event.h, `tools/lib/perf/mmap.c`): load `data_head` with
//! Acquire, read records between our tail and head, then store `data_tail` with Release. Records
//! are `perf_event_header`-framed, 8-byte aligned and sized; one may wrap around the end of the
//! data area, so each record is copied word by word into a buffer the reader owns before it is
//! parsed. Every load from the kernel-written area is an atomic load.
//!
//! # Safety
//! The reader holds the [`RingMapping`] it reads, so every pointer it forms stays inside a live
//! mapping; offsets are reduced modulo the (power-of-two) data size before use.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings as sys;

use crate::event::{sample, RingMapping};

/// `PERF_RECORD_LOST`.
pub const RECORD_LOST: u32 = sys::PERF_RECORD_LOST;
/// `PERF_RECORD_COMM`.
pub const RECORD_COMM: u32 = sys::PERF_RECORD_COMM;
/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = sys::PERF_RECORD_SAMPLE;
/// `PERF_RECORD_MMAP2`.
pub const RECORD_MMAP2: u32 = sys::PERF_RECORD_MMAP2;

const HEADER_BYTES: usize = 8;
/// The largest record: `perf_event_header.size` is a `u16`.
const MAX_RECORD_WORDS: usize = (u16::MAX as usize) / 8;

/// The ring's contents could not be parsed. The reader then skips everything up to the current
/// `data_head`, so one bad record costs the records around it, never a mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// A header whose size is below 8 bytes, not a multiple of 8, or beyond `data_head`.
    BadRecordSize {
        /// The size field.
        size: u16,
        /// Bytes available between tail and head.
        available: u64,
    },
    /// `data_head - data_tail` exceeds the data area (the kernel never does this).
    HeadOutOfRange {
        /// data_head.
        head: u64,
        /// our tail.
        tail: u64,
    },
    /// A record too short for the fields its type and `sample_type` imply.
    Truncated {
        /// Record type.
        record_type: u32,
        /// Record size in bytes.
        size: usize,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RingError::BadRecordSize { size, available } => write!(
                f,
                "malformed perf record: header size {size} with {available} bytes in the ring"
            ),
            RingError::HeadOutOfRange { head, tail } => write!(
                f,
                "perf ring data_head {head} is more than the data area ahead of tail {tail}"
            ),
            RingError::Truncated { record_type, size } => write!(
                f,
                "perf record of type {record_type} is too short ({size} bytes) for its fields"
            ),
        }
    }
}

impl std::error::Error for RingError {}

/// One record, copied out of the ring (header included).
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

fn u64_at(bytes: &[u8], off: usize) -> Option<u64> {
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
fn parse_trailer(bytes: &[u8], mut off: usize, sample_type: u64) -> Option<SampleId> {
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

/// Parses a sample record's leading fields (IDENTIFIER, IP, TID, TIME, ADDR, ID, STREAM_ID,
/// CPU); later fields are ignored.
fn parse_sample(bytes: &[u8], sample_type: u64) -> Option<SampleId> {
    let mut off = HEADER_BYTES;
    let mut id = SampleId::default();
    if sample_type & sys::PERF_SAMPLE_IDENTIFIER as u64 != 0 {
        u64_at(bytes, off)?;
        off += 8;
    }
    if sample_type & sys::PERF_SAMPLE_IP as u64 != 0 {
        u64_at(bytes, off)?;
        off += 8;
    }
    if sample_type & sample::TID != 0 {
        id.pid = Some(u32_at(bytes, off)?);
        id.tid = Some(u32_at(bytes, off + 4)?);
        off += 8;
    }
    if sample_type & sample::TIME != 0 {
        id.time = Some(u64_at(bytes, off)?);
        off += 8;
    }
    if sample_type & sample::ADDR != 0 {
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

/// What one [`RingReader::drain`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Records delivered to the callback.
    pub records: u64,
    /// `PERF_RECORD_LOST` records seen (each also delivered to the callback).
    pub lost_records: u64,
    /// Sum of their `lost` counts.
    pub lost: u64,
}

/// Reads the ring of one mapped perf event.
#[derive(Debug)]
pub struct RingReader {
    map: RingMapping,
    /// Our consumer position (what we last stored to `data_tail`).
    tail: u64,
    /// Copy of the record being parsed; sized for the largest record, allocated once.
    buf: Vec<u64>,
}

impl RingReader {
    /// Takes ownership of a mapped ring.
    pub fn new(map: RingMapping) -> Self {
        let page = map.page().as_ptr();
        // SAFETY: `data_tail` is inside the live control page and 8-aligned; it is written only
        // by user space (this reader), so a relaxed load of its initial value is enough.
        let tail =
            unsafe { atomic_at(core::ptr::addr_of!((*page).data_tail)) }.load(Ordering::Relaxed);
        Self {
            map,
            tail,
            buf: vec![0; MAX_RECORD_WORDS + 1],
        }
    }

    /// The mapping (for its time page).
    pub fn mapping(&self) -> &RingMapping {
        &self.map
    }

    /// Bytes written by the kernel and not yet consumed.
    pub fn pending(&self) -> u64 {
        self.head().wrapping_sub(self.tail)
    }

    fn head(&self) -> u64 {
        let page = self.map.page().as_ptr();
        // SAFETY: `data_head` is inside the live control page, 8-aligned; the kernel writes it.
        // ATOMICS: Acquire pairs with the kernel's smp_wmb()+store of data_head in
        // perf_output_put_handle, so the records below `head` are visible to our loads.
        unsafe { atomic_at(core::ptr::addr_of!((*page).data_head)) }.load(Ordering::Acquire)
    }

    fn store_tail(&mut self, tail: u64) {
        self.tail = tail;
        let page = self.map.page().as_ptr();
        // SAFETY: `data_tail` is inside the live, writable control page, 8-aligned.
        // ATOMICS: Release orders our reads of the consumed records before the kernel can see
        // the space as free; pairs with the kernel's smp_mb() after READ_ONCE(data_tail) in
        // perf_output_begin.
        unsafe { atomic_at(core::ptr::addr_of!((*page).data_tail)) }.store(tail, Ordering::Release);
    }

    /// Hands every record between our tail and the current `data_head` to `each`, then
    /// releases them to the kernel.
    ///
    /// # Errors
    /// A [`RingError`] for a malformed header; all records up to `data_head` are then skipped.
    pub fn drain(&mut self, mut each: impl FnMut(Record<'_>)) -> Result<DrainStats, RingError> {
        let head = self.head();
        let data_len = self.map.data_len() as u64;
        let mut tail = self.tail;
        let mut stats = DrainStats::default();
        if head.wrapping_sub(tail) > data_len {
            self.store_tail(head);
            return Err(RingError::HeadOutOfRange { head, tail });
        }
        let words = data_len / 8;
        let data = self.map.data().as_ptr().cast::<u64>();
        while tail != head {
            let available = head.wrapping_sub(tail);
            let first = (tail % data_len) / 8;
            // SAFETY: `first < words`, so the word is inside the data area; 8-aligned because
            // the data area is page-aligned.
            let header = unsafe { atomic_at(data.add(first as usize)) }.load(Ordering::Relaxed);
            let hb = header.to_ne_bytes();
            let record_type = u32::from_ne_bytes([hb[0], hb[1], hb[2], hb[3]]);
            let misc = u16::from_ne_bytes([hb[4], hb[5]]);
            let size = u16::from_ne_bytes([hb[6], hb[7]]);
            if usize::from(size) < HEADER_BYTES || size % 8 != 0 || u64::from(size) > available {
                self.store_tail(head);
                return Err(RingError::BadRecordSize { size, available });
            }
            let n = usize::from(size) / 8;
            for (i, slot) in self.buf[..n].iter_mut().enumerate() {
                let w = (first + i as u64) % words;
                // SAFETY: `w < words`: inside the data area, 8-aligned. The record wraps
                // around the end of the area through the modulo.
                *slot = unsafe { atomic_at(data.add(w as usize)) }.load(Ordering::Relaxed);
            }
            let bytes = words_as_bytes(&self.buf[..n]);
            let record = Record {
                record_type,
                misc,
                bytes,
            };
            if record_type == RECORD_LOST {
                stats.lost_records += 1;
                stats.lost += u64_at(bytes, 16).unwrap_or(0);
            }
            stats.records += 1;
            each(record);
            tail = tail.wrapping_add(u64::from(size));
        }
        self.store_tail(tail);
        Ok(stats)
    }
}

/// # Safety
/// `ptr` must be 8-aligned and valid for reads (and writes, if stored to) for `'a`.
unsafe fn atomic_at<'a>(ptr: *const u64) -> &'a AtomicU64 {
    // SAFETY: AtomicU64 has the same size and alignment as u64; the caller guarantees
    // alignment and validity. Concurrent kernel writes are fine for atomic accesses.
    unsafe { &*ptr.cast::<AtomicU64>() }
}

fn words_as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: u8 has no alignment requirement and every byte of a u64 is initialised; the
    // slice covers exactly the words' memory and borrows them.
    unsafe { core::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) }
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

    /// Plays the kernel: writes `words` into the data area from byte position `at` (mod
    /// size) and publishes `head`.
    fn kernel_writes(map: &RingMapping, at: u64, words: &[u64], head: u64) {
        let data = map.data().as_ptr().cast::<u64>();
        let n = map.data_len() as u64 / 8;
        for (i, w) in words.iter().enumerate() {
            // SAFETY: index reduced modulo the data area's word count.
            unsafe { *data.add(((at / 8 + i as u64) % n) as usize) = *w };
        }
        let page = map.page().as_ptr();
        // SAFETY: the control page of a live mapping.
        unsafe { atomic_at(core::ptr::addr_of!((*page).data_head)) }.store(head, Ordering::Release);
    }

    fn header_word(record_type: u32, misc: u16, size: u16) -> u64 {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&record_type.to_ne_bytes());
        b[4..6].copy_from_slice(&misc.to_ne_bytes());
        b[6..].copy_from_slice(&size.to_ne_bytes());
        u64::from_ne_bytes(b)
    }

    #[test]
    fn record_wrapping_the_end_is_reassembled() {
        let map = RingMapping::anonymous_for_test(0);
        let len = map.data_len() as u64;
        let start = 5 * len - 8; // tail far along, 8 bytes before the end of the area
        let page = map.page().as_ptr();
        // SAFETY: control page of a live mapping.
        unsafe { atomic_at(core::ptr::addr_of!((*page).data_tail)) }
            .store(start, Ordering::Relaxed);
        let words = [header_word(RECORD_LOST, 0, 24), 77, 5];
        kernel_writes(&map, start, &words, start + 24);
        let mut reader = RingReader::new(map);
        let mut seen = Vec::new();
        let stats = reader
            .drain(|rec| match rec.parse(0, false).unwrap() {
                Parsed::Lost { lost } => seen.push(lost),
                other => panic!("{other:?}"),
            })
            .unwrap();
        assert_eq!(stats.lost, 5);
        assert_eq!(stats.lost_records, 1);
        assert_eq!(seen, [5]);
        assert_eq!(reader.pending(), 0);
        // SAFETY: control page of a live mapping.
        let tail =
            unsafe { atomic_at(core::ptr::addr_of!((*reader.map.page().as_ptr()).data_tail)) }
                .load(Ordering::Relaxed);
        assert_eq!(tail, start + 24);
    }

    #[test]
    fn malformed_headers_are_errors_and_resynchronise() {
        for (size, head) in [(0u16, 8u64), (12, 16), (64, 16)] {
            let map = RingMapping::anonymous_for_test(0);
            kernel_writes(&map, 0, &[header_word(RECORD_COMM, 0, size), 0], head);
            let mut reader = RingReader::new(map);
            let r = reader.drain(|_| panic!("no record may be delivered"));
            assert!(
                matches!(r, Err(RingError::BadRecordSize { .. })),
                "{size}: {r:?}"
            );
            assert_eq!(reader.pending(), 0, "skipped to head");
        }
        let map = RingMapping::anonymous_for_test(0);
        let too_far = map.data_len() as u64 + 8;
        kernel_writes(&map, 0, &[], too_far);
        let mut reader = RingReader::new(map);
        assert!(matches!(
            reader.drain(|_| {}),
            Err(RingError::HeadOutOfRange { .. })
        ));
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
    }
}
