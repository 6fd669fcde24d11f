//! The perf-event layer of perfclock: the only crate that calls `perf_event_open(2)` and maps
//! perf events.
//!
//! - [`EventAttr`] builds the attributes perfclock needs (software events of the calling
//!   thread, user space only); [`PerfEvent::open`] opens one.
//! - [`PerfEvent::map_page_only`] maps the time page ([`PageMapping`]), read by
//!   `perfclock_core::PageReader`; [`PerfEvent::map_ring`] maps the page and a ring
//!   ([`RingMapping`]), drained by [`RingReader`].
//! - [`record`] decodes records: a pure module over byte slices, fuzzed.
//! - [`Mapping`] owns the workspace's mappings (perf events, the shared page, the calibrated
//!   clock's pages and scratch pages), unmapped on drop and read only through raw pointers; the
//!   one `mmap` outside it is [`remap_page_after_fork`]'s, in a fork child's handler.
//! - [`sys`] is the workspace's OS layer: the small system calls the other crates need (page
//!   size, thread id, boot id, `clock_gettime`, a file lock, CPU
//!   affinity, child processes and signals, the pid across forks, an exit hook, the calling
//!   thread's name and signal mask), so that the crates above hold unsafe code only to build
//!   `perfclock_core`'s page readers and writers over their pages (and the C ABI and the JVMTI
//!   agent for their foreign interfaces); and [`sys::ExecMarkerMapping`], the executable
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
//! calls), the mapping module ([`Mapping`]), the ring reader (loads from kernel-written memory),
//! [`shared_file`] (`openat`, `fstatat`, `unlinkat`), [`sys`] and its modules (each a handful of
//! libc calls), [`peer`] (thread credentials, pidfds, a UNIX socket `connect`) and
//! [`sealed_page`] (`memfd_create`, seals, `SCM_RIGHTS`); each says why at its top.
#![deny(unsafe_code)]

mod attr;
mod error;
mod event;
mod mapping;
pub mod peer;
pub mod record;
mod ring;
pub mod sealed_page;
pub mod shared_file;
pub mod sys;

pub use attr::{sample, EventAttr};
pub use error::{read_paranoid, BadSwitch, CreateError, ErrorKind, Op, RingError, SysError};
pub use event::{remap_page_after_fork, PerfEvent};
pub use mapping::{Access, Mapping, PageMapping, RingMapping, Sharing};
pub use ring::{DrainStats, RingReader};
