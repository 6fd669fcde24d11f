//! The private directory beside OUT where perf writes its raw recording and post-processing
//! its intermediate files, and the names derived from OUT's path that it and the jitdump
//! directories are made with.

use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::RecordError;

/// The directory `path` is in (`.` for a bare file name).
pub(super) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// OUT's file name, for the names of what is created beside it.
pub(super) fn file_name(output: &Path) -> String {
    output.file_name().map_or_else(
        || "perf.data".into(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// The private (0700, mkdtemp) directory beside OUT that holds perf's raw recording and the
/// intermediate files: nobody else can plant or read anything in it, and a final rename from
/// it into OUT stays on one file system. Removed when dropped, unless kept.
pub(super) struct WorkDir {
    dir: tempfile::TempDir,
    /// perf record's output, created here exclusively before perf opens it.
    pub(super) raw: PathBuf,
}

impl WorkDir {
    pub(super) fn create(output: &Path) -> Result<Self, RecordError> {
        let parent = parent_dir(output);
        let dir = tempfile::Builder::new()
            .prefix(&format!(".{}.perfclock-", file_name(output)))
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(parent)
            .map_err(|source| RecordError::WorkDir {
                dir: parent.to_owned(),
                source,
            })?;
        let raw = dir.path().join(format!("{}.raw", file_name(output)));
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&raw)
            .map_err(|source| RecordError::CreateRaw {
                path: raw.clone(),
                source,
            })?;
        Ok(Self { dir, raw })
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Keeps the directory and the raw recording in it (after an error), removing the rest.
    pub(super) fn keep_raw(self) {
        if let Ok(entries) = fs::read_dir(self.dir.path()) {
            for entry in entries.flatten() {
                if entry.path() != self.raw {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        let _ = self.dir.keep();
    }
}
