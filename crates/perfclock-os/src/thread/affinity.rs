//! The CPUs a thread may run on: saving the calling thread's whole mask and restoring it after
//! pinning the thread (`core_affinity` pins to one CPU but neither reads nor restores a mask).
//!
//! # Safety
//! The unsafe calls are `sched_getaffinity`/`sched_setaffinity` of the calling thread into and
//! from a `cpu_set_t` this module owns, passed with its own size; an all-zero `cpu_set_t` (a
//! plain bit array) is a valid starting value.
#![allow(unsafe_code)]

use std::io;

/// The calling thread's CPU affinity mask as it was when [`AffinityGuard::save`] ran, set
/// again on the thread that drops the guard.
pub struct AffinityGuard {
    set: libc::cpu_set_t,
}

impl std::fmt::Debug for AffinityGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // SAFETY: CPU_COUNT only reads the set this value owns.
        let cpus = unsafe { libc::CPU_COUNT(&self.set) };
        f.debug_struct("AffinityGuard")
            .field("cpus", &cpus)
            .finish()
    }
}

impl AffinityGuard {
    /// Saves the calling thread's affinity, restored when the guard drops.
    ///
    /// # Errors
    /// `sched_getaffinity`'s errno (e.g. `EPERM` under a seccomp policy).
    pub fn save() -> io::Result<Self> {
        // SAFETY: cpu_set_t is a plain bit array; all-zero is valid.
        let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
        // SAFETY: the size passed is the size of `set`, which the kernel fills.
        let rc = unsafe {
            libc::sched_getaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &mut set)
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { set })
    }
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        // SAFETY: sets the mask read in `save`, with its own size. A failure (a CPU taken
        // offline since) leaves the thread pinned where it was: nothing to report from a drop.
        unsafe {
            libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &self.set);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's mask as the kernel reports it in /proc.
    fn allowed_list() -> String {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_owned()
    }

    #[test]
    fn dropping_the_guard_restores_the_mask_after_pinning() {
        std::thread::spawn(|| {
            let before = allowed_list();
            let guard = AffinityGuard::save().unwrap();
            let first = first_allowed_cpu(&guard);
            // SAFETY: a mask of one CPU the thread was allowed, with its own size.
            let mut one: libc::cpu_set_t = unsafe { core::mem::zeroed() };
            // SAFETY: `first` is below CPU_SETSIZE (it came from a cpu_set_t).
            unsafe { libc::CPU_SET(first, &mut one) };
            // SAFETY: as in Drop, with a set this test owns.
            let rc = unsafe {
                libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &one)
            };
            assert_eq!(rc, 0);
            assert_eq!(allowed_list(), first.to_string());
            drop(guard);
            assert_eq!(allowed_list(), before);
        })
        .join()
        .unwrap();
    }

    fn first_allowed_cpu(guard: &AffinityGuard) -> usize {
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: CPU_ISSET reads the guard's set at an index below CPU_SETSIZE.
            .find(|&cpu| unsafe { libc::CPU_ISSET(cpu, &guard.set) })
            .unwrap()
    }
}
