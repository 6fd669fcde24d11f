//! [`PageReader`]: the lock-free reader of a kernel-written (or our own) page and its counter.
//!
//! The protocol is [`SeqLock`]'s, over the page's `lock` word: a reader rejects an odd `lock`
//! (update in progress), loads the fields and the counter, and accepts them only if `lock` is
//! unchanged afterwards.
//!
//! # The read at the hardware floor
//! [`PageReader::now_ns`] is built so that, inlined into the caller, it costs about one counter
//! read: one attempt loads only what the protocol needs (`lock`, `capabilities`, the 8-byte word
//! holding `time_shift` and `time_mult`, `time_zero`, and `time_cycles`/`time_mask` only under
//! `cap_user_time_short`), checks only what a correct conversion needs (`cap_user_time_zero`,
//! `time_mult != 0`, `time_shift <= 63`, a mask of low bits), and anything else (a busy or
//! changed lock, a withdrawn or nonsensical page) leaves the inlined code for an out-of-line
//! path that retries and names the error.
//!
//! # Ordered and unordered reads
//! [`PageReader::now_ns`] reads the counter as cheaply as the architecture allows, like the
//! kernel's `sched_clock` and quanta: on x86_64 `rdtsc` may execute before earlier loads have
//! completed, so a reading taken right after loading another thread's timestamp can be below it
//! (by as long as that load waited: hundreds of nanoseconds when threads contend for its cache
//! line). [`PageReader::now_ns_ordered`] waits for
//! every earlier instruction first (`lfence; rdtsc`), so it never goes back across a
//! happens-before edge.
//!
//! # Safety
//! Readers and writers hold raw pointers to pages that other parties (the kernel, another
//! thread) write concurrently; every access to a page field is an atomic load or store through
//! `PageFields`, formed only under the constructors' contracts.
#![allow(unsafe_code)]

use core::hint::spin_loop;
use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;

use crate::fast_path::{fast_ns, is_low_bits_mask};
use crate::page::{caps, PerfEventMmapPage};
use crate::page_fields::{unpack_scale, PageFields};
use crate::{counter, ReadError, TimeConversion};

/// Attempts before a read gives up with [`ReadError::Contended`]; `tools/perf/util/tsc.c` uses
/// the same bound. A kernel update takes nanoseconds, so only a broken writer exhausts it.
pub const MAX_RETRIES: u32 = 10_000;

/// The time fields of one consistent read of the page, unvalidated: for diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawTimeFields {
    /// The capability word (see [`caps`]).
    pub capabilities: u64,
    /// `time_mult`.
    pub time_mult: u32,
    /// `time_shift`.
    pub time_shift: u16,
    /// `time_zero`.
    pub time_zero: u64,
    /// `time_cycles` (with `cap_user_time_short`).
    pub time_cycles: u64,
    /// `time_mask` (with `cap_user_time_short`).
    pub time_mask: u64,
}

impl RawTimeFields {
    /// Validates the fields as the conversion a reader would use.
    ///
    /// # Errors
    /// [`ReadError::TimeZeroUnavailable`] without `cap_user_time_zero`,
    /// [`ReadError::InvalidParameters`] for parameters that make no sense.
    // Inline: it runs on every read (`PageReader::now_ns`), and as an out-of-line call from
    // another crate it costs a call, a spill of the fields and a Result through memory.
    #[inline]
    pub const fn conversion(&self) -> Result<TimeConversion, ReadError> {
        if self.capabilities & caps::USER_TIME_ZERO == 0 {
            return Err(ReadError::TimeZeroUnavailable {
                capabilities: self.capabilities,
            });
        }
        let converted = if self.capabilities & caps::USER_TIME_SHORT != 0 {
            TimeConversion::new_short(
                self.time_mult,
                self.time_shift,
                self.time_zero,
                self.time_cycles,
                self.time_mask,
            )
        } else {
            TimeConversion::new(self.time_mult, self.time_shift, self.time_zero)
        };
        match converted {
            Ok(conversion) => Ok(conversion),
            Err(error) => Err(ReadError::InvalidParameters(error)),
        }
    }
}

