//! The few libc calls std does not wrap: effective credentials and `kill`.
//!
//! # Safety
//! Each unsafe call is one libc call that takes plain integers (`geteuid`, `getegid`,
//! `seteuid`, `setegid`, `kill`) and touches no memory of ours; the effective ids it changes
//! are restored by [`EffectiveIds`]'s drop.
#![allow(unsafe_code)]

use std::io;

/// perfclock's effective uid.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// perfclock's effective gid.
pub(crate) fn effective_gid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

/// Sends `signal` to process `pid` (in perfclock's pid namespace).
pub(crate) fn kill(pid: u32, signal: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// perfclock's effective uid and gid switched to another user's until dropped (root only):
/// HotSpot accepts an attach peer whose effective ids are its own, and trusts only trigger files
/// its own user (or root) owns. glibc applies the change to every thread of the process.
#[derive(Debug)]
pub(crate) struct EffectiveIds {
    saved_uid: u32,
    saved_gid: u32,
}

impl EffectiveIds {
    /// Switches the effective gid, then the effective uid (after it, changing the gid would be
    /// refused).
    pub(crate) fn switch_to(uid: u32, gid: u32) -> io::Result<Self> {
        let saved = Self {
            saved_uid: effective_uid(),
            saved_gid: effective_gid(),
        };
        // SAFETY: setegid takes a plain integer and touches no memory of ours.
        if unsafe { libc::setegid(gid) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above, for seteuid.
        if unsafe { libc::seteuid(uid) } != 0 {
            let error = io::Error::last_os_error();
            // SAFETY: as above; restores what we changed (still permitted: euid unchanged).
            unsafe { libc::setegid(saved.saved_gid) };
            return Err(error);
        }
        Ok(saved)
    }
}

impl Drop for EffectiveIds {
    fn drop(&mut self) {
        // The uid first: as root again, the gid may be set back. A failure cannot be reported
        // from drop and leaves perfclock with fewer rights, never more.
        // SAFETY: seteuid/setegid take plain integers and touch no memory of ours.
        unsafe {
            libc::seteuid(self.saved_uid);
            libc::setegid(self.saved_gid);
        }
    }
}
