//! Saving and restoring the calling thread's CPU affinity around the checks that pin it.
//!
//! # Safety
//! The unsafe calls are `sched_getaffinity`/`sched_setaffinity` of the calling thread into and
//! from a `cpu_set_t` this module owns, passed with its own size; an all-zero `cpu_set_t` (a
//! plain bit array) is a valid starting value.
#![allow(unsafe_code)]

/// Restores the calling thread's CPU affinity on drop.
pub(crate) struct AffinityGuard {
    set: libc::cpu_set_t,
}

impl AffinityGuard {
    /// The calling thread's affinity now, restored when the guard drops; `None` if it cannot
    /// be read.
    pub(crate) fn save() -> Option<Self> {
        // SAFETY: cpu_set_t is a plain bit array; all-zero is valid.
        let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
        // SAFETY: the size passed is the size of `set`, which the kernel fills.
        let rc = unsafe {
            libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set)
        };
        (rc == 0).then_some(Self { set })
    }
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        // SAFETY: restores the mask read in `save`, with its own size.
        unsafe {
            libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &self.set);
        }
    }
}
