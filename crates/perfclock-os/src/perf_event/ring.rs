//! Reading the records a perf event writes into its ring buffer.
//!
//! Protocol (include/uapi/linux/perf_event.h, `tools/lib/perf/mmap.c`): load `data_head` with
//! Acquire, read records between our tail and head, then store `data_tail` with Release. The
//! kernel never writes between `data_tail` and `data_head`, so a record there is handed out as
//! a slice of the ring itself; only a record that wraps around the end of the data area is
//! copied, into a buffer the reader owns, as `perf_mmap__read_event` does.
//!
//! # Safety
//! The reader holds the [`RingMapping`] it reads, so every pointer it forms stays inside a live
//! mapping; offsets are reduced modulo the (power-of-two) data size before use. Slices are
//! formed only over published, unconsumed records, and live no longer than the callback that
//! receives them: the tail that frees them is stored after the callback returns.
#![allow(unsafe_code)]

use core::sync::atomic::{AtomicU64, Ordering};

use super::record::{u64_at, Record, HEADER_BYTES, RECORD_LOST};
use crate::error::RingError;
use crate::mapping::RingMapping;

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
    /// A record that wraps around the end of the data area, reassembled; allocated on first use.
    wrapped: Vec<u8>,
}

impl RingReader {
    /// Takes ownership of a mapped ring.
    ///
    /// # Example
    /// ```no_run
    /// use perfclock_os::perf_event::record::Parsed;
    /// use perfclock_os::{sample, EventAttr, PerfEvent, RingReader};
    ///
    /// let attr = EventAttr::dummy().sample_type(sample::TID | sample::TIME).sample_id_all(true).comm(true);
    /// let event = PerfEvent::open(&attr)?;
    /// let mut ring = RingReader::new(event.map_ring(3)?);
    /// let stats = ring.drain(|record| {
    ///     if let Ok(Parsed::Comm { comm, id, .. }) = record.parse(event.sample_type(), true) {
    ///         println!("{:?} at {:?} ns", comm, id.time);
    ///     }
    /// })?;
    /// println!("{} records", stats.records);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(map: RingMapping) -> Self {
        let page = map.page().as_ptr();
        // SAFETY: `data_tail` is inside the live control page and 8-aligned; it is written only
        // by user space (this reader), so a relaxed load of its initial value is enough.
        let tail =
            unsafe { atomic_at(core::ptr::addr_of!((*page).data_tail)) }.load(Ordering::Relaxed);
        Self {
            map,
            tail,
            wrapped: Vec::new(),
        }
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
        let data_len = self.map.data_len();
        let mut tail = self.tail;
        let mut stats = DrainStats::default();
        if head.wrapping_sub(tail) > data_len as u64 {
            self.store_tail(head);
            return Err(RingError::HeadOutOfRange { head, tail });
        }
        let data = self.map.data().as_ptr();
        while tail != head {
            let available = head.wrapping_sub(tail);
            // `data_len` is a power of two no larger than usize, so the offset fits.
            let offset = (tail % data_len as u64) as usize;
            // SAFETY: `offset` is below `data_len` and 8-aligned (records are 8-byte sized and
            // the data area is page-aligned), so the header word is inside the data area.
            let header =
                unsafe { atomic_at(data.add(offset).cast::<u64>()) }.load(Ordering::Relaxed);
            let hb = header.to_ne_bytes();
            let size = u16::from_ne_bytes([hb[6], hb[7]]);
            if usize::from(size) < HEADER_BYTES || size % 8 != 0 || u64::from(size) > available {
                self.store_tail(head);
                return Err(RingError::BadRecordSize { size, available });
            }
            let size_bytes = usize::from(size);
            let bytes: &[u8] = if offset + size_bytes <= data_len {
                // SAFETY: `offset..offset + size` is inside the data area and lies between our
                // tail and `head`, which the kernel does not write until we store a tail past
                // it (after `each` returns and this slice is gone).
                unsafe { core::slice::from_raw_parts(data.add(offset), size_bytes) }
            } else {
                let first = data_len - offset;
                self.wrapped.clear();
                // SAFETY: the record's two pieces, `offset..data_len` and `0..size - first`,
                // are inside the data area and not written by the kernel (as above).
                unsafe {
                    self.wrapped
                        .extend_from_slice(core::slice::from_raw_parts(data.add(offset), first));
                    self.wrapped
                        .extend_from_slice(core::slice::from_raw_parts(data, size_bytes - first));
                }
                &self.wrapped
            };
            let record = Record::from_bytes(bytes)
                .map_err(|_| RingError::BadRecordSize { size, available })?;
            if record.record_type == RECORD_LOST {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_event::record::{Parsed, RECORD_COMM};

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

    #[test]
    fn records_that_do_not_wrap_are_borrowed_from_the_ring() {
        let map = RingMapping::anonymous_for_test(0);
        let data = map.data().as_ptr() as usize;
        let len = map.data_len();
        kernel_writes(&map, 0, &[header_word(RECORD_LOST, 0, 24), 1, 3], 24);
        let mut reader = RingReader::new(map);
        let mut at = None;
        reader
            .drain(|rec| at = Some(rec.bytes.as_ptr() as usize))
            .unwrap();
        let at = at.expect("one record");
        assert!((data..data + len).contains(&at), "copied, not borrowed");
    }
}
