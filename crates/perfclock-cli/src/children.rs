//! The processes `perfclock record` starts never outlive it, and never outlive each other:
//!
//! - each child gets a parent-death signal ([`die_with_parent`]), so even a SIGKILL of perfclock
//!   stops perf (which then stops the command it runs);
//! - each child starts with SIGHUP ignored, so a closed terminal stops perf through perfclock
//!   (which forwards SIGINT and then writes OUT) instead of killing it before it wrote its file;
//! - perfclock is a child subreaper ([`become_subreaper`]): when perf dies without stopping the
//!   command (SIGKILL), the command becomes perfclock's child and [`stop_adopted`] stops it.
//!
//! The system calls are `perfclock_os::process::children`'s.

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use perfclock_os::process::children::reap_if_exited;
pub(crate) use perfclock_os::process::children::{become_subreaper, die_with_parent, kill};

/// How long [`stop_adopted`] waits for a process after SIGKILL.
const UNKILLABLE_WAIT: Duration = Duration::from_secs(5);

/// The pids whose parent is perfclock (from each `/proc/PID/stat`'s fourth field).
fn children() -> Vec<u32> {
    let own = std::process::id().to_string();
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
            left.retain(|&pid| !reap_if_exited(pid));
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
