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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::os::unix::fs::MetadataExt;

    use perfclock_perfdata::PerfDataError;

    /// What was registered and forgotten, in order.
    #[derive(Default)]
    struct Recorded(RefCell<Vec<(&'static str, PathBuf)>>);

    impl TempFiles for Recorded {
        fn register(&self, path: &Path) {
            self.0.borrow_mut().push(("register", path.to_owned()));
        }
        fn forget(&self, path: &Path) {
            self.0.borrow_mut().push(("forget", path.to_owned()));
        }
        fn commit(
            &self,
            _: &Path,
            rename: &mut dyn FnMut() -> Result<(), PerfDataError>,
        ) -> Result<(), PerfDataError> {
            rename()
        }
    }

    /// Asserts `path` is a directory (not a link to one) of mode 0700 in `parent`, named after
    /// OUT's file name `out`.
    fn assert_private_beside(path: &Path, parent: &Path, out: &str) {
        let metadata = fs::symlink_metadata(path).unwrap();
        assert!(metadata.file_type().is_dir(), "{path:?}");
        assert_eq!(metadata.mode() & 0o7777, 0o700, "{path:?}");
        assert_eq!(path.parent(), Some(parent));
        let name = path.file_name().unwrap().to_str().unwrap();
        let prefix = format!("{out}.jitted-");
        assert!(
            name.starts_with(&prefix) && name.len() > prefix.len(),
            "{name}"
        );
    }

    #[test]
    fn the_directory_is_private_beside_out_and_registered() {
        let dir = tempfile::tempdir().unwrap();
        let parent = dir.path().canonicalize().unwrap();
        let temps = Recorded::default();
        let copies = CopiesDir::create(&dir.path().join("out.data"), &temps).unwrap();
        assert_private_beside(copies.path(), &parent, "out.data");
        assert_eq!(*temps.0.borrow(), [("register", copies.path().to_owned())]);
    }

    #[test]
    fn each_is_a_new_directory() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("out.data");
        let a = CopiesDir::create(&output, &crate::NoSignals).unwrap();
        let b = CopiesDir::create(&output, &crate::NoSignals).unwrap();
        assert_ne!(a.path(), b.path());
    }

    #[test]
    fn dropped_it_is_removed_with_what_is_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let copies = CopiesDir::create(&dir.path().join("out.data"), &crate::NoSignals).unwrap();
        let path = copies.path().to_owned();
        fs::write(path.join("jit-1.dump"), b"copy").unwrap();
        fs::create_dir(path.join("map-0")).unwrap();
        fs::write(path.join("map-0/jit-2.dump"), b"copy").unwrap();
        drop(copies);
        assert!(fs::symlink_metadata(&path).is_err(), "{path:?} is left");
    }

    #[test]
    fn kept_it_stays_and_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let temps = Recorded::default();
        let copies = CopiesDir::create(&dir.path().join("out.data"), &temps).unwrap();
        let made = copies.path().to_owned();
        fs::write(made.join("jit-1.dump"), b"copy").unwrap();
        let kept = copies.keep(&temps);
        assert_eq!(kept, made);
        assert_eq!(fs::read(kept.join("jit-1.dump")).unwrap(), b"copy");
        assert_eq!(
            *temps.0.borrow(),
            [("register", made.clone()), ("forget", made)]
        );
    }

    #[test]
    fn a_parent_reached_through_a_symlink_is_resolved_first() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let copies = CopiesDir::create(&link.join("out.data"), &crate::NoSignals).unwrap();
        // Named by the real directory's path: no link in it for anyone to swap later.
        assert_private_beside(copies.path(), &real.canonicalize().unwrap(), "out.data");
    }

    #[test]
    fn a_planted_link_with_the_directorys_prefix_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::create_dir(&victim).unwrap();
        // Links named as the directory could be, pointing at the victim.
        for suffix in ["", "XXXXXX", "aaaaaa"] {
            let planted = dir.path().join(format!("out.data.jitted-{suffix}"));
            std::os::unix::fs::symlink(&victim, planted).unwrap();
        }
        let copies = CopiesDir::create(&dir.path().join("out.data"), &crate::NoSignals).unwrap();
        assert_private_beside(
            copies.path(),
            &dir.path().canonicalize().unwrap(),
            "out.data",
        );
        assert_eq!(fs::read_dir(&victim).unwrap().count(), 0);
        drop(copies);
        // Removing it left the victim and the links alone.
        assert!(victim.is_dir());
        assert!(fs::symlink_metadata(dir.path().join("out.data.jitted-aaaaaa")).is_ok());
    }

    #[test]
    fn a_missing_parent_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let temps = Recorded::default();
        match CopiesDir::create(&missing.join("out.data"), &temps) {
            Err(OutputError::CopiesDir { parent, error }) => {
                assert_eq!(parent, missing);
                assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        assert!(temps.0.borrow().is_empty());
    }

    #[test]
    fn lazy_copies_make_one_directory_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("out.data");
        let temps = Recorded::default();
        let never = LazyCopies::new(&output, &temps);
        assert!(never.into_dir().is_none());
        assert!(temps.0.borrow().is_empty());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);

        let mut lazy = LazyCopies::new(&output, &temps);
        let first = lazy.path().unwrap().to_owned();
        let again = lazy.path().unwrap().to_owned();
        assert_eq!(first, again);
        assert_eq!(temps.0.borrow().len(), 1);
        let made = lazy.into_dir().unwrap();
        assert_eq!(made.path(), first);
        assert_private_beside(&first, &dir.path().canonicalize().unwrap(), "out.data");
    }
}
