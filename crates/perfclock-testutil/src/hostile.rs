//! For the hostile tests of every crate: run a case in a fresh child process (the test binary
//! re-executed with an environment variable naming the case), a watchdog, seccomp BPF filters,
//! and a formatter that needs no allocation (for code that runs where no system call is
//! allowed).
//!
//! Each hostile case forks, installs seccomp filters, lowers limits or installs signal handlers:
//! things that must not touch the test harness's own process. So the `#[test]` function, run
//! normally, re-executes this test binary with `--exact <its own path>`
//! ([`test_path!`](crate::test_path)) and [`CASE_ENV`]` = <case>`; the same function, seeing
//! the variable, runs the case instead.
//! Tests of one binary share its process: anything that changes the whole process (the
//! process-wide clock, limits, filters, signal handlers) belongs in the case, never in the
//! parent.
//!
//! # Safety
//! Raw libc calls a test harness needs and std does not offer: `fork` (the caller keeps the
//! child to async-signal-safe calls, as [`fork`]'s contract says), `waitpid`, `alarm`, `prctl` and
//! `seccomp` filter installation; each block's `SAFETY:` comment says what the kernel reads.
#![allow(unsafe_code)]

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The environment variable that tells a re-executed test binary which case to run.
pub const CASE_ENV: &str = "PERFCLOCK_HOSTILE_CASE";

/// The case this process was started to run, if it is a child.
pub fn child_case() -> Option<String> {
    std::env::var(CASE_ENV).ok()
}

/// What a child run produced.
#[derive(Debug)]
pub struct ChildRun {
    /// How the child ended.
    pub status: ExitStatus,
    /// Its standard output, lossily decoded.
    pub stdout: String,
    /// Its standard error, lossily decoded.
    pub stderr: String,
    /// From spawn to exit.
    pub elapsed: Duration,
}

impl ChildRun {
    /// The signal that killed the child, if one did.
    pub fn signal(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt as _;
        self.status.signal()
    }

    /// Panics (with the child's output) unless the child exited 0 and printed `marker`.
    pub fn expect_success(&self, marker: &str) {
        assert!(
            self.status.success() && self.stdout.contains(marker),
            "child failed ({:?}, {:?} after {:?}), expected `{marker}` in its output\n\
             --- stdout\n{}\n--- stderr\n{}",
            self.status,
            self.signal(),
            self.elapsed,
            self.stdout,
            self.stderr
        );
    }

    /// What follows `KEY ` on the first line of the child's output that contains it (libtest
    /// may print its own text before ours on the same line).
    pub fn field(&self, key: &str) -> Option<&str> {
        self.stdout.lines().find_map(|line| {
            let at = line.find(key)?;
            line[at + key.len()..].strip_prefix(' ')
        })
    }
}

/// The path of the test this is expanded in, within its test binary, as libtest names and
/// filters it: `module::function` in a binary of modules, `function` in a one-file binary
/// ([`module_path!`] without the crate's name, then [`test_name!`](crate::test_name)). What
/// [`run_child`] needs, so a test in a module re-executes itself and not an unknown name.
///
/// ```
/// mod a_module {
///     pub fn an_example() -> String {
///         perfclock_testutil::test_path!()
///     }
/// }
/// assert_eq!(a_module::an_example(), "a_module::an_example");
/// ```
#[macro_export]
macro_rules! test_path {
    () => {{
        let function = $crate::test_name!();
        match ::core::module_path!().split_once("::") {
            Some((_crate, module)) => ::std::format!("{module}::{function}"),
            None => ::std::string::String::from(function),
        }
    }};
}

/// Runs `case` in a fresh process: this test binary, filtered to `test_name` (the test's path
/// within the binary, [`test_path!`](crate::test_path), e.g.
/// `fork::fork_children_and_grandchildren_read_the_same_clock`), with [`CASE_ENV`] set. Kills
/// the child after `timeout` (a hang is reported as a failure, never waited out).
///
/// # Panics
/// When the child cannot be started, hangs, or ran no test: libtest runs nothing for a name that
/// matches no test and exits 0, which no caller may take for the case's success.
pub fn run_child(test_name: &str, case: &str, timeout: Duration) -> ChildRun {
    run_child_with(test_name, case, timeout, &[])
}

