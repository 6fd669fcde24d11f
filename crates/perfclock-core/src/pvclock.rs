//! The paravirtual clock of KVM (and Xen) guests: the layout of `struct pvclock_vcpu_time_info`,
//! the kernel's arithmetic on it, and a seqlock reader of an entry in memory someone else writes
//! (the host, through the vDSO's read-only mapping).
//!
//! # The kernel's arithmetic
//! `arch/x86/include/asm/pvclock.h`:
//! ```text
//! static inline u64 pvclock_scale_delta(u64 delta, u32 mul_frac, int shift)
//! {
//!     if (shift < 0) delta >>= -shift; else delta <<= shift;
//!     return mul_u64_u32_shr(delta, mul_frac, 32);
//! }
//! static __always_inline u64 __pvclock_read_cycles(const struct pvclock_vcpu_time_info *src, u64 tsc)
//! {
//!     u64 delta = tsc - src->tsc_timestamp;
//!     u64 offset = pvclock_scale_delta(delta, src->tsc_to_system_mul, src->tsc_shift);
//!     return src->system_time + offset;
//! }
//! ```
//! [`PvclockParams::pvclock_ns`] is that function, bit for bit, for every counter value at or
//! after `tsc_timestamp` (`mul_u64_u32_shr` is the 128-bit product shifted right by 32, which
//! is what x86's `mulq; shrd` computes). With a stable sched_clock, the kernel's
//! `local_clock()` (the perf clock) is `kvm_sched_clock_read() + __sched_clock_offset`, and
//! `kvm_sched_clock_read()` is `pvclock_clocksource_read_nowd(this_cpu_pvti()) -
//! kvm_sched_clock_offset` (`arch/x86/kernel/kvmclock.c`), so
//! `perf ns = pvclock_ns(tsc) + C` with `C = __sched_clock_offset - kvm_sched_clock_offset`, a
//! constant of the boot ([`PvclockParams::perf_ns`]).
//!
//! # Before `tsc_timestamp`
//! The kernel never converts a counter value older than the entry it reads (its own `rdtsc`
//! follows the read of the entry). A [`crate::counter`] value taken earlier and converted after
//! the host rewrote the entry is: the kernel's formula would wrap `tsc - tsc_timestamp` to an
//! enormous delta. Here such a value converts by the same formula mirrored:
//! `system_time - pvclock_scale_delta(tsc_timestamp - tsc)`, which equals the kernel's value at
//! `tsc == tsc_timestamp` and is non-decreasing in `tsc` on both sides (as long as neither
//! shifted delta overflows 64 bits: centuries of cycles for the shifts hosts publish).
//!
//! # Safety
//! The reader holds a raw pointer to an entry that the host writes concurrently; every access is
//! an atomic load through views formed only under [`PvclockReader::new`]'s contract.
#![allow(unsafe_code)]

use core::hint::spin_loop;
use core::marker::PhantomData;
use core::mem::{offset_of, size_of};
use core::ptr::{addr_of_mut, NonNull};
use core::sync::atomic::{AtomicU64, Ordering};

use crate::seq_lock::SeqLock;
use crate::{counter, ParamError, PvclockError, TimeConversion, MAX_RETRIES};

/// `struct pvclock_vcpu_time_info` (`arch/x86/include/asm/pvclock-abi.h`), field for field: 32
/// bytes, the first of each 64-byte `struct pvclock_vsyscall_time_info` slot.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct PvclockVcpuTimeInfo {
    /// Odd while the host updates the entry; changes with every update.
    pub version: u32,
    pub pad0: u32,
    pub tsc_timestamp: u64,
    pub system_time: u64,
    pub tsc_to_system_mul: u32,
    pub tsc_shift: i8,
    pub flags: u8,
    pub pad: [u8; 2],
}

