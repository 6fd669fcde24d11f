//! Process-wide state the writers and the facade ask about: the pid (cached, and forgotten in a
//! fork child), a function run at exit, and whether the time stamp counter may be read.
//!
//! # Safety
//! Each unsafe call registers a hook with libc or asks the kernel one question: `atexit` with an
//! `extern "C" fn()` (which cannot unwind into libc: a panic escaping it aborts),
//! `pthread_atfork` with this module's child handler, which only stores to an atomic
//! (async-signal-safe, as a handler in the child of a multithreaded process must be), and
//! `prctl(PR_GET_TSC)` writing one int into a local.
#![allow(unsafe_code)]

pub mod children;

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

static FORK_HOOK: Once = Once::new();

/// This process's pid, or 0 until looked up; reset in a fork child. glibc no longer caches
/// `getpid`, and the writers' fork check runs on every record, which must make no system call.
static PID: AtomicU32 = AtomicU32::new(0);

/// This process's pid, from a cache that a fork child starts without (so a child's first call
/// looks its own pid up). Makes no system call after the first.
pub fn current_pid() -> u32 {
    // ATOMICS: Relaxed: the value is the same whichever thread stored it, and a thread that
    // sees a stale 0 looks it up again.
    match PID.load(Ordering::Relaxed) {
        0 => {
            // Registered before the first value is cached, so no fork copies a cached pid
            // without the handler that forgets it.
            FORK_HOOK.call_once(|| {
                // SAFETY: the child handler only stores to an atomic (async-signal-safe). Should
                // the registration fail (ENOMEM), a fork child would read its parent's pid from
                // the cache: the writers document fork children as unsupported for files
                // opened before the fork.
                unsafe { libc::pthread_atfork(None, None, Some(forget_pid_in_child)) };
            });
            let pid = std::process::id();
            PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

extern "C" fn forget_pid_in_child() {
    PID.store(0, Ordering::Relaxed);
}

/// Runs `hook` when the process calls `exit(3)` (returns from `main`), after hooks registered
/// later. Not on `_exit`, a fatal signal or an abort.
///
/// # Errors
/// `ENOMEM` when libc cannot record the hook.
pub fn at_exit(hook: extern "C" fn()) -> io::Result<()> {
    // SAFETY: `hook` is an `extern "C" fn()` taking nothing: it cannot unwind into libc, and
    // libc calls it with no arguments, as its type says.
    if unsafe { libc::atexit(hook) } == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::ENOMEM))
    }
}

/// Whether this thread gets SIGSEGV for reading the time stamp counter (`prctl(PR_SET_TSC,
/// PR_TSC_SIGSEGV)` by it or the thread that created it), asked without reading it. A kernel
/// without the prctl (EINVAL) cannot disable the counter either: `false`.
#[cfg(target_arch = "x86_64")]
pub fn counter_faults() -> bool {
    let mut state: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes one int through the pointer, which points at `state`.
    let rc = unsafe { libc::prctl(libc::PR_GET_TSC, &mut state as *mut libc::c_int) };
    rc == 0 && state == libc::PR_TSC_SIGSEGV
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cached_pid_is_the_process_id() {
        assert_eq!(current_pid(), std::process::id());
        assert_eq!(current_pid(), std::process::id());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_thread_that_disables_the_counter_is_told_so() {
        let disabled = std::thread::spawn(|| {
            let before = counter_faults();
            // SAFETY: PR_SET_TSC with an integer; this thread reads no counter afterwards.
            let rc = unsafe { libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_SIGSEGV, 0, 0, 0) };
            assert_eq!(rc, 0);
            (before, counter_faults())
        })
        .join()
        .unwrap();
        assert_eq!(disabled, (false, true));
    }
}
