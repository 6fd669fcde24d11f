//! perfclock's operating-system layer: every system call the workspace makes outside the C ABI
//! and the JVMTI agent's foreign interfaces, grouped by subsystem as rustix groups them, so the
//! crates above hold unsafe code only to build `perfclock_core`'s page readers and writers over
//! their pages.
//!
//! - [`perf_event`]: `perf_event_open(2)` ([`EventAttr`], [`PerfEvent`]), the time page and ring
//!   ([`RingReader`]), and [`perf_event::record`], a pure decoder of the records perfclock
//!   reads (over byte slices, fuzzed).
//! - [`mapping`]: [`Mapping`], the one owner of an `mmap` in the workspace (perf events, the
//!   shared page, the calibrated clock's pages, scratch pages), unmapped on drop and read only
//!   through raw pointers; the executable marker mapping through which `perf record` learns of a
//!   jitdump or marker file; the page size. The one `mmap` outside it is
//!   [`remap_page_after_fork`]'s, in a fork child's handler.
//! - [`process`]: the pid across forks, an exit hook, whether the counter may be read, and
//!   ([`process::children`]) signals to child processes, their death signal, the subreaper.
//! - [`thread`]: the calling thread's id, name, signal mask and ([`thread::affinity`]) CPUs.
//! - [`time`]: `clock_gettime` and the boot id.
//! - [`env`](mod@env): the environment as a setuid process may trust it, and the one on/off parser.
//! - [`peer`]: thread credentials, pidfds, the peer of a UNIX socket.
//! - [`memfd`]: a sealed memfd page handed over a UNIX socket (the shared page's transport).
//! - [`shared_file`]: files created in directories others can write (`/tmp`), never through a
//!   link, never into another user's file; the writers' liveness lock.
//! - [`untrusted_file`]: files another user wrote, opened to be read: never through a link,
//!   regular, bounded, with the credentials of their owner.
//! - [`inotify`]: waking up when a file someone else writes has grown.
//! - [`private_dir`]: a directory made for another process inside its root (a container's
//!   `/tmp`), filled and removed through its own descriptor.
//! - Every failed system call is one [`SysError`]: which call, the errno, and a [`ErrorKind`]
//!   whose message names the knob to change.
//!
//! Written by hand over `libc` (which perf-event-open-sys already brings) rather than taken from
//! rustix: rustix's default backend reads the page size from the aux vector with
//! `prctl(PR_GET_AUXV)` or `/proc/self/auxv` and panics when both are refused (a seccomp
//! policy, a PID 1 without `/proc`), and its `clock_gettime(ClockId)` panics when the call fails;
//! here `sysconf` makes no system call and a refused `clock_gettime` is an error. The name says
//! "os" rather than "sys": a `-sys` crate is, by cargo's convention, the raw binding of a native
//! library.
//!
//! ```no_run
//! use perfclock_os::{EventAttr, PerfEvent};
//!
//! let event = PerfEvent::open(&EventAttr::dummy())?;
//! let page = event.map_page_only()?;
//! // SAFETY: the page stays mapped while `page` lives; the reader does not outlive it.
//! let reader = unsafe { perfclock_core::PageReader::new(page.page()) };
//! println!("{:?}", reader.raw());
//! # Ok::<(), perfclock_os::SysError>(())
//! ```
//!
//! # Safety
//! Unsafe code is denied at the root and allowed module by module, in each module that makes
//! system calls; each says at its top which calls and why they are sound.
#![deny(unsafe_code)]

pub mod env;
mod error;
pub mod inotify;
pub mod mapping;
pub mod memfd;
pub mod peer;
pub mod perf_event;
pub mod private_dir;
pub mod process;
pub mod shared_file;
pub mod thread;
pub mod time;
pub mod untrusted_file;

pub use error::{read_paranoid, BadSwitch, ErrorKind, Op, RingError, SysError};
pub use mapping::{Access, Mapping, PageMapping, RingMapping, Sharing};
pub use perf_event::{remap_page_after_fork, sample, DrainStats, EventAttr, PerfEvent, RingReader};
pub use shared_file::CreateError;
