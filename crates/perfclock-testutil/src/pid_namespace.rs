//! For the writers' tests (jitdump, markers) that two writers, both pid 1 of their own pid
//! namespace and sharing one directory, do not take each other's live file for a stale one.
//!
//! The test binary is re-executed under `unshare --pid --fork --mount-proc`, filtered to a child
//! test that reads its directory and role from the environment ([`child_role`]) and says on
//! stdout what happened; the parent reads that with [`spawn_first`], [`assert_second_refused`]
//! and [`assert_second_opens`].

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

/// The test's directory, shared by its two pid namespaces.
const DIR_ENV: &str = "PERFCLOCK_TEST_PIDNS_DIR";
/// `first` or `second`, see [`Role`].
const ROLE_ENV: &str = "PERFCLOCK_TEST_PIDNS_ROLE";

/// What the child does in the shared directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Opens its file, writes, [`hold_open`], writes again, closes, [`first_done`].
    First,
    /// Opens once, writes, closes, and reports how the open went ([`report_second`]).
    Second,
}

/// The directory and role of a child run by [`command`]; `None` when the child test runs as an
/// ordinary test, which then does nothing. Asserts that the child is pid 1.
pub fn child_role() -> Option<(PathBuf, Role)> {
    let dir = std::env::var_os(DIR_ENV)?;
    let role = match std::env::var(ROLE_ENV).ok()?.as_str() {
        "first" => Role::First,
        _ => Role::Second,
    };
    assert_eq!(std::process::id(), 1, "not pid 1 of its own pid namespace");
    Some((PathBuf::from(dir), role))
}

/// The first child says where its file is, and keeps it open (and so locked) until the parent
/// closes its stdin.
pub fn hold_open(path: &Path) {
    println!("PIDNS-OPEN {}", path.display());
    std::io::copy(&mut std::io::stdin(), &mut std::io::sink()).unwrap();
}

/// The first child has written once more and closed its file.
pub fn first_done() {
    println!("PIDNS-FIRST-DONE");
}

/// The second child's open: done, refused because the file at `live_path(error)` is held by a
/// live writer, or another error (`live_path` gives `None`).
pub fn report_second<E: std::fmt::Display + std::fmt::Debug>(
    opened: Result<(), E>,
    live_path: impl FnOnce(&E) -> Option<&Path>,
) {
    match opened {
        Ok(()) => println!("PIDNS-SECOND-OPENED"),
        Err(error) => match live_path(&error) {
            Some(path) => println!(
                "PIDNS-SECOND-REFUSED path={} message={error}",
                path.display()
            ),
            None => println!("PIDNS-SECOND-OTHER-ERROR {error:?}"),
        },
    }
}

/// Whether `unshare` can make a pid namespace here; says why not ([`skip`](fn@crate::skip)).
pub fn unshare_or_skip(test: &str) -> bool {
    match Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .output()
    {
        Err(error) => {
            crate::skip(test, crate::Need::Tool("unshare"), error);
            false
        }
        Ok(probe) if !probe.status.success() => {
            crate::skip(
                test,
                crate::Need::Root,
                format_args!(
                    "unshare --pid --fork --mount-proc: {}",
                    String::from_utf8_lossy(&probe.stderr).trim()
                ),
            );
            false
        }
        Ok(_) => true,
    }
}

/// The child test `child_test` (its path in the test binary) as pid 1 of a new pid namespace,
/// in `dir`, as `role`.
pub fn command(child_test: &str, dir: &Path, role: Role) -> Command {
    let mut command = Command::new("unshare");
    command
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", child_test, "--nocapture", "--test-threads=1"])
        .env(DIR_ENV, dir)
        .env(
            ROLE_ENV,
            match role {
                Role::First => "first",
                Role::Second => "second",
            },
        );
    command
}

/// The first child, holding its file open.
#[derive(Debug)]
pub struct First {
    child: Child,
    out: BufReader<ChildStdout>,
    /// The file it holds, as it says.
    pub path: PathBuf,
}

/// Starts the first child and waits until it holds its file; `exited_early` is the failure's
/// message when it exits before that.
pub fn spawn_first(child_test: &str, dir: &Path, exited_early: &str) -> First {
    let mut child = command(child_test, dir, Role::First)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let path = loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "{exited_early}: {:?}",
            child.wait()
        );
        // libtest prints `test <child_test> ... ` before the test's own output.
        if let Some((_, path)) = line.trim_end().split_once("PIDNS-OPEN ") {
            break PathBuf::from(path);
        }
    };
    First { child, out, path }
}

impl First {
    /// Closes its stdin, so it writes once more and closes its file; asserts it did and exited.
    pub fn finish(mut self) {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        assert!(self.child.wait().unwrap().success());
        assert!(rest.contains("PIDNS-FIRST-DONE"), "{rest}");
    }
}

/// Runs a second child while the first holds `path`: its open must be refused as the file at
/// `path` being live, with a message that says why and what to do; `not_refused` is the
/// failure's message otherwise.
pub fn assert_second_refused(child_test: &str, dir: &Path, path: &Path, not_refused: &str) {
    let second = command(child_test, dir, Role::Second).output().unwrap();
    let second_out = String::from_utf8_lossy(&second.stdout);
    assert!(second.status.success(), "{second:?}");
    assert!(
        second_out.contains(&format!(
            "PIDNS-SECOND-REFUSED path={} message=",
            path.display()
        )),
        "{not_refused}: {second_out}"
    );
    for words in [
        "held open by a live writer",
        "pid namespace",
        "own dump directory",
    ] {
        assert!(second_out.contains(words), "{words} missing: {second_out}");
    }
}

/// Runs a second child once the first has exited: its open must succeed.
pub fn assert_second_opens(child_test: &str, dir: &Path) {
    let third = command(child_test, dir, Role::Second).output().unwrap();
    let third_out = String::from_utf8_lossy(&third.stdout);
    assert!(third_out.contains("PIDNS-SECOND-OPENED"), "{third_out}");
}
