//! How far `CLOCK_MONOTONIC` is from a perf-domain clock (for the doctor).

use perfclock_core::ReadError;
use perfclock_os::time::{self, ClockId};

use crate::PerfTimeSource;

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
        let mono = time::clock_gettime_ns(ClockId::Monotonic);
        let after = clock.now_ns()?;
        let Ok(mono) = mono else { continue };
        if after < before {
            continue;
        }
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
