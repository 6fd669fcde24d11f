//! `perfclock record` against the real perf and a real JVM: a Java workload with two hot
//! methods, recorded with one command, read by `perf script` (and `samply import`); the refused
//! perf options, a command that fails, a missing perf and SIGINT mid-run.
//!
//! Needs perf, a JDK (java and javac on PATH) and permission to profile (root, or
//! perf_event_paranoid <= 2 for one's own processes). Without them the tests say `SKIPPED`
//! (fatal under PERFCLOCK_REQUIRE_PERF=1 / PERFCLOCK_REQUIRE_TOOLS=1).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use perfclock_testutil::perf_script::tod_ns;
use perfclock_testutil::{skip, Need};

/// Two hot methods on the main thread; arguments: milliseconds to run, exit status.
const HOT_JAVA: &str = r#"
public final class Hot {
    static volatile long sink;
    static long alpha(long x) {
        for (int i = 0; i < 5000; i++) { x ^= x << 13; x ^= x >>> 7; x ^= x << 17; x += i; }
        return x;
    }
    static long beta(long x) {
        for (int i = 0; i < 5000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }
    public static void main(String[] args) {
        long ms = Long.parseLong(args[0]);
        int status = Integer.parseInt(args[1]);
        long end = System.nanoTime() + ms * 1_000_000L;
        long x = 1;
        while (System.nanoTime() < end) { x = alpha(x); x = beta(x); sink = x; }
        System.out.println("hot: done " + (sink & 0xff));
        System.exit(status);
    }
}
"#;

/// Two phases, each running one hot method, stamped with `Instant.now()` (CLOCK_REALTIME) at
/// their edges; argument: milliseconds per phase. Prints `phases A0 A1 B0 B1` (ns since the
/// epoch) at the end.
const PHASES_JAVA: &str = r#"
import java.time.Instant;

public final class Phases {
    static volatile long sink;
    static long alpha(long x) {
        for (int i = 0; i < 5000; i++) { x ^= x << 13; x ^= x >>> 7; x ^= x << 17; x += i; }
        return x;
    }
    static long beta(long x) {
        for (int i = 0; i < 5000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }
    static long wallNs() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }
    public static void main(String[] args) throws Exception {
        long ms = Long.parseLong(args[0]);
        long x = 1;
        long a0 = wallNs();
        long end = System.nanoTime() + ms * 1_000_000L;
        while (System.nanoTime() < end) { x = alpha(x); sink = x; }
        long a1 = wallNs();
        Thread.sleep(300);
        long b0 = wallNs();
        end = System.nanoTime() + ms * 1_000_000L;
        while (System.nanoTime() < end) { x = beta(x); sink = x; }
        long b1 = wallNs();
        System.out.println("phases " + a0 + " " + a1 + " " + b0 + " " + b1);
    }
}
"#;

/// How far a sample's wall-clock time may lie outside the phase the workload stamped.
const PHASE_TOLERANCE_NS: u64 = 1_000_000;
/// The control's error in the wall clock: far more than the tolerance, and long enough that a
/// phase's thread has samples in it at its end even on a loaded machine.
const CONTROL_SHIFT_NS: u64 = 20_000_000;

/// The share of the main thread's samples that must fall in Hot.alpha or Hot.beta.
const MIN_HOT_SHARE: f64 = 0.80;

fn perfclock() -> &'static str {
    env!("CARGO_BIN_EXE_perfclock")
}

