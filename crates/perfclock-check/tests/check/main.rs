//! Each mode judged against this machine's kernel stamps, one module per concern, in one
//! binary: each binary links the facade, and on a 2-core machine the links cost more than the
//! tests take to run.
//!
//! - `facade`: whichever mode `init()` grants;
//! - `calibrated`: a calibrated clock with and without refinement, a clock jump caught;
//! - `verify`: `verify()` passes a fitted line and catches it shifted;
//! - `paravirt`: paravirt mode with `C` from the kernel log, a published offset, a user's own
//!   offset file, brackets alone as `nobody`;
//! - `snapshot`: the facade's snapshot against the doctor's measurement.
//!
//! The tests take turns (`perfclock_testutil::one_at_a_time`): a bracket is as narrow as the
//! CPU left undisturbed, and each test judges readings against brackets. Cases that need another
//! user or environment run in a child: this binary re-executed filtered to one test by its path
//! (`module::function`).

mod calibrated;
mod facade;
mod paravirt;
mod snapshot;
mod verify;
