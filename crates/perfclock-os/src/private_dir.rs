//! A directory perfclock makes for another process inside that process's root (a container's
//! `/tmp`), to give it files it cannot otherwise reach (perfclock's JVMTI agent, a directory for
//! its jitdump), and takes away again.
//!
//! The parent is resolved inside the process's root without following any link
//! (`openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`); the directory is
//! made there by `mkdirat` at a fresh random name (a name taken is tried again, never reused),
//! mode 0700, and then reached only through its own descriptor: files go in with
//! `openat(O_CREAT | O_EXCL | O_NOFOLLOW)`, and [`PrivateDir::remove`] unlinks what is in it
//! through that descriptor (a link as a link) and the directory through its parent's.
//!
//! # Safety
//! `mkdirat`, `openat`, `unlinkat`, `fchown`, `fstat` and `getrandom` through libc with
//! NUL-terminated names and buffers this module owns; every descriptor is owned at once.
//! `openat2` is [`untrusted_file`](crate::untrusted_file)'s.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::untrusted_file::{openat2, Root};

/// How many random names are tried before giving up.
const ATTEMPTS: usize = 16;

/// A directory made inside a process's root; see the [module docs](self).
#[derive(Debug)]
pub struct PrivateDir {
    parent: OwnedFd,
    name: CString,
    dir: OwnedFd,
    path: PathBuf,
}

impl PrivateDir {
    /// Makes `PARENT/PREFIXxxxxxxxxxxxxxxxx` (16 random hex digits) under `root`, mode 0700.
    ///
    /// # Errors
    /// The parent cannot be resolved without a link (`ELOOP`), or is not a directory; the
    /// process is gone; `mkdirat` failed (a full or read-only file system).
    pub fn create(root: Root, parent: &Path, prefix: &str) -> io::Result<PrivateDir> {
        let parent_fd = open_parent(root, parent)?;
        for _ in 0..ATTEMPTS {
            let name = format!("{prefix}{:016x}", random()?);
            let c_name = CString::new(name.as_bytes()).map_err(|_| invalid())?;
            // SAFETY: a live directory descriptor and a NUL-terminated name.
            if unsafe { libc::mkdirat(parent_fd.as_raw_fd(), c_name.as_ptr(), 0o700) } != 0 {
                let error = io::Error::last_os_error();
                if error.raw_os_error() == Some(libc::EEXIST) {
                    continue;
                }
                return Err(error);
            }
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            let dir = openat(parent_fd.as_raw_fd(), &c_name, flags, 0)?;
            return Ok(PrivateDir {
                parent: parent_fd,
                name: c_name,
                dir,
                path: parent.join(name),
            });
        }
        Err(io::Error::from_raw_os_error(libc::EEXIST))
    }

