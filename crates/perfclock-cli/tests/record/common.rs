//! What the record tests share: the binary, the agent built beside it, a work directory with
//! the Java workload compiled, the hot methods' share, the checks of a finished run, the
//! process helpers of the signal tests.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use perfclock_testutil::{skip, Need};

/// Two hot methods on the main thread; arguments: milliseconds to run, exit status.
pub(crate) const HOT_JAVA: &str = include_str!("../fixtures/Hot.java");

/// Two phases, each running one hot method, stamped with `Instant.now()` (CLOCK_REALTIME) at
/// their edges; argument: milliseconds per phase. Prints `phases A0 A1 B0 B1` (ns since the
/// epoch) at the end.
pub(crate) const PHASES_JAVA: &str = include_str!("../fixtures/Phases.java");

/// The share of the main thread's samples that must fall in Hot.alpha or Hot.beta.
pub(crate) const MIN_HOT_SHARE: f64 = 0.80;

pub(crate) fn perfclock() -> &'static str {
    env!("CARGO_BIN_EXE_perfclock")
}

/// One CPU-bound recording at a time: two at once on a 2-core machine starve each other's JIT,
/// and the perf map watch's wake-ups (perfmaps).
pub(crate) fn jvm_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The agent beside the test's perfclock, built once with the same profile.
pub(crate) fn build_agent() -> Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = Path::new(perfclock()).parent().unwrap();
            let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            cargo.args(["build", "-p", "perfclock-jvmti"]);
            if dir.file_name().is_some_and(|n| n == "release") {
                cargo.arg("--release");
            }
            let output = cargo.output().map_err(|e| format!("cargo: {e}"))?;
            if !output.status.success() {
                return Err(format!(
                    "cargo build -p perfclock-jvmti: {}",
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            if dir.join("libperfclock_agent.so").is_file() {
                Ok(())
            } else {
                Err(format!("no libperfclock_agent.so in {}", dir.display()))
            }
        })
        .clone()
}

pub(crate) fn runs(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A work directory with Hot.class and a HOME, or `None` after saying why not.
pub(crate) fn setup(test: &str) -> Option<tempfile::TempDir> {
    if !runs("perf", "--version") {
        skip(test, Need::Tool("perf"), "`perf --version` did not run");
        return None;
    }
    if !runs("javac", "-version") || !runs("java", "-version") {
        skip(test, Need::Tool("javac"), "no java and javac on PATH");
        return None;
    }
    build_agent().unwrap();
    let work = tempfile::tempdir().unwrap();
    fs::create_dir(work.path().join("home")).unwrap();
    fs::write(work.path().join("Hot.java"), HOT_JAVA).unwrap();
    fs::write(work.path().join("Phases.java"), PHASES_JAVA).unwrap();
    let javac = Command::new("javac")
        .arg("-d")
        .arg(work.path())
        .arg(work.path().join("Hot.java"))
        .arg(work.path().join("Phases.java"))
        .output()
        .unwrap();
    assert!(
        javac.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&javac.stderr)
    );
    Some(work)
}

/// `perfclock record ARGS` in `work`, with HOME there (perf inject's build-id cache).
pub(crate) fn record(work: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(perfclock());
    command
        .arg("record")
        .args(args)
        .current_dir(work)
        .env("HOME", work.join("home"))
        .env_remove("JAVA_TOOL_OPTIONS");
    command
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether a `perf script` sample line's symbol is a hot method: demangled (`Hot.alpha(long)`)
/// or, where the agent named the inlining chain, as the JVM spells it
/// (`LHot;alpha(J)J <- LHot;main(...)`, which perf leaves as it is).
pub(crate) fn in_hot_method(line: &str) -> bool {
    ["Hot.alpha(", "Hot.beta(", "Hot;alpha(", "Hot;beta("]
        .iter()
        .any(|name| line.contains(name))
}

/// (samples of the workload's main thread, of which in Hot.alpha or Hot.beta), from `perf
/// script`. The main thread is the `java` thread with the most samples (it runs the loop).
pub(crate) fn hot_share(work: &Path, data: &str) -> (usize, usize) {
    let output = Command::new("perf")
        .args(["script", "-G", "-F", "comm,tid,ip,sym", "-i", data])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "perf script: {}",
        text(&output.stderr)
    );
    let script = text(&output.stdout);
    let mut threads: std::collections::HashMap<&str, (usize, usize)> = Default::default();
    for line in script.lines() {
        let mut fields = line.split_whitespace();
        if let (Some("java"), Some(tid)) = (fields.next(), fields.next()) {
            let counts = threads.entry(tid).or_default();
            counts.0 += 1;
            counts.1 += usize::from(in_hot_method(line));
        }
    }
    threads.into_values().max().unwrap_or_default()
}

pub(crate) fn assert_hot(work: &Path, data: &str, what: &str) {
    let (samples, hot) = hot_share(work, data);
    let share = hot as f64 / samples.max(1) as f64;
    eprintln!("{what}: {hot} of {samples} main-thread samples in Hot.alpha/Hot.beta ({share:.3})");
    assert!(
        samples >= 100,
        "{what}: only {samples} samples of the java thread"
    );
    assert!(
        share >= MIN_HOT_SHARE,
        "{what}: {hot}/{samples} in the hot methods"
    );
}

pub(crate) fn assert_ok_output(work: &Path, output: &Output, code: i32) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    assert!(work.join("out.data").is_file(), "{stderr}");
    assert!(!work.join("out.data.raw").exists(), "raw kept: {stderr}");
    assert!(stderr.contains("perf report -i out.data"), "{stderr}");
    assert!(
        stderr.contains("added PERF_RECORD_TIME_CONV")
            || stderr.contains("holds a PERF_RECORD_TIME_CONV"),
        "{stderr}"
    );
}

/// perf on PATH, or `None` after saying the test cannot run.
pub(crate) fn perf_or_skip(test: &str) -> Option<tempfile::TempDir> {
    if !runs("perf", "--version") {
        skip(test, Need::Tool("perf"), "`perf --version` did not run");
        return None;
    }
    let work = tempfile::tempdir().unwrap();
    fs::create_dir(work.path().join("home")).unwrap();
    Some(work)
}

/// Whether process `pid` is alive (a zombie is not).
pub(crate) fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

pub(crate) fn send(pid: u32, signal: libc::c_int) {
    // SAFETY: kill with plain integers; the pid is one the test started (or its descendant).
    unsafe {
        libc::kill(libc::pid_t::try_from(pid).unwrap(), signal);
    }
}

/// Waits up to `limit` for `done`.
pub(crate) fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}
