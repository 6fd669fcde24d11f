//! Tests of [`super`]: the arithmetic against a reference written from the kernel's C, the
//! reader on entries in ordinary memory, and the seqlock against a writer thread.

use super::*;
use proptest::prelude::*;
use std::boxed::Box;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// `include/linux/math64.h`'s generic `mul_u64_u32_shr` (the one for machines without a
/// 128-bit product), as the kernel writes it: 32-bit halves, `u64` arithmetic.
fn reference_mul_u64_u32_shr(a: u64, mul: u32, shift: u32) -> u64 {
    let al = a as u32;
    let ah = (a >> 32) as u32;
    let mut ret = (u64::from(al) * u64::from(mul)) >> shift;
    if ah != 0 {
        ret = ret.wrapping_add((u64::from(ah) * u64::from(mul)) << (32 - shift));
    }
    ret
}

/// `__pvclock_read_cycles` with `pvclock_scale_delta` as the kernel writes them, `u64` wraps
/// and all.
fn reference_read_cycles(entry: &PvclockVcpuTimeInfo, tsc: u64) -> u64 {
    let mut delta = tsc.wrapping_sub(entry.tsc_timestamp);
    if entry.tsc_shift < 0 {
        delta >>= -i32::from(entry.tsc_shift);
    } else {
        delta <<= i32::from(entry.tsc_shift);
    }
    let offset = reference_mul_u64_u32_shr(delta, entry.tsc_to_system_mul, 32);
    entry.system_time.wrapping_add(offset)
}

fn entry(tsc_timestamp: u64, system_time: u64, mul: u32, shift: i8) -> PvclockVcpuTimeInfo {
    PvclockVcpuTimeInfo {
        version: 2,
        tsc_timestamp,
        system_time,
        tsc_to_system_mul: mul,
        tsc_shift: shift,
        flags: TSC_STABLE_BIT,
        ..PvclockVcpuTimeInfo::default()
    }
}

/// perf's `tsc_to_perf_time` (`tools/perf/util/tsc.c`) as written, in `u64`: the quotient and
/// remainder split whose `rem * time_mult` must not overflow (checked here).
fn perf_tsc_to_perf_time(conversion: &TimeConversion, cyc: u64) -> u64 {
    let shift = u32::from(conversion.shift());
    let mult = u64::from(conversion.mult());
    let quot = cyc >> shift;
    let rem = cyc & ((1u64 << shift) - 1);
    let low = rem
        .checked_mul(mult)
        .expect("rem * time_mult overflows perf's u64 arithmetic");
    conversion
        .zero()
        .wrapping_add(quot.wrapping_mul(mult))
        .wrapping_add(low >> shift)
}

/// An entry of this project's AMD EPYC guest (2.595 GHz TSC), read from its vDSO page.
const EPYC: PvclockVcpuTimeInfo = PvclockVcpuTimeInfo {
    version: 4,
    pad0: 0,
    tsc_timestamp: 1_059_213_316,
    system_time: 408_184_226,
    tsc_to_system_mul: 3_310_237_869,
    tsc_shift: -1,
    flags: TSC_STABLE_BIT,
    pad: [0; 2],
};

/// Plausible entries: a shift of -2..=3 (hosts publish -1..=1 for TSCs of 0.5..8 GHz) and a
/// multiplier that makes a slope `PvclockParams::new` accepts.
fn plausible() -> impl Strategy<Value = PvclockVcpuTimeInfo> {
    (any::<u64>(), any::<u64>(), 1u32 << 30.., -2i8..=3)
        .prop_map(|(ts, st, mul, shift)| entry(ts, st, mul, shift))
}

#[test]
fn layout_is_the_kernels() {
    assert_eq!(size_of::<PvclockVcpuTimeInfo>(), 32);
    assert_eq!(ENTRY_STRIDE * ENTRIES_PER_PAGE, 4096);
}

#[test]
fn epyc_entry_converts_as_the_kernel_does() {
    let params = PvclockParams::of(&EPYC).unwrap();
    // 2 * 10^9 cycles later: (2e9 >> 1) * 3310237869 >> 32 = 770_724_813 ns (2.595 GHz).
    let tsc = EPYC.tsc_timestamp + 2_000_000_000;
    assert_eq!(params.pvclock_ns(tsc), EPYC.system_time + 770_724_813);
    assert_eq!(params.pvclock_ns(tsc), reference_read_cycles(&EPYC, tsc));
    assert_eq!(
        params.perf_ns(tsc, -87_961_406),
        EPYC.system_time + 770_724_813 - 87_961_406
    );
}

