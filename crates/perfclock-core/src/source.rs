//! A perf-domain clock as seen by code that only needs to read it (verification, benches).

use crate::ReadError;

/// Anything that tells the perf clock's time: `perfclock::Clock`, or a test double.
pub trait PerfTimeSource {
    /// Perf-domain nanoseconds now.
    fn now_ns(&self) -> Result<u64, ReadError>;
    /// The most this clock can be off the kernel's perf clock, in nanoseconds (0 when exact).
    fn error_bound_ns(&self) -> u64;
    /// A raw counter read, in the units [`PerfTimeSource::cycles_to_ns`] converts.
    fn read_counter(&self) -> Option<u64>;
    /// Converts a counter value taken with [`PerfTimeSource::read_counter`].
    fn cycles_to_ns(&self, cycles: u64) -> Result<u64, ReadError>;
}
