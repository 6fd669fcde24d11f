//! What `perfclock doctor` and the tests use to judge a perf-domain clock.
//!
//! - [`verify()`] brackets fresh kernel-stamped records with a clock's readings: every stamp
//!   must fall inside them, widened by the clock's own error bound.
//! - [`monotonic_offset`] measures how far `CLOCK_MONOTONIC` is from the clock; [`monotonic_ns`]
//!   reads it.
//! - [`PerfTimeSource`] is what they read: [`perfclock::Clock`], a bare
//!   [`perfclock_calib::CalibratedClock`], or a test's own line.
//!
//! The hand-run measurements are examples: `bracket_widths` (each record kind's bracket) and
//! `calibration_figures` (startup, long run, fit band).
//!
//! # Safety
//! No unsafe code: the thread's CPU mask is saved and restored through
//! `perfclock_os::thread::affinity`.
#![forbid(unsafe_code)]

mod error;
mod monotonic;
mod source;
mod verify;

pub use error::VerifyError;
pub use monotonic::{monotonic_offset, MonotonicOffset};
/// `CLOCK_MONOTONIC` in ns: the read that the doctor and the read benchmark time against the
/// perf clock.
pub use perfclock_os::time::monotonic_ns;
pub use source::PerfTimeSource;
pub use verify::{
    narrowest_half_band_ns, verify, verify_with, KindReport, VerifyOptions, VerifyReport,
};
