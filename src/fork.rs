//! The process's one `pthread_atfork` registration, for the whole fork story:
//!
//! - prepare: a calibrated page is ordinary memory copied into the child as it is at that
//!   instant, so `fork` waits for an update in progress (`perfclock_calib::fork_gate`);
//! - parent: updates may run again;
//! - child: the same, counting the fork (`fork_gate::generation`: a calibrated clock then knows
//!   its refiner is not in this process, see [`crate::Clock::error_bound_ns`]), and every kernel
//!   page (a do-not-copy mapping, absent in the child) is mapped again at its address before the
//!   child runs any user code (see [`crate::kernel`]).
//!
//! # Safety
//! The handlers make system calls and touch atomics only: no allocation, no locks, as a
//! `pthread_atfork` handler in a possibly multi-threaded parent must.
#![allow(unsafe_code)]

use std::sync::Once;

static INSTALL: Once = Once::new();

/// Registers the handlers, once per process. Called before any page exists.
pub(crate) fn install() {
    INSTALL.call_once(|| {
        // SAFETY: plain `extern "C"` functions that stay valid for the life of the process and
        // are async-signal-safe (see the module docs).
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

extern "C" fn prepare() {
    #[cfg(feature = "calibrated")]
    perfclock_calib::fork_gate::prepare();
}

extern "C" fn parent() {
    #[cfg(feature = "calibrated")]
    perfclock_calib::fork_gate::after();
}

/// The child is single-threaded here and has not returned from `fork` yet.
extern "C" fn child() {
    #[cfg(feature = "calibrated")]
    perfclock_calib::fork_gate::child();
    crate::kernel::remap_in_child();
}
