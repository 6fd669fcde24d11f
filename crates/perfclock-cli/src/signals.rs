//! SIGINT, SIGTERM, SIGHUP and SIGQUIT, received by one thread, in one of two modes:
//!
//! - **forwarding** (`perfclock record` while perf records): the signal is noted and SIGINT sent
//!   to perf, which stops the command and writes its file as `perf record` does on SIGINT;
//!   perfclock goes on to post-process, and exits with 128 + the signal.
//! - **fatal** (the default, and while OUT is written): the child doing the work (perf inject)
//!   is stopped, every registered temporary file and directory removed, a message printed, and
//!   the process dies of the signal (exits 128 + N), so OUT is either what it was or complete,
//!   and nothing is left beside it. (SIGKILL cannot be caught: after one the temporary files
//!   remain.)

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::children;
use crate::output::errln;

/// What a signal does now; see the module docs.
#[derive(Debug, Default)]
struct State {
    /// Temporary files and directories a fatal signal removes.
    temps: Vec<PathBuf>,
    /// Forwarding mode, to this pid (0: the process is not started yet).
    forward_to: Option<u32>,
    /// In fatal mode, the child to stop first.
    child: Option<u32>,
    /// In fatal mode, printed before dying (`{signal}` is replaced by the signal's number).
    message: Option<String>,
    /// The first signal received (0: none).
    received: i32,
}

/// The signal thread's shared state; clones share it.
#[derive(Debug, Clone)]
pub(crate) struct TempCleanup {
    state: Arc<Mutex<State>>,
}

impl TempCleanup {
    /// Starts the thread that receives the four signals.
    ///
    /// # Errors
    /// If the handlers cannot be installed.
    pub(crate) fn install() -> io::Result<Self> {
        let state: Arc<Mutex<State>> = Arc::default();
        let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])?;
        let on_signal = Arc::clone(&state);
        std::thread::Builder::new()
            .name("perfclock-signals".to_owned())
            .spawn(move || {
                for signal in signals.forever() {
                    let mut state = on_signal.lock().unwrap_or_else(PoisonError::into_inner);
                    if state.received == 0 {
                        state.received = signal;
                    }
                    if let Some(pid) = state.forward_to {
                        if pid != 0 {
                            let _ = children::kill(pid, SIGINT);
                        }
                        continue;
                    }
                    die(&mut state, signal);
                }
            })?;
        Ok(Self { state })
    }

    /// From now on a signal removes `path` (a directory with what is in it).
    pub(crate) fn register(&self, path: &Path) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .temps
            .push(path.to_path_buf());
    }

    /// Runs `commit` (the rename of `path` into place) with signals held off, then forgets
    /// `path`, renamed or removed.
    pub(crate) fn commit<T>(&self, path: &Path, commit: impl FnOnce() -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let result = commit();
        state.temps.retain(|temp| temp != path);
        result
    }

    /// Forgets `path` (removed, or renamed, by the caller).
    pub(crate) fn forget(&self, path: &Path) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .temps
            .retain(|temp| temp != path);
    }

    /// Forwarding mode: signals go as SIGINT to `pid` (0: noted until [`Self::forward_to`]
    /// names it; a signal noted before is sent then).
    pub(crate) fn forward_to(&self, pid: u32) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.forward_to = Some(pid);
        if pid != 0 && state.received != 0 {
            let _ = children::kill(pid, SIGINT);
        }
    }

    /// Fatal mode again: the next signal stops `child` (if any), removes the temporary files,
    /// prints `message` (if any; `{signal}` is replaced by its number) and ends the process. A
    /// signal forwarded before is not acted on again.
    pub(crate) fn fatal(&self, child: Option<u32>, message: Option<String>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.forward_to = None;
        state.child = child;
        state.message = message;
    }

    /// The first signal received, if any.
    pub(crate) fn received(&self) -> Option<i32> {
        Some(
            self.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .received,
        )
        .filter(|&signal| signal != 0)
    }
}

/// Stops the child, removes the temporary files, says why, and ends the process by `signal`.
fn die(state: &mut State, signal: i32) -> ! {
    if let Some(child) = state.child.take() {
        let _ = children::kill(child, SIGTERM);
    }
    for path in state.temps.drain(..) {
        // Nothing useful is left to do with an error: the process is ending. A directory (the
        // jitdumps' copies) goes with what is in it; `symlink_metadata` follows no link.
        let _ = match fs::symlink_metadata(&path) {
            Ok(metadata) if metadata.is_dir() => fs::remove_dir_all(&path),
            _ => fs::remove_file(&path),
        };
    }
    if let Some(message) = state.message.take() {
        errln!("{}", message.replace("{signal}", &signal.to_string()));
    }
    // SIGINT, SIGTERM and SIGHUP terminate by default: die of the signal. SIGQUIT would dump
    // a core of a process that did nothing wrong: exit with its status instead.
    if signal != SIGQUIT {
        let _ = signal_hook::low_level::emulate_default_handler(signal);
    }
    std::process::exit(128 + signal);
}

impl perfclock_inject::TempFiles for TempCleanup {
    fn register(&self, path: &Path) {
        TempCleanup::register(self, path);
    }

    fn forget(&self, path: &Path) {
        TempCleanup::forget(self, path);
    }

    fn commit(
        &self,
        path: &Path,
        rename: &mut dyn FnMut() -> Result<(), perfclock_perfdata::PerfDataError>,
    ) -> Result<(), perfclock_perfdata::PerfDataError> {
        TempCleanup::commit(self, path, rename)
    }
}
