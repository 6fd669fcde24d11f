//! Hostile pages for the seqlock reader: fields that make no sense, a lock that stays odd
//! forever, a lock that changes on every read, whole pages of arbitrary bytes, and a racing
//! writer (torn reads). Every read must end, within a bounded time, in a consistent reading or a
//! typed error. Counters are fakes (closures), so everything here also runs under Miri.
//!
//! The 100-million-read torn-read run is `#[ignore]`d (minutes in a debug build): run it with
//! `cargo test --release -p perfclock-core --test hostile_pages -- --ignored`
//! (`PERFCLOCK_TORN_READS` overrides the count).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perfclock_core::page::{caps, PerfEventMmapPage, PAGE_LAYOUT_BYTES};
use perfclock_core::{PageReader, PageWriter, ParamError, ReadError, TimeConversion};
use perfclock_core::{RawTimeFields, MAX_RETRIES};
use proptest::prelude::*;

/// How long any single read may take before the test calls it unbounded. A read is at most
/// `MAX_RETRIES` spins (microseconds); the margin is for a loaded 2-core machine (and Miri).
const READ_DEADLINE: Duration = if cfg!(miri) {
    Duration::from_secs(600)
} else {
    Duration::from_secs(2)
};

/// A page in ordinary, leaked (never freed) memory.
#[derive(Clone, Copy)]
struct Page(NonNull<PerfEventMmapPage>);

// SAFETY: the page is leaked, so it lives for the rest of the process; after construction it is
// accessed only atomically (readers, the single writer, the lock views below).
unsafe impl Send for Page {}
// SAFETY: as above.
unsafe impl Sync for Page {}

impl Page {
    fn zeroed() -> Self {
        Page(NonNull::from(Box::leak(Box::new(
            PerfEventMmapPage::zeroed(),
        ))))
    }

    /// A page whose first bytes are `bytes` (the rest zero), as a broken writer might leave it.
    fn from_bytes(bytes: &[u8]) -> Self {
        let page = Self::zeroed();
        let len = bytes.len().min(PAGE_LAYOUT_BYTES);
        // SAFETY: the page is `PAGE_LAYOUT_BYTES` long, freshly allocated and not yet shared with
        // any reader or writer, and every field is a plain integer, valid for any bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), page.0.as_ptr().cast::<u8>(), len);
        }
        page
    }

    fn reader(self) -> PageReader<'static> {
        // SAFETY: leaked (lives forever), 8-aligned (a Box of the 8-aligned type), written only
        // through `PageWriter` or the atomic `lock` view.
        unsafe { PageReader::new(self.0) }
    }

    fn writer(self) -> PageWriter {
        // SAFETY: as for `reader`; each test uses one writer per page.
        unsafe { PageWriter::new(self.0) }
    }

    /// The seqlock word, as an atomic (how a broken writer would touch it).
    fn lock(self) -> &'static AtomicU32 {
        // SAFETY: `lock` is a naturally aligned u32 of a page that lives forever and is only
        // accessed atomically.
        unsafe { AtomicU32::from_ptr(std::ptr::addr_of_mut!((*self.0.as_ptr()).lock)) }
    }
}

/// The kernel's formula in unbounded (u128) arithmetic, truncated to u64 as the kernel's sums
/// wrap: `time_zero + quot * time_mult + ((rem * time_mult) >> time_shift)`.
fn reference_ns(raw: &RawTimeFields, cycles: u64) -> u64 {
    let cycles = if raw.capabilities & caps::USER_TIME_SHORT != 0 {
        raw.time_cycles
            .wrapping_add(cycles.wrapping_sub(raw.time_cycles) & raw.time_mask)
    } else {
        cycles
    };
    let shift = u32::from(raw.time_shift);
    let quot = u128::from(cycles >> shift);
    let rem = u128::from(cycles & ((1u64 << shift) - 1));
    let mult = u128::from(raw.time_mult);
    (u128::from(raw.time_zero) + quot * mult + ((rem * mult) >> shift)) as u64
}

/// What a reader must return for a page whose (stable, even-locked) fields are `raw`, written
/// from the rules in the uapi header and the core's documented checks, not from its code.
fn expected(raw: &RawTimeFields, cycles: u64) -> Result<u64, ReadError> {
    if raw.capabilities & caps::USER_TIME_ZERO == 0 {
        return Err(ReadError::TimeZeroUnavailable {
            capabilities: raw.capabilities,
        });
    }
    let short = raw.capabilities & caps::USER_TIME_SHORT != 0;
    let mask_ok = raw.time_mask != 0 && (raw.time_mask & raw.time_mask.wrapping_add(1)) == 0;
    if short && !mask_ok {
        return Err(ReadError::InvalidParameters(ParamError::InvalidMask(
            raw.time_mask,
        )));
    }
    if raw.time_mult == 0 {
        return Err(ReadError::InvalidParameters(ParamError::ZeroMultiplier));
    }
    if raw.time_shift > 63 {
        return Err(ReadError::InvalidParameters(ParamError::ShiftTooLarge(
            raw.time_shift,
        )));
    }
    Ok(reference_ns(raw, cycles))
}

