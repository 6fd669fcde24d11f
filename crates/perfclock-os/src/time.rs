//! The kernel's clocks as `clock_gettime` reads them, and the boot they belong to: counter
//! values and `C` mean nothing in another boot, so whatever records them records the boot id.
//!
//! # Safety
//! One unsafe call: `clock_gettime` into a local `timespec` (no preconditions beyond a valid
//! out-pointer).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use perfclock_core::BootId;

/// A clock [`clock_gettime_ns`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClockId {
    /// `CLOCK_MONOTONIC`.
    Monotonic,
    /// `CLOCK_BOOTTIME`.
    Boottime,
    /// `CLOCK_REALTIME`.
    Realtime,
    /// `CLOCK_THREAD_CPUTIME_ID`: CPU time of the calling thread.
    ThreadCpuTime,
}

impl ClockId {
    fn raw(self) -> libc::clockid_t {
        match self {
            ClockId::Monotonic => libc::CLOCK_MONOTONIC,
            ClockId::Boottime => libc::CLOCK_BOOTTIME,
            ClockId::Realtime => libc::CLOCK_REALTIME,
            ClockId::ThreadCpuTime => libc::CLOCK_THREAD_CPUTIME_ID,
        }
    }
}

/// `clock_gettime(clock)` in ns since the clock's epoch (negative for a `CLOCK_REALTIME` before
/// 1970). Served by the vDSO where the kernel offers it; inlined so a timing loop measures that
/// call, not a call to this function.
///
/// # Errors
/// The call's errno (a seccomp policy can refuse it).
#[inline]
pub fn clock_gettime_ns(clock: ClockId) -> io::Result<i128> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only it.
    let rc = unsafe { libc::clock_gettime(clock.raw(), &mut ts) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec))
}

/// `CLOCK_MONOTONIC` in ns; 0 if the call failed (Linux does not fail it, but a seccomp policy
/// can refuse the system call behind it where there is no vDSO).
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_gettime_ns(ClockId::Monotonic)
        .ok()
        .and_then(|ns| u64::try_from(ns).ok())
        .unwrap_or(0)
}

/// Where the kernel publishes this boot's id.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's id (`/proc/sys/kernel/random/boot_id`), read with one `read()` (`init()` pays
/// for every system call here).
///
/// # Errors
/// The open's or read's error, or `InvalidData` if the text is not a boot id.
pub fn boot_id() -> io::Result<BootId> {
    use std::io::Read as _;
    let mut buffer = [0u8; 64];
    let len = File::open(BOOT_ID_PATH)?.read(&mut buffer)?;
    std::str::from_utf8(&buffer[..len])
        .ok()
        .and_then(BootId::parse)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a boot id"))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn boot_id_is_the_kernels() {
        let text = std::fs::read_to_string(BOOT_ID_PATH).unwrap();
        assert_eq!(boot_id().unwrap().to_string(), text.trim());
    }

    #[test]
    fn clocks_read() {
        assert!(monotonic_ns() > 0);
        assert!(clock_gettime_ns(ClockId::Realtime).unwrap() > 0);
        let monotonic = monotonic_ns();
        // Boot time is monotonic time plus time suspended.
        assert!(clock_gettime_ns(ClockId::Boottime).unwrap() >= i128::from(monotonic));
        assert!(clock_gettime_ns(ClockId::ThreadCpuTime).unwrap() > 0);
    }
}
