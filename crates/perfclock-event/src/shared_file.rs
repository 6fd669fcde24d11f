//! Creating a file in a directory other users can write (`/tmp`, a JIT's dump directory), at a
//! name anyone can predict (`jit-<pid>.dump`, `marker-<pid>.txt`, `perf-<pid>.map`).
//!
//! The file is created with `openat(dirfd, name, O_CREAT | O_EXCL | O_NOFOLLOW)`: it is new and
//! this process's, never a link's target and never a file someone else prepared. `O_EXCL` rather
//! than `O_TMPFILE` + `linkat`: the file must be visible under its name from the start (perf finds
//! a jitdump through the mapping of the named file), `linkat` refuses an existing name just as
//! `O_EXCL` does, and `O_TMPFILE` is missing on some file systems (NFS, older overlayfs).
//!
//! Whatever is already at the name (a stale file of an earlier process with the same pid) is
//! replaced only if `fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW)` shows a regular file of the
//! caller's effective user; it is unlinked through the same directory descriptor and the create
//! retried with `O_EXCL`. A race cannot redirect that: `unlinkat` removes a name, never follows
//! one, and the create that follows refuses whatever appeared meanwhile. Anything else (a link, a
//! FIFO, a device, a directory, another user's file) is a [`CreateError::Taken`] naming the path,
//! the kind and the owner.
//!
//! # Safety
//! The unsafe calls are `openat`, `fstatat`, `unlinkat`, `geteuid` and `getpwuid_r`, with
//! NUL-terminated names and out-buffers this module owns and sizes; a descriptor `openat`
//! returns is owned by the `File` made from it at once. Each call says why it is sound.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};

use crate::error::CreateError;

/// What a name was found to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file (of another user, when refused).
    Regular,
    /// A symbolic link, dangling or not.
    Symlink,
    /// A directory.
    Directory,
    /// A FIFO.
    Fifo,
    /// A socket.
    Socket,
    /// A character or block device.
    Device,
}

impl FileKind {
    fn of(mode: libc::mode_t) -> FileKind {
        match mode & libc::S_IFMT {
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR | libc::S_IFBLK => FileKind::Device,
            _ => FileKind::Regular,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            FileKind::Regular => "a regular file",
            FileKind::Symlink => "a symbolic link",
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::Device => "a device node",
        }
    }
}

/// What was found at a name [`create_exclusive`] would not replace; it was left as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenName {
    /// The full path of the name.
    pub path: PathBuf,
    /// What is there.
    pub kind: FileKind,
    /// Its owner's uid.
    pub owner_uid: u32,
    /// Its owner's user name, where the user database has one.
    pub owner_name: Option<String>,
    /// The caller's effective uid.
    pub caller_uid: u32,
}

impl fmt::Display for TakenName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} already exists and is {}",
            self.path.display(),
            self.kind.describe()
        )?;
        match &self.owner_name {
            Some(name) => write!(f, " owned by {name} (uid {})", self.owner_uid)?,
            None => write!(f, " owned by uid {}", self.owner_uid)?,
        }
        write!(
            f,
            "; perfclock creates it only where nothing is, and replaces only a regular file of \
             its own user (uid {}), so as never to write through a planted link or into a file \
             another user controls: remove it if it is stale, or write into a directory only you \
             can write",
            self.caller_uid
        )
    }
}

/// How often a create is retried after removing a stale file (another process may create the
/// name again in between; past this the name is reported as taken or the error returned).
const ATTEMPTS: usize = 3;

/// Creates `dir/name` read-write with `mode` (less the umask), `O_CLOEXEC`, exclusively: see the
/// [module docs](self). `name` is one path component.
///
/// # Errors
/// [`CreateError::Taken`] if a link, a FIFO, a device, a directory or another user's file is
/// at the name (nothing is changed); [`CreateError::Io`] if `dir` cannot be opened as a directory
/// or the create fails (permissions, a full disk, a name that is not one component).
pub fn create_exclusive(dir: &Path, name: &str, mode: u32) -> Result<File, CreateError> {
    let path = dir.join(name);
    let io_error = |path: &Path| {
        let path = path.to_owned();
        move |source| CreateError::Io { path, source }
    };
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(io_error(&path)(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the file name must be one path component",
        )));
    }
    let c_name = CString::new(name.as_bytes())
        .map_err(|_| io_error(&path)(io::Error::from(io::ErrorKind::InvalidInput)))?;
    let dir_file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(io_error(dir))?;
    let dir_fd = dir_file.as_raw_fd();
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    let mut last = io::Error::from_raw_os_error(libc::EEXIST);
    for _ in 0..ATTEMPTS {
        // SAFETY: a live directory descriptor and a NUL-terminated name; the mode is passed as
        // the variadic argument O_CREAT requires.
        let fd = unsafe { libc::openat(dir_fd, c_name.as_ptr(), flags, mode as libc::c_uint) };
        if fd >= 0 {
            // SAFETY: `fd` was just opened and is owned by nothing else.
            return Ok(unsafe { File::from_raw_fd(fd) });
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EEXIST) {
            return Err(io_error(&path)(error));
        }
        remove_stale(dir_fd, &c_name, &path)?;
        last = error;
    }
    Err(io_error(&path)(last))
}