/// Bytes between entries: `struct pvclock_vsyscall_time_info` is the entry padded to
/// `SMP_CACHE_BYTES` (64 on x86), and vCPU `n`'s slot starts at `n * 64`.
pub const ENTRY_STRIDE: usize = 64;
/// Entries in one 4 KiB page: the vCPUs whose entry the vDSO page holds (`HVC_BOOT_ARRAY_SIZE`).
pub const ENTRIES_PER_PAGE: usize = 4096 / ENTRY_STRIDE;
/// `PVCLOCK_TSC_STABLE_BIT`: the host keeps every vCPU's entry in step (KVM's master clock), so
/// the kernel returns the formula's value unclamped. The one flag that changes the clock.
pub const TSC_STABLE_BIT: u8 = 1 << 0;
/// `PVCLOCK_GUEST_STOPPED`: the host paused the guest, a note to the guest's watchdogs that
/// stays set until one of them runs on that vCPU. No reading depends on it (docs/design.md,
/// "Which flag bits matter").
pub const GUEST_STOPPED_BIT: u8 = 1 << 1;

/// The counter runs at most this many nanoseconds per cycle (10 MHz) in an accepted entry.
pub const MAX_NS_PER_CYCLE: u64 = 100;
/// And at least one nanosecond per this many cycles (100 GHz).
pub const MIN_CYCLES_PER_NS: u64 = 100;

const _: () = {
    assert!(size_of::<PvclockVcpuTimeInfo>() == 32);
    assert!(size_of::<PvclockVcpuTimeInfo>() <= ENTRY_STRIDE);
    assert!(offset_of!(PvclockVcpuTimeInfo, version) == 0);
    assert!(offset_of!(PvclockVcpuTimeInfo, tsc_timestamp) == 8);
    assert!(offset_of!(PvclockVcpuTimeInfo, system_time) == 16);
    assert!(offset_of!(PvclockVcpuTimeInfo, tsc_to_system_mul) == 24);
    assert!(offset_of!(PvclockVcpuTimeInfo, tsc_shift) == 28);
    assert!(offset_of!(PvclockVcpuTimeInfo, flags) == 29);
    assert!(ENTRIES_PER_PAGE == 64);
};

/// `mul_u64_u32_shr(a, mul, shift)` (`include/linux/math64.h`): `(a * mul) >> shift` with the
/// product in 128 bits, truncated to 64 as the kernel's `u64` result is.
#[inline(always)]
pub const fn mul_u64_u32_shr(a: u64, mul: u32, shift: u32) -> u64 {
    ((a as u128 * mul as u128) >> (shift & 127)) as u64
}

/// `mul_u64_u32_shr(a, mul, 32)` as two independent 64-bit products of `a`'s halves, the shape
/// of the perf page's arithmetic: `hi * mul + (lo * mul >> 32)`, equal bit for bit (`hi * mul`
/// is whole and below 2^64, `lo * mul` fits in 64 bits, and the sum wraps as the truncation to
/// 64 bits does). One 64x64->128 multiply and its double shift lengthen the chain after the
/// counter read on CPUs whose `rdtsc` is cheap; the two products issue in parallel.
#[inline(always)]
pub const fn mul_u64_u32_shr32(a: u64, mul: u32) -> u64 {
    let high = (a >> 32) * mul as u64;
    let low = ((a & 0xffff_ffff) * mul as u64) >> 32;
    high.wrapping_add(low)
}

/// `pvclock_scale_delta(delta, mul_frac, shift)`: `delta` shifted left by `shift` (right if
/// negative, bits shifted out of a `u64` lost as in C), times `mul_frac / 2^32`. `shift` must be
/// within -63..=63 (C leaves larger shifts undefined; [`PvclockParams::new`] refuses them).
#[inline(always)]
pub const fn pvclock_scale_delta(delta: u64, mul_frac: u32, shift: i8) -> u64 {
    let delta = if shift < 0 {
        delta >> ((shift as i32).unsigned_abs() & 63)
    } else {
        delta << ((shift as u32) & 63)
    };
    mul_u64_u32_shr32(delta, mul_frac)
}