/// One JVM recording at a time: two at once on a 2-core machine starve each other's JIT.
fn jvm_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The agent beside the test's perfclock, built once with the same profile.
fn build_agent() -> Result<(), String> {
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

fn runs(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A work directory with Hot.class and a HOME, or `None` after saying why not.
fn setup(test: &str) -> Option<tempfile::TempDir> {
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
fn record(work: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(perfclock());
    command
        .arg("record")
        .args(args)
        .current_dir(work)
        .env("HOME", work.join("home"))
        .env_remove("JAVA_TOOL_OPTIONS");
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether a `perf script` sample line's symbol is a hot method: demangled (`Hot.alpha(long)`)
/// or, where the agent named the inlining chain, as the JVM spells it
/// (`LHot;alpha(J)J <- LHot;main(...)`, which perf leaves as it is).
fn in_hot_method(line: &str) -> bool {
    ["Hot.alpha(", "Hot.beta(", "Hot;alpha(", "Hot;beta("]
        .iter()
        .any(|name| line.contains(name))
}

/// (samples of the workload's main thread, of which in Hot.alpha or Hot.beta), from `perf
/// script`. The main thread is the `java` thread with the most samples (it runs the loop).
fn hot_share(work: &Path, data: &str) -> (usize, usize) {
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

fn assert_hot(work: &Path, data: &str, what: &str) {
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

fn assert_ok_output(work: &Path, output: &Output, code: i32) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    assert!(work.join("out.data").is_file(), "{stderr}");
    assert!(!work.join("out.data.raw").exists(), "raw kept: {stderr}");
    assert!(stderr.contains("perf report -i out.data"), "{stderr}");
    assert!(
        stderr.contains("added TIME_CONV") || stderr.contains("holds a TIME_CONV"),
        "{stderr}"
    );
}

#[test]
fn one_command_names_the_hot_java_methods() {
    let Some(work) = setup("one_command_names_the_hot_java_methods") else {
        return;
    };
    let _lock = jvm_lock();
    let output = record(
        work.path(),
        &[
            "-o", "out.data", "--", "java", "-cp", ".", "Hot", "6000", "0",
        ],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 0);
    assert_hot(work.path(), "out.data", "perf script");
    samply_names_the_hot_methods(work.path());
}

/// `samply import` of the output: the main thread's leaf frames, symbolized from the
/// `jitted-*.so` that `perf inject --jit` wrote, which samply's frames point at (samply
/// symbolizes lazily, in its server; `nm` reads the symbol it would show: `LHot;alpha(J)J`).
fn samply_names_the_hot_methods(work: &Path) {
    for tool in ["samply", "python3", "nm"] {
        if !runs(tool, "--version") {
            skip(
                "samply_names_the_hot_methods",
                Need::Tool(tool),
                format!("no {tool} on PATH"),
            );
            return;
        }
    }
    let output = Command::new("samply")
        .args(["import", "-s", "-n", "-o", "profile.json", "out.data"])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "samply import: {}",
        text(&output.stderr)
    );
    let profile = fs::read_to_string(work.join("profile.json")).unwrap();
    let names = samply_leaf_libraries(&profile);
    assert!(
        names.len() >= 100,
        "samply: {} main-thread samples",
        names.len()
    );
    // One `nm` per library, not per sample.
    let mut hot_library = std::collections::HashMap::new();
    let hot = names
        .iter()
        .flatten()
        .filter(|path| {
            *hot_library.entry(path.to_path_buf()).or_insert_with(|| {
                let symbols = Command::new("nm").arg(path).output().unwrap();
                let symbols = text(&symbols.stdout);
                symbols.contains("Hot;alpha(") || symbols.contains("Hot;beta(")
            })
        })
        .count();
    let share = hot as f64 / names.len() as f64;
    eprintln!(
        "samply import: {hot} of {} main-thread samples in Hot.alpha/Hot.beta ({share:.3})",
        names.len()
    );
    assert!(share >= MIN_HOT_SHARE, "samply: {hot}/{}", names.len());
}

/// For each sample of the thread with the most samples (the workload's main thread), the path
/// of the library its leaf frame is in, if it is a `jitted-*.so`.
fn samply_leaf_libraries(profile: &str) -> Vec<Option<PathBuf>> {
    // The profile's tables, read with python3's json (the test has no JSON crate).
    let script = r#"
import json, sys
p = json.load(sys.stdin)
libs = p["libs"]
t = max(p["threads"], key=lambda t: len(t["samples"]["stack"]))
st, ft, fn, rt = t["stackTable"], t["frameTable"], t["funcTable"], t["resourceTable"]
for s in t["samples"]["stack"]:
    if s is None:
        print("-"); continue
    f = st["frame"][s]
    r = fn["resource"][ft["func"][f]]
    lib = rt["lib"][r] if r is not None and r >= 0 else None
    path = libs[lib]["path"] if lib is not None else ""
    print(path if "/jitted-" in path else "-")
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(profile.as_bytes())
            .unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "reading samply's profile");
    text(&output.stdout)
        .lines()
        .map(|line| (line != "-").then(|| PathBuf::from(line)))
        .collect()
}

#[test]
fn refuses_clockid_and_compression_with_the_reason() {
    let work = tempfile::tempdir().unwrap();
    for (args, reason) in [
        (&["-k", "1"][..], "another clock"),
        (&["--clockid=monotonic"], "another clock"),
        (&["-z"], "compressed records"),
        (&["--compression-level", "3"], "compressed records"),
    ] {
        let mut all = vec!["-o", "out.data"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", "true"]);
        let output = record(work.path(), &all).output().unwrap();
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("refusing perf option"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
    }
    assert_eq!(
        fs::read_dir(work.path()).unwrap().count(),
        0,
        "refusals wrote files"
    );
}

#[test]
fn missing_perf_is_a_clear_error() {
    let work = tempfile::tempdir().unwrap();
    let output = record(
        work.path(),
        &["--no-java-agent", "-o", "out.data", "--", "true"],
    )
    .env("PATH", work.path())
    .output()
    .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no `perf` on PATH"), "{stderr}");
}

#[test]
fn a_failing_command_gives_its_status_and_a_complete_output() {
    let Some(work) = setup("a_failing_command_gives_its_status_and_a_complete_output") else {
        return;
    };
    let _lock = jvm_lock();
    let output = record(
        work.path(),
        &[
            "-o", "out.data", "--", "java", "-cp", ".", "Hot", "6000", "3",
        ],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 3);
    assert!(
        text(&output.stderr).contains("the command failed"),
        "{}",
        text(&output.stderr)
    );
    assert_hot(work.path(), "out.data", "exit 3");
}

#[test]
fn sigint_mid_run_still_post_processes() {
    let Some(work) = setup("sigint_mid_run_still_post_processes") else {
        return;
    };
    let _lock = jvm_lock();
    let child = record(
        work.path(),
        &[
            "-o", "out.data", "--", "java", "-cp", ".", "Hot", "120000", "0",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Mid-run: once a JVM has written its jitdump, and a few seconds of hot code later.
    let started = Instant::now();
    let dump_written = || {
        fs::read_dir(work.path()).unwrap().flatten().any(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("out.data.jit-")
                && fs::read_dir(entry.path()).is_ok_and(|mut d| {
                    d.any(|f| f.is_ok_and(|f| f.file_name().to_string_lossy().ends_with(".dump")))
                })
        })
    };
    while !dump_written() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no jitdump after 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill on the pid of a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let output = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(100),
        "the JVM ran to its end: SIGINT ignored"
    );
    assert_ok_output(work.path(), &output, 130);
    assert!(
        text(&output.stderr).contains("interrupted"),
        "{}",
        text(&output.stderr)
    );
    assert_hot(work.path(), "out.data", "SIGINT");
}

/// The control: with `--no-java-agent` no jitdump is written, and not one sample of the same
/// workload is named after the hot methods (so the shares above come from the agent's dumps).
#[test]
fn without_the_agent_no_java_method_is_named() {
    let Some(work) = setup("without_the_agent_no_java_method_is_named") else {
        return;
    };
    let _lock = jvm_lock();
    let output = record(
        work.path(),
        &[
            "--no-java-agent",
            "-o",
            "out.data",
            "--",
            "java",
            "-cp",
            ".",
            "Hot",
            "3000",
            "0",
        ],
    )
    .output()
    .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("no jitdump was mapped"), "{stderr}");
    assert!(!work.path().join("out.data.raw").exists(), "{stderr}");
    let (samples, hot) = hot_share(work.path(), "out.data");
    eprintln!("control: {hot} of {samples} main-thread samples named Hot.alpha/Hot.beta");
    assert!(samples >= 100, "control: only {samples} samples");
    assert_eq!(hot, 0, "control: named without a jitdump");
}

/// Per phase method (alpha, beta): the wall-clock times `perf script -F+tod` prints for the
/// samples named after it.
fn phase_sample_times(work: &Path, data: &str) -> [Vec<u64>; 2] {
    let output = Command::new("perf")
        .args(["script", "-G", "-F", "tid,tod,ip,sym", "-i", data])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .env("TZ", "UTC")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "perf script -F tod: {}",
        text(&output.stderr)
    );
    let mut times = [Vec::new(), Vec::new()];
    for line in text(&output.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(tod) = fields.get(1..3).and_then(|tod| tod_ns(&tod.join(" "))) else {
            continue;
        };
        for (phase, names) in [
            ["Phases.alpha(", "Phases;alpha("],
            ["Phases.beta(", "Phases;beta("],
        ]
        .iter()
        .enumerate()
        {
            if names.iter().any(|name| line.contains(name)) {
                times[phase].push(tod);
            }
        }
    }
    times
}

/// How many of each phase's samples lie outside `[start - tolerance, end + tolerance]`.
fn outside(times: &[Vec<u64>; 2], stamps: [u64; 4]) -> [usize; 2] {
    let count = |times: &[u64], start: u64, end: u64| {
        times
            .iter()
            .filter(|t| !(start - PHASE_TOLERANCE_NS..=end + PHASE_TOLERANCE_NS).contains(*t))
            .count()
    };
    [
        count(&times[0], stamps[0], stamps[1]),
        count(&times[1], stamps[2], stamps[3]),
    ]
}

/// Issue 21: `perf script -F+tod` works on `perfclock record`'s output (HEADER_CLOCK_DATA from
/// the snapshot taken at the start), and every sample of each phase's method has a wall-clock
/// time inside that phase as the JVM stamped it with `Instant.now()`, within 1 ms. Control: the
/// same file with the wall clock moved 20 ms late puts samples outside.
#[test]
fn wall_clock_times_fall_within_the_phases_the_workload_stamped() {
    const TEST: &str = "wall_clock_times_fall_within_the_phases_the_workload_stamped";
    let Some(work) = setup(TEST) else {
        return;
    };
    let _lock = jvm_lock();
    let output = record(
        work.path(),
        &["-o", "out.data", "--", "java", "-cp", ".", "Phases", "1500"],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 0);
    let stdout = text(&output.stdout);
    let stamps: Vec<u64> = stdout
        .lines()
        .find_map(|line| line.strip_prefix("phases "))
        .unwrap_or_else(|| panic!("the workload printed no phases: {stdout}"))
        .split_whitespace()
        .map(|stamp| stamp.parse().unwrap())
        .collect();
    let stamps: [u64; 4] = stamps.try_into().unwrap();
    let times = phase_sample_times(work.path(), "out.data");
    let outside_phase = outside(&times, stamps);
    eprintln!(
        "{TEST}: alpha {} samples, {} outside its phase; beta {} samples, {} outside",
        times[0].len(),
        outside_phase[0],
        times[1].len(),
        outside_phase[1]
    );
    assert!(
        times[0].len() >= 100 && times[1].len() >= 100,
        "too few samples named after the phases' methods"
    );
    assert_eq!(outside_phase, [0, 0], "samples outside their phase");

    // Control: the wall clock CONTROL_SHIFT_NS late moves each phase's samples of its last
    // CONTROL_SHIFT_NS - 1 ms out of it. Its setup: the phases that have such samples (a loaded
    // machine may deschedule a phase's thread for a while); at least one must.
    let ends = [stamps[1], stamps[3]];
    let near_end: Vec<usize> = (0..2)
        .filter(|&phase| {
            times[phase].iter().any(|&t| {
                t <= ends[phase] && t + CONTROL_SHIFT_NS - PHASE_TOLERANCE_NS > ends[phase]
            })
        })
        .collect();
    assert!(
        !near_end.is_empty(),
        "control setup: no sample near the end of either phase"
    );
    let data = work.path().join("out.data");
    let mut bytes = fs::read(&data).unwrap();
    let layout = perfclock_perfdata::read_layout(&mut std::io::Cursor::new(&bytes)).unwrap();
    let section = layout
        .feature_section(perfclock_perfdata::Feature::CLOCK_DATA)
        .expect("HEADER_CLOCK_DATA in perfclock record's output");
    let at = section.offset as usize + 8;
    let wall = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    bytes[at..at + 8].copy_from_slice(&(wall + CONTROL_SHIFT_NS).to_le_bytes());
    fs::write(work.path().join("late.data"), &bytes).unwrap();
    let late = outside(&phase_sample_times(work.path(), "late.data"), stamps);
    eprintln!("{TEST}: control {CONTROL_SHIFT_NS} ns late: {late:?} samples outside");
    for phase in near_end {
        assert!(
            late[phase] > 0,
            "the control moved no sample of phase {phase} out of it"
        );
    }
}
