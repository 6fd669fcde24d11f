//! The perf clock where the kernel withholds its parameters, and the ground truth that every
//! perfclock claim is checked against.
//!
//! - Ground truth: [`ground_truth`] opens perf events (through `perfclock-event`) and brackets kernel-stamped records (COMM, page-fault samples, MMAP2)
//!   with counter reads, and [`verify()`] checks any [`perfclock_core::PerfTimeSource`] against
//!   fresh ones.
//! - Calibration: [`fit`] finds the band of lines counter -> perf ns consistent with every
//!   bracket, [`published`] turns it into the kernel's integer conversion and an honest, growing
//!   error bound, and [`calibrator`] runs the background thread that publishes them in a page of
//!   our own memory, read with the same seqlock reader as the kernel's page.

pub mod calibrator;
pub mod fit;
mod fork_gate;
pub mod ground_truth;
pub mod published;
pub mod verify;

pub use ground_truth::{Bracket, BracketError, GroundTruth, GroundTruthError, RecordKind};
pub use verify::{verify, VerifyReport};
