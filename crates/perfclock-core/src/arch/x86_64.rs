//! x86_64: the time stamp counter.
//!
//! # Safety
//! The counter read is an instruction with no memory effects, allowed at EL0/ring 3 on Linux.
#![allow(unsafe_code)]

use core::arch::asm;

/// The counter's name, for diagnostics.
pub const COUNTER_NAME: &str = "tsc";
/// Whether this architecture has a supported counter.
pub const SUPPORTED: bool = true;

/// See `counter::read_counter`.
#[inline(always)]
pub(super) fn read() -> Option<u64> {
    let (low, high): (u32, u32);
    // SAFETY: `rdtsc` exists on every x86_64 CPU and writes only eax and edx. (A kernel can make
    // it fault with CR4.TSD, as seccomp strict mode does; no perf-clock reader can work there.)
    // No `nomem`: the block stays a compiler barrier, so a seqlock read keeps it between its two
    // loads of the sequence, as the kernel's documented read does with `barrier()`.
    unsafe {
        asm!("rdtsc", out("eax") low, out("edx") high, options(nostack, preserves_flags));
    }
    Some(join(low, high))
}

/// See `counter::read_counter_ordered`.
#[inline(always)]
pub(super) fn read_ordered() -> Option<u64> {
    let (low, high): (u32, u32);
    // SAFETY: `lfence` is part of SSE2, which every x86_64 CPU has; it waits for earlier
    // instructions to complete so `rdtsc` cannot run ahead of them. `rdtsc` as in `read`.
    unsafe {
        asm!(
            "lfence",
            "rdtsc",
            out("eax") low,
            out("edx") high,
            options(nostack, preserves_flags),
        );
    }
    Some(join(low, high))
}

/// The 64-bit counter from `rdtsc`'s halves. Joined here rather than by the `_rdtsc` intrinsic
/// (which joins them only at code generation) so the optimiser sees the halves: the fast
/// conversion with `time_shift == 31` multiplies each half and never forms the 64-bit value.
#[inline(always)]
fn join(low: u32, high: u32) -> u64 {
    (u64::from(high) << 32) | u64::from(low)
}
