//! `/tmp/perf-<pid>.map` (`perfmap=1`): `START SIZE name` lines in hex, which `perf report` and
//! `perf script` read without `perf inject`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The map of this process, written one line per load so perf sees it while the JVM runs.
#[derive(Debug)]
pub struct PerfMap {
    path: PathBuf,
    file: Mutex<File>,
}

impl PerfMap {
    /// Creates `/tmp/perf-<pid>.map` (see [`create_exclusive`]).
    ///
    /// # Errors
    /// The creation's error, with the path.
    pub fn create() -> Result<PerfMap, String> {
        let dir = Path::new("/tmp");
        let name = format!("perf-{}.map", std::process::id());
        let file = create_exclusive(dir, &name)
            .map_err(|e| format!("cannot create {}: {e}", dir.join(&name).display()))?;
        Ok(PerfMap {
            path: dir.join(name),
            file: Mutex::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `addr size name`; a failed write is returned (the line may be lost).
    pub fn add(&self, addr: u64, size: u64, name: &[u8]) -> io::Result<()> {
        let mut line = format!("{addr:x} {size:x} ").into_bytes();
        // A line per symbol: a newline in a name would start a bogus line.
        line.extend(name.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(&line)
    }
}

/// Creates `dir/name` for writing, never following a symlink and never reusing a file this
/// process did not create: `O_CREAT|O_EXCL|O_NOFOLLOW`. A file already there (a stale map of an
/// earlier process with this pid) is replaced only if it is a regular file owned by our
/// effective uid; anything else (a symlink, another user's file) is refused.
fn create_exclusive(dir: &Path, name: &str) -> io::Result<File> {
    let path = dir.join(name);
    let create = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
    };
    match create() {
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(&path)?;
            // SAFETY: geteuid has no preconditions and cannot fail.
            let euid = unsafe { libc::geteuid() };
            if !meta.file_type().is_file() || meta.uid() != euid {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "it exists and is not a regular file of uid {euid} (a symlink or another \
                         user's file); remove it, or run without perfmap=1"
                    ),
                ));
            }
            std::fs::remove_file(&path)?;
            create()
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_replaces_our_stale_file_and_refuses_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut file = create_exclusive(dir, "a.map").unwrap();
        file.write_all(b"old\n").unwrap();
        drop(file);
        // Our own regular file: replaced, not appended to.
        let mut file = create_exclusive(dir, "a.map").unwrap();
        file.write_all(b"new\n").unwrap();
        assert_eq!(std::fs::read(dir.join("a.map")).unwrap(), b"new\n");

        std::fs::write(dir.join("target"), b"precious\n").unwrap();
        std::os::unix::fs::symlink(dir.join("target"), dir.join("b.map")).unwrap();
        let error = create_exclusive(dir, "b.map").unwrap_err();
        assert!(error.to_string().contains("not a regular file"), "{error}");
        assert_eq!(std::fs::read(dir.join("target")).unwrap(), b"precious\n");
        assert!(std::fs::symlink_metadata(dir.join("b.map"))
            .unwrap()
            .file_type()
            .is_symlink());

        std::fs::create_dir(dir.join("c.map")).unwrap();
        assert!(create_exclusive(dir, "c.map").is_err());
    }
}
