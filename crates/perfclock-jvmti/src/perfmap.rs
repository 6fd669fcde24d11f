//! `/tmp/perf-<pid>.map` (`perfmap=1`): `START SIZE name` lines in hex, which `perf report` and
//! `perf script` read without `perf inject`.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use perfclock_os::shared_file::create_exclusive;

use crate::error::chain;

/// The map of this process, written one line per load so perf sees it while the JVM runs.
#[derive(Debug)]
pub(crate) struct PerfMap {
    path: PathBuf,
    file: Mutex<File>,
}

impl PerfMap {
    /// Creates `/tmp/perf-<pid>.map` exclusively: never through a link, never into a file this
    /// process did not create; a stale map of the same name is replaced only if it is a regular
    /// file of our user that no live writer holds (perfclock-os's `create_exclusive`: the
    /// `File` kept here holds its lock while the agent runs).
    ///
    /// # Errors
    /// The creation's error, with the path.
    pub(crate) fn create() -> Result<PerfMap, String> {
        let dir = Path::new("/tmp");
        let name = format!("perf-{}.map", std::process::id());
        let file = create_exclusive(dir, &name, 0o644).map_err(|e| chain(&e))?;
        Ok(PerfMap {
            path: dir.join(name),
            file: Mutex::new(file),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `addr size name`; a failed write is returned (the line may be lost).
    pub(crate) fn add(&self, addr: u64, size: u64, name: &[u8]) -> io::Result<()> {
        let mut line = format!("{addr:x} {size:x} ").into_bytes();
        // A line per symbol: a newline in a name would start a bogus line.
        line.extend(name.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        file.write_all(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_replaces_our_stale_file_and_refuses_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut file = create_exclusive(dir, "a.map", 0o644).unwrap();
        file.write_all(b"old\n").unwrap();
        drop(file);
        // Our own regular file: replaced, not appended to.
        let mut file = create_exclusive(dir, "a.map", 0o644).unwrap();
        file.write_all(b"new\n").unwrap();
        assert_eq!(std::fs::read(dir.join("a.map")).unwrap(), b"new\n");

        std::fs::write(dir.join("target"), b"precious\n").unwrap();
        std::os::unix::fs::symlink(dir.join("target"), dir.join("b.map")).unwrap();
        let error = create_exclusive(dir, "b.map", 0o644).unwrap_err();
        assert!(error.to_string().contains("is a symbolic link"), "{error}");
        assert_eq!(std::fs::read(dir.join("target")).unwrap(), b"precious\n");
        assert!(std::fs::symlink_metadata(dir.join("b.map"))
            .unwrap()
            .file_type()
            .is_symlink());

        std::fs::create_dir(dir.join("c.map")).unwrap();
        assert!(create_exclusive(dir, "c.map", 0o644).is_err());
    }
}
