//! Files another user wrote and perfclock must read (a runtime's jitdump, its time conversion
//! record), opened so that whoever controls the path cannot make perfclock read anything else:
//!
//! - resolved with `openat2(2)` and `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: the paths
//!   perfclock is given come from the kernel (`/proc/PID/maps`, a perf `MMAP2` record), which
//!   writes them with every link resolved, so a link anywhere in the path now means the path
//!   was changed since, and it is refused (`ELOOP`); for a process in another mount namespace
//!   (a container) the path is resolved inside that process's root with `RESOLVE_IN_ROOT`, so
//!   not even `..` leaves it;
//! - the result must be a regular file with one link (a hard link to another user's file is
//!   refused whatever `fs.protected_hardlinks` says), at most a stated size, and not mostly
//!   holes (a sparse file claims gigabytes it does not hold);
//! - it is then opened for reading with the credentials of the file's owner and no
//!   supplementary groups, on a thread of its own, when perfclock runs as root and the owner is
//!   someone else: the file's own permissions decide, as they would for its owner, and root's
//!   privileges are not lent to the path. The reopen goes through the first open's descriptor
//!   (`/proc/thread-self/fd/N`), so it is the same inode.
//!
//! # Safety
//! `openat2` through `libc::syscall` with a pointer to a path that outlives the call and to an
//! `open_how` on the stack; `fstat` into a zeroed `stat`. The descriptors are owned at once.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::peer::{become_user_on_this_thread, effective_uid};

/// A file larger than this is never taken for mostly holes (below it, reading the holes costs
/// nothing worth refusing for).
const SPARSE_CHECK_FROM_BYTES: u64 = 1 << 20;
/// A file whose blocks hold less than `1 / SPARSE_RATIO` of its length is refused as sparse:
/// runtimes append to their dumps, which leaves no holes; compressing file systems report fewer
/// blocks, by less than this.
const SPARSE_RATIO: u64 = 8;

/// Where a path is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    /// This process's root and mount namespace.
    Here,
    /// Process `pid`'s root (`/proc/PID/root`): its mount namespace, its `/`. The path is
    /// resolved inside it; the process must be alive.
    Process(u32),
}

impl Root {
    /// [`Root::Here`] if process `pid` shares this process's mount namespace (or is gone: its
    /// path can only be looked for here), [`Root::Process`] if it has another one.
    pub fn of_process(pid: u32) -> Root {
        let namespace = |path: &str| std::fs::metadata(path).map(|m| (m.dev(), m.ino()));
        match (
            namespace("/proc/self/ns/mnt"),
            namespace(&format!("/proc/{pid}/ns/mnt")),
        ) {
            (Ok(ours), Ok(theirs)) if ours != theirs => Root::Process(pid),
            _ => Root::Here,
        }
    }
}

/// An untrusted file, open for reading.
#[derive(Debug)]
pub struct UntrustedFile {
    /// Open for reading, at offset 0.
    pub file: File,
    /// Its length when opened: read no further (it may be growing, or change).
    pub len: u64,
    /// Its owner's uid.
    pub uid: u32,
    /// Its device and inode.
    pub id: (u64, u64),
}

impl UntrustedFile {
    /// Looks at the open file again (held while its writer went on, or its path went away):
    /// still a regular file within `max_bytes` and not mostly holes; its length now. Its names
    /// are not counted again: the file may have none left.
    ///
    /// # Errors
    /// As [`open_untrusted`]'s checks.
    pub fn refresh(&mut self, max_bytes: u64) -> Result<(), UntrustedFileError> {
        let stat =
            fstat(self.file.as_raw_fd()).map_err(|errno| UntrustedFileError::Resolve { errno })?;
        check_shape(&stat, max_bytes, false)?;
        self.len = stat.st_size as u64;
        Ok(())
    }
}