/// The clock one entry describes, checked to be plausible: its `tsc_timestamp`, `system_time`,
/// `tsc_to_system_mul`, `tsc_shift` and whether it is stable. `version`, the padding and the
/// flags other than [`TSC_STABLE_BIT`] are not kept: they change no reading (a paused guest's
/// [`GUEST_STOPPED_BIT`] among them), so two entries of one clock compare equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PvclockParams {
    tsc_timestamp: u64,
    system_time: u64,
    mul: u32,
    shift: i8,
    stable: bool,
}

impl PvclockParams {
    /// Checks the fields of an entry; of `flags`, only [`TSC_STABLE_BIT`] is kept.
    ///
    /// # Errors
    /// [`PvclockError::ZeroMultiplier`], [`PvclockError::AbsurdSlope`].
    pub const fn new(
        tsc_timestamp: u64,
        system_time: u64,
        mul: u32,
        shift: i8,
        flags: u8,
    ) -> Result<Self, PvclockError> {
        if mul == 0 {
            return Err(PvclockError::ZeroMultiplier);
        }
        // ns per cycle = mul * 2^shift / 2^32; as a Q32 number, `mul << shift`.
        let slope_q32: u128 = if shift < -32 || shift > 32 {
            return Err(PvclockError::AbsurdSlope { mul, shift });
        } else if shift < 0 {
            (mul as u128) >> (shift as i32).unsigned_abs()
        } else {
            (mul as u128) << (shift as u32)
        };
        let one = 1u128 << 32;
        if slope_q32 > MAX_NS_PER_CYCLE as u128 * one
            || slope_q32 * (MIN_CYCLES_PER_NS as u128) < one
        {
            return Err(PvclockError::AbsurdSlope { mul, shift });
        }
        Ok(PvclockParams {
            tsc_timestamp,
            system_time,
            mul,
            shift,
            stable: flags & TSC_STABLE_BIT != 0,
        })
    }

    /// The parameters of `entry` (its `version` ignored).
    ///
    /// # Errors
    /// As [`PvclockParams::new`].
    pub const fn of(entry: &PvclockVcpuTimeInfo) -> Result<Self, PvclockError> {
        Self::new(
            entry.tsc_timestamp,
            entry.system_time,
            entry.tsc_to_system_mul,
            entry.tsc_shift,
            entry.flags,
        )
    }

    /// `tsc_timestamp`.
    pub const fn tsc_timestamp(&self) -> u64 {
        self.tsc_timestamp
    }

    /// `system_time`.
    pub const fn system_time(&self) -> u64 {
        self.system_time
    }

    /// `tsc_to_system_mul`.
    pub const fn mul(&self) -> u32 {
        self.mul
    }

    /// `tsc_shift`.
    pub const fn shift(&self) -> i8 {
        self.shift
    }

    /// Whether `PVCLOCK_TSC_STABLE_BIT` is set.
    pub const fn is_stable(&self) -> bool {
        self.stable
    }

    /// The parameters of `entry`, which must be stable: the entries of a paravirt clock.
    ///
    /// # Errors
    /// As [`PvclockParams::new`], and [`PvclockError::NotStable`] (with the entry's flags).
    pub const fn of_stable(entry: &PvclockVcpuTimeInfo) -> Result<Self, PvclockError> {
        match Self::of(entry) {
            Ok(params) if params.stable => Ok(params),
            Ok(_) => Err(PvclockError::NotStable { flags: entry.flags }),
            Err(error) => Err(error),
        }
    }

    /// `__pvclock_read_cycles(entry, tsc)`: the kernel's value for `tsc >= tsc_timestamp`, the
    /// mirrored extension below it (see the module docs).
    #[inline(always)]
    pub const fn pvclock_ns(&self, tsc: u64) -> u64 {
        if tsc >= self.tsc_timestamp {
            let offset = pvclock_scale_delta(tsc - self.tsc_timestamp, self.mul, self.shift);
            self.system_time.wrapping_add(offset)
        } else {
            let back = pvclock_scale_delta(self.tsc_timestamp - tsc, self.mul, self.shift);
            self.system_time.wrapping_sub(back)
        }
    }