#[test]
fn entries_that_are_no_clock_are_refused() {
    assert_eq!(
        PvclockParams::of(&entry(0, 0, 0, 0)),
        Err(PvclockError::ZeroMultiplier)
    );
    // 2^31 * 2^10 / 2^32 = 512 ns per cycle: a 2 MHz counter.
    assert_eq!(
        PvclockParams::of(&entry(0, 0, 1 << 31, 10)),
        Err(PvclockError::AbsurdSlope {
            mul: 1 << 31,
            shift: 10
        })
    );
    // 1 / 2^32 ns per cycle.
    assert!(matches!(
        PvclockParams::of(&entry(0, 0, 1, 0)),
        Err(PvclockError::AbsurdSlope { .. })
    ));
    assert!(matches!(
        PvclockParams::of(&entry(0, 0, u32::MAX, 100)),
        Err(PvclockError::AbsurdSlope { .. })
    ));
    assert!(matches!(
        PvclockParams::of(&entry(0, 0, u32::MAX, -100)),
        Err(PvclockError::AbsurdSlope { .. })
    ));
    let unstable = PvclockVcpuTimeInfo { flags: 0, ..EPYC };
    assert_eq!(
        PvclockParams::of_stable(&unstable),
        Err(PvclockError::NotStable { flags: 0 })
    );
    // A paused guest's entry without the stable bit: refused, and the error shows its flags.
    let stopped_unstable = PvclockVcpuTimeInfo {
        flags: GUEST_STOPPED_BIT,
        ..EPYC
    };
    assert_eq!(
        PvclockParams::of_stable(&stopped_unstable),
        Err(PvclockError::NotStable {
            flags: GUEST_STOPPED_BIT
        })
    );
}

#[test]
fn a_paused_guests_entry_is_the_same_clock() {
    let stopped = PvclockVcpuTimeInfo {
        flags: TSC_STABLE_BIT | GUEST_STOPPED_BIT,
        ..EPYC
    };
    let params = PvclockParams::of_stable(&stopped).unwrap();
    assert_eq!(params, PvclockParams::of_stable(&EPYC).unwrap());
    assert!(params.is_stable());
    // Bits no kernel defines for the clock are notes too.
    let high = PvclockVcpuTimeInfo {
        flags: TSC_STABLE_BIT | 0xf0,
        ..EPYC
    };
    assert_eq!(PvclockParams::of_stable(&high), Ok(params));
}

/// `pvclock_scale_delta` with the 128-bit product, as x86_64's `mul_u64_u32_shr` computes it
/// (`mulq`, then `shrd`).
fn wide_scale_delta(delta: u64, mul: u32, shift: i8) -> u64 {
    let delta = if shift < 0 {
        delta >> -i32::from(shift)
    } else {
        delta << shift
    };
    ((u128::from(delta) * u128::from(mul)) >> 32) as u64
}

/// The two-product form against the 128-bit product over every shift C defines, at the values
/// where a carry or a truncation would show: all ones, powers of two and their neighbours.
#[test]
fn two_products_are_the_wide_product_over_every_shift() {
    let mut values = std::vec![0, 1, u64::MAX, u64::MAX - 1, 0xffff_ffff, 1 << 32];
    for bit in 0..64 {
        values.extend([
            1u64 << bit,
            (1u64 << bit) - 1,
            (1u64 << bit).wrapping_add(1),
        ]);
    }
    let muls = [
        0,
        1,
        u32::MAX,
        u32::MAX - 1,
        1 << 31,
        (1 << 31) - 1,
        0x8000_0001,
    ];
    for shift in -63..=63i8 {
        for &delta in &values {
            for &mul in &muls {
                assert_eq!(
                    pvclock_scale_delta(delta, mul, shift),
                    wide_scale_delta(delta, mul, shift),
                    "delta {delta:#x}, mul {mul:#x}, shift {shift}"
                );
            }
        }
    }
}