fn timed<T>(what: &str, read: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = read();
    let took = started.elapsed();
    assert!(took < READ_DEADLINE, "{what} took {took:?}: not bounded");
    result
}

fn config() -> ProptestConfig {
    if cfg!(miri) {
        ProptestConfig {
            cases: 8,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    } else {
        ProptestConfig::with_cases(4_096)
    }
}

fn capabilities() -> impl Strategy<Value = u64> {
    // Mostly the interesting bits in every combination, sometimes any word at all.
    prop_oneof![
        3 => (0u64..64).prop_map(|bits| bits << 1),
        1 => any::<u64>(),
    ]
}

fn fields() -> impl Strategy<Value = RawTimeFields> {
    (
        capabilities(),
        prop_oneof![Just(0u32), Just(1), Just(u32::MAX), any::<u32>()],
        prop_oneof![0u16..=64, Just(u16::MAX), any::<u16>()],
        any::<u64>(),
        any::<u64>(),
        prop_oneof![
            Just(0u64),
            Just(u64::MAX),
            (1u32..64).prop_map(|bits| (1u64 << bits) - 1),
            any::<u64>(),
        ],
    )
        .prop_map(
            |(capabilities, time_mult, time_shift, time_zero, time_cycles, time_mask)| {
                RawTimeFields {
                    capabilities,
                    time_mult,
                    time_shift,
                    time_zero,
                    time_cycles,
                    time_mask,
                }
            },
        )
}

proptest! {
    #![proptest_config(config())]

    /// Fields that make no sense, published with the proper protocol: a typed error or the
    /// kernel formula's value, and `raw()` gives back exactly what was written.
    #[test]
    fn garbage_fields_give_a_typed_error_or_the_kernel_formula(
        raw in fields(),
        cycles in any::<u64>(),
    ) {
        let page = Page::zeroed();
        page.writer().write(&raw);
        let reader = page.reader();
        prop_assert_eq!(timed("raw", || reader.raw()), Ok(raw));
        let mut counter_reads = 0;
        let reading = timed("read_with", || {
            reader.read_with(|| {
                counter_reads += 1;
                cycles
            })
        });
        prop_assert_eq!(counter_reads, 1);
        prop_assert_eq!(reading.map(|reading| reading.ns()), expected(&raw, cycles));
        let conversion = timed("conversion", || reader.conversion());
        prop_assert_eq!(conversion.is_ok(), expected(&raw, cycles).is_ok());
        if let Ok(conversion) = conversion {
            prop_assert_eq!(conversion.mult(), raw.time_mult);
            prop_assert_eq!(u64::from(conversion.shift()), u64::from(raw.time_shift));
            prop_assert_eq!(conversion.zero(), raw.time_zero);
            prop_assert_eq!(conversion.cycles_to_ns(cycles), reference_ns(&raw, cycles));
        }
    }

    /// A whole page of arbitrary bytes (any lock value, any fields): an odd lock is
    /// `Contended` (the counter never read), an even one is judged on its fields.
    #[test]
    fn a_page_of_arbitrary_bytes_is_read_or_refused(
        bytes in proptest::collection::vec(any::<u8>(), 0..=128),
        cycles in any::<u64>(),
    ) {
        let page = Page::from_bytes(&bytes);
        let reader = page.reader();
        let lock = page.lock().load(Ordering::Relaxed);
        let mut counter_reads = 0;
        let reading = timed("read_with", || {
            reader.read_with(|| {
                counter_reads += 1;
                cycles
            })
        });
        if lock % 2 == 1 {
            prop_assert_eq!(reading, Err(ReadError::Contended));
            prop_assert_eq!(counter_reads, 0);
            prop_assert_eq!(timed("raw", || reader.raw()), Err(ReadError::Contended));
        } else {
            let raw = timed("raw", || reader.raw()).expect("an even lock that never moves");
            prop_assert_eq!(reading.map(|reading| reading.ns()), expected(&raw, cycles));
            prop_assert_eq!(counter_reads, 1);
        }
    }
}

#[test]
fn a_lock_that_stays_odd_forever_is_contended_quickly() {
    let page = Page::zeroed();
    let conversion = TimeConversion::new(1 << 20, 20, 5).expect("valid");
    page.writer().publish(&conversion);
    for odd in [1, 3, u32::MAX] {
        page.lock().store(odd, Ordering::Release);
        let reader = page.reader();
        let mut counter_reads = 0;
        assert_eq!(
            timed("read_with", || reader.read_with(|| {
                counter_reads += 1;
                0
            })),
            Err(ReadError::Contended)
        );
        assert_eq!(counter_reads, 0, "the counter was read under an odd lock");
        assert_eq!(
            timed("conversion", || reader.conversion()),
            Err(ReadError::Contended)
        );
        assert_eq!(timed("raw", || reader.raw()), Err(ReadError::Contended));
        #[cfg(not(miri))] // now_ns reads the real counter (rdtsc), which Miri does not model
        assert_eq!(
            timed("now_ns", || reader.now_ns()),
            Err(ReadError::Contended)
        );
    }
    // The same page becomes readable again once the lock is even.
    page.lock().store(4, Ordering::Release);
    assert_eq!(
        page.reader().read_with(|| 1 << 20).map(|r| r.ns()),
        Ok(5 + (1 << 20))
    );
}

#[test]
fn a_lock_that_changes_on_every_read_is_contended_after_max_retries() {
    let page = Page::zeroed();
    page.writer()
        .publish(&TimeConversion::new(1, 0, 0).expect("valid"));
    let reader = page.reader();
    // Even to even on every attempt (a writer finishing an update between each pair of loads):
    // every attempt reaches the counter and is rejected.
    let mut counter_reads = 0u32;
    let result = timed("read_with", || {
        reader.read_with(|| {
            counter_reads += 1;
            page.lock().fetch_add(2, Ordering::Release);
            7
        })
    });
    assert_eq!(result, Err(ReadError::Contended));
    assert_eq!(counter_reads, MAX_RETRIES);
    // Even to odd during the first attempt (a writer that starts an update and never ends it):
    // the first attempt is rejected at its re-read, the rest at their first load.
    let mut counter_reads = 0u32;
    let result = timed("read_with", || {
        reader.read_with(|| {
            counter_reads += 1;
            page.lock().fetch_add(1, Ordering::Release);
            7
        })
    });
    assert_eq!(result, Err(ReadError::Contended));
    assert_eq!(counter_reads, 1);
}

/// Two conversions that differ in every field, so a mix of the two is detected.
fn alternating_sets() -> [TimeConversion; 2] {
    [
        TimeConversion::new_short(0x1111_1111, 11, 0x1111_1111_1111, 0x1111, (1 << 40) - 1)
            .expect("valid"),
        TimeConversion::new(0x2222_2222, 22, 0x2222_2222_2222).expect("valid"),
    ]
}

/// Reads at least `reads` times while a writer thread alternates the two sets as fast as it
/// can, and on until both sets have been seen (up to [`OVERLAP_DEADLINE`]: on a loaded machine
/// the writer may get no CPU for a while); every reading must be exactly one set (or
/// `Contended`). Returns (reads, seen per set, contended, writer updates).
fn race(reads: u64) -> (u64, [u64; 2], u64, u64) {
    let page = Page::zeroed();
    let sets = alternating_sets();
    page.writer().publish(&sets[0]);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, started) = (Arc::clone(&stop), Arc::clone(&started));
        std::thread::spawn(move || {
            let writer = page.writer();
            let mut updates = 0u64;
            while !stop.load(Ordering::Relaxed) {
                writer.publish(&sets[(updates % 2) as usize]);
                updates += 1;
                started.store(true, Ordering::Relaxed);
            }
            updates
        })
    };
    while !started.load(Ordering::Relaxed) {
        std::thread::yield_now();
    }
    let reader = page.reader();
    let (mut seen, mut contended) = ([0u64; 2], 0u64);
    let begun = Instant::now();
    let mut i = 0u64;
    while i < reads || ((seen[0] == 0 || seen[1] == 0) && begun.elapsed() < OVERLAP_DEADLINE) {
        match reader.read_with(|| i) {
            Ok(reading) => {
                assert_eq!(reading.cycles, i, "the counter value was not the one read");
                match sets.iter().position(|set| *set == reading.conversion) {
                    Some(index) => seen[index] += 1,
                    None => panic!("torn read after {i} reads: {reading:?}"),
                }
            }
            Err(ReadError::Contended) => contended += 1,
            Err(other) => panic!("unexpected error {other:?}"),
        }
        i += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let updates = writer.join().expect("writer thread");
    (i, seen, contended, updates)
}