    /// Perf-clock nanoseconds at `tsc`: `pvclock_ns(tsc) + offset`, wrapping as the kernel's
    /// `u64` sum `sched_clock() + __sched_clock_offset` does. `offset` is
    /// `__sched_clock_offset - kvm_sched_clock_offset`.
    #[inline(always)]
    pub const fn perf_ns(&self, tsc: u64, offset: i64) -> u64 {
        self.pvclock_ns(tsc).wrapping_add(offset as u64)
    }

    /// The counter value at perf time `ns` (`offset` as in [`PvclockParams::perf_ns`]), rounded
    /// down as [`TimeConversion::ns_to_cycles`] is: `perf_ns(c) <= ns <= perf_ns(c + 1)`, and
    /// the first counter value that converts to `ns` when one does. Exact: the continuous
    /// inverse, then corrected against [`PvclockParams::perf_ns`] itself.
    pub fn perf_ns_to_cycles(&self, ns: u64, offset: i64) -> u64 {
        // Signed distances, so that values on either side of `system_time` (and of `ns`) compare.
        let after = |a: u64, b: u64| (a.wrapping_sub(b) as i64) > 0;
        let since = ns
            .wrapping_sub(offset as u64)
            .wrapping_sub(self.system_time) as i64;
        let shifted = (i128::from(since) << 32).div_euclid(i128::from(self.mul));
        let delta = if self.shift >= 0 {
            shifted >> self.shift
        } else {
            shifted << (self.shift as i32).unsigned_abs()
        };
        let mut cycles = self.tsc_timestamp.wrapping_add(delta as u64);
        // The guess is within a few cycles (the floors, and 2^-shift cycles per step for a
        // negative shift); the bounds only keep absurd inputs from looping long.
        for _ in 0..1_024 {
            if !after(self.perf_ns(cycles, offset), ns) && self.perf_ns(cycles, offset) != ns {
                break;
            }
            cycles = cycles.wrapping_sub(1);
        }
        for _ in 0..1_024 {
            if !after(ns, self.perf_ns(cycles.wrapping_add(1), offset)) {
                break;
            }
            cycles = cycles.wrapping_add(1);
        }
        // Now `perf_ns(cycles) < ns <= perf_ns(cycles + 1)`.
        if self.perf_ns(cycles.wrapping_add(1), offset) == ns {
            cycles.wrapping_add(1)
        } else {
            cycles
        }
    }

    /// The same clock in perf's form (`time_zero + (cyc * time_mult) >> time_shift`), for
    /// `PERF_RECORD_TIME_CONV` records and readers that only take that form. perf computes it
    /// with the uapi header's quotient/remainder split in `u64` (`tsc_to_perf_time`), where
    /// `rem * time_mult` overflows unless `time_shift <= 32` for a 32-bit `time_mult`; so:
    /// - `tsc_shift >= 0`: `time_mult = tsc_to_system_mul`, `time_shift = 32 - tsc_shift`, the
    ///   kernel's slope exactly;
    /// - `tsc_shift < 0` (TSCs above about 2.1 GHz): `time_shift = 32` and `time_mult =
    ///   tsc_to_system_mul >> -tsc_shift`, rounded to nearest: the slope is then off by at most
    ///   half a unit of 2^-32 ns per cycle.
    ///
    /// `time_zero` puts `tsc_timestamp` at `system_time + offset`, so every process of the boot
    /// derives the identical conversion from the same entry. It differs from
    /// [`PvclockParams::perf_ns`] by at most [`PvclockParams::time_conversion_error_ns`].
    ///
    /// # Errors
    /// Never for parameters [`PvclockParams::new`] accepted (the shift is within 0..=32 and
    /// the multiplier non-zero); the `Result` is [`TimeConversion::new`]'s.
    pub const fn time_conversion(&self, offset: i64) -> Result<TimeConversion, ParamError> {
        let (mult, shift) = self.perf_scale();
        let anchor = mul_u64_u32_shr(self.tsc_timestamp, mult, shift);
        let zero = self
            .system_time
            .wrapping_add(offset as u64)
            .wrapping_sub(anchor);
        TimeConversion::new(mult, shift as u16, zero)
    }

