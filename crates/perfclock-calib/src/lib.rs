//! Placeholder: filled by its issue.
pub mod fit;
pub mod published;
mod comm_probe;
pub mod calibrator;