/// Why an untrusted file was not opened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UntrustedFileError {
    /// The process whose root was asked for is gone or not ours to enter (errno).
    ProcessRoot {
        /// The process.
        pid: u32,
        /// The errno of opening `/proc/PID/root`.
        errno: i32,
    },
    /// The path does not resolve to a file without following a link (`ELOOP`), or is gone
    /// (`ENOENT`), or the kernel refused (`ENOSYS` before Linux 5.6).
    Resolve {
        /// The errno.
        errno: i32,
    },
    /// Not a regular file (a FIFO, a device, a directory, a socket).
    NotRegular {
        /// What it is.
        kind: &'static str,
    },
    /// A second name links to it.
    Linked {
        /// Its link count.
        links: u64,
    },
    /// Longer than the caller's bound.
    TooLarge {
        /// Its length.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// Mostly holes.
    Sparse {
        /// Its length.
        len: u64,
        /// The bytes its blocks hold.
        allocated: u64,
    },
    /// Its owner cannot read it (the permissions a reader with the owner's credentials meets).
    Unreadable {
        /// The owner.
        uid: u32,
        /// The errno.
        errno: i32,
    },
    /// The reading thread could not take the owner's credentials.
    Credentials {
        /// The errno.
        errno: i32,
    },
}

impl fmt::Display for UntrustedFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ProcessRoot { pid, errno } => write!(
                f,
                "cannot enter process {pid}'s root ({}): it has exited, so its files cannot be \
                 reached",
                io::Error::from_raw_os_error(*errno)
            ),
            Self::Resolve { errno: libc::ELOOP } => f.write_str(
                "a symbolic link is in its path now (the kernel named it without one): it was \
                 changed since, and is not followed",
            ),
            Self::Resolve { errno } => write!(f, "{}", io::Error::from_raw_os_error(*errno)),
            Self::NotRegular { kind } => write!(f, "it is {kind}, not a regular file"),
            Self::Linked { links } => write!(
                f,
                "it has {links} names (a hard link), so its owner cannot be told from its path"
            ),
            Self::TooLarge { len, max } => {
                write!(
                    f,
                    "it is {len} bytes long, more than the {max} read at most"
                )
            }
            Self::Sparse { len, allocated } => write!(
                f,
                "it claims {len} bytes but holds {allocated}: mostly holes, which no runtime \
                 writes"
            ),
            Self::Unreadable { uid, errno } => write!(
                f,
                "its owner (uid {uid}) cannot read it ({})",
                io::Error::from_raw_os_error(*errno)
            ),
            Self::Credentials { errno } => write!(
                f,
                "cannot take its owner's credentials to read it ({})",
                io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

impl std::error::Error for UntrustedFileError {}

/// Opens `path` (absolute) under `root` for reading, as the module docs say; at most
/// `max_bytes` long.
///
/// # Errors
/// [`UntrustedFileError`], naming what was refused.
pub fn open_untrusted(
    root: Root,
    path: &Path,
    max_bytes: u64,
) -> Result<UntrustedFile, UntrustedFileError> {
    let located = locate(root, path)?;
    let stat = fstat(located.as_raw_fd()).map_err(|errno| UntrustedFileError::Resolve { errno })?;
    check_shape(&stat, max_bytes, true)?;
    let file = reopen_as_owner(&located, stat.st_uid, stat.st_gid)?;
    let reopened =
        fstat(file.as_raw_fd()).map_err(|errno| UntrustedFileError::Resolve { errno })?;
    if (reopened.st_dev, reopened.st_ino) != (stat.st_dev, stat.st_ino) {
        return Err(UntrustedFileError::Resolve {
            errno: libc::ESTALE,
        });
    }
    Ok(UntrustedFile {
        file,
        len: stat.st_size as u64,
        uid: stat.st_uid,
        id: (stat.st_dev, stat.st_ino),
    })
}

/// An `O_PATH` descriptor of `path` under `root`, resolved without links.
fn locate(root: Root, path: &Path) -> Result<OwnedFd, UntrustedFileError> {
    let resolve = (libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS)
        | match root {
            Root::Here => 0,
            Root::Process(_) => libc::RESOLVE_IN_ROOT,
        };
    let dir = match root {
        Root::Here => None,
        Root::Process(pid) => Some(File::open(format!("/proc/{pid}/root")).map_err(|error| {
            UntrustedFileError::ProcessRoot {
                pid,
                errno: error.raw_os_error().unwrap_or(0),
            }
        })?),
    };
    let dirfd = dir.as_ref().map_or(libc::AT_FDCWD, AsRawFd::as_raw_fd);
    let path =
        CString::new(path.as_os_str().as_bytes()).map_err(|_| UntrustedFileError::Resolve {
            errno: libc::EINVAL,
        })?;
    openat2(
        dirfd,
        &path,
        (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        resolve,
    )
    .map_err(|errno| UntrustedFileError::Resolve { errno })
}

/// A regular file (with one link, if `one_name`), at most `max_bytes`, not mostly holes.
fn check_shape(
    stat: &libc::stat,
    max_bytes: u64,
    one_name: bool,
) -> Result<(), UntrustedFileError> {
    let kind = match stat.st_mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFIFO => Some("a FIFO"),
        libc::S_IFCHR => Some("a character device"),
        libc::S_IFBLK => Some("a block device"),
        libc::S_IFDIR => Some("a directory"),
        libc::S_IFSOCK => Some("a socket"),
        // `O_PATH | O_NOFOLLOW` opens a final link itself.
        libc::S_IFLNK => Some("a symbolic link"),
        _ => Some("not a file"),
    };
    if let Some(kind) = kind {
        return Err(UntrustedFileError::NotRegular { kind });
    }
    if one_name && stat.st_nlink != 1 {
        return Err(UntrustedFileError::Linked {
            // A u32 on some architectures (aarch64), a u64 on others.
            #[allow(clippy::useless_conversion)]
            links: u64::from(stat.st_nlink),
        });
    }
    let len = stat.st_size as u64;
    if len > max_bytes {
        return Err(UntrustedFileError::TooLarge {
            len,
            max: max_bytes,
        });
    }
    let allocated = (stat.st_blocks as u64).saturating_mul(512);
    if len > SPARSE_CHECK_FROM_BYTES && allocated.saturating_mul(SPARSE_RATIO) < len {
        return Err(UntrustedFileError::Sparse { len, allocated });
    }
    Ok(())
}

/// `located` opened for reading: as its owner `uid`/`gid` when this process is root and the
/// owner is not, else as this process.
fn reopen_as_owner(located: &OwnedFd, uid: u32, gid: u32) -> Result<File, UntrustedFileError> {
    let fd = located.as_raw_fd();
    let open = move || -> Result<File, UntrustedFileError> {
        let path = format!("/proc/thread-self/fd/{fd}");
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|error| UntrustedFileError::Unreadable {
                uid,
                errno: error.raw_os_error().unwrap_or(0),
            })
    };
    if effective_uid() != 0 || uid == 0 {
        return open();
    }
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                become_user_on_this_thread(uid, gid).map_err(|error| {
                    UntrustedFileError::Credentials {
                        errno: error.raw_os_error().unwrap_or(0),
                    }
                })?;
                open()
            })
            .join()
            .unwrap_or(Err(UntrustedFileError::Credentials { errno: 0 }))
    })
}

