//! A page of memory one process writes and others map read-only, handed over a UNIX socket:
//! the shared clock page's transport.
//!
//! The page is a memfd ([`create_memfd`]) sealed against shrinking and growing
//! (`F_SEAL_SHRINK | F_SEAL_GROW`), against any new write or writable mapping
//! (`F_SEAL_FUTURE_WRITE`: only the creator's mapping, made before the seal, writes it) and
//! against further seals (`F_SEAL_SEAL`). A mapping of such a file cannot fault: no one, its
//! creator included, can make the file shorter than the mapping, and its pages are memory (no
//! I/O error can surface as SIGBUS). A file on a file system offers no such guarantee: anyone
//! who can write it can truncate it under every mapping.
//!
//! The descriptor travels with `SCM_RIGHTS` ([`send_fd`], [`recv_fd`]) over a connection made
//! without waiting ([`connect`]); the receiver learns who sent it from `SO_PEERCRED`
//! ([`peer_uid`]) and checks the seals ([`seals`]) before it maps it.
//!
//! # Safety
//! Unsafe code here is single libc calls: `memfd_create`, `fcntl`, `getsockopt`, `socket` and
//! `connect` (an address this module fills within its size), and
//! `sendmsg`/`recvmsg` with a control buffer this module owns, sized with `CMSG_SPACE` and
//! aligned for `cmsghdr`; a descriptor the kernel hands over is owned at once by an `OwnedFd`.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// The seals a page must carry before a reader maps it.
pub const REQUIRED_SEALS: libc::c_int =
    libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE | libc::F_SEAL_SEAL;

/// A new memfd named `name` (as `/proc/PID/maps` shows it) of `len` zero bytes, sealing
/// allowed: the creator maps it writable, then calls [`seal`].
///
/// # Errors
/// `memfd_create`'s or `ftruncate`'s errno (`EMFILE`, `ENOMEM`, a seccomp policy).
pub fn create_memfd(name: &std::ffi::CStr, len: u64) -> io::Result<File> {
    // SAFETY: a NUL-terminated name; the flags are constants.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len)?;
    Ok(file)
}