/// Removes `dir/name` if it is a regular file of the caller's user, for [`create_exclusive`] or
/// for a writer that renames its own file over the name; a name that does not exist is fine.
///
/// # Errors
/// As [`create_exclusive`].
pub fn remove_stale_at(dir: &Path, name: &str) -> Result<(), CreateError> {
    let path = dir.join(name);
    let c_name = CString::new(name.as_bytes()).map_err(|_| CreateError::Io {
        path: path.clone(),
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    let dir_file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|source| CreateError::Io {
            path: dir.to_owned(),
            source,
        })?;
    remove_stale(dir_file.as_raw_fd(), &c_name, &path)
}

fn remove_stale(dir_fd: libc::c_int, name: &CStr, path: &Path) -> Result<(), CreateError> {
    // SAFETY: an all-zero `stat` is a valid value for the kernel to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a live directory descriptor, a NUL-terminated name, a live `stat`.
    let rc = unsafe { libc::fstatat(dir_fd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc != 0 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ENOENT) => Ok(()), // gone meanwhile: create again
            _ => Err(CreateError::Io {
                path: path.to_owned(),
                source: error,
            }),
        };
    }
    // SAFETY: geteuid has no preconditions.
    let caller_uid = unsafe { libc::geteuid() };
    let kind = FileKind::of(st.st_mode);
    if kind != FileKind::Regular || st.st_uid != caller_uid {
        return Err(CreateError::Taken(TakenName {
            path: path.to_owned(),
            kind,
            owner_uid: st.st_uid,
            owner_name: user_name(st.st_uid),
            caller_uid,
        }));
    }
    // SAFETY: a live directory descriptor and a NUL-terminated name; unlinkat removes the name
    // whatever it is by now, and follows nothing.
    let rc = unsafe { libc::unlinkat(dir_fd, name.as_ptr(), 0) };
    if rc != 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ENOENT) {
            return Err(CreateError::Io {
                path: path.to_owned(),
                source: error,
            });
        }
    }
    Ok(())
}

/// The user name of `uid` from the user database, if it has one.
fn user_name(uid: u32) -> Option<String> {
    let mut buffer = vec![0u8; 4096];
    // SAFETY: an all-zero `passwd` is a valid value for getpwuid_r to overwrite.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: live `entry`, `buffer` of the length given, and `result`; getpwuid_r writes only
    // into them and points the strings of `entry` into `buffer`.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success `pw_name` points to a NUL-terminated string inside `buffer`, which is
    // alive here.
    let name = unsafe { CStr::from_ptr(entry.pw_name) };
    Some(String::from_utf8_lossy(name.to_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pce-shared-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn creates_new_and_replaces_own_stale_files_only() {
        let dir = temp_dir("basic");
        create_exclusive(&dir, "a", 0o600).unwrap();
        // Our own regular file: replaced by a new, empty one.
        std::fs::write(dir.join("a"), b"stale").unwrap();
        create_exclusive(&dir, "a", 0o600).unwrap();
        assert_eq!(std::fs::read(dir.join("a")).unwrap(), b"");
        // A link, even to our own file, is not followed and not removed.
        std::os::unix::fs::symlink(dir.join("a"), dir.join("link")).unwrap();
        match create_exclusive(&dir, "link", 0o600) {
            Err(CreateError::Taken(taken)) => {
                assert_eq!(taken.kind, FileKind::Symlink);
                assert_eq!(taken.path, dir.join("link"));
            }
            other => panic!("{other:?}"),
        }
        assert!(std::fs::symlink_metadata(dir.join("link"))
            .unwrap()
            .file_type()
            .is_symlink());
        std::fs::create_dir(dir.join("sub")).unwrap();
        let error = create_exclusive(&dir, "sub", 0o600).unwrap_err();
        assert!(matches!(&error, CreateError::Taken(t) if t.kind == FileKind::Directory));
        assert!(
            error.to_string().contains("is a directory owned by"),
            "{error}"
        );
        for bad in ["", ".", "..", "x/y"] {
            assert!(matches!(
                create_exclusive(&dir, bad, 0o600),
                Err(CreateError::Io { .. })
            ));
        }
        assert!(matches!(
            create_exclusive(&dir.join("absent"), "a", 0o600),
            Err(CreateError::Io { .. })
        ));
        remove_stale_at(&dir, "a").unwrap();
        remove_stale_at(&dir, "a").unwrap(); // absent is fine
        assert!(!dir.join("a").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
