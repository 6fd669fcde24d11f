//! aarch64: the generic timer's virtual count, `CNTVCT_EL0`.

use core::arch::asm;

pub const COUNTER_NAME: &str = "cntvct_el0";
pub const SUPPORTED: bool = true;

#[inline(always)]
pub fn read() -> Option<u64> {
    read_ordered()
}

/// The `isb` keeps the read from being speculated ahead of earlier instructions, as the kernel's
/// `__arch_counter_get_cntvct` does; without it the counter may be read early, so both reads
/// are the ordered one.
#[inline(always)]
pub fn read_ordered() -> Option<u64> {
    let count: u64;
    // SAFETY: Linux lets EL0 read CNTVCT_EL0 (CNTKCTL_EL1.EL0VCTEN is set for the vDSO); `isb`
    // and `mrs` touch no memory and clobber only the output register.
    unsafe {
        asm!("isb", "mrs {count}, cntvct_el0", count = out(reg) count, options(nomem, nostack, preserves_flags));
    }
    Some(count)
}
