//! Marker files (`marker-<pid>.txt`) in perf-clock nanoseconds, the format samply reads.
//!
//! ```no_run
//! let markers = perfclock_markers::Markers::open("/tmp")?;
//! let start = perfclock::now_ns();
//! // ... a phase of work ...
//! markers.span("load config", start, perfclock::now_ns())?;
//! {
//!     let _parse = markers.start("parse")?; // ends when dropped
//!     // ... more work ...
//! }
//! markers.close()?;
//! # Ok::<(), perfclock_markers::MarkerError>(())
//! ```
//! Record with a plain `perf record -g ./program` and open it with `samply import perf.data`:
//! the spans appear in the marker chart of the thread that opened the writer, on the same time
//! axis as the samples.
//!
//! # Design
//! - samply finds a marker file the way perf finds a jitdump: through the recording's MMAP2
//!   record of a file named `marker-<pid>.txt` (any directory), so the writer maps the file
//!   executable once (a default `perf record` only records executable mappings). samply then
//!   reads `START END NAME` lines and converts both times with the converter of the samples, with
//!   no clock check: for a default-clock recording they must be perf-clock ns, which is what
//!   [`perfclock::now_ns`] returns.
//! - Each thread formats markers into its own buffer ([`thread_local::ThreadLocal`]), written out
//!   with one `pwrite` when it fills, on [`Markers::flush`], at close and at `exit`.
//! - A kill or a full disk never leaves a line samply misreads; see [`line::MAX_NAME_BYTES`] and the
//!   `line` module's notes: lines are placed so a write cut short (which stops on a page boundary)
//!   ends on a line boundary, and a failed write is cut back to the last whole line.
//!
//! # Caveats
//! - samply 0.13 stops reading a marker file at the first line that does not parse or is not
//!   UTF-8; names are therefore cleaned (control characters replaced, invalid UTF-8 from C
//!   replaced by U+FFFD) and empty names refused.
//! - samply shows every marker of the file on the thread that mapped it (the one that opened the
//!   first writer for that directory).
//! - Markers still buffered when the process is killed (or `_exit`s) are lost.
//! - `marker-<pid>.txt` is created exclusively
//!   ([`perfclock_os::shared_file::create_exclusive`]): a link, a FIFO or another user's file
//!   at the name is [`MarkerError::NameTaken`] and left alone; so is a file of the same name
//!   that another live writer holds ([`MarkerError::NameLive`]: containers whose writers are
//!   all pid 1 need a directory each).
//! - Fork children and signal handlers: see [`Markers`].
//!
//! # Safety
//! No unsafe code: the exit hook and the fork-aware pid are `perfclock_os::process`'s,
//! the executable mapping of the marker file is [`perfclock_os::mapping::ExecMarkerMapping`].
#![forbid(unsafe_code)]

mod clock;
mod error;
mod file;
pub mod line;
mod process;
#[cfg(feature = "tracing")]
mod tracing_layer;
mod writer;

pub use clock::{MarkerClock, PAIRING_MAX_AGE_NS};
pub use error::MarkerError;
pub use perfclock_process_files::{ClockMismatch, ClockName, ForkChild, UnknownClock};
#[cfg(feature = "tracing")]
pub use tracing_layer::MarkerLayer;
pub use writer::{Markers, SpanGuard, FLUSH_AT_BYTES};
