//! How far `CLOCK_MONOTONIC` is from a perf-domain clock (for the doctor).

use perfclock_core::ReadError;

use crate::PerfTimeSource;

/// `CLOCK_MONOTONIC` in ns (0 if the call failed, which Linux does not do for this clock): the
/// read that the doctor times against the perf clock. Inlined, so a timing loop measures the vDSO
/// call, not a call to this function.
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

/// Brackets `clock, CLOCK_MONOTONIC, clock` taken; the narrowest wins.
const BRACKETS: usize = 64;

/// `CLOCK_MONOTONIC - clock`, as [`monotonic_offset`] measured it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonotonicOffset {
    /// `CLOCK_MONOTONIC - perf clock`, ns.
    pub offset_ns: i64,
    /// Half the narrowest `perf, monotonic, perf` bracket, ns (the clock's own error bound
    /// comes on top).
    pub uncertainty_ns: u64,
}

/// Measures `CLOCK_MONOTONIC - clock` with the narrowest of 64 brackets `clock, monotonic, clock`.
///
/// # Errors
/// The clock's [`ReadError`]; [`ReadError::Contended`] if no bracket could be taken.
pub fn monotonic_offset(clock: &impl PerfTimeSource) -> Result<MonotonicOffset, ReadError> {
    let mut best: Option<MonotonicOffset> = None;
    for _ in 0..BRACKETS {
        let before = clock.now_ns()?;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid out-pointer; clock_gettime has no other effects.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let after = clock.now_ns()?;
        if rc != 0 || after < before {
            continue;
        }
        let mono = i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec);
        let mid = (i128::from(before) + i128::from(after)) / 2;
        let candidate = MonotonicOffset {
            offset_ns: i64::try_from(mono - mid).unwrap_or(i64::MAX),
            uncertainty_ns: (after - before).div_ceil(2),
        };
        if best.is_none_or(|b| candidate.uncertainty_ns < b.uncertainty_ns) {
            best = Some(candidate);
        }
    }
    best.ok_or(ReadError::Contended)
}
