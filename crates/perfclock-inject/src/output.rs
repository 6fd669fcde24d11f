//! OUT, written through a temporary file in its directory and renamed over OUT when complete,
//! so it is complete or untouched; the caller's signal handling learns of every file and
//! directory made meanwhile ([`TempFiles`]).

use std::fmt;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use perfclock_perfdata::{OutputFile, PerfDataError};

use crate::input::shown;

/// What a caller that handles signals is told, so a signal removes what is not finished.
pub trait TempFiles {
    /// From now on a signal removes `path` (a file, or a directory with what is in it).
    fn register(&self, path: &Path);
    /// `path` was removed or renamed: a signal leaves it.
    fn forget(&self, path: &Path);
    /// Runs `rename` (the temporary file renamed over OUT) with signals held off, then forgets
    /// `path`.
    fn commit(
        &self,
        path: &Path,
        rename: &mut dyn FnMut() -> Result<(), PerfDataError>,
    ) -> Result<(), PerfDataError>;
}

/// For a caller that handles no signals.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSignals;

impl TempFiles for NoSignals {
    fn register(&self, _: &Path) {}
    fn forget(&self, _: &Path) {}
    fn commit(
        &self,
        _: &Path,
        rename: &mut dyn FnMut() -> Result<(), PerfDataError>,
    ) -> Result<(), PerfDataError> {
        rename()
    }
}

/// Why OUT (or the copies beside it) could not be written.
#[derive(Debug)]
#[non_exhaustive]
pub enum OutputError {
    /// Writing OUT failed.
    Write {
        /// OUT.
        output: PathBuf,
        /// Why.
        error: PerfDataError,
    },
    /// The private directory of the copies could not be made.
    CopiesDir {
        /// Where.
        parent: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A dump's copy could not be written (a full disk).
    Copy {
        /// The copy.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The recording could not be pointed at a copy.
    Patch(PerfDataError),
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Write { output, .. } => write!(f, "cannot write OUT {}", shown(output)),
            Self::CopiesDir { parent, .. } => write!(
                f,
                "cannot make the private directory of the jitdumps' copies in {}",
                shown(parent)
            ),
            Self::Copy { path, .. } => write!(f, "cannot write {}", shown(path)),
            Self::Patch(error) => {
                write!(f, "cannot point the recording at a jitdump's copy: {error}")
            }
        }
    }
}

impl std::error::Error for OutputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Write { error, .. } => std::error::Error::source(error),
            Self::CopiesDir { error, .. } | Self::Copy { error, .. } => Some(error),
            Self::Patch(error) => std::error::Error::source(error),
        }
    }
}

/// Writes OUT through a temporary file in its directory (removed on any error, and by a signal
/// through `temps`), renamed over OUT when complete, with mode `mode` (IN's permission bits,
/// at least 0600).
pub(crate) fn write_output(
    output: &Path,
    mode: u32,
    temps: &dyn TempFiles,
    fill: impl FnOnce(&mut BufWriter<&mut File>) -> Result<(), PerfDataError>,
) -> Result<(), OutputError> {
    let failed = |error| OutputError::Write {
        output: output.to_owned(),
        error,
    };
    let mut out = OutputFile::create(output, mode).map_err(failed)?;
    let temp = out.temp_path().to_path_buf();
    temps.register(&temp);
    let filled = {
        let mut writer = BufWriter::new(out.file());
        fill(&mut writer).and_then(|()| writer.flush().map_err(PerfDataError::Io))
    };
    let result = match filled {
        Ok(()) => {
            let mut out = Some(out);
            temps.commit(&temp, &mut || match out.take() {
                Some(out) => out.commit(),
                None => Ok(()),
            })
        }
        Err(error) => {
            drop(out);
            Err(error)
        }
    };
    temps.forget(&temp);
    result.map_err(failed)
}