/// `openat2(2)` of `path` under `dirfd` with `flags` and `resolve`, tried again on `EAGAIN` and
/// `EINTR`; a failure is its errno.
pub(crate) fn openat2(
    dirfd: RawFd,
    path: &CString,
    flags: u64,
    resolve: u64,
) -> Result<OwnedFd, i32> {
    // SAFETY: `open_how` is plain integers; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags;
    how.resolve = resolve;
    loop {
        // SAFETY: `path` is a NUL-terminated string and `how` a valid `open_how` of the size
        // passed, both alive for the call; the kernel only reads them.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if rc >= 0 {
            // SAFETY: a descriptor the kernel just returned, owned by nothing else.
            return Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) });
        }
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // openat2 fails with EAGAIN when a rename raced the resolution of a path with `..`
        // under RESOLVE_IN_ROOT: the kernel's documented answer is to try again.
        if errno != libc::EAGAIN && errno != libc::EINTR {
            return Err(errno);
        }
    }
}

fn fstat(fd: RawFd) -> Result<libc::stat, i32> {
    // SAFETY: a zeroed `stat` is a valid value for the kernel to overwrite.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is a descriptor this module owns for the call; `stat` is writable.
    if unsafe { libc::fstat(fd, &mut stat) } == 0 {
        Ok(stat)
    } else {
        Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn a_plain_file_is_read() {
        let dir = dir();
        let path = dir.path().join("jit-1.dump");
        std::fs::write(&path, b"hello").unwrap();
        let mut opened = open_untrusted(Root::Here, &path, 1024).unwrap();
        assert_eq!(opened.len, 5);
        let mut text = String::new();
        opened.file.read_to_string(&mut text).unwrap();
        assert_eq!(text, "hello");
    }

    #[test]
    fn links_fifos_and_oversize_files_are_refused() {
        let dir = dir();
        let real = dir.path().join("real");
        std::fs::write(&real, b"secret").unwrap();
        let link = dir.path().join("link");
        symlink(&real, &link).unwrap();
        assert_eq!(
            open_untrusted(Root::Here, &link, 1024).unwrap_err(),
            UntrustedFileError::NotRegular {
                kind: "a symbolic link"
            }
        );
        // A link to a directory earlier in the path.
        let linked_dir = dir.path().join("d");
        symlink(dir.path(), &linked_dir).unwrap();
        assert_eq!(
            open_untrusted(Root::Here, &linked_dir.join("real"), 1024).unwrap_err(),
            UntrustedFileError::Resolve { errno: libc::ELOOP }
        );
        let hard = dir.path().join("hard");
        std::fs::hard_link(&real, &hard).unwrap();
        assert_eq!(
            open_untrusted(Root::Here, &hard, 1024).unwrap_err(),
            UntrustedFileError::Linked { links: 2 }
        );
        std::fs::remove_file(&hard).unwrap();
        assert_eq!(
            open_untrusted(Root::Here, &real, 5).unwrap_err(),
            UntrustedFileError::TooLarge { len: 6, max: 5 }
        );
        let fifo = dir.path().join("fifo");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path alive for the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(
            open_untrusted(Root::Here, &fifo, 1024).unwrap_err(),
            UntrustedFileError::NotRegular { kind: "a FIFO" }
        );
        assert_eq!(
            open_untrusted(Root::Here, &dir.path().join("gone"), 1024).unwrap_err(),
            UntrustedFileError::Resolve {
                errno: libc::ENOENT
            }
        );
    }

    #[test]
    fn a_sparse_file_is_refused() {
        let dir = dir();
        let path = dir.path().join("sparse");
        let file = File::create(&path).unwrap();
        file.set_len(3 << 30).unwrap();
        match open_untrusted(Root::Here, &path, u64::MAX) {
            Err(UntrustedFileError::Sparse { len, allocated }) => {
                assert_eq!(len, 3 << 30);
                assert!(allocated < 1 << 20, "{allocated}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn root_reads_as_the_owner() {
        if effective_uid() != 0 {
            let test = "untrusted_file::tests::root_reads_as_the_owner";
            perfclock_testutil::skip(test, perfclock_testutil::Need::Root, "not root");
            return;
        }
        let dir = dir();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().join("owned-by-nobody");
        std::fs::write(&path, b"x").unwrap();
        let nobody = 65534;
        std::os::unix::fs::chown(&path, Some(nobody), Some(nobody)).unwrap();
        // Readable by its owner: read.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert_eq!(open_untrusted(Root::Here, &path, 16).unwrap().uid, nobody);
        // Not readable by its owner, which root could read: refused.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o200)).unwrap();
        assert_eq!(
            open_untrusted(Root::Here, &path, 16).unwrap_err(),
            UntrustedFileError::Unreadable {
                uid: nobody,
                errno: libc::EACCES
            }
        );
    }

    #[test]
    fn a_path_in_another_mount_namespace_is_read_inside_it() {
        let test = "untrusted_file::tests::a_path_in_another_mount_namespace_is_read_inside_it";
        let dir = dir();
        let inside = dir.path().join("f");
        let script = format!(
            "mount -t tmpfs perfclock-test {0} && echo inside > {0}/f && ln -s /etc/hostname \
             {0}/escape && echo ready && exec sleep 30",
            dir.path().display()
        );
        let mut child = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut ready = [0u8; 6];
        let started = child.stdout.take().unwrap().read_exact(&mut ready).is_ok();
        if !started {
            let _ = child.wait();
            perfclock_testutil::skip(test, perfclock_testutil::Need::Mount, "unshare failed");
            return;
        }
        let pid = child.id();
        let root = Root::of_process(pid);
        assert_eq!(root, Root::Process(pid));
        let mut text = String::new();
        let opened = open_untrusted(root, &inside, 64);
        let escaped = open_untrusted(root, &dir.path().join("escape"), 64);
        let _ = child.kill();
        let _ = child.wait();
        opened.unwrap().file.read_to_string(&mut text).unwrap();
        assert_eq!(text, "inside\n");
        // Not here: the tmpfs is the other namespace's.
        assert!(open_untrusted(Root::Here, &inside, 64).is_err());
        assert!(escaped.is_err(), "{escaped:?}");
        assert_eq!(Root::of_process(pid), Root::Here, "gone");
    }
}