    /// Its path as the process sees it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes a new file `name` in it with `mode`, a copy of what `from` reads: its device and
    /// inode.
    ///
    /// # Errors
    /// `name` exists (`EEXIST`) or is not one component; reading or writing failed.
    pub fn write_copy(&self, name: &str, from: &mut File, mode: u32) -> io::Result<(u64, u64)> {
        if name.contains('/') {
            return Err(invalid());
        }
        let c_name = CString::new(name).map_err(|_| invalid())?;
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        let mut file = File::from(openat(self.dir.as_raw_fd(), &c_name, flags, mode)?);
        let mut buffer = [0u8; 64 * 1024];
        loop {
            let read = from.read(&mut buffer)?;
            if read == 0 {
                break;
            }
            file.write_all(&buffer[..read])?;
        }
        file.sync_all()?;
        let metadata = file.metadata()?;
        std::fs::set_permissions(
            Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())),
            std::os::unix::fs::PermissionsExt::from_mode(mode),
        )?;
        Ok((
            std::os::unix::fs::MetadataExt::dev(&metadata),
            std::os::unix::fs::MetadataExt::ino(&metadata),
        ))
    }

    /// Gives the directory to `uid`/`gid` (root only): the process's user may then create files
    /// in it.
    ///
    /// # Errors
    /// `fchown`'s (`EPERM` without `CAP_CHOWN`).
    pub fn give_to(&self, uid: u32, gid: u32) -> io::Result<()> {
        // SAFETY: a live descriptor and two plain integers.
        if unsafe { libc::fchown(self.dir.as_raw_fd(), uid, gid) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Removes what is in it (each name once: a link is removed as a link, a directory left)
    /// and then the directory itself.
    ///
    /// # Errors
    /// The first failure; the directory stays where anything was left in it.
    pub fn remove(self) -> io::Result<()> {
        let listing = Path::new(&format!("/proc/self/fd/{}", self.dir.as_raw_fd())).to_owned();
        for entry in std::fs::read_dir(listing)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                continue;
            }
            let name = CString::new(entry.file_name().as_bytes()).map_err(|_| invalid())?;
            // SAFETY: a live directory descriptor and a NUL-terminated name; unlinkat follows
            // nothing.
            if unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: as above; the directory by its name in the parent we made it in.
        let rc = unsafe {
            libc::unlinkat(
                self.parent.as_raw_fd(),
                self.name.as_ptr(),
                libc::AT_REMOVEDIR,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn invalid() -> io::Error {
    io::Error::from(io::ErrorKind::InvalidInput)
}

/// `parent` resolved under `root` without a link, as a directory descriptor.
fn open_parent(root: Root, parent: &Path) -> io::Result<OwnedFd> {
    let root_dir = match root {
        Root::Here => None,
        Root::Process(pid) => Some(File::open(format!("/proc/{pid}/root"))?),
    };
    let dirfd = root_dir.as_ref().map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    let path = CString::new(parent.as_os_str().as_bytes()).map_err(|_| invalid())?;
    let resolve = libc::RESOLVE_NO_SYMLINKS
        | libc::RESOLVE_NO_MAGICLINKS
        | match root {
            Root::Here => 0,
            Root::Process(_) => libc::RESOLVE_IN_ROOT,
        };
    openat2(
        dirfd,
        &path,
        (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        resolve,
    )
    .map_err(io::Error::from_raw_os_error)
}

fn openat(dirfd: RawFd, name: &CString, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: a live directory descriptor and a NUL-terminated name; the mode is the variadic
    // argument O_CREAT reads.
    let fd = unsafe { libc::openat(dirfd, name.as_ptr(), flags, mode as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// 64 random bits from the kernel.
fn random() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    // SAFETY: the buffer is writable for its length.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if got != bytes.len() as isize {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from_ne_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_dir_holds_copies_and_goes() {
        let parent = tempfile::tempdir().unwrap();
        let dir = PrivateDir::create(Root::Here, parent.path(), ".perfclock-").unwrap();
        assert!(dir.path().starts_with(parent.path()));
        let source_path = parent.path().join("source");
        std::fs::write(&source_path, b"agent bytes").unwrap();
        let mut source = File::open(&source_path).unwrap();
        let id = dir.write_copy("libagent.so", &mut source, 0o644).unwrap();
        let copy = dir.path().join("libagent.so");
        assert_eq!(std::fs::read(&copy).unwrap(), b"agent bytes");
        let metadata = std::fs::metadata(&copy).unwrap();
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!((metadata.dev(), metadata.ino()), id);
        assert_eq!(metadata.permissions().mode() & 0o777, 0o644);
        let again = dir.write_copy("libagent.so", &mut source, 0o644);
        assert_eq!(again.unwrap_err().raw_os_error(), Some(libc::EEXIST));
        // What another user plants in it goes too, a link as a link.
        std::os::unix::fs::symlink(&source_path, dir.path().join("planted")).unwrap();
        let made = dir.path().to_owned();
        dir.remove().unwrap();
        assert!(!made.exists());
        assert!(source_path.exists(), "a link's target was removed");
    }

    #[test]
    fn a_link_in_the_parent_is_refused() {
        let parent = tempfile::tempdir().unwrap();
        let link = parent.path().join("link");
        std::os::unix::fs::symlink(parent.path(), &link).unwrap();
        let error = PrivateDir::create(Root::Here, &link, ".perfclock-").unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ELOOP));
    }
}
