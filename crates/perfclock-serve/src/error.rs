//! Why the server side could not publish: what failed, with the cause through `source()`.

use std::fmt;
use std::io;
use std::path::PathBuf;

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
