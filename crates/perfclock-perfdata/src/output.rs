//! OUT: a new path or an existing regular file, written through a temporary file in its
//! directory and renamed over it when complete, so OUT is either what it was or the complete
//! new file. Devices, FIFOs, sockets, directories and symlinks are refused before anything is
//! written: a rename would replace them with a regular file (as root, `-o /dev/null` would
//! replace the system's `/dev/null`).

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

use crate::error::{PatchError, PerfDataError};

/// The prefix of the temporary file in OUT's directory.
pub const TEMP_PREFIX: &str = ".perfclock-out-";

/// The least an owner can do with OUT: read and write it.
const OWNER_READ_WRITE: u32 = 0o600;

/// Refuses an OUT that exists and is not a regular file; a missing OUT is fine.
///
/// # Errors
/// [`PatchError::OutputKind`] naming what OUT is; [`PatchError::Output`] if it cannot be
/// looked at.
pub fn check_output_path(path: &Path) -> Result<(), PerfDataError> {
    let file_type = match fs::symlink_metadata(path) {
        Ok(metadata) => metadata.file_type(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => {
            return Err(PatchError::Output {
                path: path.to_path_buf(),
                error,
            }
            .into())
        }
    };
    let kind = if file_type.is_file() {
        return Ok(());
    } else if file_type.is_dir() {
        "a directory"
    } else if file_type.is_symlink() {
        "a symbolic link (the rename would replace the link, not its target)"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(PatchError::OutputKind {
        path: path.to_path_buf(),
        kind,
    }
    .into())
}

/// OUT being written: a temporary file beside it until [`OutputFile::commit`].
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    temp: NamedTempFile,
    mode: u32,
}

impl OutputFile {
    /// Checks `path` ([`check_output_path`]) and creates the temporary file in its directory.
    /// OUT will get permission bits `mode | 0o600`.
    ///
    /// # Errors
    /// [`PatchError::OutputKind`] or [`PatchError::Output`].
    pub fn create(path: &Path, mode: u32) -> Result<Self, PerfDataError> {
        check_output_path(path)?;
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let temp = tempfile::Builder::new()
            .prefix(TEMP_PREFIX)
            .tempfile_in(dir)
            .map_err(|error| PatchError::Output {
                path: path.to_path_buf(),
                error,
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            temp,
            mode: (mode & 0o777) | OWNER_READ_WRITE,
        })
    }

    /// Where the bytes go until the commit: for a signal handler that removes it.
    pub fn temp_path(&self) -> &Path {
        self.temp.path()
    }

    /// The temporary file, to write into.
    pub fn file(&mut self) -> &mut File {
        self.temp.as_file_mut()
    }

    /// Flushes, sets the mode, checks OUT again, and renames the temporary file over OUT.
    /// On error the temporary file is removed.
    ///
    /// # Errors
    /// [`PatchError::OutputKind`] if OUT became something other than a regular file since
    /// [`OutputFile::create`]; [`PatchError::Output`] if a step fails.
    pub fn commit(mut self) -> Result<(), PerfDataError> {
        let error = |error| PatchError::Output {
            path: self.path.clone(),
            error,
        };
        self.temp.as_file_mut().flush().map_err(error)?;
        fs::set_permissions(self.temp.path(), fs::Permissions::from_mode(self.mode))
            .map_err(error)?;
        check_output_path(&self.path)?;
        let path = self.path.clone();
        self.temp
            .persist(&path)
            .map_err(|failed| PatchError::Output {
                path,
                error: failed.error,
            })?;
        Ok(())
    }
}