/// As [`run_child`], with extra environment variables.
pub fn run_child_with(
    test_name: &str,
    case: &str,
    timeout: Duration,
    env: &[(&str, String)],
) -> ChildRun {
    let exe = std::env::current_exe().expect("current_exe");
    let mut command = Command::new(exe);
    command
        .args([test_name, "--exact", "--test-threads=1", "--nocapture"])
        .env(CASE_ENV, case)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let started = Instant::now();
    let mut child = command.spawn().expect("spawn the test binary again");
    let mut stdout_pipe = child.stdout.take().expect("stdout pipe");
    let mut stderr_pipe = child.stderr.take().expect("stderr pipe");
    // Drain both pipes on threads so a chatty child never blocks on a full pipe.
    let stdout = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout_pipe.read_to_string(&mut text);
        text
    });
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let status = child.wait().expect("wait for the killed child");
            panic!(
                "case {case} hung: killed after {timeout:?} ({status:?})\n--- stdout\n{}\n--- stderr\n{}",
                stdout.join().unwrap_or_default(),
                stderr.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = started.elapsed();
    let run = ChildRun {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
        elapsed,
    };
    // Show the child's report in the parent's (captured unless --nocapture) output.
    print!("{}", run.stdout);
    assert!(
        !run.stdout.lines().any(|line| line == "running 0 tests"),
        "case {case}: the child ran no test: `{test_name}` names none in this binary (a test \
         in a module is `module::function`: test_path!())\n--- stdout\n{}\n--- stderr\n{}",
        run.stdout,
        run.stderr
    );
    run
}

/// The environment variable that hands a child run by [`run_child_in`] its directory.
const DIR_ENV: &str = "PERFCLOCK_TEST_DIR";

/// As [`run_child`], handing the child `dir` ([`child_dir`]), a directory the parent owns.
pub fn run_child_in(test_name: &str, case: &str, timeout: Duration, dir: &Path) -> ChildRun {
    run_child_with(
        test_name,
        case,
        timeout,
        &[(DIR_ENV, dir.display().to_string())],
    )
}

/// The directory the parent handed this child ([`run_child_in`]).
pub fn child_dir() -> PathBuf {
    PathBuf::from(std::env::var_os(DIR_ENV).expect("a child run by run_child_in"))
}

/// Kills this process with SIGALRM after `seconds` unless it has exited: a child that hangs
/// (deadlock, endless retry) dies instead of waiting for the parent's timeout.
pub fn watchdog(seconds: u32) {
    // SAFETY: alarm has no memory effects; SIGALRM's default action terminates the process.
    unsafe { libc::alarm(seconds) };
}

/// `fork()`, for cases that are already running in a child process of their own.
///
/// # Safety
/// As `fork(2)` in a process that may have other threads: the child may only use
/// async-signal-safe functions and memory that no other thread was changing.
pub unsafe fn fork() -> libc::pid_t {
    // SAFETY: the caller's contract.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    pid
}

/// Waits for `pid` and returns its raw wait status.
pub fn wait(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child into a live integer.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            return status;
        }
        let error = std::io::Error::last_os_error();
        assert_eq!(error.raw_os_error(), Some(libc::EINTR), "waitpid: {error}");
    }
}

/// Waits for the fork child `pid` and asserts that it exited with status 0; `what` names it in
/// the failure.
pub fn assert_exited_zero(pid: libc::pid_t, what: impl std::fmt::Display) {
    let status = wait(pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child {what}: {}",
        describe_status(status)
    );
}

/// Describes a raw wait status.
pub fn describe_status(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exit {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("signal {}", libc::WTERMSIG(status))
    } else {
        format!("status {status:#x}")
    }
}

// --- seccomp BPF ---------------------------------------------------------------------------

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
/// `offsetof(struct seccomp_data, nr)` and `arch`.
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH_NATIVE: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH_NATIVE: u32 = 0xC000_00B7;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump_eq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: BPF_JEQ_K,
        jt,
        jf,
        k,
    }
}

