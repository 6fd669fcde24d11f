//! Creating a file in a directory other users can write (`/tmp`, a JIT's dump directory), at a
//! name anyone can predict (`jit-<pid>.dump`, `marker-<pid>.txt`, `perf-<pid>.map`).
//!
//! The file is created with `openat(dirfd, name, O_CREAT | O_EXCL | O_NOFOLLOW)`: it is new and
//! this process's, never a link's target and never a file someone else prepared. `O_EXCL` rather
//! than `O_TMPFILE` + `linkat`: the file must be visible under its name from the start (perf finds
//! a jitdump through the mapping of the named file), `linkat` refuses an existing name just as
//! `O_EXCL` does, and `O_TMPFILE` is missing on some file systems (NFS, older overlayfs).
//!
//! # The contract: a writer never deletes a file it cannot prove dead
//! A pid is no identity: two containerised writers are both pid 1 in their own pid namespaces,
//! and share a dump directory when it is bind-mounted into both. So a file at the name is not
//! stale because its pid says so; what proves a writer alive is a lock.
//! - **Proof of life.** [`create_exclusive`] takes `flock(LOCK_EX | LOCK_NB)` on the file it
//!   created, before anything is written to it, and the returned `File` holds the lock for as
//!   long as it (or a descriptor duplicated from it, a fork child's included) stays open: the
//!   writer keeps that `File` for its life. If the lock cannot be taken the file is removed
//!   again and the create fails: a writer without the lock could be taken for dead.
//! - **Proof of death.** Whatever is already at the name is removed only if
//!   `fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW)` shows a regular file of the caller's effective
//!   user (anything else, a link, a FIFO, a device, a directory or another user's file, is a
//!   [`CreateError::Taken`] naming the path, the kind and the owner), and if, opened with
//!   `O_RDONLY | O_NOFOLLOW | O_NONBLOCK` and checked by `fstat` to be the inode `fstatat` saw,
//!   it yields `flock(LOCK_EX | LOCK_NB)` to the caller. A lock held elsewhere (`EWOULDBLOCK`)
//!   means a live writer: [`CreateError::Live`]. Any other failure to open or lock it is a
//!   [`CreateError::Io`]: unproven. Nothing is removed in either case.
//! - **The moment before the lock.** A writer between its `openat` and its `flock`
//!   (microseconds) holds no lock yet, and has written nothing yet. A remover may take such a
//!   file for stale and unlink it; so the creator, once it holds its lock, checks that its file
//!   is still linked and still at the name, and creates again if not. It loses nothing (it has
//!   written nothing), and a file left empty by a writer that died before writing is stale like
//!   any other.
//! - **Removal.** A stale file is unlinked through the same directory descriptor while its lock
//!   is held, after `fstat` shows it still linked and `fstatat` shows it still at the name, and
//!   the create is retried with `O_EXCL`. Two writers removing the same stale file take turns on
//!   its lock, and the second finds it unlinked; a race cannot redirect the removal: `unlinkat`
//!   removes a name, never follows one, and the create that follows refuses whatever appeared
//!   meanwhile.
//!
//! A stale file of a writer whose descriptor lives on in a process it forked stays live until
//! that process closes it. `flock` locks are the kernel's, per open file, and hold across pid
//! namespaces, containers sharing a bind mount, and (emulated as POSIX locks by the client) NFS
//! clients of one server.
//!
//! # Safety
//! The unsafe calls are `openat`, `fstatat`, `fstat`, `unlinkat`, `geteuid` and `getpwuid_r`,
//! with NUL-terminated names and out-buffers this module owns and sizes; a descriptor `openat`
//! returns is owned by the `File` made from it at once, and `fstat` takes a descriptor of such a
//! live `File` (`flock` is [`try_lock_exclusive`]'s). Each call says why it is sound.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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

    pub(crate) fn describe(self) -> &'static str {
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

/// How often a create is retried after removing a stale file (another process may create the
/// name again in between; past this the name is reported as taken or the error returned).
const ATTEMPTS: usize = 3;

