//! The shared clock page: the file `perfclock serve` publishes its calibrated conversion in, so
//! that every process of a machine reads one conversion instead of calibrating its own.
//!
//! # Layout (one 4 KiB page, native byte order)
//! | offset | what |
//! |---|---|
//! | 0 | a `perf_event_mmap_page` (the primary page readers' fast path reads) |
//! | 1088 | its mirror (the writer finishes it before it touches the primary) |
//! | 2176 | [`SharedHeader`]: magic, format version, header seqlock, boot id, server pid, heartbeat, bound |
//!
//! The two perf pages follow the kernel page's seqlock protocol, so a client reads them with the
//! same [`PageReader`] (and the same inlined fast path) as the kernel's page. The header has a
//! seqlock of its own, and every change of the file (the conversion included) happens inside a
//! header write section, so a copy taken under the header lock ([`SharedPageReader::snapshot`])
//! is consistent as a whole and can be judged by the pure [`parse`] (which the fuzzer drives with
//! arbitrary bytes).
//!
//! # Heartbeat and staleness
//! The server writes the raw counter value of its last refresh ([`SharedHeader::heartbeat_counter`])
//! every [`HEARTBEAT_INTERVAL_NS`]. A page whose heartbeat is older than [`STALE_AFTER_NS`]
//! ([`STALE_AFTER_INTERVALS`] intervals) is stale: a client refuses it at open and reports its
//! bound as unknown while it stays stale.
//!
//! # Safety
//! Readers and the writer hold raw pointers into a shared file mapping that another process
//! writes; every access to a header field is an atomic load or store, formed only under the
//! constructors' contracts.
#![allow(unsafe_code)]

use core::marker::PhantomData;
use core::mem::{offset_of, size_of};
use core::ptr::{addr_of_mut, NonNull};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::page::{PerfEventMmapPage, PAGE_LAYOUT_BYTES};
use crate::seq_lock::SeqLock;
use crate::{BootId, PageDefect, ReadError, TimeConversion};
use crate::{PageReader, PageWriter, RawTimeFields};

/// `SharedHeader::magic`: "perfclk1" read as a native-endian word.
pub const MAGIC: u64 = u64::from_ne_bytes(*b"perfclk1");
/// The layout version this build reads and writes.
pub const VERSION: u32 = 1;
/// Size of the shared file: one page.
pub const FILE_BYTES: usize = 4096;
/// Offset of the primary perf page.
pub const PRIMARY_OFFSET: usize = 0;
/// Offset of the mirror perf page.
pub const MIRROR_OFFSET: usize = PAGE_LAYOUT_BYTES;
/// Offset of the [`SharedHeader`].
pub const HEADER_OFFSET: usize = 2 * PAGE_LAYOUT_BYTES;
/// Bytes of the file the layout uses (the rest of the page is zero).
pub const LAYOUT_BYTES: usize = HEADER_OFFSET + size_of::<SharedHeader>();
/// How often the server refreshes the heartbeat, ns.
pub const HEARTBEAT_INTERVAL_NS: u64 = 1_000_000_000;
/// Refresh intervals without a heartbeat after which a page is stale.
pub const STALE_AFTER_INTERVALS: u64 = 5;
/// Age of the heartbeat past which a page is stale, ns (5 s).
pub const STALE_AFTER_NS: u64 = STALE_AFTER_INTERVALS * HEARTBEAT_INTERVAL_NS;
/// A conversion whose slope (ns per counter tick) is outside this range is garbage: counters
/// run between 1 MHz and 20 GHz.
pub const SANE_SLOPE_NS_PER_TICK: (f64, f64) = (0.05, 1000.0);
/// Attempts at a consistent copy before a reader gives up ([`PageDefect::Busy`]).
pub const MAX_RETRIES: u32 = 10_000;
/// Fixed-point scale of [`SharedBound::growth_q48`] (perfclock-calib's `GROWTH_SCALE_LOG2`).
pub const GROWTH_SCALE_LOG2: u32 = 48;

