//! perfclock: the clock Linux perf stamps into its samples (`PERF_SAMPLE_TIME`, the kernel's
//! `local_clock()`), read in user space at the cost of a counter read.
//!
//! ```no_run
//! let start = perfclock::now_ns();
//! // ... work whose perf samples you want to line up with `start` ...
//! println!("mode {:?}, +- {} ns", perfclock::mode(), perfclock::error_bound_ns());
//! # let _ = start;
//! ```
//!
//! # Design
//! A [`Clock`] opens a `PERF_COUNT_SW_DUMMY` event of this process and maps its first page,
//! where the kernel publishes the counter-to-perf-time conversion under a seqlock. Each read is
//! a seqlock read of that page plus a counter read (see `perfclock-core`). Where the kernel
//! withholds the parameters (`cap_user_time_zero = 0`: virtual machines with a paravirtual
//! sched_clock), the clock is calibrated against timestamps the kernel stamped and published in
//! a page of our own memory, read by the same reader.
//!
//! # Caveats
//! - arm64: the kernel floors `time_zero`, so a reading can be 1 ns above the kernel's stamp.
//! - The kernel refreshes the page only when the event is scheduled in; a clock change it does
//!   not push (suspend, TSC marked unstable) shows up on the next refresh.
//! - A fork child gets a freshly mapped page at the same address (see [`Clock`]); raw `clone`
//!   system calls that bypass `pthread_atfork` handlers do not.
//!
//! # Platform support and features
//! Linux on x86_64 and aarch64. Elsewhere the crate compiles to a stub whose [`Clock::open`]
//! returns [`Error::Unsupported`], so cross-platform programs can depend on it unconditionally.
//! The default feature `calibrated` adds calibrated mode (and the `perfclock-calib` crate);
//! without it, a kernel that withholds the parameters gives [`Error::KernelWithholdsTime`].
//!
//! # Safety
//! Unsafe code is denied at the root and allowed only in the modules that map the kernel's page
//! and handle `fork`; each says why at its top.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

#[cfg_attr(not(target_os = "linux"), path = "stub.rs")]
mod clock;
mod diagnosis;
mod error;
#[cfg(target_os = "linux")]
mod fork;
#[cfg(target_os = "linux")]
mod kernel;
// CLOCK_BOOTTIME and the libc bindings it reads are Linux's.
#[cfg(target_os = "linux")]
mod snapshot;

use std::sync::OnceLock;

pub use clock::{Clock, Mode, Options};
pub use diagnosis::Withheld;
pub use error::Error;
pub use perfclock_core::{ReadError, TimeConversion};
#[cfg(target_os = "linux")]
pub use snapshot::{snapshot, ClockSnapshot, PairedClock, SnapshotError, SNAPSHOT_TRIES};

static GLOBAL: OnceLock<Result<Clock, Error>> = OnceLock::new();

/// Opens the process-wide clock on first call; later calls return the same result. Thread-safe;
/// a failure is remembered (open a [`Clock`] yourself to retry).
///
/// # Errors
/// See [`Error`].
pub fn init() -> Result<&'static Clock, Error> {
    init_with(Options::default())
}

/// As [`init`], with `options` used if this call is the one that opens the clock.
///
/// # Errors
/// See [`Error`].
pub fn init_with(options: Options) -> Result<&'static Clock, Error> {
    GLOBAL
        .get_or_init(|| options.open())
        .as_ref()
        .map_err(Clone::clone)
}

/// Perf-domain nanoseconds now, from the process-wide clock, opening it on first use (which
/// may block while another thread opens it). Returns 0 if no clock can be had: check [`init`]
/// for the reason. Not for signal handlers before [`init`] has returned: use [`try_now_ns`].
#[inline]
pub fn now_ns() -> u64 {
    // The initialised clock first: `init()` would build the default `Options` (a struct of some
    // 150 bytes) and call out of line on every read, doubling its cost.
    match global() {
        Some(clock) => clock.now_ns().unwrap_or(0),
        None => now_ns_initialising(),
    }
}

#[cold]
#[inline(never)]
fn now_ns_initialising() -> u64 {
    init()
        .ok()
        .and_then(|clock| clock.now_ns().ok())
        .unwrap_or(0)
}

/// Perf-domain nanoseconds now, or `None` if [`init`] has not succeeded or the read failed.
/// Never initialises, never blocks, never makes a system call: safe in signal handlers.
#[inline]
pub fn try_now_ns() -> Option<u64> {
    global()?.now_ns().ok()
}

/// The process-wide clock's mode, or `None` if it is not (successfully) initialised.
pub fn mode() -> Option<Mode> {
    global().map(Clock::mode)
}

/// The process-wide clock's error bound in nanoseconds (0 in kernel mode), or `u64::MAX` if it
/// is not (successfully) initialised.
pub fn error_bound_ns() -> u64 {
    global().map_or(u64::MAX, Clock::error_bound_ns)
}

/// The process-wide clock if [`init`] has succeeded, else `None`. Never initialises, never
/// blocks, never makes a system call: safe in signal handlers (the C ABI reads through it).
#[inline]
pub fn global() -> Option<&'static Clock> {
    GLOBAL.get()?.as_ref().ok()
}