/// How long [`race`] keeps reading past its count for the writer to show both sets.
const OVERLAP_DEADLINE: Duration = Duration::from_secs(20);

#[test]
fn racing_writer_short_run_never_tears() {
    let reads = if cfg!(miri) { 500 } else { 1_000_000 };
    let (done, seen, contended, updates) = race(reads);
    println!("{done} reads, {updates} updates, seen {seen:?}, contended {contended}");
    assert_eq!(seen[0] + seen[1] + contended, done);
    if !cfg!(miri) {
        // Under Miri the interleaving is up to its scheduler; natively both sets must show up.
        assert!(updates > 100, "the writer barely ran ({updates} updates)");
        assert!(
            seen[0] > 0 && seen[1] > 0,
            "no overlap with both sets: {seen:?}"
        );
    }
}

#[test]
#[ignore = "100 million reads: run in release (`cargo test --release -p perfclock-core --test hostile_pages -- --ignored`)"]
fn racing_writer_100_million_reads_never_tear() {
    let reads: u64 = std::env::var("PERFCLOCK_TORN_READS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(100_000_000);
    let started = Instant::now();
    let (done, seen, contended, updates) = race(reads);
    println!(
        "TORN-READS {done} reads in {:?}: {updates} writer updates, seen {seen:?}, \
         contended {contended}, torn 0",
        started.elapsed()
    );
    assert!(updates > 1_000, "the writer barely ran ({updates} updates)");
    assert!(
        seen[0] > 0 && seen[1] > 0,
        "no overlap with both sets: {seen:?}"
    );
}
