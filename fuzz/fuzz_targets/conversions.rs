//! The conversions against u128 references, from arbitrary parameters: validation follows the
//! documented rules; `cycles_to_ns` equals the kernel formula computed in u128 (truncated as the
//! kernel's u64 sums wrap) for every shift, and the kernel's literal u64 code for shifts up to 32;
//! `ns_to_cycles` equals the documented inverse in u128, and the kernel's u64 code for shifts up
//! to 32; where nothing wraps, the inverse lands within one counter step below.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_core::{ParamError, TimeConversion};

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    for (i, byte) in word.iter_mut().enumerate() {
        *byte = bytes.get(offset + i).copied().unwrap_or(0);
    }
    u64::from_le_bytes(word)
}

/// `include/uapi/linux/perf_event.h`, as C would run it on u64 (shift <= 32 so nothing in
/// `rem * time_mult` overflows).
fn kernel_cycles_to_ns(mult: u32, shift: u16, zero: u64, cycles: u64) -> u64 {
    let quot = cycles >> shift;
    let rem = cycles & ((1u64 << shift) - 1);
    zero.wrapping_add(quot.wrapping_mul(u64::from(mult)))
        .wrapping_add((rem * u64::from(mult)) >> shift)
}

fn kernel_ns_to_cycles(mult: u32, shift: u16, zero: u64, ns: u64) -> u64 {
    let time = ns.wrapping_sub(zero);
    let quot = time / u64::from(mult);
    let rem = time % u64::from(mult);
    (quot << shift).wrapping_add((rem << shift) / u64::from(mult))
}

fuzz_target!(|data: &[u8]| {
    let mult = u64_at(data, 0) as u32;
    let shift = (u64_at(data, 4) as u16) % 80; // mostly valid, some too large
    let zero = u64_at(data, 6);
    let anchor = u64_at(data, 14);
    let mask_bits = u64_at(data, 22) as u8;
    let short = mask_bits & 0x80 != 0;
    let mask = match mask_bits & 0x7f {
        0 => 0,
        bits @ 1..=63 => (1u64 << bits) - 1,
        64 => u64::MAX,
        _ => u64_at(data, 23), // arbitrary, usually not a run of low bits
    };
    let cycles = u64_at(data, 31);
    let ns = u64_at(data, 39);

    let made = if short {
        TimeConversion::new_short(mult, shift, zero, anchor, mask)
    } else {
        TimeConversion::new(mult, shift, zero)
    };
    let mask_ok = mask != 0 && mask & mask.wrapping_add(1) == 0;
    let expected_error = if short && !mask_ok {
        Some(ParamError::InvalidMask(mask))
    } else if mult == 0 {
        Some(ParamError::ZeroMultiplier)
    } else if shift > 63 {
        Some(ParamError::ShiftTooLarge(shift))
    } else {
        None
    };
    let conversion = match (made, expected_error) {
        (Err(error), Some(expected)) => {
            assert_eq!(error, expected);
            return;
        }
        (Ok(conversion), None) => conversion,
        (made, expected) => panic!("validation {made:?}, rules say {expected:?}"),
    };

    // cycles_to_ns against the u128 reference.
    let effective = if short {
        anchor.wrapping_add(cycles.wrapping_sub(anchor) & mask)
    } else {
        cycles
    };
    let scaled = (u128::from(effective) * u128::from(mult)) >> shift;
    let reference = (u128::from(zero) + scaled) as u64;
    assert_eq!(conversion.cycles_to_ns(cycles), reference);
    if shift <= 32 {
        assert_eq!(
            conversion.cycles_to_ns(cycles),
            kernel_cycles_to_ns(mult, shift, zero, effective)
        );
    }

    // ns_to_cycles against the u128 reference of the documented inverse.
    let time = u128::from(ns.wrapping_sub(zero));
    let inverse = ((time << shift) / u128::from(mult)) as u64;
    assert_eq!(conversion.ns_to_cycles(ns), inverse);
    if shift <= 32 {
        assert_eq!(inverse, kernel_ns_to_cycles(mult, shift, zero, ns));
    }

    // Round trip where the product fits (full-width counters): floor, within one step.
    if !short && scaled <= u128::from(u64::MAX) {
        let stamped = conversion.cycles_to_ns(cycles);
        let back = conversion.ns_to_cycles(stamped);
        assert!(back <= cycles, "{back} > {cycles}");
        let step = (1u128 << shift).div_ceil(u128::from(mult));
        assert!(u128::from(cycles - back) <= step, "{back} vs {cycles}");
        assert!(conversion.cycles_to_ns(back) <= stamped || stamped < zero);
    }
});
