//! The parent: starts a child in a role and judges what it reports.

use std::ffi::OsStr;
use std::fmt;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use crate::list::{Verdict, SIGNAL_SAFE};
use crate::{Role, DIR_ENV, ROLE_ENV};

/// A child that started.
#[derive(Debug)]
pub enum Started {
    /// Its clock opened in the role's mode; the handler waits for [`Running::judge`].
    Ready(Running),
    /// Its clock opened in another mode (the child's line, `MODE <n> rc <code>`): this machine
    /// does not have the role's mode.
    OtherMode(String),
}

/// A child whose clock opened in its role's mode, waiting for the signal.
#[derive(Debug)]
pub struct Running {
    role: Role,
    child: Child,
    out: BufReader<ChildStdout>,
}

/// What a child's report showed.
#[derive(Debug)]
pub struct Judgement {
    /// The role the child ran.
    pub role: Role,
    /// Functions of the list the handler called.
    pub functions: usize,
    /// Their allocations, all together.
    pub allocations: u64,
    /// The system calls they tried, all together.
    pub syscalls: u64,
    /// Functions whose result was wrong for the mode.
    pub wrong: usize,
    /// The control's allocations and system calls (each must be counted: at least 1).
    pub control: (u64, u64),
    /// What failed, one line each: empty when the proof holds.
    pub failures: Vec<String>,
}

impl fmt::Display for Judgement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mode={} functions={} allocations={} syscalls={} wrong={} control_allocations={} \
             control_syscalls={}",
            self.role,
            self.functions,
            self.allocations,
            self.syscalls,
            self.wrong,
            self.control.0,
            self.control.1
        )
    }
}

/// Starts `exe` (a binary that calls [`child_if_asked`](crate::child_if_asked) first) as the
/// child of `role`, with `env` added and its marker file in `dir`, and waits until its clock is
/// open.
///
/// # Errors
/// When the child cannot be started, or fails to set itself up (its message).
pub fn start(
    exe: &Path,
    role: Role,
    env: &[(&str, &OsStr)],
    dir: &Path,
) -> Result<Started, String> {
    let mut command = Command::new(exe);
    command
        .env(ROLE_ENV, role.name())
        .env(DIR_ENV, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .spawn()
        .map_err(|error| format!("{role}: cannot start {}: {error}", exe.display()))?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("{role}: the child has no stdout"));
    };
    let mut out = BufReader::new(stdout);
    let mut line = String::new();
    let read = out.read_line(&mut line);
    let line = line.trim();
    if read.is_ok() && line == "READY" {
        return Ok(Started::Ready(Running { role, child, out }));
    }
    let status = child.wait();
    match read {
        Ok(_) if line.starts_with("MODE ") => Ok(Started::OtherMode(line.to_owned())),
        _ => Err(format!(
            "{role}: the child said {line:?} instead of READY, and ended with {status:?}"
        )),
    }
}

impl Running {
    /// Lets the child's handler run and judges its report.
    pub fn judge(mut self) -> Judgement {
        let role = self.role;
        let mut judgement = Judgement {
            role,
            functions: 0,
            allocations: 0,
            syscalls: 0,
            wrong: 0,
            control: (0, 0),
            failures: Vec::new(),
        };
        let failures = &mut judgement.failures;
        let sent = match self.child.stdin.as_mut() {
            Some(stdin) => stdin.write_all(b"GO\n").and_then(|()| stdin.flush()),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        };
        let mut report = String::new();
        let read = self.out.read_to_string(&mut report);
        let status = self.child.wait();
        match (&sent, &read, &status) {
            (Ok(()), Ok(_), Ok(status)) if status.success() => {}
            _ => {
                failures.push(format!(
                    "{role}: GO {sent:?}, report {read:?}, the child ended with {status:?}; \
                     it said: {report}"
                ));
                return judgement;
            }
        }
        if !report
            .lines()
            .any(|line| line == "DONE true unfiltered false")
        {
            failures.push(format!(
                "{role}: the handler did not run, or not on the filtered thread: {report}"
            ));
        }
        for line in report.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words[..] {
                ["FN", name, "allocations", allocations, "syscalls", syscalls, "last", last, "verdict", verdict] =>
                {
                    judgement.functions += 1;
                    // An unreadable count counts as the most there can be.
                    judgement.allocations = judgement
                        .allocations
                        .saturating_add(number(allocations).unwrap_or(u64::MAX));
                    judgement.syscalls = judgement
                        .syscalls
                        .saturating_add(number(syscalls).unwrap_or(u64::MAX));
                    if number(allocations) != Some(0) {
                        failures.push(format!("{role}: {name} allocated {allocations} times"));
                    }
                    if number(syscalls) != Some(0) {
                        failures.push(format!(
                            "{role}: {name} made {syscalls} system calls (the last: number \
                             {last})"
                        ));
                    }
                    if number(verdict) != Some(Verdict::Sane as u64)
                        && number(verdict) != Some(Verdict::NotInMode as u64)
                    {
                        judgement.wrong += 1;
                        failures.push(format!("{role}: {name} returned a wrong value"));
                    }
                }
                ["CONTROL", "allocations", allocations, "syscalls", syscalls, "last", _] => {
                    let control = (number(allocations), number(syscalls));
                    judgement.control = (control.0.unwrap_or(0), control.1.unwrap_or(0));
                }
                _ => {}
            }
        }
        if judgement.functions != SIGNAL_SAFE.len() {
            failures.push(format!(
                "{role}: {} of {} functions reported: {report}",
                judgement.functions,
                SIGNAL_SAFE.len()
            ));
        }
        if judgement.control.0 == 0 || judgement.control.1 == 0 {
            failures.push(format!(
                "{role}: the control's allocation and system call must both count, counted {:?}: \
                 the counts cannot be trusted",
                judgement.control
            ));
        }
        judgement
    }
}

fn number(word: &str) -> Option<u64> {
    word.parse().ok()
}