/// The header after the two perf pages. Every field is accessed atomically.
#[repr(C)]
#[derive(Debug)]
pub struct SharedHeader {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`VERSION`].
    pub version: u32,
    /// Seqlock over the header and the perf pages: odd while the server changes anything.
    pub lock: u32,
    /// The boot's id ([`BootId::words`]): counter values mean nothing in another boot.
    pub boot_id: [u64; 2],
    /// The serving process.
    pub server_pid: u64,
    /// Raw counter value of the server's last refresh.
    pub heartbeat_counter: u64,
    /// The published conversion's error bound: `base_ns + growth * |c - counter_ref|`.
    pub bound_base_ns: u64,
    /// Growth of the bound in ns per counter tick times 2^48.
    pub bound_growth_q48: u64,
    /// Counter value the bound is anchored at.
    pub bound_counter_ref: u64,
}

const _: () = {
    assert!(HEADER_OFFSET % 8 == 0);
    assert!(LAYOUT_BYTES <= FILE_BYTES);
    assert!(offset_of!(SharedHeader, lock) == 12);
    assert!(offset_of!(SharedHeader, bound_counter_ref) == 64);
};

/// An error bound, `bound(c) = base_ns + growth * |c - counter_ref|`: what a calibration
/// publishes (perfclock-calib's `BoundModel` is this type) and what the shared page stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedBound {
    /// Bound at `counter_ref`, ns.
    pub base_ns: u64,
    /// Growth in ns per counter tick, times 2^48.
    pub growth_q48: u64,
    /// Counter value the bound is anchored at.
    pub counter_ref: u64,
}

impl SharedBound {
    /// A bound that says "no idea": what readers get while nothing is published.
    pub const UNKNOWN: SharedBound = SharedBound {
        base_ns: u64::MAX,
        growth_q48: 0,
        counter_ref: 0,
    };

    /// The bound at counter value `counter`, ns, saturating at `u64::MAX`.
    pub fn at(&self, counter: u64) -> u64 {
        let distance = counter.abs_diff(self.counter_ref);
        let grown = (u128::from(distance) * u128::from(self.growth_q48)) >> GROWTH_SCALE_LOG2;
        let grown = u64::try_from(grown).unwrap_or(u64::MAX);
        self.base_ns.saturating_add(grown).saturating_add(1)
    }

    /// Counter ticks after `counter_ref` until the bound exceeds `base_ns + extra_ns`
    /// (`u64::MAX` if it never grows).
    pub fn ticks_until_growth(&self, extra_ns: u64) -> u64 {
        if self.growth_q48 == 0 {
            return u64::MAX;
        }
        let ticks = (u128::from(extra_ns) << GROWTH_SCALE_LOG2) / u128::from(self.growth_q48);
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }
}

/// What one consistent copy of the page says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedSnapshot {
    /// The boot the counter values belong to.
    pub boot_id: BootId,
    /// The serving process.
    pub server_pid: u32,
    /// Raw counter value of the last refresh.
    pub heartbeat_counter: u64,
    /// The conversion readers use.
    pub conversion: TimeConversion,
    /// Its error bound.
    pub bound: SharedBound,
}

impl SharedSnapshot {
    /// Nanoseconds since the last heartbeat at counter value `now` (0 if the heartbeat is
    /// ahead of `now`, as it can be by a few ticks across CPUs).
    pub fn heartbeat_age_ns(&self, now: u64) -> u64 {
        let c = &self.conversion;
        c.cycles_to_ns(now)
            .saturating_sub(c.cycles_to_ns(self.heartbeat_counter))
    }

    /// Whether the page can be used at counter value `now` in the boot `boot_id`.
    ///
    /// # Errors
    /// [`PageDefect::OtherBoot`], [`PageDefect::Stale`], or [`PageDefect::Garbage`] for a
    /// heartbeat more than a heartbeat interval in the future.
    pub fn check_fresh(&self, boot_id: BootId, now: u64) -> Result<(), PageDefect> {
        if self.boot_id != boot_id {
            return Err(PageDefect::OtherBoot);
        }
        let c = &self.conversion;
        let (now_ns, beat_ns) = (c.cycles_to_ns(now), c.cycles_to_ns(self.heartbeat_counter));
        if beat_ns > now_ns.saturating_add(HEARTBEAT_INTERVAL_NS) {
            return Err(PageDefect::Garbage("heartbeat in the future"));
        }
        let age_ns = now_ns.saturating_sub(beat_ns);
        if age_ns > STALE_AFTER_NS {
            return Err(PageDefect::Stale {
                age_ns,
                after_ns: STALE_AFTER_NS,
            });
        }
        Ok(())
    }
}

