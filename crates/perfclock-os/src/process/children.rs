//! Child processes: signals sent to them, the signal they get when their parent dies, adopting
//! orphaned descendants, reaping.
//!
//! Written over `libc`: the standard library's `Child` covers only processes it spawned, and
//! these calls also reach the processes a tool adopts as a subreaper.
//!
//! # Safety
//! Each unsafe block is one system call that takes plain integers (`kill`, `prctl`, `waitpid`
//! with a status word on the stack), except [`die_with_parent`]'s `pre_exec` closure, which runs
//! in the forked child before `exec`, where only async-signal-safe calls are allowed: it calls
//! `prctl`, `getppid` and `signal`, which are, and allocates nothing.
#![allow(unsafe_code)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes `command`'s child receive `death_signal` when the thread that spawns it ends (its
/// process dies, even by SIGKILL), and start with SIGHUP ignored (so a closed terminal reaches
/// it only through its parent). Spawning fails, naming the cause, if the parent died before the
/// signal was set up (nothing would deliver it).
pub fn die_with_parent(command: &mut Command, death_signal: i32) {
    let parent = std::process::id();
    let death_signal = death_signal as libc::c_ulong;
    // SAFETY: the closure runs in the forked child before exec and calls only prctl, getppid
    // and signal, which are async-signal-safe; it allocates nothing on success (the error
    // paths build an io::Error from an errno or a static message, as std's own pre_exec
    // failures do).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, death_signal, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                return Err(io::Error::other("the parent exited while starting a child"));
            }
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
}

/// Sends `signal` to `pid`.
///
/// # Errors
/// `kill`'s errno (`ESRCH`: no such process; `EPERM`); `InvalidInput` for a pid beyond
/// `pid_t` (it would name a process group).
pub fn kill(pid: u32, signal: i32) -> io::Result<()> {
    let pid = positive_pid(pid)?;
    // SAFETY: kill takes integers only; `pid` is positive, so it names one process.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes this process adopt its descendants whose parent dies (`PR_SET_CHILD_SUBREAPER`).
///
/// # Errors
/// `prctl`'s errno (`EINVAL` before Linux 3.4, `EPERM` under a seccomp policy).
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reaps `pid`, a child of this process, if it has exited; whether it is gone (reaped now, or
/// not a child: nothing left to wait for).
pub fn reap_if_exited(pid: u32) -> bool {
    let Ok(pid) = positive_pid(pid) else {
        return true;
    };
    let mut status = 0;
    // SAFETY: waitpid of one pid, with a pointer to a local status word, without blocking.
    let result = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    result == pid || result < 0
}

fn positive_pid(pid: u32) -> io::Result<libc::pid_t> {
    libc::pid_t::try_from(pid)
        .ok()
        .filter(|pid| *pid > 0)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_child_is_reaped_and_then_gone() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        assert!(!reap_if_exited(pid), "a sleeping child has not exited");
        kill(pid, libc::SIGKILL).unwrap();
        let start = std::time::Instant::now();
        while !reap_if_exited(pid) {
            assert!(
                start.elapsed().as_secs() < 10,
                "SIGKILL did not end the child"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Reaped here, so std's wait finds no child.
        assert!(child.try_wait().is_err());
    }

    #[test]
    fn pids_that_would_name_groups_are_refused() {
        for pid in [0, u32::MAX, 1 << 31] {
            let error = kill(pid, 0).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{pid}");
        }
    }

    #[test]
    fn the_child_starts_with_hangups_ignored() {
        let mut command = Command::new("grep");
        command.args(["^SigIgn:", "/proc/self/status"]);
        die_with_parent(&mut command, libc::SIGTERM);
        let output = command.output().unwrap();
        assert!(output.status.success());
        let text = String::from_utf8(output.stdout).unwrap();
        let ignored = text
            .lines()
            .find_map(|line| line.strip_prefix("SigIgn:"))
            .map(|mask| u64::from_str_radix(mask.trim(), 16).unwrap())
            .unwrap();
        assert_ne!(
            ignored & (1 << (libc::SIGHUP - 1)),
            0,
            "SIGHUP ignored: {text}"
        );
    }
}
