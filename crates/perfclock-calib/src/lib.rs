//! Placeholder: filled by its issue.
pub mod fit;
pub mod published;
