//! Placeholder: filled by its issue.
pub mod fit;
pub mod published;
// Kernel-stamped ground truth (event, ring, ground_truth, verify).
pub mod event;
pub mod ground_truth;
pub mod ring;
pub mod verify;
pub use event::OpenError;
pub use ground_truth::{Bracket, BracketError, GroundTruth, GroundTruthError, RecordKind};
pub use verify::{verify, VerifyReport};
pub mod calibrator;
