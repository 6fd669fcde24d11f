//! IN, the recording: opened, checked to be a regular file that is not OUT, and OUT checked,
//! before anything is read or written.

use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use perfclock_core::untrusted::Untrusted;
use perfclock_perfdata::{check_output_path, PerfDataError};

/// What is wrong with IN or with where OUT goes.
#[derive(Debug)]
#[non_exhaustive]
pub enum InputError {
    /// OUT names IN (or the same file through another path).
    SameFile,
    /// IN could not be opened or read.
    Open(PathBuf, io::Error),
    /// IN is a directory.
    Directory(PathBuf),
    /// IN is another non-regular file.
    NotFile(PathBuf),
    /// IN is not a perf.data this tool can patch.
    PerfData(PerfDataError),
    /// OUT is something that is never replaced (a device, FIFO, socket, directory).
    Output(PerfDataError),
    /// IN's events were opened with another clock (`perf record -k`).
    OtherClock(i32),
    /// IN maps no `jit-<pid>.dump` and nothing else is asked for.
    NoJitMarker,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SameFile => {
                f.write_str("OUT is IN: the input is never modified; pass -o a different file")
            }
            Self::Open(path, _) => write!(f, "cannot read IN {}", shown(path)),
            Self::Directory(path) => write!(
                f,
                "IN {} is a directory, not a perf.data file (the directory format of perf \
                 record --threads is not supported): pass the perf.data file",
                shown(path)
            ),
            Self::NotFile(path) => write!(
                f,
                "IN {} is not a regular file: pass the perf.data file",
                shown(path)
            ),
            Self::PerfData(error) => write!(f, "IN: {error}"),
            Self::Output(PerfDataError::OutputKind { path, kind }) => write!(
                f,
                "OUT {} is {kind}, not a regular file: it would be replaced by a regular file; \
                 pass -o a new path or an existing regular file",
                shown(path)
            ),
            Self::Output(PerfDataError::Output { path, .. }) => {
                write!(f, "cannot write OUT {}", shown(path))
            }
            Self::Output(error) => write!(f, "OUT: {error}"),
            Self::OtherClock(clockid) => write!(
                f,
                "IN was recorded with clock {clockid} (perf record -k/--clockid), not the perf \
                 clock PERF_RECORD_TIME_CONV converts to: its samples would be misplaced against \
                 the jitdump; record without -k"
            ),
            Self::NoJitMarker => f.write_str(
                "no MMAP2 of a jit-<pid>.dump in IN: was the JIT running with a jitdump writer \
                 (perfclock's, or a runtime's own) during the recording?",
            ),
        }
    }
}

impl std::error::Error for InputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open(_, error) => Some(error),
            // Display gives the library's message in this command's names; its cause follows.
            Self::PerfData(error) | Self::Output(error) => std::error::Error::source(error),
            Self::SameFile
            | Self::Directory(_)
            | Self::NotFile(_)
            | Self::OtherClock(_)
            | Self::NoJitMarker => None,
        }
    }
}

/// A path for a message, escaped for a terminal.
pub(crate) fn shown(path: &Path) -> Untrusted<'_> {
    Untrusted(path.as_os_str().as_encoded_bytes())
}

/// IN opened and checked, with its metadata; OUT checked.
///
/// # Errors
/// [`InputError`].
pub(crate) fn open_input(input: &Path, output: &Path) -> Result<(File, fs::Metadata), InputError> {
    let file = File::open(input).map_err(|error| InputError::Open(input.to_owned(), error))?;
    let metadata = file
        .metadata()
        .map_err(|error| InputError::Open(input.to_owned(), error))?;
    if metadata.is_dir() {
        return Err(InputError::Directory(input.to_owned()));
    }
    if !metadata.is_file() {
        return Err(InputError::NotFile(input.to_owned()));
    }
    if names_same_file(&metadata, output) {
        return Err(InputError::SameFile);
    }
    check_output_path(output).map_err(InputError::Output)?;
    Ok((file, metadata))
}

/// Whether `output` is `input_metadata`'s file under any name: the same inode.
fn names_same_file(input_metadata: &fs::Metadata, output: &Path) -> bool {
    fs::metadata(output)
        .is_ok_and(|out| out.dev() == input_metadata.dev() && out.ino() == input_metadata.ino())
}
