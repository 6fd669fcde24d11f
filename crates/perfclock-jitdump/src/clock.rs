//! Which clock a jitdump's timestamps are in: a choice, because the tools that read jitdumps
//! disagree (docs/jit.md has the table).

use std::fmt;
use std::str::FromStr;

use perfclock_process_files::{ClockName, UnknownClock};

/// The clock of a jitdump's timestamps (the header's and every record's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum JitClock {
    /// The raw counter (TSC, CNTVCT_EL0) with `JITDUMP_FLAGS_ARCH_TIMESTAMP`: `perf inject
    /// --jit` converts it with the recording's `PERF_RECORD_TIME_CONV` (added by `perfclock
    /// inject-time-conv` where perf wrote none). For `perf report` of a default `perf record`.
    #[default]
    Arch,
    /// perf-clock nanoseconds (the default `perf record`'s sample time), flags 0: `samply import`
    /// of a default `perf record` reads it directly, without `perf inject`.
    Perf,
    /// `CLOCK_MONOTONIC` nanoseconds, flags 0: for `samply record` (which stamps samples with
    /// `CLOCK_MONOTONIC`) and `perf record -k monotonic`, as every other JIT writes.
    Monotonic,
}

/// In the order of the C constants (`PERFCLOCK_CLOCK_ARCH` = 0, ...).
impl ClockName for JitClock {
    const ALL: &'static [JitClock] = &[JitClock::Arch, JitClock::Perf, JitClock::Monotonic];
    const KIND: &'static str = "jitdump clock";
    const CHOICES: &'static str = "arch (perf inject --jit of a default perf record), perf \
                                   (samply import of a default perf record) or monotonic \
                                   (samply record, perf record -k monotonic)";
    const VARIABLE: &'static str = "PERFCLOCK_JITDUMP_CLOCK";

    fn as_str(self) -> &'static str {
        match self {
            JitClock::Arch => "arch",
            JitClock::Perf => "perf",
            JitClock::Monotonic => "monotonic",
        }
    }
}

impl fmt::Display for JitClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JitClock {
    type Err = UnknownClock;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        JitClock::from_name(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_others_are_refused() {
        for &clock in JitClock::ALL {
            assert_eq!(clock.as_str().parse::<JitClock>(), Ok(clock));
        }
        for bad in ["", "Arch", "mono", "perf ", "tsc"] {
            let error = bad.parse::<JitClock>().unwrap_err();
            assert_eq!(error, UnknownClock::new::<JitClock>(bad, None));
            assert!(error.to_string().contains("perf inject --jit"), "{error}");
        }
        assert_eq!(JitClock::default(), JitClock::Arch);
    }
}
