//! The processes `perfclock record` starts never outlive it, and never outlive each other:
//!
//! - each child gets a parent-death signal ([`supervise`]), so even a SIGKILL of perfclock
//!   stops perf (which then stops the command it runs);
//! - each child starts with SIGHUP ignored, so a closed terminal stops perf through perfclock
//!   (which forwards SIGINT and then writes OUT) instead of killing it before it wrote its file;
//! - perfclock is a child subreaper ([`become_subreaper`]): when perf dies without stopping the
//!   command (SIGKILL), the command becomes perfclock's child and [`stop_adopted`] stops it.
//!
//! # Safety
//! This module calls `kill`, `prctl`, `signal`, `getppid`, `getpid`, `geteuid` and `waitpid` through libc
//! (no safe wrapper in the workspace's dependencies), and runs a `pre_exec` closure in the forked
//! child, where only async-signal-safe calls are allowed: `prctl`, `signal`, `getppid` are.
#![allow(unsafe_code)]

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// Makes `command`'s child receive `death_signal` when perfclock's thread that spawns it ends
/// (perfclock dies, even by SIGKILL), and start with SIGHUP ignored.
pub(crate) fn supervise(command: &mut Command, death_signal: i32) {
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and calls only prctl, signal
    // and getppid, which are async-signal-safe; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                death_signal as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // perfclock died between the fork and the prctl: nothing will deliver the signal.
            if libc::getppid() != parent {
                return Err(io::Error::other("perfclock exited while starting a child"));
            }
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
}

/// Sends `signal` to `pid`.
pub(crate) fn kill(pid: u32, signal: i32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill has no memory-safety preconditions; pid is positive.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// perfclock's effective uid.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Makes perfclock adopt its descendants whose parent dies (PR_SET_CHILD_SUBREAPER).
pub(crate) fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How long [`stop_adopted`] waits for a process after SIGKILL.
const UNKILLABLE_WAIT: Duration = Duration::from_secs(5);

/// The pids whose parent is perfclock (from each `/proc/PID/stat`'s fourth field).
fn children() -> Vec<u32> {
    // SAFETY: getpid has no preconditions.
    let own = unsafe { libc::getpid() }.to_string();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // The command name is in parentheses and may hold spaces: fields follow the
                // last `)`.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(|p| p == own))
                    .unwrap_or(false)
            })
        })
        .collect()
}

/// Reaps `pid` if it has exited; whether it had.
fn reaped(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    let mut status = 0;
    // SAFETY: waitpid on a pid (a child of ours) with a valid status pointer.
    let result = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    result == pid || result < 0
}

/// Stops every process perfclock adopted (its remaining children): SIGTERM, then SIGKILL after
/// `grace`; repeats for the descendants each one leaves behind, within a few rounds. Returns
/// the pids stopped.
pub(crate) fn stop_adopted(grace: Duration) -> Vec<u32> {
    let mut stopped = Vec::new();
    for _ in 0..8 {
        let pids = children();
        if pids.is_empty() {
            break;
        }
        for &pid in &pids {
            let _ = kill(pid, libc::SIGTERM);
        }
        let start = Instant::now();
        let mut left: Vec<u32> = pids.clone();
        // A process stuck in the kernel may not die at once even of SIGKILL: give up on it.
        while !left.is_empty() && start.elapsed() < grace + UNKILLABLE_WAIT {
            left.retain(|&pid| !reaped(pid));
            if start.elapsed() >= grace {
                for &pid in &left {
                    let _ = kill(pid, libc::SIGKILL);
                }
            }
            thread::sleep(Duration::from_millis(20));
        }
        stopped.extend(pids);
    }
    stopped
}
