//! A file a recorded process named (a dump it mapped, its perf map) that the watch could not
//! open while the process ran: the held dumps and the followed maps both report them.

use std::fmt;
use std::path::PathBuf;

use perfclock_os::untrusted_file::UntrustedFileError;

/// Why a dump a recorded process mapped, or its perf map, could not be held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotHeld {
    /// The process.
    pub process: u32,
    /// The file as the process names it.
    pub path: PathBuf,
    /// Why.
    pub error: UntrustedFileError,
}

impl fmt::Display for NotHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process {}'s {} could not be opened while it ran: {}",
            self.process,
            crate::input::shown(&self.path),
            self.error
        )
    }
}
