//! `inotify(7)`, for waking up when a file someone else writes has grown or a directory gained a
//! file: a watch per file or directory, given as an open descriptor (through `/proc/self/fd/N`,
//! so the watch is on that inode, not on whatever a path names later), and a wait with a timeout
//! for the next event of any.
//!
//! # Safety
//! `inotify_init1`, `inotify_add_watch` and `read` into a buffer this module owns; `ppoll` on
//! one descriptor of ours. The descriptor is owned at once.
#![allow(unsafe_code)]

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

/// The longest name an event carries, without its NUL.
const NAME_MAX: usize = 255;

/// A watch's identity, as events name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Watch(i32);

/// What a wait saw: a watched file written (no name), or a name made in a watched directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The watch.
    pub watch: Watch,
    /// The name made, for a directory's watch.
    pub name: Option<OsString>,
}

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
        let mask = libc::IN_MODIFY | libc::IN_ATTRIB | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF;
        self.add(file, mask)
    }

    /// Watches the directory `dir` is open on for names made in it (created or moved in).
    ///
    /// # Errors
    /// As [`Inotify::watch`]'s.
    pub fn watch_names(&self, dir: &impl AsRawFd) -> io::Result<Watch> {
        self.add(dir, libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_ONLYDIR)
    }

    fn add(&self, file: &impl AsRawFd, mask: u32) -> io::Result<Watch> {
        let path = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a live inotify descriptor and a NUL-terminated path alive for the call.
        let watch = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), path.as_ptr(), mask) };
        if watch < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Watch(watch))
    }

    /// Waits at most `timeout` for an event; what happened (each once).
    ///
    /// # Errors
    /// `poll`'s or `read`'s, but for `EINTR` (no events).
    pub fn wait(&self, timeout: Duration) -> io::Result<Vec<Event>> {
        let mut poll = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // ppoll's nanoseconds: poll's milliseconds would round a wait under 1 ms down to none,
        // and a caller waiting for a deadline would spin through its last millisecond.
        let timeout = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: one pollfd and one timespec this function owns; no signal mask.
        let ready = unsafe { libc::ppoll(&mut poll, 1, &timeout, std::ptr::null()) };
        if ready < 0 {
            let error = io::Error::last_os_error();
            return if error.kind() == io::ErrorKind::Interrupted {
                Ok(Vec::new())
            } else {
                Err(error)
            };
        }
        let mut events = Vec::new();
        if ready == 0 {
            return Ok(events);
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
                let len = word(12) as usize;
                let name = buffer[..read]
                    .get(at + 16..at + 16 + len)
                    .and_then(|name| name.split(|&b| b == 0).next())
                    .filter(|name| !name.is_empty())
                    .map(|name| OsString::from_vec(name.to_vec()));
                let event = Event { watch, name };
                if !events.contains(&event) {
                    events.push(event);
                }
                at += 16 + len;
            }
            // Room was left for another event of any name: the queue was empty (one system
            // call less per wake-up, for a watch woken a thousand times a second).
            if read + 16 + NAME_MAX < buffer.len() {
                break;
            }
        }
        Ok(events)
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
        let written = Event { watch, name: None };
        assert_eq!(inotify.wait(Duration::from_secs(5)).unwrap(), [written]);
        assert!(start.elapsed() < Duration::from_secs(1));
        // A new file at the name is another inode: the watch stays on the first.
        std::fs::remove_file(&path).unwrap();
        let mut other = std::fs::File::create(&path).unwrap();
        let _ = inotify.wait(Duration::from_millis(50)).unwrap();
        other.write_all(b"2000 10 g\n").unwrap();
        assert_eq!(inotify.wait(Duration::from_millis(100)).unwrap(), []);
    }

    #[test]
    fn a_name_made_in_a_watched_directory_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let inotify = Inotify::new().unwrap();
        let watch = inotify
            .watch_names(&std::fs::File::open(dir.path()).unwrap())
            .unwrap();
        std::fs::write(dir.path().join("perf-7.map"), b"").unwrap();
        std::fs::write(dir.path().join("elsewhere"), b"").unwrap();
        std::fs::rename(dir.path().join("elsewhere"), dir.path().join("perf-8.map")).unwrap();
        let mut names = Vec::new();
        while names.len() < 3 {
            let events = inotify.wait(Duration::from_secs(5)).unwrap();
            assert!(!events.is_empty(), "no event for {names:?}");
            names.extend(events.into_iter().map(|event| {
                assert_eq!(event.watch, watch);
                event.name.unwrap()
            }));
        }
        assert_eq!(names, ["perf-7.map", "elsewhere", "perf-8.map"]);
    }
}
