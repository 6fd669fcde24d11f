//! SIGINT, SIGTERM and SIGHUP while OUT is being written: the temporary file is removed, then
//! the process dies of the signal as it would have (the conventional 128+N status), so OUT is
//! either what it was or complete, and nothing is left beside it. (SIGKILL cannot be caught:
//! after one the `.perfclock-out-*` file remains and can be removed by hand.)

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use perfclock_event::sys::lock;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// The temporary file a signal must remove, if any; the lock is held while it is renamed into
/// place, so a signal either removes it before the rename or finds it gone after.
#[derive(Debug, Clone)]
pub(crate) struct TempCleanup {
    pending: Arc<Mutex<Option<PathBuf>>>,
}

impl TempCleanup {
    /// Starts the thread that receives the three signals.
    ///
    /// # Errors
    /// If the handlers cannot be installed.
    pub(crate) fn install() -> io::Result<Self> {
        let pending: Arc<Mutex<Option<PathBuf>>> = Arc::default();
        let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
        let on_signal = Arc::clone(&pending);
        std::thread::Builder::new()
            .name("perfclock-signals".to_owned())
            .spawn(move || {
                if let Some(signal) = signals.forever().next() {
                    if let Some(path) = lock(&on_signal).take() {
                        // Nothing useful is left to do with an error: the process is ending.
                        let _ = fs::remove_file(path);
                    }
                    // The default action of all three is to terminate: die of the signal.
                    let _ = signal_hook::low_level::emulate_default_handler(signal);
                    std::process::exit(128 + signal);
                }
            })?;
        Ok(Self { pending })
    }

    /// From now on a signal removes `path`.
    pub(crate) fn register(&self, path: &Path) {
        *lock(&self.pending) = Some(path.to_path_buf());
    }

    /// Runs `commit` (the rename into place) with signals' cleanup held off, then forgets the
    /// temporary file, renamed or removed.
    pub(crate) fn commit<T>(&self, commit: impl FnOnce() -> T) -> T {
        let mut pending = lock(&self.pending);
        let result = commit();
        *pending = None;
        result
    }

    /// Forgets the temporary file (it was removed on an error).
    pub(crate) fn forget(&self) {
        *lock(&self.pending) = None;
    }
}
