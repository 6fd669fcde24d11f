//! The clock a marker file is written in, and the conversion of the perf-clock times callers
//! pass into it.
//!
//! samply converts a marker file's times with the converter of the recording's samples, with no
//! clock check: a default `perf record` (read by `samply import`) stamps the perf clock, `samply
//! record` stamps `CLOCK_MONOTONIC`. Callers keep passing perf-clock ns ([`perfclock::now_ns`]);
//! a [`MarkerClock::Monotonic`] writer adds the offset `CLOCK_MONOTONIC - perf clock` of a pairing
//! ([`perfclock::ClockSnapshot`]) taken at most [`PAIRING_MAX_AGE_NS`] before the marker call.
//! A converted time is off by at most the pairing's `monotonic.uncertainty_ns` (half the
//! narrowest `clock_gettime` bracket, plus the perf clock's error bound) plus 500 ppm (NTP's
//! largest slew) of its distance from the pairing: at most 5 us for a marker ending at its call,
//! more for the start of a long span.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use perfclock::ClockSnapshot;
use perfclock_process_files::{ClockName, UnknownClock};

/// The clock of a marker file's times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MarkerClock {
    /// perf-clock ns, as given: `samply import` of a default `perf record`.
    #[default]
    Perf,
    /// `CLOCK_MONOTONIC` ns, converted from the perf-clock ns given: `samply record`.
    Monotonic,
}

impl ClockName for MarkerClock {
    const ALL: &'static [MarkerClock] = &[MarkerClock::Perf, MarkerClock::Monotonic];
    const KIND: &'static str = "marker clock";
    const CHOICES: &'static str =
        "perf (samply import of a default perf record) or monotonic (samply record)";
    const VARIABLE: &'static str = "PERFCLOCK_MARKERS_CLOCK";

    fn as_str(self) -> &'static str {
        match self {
            MarkerClock::Perf => "perf",
            MarkerClock::Monotonic => "monotonic",
        }
    }
}

impl fmt::Display for MarkerClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MarkerClock {
    type Err = UnknownClock;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        MarkerClock::from_name(name)
    }
}

/// A pairing older than this (in perf-clock ns, at the marker call) is taken again: a few
/// microseconds per 10 ms of marking, and at most 5 us of drift at NTP's largest slew.
pub const PAIRING_MAX_AGE_NS: u64 = 10_000_000;

/// The process's latest pairing: the perf instant (0 before the first) and the offset. The two
/// are stored separately: a reader that sees one pairing's instant with the next one's offset
/// uses an offset at most [`PAIRING_MAX_AGE_NS`] old, which the bound allows.
static PAIRED_AT: AtomicU64 = AtomicU64::new(0);
static OFFSET_NS: AtomicI64 = AtomicI64::new(0);

/// `(start_ns, end_ns)` in perf-clock ns, as `CLOCK_MONOTONIC` ns; `None` without a perf clock
/// or a pairing. Allocates nothing and takes no lock (a pairing is counter reads and vDSO
/// `clock_gettime`): callable from a signal handler.
pub(crate) fn to_monotonic(start_ns: u64, end_ns: u64) -> Option<(u64, u64)> {
    let clock = perfclock::global()?;
    let now = clock.now_ns().unwrap_or(end_ns);
    // ATOMICS: Acquire pairs with the Release below: the offset read is at least as new as the
    // instant read.
    let at = PAIRED_AT.load(Ordering::Acquire);
    if at == 0 || now.abs_diff(at) > PAIRING_MAX_AGE_NS {
        let snapshot = ClockSnapshot::take(clock).ok()?;
        OFFSET_NS.store(snapshot.monotonic.offset_ns, Ordering::Relaxed);
        PAIRED_AT.store(snapshot.perf_ns.max(1), Ordering::Release);
    }
    let offset = OFFSET_NS.load(Ordering::Relaxed);
    let shift =
        |ns: u64| u64::try_from((i128::from(ns) + i128::from(offset)).max(0)).unwrap_or(u64::MAX);
    Some((shift(start_ns), shift(end_ns)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!("perf".parse(), Ok(MarkerClock::Perf));
        assert_eq!("monotonic".parse(), Ok(MarkerClock::Monotonic));
        for bad in ["arch", "", "Perf"] {
            let error = bad.parse::<MarkerClock>().unwrap_err();
            assert_eq!(error, UnknownClock::new::<MarkerClock>(bad, None));
            assert!(error.to_string().contains("samply record"), "{error}");
        }
    }
}
