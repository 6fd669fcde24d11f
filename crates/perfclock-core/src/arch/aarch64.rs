//! aarch64: the generic timer's virtual count, `CNTVCT_EL0`.
//!
//! # Safety
//! The counter read is an instruction with no memory effects, allowed at EL0/ring 3 on Linux.
#![allow(unsafe_code)]

use core::arch::asm;

/// The counter's name, for diagnostics.
pub const COUNTER_NAME: &str = "cntvct_el0";
/// Whether this architecture has a supported counter.
pub const SUPPORTED: bool = true;

/// See `counter::read_counter`.
#[inline(always)]
pub(super) fn read() -> Option<u64> {
    read_ordered()
}

/// The `isb` keeps the read from being speculated ahead of earlier instructions, as the kernel's
/// `__arch_counter_get_cntvct` does; without it the counter may be read early, so both reads
/// are the ordered one.
#[inline(always)]
pub(super) fn read_ordered() -> Option<u64> {
    let count: u64;
    // SAFETY: Linux lets EL0 read CNTVCT_EL0 (CNTKCTL_EL1.EL0VCTEN is set for the vDSO); `isb`
    // and `mrs` touch no memory and clobber only the output register.
    unsafe {
        asm!("isb", "mrs {count}, cntvct_el0", count = out(reg) count, options(nomem, nostack, preserves_flags));
    }
    Some(count)
}