fn word(bytes: &[u8], offset: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_ne_bytes(w)
}

fn half(bytes: &[u8], offset: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_ne_bytes(w)
}

/// The time fields of the perf page at `base` in `bytes`, or `None` if its lock is odd.
fn page_fields(bytes: &[u8], base: usize) -> Option<RawTimeFields> {
    if half(bytes, base + offset_of!(PerfEventMmapPage, lock)) & 1 != 0 {
        return None;
    }
    let scale = word(bytes, base + offset_of!(PerfEventMmapPage, pmc_width)).to_ne_bytes();
    Some(RawTimeFields {
        capabilities: word(bytes, base + offset_of!(PerfEventMmapPage, capabilities)),
        time_shift: u16::from_ne_bytes([scale[2], scale[3]]),
        time_mult: u32::from_ne_bytes([scale[4], scale[5], scale[6], scale[7]]),
        time_zero: word(bytes, base + offset_of!(PerfEventMmapPage, time_zero)),
        time_cycles: word(bytes, base + offset_of!(PerfEventMmapPage, time_cycles)),
        time_mask: word(bytes, base + offset_of!(PerfEventMmapPage, time_mask)),
    })
}

/// The conversion `fields` publish, if a reader accepts it and its slope is plausible.
fn sane_conversion(fields: RawTimeFields) -> Result<TimeConversion, PageDefect> {
    let conversion = fields.conversion().map_err(|error| match error {
        ReadError::TimeZeroUnavailable { .. } => PageDefect::Garbage("no conversion published"),
        _ => PageDefect::Garbage("invalid conversion parameters"),
    })?;
    let slope = f64::from(conversion.mult()) / (1u64 << conversion.shift()) as f64;
    if !(SANE_SLOPE_NS_PER_TICK.0..=SANE_SLOPE_NS_PER_TICK.1).contains(&slope) {
        return Err(PageDefect::Garbage(
            "conversion slope outside 0.05..1000 ns per tick",
        ));
    }
    Ok(conversion)
}

/// Judges a copy of a shared clock file: the format, the conversion and the bound, not yet the
/// boot or the heartbeat's age ([`SharedSnapshot::check_fresh`]). Never panics, whatever the
/// bytes.
///
/// # Errors
/// [`PageDefect::Truncated`], [`PageDefect::Garbage`], [`PageDefect::Version`],
/// [`PageDefect::Busy`] (the copy caught the writer mid-update).
pub fn parse(bytes: &[u8]) -> Result<SharedSnapshot, PageDefect> {
    if bytes.len() < LAYOUT_BYTES {
        return Err(PageDefect::Truncated {
            len: bytes.len(),
            needed: LAYOUT_BYTES,
        });
    }
    let h = HEADER_OFFSET;
    if word(bytes, h + offset_of!(SharedHeader, magic)) != MAGIC {
        return Err(PageDefect::Garbage("no perfclock shared page magic"));
    }
    let version = half(bytes, h + offset_of!(SharedHeader, version));
    if version != VERSION {
        return Err(PageDefect::Version {
            found: version,
            expected: VERSION,
        });
    }
    if half(bytes, h + offset_of!(SharedHeader, lock)) & 1 != 0 {
        return Err(PageDefect::Busy);
    }
    // Readers read the primary page, and the mirror only while the primary is being written. The
    // two differ only if a server died between writing the mirror and the primary: the primary
    // is then what readers read. Each stable one must publish a sane conversion.
    let primary = page_fields(bytes, PRIMARY_OFFSET);
    let mirror = page_fields(bytes, MIRROR_OFFSET);
    let mut conversions = [primary, mirror].into_iter().flatten().map(sane_conversion);
    let conversion = conversions.next().ok_or(PageDefect::Busy)??;
    conversions.try_for_each(|other| other.map(drop))?;
    let pid = word(bytes, h + offset_of!(SharedHeader, server_pid));
    let server_pid = u32::try_from(pid)
        .ok()
        .filter(|&pid| pid != 0 && pid <= i32::MAX as u32)
        .ok_or(PageDefect::Garbage("server pid out of range"))?;
    Ok(SharedSnapshot {
        boot_id: BootId::from_words([
            word(bytes, h + offset_of!(SharedHeader, boot_id)),
            word(bytes, h + offset_of!(SharedHeader, boot_id) + 8),
        ]),
        server_pid,
        heartbeat_counter: word(bytes, h + offset_of!(SharedHeader, heartbeat_counter)),
        conversion,
        bound: SharedBound {
            base_ns: word(bytes, h + offset_of!(SharedHeader, bound_base_ns)),
            growth_q48: word(bytes, h + offset_of!(SharedHeader, bound_growth_q48)),
            counter_ref: word(bytes, h + offset_of!(SharedHeader, bound_counter_ref)),
        },
    })
}

