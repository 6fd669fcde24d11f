//! The one way a test, bench or test program says it cannot run here.
//!
//! [`skip`] names the test and what it lacks ([`Need`]), and then either
//! - fails (panics) when the need's require variable is set: CI on the project's machines sets
//!   them, so there a missing thing is a failure, never a silent pass; or
//! - writes `SKIPPED <test>: needs <need>: <why>` to stderr and returns, and the caller returns
//!   without asserting anything.
//!
//! A skip is never mistaken for a success:
//! - the line goes to stderr only, never stdout, where the hostile tests' child processes print
//!   the success markers their parents look for (`LIMITS-OK ...`); a child that skips exits with
//!   [`SKIPPED_EXIT_STATUS`] ([`skip_child`]), which no success check accepts;
//! - it is written with `std::io::stderr()` directly, which libtest does not capture (its
//!   capture only takes `print!`/`eprint!`), so it shows in CI's log even when the test passes;
//! - it is appended to the file [`SKIP_LOG_ENV`] names, if set, which `.ci/run` prints at the
//!   end of the run: every skip of the run in one list.
//!
//! # Require variables
//! `PERFCLOCK_REQUIRE_<NEED>` (see [`Need::variable`]) set to anything but empty or `0` makes
//! a skip for that need a failure. `scripts/lib/skip.sh` and the C ABI's C test read the same
//! variables.

use std::fmt;
use std::io::Write as _;
use std::process::ExitStatus;

/// The environment variable naming a file every skip is appended to (one line each).
pub const SKIP_LOG_ENV: &str = "PERFCLOCK_SKIP_LOG";

/// The exit status of a child process that skipped (automake's skip status): not 0, so no
/// parent can take it for a success.
pub const SKIPPED_EXIT_STATUS: i32 = 77;

/// What a test needs from the machine, that this machine may lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Need {
    /// perf events (`perf_event_open` permitted) and the perfclock clock built on them.
    Perf,
    /// Running as root.
    Root,
    /// Permission to mount a file system (a small tmpfs).
    Mount,
    /// A command on `PATH` (`perf`, `python3`, ...).
    Tool(&'static str),
    /// Kernel mode: the kernel publishes the time conversion (`cap_user_time_zero`).
    KernelMode,
    /// Calibrated mode: the kernel withholds the conversion, so the clock calibrates.
    CalibratedMode,
    /// Paravirt mode: a KVM guest whose vDSO maps the pvclock page (kvm-clock as sched_clock).
    ParavirtMode,
    /// An x86_64 CPU (TSC instructions, `PR_SET_TSC`, hand-assembled x86 code).
    X86_64,
    /// A CPU feature (`rdtscp`).
    CpuFeature(&'static str),
    /// A file system that holds sparse files far larger than the disk.
    SparseFiles,
}

impl Need {
    /// The variable that makes this need a requirement: `PERFCLOCK_REQUIRE_<NEED>`.
    pub fn variable(self) -> &'static str {
        match self {
            Need::Perf => "PERFCLOCK_REQUIRE_PERF",
            Need::Root => "PERFCLOCK_REQUIRE_ROOT",
            Need::Mount => "PERFCLOCK_REQUIRE_MOUNT",
            Need::Tool(_) => "PERFCLOCK_REQUIRE_TOOLS",
            Need::KernelMode => "PERFCLOCK_REQUIRE_KERNEL_MODE",
            Need::CalibratedMode => "PERFCLOCK_REQUIRE_CALIBRATED_MODE",
            Need::ParavirtMode => "PERFCLOCK_REQUIRE_PARAVIRT_MODE",
            Need::X86_64 => "PERFCLOCK_REQUIRE_X86_64",
            Need::CpuFeature(_) => "PERFCLOCK_REQUIRE_CPU_FEATURES",
            Need::SparseFiles => "PERFCLOCK_REQUIRE_SPARSE_FILES",
        }
    }

    /// The variable that requires this need in this environment, if one does.
    pub fn required_by(self) -> Option<&'static str> {
        let name = self.variable();
        std::env::var_os(name)
            .is_some_and(|value| !value.is_empty() && value != "0")
            .then_some(name)
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Perf => f.write_str("perf events and the perfclock clock"),
            Need::Root => f.write_str("root"),
            Need::Mount => f.write_str("permission to mount a tmpfs"),
            Need::Tool(name) => write!(f, "the `{name}` command"),
            Need::KernelMode => {
                f.write_str("kernel mode (a kernel that publishes cap_user_time_zero)")
            }
            Need::CalibratedMode => {
                f.write_str("calibrated mode (a kernel that withholds cap_user_time_zero)")
            }
            Need::ParavirtMode => {
                f.write_str("paravirt mode (a KVM guest whose vDSO maps kvm-clock's pvclock page)")
            }
            Need::X86_64 => f.write_str("an x86_64 CPU"),
            Need::CpuFeature(name) => write!(f, "a CPU with {name}"),
            Need::SparseFiles => f.write_str("a file system with sparse files"),
        }
    }
}

