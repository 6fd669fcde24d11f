//! Why a marker could not be written.
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors").

use std::fmt;
use std::io;
use std::path::PathBuf;

use perfclock_process_files::{ClockMismatch, ForkChild, LiveName, TakenName};

use crate::MarkerClock;

/// Error of the marker writer. Each message names what to change.
#[derive(Debug)]
#[non_exhaustive]
pub enum MarkerError {
    /// The marker file could not be created (missing or unwritable directory).
    Create {
        /// The file that was to be created.
        path: PathBuf,
        /// The `open(2)` error.
        source: io::Error,
    },
    /// Something else is at the marker file's name (a link, a FIFO, another user's file): it was
    /// left as it was, and no file was created.
    NameTaken(TakenName),
    /// A regular file of this user is at the marker file's name that another writer holds open
    /// (a process with the same pid number in another pid namespace), so it is not stale: it
    /// was left as it was, and no file was created.
    NameLive(LiveName),
    /// The handle was opened by another process (this is a fork child of it): a child never
    /// writes into its parent's file. Open a writer in the child: it gets its own
    /// `marker-<pid>.txt`. The marker is counted in [`crate::Markers::lost`].
    ForkChild(ForkChild),
    /// The calling thread is already inside this writer: a signal handler interrupted a marker
    /// call (or a flush) on the thread it runs on. Nothing was written (waiting would deadlock
    /// on the interrupted call's lock); the marker is counted in [`crate::Markers::lost`].
    Busy,
    /// The marker file could not be mapped executable (a `noexec` mount, or a seccomp policy).
    Map {
        /// The file that was to be mapped.
        path: PathBuf,
        /// The `mmap(2)` error.
        source: io::Error,
    },
    /// Writing buffered markers failed (disk full, quota, I/O error); the file still ends with a
    /// whole line.
    Write {
        /// The marker file.
        path: PathBuf,
        /// Markers lost by this failure.
        lost: u64,
        /// The `write(2)` error.
        source: io::Error,
    },
    /// An earlier failed write could not be undone, so nothing more is appended to this file
    /// (appending could glue a marker onto a partial line).
    Broken {
        /// The marker file.
        path: PathBuf,
        /// Markers lost by this call.
        lost: u64,
    },
    /// A span ends before it starts.
    EndBeforeStart {
        /// The start given, perf-clock ns.
        start_ns: u64,
        /// The end given, perf-clock ns.
        end_ns: u64,
    },
    /// An empty name: samply stops reading a marker file at a line without a name.
    EmptyName,
    /// A marker was stamped with the process-wide perf clock, which could not be opened.
    Clock(perfclock::Error),
    /// A `monotonic` writer could not pair the perf clock with `CLOCK_MONOTONIC` (the clock's
    /// conversion could not be read); the marker was not written.
    NoPairing,
    /// This process already writes the directory's marker file in another clock: one file per
    /// process and directory, one clock per file.
    ClockMismatch(ClockMismatch<MarkerClock>),
}

impl fmt::Display for MarkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MarkerError::Create { path, .. } => write!(
                f,
                "cannot create the marker file {}; pass an existing, writable directory",
                path.display()
            ),
            MarkerError::NameTaken(taken) => write!(f, "cannot create the marker file: {taken}"),
            MarkerError::NameLive(live) => write!(f, "cannot create the marker file: {live}"),
            MarkerError::ForkChild(child) => write!(f, "marker writer: {child}"),
            MarkerError::Busy => f.write_str(
                "marker refused: this thread is already inside the marker writer (a signal \
                 handler interrupted a marker call or a flush on its thread); it was counted as \
                 lost",
            ),
            MarkerError::Map { path, .. } => write!(
                f,
                "cannot map the marker file {} executable (perf only records executable \
                 mappings); pass a directory that is not on a noexec mount",
                path.display()
            ),
            MarkerError::Write { path, lost, .. } => write!(
                f,
                "writing the marker file {} failed, {lost} marker(s) lost; free space on its \
                 file system or open the markers in another directory",
                path.display()
            ),
            MarkerError::Broken { path, lost } => write!(
                f,
                "the marker file {} is no longer appended to after a failed write that could not \
                 be undone ({lost} marker(s) lost); open the markers in another directory",
                path.display()
            ),
            MarkerError::EndBeforeStart { start_ns, end_ns } => write!(
                f,
                "marker ends before it starts ({end_ns} < {start_ns}): pass end_ns >= start_ns \
                 (equal for an instant)"
            ),
            MarkerError::EmptyName => f.write_str("marker name is empty: pass a non-empty name"),
            MarkerError::Clock(_) => f.write_str("no perf clock to stamp markers with"),
            MarkerError::NoPairing => f.write_str(
                "could not pair the perf clock with CLOCK_MONOTONIC for a monotonic marker file \
                 (the clock's conversion could not be read); the marker was not written",
            ),
            MarkerError::ClockMismatch(mismatch) => write!(f, "marker file: {mismatch}"),
        }
    }
}

impl std::error::Error for MarkerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MarkerError::Create { source, .. }
            | MarkerError::Map { source, .. }
            | MarkerError::Write { source, .. } => Some(source),
            MarkerError::Clock(e) => Some(e),
            _ => None,
        }
    }
}
