//! The private directory beside OUT (`OUT.jitted-XXXXXX`, mode 0700, made with `mkdtemp`) where
//! the dumps' copies go and `perf inject --jit` then writes its `jitted-*.so`: only perfclock
//! writes into it, and no other user reads what root copied there.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::output::{OutputError, TempFiles};

/// The copies' directory; removed with what is in it when dropped, unless kept.
#[derive(Debug)]
pub struct CopiesDir {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl CopiesDir {
    /// Makes a new directory beside `output`, registered with `temps`.
    pub(crate) fn create(output: &Path, temps: &dyn TempFiles) -> Result<Self, OutputError> {
        let parent = match output.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let failed = |error| OutputError::CopiesDir {
            parent: parent.to_owned(),
            error,
        };
        let parent = parent.canonicalize().map_err(failed)?;
        let name = output.file_name().unwrap_or_default().to_string_lossy();
        let dir = tempfile::Builder::new()
            .prefix(&format!("{name}.jitted-"))
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(&parent)
            .map_err(failed)?;
        let path = dir.path().to_path_buf();
        temps.register(&path);
        // mkdtemp's mode goes through the umask, which can only take bits away from 0700.
        Ok(CopiesDir {
            dir: Some(dir),
            path,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the directory: the output names the copies, and `perf inject --jit` writes its
    /// images beside them, which perf report reads.
    pub fn keep(mut self, temps: &dyn TempFiles) -> PathBuf {
        if let Some(dir) = self.dir.take() {
            let _ = dir.keep();
        }
        temps.forget(&self.path);
        self.path.clone()
    }
}

/// The copies' directory, made when the first copy needs it.
pub(crate) struct LazyCopies<'a> {
    beside: &'a Path,
    temps: &'a dyn TempFiles,
    dir: Option<CopiesDir>,
}

impl<'a> LazyCopies<'a> {
    /// A directory beside `beside`, registered with `temps`, once asked for.
    pub(crate) fn new(beside: &'a Path, temps: &'a dyn TempFiles) -> Self {
        LazyCopies {
            beside,
            temps,
            dir: None,
        }
    }

    /// The directory, made now if not yet.
    pub(crate) fn path(&mut self) -> Result<&Path, OutputError> {
        if self.dir.is_none() {
            self.dir = Some(CopiesDir::create(self.beside, self.temps)?);
        }
        Ok(self.dir.as_ref().map_or(self.beside, CopiesDir::path))
    }

    /// The directory, if one was made.
    pub(crate) fn into_dir(self) -> Option<CopiesDir> {
        self.dir
    }
}
