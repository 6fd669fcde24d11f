//! The perf-event layer of perfclock: the only crate that calls `perf_event_open(2)` and maps
//! perf events.
//!
//! - [`EventAttr`] builds the attributes perfclock needs (software events of the calling
//!   thread, user space only); [`PerfEvent::open`] opens one.
//! - [`PerfEvent::map_page_only`] maps the time page ([`PageMapping`]), read by
//!   `perfclock_core::PageReader`; [`PerfEvent::map_ring`] maps the page and a ring
//!   ([`RingMapping`]), drained by [`RingReader`].
//! - [`record`] decodes records: a pure module over byte slices, fuzzed.
//! - [`sys`] holds the small system calls the writers share (page size, thread id,
//!   `clock_gettime`, a poison-tolerant lock) and [`sys::ExecMarkerMapping`], the executable
//!   mapping through which `perf record` sees a jitdump or marker file.
//! - [`shared_file::create_exclusive`] creates the writers' files in directories others can
//!   write (`/tmp`): never through a link, never into another user's file.
//! - Every failed system call is one [`SysError`]: which call, the errno, and a [`ErrorKind`]
//!   whose message names the knob to change.
//!
//! ```no_run
//! use perfclock_event::{EventAttr, PerfEvent};
//!
//! let event = PerfEvent::open(&EventAttr::dummy())?;
//! let page = event.map_page_only()?;
//! // SAFETY: the page stays mapped while `page` lives; the reader does not outlive it.
//! let reader = unsafe { perfclock_core::PageReader::new(page.page()) };
//! println!("{:?}", reader.raw());
//! # Ok::<(), perfclock_event::SysError>(())
//! ```
//!
//! # Safety
//! Unsafe code is denied at the root and allowed only in [`event`](PerfEvent) (the system
//! calls), the mapping module (owned mappings), the ring reader (loads from kernel-written
//! memory), [`shared_file`] (`openat`, `fstatat`, `unlinkat`) and [`sys`] (`sysconf`, `gettid`,
//! `clock_gettime`, the marker `mmap`), [`peer`] (thread credentials, pidfds, a UNIX
//! socket `connect`) and [`sealed_page`] (`memfd_create`, seals, `SCM_RIGHTS`); each says why at
//! its top.
#![deny(unsafe_code)]

mod attr;
mod error;
mod event;
pub mod kmsg;
mod mapping;
pub mod peer;
pub mod pvclock_page;
pub mod record;
mod ring;
pub mod sealed_page;
pub mod shared_file;
pub mod sys;

pub use attr::{sample, EventAttr};
pub use error::{read_paranoid, CreateError, ErrorKind, Op, RingError, SysError};
pub use event::{remap_page_after_fork, PerfEvent};
pub use mapping::{Access, Mapping, PageMapping, RingMapping, Sharing};
pub use ring::{DrainStats, RingReader};