/// A counter value and the conversion that was valid when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The counter value read inside the seqlock section.
    pub cycles: u64,
    /// The conversion published at that moment.
    pub conversion: TimeConversion,
}

impl Reading {
    /// Perf-domain nanoseconds of this reading.
    #[inline]
    pub const fn ns(&self) -> u64 {
        self.conversion.cycles_to_ns(self.cycles)
    }
}

/// Reads a clock page, or a page and its mirror, that stays mapped for `'a`. Copy it freely: it
/// is two pointers, and the lifetime keeps every copy within the life of the mapping (a safe
/// function that hands one out borrows whatever keeps the page mapped).
#[derive(Debug, Clone, Copy)]
pub struct PageReader<'a> {
    /// Invariant: both point to readable, 8-aligned `PerfEventMmapPage`s for `'a`; other
    /// parties may write them concurrently. `mirror` equals `page` unless the reader was made
    /// with [`PageReader::new_mirrored`].
    page: NonNull<PerfEventMmapPage>,
    mirror: NonNull<PerfEventMmapPage>,
    mapping: PhantomData<&'a PerfEventMmapPage>,
}

// SAFETY: the reader only performs atomic loads through the pointer, which is sound from any
// thread; the constructor's contract keeps the memory alive and readable for `'a`.
unsafe impl Send for PageReader<'_> {}
// SAFETY: as for `Send`: shared use is only concurrent atomic loads.
unsafe impl Sync for PageReader<'_> {}

