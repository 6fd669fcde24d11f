//! The clock snapshots a recording takes at its start, at its end and about every second in
//! between: the anchors of OUT's HEADER_CLOCK_DATA and the `CLOCK_MONOTONIC` pairings that
//! convert other writers' jitdumps, and the check that wall-clock time was not stepped meanwhile.

use std::time::Duration;

use super::NAME;
use crate::output::{chain, errln};

/// The clock snapshots taken at the start and at the end of the recording: the anchors of
/// HEADER_CLOCK_DATA, which the perf.data library adds to OUT.
pub(super) struct ClockAnchors {
    pub(super) start: Option<perfclock::ClockSnapshot>,
    pub(super) end: Option<perfclock::ClockSnapshot>,
    /// Every snapshot, start and end included, one about every [`PAIRING_INTERVAL`]: the
    /// `CLOCK_MONOTONIC` pairings of other writers' jitdumps (`perfclock_inject::Pairings`).
    pub(super) pairings: Vec<perfclock::ClockSnapshot>,
}

/// How often `record` pairs `CLOCK_MONOTONIC` with the perf clock while perf records (each
/// pairing a few microseconds of clock reads): between two, a converted stamp is off by at most
/// twice `perfclock_inject::MAX_RATE_PPM` over half the interval, and in practice by the rate's change
/// over it (docs/measurements.md).
pub(super) const PAIRING_INTERVAL: Duration = Duration::from_secs(1);

pub(super) fn take_snapshot(when: &str) -> Option<perfclock::ClockSnapshot> {
    match perfclock::snapshot() {
        Ok(snapshot) => Some(snapshot),
        Err(error) => {
            errln!(
                "{NAME}: warning: no clock snapshot at the {when}: {}",
                chain(&error)
            );
            None
        }
    }
}

impl ClockAnchors {
    /// Says how wall-clock time relates to the samples' timestamps, and whether it moved.
    pub(super) fn report(&self) {
        let (Some(start), Some(end)) = (&self.start, &self.end) else {
            return;
        };
        let moved = end.realtime.offset_ns - start.realtime.offset_ns;
        let allowed = start.realtime.uncertainty_ns + end.realtime.uncertainty_ns;
        errln!(
            "{NAME}: wall clock = sample time + {} ns (± {} ns) at the start, + {} ns (± {} ns) \
             at the end: moved {moved} ns",
            start.realtime.offset_ns,
            start.realtime.uncertainty_ns,
            end.realtime.offset_ns,
            end.realtime.uncertainty_ns
        );
        // NTP slews by at most 500 ppm; more than that plus the uncertainty is a step.
        let elapsed = end.perf_ns.saturating_sub(start.perf_ns);
        if moved.unsigned_abs() > allowed + elapsed / 2000 {
            errln!(
                "{NAME}: warning: CLOCK_REALTIME was stepped during the recording (moved \
                 {moved} ns against the perf clock): wall-clock times of the samples are off by \
                 up to that much"
            );
        }
    }
}
