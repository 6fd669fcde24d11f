//! Counter cycles to perf nanoseconds and back, exactly as the kernel documents it.

use crate::ParamError;

/// The parameters of the counter-to-perf-time conversion, validated.
///
/// From `include/uapi/linux/perf_event.h`:
/// ```text
/// if (cap_user_time_short)
///     cyc = time_cycles + ((cyc - time_cycles) & time_mask);
/// quot = cyc >> time_shift;
/// rem  = cyc & (((u64)1 << time_shift) - 1);
/// timestamp = time_zero + quot * time_mult + ((rem * time_mult) >> time_shift);
/// ```
/// The product is taken in `u128`, which equals the quotient/remainder split for every shift the
/// kernel uses (up to 32) and stays exact up to 63; sums wrap as the kernel's `u64` arithmetic does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeConversion {
    mult: u32,
    shift: u16,
    zero: u64,
    /// Only meaningful when `short`: the counter value the kernel last anchored to.
    cycles: u64,
    /// `u64::MAX` unless `short`.
    mask: u64,
    short: bool,
}

impl TimeConversion {
    /// A conversion for a full-width counter (`cap_user_time_short` clear).
    ///
    /// # Errors
    /// [`ParamError::ZeroMultiplier`] or [`ParamError::ShiftTooLarge`] for parameters no kernel
    /// publishes.
    ///
    /// # Example
    /// ```
    /// use perfclock_core::TimeConversion;
    ///
    /// // 1 ns per counter tick (mult 2^31, shift 31), starting at 1000 ns.
    /// let conversion = TimeConversion::new(1 << 31, 31, 1_000)?;
    /// assert_eq!(conversion.cycles_to_ns(500), 1_500);
    /// assert_eq!(conversion.ns_to_cycles(1_500), 500);
    /// # Ok::<(), perfclock_core::ParamError>(())
    /// ```
    #[inline]
    pub const fn new(mult: u32, shift: u16, zero: u64) -> Result<Self, ParamError> {
        if mult == 0 {
            return Err(ParamError::ZeroMultiplier);
        }
        if shift > 63 {
            return Err(ParamError::ShiftTooLarge(shift));
        }
        Ok(TimeConversion {
            mult,
            shift,
            zero,
            cycles: 0,
            mask: u64::MAX,
            short: false,
        })
    }

    /// A conversion for a narrow counter (`cap_user_time_short` set): values are taken relative
    /// to `cycles`, modulo `mask + 1`.
    ///
    /// # Errors
    /// As [`TimeConversion::new`], and [`ParamError::InvalidMask`] unless `mask` is `2^k - 1`
    /// with `k >= 1`.
    ///
    /// # Example
    /// ```
    /// use perfclock_core::{ParamError, TimeConversion};
    ///
    /// assert_eq!(
    ///     TimeConversion::new_short(1, 0, 0, 0, 0x0ff0),
    ///     Err(ParamError::InvalidMask(0x0ff0))
    /// );
    /// assert!(TimeConversion::new_short(1, 0, 0, 0, (1 << 56) - 1)?.is_short());
    /// # Ok::<(), ParamError>(())
    /// ```
    #[inline]
    pub const fn new_short(
        mult: u32,
        shift: u16,
        zero: u64,
        cycles: u64,
        mask: u64,
    ) -> Result<Self, ParamError> {
        if mask == 0 || mask & mask.wrapping_add(1) != 0 {
            return Err(ParamError::InvalidMask(mask));
        }
        match Self::new(mult, shift, zero) {
            Ok(full) => Ok(TimeConversion {
                cycles,
                mask,
                short: true,
                ..full
            }),
            Err(error) => Err(error),
        }
    }

    /// `time_mult`.
    pub const fn mult(&self) -> u32 {
        self.mult
    }

    /// `time_shift`.
    pub const fn shift(&self) -> u16 {
        self.shift
    }

    /// `time_zero`.
    pub const fn zero(&self) -> u64 {
        self.zero
    }

    /// `time_cycles` (0 unless [`TimeConversion::is_short`]).
    pub const fn cycles(&self) -> u64 {
        self.cycles
    }

    /// `time_mask` (`u64::MAX` unless [`TimeConversion::is_short`]).
    pub const fn mask(&self) -> u64 {
        self.mask
    }

