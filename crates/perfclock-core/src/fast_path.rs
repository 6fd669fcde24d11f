//! The fast path's conversion: the kernel's formula for the fields one seqlock section read,
//! with the checks a correct conversion needs and nothing more (see [`crate::PageReader::now_ns`]).

use crate::page_fields::unpack_scale;

/// The conversion of the fast path, from fields one seqlock section read (with
/// `cap_user_time_zero` set): `None` unless they form a conversion [`RawTimeFields::conversion`]
/// accepts (the same checks, so a declined read gets its typed error from the slow path).
/// `cycles` is already widened if short.
#[inline(always)]
pub(crate) fn fast_ns(scale: u64, time_zero: u64, cycles: u64) -> Option<u64> {
    let (time_shift, time_mult) = unpack_scale(scale);
    if time_mult == 0 {
        return None;
    }
    let mult = u64::from(time_mult);
    let scaled = if time_shift == 31 {
        // The shift an x86 kernel publishes for any TSC above 0.5 GHz (it lowers 32 to 31 for
        // the page's sake) and the calibrated writer's: constant shifts of the counter's 32-bit
        // halves, cheaper than the 128-bit product and its variable-count `shrd`.
        scaled_by_halves::<31>(cycles, mult)
    } else if time_shift <= 63 {
        // `& 63` changes nothing (this branch's condition) but tells the compiler the shift is
        // below 64, so the 128-bit shift is one `shrd` (as `TimeConversion::cycles_to_ns` does).
        ((u128::from(cycles) * u128::from(mult)) >> (time_shift & 63)) as u64
    } else {
        return None;
    };
    Some(time_zero.wrapping_add(scaled))
}

/// `(cycles * mult) >> SHIFT` modulo 2^64, for `mult < 2^32` and `SHIFT <= 32`, from the
/// counter's halves: `cycles * mult = high * mult * 2^32 + low * mult`, and `2^SHIFT` divides the
/// first term, so the quotient is `high * mult * 2^(32 - SHIFT) + (low * mult >> SHIFT)` exactly
/// (each product fits 64 bits). This is the uapi header's quot/rem form with a constant shift.
#[inline(always)]
fn scaled_by_halves<const SHIFT: u32>(cycles: u64, mult: u64) -> u64 {
    const { assert!(SHIFT <= 32) };
    let (high, low) = (cycles >> 32, cycles & 0xffff_ffff);
    ((high * mult) << (32 - SHIFT)).wrapping_add((low * mult) >> SHIFT)
}

/// `2^k - 1` with `k >= 1`, as [`TimeConversion::new_short`] requires of `time_mask`.
#[inline(always)]
pub(crate) const fn is_low_bits_mask(mask: u64) -> bool {
    mask != 0 && mask & mask.wrapping_add(1) == 0
}