/// Atomic views of the header's fields.
struct HeaderFields<'a> {
    magic: &'a AtomicU64,
    version: &'a AtomicU32,
    lock: &'a SeqLock,
    boot_id: [&'a AtomicU64; 2],
    server_pid: &'a AtomicU64,
    heartbeat_counter: &'a AtomicU64,
    bound: [&'a AtomicU64; 3],
}

impl HeaderFields<'_> {
    /// # Safety
    /// `base` must point to [`FILE_BYTES`] 8-aligned bytes, valid for reads (and writes, if
    /// stored to) for `'a` and accessed concurrently only through atomics.
    unsafe fn of<'a>(base: NonNull<u8>) -> HeaderFields<'a> {
        // SAFETY: the caller's contract; the header lies inside the file (`LAYOUT_BYTES <=
        // FILE_BYTES`, checked at compile time) at an 8-aligned offset, and every field is
        // naturally aligned in its `repr(C)` layout.
        unsafe {
            let h = base.as_ptr().add(HEADER_OFFSET).cast::<SharedHeader>();
            HeaderFields {
                magic: AtomicU64::from_ptr(addr_of_mut!((*h).magic)),
                version: AtomicU32::from_ptr(addr_of_mut!((*h).version)),
                lock: SeqLock::from_ptr(addr_of_mut!((*h).lock)),
                boot_id: [
                    AtomicU64::from_ptr(addr_of_mut!((*h).boot_id[0])),
                    AtomicU64::from_ptr(addr_of_mut!((*h).boot_id[1])),
                ],
                server_pid: AtomicU64::from_ptr(addr_of_mut!((*h).server_pid)),
                heartbeat_counter: AtomicU64::from_ptr(addr_of_mut!((*h).heartbeat_counter)),
                bound: [
                    AtomicU64::from_ptr(addr_of_mut!((*h).bound_base_ns)),
                    AtomicU64::from_ptr(addr_of_mut!((*h).bound_growth_q48)),
                    AtomicU64::from_ptr(addr_of_mut!((*h).bound_counter_ref)),
                ],
            }
        }
    }
}

/// The perf pages of the file at `base`: (primary, mirror).
fn perf_pages(base: NonNull<u8>) -> (NonNull<PerfEventMmapPage>, NonNull<PerfEventMmapPage>) {
    // SAFETY: pointer arithmetic only; both offsets lie inside the file `base` points to.
    let at = |offset: usize| unsafe { base.add(offset) }.cast::<PerfEventMmapPage>();
    (at(PRIMARY_OFFSET), at(MIRROR_OFFSET))
}

/// Reads a shared clock file that stays mapped for `'a`. Copy it freely: it is one pointer.
#[derive(Debug, Clone, Copy)]
pub struct SharedPageReader<'a> {
    /// Invariant: [`FILE_BYTES`] readable, 8-aligned bytes for `'a`, written concurrently only
    /// through atomics.
    base: NonNull<u8>,
    mapping: PhantomData<&'a [u8; FILE_BYTES]>,
}

// SAFETY: only atomic loads through the pointer, sound from any thread.
unsafe impl Send for SharedPageReader<'_> {}
// SAFETY: as for `Send`.
unsafe impl Sync for SharedPageReader<'_> {}

impl<'a> SharedPageReader<'a> {
    /// A reader of the file mapped at `base`.
    ///
    /// # Safety
    /// `base` must point to [`FILE_BYTES`] 8-aligned bytes that stay mapped and readable for
    /// `'a` (which the caller chooses), written by others only through atomics (a
    /// [`SharedPageWriter`]).
    pub const unsafe fn new(base: NonNull<u8>) -> Self {
        SharedPageReader {
            base,
            mapping: PhantomData,
        }
    }