proptest! {
    #[test]
    fn two_products_are_the_wide_product(delta in any::<u64>(), mul in any::<u32>(), shift in -63i8..=63) {
        prop_assert_eq!(pvclock_scale_delta(delta, mul, shift), wide_scale_delta(delta, mul, shift));
    }

    #[test]
    fn mul_u64_u32_shr_is_the_kernels(a in any::<u64>(), mul in any::<u32>(), shift in 1u32..=32) {
        prop_assert_eq!(mul_u64_u32_shr(a, mul, shift), reference_mul_u64_u32_shr(a, mul, shift));
    }

    #[test]
    fn read_cycles_is_the_kernels_at_and_after_tsc_timestamp(
        e in plausible(),
        delta in any::<u64>(),
    ) {
        let params = PvclockParams::of(&e).unwrap();
        let tsc = e.tsc_timestamp.saturating_add(delta);
        prop_assert_eq!(params.pvclock_ns(tsc), reference_read_cycles(&e, tsc));
    }

    #[test]
    fn the_extension_before_tsc_timestamp_mirrors_the_formula(
        e in plausible(),
        back in 0u64..1 << 58,
    ) {
        let params = PvclockParams::of(&e).unwrap();
        prop_assume!(e.tsc_timestamp >= back);
        let tsc = e.tsc_timestamp - back;
        let mirrored = entry(tsc, 0, e.tsc_to_system_mul, e.tsc_shift);
        let forward = reference_read_cycles(&mirrored, e.tsc_timestamp);
        prop_assert_eq!(params.pvclock_ns(tsc), e.system_time.wrapping_sub(forward));
    }

    #[test]
    fn conversion_is_monotonic_across_tsc_timestamp(
        e in plausible(),
        a in -(1i64 << 56)..1 << 56,
        b in -(1i64 << 56)..1 << 56,
    ) {
        // system_time far from the wrap, counter values on both sides of tsc_timestamp.
        let e = PvclockVcpuTimeInfo { system_time: 1 << 62, tsc_timestamp: 1 << 62, ..e };
        let params = PvclockParams::of(&e).unwrap();
        let (lo, hi) = (a.min(b), a.max(b));
        let at = |d: i64| params.pvclock_ns(e.tsc_timestamp.wrapping_add(d as u64));
        prop_assert!(at(lo) <= at(hi), "{} at {lo}, {} at {hi}", at(lo), at(hi));
    }

    #[test]
    fn perf_ns_to_cycles_inverts_exactly(
        e in plausible(),
        offset in -(1i64 << 40)..1 << 40,
        delta in -(1i64 << 44)..1 << 44,
        extra in 0u64..3,
    ) {
        let e = PvclockVcpuTimeInfo { system_time: 1 << 60, tsc_timestamp: 1 << 60, ..e };
        let params = PvclockParams::of(&e).unwrap();
        let cycles = e.tsc_timestamp.wrapping_add(delta as u64);
        let ns = params.perf_ns(cycles, offset) + extra;
        let back = params.perf_ns_to_cycles(ns, offset);
        prop_assert!(params.perf_ns(back, offset) <= ns, "{back} -> {}", params.perf_ns(back, offset));
        prop_assert!(ns <= params.perf_ns(back + 1, offset));
        if extra == 0 {
            prop_assert_eq!(params.perf_ns(back, offset), ns);
            prop_assert!(back <= cycles);
            prop_assert!(params.perf_ns(back - 1, offset) < ns, "not the first cycle of {}", ns);
        }
    }

    #[test]
    fn time_conversion_stays_within_its_stated_error_in_perfs_own_arithmetic(
        e in plausible(),
        offset in any::<i64>(),
        delta in -(1i64 << 50)..1 << 50,
    ) {
        // A counter value across 2^64 from the entry's is centuries of cycles from it: the
        // kernel's own scaling of such a distance overflows (`pvclock_scale_delta` shifts it
        // left in 64 bits), so neither form is defined there.
        let Some(tsc) = e.tsc_timestamp.checked_add_signed(delta) else {
            return Ok(());
        };
        let params = PvclockParams::of(&e).unwrap();
        let conversion = params.time_conversion(offset).unwrap();
        let exact = params.perf_ns(tsc, offset);
        let approx = perf_tsc_to_perf_time(&conversion, tsc);
        prop_assert_eq!(approx, conversion.cycles_to_ns(tsc));
        let off = approx.wrapping_sub(exact) as i64;
        prop_assert!(
            off.unsigned_abs() <= params.time_conversion_error_ns(tsc),
            "{off} ns off at delta {delta} (shift {})", e.tsc_shift
        );
    }
}

