//! [`PerfTimeSource`]: a perf-domain clock as verification reads it.

use perfclock_calib::CalibratedClock;
use perfclock_core::{counter, ReadError};

/// Anything that tells the perf clock's time: [`perfclock::Clock`], a bare
/// [`CalibratedClock`], or a test double.
pub trait PerfTimeSource {
    /// Perf-domain nanoseconds now.
    ///
    /// # Errors
    /// The clock's [`ReadError`].
    fn now_ns(&self) -> Result<u64, ReadError>;
    /// The most this clock can be off the kernel's perf clock, in nanoseconds (0 when exact).
    fn error_bound_ns(&self) -> u64;
    /// A raw counter read, in the units [`PerfTimeSource::cycles_to_ns`] converts.
    fn read_counter(&self) -> Option<u64>;
    /// Converts a counter value taken with [`PerfTimeSource::read_counter`].
    ///
    /// # Errors
    /// The clock's [`ReadError`].
    fn cycles_to_ns(&self, cycles: u64) -> Result<u64, ReadError>;
}

impl PerfTimeSource for perfclock::Clock {
    fn now_ns(&self) -> Result<u64, ReadError> {
        perfclock::Clock::now_ns(self)
    }
    fn error_bound_ns(&self) -> u64 {
        perfclock::Clock::error_bound_ns(self)
    }
    fn read_counter(&self) -> Option<u64> {
        perfclock::Clock::read_counter(self)
    }
    fn cycles_to_ns(&self, cycles: u64) -> Result<u64, ReadError> {
        perfclock::Clock::cycles_to_ns(self, cycles)
    }
}

impl PerfTimeSource for CalibratedClock {
    fn now_ns(&self) -> Result<u64, ReadError> {
        self.reader().now_ns()
    }
    fn error_bound_ns(&self) -> u64 {
        CalibratedClock::error_bound_ns(self)
    }
    fn read_counter(&self) -> Option<u64> {
        counter::read_counter()
    }
    fn cycles_to_ns(&self, cycles: u64) -> Result<u64, ReadError> {
        Ok(self.reader().conversion()?.cycles_to_ns(cycles))
    }
}