impl<'a> PageReader<'a> {
    /// A reader of `page`.
    ///
    /// # Safety
    /// `page` must point to 8-aligned memory of at least `size_of::<PerfEventMmapPage>()` bytes
    /// that stays mapped and readable for `'a` (which the caller chooses), and
    /// that is written only by the kernel's protocol or a [`PageWriter`](crate::PageWriter) (never by plain,
    /// non-atomic stores from Rust code).
    ///
    /// # Example
    /// A page of our own memory, published by a [`PageWriter`](crate::PageWriter) and read back:
    /// ```
    /// use core::ptr::NonNull;
    /// use perfclock_core::page::PerfEventMmapPage;
    /// use perfclock_core::{PageReader, PageWriter, TimeConversion};
    ///
    /// let page = NonNull::from(Box::leak(Box::new(PerfEventMmapPage::zeroed())));
    /// // SAFETY: the page is leaked (lives forever), aligned, and written only by this writer.
    /// let (writer, reader) = unsafe { (PageWriter::new(page), PageReader::new(page)) };
    /// let conversion = TimeConversion::new(1 << 31, 31, 7)?;
    /// writer.publish(&conversion);
    /// assert_eq!(reader.read_with(|| 3)?.ns(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub const unsafe fn new(page: NonNull<PerfEventMmapPage>) -> Self {
        PageReader {
            page,
            mirror: page,
            mapping: PhantomData,
        }
    }

    /// A reader of a page written by a user-space [`PageWriter::new_mirrored`](crate::PageWriter::new_mirrored): each attempt that
    /// finds `page` busy tries `mirror`. The writer finishes the mirror before it touches the
    /// page, so at most one of them is ever mid-update, and a writer preempted in the middle of
    /// an update (for as long as the scheduler likes) never makes readers fail.
    ///
    /// # Safety
    /// As [`PageReader::new`], for both pages.
    pub const unsafe fn new_mirrored(
        page: NonNull<PerfEventMmapPage>,
        mirror: NonNull<PerfEventMmapPage>,
    ) -> Self {
        PageReader {
            page,
            mirror,
            mapping: PhantomData,
        }
    }

    /// The (primary) page this reader reads.
    pub const fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.page
    }

    /// The mirror this reader tries when the primary page is busy (the primary page itself
    /// unless made with [`PageReader::new_mirrored`]).
    pub const fn mirror(&self) -> NonNull<PerfEventMmapPage> {
        self.mirror
    }

    /// Reads the conversion and calls `counter` inside the same seqlock section, so the counter
    /// value and the parameters belong together (as the kernel's documented read requires).
    ///
    /// # Errors
    /// As [`RawTimeFields::conversion`], and [`ReadError::Contended`] after [`MAX_RETRIES`].
    #[inline]
    pub fn read_with(&self, mut counter: impl FnMut() -> u64) -> Result<Reading, ReadError> {
        let (fields, cycles) = self.read_raw_with(&mut counter, Fields::Needed)?;
        Ok(Reading {
            cycles,
            conversion: fields.conversion()?,
        })
    }

    /// Perf-domain nanoseconds now, from this architecture's counter read as cheaply as it
    /// allows ([`counter::read_counter`]). Unordered: the counter may be read before earlier
    /// loads complete, so across threads use [`PageReader::now_ns_ordered`] (see the module
    /// docs).
    ///
    /// # Errors
    /// As [`PageReader::read_with`], and [`ReadError::CounterUnsupported`].
    // Inline: the one attempt that succeeds on the fast path is a handful of instructions
    // around the counter read; a call around it costs more than they do.
    #[inline]
    pub fn now_ns(&self) -> Result<u64, ReadError> {
        self.now_ns_via(counter::read_counter_or_zero)
    }

    /// As [`PageReader::now_ns`], with the counter read only after every earlier instruction
    /// has completed ([`counter::read_counter_ordered`]): a reading taken after observing
    /// another reading (through any happens-before edge: a lock, an Acquire load, a channel) is
    /// never below it.
    ///
    /// # Errors
    /// As [`PageReader::now_ns`].
    #[inline]
    pub fn now_ns_ordered(&self) -> Result<u64, ReadError> {
        self.now_ns_via(counter::read_counter_ordered_or_zero)
    }

    /// [`PageReader::now_ns`] with `read` for the counter: one inlined attempt, then the
    /// out-of-line retries.
    #[inline(always)]
    fn now_ns_via(&self, read: fn() -> u64) -> Result<u64, ReadError> {
        if !counter::SUPPORTED {
            return Err(ReadError::CounterUnsupported);
        }
        match self.now_ns_once_with(read) {
            Some(ns) => Ok(ns),
            None => self.now_ns_retrying(read),
        }
    }

    /// One seqlock read of the primary page with `counter` read inside it: the nanoseconds,
    /// or `None` if the page was being written, changed meanwhile, or does not publish a usable
    /// conversion. It never retries and never reads the mirror; on `None`, call
    /// [`PageReader::read_with`] (or [`PageReader::now_ns`]) for the reading or the typed error.
    /// For callers that keep the page elsewhere and want the fast path inlined
    /// (`perfclock`'s process-wide clock).
    #[inline(always)]
    pub fn now_ns_once_with(&self, counter: impl FnOnce() -> u64) -> Option<u64> {
        // SAFETY: the constructor's contract: the page is mapped, aligned and only written
        // atomically or by the kernel, so atomic views of its fields are sound.
        let page = unsafe { PageFields::of(self.page.as_ptr()) };
        let stamp = page.lock.optimistic_read()?;
        let capabilities = page.capabilities.load(Ordering::Relaxed);
        // One load for both: they share an aligned 8-byte word with `pmc_width`.
        let scale = page.scale.load(Ordering::Relaxed);
        let time_zero = page.time_zero.load(Ordering::Relaxed);
        // One branch on the form of the conversion, each side specialised (x86 is never
        // short), so the checks and the arithmetic are the fewest instructions for that side. A
        // page that publishes no conversion is declined before the counter is read: a caller
        // whose counter read would fault (x86 `PR_SET_TSC`) and that has no clock yet gets
        // "no clock" from the slow path instead of a signal.
        let form = capabilities & (caps::USER_TIME_ZERO | caps::USER_TIME_SHORT);
        if form == caps::USER_TIME_ZERO {
            let cycles = counter();
            if !page.lock.validate_read(stamp) {
                return None;
            }
            fast_ns(scale, time_zero, cycles)
        } else if form == caps::USER_TIME_ZERO | caps::USER_TIME_SHORT {
            let time_cycles = page.time_cycles.load(Ordering::Relaxed);
            let time_mask = page.time_mask.load(Ordering::Relaxed);
            let cycles = counter();
            if !page.lock.validate_read(stamp) || !is_low_bits_mask(time_mask) {
                return None;
            }
            let cycles = time_cycles.wrapping_add(cycles.wrapping_sub(time_cycles) & time_mask);
            fast_ns(scale, time_zero, cycles)
        } else {
            None
        }
    }

    /// The slow path of [`PageReader::now_ns`]: out of line so the fast path stays small.
    #[cold]
    #[inline(never)]
    fn now_ns_retrying(&self, counter: fn() -> u64) -> Result<u64, ReadError> {
        self.read_with(counter).map(|reading| reading.ns())
    }

    /// The conversion currently published.
    ///
    /// # Errors
    /// As [`PageReader::read_with`].
    pub fn conversion(&self) -> Result<TimeConversion, ReadError> {
        self.read_with(|| 0).map(|reading| reading.conversion)
    }

    /// A consistent snapshot of the time fields, valid or not.
    ///
    /// # Errors
    /// [`ReadError::Contended`] after [`MAX_RETRIES`].
    pub fn raw(&self) -> Result<RawTimeFields, ReadError> {
        self.read_raw_with(&mut || 0, Fields::All)
            .map(|(fields, _)| fields)
    }

    #[inline]
    fn read_raw_with(
        &self,
        counter: &mut impl FnMut() -> u64,
        wanted: Fields,
    ) -> Result<(RawTimeFields, u64), ReadError> {
        // SAFETY: the constructor's contract: the pages are mapped, aligned and only written
        // atomically or by the kernel, so atomic views of their fields are sound.
        let (page, mirror) = unsafe {
            (
                PageFields::of(self.page.as_ptr()),
                PageFields::of(self.mirror.as_ptr()),
            )
        };
        let mirrored = self.mirror != self.page;
        for _ in 0..MAX_RETRIES {
            if let Some(read) = attempt(&page, &mut *counter, wanted) {
                return Ok(read);
            }
            if mirrored {
                if let Some(read) = attempt(&mirror, &mut *counter, wanted) {
                    return Ok(read);
                }
            }
            spin_loop();
        }
        Err(ReadError::Contended)
    }
}