proptest! {
    /// Anchored at the recording, perf's form stays within its stated error of the exact clock
    /// at any distance from the anchor, and within a few ns near it whatever the uptime: the
    /// entry's `tsc_timestamp` 30 days before (a 3.5 GHz TSC: the rounded slope's worst case,
    /// 2^-33 ns a cycle, 0.41 ns a second) and 10 s either side of the anchor.
    #[test]
    fn a_conversion_anchored_at_the_recording_is_exact_there_at_any_uptime(
        e in plausible(),
        offset in -(1i64 << 40)..1 << 40,
        into in prop_oneof![-(1i64 << 43)..1 << 43, -35_000_000_000i64..35_000_000_000],
    ) {
        const TSC_HZ: u64 = 3_500_000_000;
        const DAYS_30: u64 = 30 * 86_400 * TSC_HZ;
        let e = PvclockVcpuTimeInfo { system_time: 1 << 50, tsc_timestamp: 1 << 40, ..e };
        let params = PvclockParams::of(&e).unwrap();
        let anchor = e.tsc_timestamp + DAYS_30;
        let conversion = params.time_conversion_at(offset, anchor).unwrap();
        let tsc = anchor.wrapping_add(into as u64);
        let exact = params.perf_ns(tsc, offset);
        let approx = perf_tsc_to_perf_time(&conversion, tsc);
        prop_assert_eq!(approx, conversion.cycles_to_ns(tsc));
        let off = approx.wrapping_sub(exact) as i64;
        let stated = params.time_conversion_error_at_ns(tsc, anchor);
        prop_assert!(off.unsigned_abs() <= stated, "{off} ns off, {stated} stated (shift {})", e.tsc_shift);
        // 10 s of 3.5 GHz from the anchor: at most 3 + 5 ns.
        if into.unsigned_abs() <= 10 * TSC_HZ {
            prop_assert!(stated <= 8, "{stated} ns within 10 s of the anchor");
        }
        // The same entry anchored at its tsc_timestamp is off by microseconds 30 days later.
        if e.tsc_shift < 0 {
            prop_assert!(params.time_conversion_error_ns(anchor) > 200_000);
        }
    }
}

/// An entry in ordinary memory, 64-aligned like the vDSO's slots, written only atomically.
#[repr(C, align(64))]
struct Slot(PvclockVcpuTimeInfo);

struct TestEntry {
    slot: NonNull<Slot>,
}

// SAFETY: the entry is leaked and accessed only atomically by the reader and one writer.
unsafe impl Send for TestEntry {}
// SAFETY: as for `Send`.
unsafe impl Sync for TestEntry {}

impl TestEntry {
    fn new(initial: PvclockVcpuTimeInfo) -> Self {
        TestEntry {
            slot: NonNull::from(Box::leak(Box::new(Slot(initial)))),
        }
    }

    fn ptr(&self) -> *mut PvclockVcpuTimeInfo {
        self.slot.as_ptr().cast()
    }

    fn reader(&self) -> PvclockReader<'static> {
        // SAFETY: leaked (never freed), 64-aligned, written only through `write`'s atomics.
        unsafe { PvclockReader::new(NonNull::new(self.ptr()).unwrap()) }
    }

    /// The host's update: version odd, fields, version even.
    fn write(&self, tsc_timestamp: u64, system_time: u64, mul: u32) {
        // SAFETY: as in `reader`; this test's single writer.
        let words = unsafe { EntryWords::of(self.ptr()) };
        let guard = words.version.write();
        words.tsc_timestamp.store(tsc_timestamp, Ordering::Relaxed);
        words.system_time.store(system_time, Ordering::Relaxed);
        let scale = u64::from(mul) | (u64::from(TSC_STABLE_BIT) << 40) | (0xff << 32);
        words.scale.store(scale, Ordering::Relaxed);
        drop(guard);
    }

    /// Sets the entry's flags byte (offset 29: byte 5 of the word at 24) to `flags`, as the
    /// host does at a pause (inside a version bump) when `bump`, else as the guest's watchdog
    /// clears `PVCLOCK_GUEST_STOPPED` (a plain write, the version unchanged).
    fn set_flags(&self, flags: u8, bump: bool) {
        // SAFETY: as in `write`.
        let words = unsafe { EntryWords::of(self.ptr()) };
        let guard = bump.then(|| words.version.write());
        let mut bytes = words.scale.load(Ordering::Relaxed).to_ne_bytes();
        bytes[5] = flags;
        words
            .scale
            .store(u64::from_ne_bytes(bytes), Ordering::Relaxed);
        drop(guard);
    }
}

