//! `CLOCK_MONOTONIC`/perf-clock pairings taken during (or after) a recording: how another
//! writer's `CLOCK_MONOTONIC` jitdump stamps become perf-clock times, with a bound.

use perfclock::ClockSnapshot;

/// The most a timekeeping clock's rate may differ from the perf clock's: NTP's frequency
/// adjustment is at most 500 ppm (`MAXFREQ` in the kernel's `timex.h`); the tick adjustment
/// adds up to another 500 ppm (`MAXPHASE` slewed at `MAXFREQ`). Moving a pairing by `d` ns of
/// the perf clock moves `CLOCK_MONOTONIC - perf` by at most `d / 1000`.
pub const MAX_RATE_PPM: u64 = 1000;

/// `CLOCK_MONOTONIC`/perf-clock pairings taken during (or after) the recording, in time order.
#[derive(Debug, Clone, Default)]
pub struct Pairings {
    /// (`CLOCK_MONOTONIC` ns, `CLOCK_MONOTONIC - perf` ns, the pairing's uncertainty ns).
    points: Vec<(u64, i64, u64)>,
}

impl Pairings {
    /// The monotonic pairings of `snapshots`, in time order.
    pub fn of(snapshots: &[ClockSnapshot]) -> Self {
        let mut points: Vec<(u64, i64, u64)> = snapshots
            .iter()
            .map(|s| {
                (
                    s.monotonic.ns,
                    s.monotonic.offset_ns,
                    s.monotonic.uncertainty_ns,
                )
            })
            .collect();
        points.sort_unstable_by_key(|point| point.0);
        points.dedup_by_key(|point| point.0);
        Pairings { points }
    }

    /// The latest `CLOCK_MONOTONIC` reading paired.
    pub fn latest(&self) -> Option<u64> {
        self.points.last().map(|point| point.0)
    }

    /// The perf-clock time of `CLOCK_MONOTONIC` reading `mono`, and a bound on its error:
    /// between two pairings the offset is interpolated (the true offset and the line both move
    /// at most [`MAX_RATE_PPM`] away from the nearer pairing: the bound is the larger
    /// uncertainty plus twice that over the distance); outside them the nearest one's offset is
    /// used (its uncertainty plus [`MAX_RATE_PPM`] over the distance).
    pub fn perf_ns(&self, mono: u64) -> Option<(u64, u64)> {
        let after = self.points.partition_point(|point| point.0 <= mono);
        let (offset, uncertainty, distance) = match (
            after.checked_sub(1).map(|i| self.points[i]),
            self.points.get(after).copied(),
        ) {
            (Some(at), _) if at.0 == mono => (at.1, at.2, 0),
            (Some(before), Some(next)) => {
                let span = i128::from(next.0 - before.0);
                let into = i128::from(mono - before.0);
                let step = i128::from(next.1) - i128::from(before.1);
                let offset = i128::from(before.1) + step * into / span;
                let distance = (mono - before.0).min(next.0 - mono);
                (
                    offset as i64,
                    before.2.max(next.2),
                    distance.saturating_mul(2),
                )
            }
            (Some(only), None) | (None, Some(only)) => (only.1, only.2, mono.abs_diff(only.0)),
            (None, None) => return None,
        };
        let perf = i128::from(mono) - i128::from(offset);
        let perf = u64::try_from(perf).ok()?;
        let drift = distance / (1_000_000 / MAX_RATE_PPM);
        Some((perf, uncertainty.saturating_add(drift)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairings(points: &[(u64, i64, u64)]) -> Pairings {
        Pairings {
            points: points.to_vec(),
        }
    }

    #[test]
    fn pairings_interpolate_inside_and_hold_the_nearest_offset_outside() {
        let p = pairings(&[
            (1_000_000_000, -1_500_000, 20),
            (2_000_000_000, -1_500_100, 30),
        ]);
        // At a pairing: its offset, its uncertainty.
        assert_eq!(p.perf_ns(1_000_000_000), Some((1_001_500_000, 20)));
        // Halfway: half the step; the larger uncertainty plus the rate allowance over 0.5 s.
        assert_eq!(
            p.perf_ns(1_500_000_000),
            Some((1_501_500_050, 30 + 1_000_000))
        );
        // Before the first: its offset, the allowance over the distance.
        assert_eq!(p.perf_ns(999_000_000), Some((1_000_500_000, 20 + 1_000)));
        assert_eq!(pairings(&[]).perf_ns(5), None);
        // A perf time before 0 is none.
        assert_eq!(pairings(&[(10, 20, 0)]).perf_ns(10), None);
    }
}
