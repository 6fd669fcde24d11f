//! jitdump files (perf's `jit-<pid>.dump`) stamped with the counter perf converts, so
//! `perf inject --jit` attributes samples of JIT code recorded by a default `perf record`
//! (no `-k 1`).
//!
//! ```no_run
//! let dump = perfclock_jitdump::JitDump::create("/tmp")?;
//! let code = [0xc3u8]; // ret
//! let addr = code.as_ptr() as u64; // where the JIT placed the code
//! dump.code_load(b"my_function", addr, &code)?;
//! dump.close()?;
//! # Ok::<(), perfclock_jitdump::JitDumpError>(())
//! ```
//!
//! # Design
//! The dump's clock is a choice ([`JitClock`], [`JitDump::create_with_clock`]): `arch` (the
//! default, described here), `perf` (perf-clock ns) or `monotonic` (`CLOCK_MONOTONIC` ns).
//! With `arch` the dump sets `JITDUMP_FLAGS_ARCH_TIMESTAMP`: each record holds the raw counter (TSC,
//! CNTVCT_EL0) read under the writer's lock, and `perf inject --jit` converts it with the
//! recording's `PERF_RECORD_TIME_CONV` exactly as it converts the kernel's own conversion.
//! Where the kernel withholds that conversion, `perf record` writes no `PERF_RECORD_TIME_CONV`;
//! the writer therefore keeps the conversion of the perfclock clock in
//! `jit-<pid>.dump.timeconv` ([`timeconv`]), from which `perfclock inject-time-conv` adds the
//! record to a `perf.data`.
//!
//! Each record is built in memory and reaches the file in one positional write; a failed or
//! short write is truncated away, so the file always ends at a record boundary or, if the
//! process dies mid-write, in one partial record, which perf's reader stops at.
//!
//! # Caveats
//! - In calibrated mode the conversion is a fit with an error bound (`error_bound_ns` in the
//!   timeconv record); a load whose stamp lies within that bound of a sample can be
//!   misattributed.
//! - The writer is for the process that created it: in a fork child every call on an inherited
//!   handle returns [`JitDumpError::ForkChild`] and writes nothing; the child creates its own
//!   dump (`jit-<child pid>.dump`).
//! - The dump and its sidecar are created exclusively
//!   ([`perfclock_os::shared_file::create_exclusive`]): a link, a FIFO or another user's file
//!   at either name is [`JitDumpError::NameTaken`] and left alone; so is a dump of the same name
//!   that another live writer holds ([`JitDumpError::NameLive`]: containers whose JITs are all
//!   pid 1 need a directory each).
//!
//! # Safety
//! No unsafe code: the executable marker mapping, the thread id and the clock reads are
//! [`perfclock_os`]'s.
#![deny(unsafe_code)]

mod clock;
mod error;
pub mod foreign;
mod record;
pub mod timeconv;
mod timed;
mod writer;

pub use clock::JitClock;
pub use error::{ForeignDumpError, JitDumpError, TimeConvError};
pub use perfclock_process_files::{ClockMismatch, ClockName, ForkChild, UnknownClock};
pub use record::DebugEntry;
pub use timed::{write_timed_dump, TimedLoad, MAX_CODE_BYTES};
pub use writer::JitDump;