/// Creates `dir/name` read-write with `mode` (less the umask), `O_CLOEXEC`, exclusively: see the
/// [module docs](self). `name` is one path component.
///
/// The returned `File` holds `flock(LOCK_EX)` on the file, the proof that its writer is alive:
/// keep it open as long as the file is written.
///
/// # Errors
/// [`CreateError::Taken`] if a link, a FIFO, a device, a directory or another user's file is
/// at the name; [`CreateError::Live`] if a regular file of this user is there that a live writer
/// holds (nothing is changed);
/// [`CreateError::Io`] if `dir` cannot be opened as a directory, the create or the lock fails
/// (permissions, a full disk, a name that is not one component, a file system without locks),
/// or a stale file cannot be checked or removed.
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
            let file = unsafe { File::from_raw_fd(fd) };
            return match lock_new(&file) {
                // Removed by another writer before our lock (see the module docs): again.
                Ok(()) if !still_at_name(&file, dir_fd, &c_name) => continue,
                Ok(()) => Ok(file),
                Err(error) => {
                    // Nothing is left behind: an empty file nobody locks would refuse every
                    // later writer of this name. Only if the name is still this file.
                    if matches!(same_file(&fstat(&file), dir_fd, &c_name), Ok(true)) {
                        // SAFETY: a live directory descriptor and a NUL-terminated name;
                        // unlinkat follows nothing.
                        unsafe { libc::unlinkat(dir_fd, c_name.as_ptr(), 0) };
                    }
                    Err(io_error(&path)(error))
                }
            };
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

/// Removes `dir/name` if it is a provably stale regular file of the caller's user (see the
/// [module docs](self)), for [`create_exclusive`] or for a writer that renames its own file over
/// the name; a name that does not exist is fine. A file that is never locked (a sidecar renamed
/// into place) is removed if it is not empty: call this only for a name whose writer is proven
/// dead otherwise, e.g. by holding the lock of the file it accompanies.
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

/// How long [`create_exclusive`] waits for its new file's lock, which only another writer's
/// check of the name (an `fstat`, microseconds) holds.
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// Takes `flock(LOCK_EX | LOCK_NB)` on a file just created, waiting out another writer's brief
/// check of it.
fn lock_new(file: &File) -> io::Result<()> {
    let started = Instant::now();
    loop {
        let Err(error) = try_lock_exclusive(file) else {
            return Ok(());
        };
        match error.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EWOULDBLOCK) if started.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(1));
            }
            _ => return Err(error),
        }
    }
}

/// Whether `file` is still linked and still the file at `name` in `dir_fd` (an error counts as
/// no: the create is tried again).
fn still_at_name(file: &File, dir_fd: libc::c_int, name: &CStr) -> bool {
    let st = fstat(file);
    st.as_ref().is_ok_and(|st| st.st_nlink > 0) && matches!(same_file(&st, dir_fd, name), Ok(true))
}