    /// Whether the counter is narrow (`cap_user_time_short`).
    pub const fn is_short(&self) -> bool {
        self.short
    }

    /// Perf-domain nanoseconds at counter value `cycles`.
    #[inline]
    pub const fn cycles_to_ns(&self, cycles: u64) -> u64 {
        let cycles = if self.short {
            self.cycles
                .wrapping_add(cycles.wrapping_sub(self.cycles) & self.mask)
        } else {
            cycles
        };
        // `& 63` changes nothing (`new` refuses larger shifts) but tells the compiler the shift
        // is below 64, so the 128-bit shift compiles to one `shrd`.
        let scaled = ((cycles as u128 * self.mult as u128) >> (self.shift & 63)) as u64;
        self.zero.wrapping_add(scaled)
    }

    /// The counter value at perf-domain time `ns`, by the kernel's documented inverse:
    /// ```text
    /// time = timestamp - time_zero;
    /// quot = time / time_mult;
    /// rem  = time % time_mult;
    /// cyc  = (quot << time_shift) + (rem << time_shift) / time_mult;
    /// ```
    /// It rounds down to the counter value at or just before `ns`:
    /// `cycles_to_ns(c) <= ns <= cycles_to_ns(c + 1)` for `c = ns_to_cycles(ns)`, so it is at most
    /// `ceil(2^shift / mult)` cycles below any counter value that converts to `ns`.
    #[inline]
    pub const fn ns_to_cycles(&self, ns: u64) -> u64 {
        let time = ns.wrapping_sub(self.zero) as u128;
        ((time << self.shift) / self.mult as u128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The kernel's formula as written, in `u128`, for shifts of at most 32.
    fn reference(conv: &TimeConversion, cycles: u64) -> u64 {
        let cycles = if conv.short {
            conv.cycles
                .wrapping_add(cycles.wrapping_sub(conv.cycles) & conv.mask)
        } else {
            cycles
        };
        let quot = (cycles >> conv.shift) as u128;
        let rem = (cycles & ((1u64 << conv.shift) - 1)) as u128;
        let ns = conv.zero as u128
            + quot * conv.mult as u128
            + ((rem * conv.mult as u128) >> conv.shift);
        ns as u64
    }

    #[test]
    fn rejects_parameters_no_kernel_publishes() {
        assert_eq!(
            TimeConversion::new(0, 10, 0),
            Err(ParamError::ZeroMultiplier)
        );
        assert_eq!(
            TimeConversion::new(1, 64, 0),
            Err(ParamError::ShiftTooLarge(64))
        );
        assert_eq!(
            TimeConversion::new_short(1, 1, 0, 0, 0),
            Err(ParamError::InvalidMask(0))
        );
        assert_eq!(
            TimeConversion::new_short(1, 1, 0, 0, 0b1011),
            Err(ParamError::InvalidMask(0b1011))
        );
        assert!(TimeConversion::new(1, 63, 0).is_ok());
        assert!(TimeConversion::new_short(1, 1, 0, 0, u64::MAX).is_ok());
    }

    #[test]
    fn debian_guest_parameters_convert_as_the_kernel_does() {
        // x86_64 TCG guest: time_mult 827183298, time_shift 31 (about 0.385 ns per cycle).
        let x86 = TimeConversion::new(827_183_298, 31, 1_000).unwrap();
        assert_eq!(x86.cycles_to_ns(0), 1_000);
        assert_eq!(x86.cycles_to_ns(1 << 31), 1_000 + 827_183_298);
        // arm64 virt: 62.5 MHz is exactly 16 ns per tick (33554432 / 2^21).
        let arm = TimeConversion::new_short(33_554_432, 21, 5, 100, (1 << 57) - 1).unwrap();
        assert_eq!(arm.cycles_to_ns(100), 5 + 1_600);
        assert_eq!(arm.cycles_to_ns(101), 5 + 1_616);
    }

    #[test]
    fn short_counter_wraps_relative_to_time_cycles() {
        // An 8-bit counter anchored at 250: raw 4 is 10 ticks later, not 246 earlier.
        let conv = TimeConversion::new_short(1 << 10, 10, 0, 250, 0xff).unwrap();
        assert_eq!(conv.cycles_to_ns(4), 260);
        assert_eq!(conv.cycles_to_ns(250), 250);
        assert_eq!(conv.cycles_to_ns(249), 249 + 256);
    }

    fn full_width() -> impl Strategy<Value = TimeConversion> {
        (1u32.., 0u16..=32, any::<u64>())
            .prop_map(|(mult, shift, zero)| TimeConversion::new(mult, shift, zero).unwrap())
    }

    fn narrow() -> impl Strategy<Value = TimeConversion> {
        (1u32.., 0u16..=32, any::<u64>(), any::<u64>(), 1u32..=64).prop_map(
            |(mult, shift, zero, cycles, bits)| {
                let mask = if bits == 64 {
                    u64::MAX
                } else {
                    (1u64 << bits) - 1
                };
                TimeConversion::new_short(mult, shift, zero, cycles, mask).unwrap()
            },
        )
    }

    proptest! {
        #[test]
        fn cycles_to_ns_equals_the_kernel_formula(conv in full_width(), cycles in any::<u64>()) {
            prop_assert_eq!(conv.cycles_to_ns(cycles), reference(&conv, cycles));
        }

        #[test]
        fn short_cycles_to_ns_equals_the_kernel_formula(conv in narrow(), cycles in any::<u64>()) {
            prop_assert_eq!(conv.cycles_to_ns(cycles), reference(&conv, cycles));
        }

        #[test]
        fn ns_to_cycles_inverts_within_one_counter_step(
            conv in full_width(),
            cycles in any::<u64>(),
        ) {
            // Keep the product below 2^64 ns so that nothing wraps.
            let limit = ((u64::MAX as u128) << conv.shift) / conv.mult as u128;
            let cycles = (cycles as u128 % limit.min(u64::MAX as u128)) as u64;
            let conv = TimeConversion::new(conv.mult, conv.shift, 0).unwrap();
            let ns = conv.cycles_to_ns(cycles);
            let back = conv.ns_to_cycles(ns);
            prop_assert!(back <= cycles);
            let step = (1u128 << conv.shift).div_ceil(conv.mult as u128);
            prop_assert!((cycles - back) as u128 <= step);
            prop_assert!(conv.cycles_to_ns(back) <= ns);
            prop_assert!(ns <= conv.cycles_to_ns(back + 1));
        }

        #[test]
        fn conversion_is_monotonic(conv in full_width(), a in any::<u64>(), b in any::<u64>()) {
            let limit = ((u64::MAX as u128) << conv.shift) / conv.mult as u128;
            let limit = limit.min(u64::MAX as u128) as u64;
            let conv = TimeConversion::new(conv.mult, conv.shift, 0).unwrap();
            let (lo, hi) = (a.min(b) % limit, a.max(b) % limit);
            let (lo, hi) = (lo.min(hi), lo.max(hi));
            prop_assert!(conv.cycles_to_ns(lo) <= conv.cycles_to_ns(hi));
        }

        #[test]
        fn short_conversion_is_monotonic_across_a_wrap(
            conv in narrow(),
            step_a in any::<u64>(),
            step_b in any::<u64>(),
        ) {
            // Within one period after time_cycles, later counts never convert earlier, even where
            // the raw counter wraps past the mask.
            let limit = ((u64::MAX as u128) << conv.shift) / conv.mult as u128;
            // Below 2^63 as well, so that anchor + step cannot overflow the unwrapped counter.
            let half = (limit / 2).min(1u128 << 63) as u64;
            prop_assume!(half > 0);
            let anchor = (conv.cycles & conv.mask) % half;
            let (a, b) = ((step_a & conv.mask) % half, (step_b & conv.mask) % half);
            let (a, b) = (a.min(b), a.max(b));
            let anchored =
                TimeConversion::new_short(conv.mult, conv.shift, 0, anchor, conv.mask).unwrap();
            let raw_a = anchor.wrapping_add(a) & conv.mask;
            let raw_b = anchor.wrapping_add(b) & conv.mask;
            prop_assert!(anchored.cycles_to_ns(raw_a) <= anchored.cycles_to_ns(raw_b));
        }
    }
}
