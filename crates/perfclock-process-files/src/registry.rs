//! One open file per process and directory.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// Which file: the directory (device and inode, whatever name reached it) and the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileKey {
    /// The directory's device.
    pub dev: u64,
    /// The directory's inode.
    pub ino: u64,
    /// The process writing the file.
    pub pid: u32,
}

impl FileKey {
    /// The key of `dir` (symlinks followed) for process `pid`.
    ///
    /// # Errors
    /// `stat(2)`'s, for a missing or unreadable `dir`.
    pub fn of(dir: &Path, pid: u32) -> io::Result<FileKey> {
        let meta = fs::metadata(dir)?;
        if !meta.is_dir() {
            return Err(io::Error::from(io::ErrorKind::NotADirectory));
        }
        Ok(FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
            pid,
        })
    }
}

/// How long the registry keeps a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Until the process exits, handles or not: a marker file stays mapped, so perf attaching
    /// later still sees it, and a reopen finds the same file.
    UntilExit,
    /// While a handle holds it: the last handle closes the file (a jitdump's close record).
    WhileOpen,
}

#[derive(Debug)]
enum Held<T> {
    Strong(Arc<T>),
    Weak(Weak<T>),
}

impl<T> Held<T> {
    fn get(&self) -> Option<Arc<T>> {
        match self {
            Held::Strong(file) => Some(Arc::clone(file)),
            Held::Weak(file) => file.upgrade(),
        }
    }
}

/// The open files of one kind in this process, by [`FileKey`].
#[derive(Debug)]
pub struct Registry<T> {
    retention: Retention,
    files: Mutex<Vec<(FileKey, Held<T>)>>,
}

impl<T> Registry<T> {
    /// An empty registry (for a `static`).
    pub const fn new(retention: Retention) -> Registry<T> {
        Registry {
            retention,
            files: Mutex::new(Vec::new()),
        }
    }

    /// The registry, locked: look up, add and remove under one lock, so two opens of one
    /// directory (by any names) never both create its file.
    pub fn lock(&self) -> Registered<'_, T> {
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        files.retain(|(_, file)| matches!(file, Held::Strong(_)) || file.get().is_some());
        Registered {
            retention: self.retention,
            files,
        }
    }
}

/// A locked [`Registry`].
#[derive(Debug)]
pub struct Registered<'a, T> {
    retention: Retention,
    files: MutexGuard<'a, Vec<(FileKey, Held<T>)>>,
}

impl<T> Registered<'_, T> {
    /// The open file of `key`.
    pub fn get(&self, key: FileKey) -> Option<Arc<T>> {
        self.files
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, file)| file.get())
    }

    /// Records `file` as `key`'s open file.
    pub fn insert(&mut self, key: FileKey, file: &Arc<T>) {
        let held = match self.retention {
            Retention::UntilExit => Held::Strong(Arc::clone(file)),
            Retention::WhileOpen => Held::Weak(Arc::downgrade(file)),
        };
        self.files.retain(|(k, _)| *k != key);
        self.files.push((key, held));
    }

    /// Forgets `key`'s file (its last handle is closing it).
    pub fn remove(&mut self, key: FileKey) {
        self.files.retain(|(k, _)| *k != key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_one_directory_share_a_key() {
        let dir = std::env::temp_dir().join(format!("procfile-key-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
        let real = FileKey::of(&dir.join("real"), 1).unwrap();
        assert_eq!(FileKey::of(&dir.join("link"), 1).unwrap(), real);
        assert_eq!(FileKey::of(&dir.join("real/../real/."), 1).unwrap(), real);
        assert_ne!(FileKey::of(&dir.join("real"), 2).unwrap(), real);
        assert_ne!(FileKey::of(&dir, 1).unwrap(), real);
        fs::write(dir.join("file"), b"").unwrap();
        let not_dir = FileKey::of(&dir.join("file"), 1).unwrap_err();
        assert_eq!(not_dir.kind(), io::ErrorKind::NotADirectory);
        fs::remove_dir_all(&dir).unwrap();
    }

    fn key(ino: u64) -> FileKey {
        FileKey {
            dev: 1,
            ino,
            pid: 1,
        }
    }

    #[test]
    fn retention_until_exit_keeps_files_without_handles() {
        let registry = Registry::new(Retention::UntilExit);
        registry.lock().insert(key(1), &Arc::new("a"));
        assert_eq!(registry.lock().get(key(1)).as_deref(), Some(&"a"));
        assert!(registry.lock().get(key(2)).is_none());
    }

    #[test]
    fn retention_while_open_forgets_closed_files() {
        let registry = Registry::new(Retention::WhileOpen);
        let file = Arc::new("a");
        registry.lock().insert(key(1), &file);
        assert_eq!(registry.lock().get(key(1)).as_deref(), Some(&"a"));
        drop(file);
        assert!(registry.lock().get(key(1)).is_none());
        assert!(registry.lock().files.is_empty());
        let file = Arc::new("b");
        registry.lock().insert(key(1), &file);
        registry.lock().remove(key(1));
        assert!(registry.lock().get(key(1)).is_none());
    }
}