/// A filter that allows exactly `allowed` system calls and kills the whole process
/// (`SECCOMP_RET_KILL_PROCESS`, SIGSYS) on any other, or on a foreign syscall ABI.
pub fn allow_only(allowed: &[libc::c_long]) -> Vec<libc::sock_filter> {
    allow_only_else(allowed, libc::SECCOMP_RET_KILL_PROCESS)
}

/// A filter that allows exactly `allowed` system calls and traps any other
/// (`SECCOMP_RET_TRAP`: the calling thread gets SIGSYS, whose `siginfo_t` names the call, and
/// the call fails with ENOSYS); a foreign syscall ABI kills the process.
pub fn trap_all_but(allowed: &[libc::c_long]) -> Vec<libc::sock_filter> {
    allow_only_else(allowed, libc::SECCOMP_RET_TRAP)
}

/// `allowed` pass, any other call gets `otherwise`, a foreign syscall ABI kills the process.
fn allow_only_else(allowed: &[libc::c_long], otherwise: u32) -> Vec<libc::sock_filter> {
    let count = u8::try_from(allowed.len()).expect("few allowed calls");
    let mut program = vec![
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        jump_eq(AUDIT_ARCH_NATIVE, 1, 0),
        stmt(BPF_RET_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
    ];
    for (i, nr) in allowed.iter().enumerate() {
        // Jump over the remaining comparisons and the `otherwise` to the final allow.
        let to_allow = count - i as u8;
        program.push(jump_eq(*nr as u32, to_allow, 0));
    }
    program.push(stmt(BPF_RET_K, otherwise));
    program.push(stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW));
    program
}

/// A filter that makes `nr` fail with `errno` and allows every other system call.
pub fn fail_with_errno(nr: libc::c_long, errno: i32) -> Vec<libc::sock_filter> {
    vec![
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        jump_eq(AUDIT_ARCH_NATIVE, 1, 0),
        stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
        jump_eq(nr as u32, 0, 1),
        stmt(BPF_RET_K, libc::SECCOMP_RET_ERRNO | (errno as u32 & 0xffff)),
        stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Installs `program` on the calling thread only (no `SECCOMP_FILTER_FLAG_TSYNC`): other
/// threads keep their system calls; threads this one creates later inherit the filter.
pub fn install_filter(program: &[libc::sock_filter]) {
    let fprog = libc::sock_fprog {
        len: u16::try_from(program.len()).expect("short program"),
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(
        rc,
        0,
        "PR_SET_NO_NEW_PRIVS: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `fprog` points to `program`, which is live for the call; the kernel copies it.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &fprog as *const libc::sock_fprog,
        )
    };
    assert_eq!(rc, 0, "PR_SET_SECCOMP: {}", std::io::Error::last_os_error());
}

// --- output without allocation --------------------------------------------------------------

/// A fixed buffer that `write!` formats into without allocating.
#[derive(Debug)]
pub struct StackText {
    buffer: [u8; 1024],
    len: usize,
}

impl Default for StackText {
    fn default() -> Self {
        StackText {
            buffer: [0; 1024],
            len: 0,
        }
    }
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        let end = self.len + text.len();
        if end > self.buffer.len() {
            return Err(std::fmt::Error);
        }
        self.buffer[self.len..end].copy_from_slice(text.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl StackText {
    /// Writes the text to `fd` with the raw `write` system call (no locks, no allocation).
    pub fn write_to(&self, fd: i32) {
        let mut done = 0;
        while done < self.len {
            // SAFETY: writes initialised bytes of our own buffer.
            let rc = unsafe {
                libc::write(
                    fd,
                    self.buffer[done..self.len].as_ptr().cast(),
                    self.len - done,
                )
            };
            if rc <= 0 {
                return;
            }
            done += rc as usize;
        }
    }
}

/// Writes `text` to stdout with one raw `write` (signal-safe, no allocation, no std lock).
pub fn raw_print(text: &str) {
    let mut line = StackText::default();
    let _ = line.write_str(text);
    line.write_to(1);
}