    /// [`PvclockParams::time_conversion`] with `time_zero` put so that the conversion equals
    /// [`PvclockParams::perf_ns`] at counter value `anchor` (to the nanosecond perf's floor
    /// allows) instead of at `tsc_timestamp`: a rounded slope (negative `tsc_shift`) then drifts
    /// only with the distance from `anchor`, so a `PERF_RECORD_TIME_CONV` anchored within a
    /// recording stays within a few ns over it whatever the uptime
    /// ([`PvclockParams::time_conversion_error_at_ns`]).
    ///
    /// # Errors
    /// As [`PvclockParams::time_conversion`].
    pub const fn time_conversion_at(
        &self,
        offset: i64,
        anchor: u64,
    ) -> Result<TimeConversion, ParamError> {
        let (mult, shift) = self.perf_scale();
        let scaled = mul_u64_u32_shr(anchor, mult, shift);
        let zero = self.perf_ns(anchor, offset).wrapping_sub(scaled);
        TimeConversion::new(mult, shift as u16, zero)
    }

    /// `(time_mult, time_shift)` of [`PvclockParams::time_conversion`].
    const fn perf_scale(&self) -> (u32, u32) {
        if self.shift >= 0 {
            (self.mul, 32 - self.shift as u32)
        } else {
            let down = (self.shift as i32).unsigned_abs();
            let rounded = (self.mul as u64 + (1u64 << (down - 1))) >> down;
            (rounded as u32, 32)
        }
    }

    /// The most [`PvclockParams::time_conversion`]'s value at counter value `cycles` differs
    /// from [`PvclockParams::perf_ns`]'s, in ns: perf's form floors `cyc * mult` and
    /// `tsc_timestamp * mult` apart (1 ns), the kernel's right shift of a negative `tsc_shift`
    /// drops up to `2^-shift - 1` cycles first (under 1 ns more), and a rounded `time_mult`
    /// (negative shifts) is off by at most `2^-33` ns per cycle away from `tsc_timestamp`
    /// (about 0.3 ns per second of a 2.6 GHz TSC since the host last wrote the entry).
    pub const fn time_conversion_error_ns(&self, cycles: u64) -> u64 {
        self.time_conversion_error_at_ns(cycles, self.tsc_timestamp)
    }

    /// As [`PvclockParams::time_conversion_error_ns`], for
    /// [`PvclockParams::time_conversion_at`]`(_, anchor)`: the rounded slope's drift counts from
    /// `anchor`.
    pub const fn time_conversion_error_at_ns(&self, cycles: u64, anchor: u64) -> u64 {
        if self.shift >= 0 {
            return 1;
        }
        3 + cycles.abs_diff(anchor).div_ceil(1 << 33)
    }
}

/// Atomic views of the words of an entry the seqlock protects.
struct EntryWords<'a> {
    version: &'a SeqLock,
    tsc_timestamp: &'a AtomicU64,
    system_time: &'a AtomicU64,
    /// `tsc_to_system_mul`, `tsc_shift`, `flags` and `pad` (offsets 24..32), one aligned word.
    scale: &'a AtomicU64,
}

