//! The facade in hostile places, one module per place. Each case runs in a child process: the
//! test re-executes this binary filtered to itself by its path (`module::function`,
//! `perfclock_testutil::test_path!`), so forks, seccomp filters, lowered limits, signal handlers
//! and the process-wide clock stay out of this process, which all the tests share. One binary
//! rather than one per place: each binary links the facade, and on a 2-core machine the links
//! cost more than the tests take to run.
//!
//! The tests take turns (`perfclock_testutil::one_at_a_time`): several judge what the machine
//! delivers in a fixed time (signals handled, reads between republishes, forks beside a
//! refiner), which a second case running beside them on 2 cores would halve.
//!
//! The modules that use calibrated mode's API say `#![cfg(feature = "calibrated")]` and why;
//! the others run in a build without calibration too (kernel mode).

mod clone_fork;
mod fd_exhausted;
mod fork;
mod fork_refine;
mod kinds_refused;
mod limits;
mod monotonic;
mod no_syscalls;
mod options;
mod perf_refused;
mod signals;
mod tsc_disabled;