/// `fstat` of an open file (a descriptor of a live `File` cannot fail it).
fn fstat(file: &File) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value for the kernel to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor of a live `File` and a live `stat`.
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// `fstatat(dir_fd, name, AT_SYMLINK_NOFOLLOW)`.
fn fstatat(dir_fd: libc::c_int, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value for the kernel to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a live directory descriptor, a NUL-terminated name, a live `stat`.
    let rc = unsafe { libc::fstatat(dir_fd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Whether `name` in `dir_fd` is now the file `st` describes (`Ok(false)`: something else, or
/// nothing).
fn same_file(st: &io::Result<libc::stat>, dir_fd: libc::c_int, name: &CStr) -> io::Result<bool> {
    let Ok(st) = st else {
        return Ok(false);
    };
    match fstatat(dir_fd, name) {
        Ok(now) => Ok(now.st_dev == st.st_dev && now.st_ino == st.st_ino),
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(error) => Err(error),
    }
}

/// What one look at a name found.
enum Look {
    /// Nothing is at the name any more, or the stale file was removed.
    Free,
    /// The name changed while it was checked: look again.
    Changed,
}

fn remove_stale(dir_fd: libc::c_int, name: &CStr, path: &Path) -> Result<(), CreateError> {
    let io_error = |source| CreateError::Io {
        path: path.to_owned(),
        source,
    };
    for _ in 0..ATTEMPTS {
        match look(dir_fd, name, path).map_err(|e| e.map_io(io_error))? {
            Look::Free => return Ok(()),
            Look::Changed => {}
        }
    }
    Err(io_error(io::Error::new(
        io::ErrorKind::WouldBlock,
        "the file at the name kept changing while it was checked; nothing was removed",
    )))
}

/// Why a look refused: a [`CreateError`] already, or an io error the path is yet to be attached
/// to.
enum Refusal {
    Create(CreateError),
    Io(io::Error),
}

impl Refusal {
    fn map_io(self, f: impl FnOnce(io::Error) -> CreateError) -> CreateError {
        match self {
            Refusal::Create(error) => error,
            Refusal::Io(error) => f(error),
        }
    }
}

impl From<io::Error> for Refusal {
    fn from(error: io::Error) -> Refusal {
        Refusal::Io(error)
    }
}

/// One look at `name`: removes it if it is provably stale, refuses it if not, says if it
/// changed meanwhile.
fn look(dir_fd: libc::c_int, name: &CStr, path: &Path) -> Result<Look, Refusal> {
    let st = match fstatat(dir_fd, name) {
        Ok(st) => st,
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => return Ok(Look::Free),
        Err(error) => return Err(error.into()),
    };
    // SAFETY: geteuid has no preconditions.
    let caller_uid = unsafe { libc::geteuid() };
    let kind = FileKind::of(st.st_mode);
    if kind != FileKind::Regular || st.st_uid != caller_uid {
        return Err(Refusal::Create(CreateError::Taken(TakenName {
            path: path.to_owned(),
            kind,
            owner_uid: st.st_uid,
            owner_name: user_name(st.st_uid),
            caller_uid,
        })));
    }
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: a live directory descriptor and a NUL-terminated name; without O_CREAT no mode is
    // read.
    let fd = unsafe { libc::openat(dir_fd, name.as_ptr(), flags) };
    if fd < 0 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ENOENT) => Ok(Look::Free),
            // A link now: the next look reports it.
            Some(libc::ELOOP) => Ok(Look::Changed),
            _ => Err(error.into()),
        };
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    let opened = fstat(&file)?;
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) {
        return Ok(Look::Changed);
    }
    if let Err(error) = try_lock_exclusive(&file) {
        return match error.raw_os_error() {
            Some(libc::EWOULDBLOCK) => Err(Refusal::Create(CreateError::Live(LiveName {
                path: path.to_owned(),
            }))),
            Some(libc::EINTR) => Ok(Look::Changed),
            _ => Err(error.into()),
        };
    }
    // Locked: no writer of this scheme holds it. Looked at again under the lock, which any
    // other remover must hold too.
    let locked = fstat(&file)?;
    if locked.st_nlink == 0 {
        return Ok(Look::Free); // another writer removed it while we waited
    }
    if !same_file(&Ok(locked), dir_fd, name)? {
        return Ok(Look::Changed);
    }
    // SAFETY: a live directory descriptor and a NUL-terminated name; unlinkat removes the name
    // whatever it is by now, and follows nothing.
    let rc = unsafe { libc::unlinkat(dir_fd, name.as_ptr(), 0) };
    if rc != 0 {
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ENOENT) {
            return Err(error.into());
        }
    }
    // The lock goes with `file`, after the name.
    drop(file);
    Ok(Look::Free)
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

/// Takes an exclusive `flock` on `file` without waiting (held until every descriptor of that
/// open file is closed). `std::fs::File::try_lock` does the same from Rust 1.89, past this
/// workspace's minimum version.
///
/// # Errors
/// `EWOULDBLOCK` when another open file description holds a lock on it; `flock`'s other errnos.
pub fn try_lock_exclusive(file: &File) -> io::Result<()> {
    // SAFETY: flock takes integers only; the descriptor is open for the call (borrowed from
    // `file`).
    if unsafe { libc::flock(file.as_fd().as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Why [`create_exclusive`] created nothing.
#[derive(Debug)]
#[non_exhaustive]
pub enum CreateError {
    /// Something that is not a stale regular file of the caller's user is at the name.
    Taken(TakenName),
    /// A regular file of the caller's user is at the name whose lock a live writer holds
    /// (another process with the same pid number, e.g. in another pid namespace). It was left
    /// as it was.
    Live(LiveName),
    /// The directory could not be opened, the create or the lock of the new file failed, or a
    /// stale file could not be checked or removed.
    Io {
        /// The directory or the file.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
}

impl fmt::Display for CreateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CreateError::Taken(taken) => taken.fmt(f),
            CreateError::Live(live) => live.fmt(f),
            CreateError::Io { path, .. } => write!(f, "cannot create {}", path.display()),
        }
    }
}

impl std::error::Error for CreateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CreateError::Io { source, .. } => Some(source),
            CreateError::Taken(_) | CreateError::Live(_) => None,
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

/// A regular file of the caller's own user at the name, that [`create_exclusive`] would not
/// remove because it cannot prove that no writer uses it (see the module docs); it was
/// left as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveName {
    /// The full path of the name.
    pub path: PathBuf,
}

impl fmt::Display for LiveName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is held open by a live writer: another process using the same pid number (for \
             example pid 1 in another pid namespace: containers sharing this directory), or a \
             child it forked. perfclock never removes a file a live writer holds: give each \
             container its own dump directory, or stop the other writer",
            self.path.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// The io error is the `source()`, and the message does not repeat it.
    #[test]
    fn create_error_gives_its_io_cause_once() {
        let source = io::Error::from_raw_os_error(libc::EACCES);
        let cause = source.to_string();
        let error = CreateError::Io {
            path: PathBuf::from("/run/dir"),
            source,
        };
        let message = error.to_string();
        assert!(message.contains("/run/dir"), "{message}");
        assert!(!message.contains(&cause), "{message} repeats {cause}");
        let given = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(given, Some(cause));
    }

    #[test]
    fn a_second_exclusive_lock_is_refused_until_the_first_is_closed() {
        let scratch = std::env::temp_dir().join(format!("perfclock-flock-{}", std::process::id()));
        std::fs::create_dir(&scratch).unwrap();
        let (first, second) = (File::open(&scratch).unwrap(), File::open(&scratch).unwrap());
        try_lock_exclusive(&first).unwrap();
        let refused = try_lock_exclusive(&second).unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::EWOULDBLOCK));
        drop(first);
        try_lock_exclusive(&second).unwrap();
        std::fs::remove_dir(&scratch).unwrap();
    }

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
        // A closed, written file: provably no writer's any more.
        std::fs::write(dir.join("a"), b"stale").unwrap();
        remove_stale_at(&dir, "a").unwrap();
        remove_stale_at(&dir, "a").unwrap(); // absent is fine
        assert!(!dir.join("a").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file whose writer still holds it open (its `File` from `create_exclusive`) is never
    /// removed, whatever its pid says; once the writer closes it, it is stale and replaced.
    #[test]
    fn a_live_writers_file_is_refused_and_left_intact() {
        use std::io::Write as _;
        use std::os::unix::fs::MetadataExt as _;
        let dir = temp_dir("live");
        let mut first = create_exclusive(&dir, "jit-1.dump", 0o644).unwrap();
        first.write_all(b"the first writer's records").unwrap();
        let inode = first.metadata().unwrap().ino();
        let error = create_exclusive(&dir, "jit-1.dump", 0o644).unwrap_err();
        match &error {
            CreateError::Live(live) => {
                assert_eq!(live.path, dir.join("jit-1.dump"));
            }
            other => panic!("{other:?}"),
        }
        let message = error.to_string();
        for words in [
            "held open by a live writer",
            "pid namespace",
            "own dump directory",
        ] {
            assert!(message.contains(words), "{words} missing: {message}");
        }
        assert!(matches!(
            remove_stale_at(&dir, "jit-1.dump"),
            Err(CreateError::Live(LiveName { .. }))
        ));
        let at_name = std::fs::symlink_metadata(dir.join("jit-1.dump")).unwrap();
        assert_eq!(at_name.ino(), inode, "the live file was replaced");
        assert_eq!(
            std::fs::read(dir.join("jit-1.dump")).unwrap(),
            b"the first writer's records"
        );
        first.write_all(b"; more").unwrap();
        drop(first);
        // Closed: no writer holds it, and it is not empty, so it is provably stale.
        let second = create_exclusive(&dir, "jit-1.dump", 0o644).unwrap();
        drop(second);
        assert_eq!(std::fs::read(dir.join("jit-1.dump")).unwrap(), b"");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An empty file nobody holds (its writer died before writing) is stale like any other:
    /// replaced.
    #[test]
    fn an_empty_unlocked_file_is_stale() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = temp_dir("empty");
        std::fs::write(dir.join("marker-1.txt"), b"").unwrap();
        // Open, not locked: a handle on the stale file to see it unlinked.
        let stale = File::open(dir.join("marker-1.txt")).unwrap();
        let file = create_exclusive(&dir, "marker-1.txt", 0o644).unwrap();
        assert_eq!(
            stale.metadata().unwrap().nlink(),
            0,
            "the empty stale file was kept"
        );
        let at_name = std::fs::symlink_metadata(dir.join("marker-1.txt")).unwrap();
        assert_eq!(at_name.ino(), file.metadata().unwrap().ino());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
