//! A perf recording made ready for `perf inject --jit` where the kernel withholds the time
//! conversion (virtual machines): what `perfclock inject-time-conv` and the end of `perfclock
//! record` do.
//!
//! - **TIME_CONV** ([`time_conv`]): `perf inject --jit` converts jitdump timestamps in the
//!   counter's units with the recording's `PERF_RECORD_TIME_CONV`, which `perf record` leaves
//!   out here. perfclock's jitdump writers leave a time conversion record (a sidecar) beside
//!   each dump; the one with the tightest bound goes in, once the others agree with it (and,
//!   where this machine's clock is exact, with this clock); with no sidecar, this machine's
//!   own conversion goes in.
//! - **Every dump read once, safely** ([`dumps`]): a dump is any process's file, another
//!   user's when root records the machine. It is opened as an untrusted file
//!   (`perfclock_os::untrusted_file`: no link followed, a regular file, bounded, read with its
//!   owner's credentials; inside a container's root while it lives), read as a stream, and
//!   copied into a private directory ([`CopiesDir`]) with only the code loads the samples
//!   touched, its `CLOCK_MONOTONIC` stamps moved to counter values ([`Pairings`]). The
//!   recording is pointed at the copy; `perf inject` reads only copies and writes its
//!   `jitted-*.so` only beside them. A dump that cannot be read or told is a warning naming it
//!   ([`DumpOutcome::Skipped`]); its maps are disabled and the rest is injected.
//! - **Perf maps in time** ([`perfmap`], [`timed_maps`]): while a recording runs, a [`Watch`]
//!   follows the `/tmp/perf-<pid>.map` of the recorded processes and stamps each line with the
//!   counter as it appears; each map's sampled lines then become a jitdump loaded at those
//!   times, so a runtime that reuses an address has each sample named after the code there at
//!   its time, where perf alone gives every sample there one name.
//! - **Clock data** ([`clock_data`]): `HEADER_CLOCK_DATA` from a snapshot, so `perf script
//!   -F+tod` prints wall-clock time.
//!
//! ```no_run
//! use perfclock_inject::{inject, InjectOptions, NoSignals};
//!
//! let options = InjectOptions::new("perf.data".into(), "with-conv.data".into());
//! let injected = inject(&options, &NoSignals)?;
//! for line in injected.outcome.lines() {
//!     eprintln!("{line}");
//! }
//! injected.keep_copies(&NoSignals); // OUT names them: perf inject reads them
//! # Ok::<(), perfclock_inject::InjectError>(())
//! ```
#![deny(unsafe_code)]

pub mod clock_data;
mod copies;
pub mod dumps;
pub mod held;
pub mod images;
mod input;
mod not_held;
mod options;
mod outcome;
mod output;
mod pairings;
pub mod perfmap;
mod run;
pub mod sidecar;
pub mod time_conv;
pub mod timed_maps;

pub use copies::CopiesDir;
pub use dumps::{DumpError, DumpOutcome, DumpReport, Writer};
pub use held::{HeldDumps, Scope, Watch};
pub use input::InputError;
pub use not_held::NotHeld;
pub use options::{ClockDataSource, InjectOptions};
pub use outcome::{Injected, Outcome};
pub use output::{NoSignals, TempFiles};
pub use pairings::{Pairings, MAX_RATE_PPM};
pub use run::{inject, InjectError};
