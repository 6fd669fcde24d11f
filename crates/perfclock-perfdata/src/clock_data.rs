//! `HEADER_CLOCK_DATA`: one instant read on the wall clock and on the samples' clock, from
//! which `perf script -F+tod` and `perf data convert --tod` print wall-clock time:
//! `tod_ns + (sample_time - clockid_ns)` (perf's `tod_scnprintf`). perf writes it only with
//! `-k`; for a default recording the pair comes from a perf-clock snapshot.
//!
//! Layout (`write_clock_data`/`process_clock_data` in perf's `tools/perf/util/header.c`):
//! version u32 (1), clockid u32, wall-clock ns u64, the clock's ns u64, little-endian.

use crate::section::{u32_at, u64_at};

/// The `clockid` this crate writes for the perf clock (`local_clock()`), which has no
/// `clockid_t`: perf only prints it (as unknown) and computes with the two times.
pub const PERF_CLOCK_CLOCKID: u32 = u32::MAX;

/// A `HEADER_CLOCK_DATA` section's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockData {
    /// The samples' clock (`PERF_CLOCK_CLOCKID` for the default perf clock).
    pub clockid: u32,
    /// `CLOCK_REALTIME` at the reference instant, ns since the Unix epoch.
    pub wall_clock_ns: u64,
    /// The samples' clock at the same instant, ns.
    pub clockid_time_ns: u64,
}

impl ClockData {
    /// The only version perf reads.
    pub const VERSION: u32 = 1;
    /// The section's size.
    pub const SIZE: usize = 24;

    /// The pair for a default (perf clock) recording: `wall_clock_ns` and `perf_ns` read at
    /// one instant (for example `ClockSnapshot::realtime.ns` and `ClockSnapshot::perf_ns`).
    pub fn perf_clock(wall_clock_ns: u64, perf_ns: u64) -> Self {
        Self {
            clockid: PERF_CLOCK_CLOCKID,
            wall_clock_ns,
            clockid_time_ns: perf_ns,
        }
    }

    /// The section's bytes.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut out = [0; Self::SIZE];
        out[0..4].copy_from_slice(&Self::VERSION.to_le_bytes());
        out[4..8].copy_from_slice(&self.clockid.to_le_bytes());
        out[8..16].copy_from_slice(&self.wall_clock_ns.to_le_bytes());
        out[16..24].copy_from_slice(&self.clockid_time_ns.to_le_bytes());
        out
    }

    /// Parses a section as perf does: at least 24 bytes, version 1; `None` otherwise.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < Self::SIZE || u32_at(bytes, 0) != Self::VERSION {
            return None;
        }
        Some(Self {
            clockid: u32_at(bytes, 4),
            wall_clock_ns: u64_at(bytes, 8),
            clockid_time_ns: u64_at(bytes, 16),
        })
    }

    /// The wall-clock time perf prints for a sample stamped `sample_ns`, as perf computes it.
    pub fn wall_clock_of(&self, sample_ns: u64) -> u64 {
        if sample_ns > self.clockid_time_ns {
            self.wall_clock_ns
                .wrapping_add(sample_ns - self.clockid_time_ns)
        } else {
            self.wall_clock_ns
                .wrapping_sub(self.clockid_time_ns - sample_ns)
        }
    }
}

/// NTP slews CLOCK_REALTIME by at most 500 ppm against a free-running clock.
pub const MAX_REALTIME_SLEW_PPM: u64 = 500;

/// CLOCK_REALTIME and the perf clock read at one instant (for example from a
/// `perfclock::ClockSnapshot`: `realtime.ns`, `perf_ns`, `realtime.uncertainty_ns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClockPair {
    /// The perf clock, ns.
    pub perf_ns: u64,
    /// CLOCK_REALTIME, ns since the Unix epoch.
    pub wall_ns: u64,
    /// Bound on the pairing's error, ns.
    pub uncertainty_ns: u64,
}

impl WallClockPair {
    /// How far CLOCK_REALTIME moved against the perf clock from `earlier` to `self` beyond
    /// what slew ([`MAX_REALTIME_SLEW_PPM`] of the time between) and the two uncertainties
    /// allow: `Some(ns)` (negative: stepped back) when it was stepped, `None` when not. A
    /// recorder takes one pair at the start and one at the end and refuses or warns on `Some`.
    pub fn step_since(&self, earlier: &WallClockPair) -> Option<i64> {
        let offset = |pair: &WallClockPair| i128::from(pair.wall_ns) - i128::from(pair.perf_ns);
        let moved = offset(self) - offset(earlier);
        let elapsed = self.perf_ns.abs_diff(earlier.perf_ns);
        let allowed = i128::from(elapsed / 1_000_000 * MAX_REALTIME_SLEW_PPM)
            + i128::from(self.uncertainty_ns)
            + i128::from(earlier.uncertainty_ns);
        (moved.abs() > allowed).then(|| moved.clamp(i64::MIN.into(), i64::MAX.into()) as i64)
    }

    /// The CLOCK_DATA of this pair.
    pub fn clock_data(&self) -> ClockData {
        ClockData::perf_clock(self.wall_ns, self.perf_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_in_perfs_layout() {
        let data = ClockData::perf_clock(1_700_000_000_123_456_789, 42_000_000_000);
        let bytes = data.to_bytes();
        assert_eq!(&bytes[0..4], &1u32.to_le_bytes());
        assert_eq!(&bytes[4..8], &[0xff; 4]);
        assert_eq!(&bytes[8..16], &1_700_000_000_123_456_789u64.to_le_bytes());
        assert_eq!(&bytes[16..24], &42_000_000_000u64.to_le_bytes());
        assert_eq!(ClockData::parse(&bytes), Some(data));
        assert_eq!(ClockData::parse(&bytes[..23]), None);
        let mut version_two = bytes;
        version_two[0] = 2;
        assert_eq!(ClockData::parse(&version_two), None);
        assert_eq!(
            data.wall_clock_of(43_000_000_000),
            1_700_000_001_123_456_789
        );
        assert_eq!(
            data.wall_clock_of(41_999_999_999),
            1_700_000_000_123_456_788
        );
    }

    #[test]
    fn a_step_is_what_slew_and_uncertainty_cannot_explain() {
        let start = WallClockPair {
            perf_ns: 10_000_000_000,
            wall_ns: 1_700_000_000_000_000_000,
            uncertainty_ns: 1_000,
        };
        let after = |seconds: u64, moved_ns: i64| WallClockPair {
            perf_ns: start.perf_ns + seconds * 1_000_000_000,
            wall_ns: (start.wall_ns + seconds * 1_000_000_000).wrapping_add_signed(moved_ns),
            uncertainty_ns: 1_000,
        };
        // 10 s allow 5 ms of slew plus 2 us of uncertainty.
        assert_eq!(after(10, 5_002_000).step_since(&start), None);
        assert_eq!(after(10, -5_002_000).step_since(&start), None);
        assert_eq!(after(10, 5_002_001).step_since(&start), Some(5_002_001));
        assert_eq!(
            after(10, -1_000_000_000).step_since(&start),
            Some(-1_000_000_000)
        );
        assert_eq!(after(0, 2_001).step_since(&start), Some(2_001));
        assert_eq!(after(1, 0).clock_data().clockid_time_ns, 11_000_000_000);
    }
}