/// Which fields an attempt loads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fields {
    /// What a conversion needs: `time_cycles` and `time_mask` only under
    /// `cap_user_time_short` (they are meaningless without it, and left 0).
    Needed,
    /// Every time field, for diagnostics ([`PageReader::raw`]).
    All,
}

/// One seqlock read section: `None` if the writer held the lock or changed it meanwhile. An odd
/// lock is rejected before the counter is read.
#[inline(always)]
fn attempt(
    fields: &PageFields<'_>,
    counter: impl FnOnce() -> u64,
    wanted: Fields,
) -> Option<(RawTimeFields, u64)> {
    let stamp = fields.lock.optimistic_read()?;
    let capabilities = fields.capabilities.load(Ordering::Relaxed);
    // One load for both: they share an aligned 8-byte word with `pmc_width`.
    let scale = fields.scale.load(Ordering::Relaxed);
    let time_zero = fields.time_zero.load(Ordering::Relaxed);
    let (time_cycles, time_mask) =
        if wanted == Fields::All || capabilities & caps::USER_TIME_SHORT != 0 {
            (
                fields.time_cycles.load(Ordering::Relaxed),
                fields.time_mask.load(Ordering::Relaxed),
            )
        } else {
            (0, 0)
        };
    let cycles = counter();
    if !fields.lock.validate_read(stamp) {
        return None;
    }
    // Unpacked only now, to keep the read section (the window a write can spoil) short.
    let (time_shift, time_mult) = unpack_scale(scale);
    let raw = RawTimeFields {
        capabilities,
        time_mult,
        time_shift,
        time_zero,
        time_cycles,
        time_mask,
    };
    Some((raw, cycles))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page_fields::pack_scale;
    use crate::writer::write_page;
    use crate::PageWriter;
    use crate::ParamError;
    use core::sync::atomic::AtomicU64;
    use std::boxed::Box;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// A page in ordinary memory with its reader and writer.
    struct TestPage {
        page: NonNull<PerfEventMmapPage>,
    }

    // SAFETY: the page is only accessed atomically through readers and the single writer.
    unsafe impl Send for TestPage {}
    // SAFETY: as for `Send`.
    unsafe impl Sync for TestPage {}

    impl TestPage {
        fn new() -> Self {
            let page = NonNull::from(Box::leak(Box::new(PerfEventMmapPage::zeroed())));
            TestPage { page }
        }
        fn reader(&self) -> PageReader<'static> {
            // SAFETY: the page is leaked (never freed) and written only by `PageWriter`.
            unsafe { PageReader::new(self.page) }
        }
        fn writer(&self) -> PageWriter {
            // SAFETY: as above; each test creates one writer per page.
            unsafe { PageWriter::new(self.page) }
        }
    }

    #[test]
    fn zeroed_page_reports_time_unavailable() {
        let page = TestPage::new();
        assert_eq!(
            page.reader().read_with(|| 1).map(|reading| reading.ns()),
            Err(ReadError::TimeZeroUnavailable { capabilities: 0 })
        );
    }

    #[test]
    fn published_conversion_is_read_back_with_the_counter() {
        let page = TestPage::new();
        let conversion =
            TimeConversion::new_short(33_554_432, 21, 7, 1_000, (1 << 57) - 1).unwrap();
        page.writer().publish(&conversion);
        let reading = page.reader().read_with(|| 1_001).unwrap();
        assert_eq!(
            reading,
            Reading {
                cycles: 1_001,
                conversion
            }
        );
        assert_eq!(reading.ns(), conversion.cycles_to_ns(1_001));
        page.writer().withdraw();
        assert!(matches!(
            page.reader().conversion(),
            Err(ReadError::TimeZeroUnavailable { .. })
        ));
    }

    #[test]
    fn the_single_attempt_agrees_with_the_full_read_or_declines() {
        let page = TestPage::new();
        let reader = page.reader();
        let mut counter_reads = 0;
        let mut counting = || {
            counter_reads += 1;
            1
        };
        assert_eq!(reader.now_ns_once_with(&mut counting), None, "zeroed page");
        assert_eq!(
            counter_reads, 0,
            "a page without a conversion is declined before the counter"
        );
        // Both arithmetics of the fast path (shift 31 has its own), near the wrap of time_zero.
        let wrapping = [(EXACT_MULT, 32), (EXACT_MULT / 2, 31)]
            .map(|(mult, shift)| TimeConversion::new(mult, shift, u64::MAX - 5).unwrap());
        for conversion in alternating_sets().into_iter().chain(wrapping) {
            page.writer().publish(&conversion);
            for cycles in [0, 1, 0x1111, 0x2222_0000, u64::MAX] {
                let full = reader.read_with(|| cycles).map(|reading| reading.ns());
                assert_eq!(reader.now_ns_once_with(|| cycles), full.ok());
                assert_eq!(full, Ok(conversion.cycles_to_ns(cycles)));
            }
        }
        let mut raw = raw_of(&alternating_sets()[0]);
        raw.time_mult = 0;
        page.writer().write(&raw);
        assert_eq!(reader.now_ns_once_with(|| 1), None, "zero multiplier");
        // SAFETY: the lock is taken through its atomic view, as a writer would.
        let lock = unsafe { PageFields::of(page.page.as_ptr()) }.lock;
        core::mem::forget(lock.write());
        assert_eq!(
            reader.now_ns_once_with(|| {
                counter_reads += 1;
                0
            }),
            None
        );
        assert_eq!(
            counter_reads, 0,
            "an odd lock is rejected before the counter"
        );
    }

    proptest::proptest! {
        /// The fast path's own checks and arithmetic give exactly what the full read gives, for
        /// any fields (mostly garbage), or decline where the full read has a typed error. Half the
        /// shifts are 31, which has arithmetic of its own (the rest take the 128-bit product).
        #[test]
        fn the_fast_path_agrees_with_the_full_read_for_any_fields(
            capabilities in proptest::prelude::any::<u64>(),
            time_mult in proptest::prop_oneof![proptest::prelude::Just(0u32), proptest::prelude::any::<u32>()],
            time_shift in proptest::prop_oneof![proptest::prelude::Just(31u16), 0u16..80],
            time_zero in proptest::prelude::any::<u64>(),
            time_cycles in proptest::prelude::any::<u64>(),
            mask_bits in 0u32..=64,
            mask_noise in proptest::prelude::any::<u64>(),
            cycles in proptest::prelude::any::<u64>(),
        ) {
            // Half the masks are runs of low bits (valid), half arbitrary.
            let time_mask = if mask_noise & 1 == 0 {
                u64::MAX.checked_shr(64 - mask_bits).unwrap_or(0)
            } else {
                mask_noise
            };
            let page = TestPage::new();
            page.writer().write(&RawTimeFields {
                capabilities,
                time_mult,
                time_shift,
                time_zero,
                time_cycles,
                time_mask,
            });
            let reader = page.reader();
            let full = reader.read_with(|| cycles).map(|reading| reading.ns());
            proptest::prop_assert_eq!(reader.now_ns_once_with(|| cycles), full.ok());
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot execute the counter instruction")]
    fn ordered_and_unordered_reads_agree_with_the_conversion() {
        let page = TestPage::new();
        let conversion = TimeConversion::new(EXACT_MULT, 32, 1_000).unwrap();
        page.writer().publish(&conversion);
        let reader = page.reader();
        if !counter::SUPPORTED {
            perfclock_testutil::skip(
                "counter reads",
                perfclock_testutil::Need::CpuFeature("a counter perfclock reads (TSC, CNTVCT_EL0)"),
                "no supported counter on this architecture",
            );
            assert_eq!(reader.now_ns(), Err(ReadError::CounterUnsupported));
            return;
        }
        let before = counter::read_counter_ordered().unwrap();
        let unordered = reader.now_ns().unwrap();
        let ordered = reader.now_ns_ordered().unwrap();
        let after = counter::read_counter_ordered().unwrap();
        let (low, high) = (
            conversion.cycles_to_ns(before),
            conversion.cycles_to_ns(after),
        );
        assert!(
            low <= ordered && ordered <= high,
            "{low} <= {ordered} <= {high}"
        );
        assert!(unordered <= ordered, "{unordered} then {ordered}");
    }

    #[test]
    fn time_shift_and_time_mult_share_a_word_and_pmc_width_survives_a_write() {
        assert_eq!(
            unpack_scale(pack_scale(0xabcd, 0x1234, 0x8765_4321)),
            (0x1234, 0x8765_4321)
        );
        let page = TestPage::new();
        // SAFETY: the page is not shared yet; this is a plain store before any reader exists.
        unsafe { (*page.page.as_ptr()).pmc_width = 48 };
        page.writer().publish(&alternating_sets()[1]);
        // SAFETY: no writer is active any more; a plain read of a field nobody writes.
        let pmc_width = unsafe { (*page.page.as_ptr()).pmc_width };
        assert_eq!(pmc_width, 48);
        // SAFETY: as above.
        let (shift, mult) = unsafe {
            (
                (*page.page.as_ptr()).time_shift,
                (*page.page.as_ptr()).time_mult,
            )
        };
        assert_eq!((shift, mult), (22, 0x2222_2222));
        assert_eq!(page.reader().raw().unwrap(), raw_of(&alternating_sets()[1]));
    }

    /// The non-short parameters of an x86 kernel with a native TSC sched_clock (one run's).
    const EXACT_MULT: u32 = 1_654_360_220;

    #[test]
    fn nonsense_parameters_are_a_typed_error() {
        let page = TestPage::new();
        let mut raw = RawTimeFields {
            capabilities: caps::USER_TIME | caps::USER_TIME_ZERO,
            time_mult: 0,
            time_shift: 10,
            time_zero: 0,
            time_cycles: 0,
            time_mask: 0,
        };
        page.writer().write(&raw);
        assert_eq!(
            page.reader().read_with(|| 1).map(|reading| reading.ns()),
            Err(ReadError::InvalidParameters(ParamError::ZeroMultiplier))
        );
        raw.time_mult = 1;
        raw.time_shift = 64;
        page.writer().write(&raw);
        assert_eq!(
            page.reader().conversion(),
            Err(ReadError::InvalidParameters(ParamError::ShiftTooLarge(64)))
        );
        raw.time_shift = 1;
        raw.capabilities |= caps::USER_TIME_SHORT;
        raw.time_mask = 0x0ff0;
        page.writer().write(&raw);
        assert_eq!(
            page.reader().conversion(),
            Err(ReadError::InvalidParameters(ParamError::InvalidMask(
                0x0ff0
            )))
        );
    }

    #[test]
    fn lock_held_forever_ends_in_contended() {
        let page = TestPage::new();
        // SAFETY: no writer is active; the lock is taken through its atomic view as writers do.
        let fields = unsafe { PageFields::of(page.page.as_ptr()) };
        // A writer that never finishes.
        core::mem::forget(fields.lock.write());
        let mut counter_reads = 0;
        assert_eq!(
            page.reader().read_with(|| {
                counter_reads += 1;
                0
            }),
            Err(ReadError::Contended)
        );
        assert_eq!(
            counter_reads, 0,
            "an odd lock must be rejected before reading the counter"
        );
    }

    #[test]
    fn a_writer_stuck_mid_update_does_not_block_a_mirrored_reader() {
        let (primary, mirror) = (TestPage::new(), TestPage::new());
        // SAFETY: two distinct leaked pages, one writer, atomic access only.
        let (writer, reader) = unsafe {
            (
                PageWriter::new_mirrored(primary.page, mirror.page),
                PageReader::new_mirrored(primary.page, mirror.page),
            )
        };
        let [old, new] = alternating_sets();
        writer.publish(&old);
        // A writer preempted while updating the primary: the mirror already holds `new`.
        write_page(mirror.page, &raw_of(&new));
        // SAFETY: the lock is taken through its atomic view, as a writer would.
        let primary_lock = unsafe { PageFields::of(primary.page.as_ptr()) }.lock;
        core::mem::forget(primary_lock.write());
        assert_eq!(reader.read_with(|| 5).map(|r| r.conversion), Ok(new));
        // The single-page reader of the same primary has to give up.
        assert_eq!(primary.reader().read_with(|| 5), Err(ReadError::Contended));
    }

    fn raw_of(conversion: &TimeConversion) -> RawTimeFields {
        RawTimeFields {
            capabilities: caps::BIT0_IS_DEPRECATED
                | caps::USER_TIME
                | caps::USER_TIME_ZERO
                | caps::USER_TIME_SHORT,
            time_mult: conversion.mult(),
            time_shift: conversion.shift(),
            time_zero: conversion.zero(),
            time_cycles: conversion.cycles(),
            time_mask: conversion.mask(),
        }
    }

    /// Two parameter sets that differ in every field, so any mix of the two is detectable.
    fn alternating_sets() -> [TimeConversion; 2] {
        [
            TimeConversion::new_short(0x1111_1111, 11, 0x1111_1111_1111, 0x1111, (1 << 40) - 1)
                .unwrap(),
            TimeConversion::new_short(0x2222_2222, 22, 0x2222_2222_2222, 0x2222, (1 << 50) - 1)
                .unwrap(),
        ]
    }

    /// The fast path against a racing writer: every reading is one set's conversion, never a
    /// mix (each set differs in every field, and the counter value makes each field matter).
    #[test]
    fn racing_writer_never_tears_the_fast_path() {
        let reads: u64 = if cfg!(miri) { 300 } else { 2_000_000 };
        const CYCLES: u64 = 0x1234_5678_9abc;
        let page = Arc::new(TestPage::new());
        let sets = alternating_sets();
        page.writer().publish(&sets[0]);
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (page, stop) = (Arc::clone(&page), Arc::clone(&stop));
            std::thread::spawn(move || {
                let writer = page.writer();
                let mut count = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    writer.publish(&sets[count % 2]);
                    count += 1;
                }
            })
        };
        let expected = sets.map(|set| set.cycles_to_ns(CYCLES));
        let reader = page.reader();
        let (mut seen, mut declined) = ([0u64; 2], 0u64);
        for _ in 0..reads {
            match reader.now_ns_once_with(|| CYCLES) {
                Some(ns) => {
                    let index = expected.iter().position(|&e| e == ns);
                    seen[index.unwrap_or_else(|| panic!("torn fast read: {ns}"))] += 1;
                }
                None => declined += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        std::println!("fast path: {reads} reads, seen {seen:?}, declined {declined}");
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "10M reads take hours under Miri; hostile_pages has a Miri-sized race"
    )]
    fn racing_writer_never_yields_a_torn_read() {
        // At least this many reads; more while the writer has not yet overlapped them (on a loaded
        // machine it may get no CPU for a while), up to ten times as many.
        const READS: u64 = 10_000_000;
        const MIN_UPDATES: u64 = 1_000;
        let page = Arc::new(TestPage::new());
        let sets = alternating_sets();
        page.writer().publish(&sets[0]);
        let stop = Arc::new(AtomicBool::new(false));
        let updates = Arc::new(AtomicU64::new(0));
        let writer = {
            let (page, stop, updates) =
                (Arc::clone(&page), Arc::clone(&stop), Arc::clone(&updates));
            std::thread::spawn(move || {
                let writer = page.writer();
                let mut count = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    writer.publish(&sets[(count % 2) as usize]);
                    count += 1;
                    updates.store(count, Ordering::Relaxed);
                }
            })
        };
        let reader = page.reader();
        let (mut seen, mut contended, mut reads) = ([0u64; 2], 0u64, 0u64);
        while reads < READS
            || (reads < 10 * READS
                && (seen.contains(&0) || updates.load(Ordering::Relaxed) < MIN_UPDATES))
        {
            match reader.read_with(|| reads) {
                Ok(reading) => {
                    let index = sets.iter().position(|set| *set == reading.conversion);
                    let index = index.unwrap_or_else(|| panic!("torn read: {reading:?}"));
                    seen[index] += 1;
                }
                Err(ReadError::Contended) => contended += 1,
                Err(other) => panic!("unexpected error {other:?}"),
            }
            reads += 1;
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        let updates = updates.load(Ordering::Relaxed);
        std::println!("{reads} reads, {updates} updates, seen {seen:?}, contended {contended}");
        assert!(
            updates >= MIN_UPDATES,
            "the writer barely ran ({updates} updates)"
        );
        assert!(
            seen[0] > 0 && seen[1] > 0,
            "reads never overlapped both sets: {seen:?}"
        );
    }
}
