//! The perf clock where the kernel withholds its parameters, and the ground truth that every
//! perfclock claim is checked against.
//!
//! - Ground truth: [`GroundTruth`] opens perf events (through `perfclock-os`) and brackets
//!   kernel-stamped records (COMM, page-fault samples, MMAP2) with counter reads
//!   (`perfclock-check` judges clocks against fresh ones).
//! - Calibration: [`fit`] finds the band of lines counter -> perf ns consistent with every
//!   bracket, [`published`] turns it into the kernel's integer conversion and an honest, growing
//!   error bound, and [`CalibratedClock`] runs the background thread that publishes them in a
//!   page of our own memory, read with the same seqlock reader as the kernel's page. Its
//!   brackets come from a [`BracketSource`]: the kernel's records, or a test's distortion of
//!   them.
//!
//! # Safety
//! Unsafe code is denied here and allowed only where the calibrated clock's page reader
//! (`clock`) and its writer (`calibration`) are built over the two pages the clock owns; the
//! system calls are `perfclock_os`'s safe wrappers.
#![deny(unsafe_code)]

mod bracket;
mod calibration;
mod clock;
mod error;
mod fault_arena;
pub mod fit;
pub mod fork_gate;
mod ground_truth;
mod kind;
mod options;
pub mod prune;
pub mod published;
pub mod pvclock_offset;
mod shared;
mod source;
mod stats;

pub use bracket::{Bracket, KindStats, Stamped};
pub use clock::{CalibratedClock, THREAD_NAME};
pub use error::{CalibError, StepFailure};
pub use ground_truth::{GroundTruth, MAX_CONSECUTIVE_DISCARDS};
pub use kind::{KindSet, RecordKind};
pub use options::CalibrationOptions;
pub use source::{open_ground_truth, BracketSource};
pub use stats::CalibStats;
