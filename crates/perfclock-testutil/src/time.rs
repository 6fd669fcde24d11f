//! The system clocks tests read next to the perf clock.
//!
//! # Safety
//! One `clock_gettime` into a timespec owned by the caller.
#![allow(unsafe_code)]

/// `CLOCK_MONOTONIC` in ns (0 if the call failed, which Linux does not do for this clock).
/// Inlined, so a timing loop (the read benchmark) measures the vDSO call, not a call to this
/// function.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only the timespec we pass (glibc serves it from the vDSO).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