#[test]
fn guest_stopped_appearing_or_clearing_changes_no_reading() {
    let slot = TestEntry::new(EPYC);
    let reader = slot.reader();
    let tsc = || EPYC.tsc_timestamp + 123_456_789;
    let offset = -103_409_420;
    let before = reader.perf_ns_with(tsc, offset).unwrap();
    let params = reader.params().unwrap();
    for (flags, bump) in [
        (TSC_STABLE_BIT | GUEST_STOPPED_BIT, true),
        (TSC_STABLE_BIT, false),
        (TSC_STABLE_BIT | GUEST_STOPPED_BIT, true),
    ] {
        slot.set_flags(flags, bump);
        assert_eq!(reader.raw().unwrap().flags, flags);
        assert_eq!(
            reader.perf_ns_with(tsc, offset),
            Ok(before),
            "flags {flags:#x}"
        );
        assert_eq!(reader.perf_ns_once_with(tsc, offset), Some(before));
        assert_eq!(reader.params(), Ok(params), "flags {flags:#x}");
    }
    // The control: the stable bit is the clock's, and its loss shows.
    slot.set_flags(GUEST_STOPPED_BIT, true);
    assert!(!reader.params().unwrap().is_stable());
}

#[test]
fn reader_reads_an_entry_and_its_counter_together() {
    let slot = TestEntry::new(EPYC);
    let reader = slot.reader();
    let (params, cycles) = reader.read_with(|| EPYC.tsc_timestamp + 10).unwrap();
    assert_eq!(cycles, EPYC.tsc_timestamp + 10);
    assert_eq!(params, PvclockParams::of(&EPYC).unwrap());
    assert_eq!(reader.raw().unwrap(), EPYC);
    assert_eq!(
        reader.perf_ns_once_with(|| EPYC.tsc_timestamp, 5),
        Some(EPYC.system_time + 5)
    );
}

#[test]
fn reader_names_what_is_wrong_with_an_entry() {
    let zero = TestEntry::new(PvclockVcpuTimeInfo::default());
    assert_eq!(zero.reader().params(), Err(PvclockError::ZeroMultiplier));
    assert_eq!(zero.reader().perf_ns_once_with(|| 1, 0), None);
    let odd = TestEntry::new(PvclockVcpuTimeInfo { version: 7, ..EPYC });
    assert_eq!(
        odd.reader().params(),
        Err(PvclockError::VersionNeverSettled)
    );
    assert_eq!(odd.reader().perf_ns_once_with(|| 1, 0), None);
}

#[test]
fn a_read_during_an_update_is_retried() {
    let slot = TestEntry::new(EPYC);
    let reader = slot.reader();
    // SAFETY: as in `TestEntry::write`.
    let words = unsafe { EntryWords::of(slot.ptr()) };
    let mut calls = 0;
    let (params, _) = reader
        .read_with(|| {
            calls += 1;
            if calls == 1 {
                // The host rewrites the entry inside the first section.
                drop(words.version.write());
            }
            0
        })
        .unwrap();
    assert_eq!(
        calls, 2,
        "the first section failed validation and was read again"
    );
    assert_eq!(params, PvclockParams::of(&EPYC).unwrap());
}

#[test]
fn readers_never_see_a_torn_entry() {
    // Every update writes a consistent triple: system_time = 2 * tsc_timestamp and mul =
    // tsc_timestamp's low 30 bits + 2^31; a torn read breaks one of the equalities.
    let slot = Arc::new(TestEntry::new(entry(1, 2, 1 | 1 << 31, 0)));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (slot, stop) = (Arc::clone(&slot), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 1u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                slot.write(n, 2 * n, (n as u32 & 0x3fff_ffff) | 1 << 31);
            }
        })
    };
    let reader = slot.reader();
    let reads = if cfg!(miri) { 50 } else { 100_000 };
    for _ in 0..reads {
        let Ok(raw) = reader.raw() else { continue };
        assert_eq!(raw.system_time, 2 * raw.tsc_timestamp, "{raw:?}");
        assert_eq!(
            raw.tsc_to_system_mul,
            (raw.tsc_timestamp as u32 & 0x3fff_ffff) | 1 << 31,
            "{raw:?}"
        );
        assert_eq!(raw.version & 1, 0);
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
}
