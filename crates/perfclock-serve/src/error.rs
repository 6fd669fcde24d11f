//! Why the server side could not publish ([`PublishError`]) or serve ([`ServeError`]): what
//! failed, with the cause through `source()`.

use std::fmt;
use std::io;
use std::path::PathBuf;

use perfclock::paravirt::{self, OffsetSource, ParavirtRefusal};
use perfclock::{Error, ReadError};
use perfclock_calib::CalibError;

/// Why the server side could not publish.
#[derive(Debug)]
#[non_exhaustive]
pub enum PublishError {
    /// The page's directory is not the server's user's alone.
    Directory {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its mode bits.
        mode: u32,
        /// The server's effective uid.
        euid: u32,
    },
    /// Another server holds the directory.
    Busy {
        /// The directory.
        dir: PathBuf,
    },
    /// A file at the page's path that is not a perfclock page.
    NotAPage {
        /// The file.
        path: PathBuf,
    },
    /// A file-system operation failed; `source()` says why.
    Io {
        /// What was done.
        op: &'static str,
        /// To what.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The page in memory could not be made, read or sealed; `source()` says why.
    Memory {
        /// What was done.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::Directory {
                dir,
                owner,
                mode,
                euid,
            } => write!(
                f,
                "{} is owned by uid {owner} with mode {:04o}: the page's directory must be owned \
                 by the server's user (uid {euid}) and writable by no one else, or anyone who \
                 can write it could replace the page (choose another with --path)",
                dir.display(),
                mode & 0o7777
            ),
            PublishError::Busy { dir } => write!(
                f,
                "another perfclock serve holds {} (one server per directory)",
                dir.display()
            ),
            PublishError::NotAPage { path } => write!(
                f,
                "{} is not a perfclock page (no page magic): serve neither overwrites nor \
                 replaces a file it did not write; remove it or choose another --path",
                path.display()
            ),
            PublishError::Io { op, path, source } => {
                write!(f, "cannot {op} {}", path.display())?;
                if source.raw_os_error() == Some(libc::ENOSPC) {
                    f.write_str(
                        " (the file system is full: free space there or choose another --path)",
                    )?;
                }
                Ok(())
            }
            PublishError::Memory { op, .. } => write!(f, "cannot {op} the page in memory"),
        }
    }
}

impl std::error::Error for PublishError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PublishError::Io { source, .. } | PublishError::Memory { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why the server ([`crate::server`]) failed: `Display` says what failed, the cause is its
/// `source()`.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// No perf clock at all (not merely a withheld conversion).
    NoPerfClock(Error),
    /// No path given and no `XDG_RUNTIME_DIR` for the per-user default.
    NoDefaultPath,
    /// The page, its file, its socket or its directory: the publisher's error says which.
    Publish(PublishError),
    /// `/proc/sys/kernel/random/boot_id` unreadable.
    BootId(io::Error),
    /// `--once` with paravirt mode disabled.
    OnceWithParavirtOff,
    /// Paravirt mode measured no offset.
    NoOffset(ParavirtRefusal),
    /// The offset came from a source that is not published.
    OffsetFromUnpublished(OffsetSource),
    /// No bracket intersection checked the offset.
    OffsetUnchecked,
    /// The offset could not be encoded.
    OffsetFormat,
    /// The in-process calibration failed.
    Calibration(CalibError),
    /// This architecture has no counter.
    NoCounter,
    /// The in-process page could not be read.
    PageUnreadable(ReadError),
    /// The in-process refiner republished on every try.
    KeptRepublishing,
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::NoPerfClock(_) => f.write_str("no perf clock"),
            ServeError::NoDefaultPath => f.write_str(
                "no XDG_RUNTIME_DIR for a per-user page: name the file with --path (in a directory \
                 only you can write)",
            ),
            ServeError::Publish(error) => error.fmt(f),
            ServeError::BootId(_) => write!(f, "cannot read {}", perfclock_os::time::BOOT_ID_PATH),
            ServeError::OnceWithParavirtOff => write!(
                f,
                "--once publishes the paravirt offset, which {}=off disables",
                paravirt::ENV
            ),
            ServeError::NoOffset(_) => f.write_str("no paravirt offset to publish"),
            ServeError::OffsetFromUnpublished(source) => {
                write!(f, "no paravirt offset to publish: it came from {source}")
            }
            ServeError::OffsetUnchecked => {
                f.write_str("no paravirt offset to publish: no bracket intersection checked it")
            }
            ServeError::OffsetFormat => f.write_str("cannot format the offset"),
            ServeError::Calibration(_) => f.write_str("calibration failed"),
            ServeError::NoCounter => f.write_str("no counter on this architecture"),
            ServeError::PageUnreadable(_) => f.write_str("in-process page unreadable"),
            ServeError::KeptRepublishing => f.write_str("the in-process refiner kept republishing"),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent: the publisher's own message is this one's.
            ServeError::Publish(error) => error.source(),
            ServeError::BootId(error) => Some(error),
            ServeError::NoOffset(refusal) => Some(refusal),
            ServeError::NoPerfClock(error) => Some(error),
            ServeError::Calibration(error) => Some(error),
            ServeError::PageUnreadable(error) => Some(error),
            ServeError::NoDefaultPath
            | ServeError::OnceWithParavirtOff
            | ServeError::OffsetFromUnpublished(_)
            | ServeError::OffsetUnchecked
            | ServeError::OffsetFormat
            | ServeError::NoCounter
            | ServeError::KeptRepublishing => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::ParamError;
    use perfclock_os::{Op, SysError};
    use perfclock_testutil::error_chain::assert_each_cause_once;

    /// What failed, then each cause once, down to the errno and its knob.
    #[test]
    fn serve_errors_print_each_cause_once() {
        let refused = || SysError::new(Op::PerfEventOpen, libc::EACCES);
        for error in [
            ServeError::NoPerfClock(Error::PerfEvent(refused())),
            ServeError::Calibration(CalibError::Open(refused())),
        ] {
            let printed = assert_each_cause_once(&error);
            assert!(printed.contains("Permission denied"), "{printed}");
            assert!(printed.contains("perf_event_paranoid"), "{printed}");
        }
        let unreadable =
            ServeError::PageUnreadable(ReadError::InvalidParameters(ParamError::ZeroMultiplier));
        let printed = assert_each_cause_once(&unreadable);
        assert!(printed.ends_with("time_mult is 0"), "{printed}");
    }
}
