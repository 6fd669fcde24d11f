//! The calling thread's properties: its kernel id ([`gettid`]), its name (what perf records in
//! `COMM` records), its signal mask, its scheduling (nice value, real-time class), and
//! ([`affinity`]) the CPUs it may run on.
//!
//! # Safety
//! Each unsafe block is one call on the calling thread's own state: `gettid`, `prctl(PR_GET_NAME)` writing
//! at most 16 bytes into a 16-byte array, `prctl(PR_SET_NAME)` reading a NUL-terminated array of
//! 16 bytes, `sigfillset`/`pthread_sigmask` on a local `sigset_t`, `setpriority` of the
//! thread's own id, and `sched_setscheduler` of the calling thread from a local `sched_param`.
#![allow(unsafe_code)]

pub mod affinity;

use std::io;

/// A thread name as the kernel keeps it (`TASK_COMM_LEN`): at most 15 bytes, NUL-terminated.
/// The default is the empty name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadName {
    /// Invariant: NUL-terminated within the array (byte 15 is always 0).
    bytes: [u8; 16],
}

impl ThreadName {
    /// The calling thread's name.
    ///
    /// # Errors
    /// `prctl`'s errno (`EPERM` under a seccomp policy).
    pub fn current() -> io::Result<ThreadName> {
        let mut bytes = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes (TASK_COMM_LEN) into the array.
        if unsafe { libc::prctl(libc::PR_GET_NAME, bytes.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        bytes[15] = 0;
        Ok(ThreadName { bytes })
    }

    /// A name of at most 15 bytes without a NUL; `None` otherwise (the kernel would cut it).
    pub fn new(name: &[u8]) -> Option<ThreadName> {
        if name.len() > 15 || name.contains(&0) {
            return None;
        }
        let mut bytes = [0u8; 16];
        bytes[..name.len()].copy_from_slice(name);
        Some(ThreadName { bytes })
    }

    /// Gives the calling thread this name (the kernel stamps a `COMM` record for it). Always
    /// inlined: the calibration times it between two counter reads.
    ///
    /// # Errors
    /// `prctl`'s errno (`EPERM` under a seccomp policy).
    #[inline(always)]
    pub fn set_current(&self) -> io::Result<()> {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes; byte 15 of the
        // array is 0 by the invariant.
        if unsafe { libc::prctl(libc::PR_SET_NAME, self.bytes.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The name's bytes, without the NUL.
    pub fn as_bytes(&self) -> &[u8] {
        let len = self.bytes.iter().position(|&b| b == 0).unwrap_or(15);
        &self.bytes[..len]
    }
}

/// Blocks every signal on the calling thread (the others keep their masks), so that the
/// process's signals go to other threads and no handler interrupts this one.
///
/// # Errors
/// `pthread_sigmask`'s error (it fails only for a bad argument: never here).
pub fn block_all_signals() -> io::Result<()> {
    // SAFETY: sigset_t is plain data, initialised by sigfillset; pthread_sigmask reads it and
    // changes only this thread's mask, with no old set requested.
    let rc = unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, core::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Sets the calling thread's nice value (Linux keeps one per thread): a thread that must wake
/// at once when it has work, and has little, asks for a lower one than the process's.
///
/// # Errors
/// `setpriority`'s errno: `EACCES` below the current value without `CAP_SYS_NICE` (or
/// `RLIMIT_NICE`).
pub fn set_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority on this thread's own id with plain integers.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, gettid(), nice) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Puts the calling thread in the `SCHED_FIFO` class at `priority` (1 to 99), or back in the
/// normal class (`None`): a real-time thread runs as soon as it wakes, before every normal
/// one.
///
/// # Errors
/// `sched_setscheduler`'s errno: `EPERM` without `CAP_SYS_NICE` (or `RLIMIT_RTPRIO`).
pub fn set_realtime(priority: Option<i32>) -> io::Result<()> {
    let (policy, priority) = match priority {
        Some(priority) => (libc::SCHED_FIFO, priority),
        None => (libc::SCHED_OTHER, 0),
    };
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a live, initialised sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's kernel id (`gettid`), as perf records it in `tid` fields.
pub fn gettid() -> u32 {
    // SAFETY: gettid takes no arguments, has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    // A thread id is a positive pid_t.
    tid.unsigned_abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gettid_is_the_kernels_id_of_the_calling_thread() {
        let here = || {
            let link = std::fs::read_link("/proc/thread-self").unwrap();
            (
                gettid(),
                link.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .parse::<u32>()
                    .unwrap(),
            )
        };
        let (tid, kernel) = here();
        assert_eq!(tid, kernel);
        let (other, other_kernel) = std::thread::spawn(here).join().unwrap();
        assert_eq!(other, other_kernel);
        assert_ne!(other, tid);
    }

    #[test]
    fn a_name_set_is_the_name_read_and_too_long_names_are_refused() {
        std::thread::spawn(|| {
            let name = ThreadName::new(b"pc-test-name").unwrap();
            name.set_current().unwrap();
            assert_eq!(ThreadName::current().unwrap(), name);
            assert_eq!(ThreadName::current().unwrap().as_bytes(), b"pc-test-name");
            let comm = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
            assert_eq!(comm.trim_end(), "pc-test-name");
        })
        .join()
        .unwrap();
        assert!(ThreadName::new(b"sixteen-bytes-xx").is_none());
        assert!(ThreadName::new(b"nul\0inside").is_none());
    }

    #[test]
    fn a_blocking_thread_has_every_signal_blocked() {
        let blocked = std::thread::spawn(|| {
            block_all_signals().unwrap();
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let mask = status
                .lines()
                .find_map(|line| line.strip_prefix("SigBlk:"))
                .unwrap()
                .trim()
                .to_owned();
            u64::from_str_radix(&mask, 16).unwrap()
        })
        .join()
        .unwrap();
        // The signals a process gets asked to stop with are blocked; SIGKILL and SIGSTOP
        // cannot be.
        let unblockable = (1 << (libc::SIGKILL - 1)) | (1 << (libc::SIGSTOP - 1));
        assert_eq!(blocked & unblockable, 0);
        assert_eq!(
            blocked & (1 << (libc::SIGTERM - 1)),
            1 << (libc::SIGTERM - 1)
        );
        assert_eq!(blocked & (1 << (libc::SIGINT - 1)), 1 << (libc::SIGINT - 1));
    }
}
