//! x86_64: the time stamp counter.
//!
//! # Safety
//! The counter read is an instruction with no memory effects, allowed at EL0/ring 3 on Linux.
#![allow(unsafe_code)]

use core::arch::x86_64::{_mm_lfence, _rdtsc};

/// The counter's name, for diagnostics.
pub const COUNTER_NAME: &str = "tsc";
/// Whether this architecture has a supported counter.
pub const SUPPORTED: bool = true;

/// See `counter::read_counter`.
#[inline(always)]
pub(super) fn read() -> Option<u64> {
    // SAFETY: `rdtsc` exists on every x86_64 CPU and has no memory effects. (A kernel can make it
    // fault with CR4.TSD, as seccomp strict mode does; no perf-clock reader can work there.)
    Some(unsafe { _rdtsc() })
}

/// See `counter::read_counter_ordered`.
#[inline(always)]
pub(super) fn read_ordered() -> Option<u64> {
    // SAFETY: `lfence` is part of SSE2, which every x86_64 CPU has; it waits for earlier
    // instructions to complete so `rdtsc` cannot run ahead of them. `rdtsc` as in `read`.
    Some(unsafe {
        _mm_lfence();
        _rdtsc()
    })
}