    /// The mirrored reader of the conversion, the facade's fast path.
    pub fn page_reader(&self) -> PageReader<'a> {
        let (page, mirror) = perf_pages(self.base);
        // SAFETY: the constructor's contract covers both pages, which lie inside the file.
        unsafe { PageReader::new_mirrored(page, mirror) }
    }

    /// A consistent copy of the layout's bytes, taken under the header lock, for [`parse`].
    ///
    /// # Errors
    /// [`PageDefect::Busy`] after [`MAX_RETRIES`].
    pub fn snapshot(&self) -> Result<[u8; LAYOUT_BYTES], PageDefect> {
        // SAFETY: the constructor's contract.
        let header = unsafe { HeaderFields::of(self.base) };
        let mut copy = [0u8; LAYOUT_BYTES];
        for _ in 0..MAX_RETRIES {
            let Some(stamp) = header.lock.optimistic_read() else {
                // A page in another format (or garbage) has no lock to wait for: its bytes are
                // handed to `parse` to be named.
                if header.magic.load(Ordering::Relaxed) != MAGIC
                    || header.version.load(Ordering::Relaxed) != VERSION
                {
                    self.copy_into(&mut copy);
                    return Ok(copy);
                }
                core::hint::spin_loop();
                continue;
            };
            self.copy_into(&mut copy);
            if header.lock.validate_read(stamp) {
                return Ok(copy);
            }
            core::hint::spin_loop();
        }
        Err(PageDefect::Busy)
    }

    /// Copies the layout with loads of the sizes the writer stores with (atomic accesses of
    /// different sizes to one location must not race): 4-byte loads for the words holding a
    /// sequence word (each perf page's `lock`, the header's `version` and `lock`), 8-byte loads
    /// elsewhere.
    fn copy_into(&self, copy: &mut [u8; LAYOUT_BYTES]) {
        const SPLIT: [usize; 3] = [PRIMARY_OFFSET + 8, MIRROR_OFFSET + 8, HEADER_OFFSET + 8];
        for (index, chunk) in copy.chunks_exact_mut(8).enumerate() {
            let offset = index * 8;
            // SAFETY: `offset + 8 <= LAYOUT_BYTES <= FILE_BYTES`, 8-aligned, inside the mapping
            // the contract keeps alive; accessed atomically, with the writer's access sizes.
            unsafe {
                let at = self.base.as_ptr().add(offset);
                if SPLIT.contains(&offset) {
                    let low = AtomicU32::from_ptr(at.cast::<u32>()).load(Ordering::Relaxed);
                    let high = AtomicU32::from_ptr(at.add(4).cast::<u32>()).load(Ordering::Relaxed);
                    chunk[..4].copy_from_slice(&low.to_ne_bytes());
                    chunk[4..].copy_from_slice(&high.to_ne_bytes());
                } else {
                    let word = AtomicU64::from_ptr(at.cast::<u64>()).load(Ordering::Relaxed);
                    chunk.copy_from_slice(&word.to_ne_bytes());
                }
            }
        }
    }

    /// The bound and the heartbeat, consistently: for the bound a client reports on every call
    /// (loads only, bounded retries, signal-safe). `None` if the writer kept the lock busy.
    pub fn bound_and_heartbeat(&self) -> Option<(SharedBound, u64)> {
        // SAFETY: the constructor's contract.
        let header = unsafe { HeaderFields::of(self.base) };
        for _ in 0..MAX_RETRIES {
            if let Some(stamp) = header.lock.optimistic_read() {
                let [base, growth, at] = header.bound.map(|w| w.load(Ordering::Relaxed));
                let beat = header.heartbeat_counter.load(Ordering::Relaxed);
                if header.lock.validate_read(stamp) {
                    let bound = SharedBound {
                        base_ns: base,
                        growth_q48: growth,
                        counter_ref: at,
                    };
                    return Some((bound, beat));
                }
            }
            core::hint::spin_loop();
        }
        None
    }

    /// The server pid now written in the page (0 while the writer keeps the lock busy).
    pub fn server_pid(&self) -> u64 {
        // SAFETY: the constructor's contract.
        let header = unsafe { HeaderFields::of(self.base) };
        for _ in 0..MAX_RETRIES {
            if let Some(stamp) = header.lock.optimistic_read() {
                let pid = header.server_pid.load(Ordering::Relaxed);
                if header.lock.validate_read(stamp) {
                    return pid;
                }
            }
            core::hint::spin_loop();
        }
        0
    }
}

