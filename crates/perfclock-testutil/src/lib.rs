//! Helpers shared by the workspace's tests, benches and test programs (a dev-dependency, never
//! published). Each concern gets a module of its own; today:
//!
//! - [`is_root()`]: whether the test runs as root (the effective uid), the one such check.
//! - [`skip()`]: the one way a test says it cannot run here ([`test_name!`] names the test). It names what is missing, says so on
//!   stderr past libtest's capture (and in the file `PERFCLOCK_SKIP_LOG` names), and fails
//!   instead when CI's require variable for that need is set.
//! - [`handoff`]: readings handed between threads or processes, and the verdict that tells the
//!   clock's steps back from the counter's.
//! - [`hostile`]: a case run in a fresh child process (the test binary re-executed, filtered to
//!   the test's path, [`test_path!`]), a watchdog, seccomp filters and output without
//!   allocation, for the hostile tests.
//! - [`aliased_dir`]: one directory reached by two names (a symlink, a bind mount).
//! - [`shared_dir`]: what is planted at a writer's name in a directory others can write, and the
//!   checks that the writer neither followed nor reused it.
//! - [`pid_namespace`]: two writers, each pid 1 of its own pid namespace, in one directory.
//! - [`bracket_line`]: the one affine line through kernel-stamped brackets, and where each stamp
//!   sits in its bracket (the calibration's tests and the `bracket_widths` example).
//! - [`samply`]: samply's reading of a marker line.
//! - [`perf_script`]: parsing the fields `perf script` prints (the wall-clock `tod`).
//! - [`time`]: `CLOCK_MONOTONIC`, the clock tests compare the perf clock with.
//! - [`one_at_a_time()`]: the tests of one binary take turns.
//!
//! It depends on std, libc and perfclock-core's error printer only: a crate that dev-depends on it
//! never gets a second copy of itself or of another perfclock crate in its tests (perfclock-core's
//! own tests do, harmlessly: [`error_chain`] passes only `&dyn Error` to it). A helper that needs
//! a perfclock crate's types stays in that crate's `tests/`, or takes plain values (as
//! [`bracket_line`] does).
//!
//! The shell and Python end-to-end scripts have the same skip helper in `scripts/lib/skip.sh`.
#![deny(unsafe_code)]

pub mod aliased_dir;
pub mod bracket_line;
pub mod error_chain;
pub mod handoff;
pub mod hostile;
pub mod perf_script;
pub mod pid_namespace;
mod root;
pub mod samply;
pub mod shared_dir;
mod skip;
pub mod time;
mod turns;

pub use root::is_root;
pub use skip::{
    child_skipped, ok_or_skip, skip, skip_child, Need, SKIPPED_EXIT_STATUS, SKIP_LOG_ENV,
};
pub use turns::one_at_a_time;
