//! The no_std core of perfclock: turn a raw counter read into the nanoseconds that Linux perf
//! stamps into its samples (`PERF_SAMPLE_TIME`, the kernel's `local_clock()`).
//!
//! # Design
//! The kernel publishes the counter-to-perf-time conversion in the first page of any perf event's
//! mapping (`struct perf_event_mmap_page`) under a seqlock. This crate knows that page's layout
//! ([`page`]), reads it consistently together with the counter ([`PageReader`]), applies
//! the kernel's formula exactly ([`TimeConversion`]) and reads the counter of each
//! architecture ([`counter`]). A calibrated clock publishes its own parameters in a page of
//! ordinary memory with [`PageWriter`], so both modes share one read path. One
//! [`SeqLock`] type is the protocol under all of them.
//!
//! Nothing here allocates, makes a system call or takes a lock: every function is usable from a
//! signal handler.
//!
//! # Platform support
//! x86_64 (`rdtsc`) and aarch64 (`CNTVCT_EL0`). Other architectures compile; their counter reads
//! return `None` and the reader returns [`ReadError::CounterUnsupported`].
//!
//! # Features
//! `std` (off by default) adds `error_chain`, the printer of an error and its causes on one line
//! that the `perfclock` facade re-exports; nothing of the clock needs it.
#![no_std]
#![deny(unsafe_code)]

#[cfg(any(test, feature = "std"))]
extern crate std;

mod boot_id;
mod conversion;
pub mod counter;
mod error;
#[cfg(feature = "std")]
mod error_chain;
mod fast_path;
pub mod page;
mod page_fields;
pub mod published_offset;
pub mod pvclock;
mod reader;
mod seq_lock;
pub mod shared_page;
pub mod untrusted;
mod writer;

pub use boot_id::BootId;
pub use conversion::TimeConversion;
pub use error::{PageDefect, ParamError, PvclockError, ReadError};
#[cfg(feature = "std")]
pub use error_chain::error_chain;
pub use reader::{PageReader, RawTimeFields, Reading, MAX_RETRIES};
pub use seq_lock::{SeqLock, SeqLockWriteGuard};
pub use writer::PageWriter;
