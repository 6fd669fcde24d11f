//! The process-wide hooks of the writers: the pid cached for the fork check, forgotten in a fork
//! child, and a flush when the process exits.
//!
//! # Safety
//! The only unsafe calls register hooks with libc, once per process: `atexit` with an
//! `extern "C" fn()` (which cannot unwind into libc: a panic escaping it aborts), and
//! `pthread_atfork` with a child handler that only stores to an atomic, which is
//! async-signal-safe as a handler in the child of a multithreaded process must be.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

static HOOKS: Once = Once::new();

/// This process's pid, or 0 until looked up; reset in a fork child. glibc no longer caches
/// `getpid`, and the fork check runs on every marker, which must make no system call.
static PID: AtomicU32 = AtomicU32::new(0);

/// This process's pid, from a cache that a fork child starts without.
pub(crate) fn current_pid() -> u32 {
    // ATOMICS: Relaxed: the value is the same whichever thread stored it, and a thread that
    // sees a stale 0 looks it up again.
    match PID.load(Ordering::Relaxed) {
        0 => {
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

/// Registers, on the first call in the process, `at_exit` to run at `exit(3)` and the fork
/// child's reset of [`current_pid`]'s cache.
pub(crate) fn register_hooks(at_exit: extern "C" fn()) {
    HOOKS.call_once(|| {
        // SAFETY: `at_exit` is an `extern "C" fn()`: it cannot unwind into libc. A failed
        // registration only loses the exit-time flush, which close/drop still do.
        let _ = unsafe { libc::atexit(at_exit) };
        // SAFETY: the child handler only stores to an atomic (async-signal-safe). Should
        // registration fail, `PID` keeps the parent's pid in a child and a child's copy of a
        // writer would append to the parent's file: fork children are documented as
        // unsupported for writers opened before the fork either way.
        let _ = unsafe { libc::pthread_atfork(None, None, Some(forget_pid_in_child)) };
    });
}