/// The name of the function this is expanded in, without its module path or closures: a
/// test's name for [`skip`], written once by the compiler rather than by hand.
///
/// ```
/// fn an_example() -> &'static str {
///     perfclock_testutil::test_name!()
/// }
/// assert_eq!(an_example(), "an_example");
/// ```
#[macro_export]
macro_rules! test_name {
    () => {{
        fn here() {}
        let path = ::core::any::type_name_of_val(&here);
        let path = path.strip_suffix("::here").unwrap_or(path);
        path.rsplit("::")
            .find(|segment| *segment != "{{closure}}")
            .unwrap_or(path)
    }};
}

/// Says that `test` does not run here for want of `need` (`why`: what failed), or panics when
/// `need`'s require variable is set. The caller returns right after, asserting nothing.
///
/// # Panics
/// When the need is required ([`Need::required_by`]), or when the skip log cannot be written.
#[track_caller]
pub fn skip(test: &str, need: Need, why: impl fmt::Display) {
    // Straight to the file descriptor: libtest's capture only takes print!/eprint!.
    report(test, need, &why.to_string(), &mut std::io::stderr());
}

/// `result`'s value, or `None` after a [`skip`] that names its error: for a test whose first
/// step opens what it needs (`ok_or_skip(test, Need::Perf, perfclock::init())`).
///
/// # Panics
/// As [`skip`], when the error is the result and `need` is required.
#[track_caller]
pub fn ok_or_skip<T, E: fmt::Display>(test: &str, need: Need, result: Result<T, E>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(error) => {
            skip(test, need, error);
            None
        }
    }
}

/// [`skip`], writing the line to `stderr` (tests pass a buffer).
#[track_caller]
fn report(test: &str, need: Need, why: &str, stderr: &mut dyn std::io::Write) {
    // One line, whatever `why` holds: a skip cannot start a line of its own that looks like
    // something else.
    let why = why.replace(['\n', '\r'], " | ");
    if let Some(variable) = need.required_by() {
        panic!("{test}: needs {need}, which {variable} requires here, but: {why}");
    }
    let line = format!("SKIPPED {test}: needs {need}: {why}\n");
    let _ = stderr.write_all(line.as_bytes());
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        let logged = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut log| log.write_all(line.as_bytes()));
        if let Err(error) = logged {
            panic!("{test}: cannot append to {SKIP_LOG_ENV}={path:?}: {error}");
        }
    }
}

/// [`skip`] in a child process whose parent looks for a success marker: then exits with
/// [`SKIPPED_EXIT_STATUS`], so the parent sees a skip ([`child_skipped`]), never a success.
#[track_caller]
pub fn skip_child(test: &str, need: Need, why: impl fmt::Display) -> ! {
    skip(test, need, why);
    std::process::exit(SKIPPED_EXIT_STATUS)
}

