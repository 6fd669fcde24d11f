//! IN, the recording: opened, checked to be a regular file that is not OUT, and OUT checked,
//! before anything is read or written.

use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use perfclock_core::untrusted::Untrusted;
use perfclock_perfdata::{check_output_path, PatchError, PerfDataError};

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
            Self::Output(PerfDataError::Patch(PatchError::OutputKind { path, kind })) => write!(
                f,
                "OUT {} is {kind}, not a regular file: it would be replaced by a regular file; \
                 pass -o a new path or an existing regular file",
                shown(path)
            ),
            Self::Output(PerfDataError::Patch(PatchError::Output { path, .. })) => {
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
    // Non-blocking: opening a FIFO for reading otherwise waits for a writer, forever; on the
    // regular file IN must be, the flag changes nothing.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(input)
        .map_err(|error| InputError::Open(input.to_owned(), error))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory holding `in.data` (a few bytes); OUT would be `out.data` there.
    fn recording() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.data");
        fs::write(&input, b"PERFILE2").unwrap();
        let output = dir.path().join("out.data");
        (dir, input, output)
    }

    #[test]
    fn a_regular_in_and_a_new_out_are_accepted() {
        let (_dir, input, output) = recording();
        let (_file, metadata) = open_input(&input, &output).unwrap();
        assert!(metadata.is_file());
        assert_eq!(metadata.len(), 8);
        // An existing regular OUT is fine too: it is replaced.
        fs::write(&output, b"old").unwrap();
        assert!(open_input(&input, &output).is_ok());
    }

    #[test]
    fn out_naming_in_is_refused_under_any_name() {
        let (dir, input, _) = recording();
        assert!(matches!(
            open_input(&input, &input),
            Err(InputError::SameFile)
        ));
        let hard_link = dir.path().join("hard");
        fs::hard_link(&input, &hard_link).unwrap();
        assert!(matches!(
            open_input(&input, &hard_link),
            Err(InputError::SameFile)
        ));
        let symlink = dir.path().join("soft");
        std::os::unix::fs::symlink(&input, &symlink).unwrap();
        assert!(matches!(
            open_input(&input, &symlink),
            Err(InputError::SameFile)
        ));
        let dotted = dir.path().join(".").join("in.data");
        assert!(matches!(
            open_input(&input, &dotted),
            Err(InputError::SameFile)
        ));
        // A copy (another inode) is not IN.
        let copy = dir.path().join("copy.data");
        fs::copy(&input, &copy).unwrap();
        assert!(open_input(&input, &copy).is_ok());
    }

    #[test]
    fn a_missing_in_cannot_be_opened() {
        let (dir, _, output) = recording();
        let missing = dir.path().join("missing.data");
        match open_input(&missing, &output) {
            Err(InputError::Open(path, error)) => {
                assert_eq!(path, missing);
                assert_eq!(error.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_directory_in_is_refused_as_a_directory() {
        let (dir, _, output) = recording();
        match open_input(dir.path(), &output) {
            Err(InputError::Directory(path)) => assert_eq!(path, dir.path()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_device_in_is_refused_as_not_a_file() {
        let (_dir, _, output) = recording();
        let null = Path::new("/dev/null");
        match open_input(null, &output) {
            Err(InputError::NotFile(path)) => assert_eq!(path, null),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_fifo_in_is_refused_as_not_a_file() {
        let (dir, _, output) = recording();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("run mkfifo");
        assert!(made.success());
        // No writer: a blocking open would wait for one forever, so the open runs on a thread
        // the test waits for a bounded time.
        let (sender, opened) = std::sync::mpsc::channel();
        let (fifo_here, output_here) = (fifo.clone(), output.clone());
        std::thread::spawn(move || {
            let _ = sender.send(open_input(&fifo_here, &output_here));
        });
        let result = opened
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("open_input waited for a writer of the FIFO");
        match result {
            Err(InputError::NotFile(path)) => assert_eq!(path, fifo),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_out_that_is_a_directory_is_refused_with_its_kind() {
        let (dir, input, _) = recording();
        let out_dir = dir.path().join("out");
        fs::create_dir(&out_dir).unwrap();
        match open_input(&input, &out_dir) {
            Err(InputError::Output(PerfDataError::Patch(PatchError::OutputKind {
                path,
                kind,
            }))) => {
                assert_eq!(path, out_dir);
                assert_eq!(kind, "a directory");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn messages_show_in_escaped() {
        let error = InputError::Directory(PathBuf::from("/tmp/a\nb\x1b[2J"));
        let shown = error.to_string();
        assert!(
            shown.starts_with("IN /tmp/a\\nb\\x1b[2J is a directory"),
            "{shown:?}"
        );
        assert!(!shown.contains(['\n', '\x1b']), "{shown:?}");
    }
}
