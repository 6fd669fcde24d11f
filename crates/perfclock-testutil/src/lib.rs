//! Helpers shared by the workspace's tests, benches and test programs (a dev-dependency, never
//! published). Each concern gets a module of its own; today:
//!
//! - [`mod@skip`]: the one way a test says it cannot run here. It names what is missing, says so on
//!   stderr past libtest's capture (and in the file `PERFCLOCK_SKIP_LOG` names), and fails
//!   instead when CI's require variable for that need is set.
//! - [`perf_script`]: parsing the fields `perf script` prints (the wall-clock `tod`).
//!
//! The shell and Python end-to-end scripts have the same helper in `scripts/lib/skip.sh`.
#![deny(unsafe_code)]

pub mod perf_script;
pub mod skip;

pub use skip::{child_skipped, skip, skip_child, Need, SKIPPED_EXIT_STATUS, SKIP_LOG_ENV};