/// Adds [`REQUIRED_SEALS`] to `file` (a memfd made by [`create_memfd`]), after its creator made
/// its own writable mapping.
///
/// # Errors
/// `fcntl`'s errno.
pub fn seal(file: &File) -> io::Result<()> {
    // SAFETY: F_ADD_SEALS on a descriptor we own, with a constant argument.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, REQUIRED_SEALS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The seals of `fd` (`EINVAL` for a file that cannot carry seals: not a memfd).
///
/// # Errors
/// `fcntl`'s errno.
pub fn seals(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: F_GET_SEALS on a live descriptor takes no argument.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(seals)
}

/// The effective uid of the process at the other end of `stream` when it listened or connected
/// (`SO_PEERCRED`).
///
/// # Errors
/// `getsockopt`'s errno.
pub fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a live socket, an out-buffer of the size passed.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Connects to the listening UNIX socket at `path` without waiting: a server whose queue of
/// pending connections is full (one that stopped accepting) is `EAGAIN` at once, never a wait.
/// The stream returned blocks (reads wait up to the timeout the caller sets).
///
/// # Errors
/// `socket`'s or `connect`'s errno (`ENOENT`, `ECONNREFUSED` when no one listens, `EAGAIN`),
/// `ENAMETOOLONG` for a path longer than a socket address holds.
pub fn connect(path: &std::path::Path) -> io::Result<UnixStream> {
    use std::os::unix::ffi::OsStrExt as _;
    // SAFETY: an all-zero sockaddr_un is valid; the family and path are set below.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= address.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    for (slot, byte) in address.sun_path.iter_mut().zip(bytes) {
        *slot = *byte as libc::c_char;
    }
    let flags = libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    // SAFETY: constant arguments.
    let fd = unsafe { libc::socket(libc::AF_UNIX, flags, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    let length = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: a live socket and an address of the length passed.
    let rc = unsafe {
        libc::connect(
            stream.as_raw_fd(),
            std::ptr::addr_of!(address).cast(),
            length as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// A control buffer for one descriptor, aligned for `cmsghdr`.
#[repr(C)]
union Control {
    _align: libc::cmsghdr,
    bytes: [u8; 64],
}

/// Sends `fd` with one byte over `stream`.
///
/// # Errors
/// `sendmsg`'s errno (`EPIPE` when the peer went away).
pub fn send_fd(stream: &UnixStream, fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = Control { bytes: [0; 64] };
    // SAFETY: CMSG_SPACE is arithmetic on a constant.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    // SAFETY: an all-zero msghdr is valid; its pointers are set below to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = std::ptr::addr_of_mut!(control).cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` describes `control`, at least `space` bytes and aligned for cmsghdr, so
    // CMSG_FIRSTHDR is that buffer's start and the header and one int fit in it.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&msg);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        libc::CMSG_DATA(header)
            .cast::<libc::c_int>()
            .write_unaligned(fd.as_raw_fd());
    }
    // SAFETY: `msg` points to live buffers for the duration of the call.
    if unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) } != 1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one descriptor sent by [`send_fd`] (close-on-exec). Descriptors beyond the first,
/// should a peer send more, are closed.
///
/// # Errors
/// `recvmsg`'s errno (`EAGAIN` at the socket's receive timeout), or `InvalidData` if no
/// descriptor came.
pub fn recv_fd(stream: &UnixStream) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = Control { bytes: [0; 64] };
    // SAFETY: an all-zero msghdr is valid; its pointers are set below to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = std::ptr::addr_of_mut!(control).cast();
    msg.msg_controllen = std::mem::size_of::<Control>() as _;
    // SAFETY: `msg` points to live buffers for the duration of the call.
    let received = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut first = None;
    // SAFETY: the kernel filled `control` up to msg_controllen; the CMSG macros walk it within
    // that length, and each SCM_RIGHTS payload holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors
    // that are now ours: each is owned by an OwnedFd at once (those past the first are dropped).
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(header).cast::<libc::c_int>();
                for i in 0..payload / std::mem::size_of::<libc::c_int>() {
                    let fd = OwnedFd::from_raw_fd(data.add(i).read_unaligned());
                    if first.is_none() {
                        first = Some(fd);
                    }
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
    }
    first.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no descriptor came"))
}

/// Whether `file` (as received) is a page a reader may map: a memfd carrying every seal of
/// [`REQUIRED_SEALS`] and at least `len` bytes long.
///
/// # Errors
/// `fcntl`'s or `fstat`'s errno.
pub fn is_sealed_page(file: &File, len: u64) -> io::Result<bool> {
    let seals = seals(file.as_fd())?;
    Ok(seals & REQUIRED_SEALS == REQUIRED_SEALS && file.metadata()?.len() >= len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_memfd_crosses_a_socket_and_cannot_shrink() {
        let page = create_memfd(c"perfclock-test", 4096).unwrap();
        assert!(!is_sealed_page(&page, 4096).unwrap(), "not sealed yet");
        seal(&page).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        send_fd(&a, page.as_fd()).unwrap();
        let received = File::from(recv_fd(&b).unwrap());
        assert!(is_sealed_page(&received, 4096).unwrap());
        assert!(!is_sealed_page(&received, 4097).unwrap());
        // SAFETY: geteuid has no preconditions.
        assert_eq!(peer_uid(&b).unwrap(), unsafe { libc::geteuid() });
        let error = received.set_len(0).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPERM), "{error}");
        use std::io::Write as _;
        let error = (&received).write(b"x").unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPERM), "{error}");
        let regular = File::open("/proc/self/exe").unwrap();
        assert!(
            is_sealed_page(&regular, 1).is_err(),
            "a file that takes no seals"
        );
    }

    #[test]
    fn connect_does_not_wait_for_a_server_that_stopped_accepting() {
        let dir = std::env::temp_dir().join(format!("pce-sealed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("sock");
        let error = connect(&path).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENOENT), "{error}");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let mut held = Vec::new();
        let started = std::time::Instant::now();
        let full = loop {
            match connect(&path) {
                Ok(stream) => held.push(stream),
                Err(error) => break error,
            }
            assert!(held.len() < 100_000, "the queue never filled");
        };
        assert_eq!(full.raw_os_error(), Some(libc::EAGAIN), "{full}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        drop(listener);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_descriptor_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        use std::io::Write as _;
        (&a).write_all(b"x").unwrap();
        let error = recv_fd(&b).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }
}