impl EntryWords<'_> {
    /// # Safety
    /// `entry` must be valid for reads, 8-aligned, and accessed concurrently only atomically (or
    /// by the host) for the returned lifetime.
    #[inline(always)]
    unsafe fn of<'a>(entry: *mut PvclockVcpuTimeInfo) -> EntryWords<'a> {
        // SAFETY: the caller's contract; each view is naturally aligned in the `repr(C)` layout
        // (offsets checked at compile time above), and the word at offset 24 covers exactly
        // `tsc_to_system_mul`, `tsc_shift`, `flags` and `pad`, accessed through it alone.
        unsafe {
            EntryWords {
                version: SeqLock::from_ptr(addr_of_mut!((*entry).version)),
                tsc_timestamp: AtomicU64::from_ptr(addr_of_mut!((*entry).tsc_timestamp)),
                system_time: AtomicU64::from_ptr(addr_of_mut!((*entry).system_time)),
                scale: AtomicU64::from_ptr(addr_of_mut!((*entry).tsc_to_system_mul).cast::<u64>()),
            }
        }
    }

    /// One seqlock section: the entry's fields (with `version`) and `counter` read inside it,
    /// or `None` if the host was writing or wrote meanwhile.
    #[inline(always)]
    fn attempt(&self, counter: impl FnOnce() -> u64) -> Option<(PvclockVcpuTimeInfo, u64)> {
        // ATOMICS: `optimistic_read` is an Acquire load of `version`, pairing with the host's
        // release of the even version (`smp_wmb` before it, as KVM's `kvm_setup_guest_pvclock`
        // does), so the loads below see that update's fields.
        let version = self.version.optimistic_read()?;
        // ATOMICS: Relaxed: ordered after the Acquire above and before the Acquire fence in
        // `validate_read`, which is what makes the section consistent.
        let tsc_timestamp = self.tsc_timestamp.load(Ordering::Relaxed);
        let system_time = self.system_time.load(Ordering::Relaxed);
        let scale = self.scale.load(Ordering::Relaxed);
        let cycles = counter();
        if !self.version.validate_read(version) {
            return None;
        }
        let [m0, m1, m2, m3, shift, flags, p0, p1] = scale.to_ne_bytes();
        let entry = PvclockVcpuTimeInfo {
            version,
            pad0: 0,
            tsc_timestamp,
            system_time,
            tsc_to_system_mul: u32::from_ne_bytes([m0, m1, m2, m3]),
            tsc_shift: shift as i8,
            flags,
            pad: [p0, p1],
        };
        Some((entry, cycles))
    }
}

/// Reads one pvclock entry that stays mapped for `'a`, with `version` as its seqlock. Copy it
/// freely: it is a pointer (the vDSO's entry is mapped for the life of the process: `'static`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PvclockReader<'a> {
    /// Invariant: points to a readable, 8-aligned entry for `'a`; only the host (or a test's
    /// atomic writer) writes it.
    entry: NonNull<PvclockVcpuTimeInfo>,
    mapping: PhantomData<&'a PvclockVcpuTimeInfo>,
}

// SAFETY: the reader only performs atomic loads through the pointer, sound from any thread; the
// constructor's contract keeps the memory alive and readable for `'a`.
unsafe impl Send for PvclockReader<'_> {}
// SAFETY: as for `Send`: shared use is only concurrent atomic loads.
unsafe impl Sync for PvclockReader<'_> {}

