//! Acting on another process: our effective ids, a thread that takes on another user's
//! credentials (and nothing of ours), a pidfd that signals exactly one process, and a UNIX socket
//! connect that never blocks.
//!
//! Written by hand over `libc`, as the rest of this crate's system calls: the thread credential
//! calls must be the raw system calls (glibc's `setgroups`/`setresuid` wrappers apply the change
//! to every thread of the process), and pidfds and a non-blocking `connect` on a UNIX socket are
//! a handful of lines each.
//!
//! # Safety
//! Each unsafe block is one system call that takes plain integers (`geteuid`, `getuid`, `getegid`,
//! `setgroups` with a null list of length 0, `setresgid`, `setresuid`, `pidfd_open`,
//! `pidfd_send_signal` with a null `siginfo`, `poll` on a local `pollfd`, `socket`), or
//! `connect` with a `sockaddr_un` on our stack whose length is passed with it. A descriptor a
//! call returns is owned at once by an [`OwnedFd`].
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The calling thread's effective uid.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The calling thread's real uid (who started the process, also under setuid).
pub fn real_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The calling thread's effective gid.
pub fn effective_gid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

// The 32-bit-id system calls: on x86 and 32-bit arm the plain numbers take 16-bit ids.
#[cfg(any(target_arch = "x86", target_arch = "arm"))]
mod nr {
    pub(super) const SETGROUPS: libc::c_long = libc::SYS_setgroups32;
    pub(super) const SETRESGID: libc::c_long = libc::SYS_setresgid32;
    pub(super) const SETRESUID: libc::c_long = libc::SYS_setresuid32;
}
#[cfg(not(any(target_arch = "x86", target_arch = "arm")))]
mod nr {
    pub(super) const SETGROUPS: libc::c_long = libc::SYS_setgroups;
    pub(super) const SETRESGID: libc::c_long = libc::SYS_setresgid;
    pub(super) const SETRESUID: libc::c_long = libc::SYS_setresuid;
}

fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Gives the calling thread, and only it, the credentials of `uid`/`gid`: no supplementary
/// groups, real, effective and saved gid `gid`, then real, effective and saved uid `uid`. From
/// root this also clears the thread's capabilities, so it cannot take root back.
///
/// The kernel keeps credentials per thread; these are the raw system calls, which change the
/// calling thread alone (glibc's wrappers would change every thread of the process). Call it on
/// a thread of its own that does only the other user's work and then ends: the thread's
/// credentials are never restored.
///
/// # Errors
/// The failing call's errno (`EPERM` without `CAP_SETUID`/`CAP_SETGID`); the thread may then
/// hold some of the changes and must not be used for anything but reporting the error.
pub fn become_user_on_this_thread(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: setgroups with size 0 reads no memory; the null list is never dereferenced.
    check(unsafe { libc::syscall(nr::SETGROUPS, 0, std::ptr::null::<libc::gid_t>()) })?;
    // SAFETY: setresgid takes three plain integers.
    check(unsafe { libc::syscall(nr::SETRESGID, gid, gid, gid) })?;
    // SAFETY: setresuid takes three plain integers.
    check(unsafe { libc::syscall(nr::SETRESUID, uid, uid, uid) })?;
    Ok(())
}

/// A process by pidfd (`pidfd_open`, Linux 5.3): signals reach this process or none, never a
/// later one that reuses its pid.
#[derive(Debug)]
pub struct PidFd(OwnedFd);

impl PidFd {
    /// Opens process `pid` (a pid in our pid namespace).
    ///
    /// # Errors
    /// `ESRCH` if no such process, `ENOSYS` on kernels before 5.3.
    pub fn open(pid: u32) -> io::Result<Self> {
        let pid =
            libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        // SAFETY: pidfd_open takes a pid and flags; the descriptor it returns is ours to own.
        let fd = check(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
        let fd =
            libc::c_int::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
        // SAFETY: fd was just returned by pidfd_open and nothing else owns it.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Sends `signal` to the process (`ESRCH` once it has exited, even if its pid was reused).
    ///
    /// # Errors
    /// The call's errno.
    pub fn send_signal(&self, signal: i32) -> io::Result<()> {
        let null = std::ptr::null::<libc::siginfo_t>();
        // SAFETY: pidfd_send_signal takes our descriptor, a signal number, a null siginfo (the
        // kernel fills in a kill()-like one) and flags 0.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.0.as_raw_fd(),
                signal,
                null,
                0,
            )
        };
        check(rc).map(drop)
    }

    /// Waits up to `timeout` for the process to exit; true once it has (a zombie has exited).
    ///
    /// # Errors
    /// `poll`'s errno.
    pub fn wait_exit(&self, timeout: Duration) -> io::Result<bool> {
        let mut pollfd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        loop {
            // SAFETY: one pollfd on our stack, count 1.
            let rc = unsafe { libc::poll(&mut pollfd, 1, millis) };
            match check(rc.into()) {
                Ok(ready) => return Ok(ready > 0),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }
}

impl AsFd for PidFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Connects a UNIX stream socket to `path` without blocking: `WouldBlock` when the listener's
/// queue is full (a UNIX socket has no connection in progress to wait for: try again later).
/// The stream returned is in blocking mode.
///
/// # Errors
/// The connect's errno (`ENOENT`, `ECONNREFUSED`, `EAGAIN`...); `InvalidInput` for a path too
/// long for a socket address.
pub fn connect_unix_nonblocking(path: &Path) -> io::Result<UnixStream> {
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path too long for a UNIX socket address",
        ));
    }
    for (slot, byte) in addr.sun_path.iter_mut().zip(bytes) {
        *slot = *byte as libc::c_char;
    }
    let flags = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: socket takes plain integers; the descriptor it returns is ours to own.
    let fd = check(unsafe { libc::socket(libc::AF_UNIX, flags, 0) }.into())?;
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: fd was just returned by socket and nothing else owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: addr lives on our stack for the call and len is its size.
    let rc = unsafe {
        libc::connect(
            socket.as_raw_fd(),
            std::ptr::addr_of!(addr).cast::<libc::sockaddr>(),
            len,
        )
    };
    check(rc.into())?;
    let stream = UnixStream::from(socket);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::process::Command;

    #[test]
    fn a_pidfd_signals_nothing_once_its_process_has_gone() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pidfd = PidFd::open(child.id()).unwrap();
        assert!(!pidfd.wait_exit(Duration::ZERO).unwrap());
        pidfd.send_signal(libc::SIGKILL).unwrap();
        child.wait().unwrap();
        assert!(pidfd.wait_exit(Duration::ZERO).unwrap());
        let error = pidfd.send_signal(libc::SIGQUIT).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ESRCH));
    }

    #[test]
    fn a_full_listen_queue_is_would_block() {
        let path = std::env::temp_dir().join(format!("perfclock-peer-test.{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            connect_unix_nonblocking(&path).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        let listener = UnixListener::bind(&path).unwrap();
        // std listens with a backlog of 128: fill the queue until the kernel refuses.
        let mut queued = Vec::new();
        let error = loop {
            match connect_unix_nonblocking(&path) {
                Ok(stream) => queued.push(stream),
                Err(error) => break error,
            }
            assert!(queued.len() < 100_000, "the queue never filled");
        };
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock, "{error}");
        drop(listener);
        std::fs::remove_file(&path).unwrap();
    }
}
