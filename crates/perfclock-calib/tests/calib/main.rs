//! Calibration against this machine's kernel, one module per concern, in one binary: each
//! binary links the OS layer and the core, and on a 2-core machine the links cost more than the
//! tests take to run.
//!
//! - `ground_truth`: every bracket holds its record, records are never mismatched, the ring
//!   survives wrap-around;
//! - `refiner_allocates_nothing`: the refiner's steady-state loop neither allocates nor frees,
//!   counted by this binary's global allocator on the calibration thread alone (every other
//!   thread's calls pass through uncounted).
//!
//! The tests take turns (`perfclock_testutil::one_at_a_time`), as separate binaries did: a
//! bracket is as narrow as the CPU left undisturbed, and the refiner's test calibrates within a
//! budget.

mod common;
mod ground_truth;
mod refiner_allocates_nothing;