/// Writes a shared clock file mapped at `base`: the server's side.
#[derive(Debug)]
pub struct SharedPageWriter {
    base: NonNull<u8>,
    pages: PageWriter,
}

// SAFETY: atomic stores only; moving the single writer to another thread keeps it single.
unsafe impl Send for SharedPageWriter {}

impl SharedPageWriter {
    /// The writer of the file mapped at `base`.
    ///
    /// # Safety
    /// `base` must point to [`FILE_BYTES`] writable, 8-aligned bytes that outlive the writer,
    /// that no other writer updates, and that others access only through atomic loads.
    pub unsafe fn new(base: NonNull<u8>) -> Self {
        let (page, mirror) = perf_pages(base);
        // SAFETY: the caller's contract covers both pages, which do not overlap.
        let pages = unsafe { PageWriter::new_mirrored(page, mirror) };
        SharedPageWriter { base, pages }
    }

    fn header(&self) -> HeaderFields<'_> {
        // SAFETY: the constructor's contract.
        unsafe { HeaderFields::of(self.base) }
    }

    /// Stamps the header: magic, version, boot id, pid and a first heartbeat. Until a
    /// conversion is published, the page is refused as garbage ("no conversion published").
    pub fn claim(&self, boot_id: BootId, pid: u32, heartbeat_counter: u64) {
        let header = self.header();
        let update = header.lock.write();
        header.magic.store(MAGIC, Ordering::Relaxed);
        header.version.store(VERSION, Ordering::Relaxed);
        for (field, word) in header.boot_id.iter().zip(boot_id.words()) {
            field.store(word, Ordering::Relaxed);
        }
        header.server_pid.store(u64::from(pid), Ordering::Relaxed);
        header
            .heartbeat_counter
            .store(heartbeat_counter, Ordering::Relaxed);
        drop(update);
    }

    /// Replaces the bound (and refreshes the heartbeat).
    pub fn store_bound(&self, bound: &SharedBound, heartbeat_counter: u64) {
        let header = self.header();
        let update = header.lock.write();
        for (field, value) in
            header
                .bound
                .iter()
                .zip([bound.base_ns, bound.growth_q48, bound.counter_ref])
        {
            field.store(value, Ordering::Relaxed);
        }
        header
            .heartbeat_counter
            .store(heartbeat_counter, Ordering::Relaxed);
        drop(update);
    }

    /// Publishes a conversion (mirror, then primary), inside a header write section.
    pub fn publish(&self, conversion: &TimeConversion) {
        let header = self.header();
        let update = header.lock.write();
        self.pages.publish(conversion);
        drop(update);
    }

    /// Writes arbitrary perf-page fields (tests publish garbage with it).
    pub fn write_raw(&self, raw: &RawTimeFields) {
        let header = self.header();
        let update = header.lock.write();
        self.pages.write(raw);
        drop(update);
    }

    /// A reader of the same file, for as long as this writer (whose contract keeps the file
    /// mapped) is borrowed.
    /// ```compile_fail,E0505
    /// # use core::ptr::NonNull;
    /// # use perfclock_core::shared_page::{SharedPageWriter, FILE_BYTES};
    /// # #[repr(align(8))] struct File([u8; FILE_BYTES]);
    /// # let file = Box::leak(Box::new(File([0; FILE_BYTES])));
    /// // SAFETY: leaked, 8-aligned, written only by this writer.
    /// let writer = unsafe { SharedPageWriter::new(NonNull::from(file).cast()) };
    /// let reader = writer.reader();
    /// drop(writer);
    /// let _ = reader.server_pid();
    /// ```
    pub fn reader(&self) -> SharedPageReader<'_> {
        // SAFETY: the constructor's contract keeps the file mapped while the writer lives, and
        // the reader borrows the writer.
        unsafe { SharedPageReader::new(self.base) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;

    #[repr(C, align(4096))]
    struct File([u8; FILE_BYTES]);

    fn file() -> NonNull<u8> {
        NonNull::from(Box::leak(Box::new(File([0; FILE_BYTES])))).cast()
    }

    const BOOT: BootId = BootId::from_words([0x1234, 0x5678]);

    fn served(base: NonNull<u8>) -> SharedPageWriter {
        // SAFETY: a leaked, page-aligned buffer with this one writer.
        let writer = unsafe { SharedPageWriter::new(base) };
        writer.claim(BOOT, 42, 1_000_000);
        writer.publish(&TimeConversion::new(1 << 31, 31, 5).unwrap());
        writer.store_bound(
            &SharedBound {
                base_ns: 100,
                growth_q48: 1 << 20,
                counter_ref: 1_000_000,
            },
            1_000_000,
        );
        writer
    }

    #[test]
    fn a_served_page_parses_and_reads_like_a_kernel_page() {
        let writer = served(file());
        let reader = writer.reader();
        let snapshot = parse(&reader.snapshot().unwrap()).unwrap();
        assert_eq!(snapshot.server_pid, 42);
        assert_eq!(snapshot.boot_id, BOOT);
        assert_eq!(snapshot.conversion.cycles_to_ns(10), 15);
        assert_eq!(snapshot.bound.base_ns, 100);
        assert_eq!(reader.page_reader().read_with(|| 10).unwrap().ns(), 15);
        assert_eq!(reader.page_reader().now_ns_once_with(|| 10), Some(15));
        assert_eq!(reader.bound_and_heartbeat().unwrap().1, 1_000_000);
        assert_eq!(
            snapshot.check_fresh(BOOT, 1_000_000 + 4_000_000_000),
            Ok(())
        );
        assert_eq!(
            snapshot.check_fresh(BOOT, 1_000_000 + 6_000_000_000),
            Err(PageDefect::Stale {
                age_ns: 6_000_000_000,
                after_ns: STALE_AFTER_NS,
            })
        );
        assert_eq!(
            snapshot.check_fresh(BootId::from_words([1, 2]), 1_000_000),
            Err(PageDefect::OtherBoot)
        );
        let future = SharedSnapshot {
            heartbeat_counter: 3_000_000_000,
            ..snapshot
        };
        assert!(matches!(
            future.check_fresh(BOOT, 1_000_000),
            Err(PageDefect::Garbage(_))
        ));
    }

    #[test]
    fn each_defect_is_named() {
        let writer = served(file());
        let good = writer.reader().snapshot().unwrap();
        assert_eq!(
            parse(&good[..100]),
            Err(PageDefect::Truncated {
                len: 100,
                needed: LAYOUT_BYTES,
            })
        );
        let mut bad = good;
        bad[HEADER_OFFSET] ^= 1;
        assert!(matches!(parse(&bad), Err(PageDefect::Garbage(_))));
        let mut bad = good;
        bad[HEADER_OFFSET + 8..HEADER_OFFSET + 12].copy_from_slice(&7u32.to_ne_bytes());
        assert_eq!(
            parse(&bad),
            Err(PageDefect::Version {
                found: 7,
                expected: VERSION,
            })
        );
        let mut bad = good;
        bad[HEADER_OFFSET + 12] |= 1;
        assert_eq!(parse(&bad), Err(PageDefect::Busy));
        writer.write_raw(&RawTimeFields {
            capabilities: 0,
            time_mult: 0,
            time_shift: 0,
            time_zero: 0,
            time_cycles: 0,
            time_mask: 0,
        });
        assert_eq!(
            parse(&writer.reader().snapshot().unwrap()),
            Err(PageDefect::Garbage("no conversion published"))
        );
        // A server that died between the mirror and the primary: the primary is what readers
        // read, and what a restarted server continues.
        let old = TimeConversion::new(1 << 31, 31, 5).unwrap();
        writer.publish(&old);
        let mut died = writer.reader().snapshot().unwrap();
        died[MIRROR_OFFSET + 64..MIRROR_OFFSET + 72].copy_from_slice(&99u64.to_ne_bytes());
        assert_eq!(parse(&died).map(|s| s.conversion), Ok(old));
        // 1e-3 ns per tick: no counter runs at 1 THz.
        writer.publish(&TimeConversion::new(2_147_483, 31, 0).unwrap());
        assert!(matches!(
            parse(&writer.reader().snapshot().unwrap()),
            Err(PageDefect::Garbage(_))
        ));
    }

    #[test]
    fn the_bound_matches_calibs_formula_on_a_known_case() {
        let bound = SharedBound {
            base_ns: 10,
            growth_q48: 3 << 48,
            counter_ref: 100,
        };
        assert_eq!(bound.at(100), 11);
        assert_eq!(bound.at(90), 41);
        assert_eq!(bound.at(u64::MAX), u64::MAX);
    }
}
