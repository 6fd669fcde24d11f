//! `inotify(7)`, for waking up when a file someone else writes has grown: a watch per file,
//! given as an open descriptor (through `/proc/self/fd/N`, so the watch is on that inode, not on
//! whatever a path names later), and a wait with a timeout for the next modification of any.
//!
//! # Safety
//! `inotify_init1`, `inotify_add_watch` and `read` into a buffer this module owns; `poll` on one
//! descriptor of ours. The descriptor is owned at once.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// A watch's identity, as events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Watch(i32);

/// An inotify instance; see the [module docs](self).
#[derive(Debug)]
pub struct Inotify {
    fd: OwnedFd,
}

impl Inotify {
    /// A new instance (non-blocking, close-on-exec).
    ///
    /// # Errors
    /// `inotify_init1`'s (`EMFILE` past `fs.inotify.max_user_instances`).
    pub fn new() -> io::Result<Inotify> {
        // SAFETY: plain flags.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor the kernel just returned, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Inotify { fd })
    }

    /// Watches the file `file` is open on for writes, truncation and its last name's going.
    ///
    /// # Errors
    /// `inotify_add_watch`'s (`ENOSPC` past `fs.inotify.max_user_watches`).
    pub fn watch(&self, file: &impl AsRawFd) -> io::Result<Watch> {
        let path = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mask = libc::IN_MODIFY | libc::IN_ATTRIB | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF;
        // SAFETY: a live inotify descriptor and a NUL-terminated path alive for the call.
        let watch = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), mask) };
        if watch < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Watch(watch))
    }

    /// Waits at most `timeout` for an event; the watches that had one (each once).
    ///
    /// # Errors
    /// `poll`'s or `read`'s, but for `EINTR` (no events).
    pub fn wait(&self, timeout: Duration) -> io::Result<Vec<Watch>> {
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one pollfd this function owns.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            return if error.kind() == io::ErrorKind::Interrupted {
                Ok(Vec::new())
            } else {
                Err(error)
            };
        }
        let mut watches = Vec::new();
        if ready == 0 {
            return Ok(watches);
        }
        let mut buffer = [0u8; 4096];
        loop {
            let read = read(self.fd.as_raw_fd(), &mut buffer)?;
            if read == 0 {
                break;
            }
            let mut at = 0;
            // struct inotify_event: wd (i32), mask, cookie, len (u32 each), then len name bytes.
            while at + 16 <= read {
                let word = |offset: usize| {
                    u32::from_ne_bytes(
                        buffer[at + offset..at + offset + 4]
                            .try_into()
                            .unwrap_or([0; 4]),
                    )
                };
                let watch = Watch(word(0) as i32);
                if !watches.contains(&watch) {
                    watches.push(watch);
                }
                at += 16 + word(12) as usize;
            }
        }
        Ok(watches)
    }
}

/// One `read`; 0 when nothing more is queued (`EAGAIN`).
fn read(fd: RawFd, buffer: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: the buffer is writable for its length.
        let got = unsafe { libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len()) };
        if got >= 0 {
            return Ok(got as usize);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(0),
            Some(libc::EINTR) => continue,
            _ => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Instant;

    #[test]
    fn a_write_to_the_watched_file_wakes_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-1.map");
        let mut writer = std::fs::File::create(&path).unwrap();
        let reader = std::fs::File::open(&path).unwrap();
        let inotify = Inotify::new().unwrap();
        let watch = inotify.watch(&reader).unwrap();
        assert_eq!(inotify.wait(Duration::from_millis(10)).unwrap(), []);
        writer.write_all(b"1000 10 f\n").unwrap();
        let start = Instant::now();
        assert_eq!(inotify.wait(Duration::from_secs(5)).unwrap(), [watch]);
        assert!(start.elapsed() < Duration::from_secs(1));
        // A new file at the name is another inode: the watch stays on the first.
        std::fs::remove_file(&path).unwrap();
        let mut other = std::fs::File::create(&path).unwrap();
        let _ = inotify.wait(Duration::from_millis(50)).unwrap();
        other.write_all(b"2000 10 g\n").unwrap();
        assert_eq!(inotify.wait(Duration::from_millis(100)).unwrap(), []);
    }
}