impl PvclockReader<'_> {
    /// A reader of the entry at `entry`.
    ///
    /// # Safety
    /// `entry` must point to 8-aligned memory of at least 32 bytes that stays mapped and
    /// readable for `'a` (which the caller chooses), and that is written only by the host's
    /// protocol or by atomic stores (never by plain stores from Rust code).
    pub const unsafe fn new(entry: NonNull<PvclockVcpuTimeInfo>) -> Self {
        PvclockReader {
            entry,
            mapping: PhantomData,
        }
    }

    /// The entry this reader reads.
    pub const fn entry(&self) -> NonNull<PvclockVcpuTimeInfo> {
        self.entry
    }

    #[inline(always)]
    fn words(&self) -> EntryWords<'_> {
        // SAFETY: the constructor's contract.
        unsafe { EntryWords::of(self.entry.as_ptr()) }
    }

    /// A consistent snapshot of the entry, `version` included, valid or not.
    ///
    /// # Errors
    /// [`PvclockError::VersionNeverSettled`] after [`MAX_RETRIES`].
    pub fn raw(&self) -> Result<PvclockVcpuTimeInfo, PvclockError> {
        self.raw_with(|| 0).map(|(entry, _)| entry)
    }

    /// The entry and `counter`, read in one seqlock section, unvalidated.
    fn raw_with(
        &self,
        mut counter: impl FnMut() -> u64,
    ) -> Result<(PvclockVcpuTimeInfo, u64), PvclockError> {
        let words = self.words();
        for _ in 0..MAX_RETRIES {
            if let Some(read) = words.attempt(&mut counter) {
                return Ok(read);
            }
            spin_loop();
        }
        Err(PvclockError::VersionNeverSettled)
    }

    /// The entry's parameters and `counter`, read in one seqlock section (a retry whenever
    /// `version` is odd or changed, at most [`MAX_RETRIES`] attempts).
    ///
    /// # Errors
    /// [`PvclockError::VersionNeverSettled`], or the entry is none
    /// ([`PvclockError::ZeroMultiplier`], [`PvclockError::AbsurdSlope`]). The stable bit is not
    /// checked here: see [`PvclockParams::of_stable`].
    pub fn read_with(
        &self,
        counter: impl FnMut() -> u64,
    ) -> Result<(PvclockParams, u64), PvclockError> {
        let (entry, cycles) = self.raw_with(counter)?;
        Ok((PvclockParams::of(&entry)?, cycles))
    }

    /// The parameters published now.
    ///
    /// # Errors
    /// As [`PvclockReader::read_with`].
    pub fn params(&self) -> Result<PvclockParams, PvclockError> {
        self.read_with(|| 0).map(|(params, _)| params)
    }

    /// Perf-clock nanoseconds now (`pvclock_ns + offset`), the counter read by `counter`
    /// inside the section; retries as [`PvclockReader::read_with`].
    ///
    /// # Errors
    /// As [`PvclockReader::read_with`], and [`PvclockError::CounterUnsupported`].
    #[inline]
    pub fn perf_ns_with(&self, counter: fn() -> u64, offset: i64) -> Result<u64, PvclockError> {
        if !counter::SUPPORTED {
            return Err(PvclockError::CounterUnsupported);
        }
        match self.perf_ns_once_with(counter, offset) {
            Some(ns) => Ok(ns),
            None => self.perf_ns_retrying(counter, offset),
        }
    }

    #[cold]
    #[inline(never)]
    fn perf_ns_retrying(&self, counter: fn() -> u64, offset: i64) -> Result<u64, PvclockError> {
        self.read_with(counter)
            .map(|(params, cycles)| params.perf_ns(cycles, offset))
    }

    /// One seqlock attempt: perf-clock nanoseconds with `counter` read inside the section, or
    /// `None` if the host was writing, wrote meanwhile, or the entry is no clock (the caller's
    /// slow path names the error). The stable bit is not checked (see
    /// [`PvclockParams::of_stable`]). For the facade's inlined fast path.
    #[inline(always)]
    pub fn perf_ns_once_with(&self, counter: impl FnOnce() -> u64, offset: i64) -> Option<u64> {
        let (entry, cycles) = self.words().attempt(counter)?;
        // The checks that keep the arithmetic meaningful, cheaply: the full slope check of
        // `PvclockParams::new` ran when the entry was accepted.
        if entry.tsc_to_system_mul == 0 || entry.tsc_shift.unsigned_abs() > 32 {
            return None;
        }
        let params = PvclockParams {
            tsc_timestamp: entry.tsc_timestamp,
            system_time: entry.system_time,
            mul: entry.tsc_to_system_mul,
            shift: entry.tsc_shift,
            stable: entry.flags & TSC_STABLE_BIT != 0,
        };
        Some(params.perf_ns(cycles, offset))
    }
}

#[cfg(test)]
mod tests;