/// Whether a child process skipped ([`skip_child`]); if so, its `SKIPPED` lines are repeated on
/// this process's stderr (past libtest's capture), so the skip shows where the parent's output
/// goes. The child has already applied the require variables it inherited.
pub fn child_skipped(status: ExitStatus, child_stderr: &str) -> bool {
    if status.code() != Some(SKIPPED_EXIT_STATUS) {
        return false;
    }
    let mut stderr = std::io::stderr().lock();
    for line in child_stderr.lines().filter(|l| l.starts_with("SKIPPED ")) {
        let _ = writeln!(stderr, "{line}");
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` with the variables `set` set and every other require variable unset, one test
    /// at a time (the environment is the process's).
    fn with_env(set: &[(&str, &str)], f: impl FnOnce()) {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let all = [
            Need::Perf,
            Need::Root,
            Need::Mount,
            Need::Tool("x"),
            Need::KernelMode,
            Need::CalibratedMode,
            Need::ParavirtMode,
            Need::X86_64,
            Need::CpuFeature("x"),
            Need::SparseFiles,
        ];
        let names: Vec<&str> = all
            .iter()
            .map(|n| n.variable())
            .chain([SKIP_LOG_ENV])
            .collect();
        let saved: Vec<_> = names.iter().map(|n| (*n, std::env::var_os(n))).collect();
        // The lock keeps this module's tests from racing on the process's environment.
        for name in &names {
            std::env::remove_var(name);
        }
        for (name, value) in set {
            std::env::set_var(name, value);
        }
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        for (name, value) in saved {
            match value {
                Some(value) => std::env::set_var(name, value),
                None => std::env::remove_var(name),
            }
        }
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }

    fn panic_message(f: impl FnOnce()) -> Option<String> {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        result.err().map(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        })
    }

    #[test]
    fn a_skip_without_its_require_variable_is_logged_not_fatal() {
        let dir = std::env::temp_dir().join(format!("perfclock-testutil-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips.txt");
        let _ = std::fs::remove_file(&log);
        let mut stderr = Vec::new();
        let expected =
            "SKIPPED t1: needs perf events and the perfclock clock: refused | second line\n\
                        SKIPPED t2: needs the `perf` command: not on PATH\n";
        with_env(
            &[
                (SKIP_LOG_ENV, log.to_str().unwrap()),
                ("PERFCLOCK_REQUIRE_PERF", "0"),
                ("PERFCLOCK_REQUIRE_ROOT", "1"),
            ],
            || {
                report("t1", Need::Perf, "refused\nsecond line", &mut stderr);
                report("t2", Need::Tool("perf"), "not on PATH", &mut stderr);
            },
        );
        assert_eq!(String::from_utf8(stderr).unwrap(), expected);
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(text, expected);
    }

    #[test]
    fn a_skip_under_its_require_variable_fails_and_names_it() {
        for (variable, need) in [
            ("PERFCLOCK_REQUIRE_PERF", Need::Perf),
            ("PERFCLOCK_REQUIRE_MOUNT", Need::Mount),
            ("PERFCLOCK_REQUIRE_TOOLS", Need::Tool("python3")),
            ("PERFCLOCK_REQUIRE_CALIBRATED_MODE", Need::CalibratedMode),
            ("PERFCLOCK_REQUIRE_PARAVIRT_MODE", Need::ParavirtMode),
        ] {
            let message = with_env_panic(variable, need);
            assert_eq!(
                message.as_deref(),
                Some(format!("t: needs {need}, which {variable} requires here, but: why").as_str()),
            );
        }
    }

    fn with_env_panic(variable: &str, need: Need) -> Option<String> {
        let mut message = None;
        with_env(&[(variable, "1")], || {
            message = panic_message(|| report("t", need, "why", &mut Vec::new()));
        });
        message
    }

    #[test]
    fn a_child_skip_is_its_own_exit_status() {
        use std::os::unix::process::ExitStatusExt as _;
        let skipped = ExitStatus::from_raw(SKIPPED_EXIT_STATUS << 8);
        assert!(child_skipped(skipped, "not a skip line\n"));
        assert!(!child_skipped(ExitStatus::from_raw(0), "SKIPPED t: x\n"));
        assert!(!child_skipped(ExitStatus::from_raw(101 << 8), ""));
    }
}
