//! `perfclock record` where production runs: every runtime's writer turned on without the
//! user's flag, processes already running (`-p`) or starting during a system-wide recording
//! (`-a`), and runtimes in containers (their own mount and pid namespace, a private `/tmp` and
//! working directory), profiled from the host.
//!
//! Two measures, against the same program recorded as `perfclock record -- CMD` here (the
//! baseline). The share of the process's frames in JIT code that perf names says what the dump
//! gave perf; it must be at least 0.8x the baseline's. The share of its samples whose leaf
//! (Node, the JVM) or any frame (CPython, whose trampolines perf reaches by unwinding) is a
//! function of the program says the names are the program's; it moves with what the runtime's
//! own code took meanwhile, so it must be at least half the baseline's. The controls (the
//! writer left off) must name none.
//!
//! Needs root, perf, unshare (util-linux), node, CPython 3.13 (`PERFCLOCK_CPYTHON`, else
//! `python3.13`), java and javac; without them the tests say `SKIPPED` (fatal under the
//! PERFCLOCK_REQUIRE_* variables CI sets).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use perfclock_testutil::{is_root, skip, Need};

use super::common::{build_agent, jvm_lock, perfclock, runs, text};

const HOT_JS: &str = include_str!("../fixtures/hot.js");
const HOT_PY: &str = include_str!("../fixtures/hot.py");
const HOT_JAVA: &str = include_str!("../fixtures/Hot.java");

/// A container's (or a running process's) share of JIT frames named, against the baseline's.
const MIN_SHARE_RATIO: f64 = 0.8;

/// A container's (or a running process's) share of samples naming the program, against the
/// baseline's: that share moves with the CPU time the runtime's own code takes (0.39 to 0.58
/// for Node's, between runs of one build), so it only confirms the names are the program's.
const MIN_PROGRAM_RATIO: f64 = 0.5;

/// A runtime under test: how to run the hot program, and what a named sample is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Runtime {
    Node,
    CPython,
    Jvm,
}

impl Runtime {
    /// The interpreter, if it runs here (else skipped, saying why).
    pub(super) fn program(self, test: &str) -> Option<String> {
        let (program, arg, need) = match self {
            Runtime::Node => ("node".to_owned(), "--version", Need::Tool("node")),
            Runtime::CPython => (
                std::env::var("PERFCLOCK_CPYTHON").unwrap_or_else(|_| "python3.13".to_owned()),
                "--version",
                Need::Tool("python3.13"),
            ),
            Runtime::Jvm => ("java".to_owned(), "-version", Need::Tool("java")),
        };
        if runs(&program, arg) {
            Some(program)
        } else {
            skip(test, need, format!("`{program} {arg}` did not run"));
            None
        }
    }

    /// The hot program's command line, with the runtime's own writer turned on (`flag`) or not,
    /// running for `millis`.
    pub(super) fn command(self, program: &str, flag: bool, millis: u64) -> Vec<String> {
        let mut command = vec![program.to_owned()];
        match self {
            Runtime::Node => {
                if flag {
                    command.push("--perf-prof".to_owned());
                }
                command.extend(["hot.js".to_owned(), millis.to_string()]);
            }
            Runtime::CPython => {
                if flag {
                    command.extend(["-X".to_owned(), "perf_jit".to_owned()]);
                }
                // hot.py's argument is rounds of about 55 ms each (CPython 3.13 here).
                command.extend(["hot.py".to_owned(), (millis / 55).max(1).to_string()]);
            }
            Runtime::Jvm => {
                command.extend(["-cp", ".", "Hot"].map(str::to_owned));
                command.extend([millis.to_string(), "0".to_owned()]);
            }
        }
        command
    }

    /// perf record options the runtime needs: CPython's frames are reached by unwinding.
    pub(super) fn perf_options(self) -> Vec<&'static str> {
        match self {
            Runtime::CPython => vec!["--call-graph", "dwarf"],
            _ => Vec::new(),
        }
    }

    /// Whether it writes its dump through a buffer it flushes only when full or at exit
    /// (CPython 3.13: stdio, 2 MiB): a running process's recent code is not in the file yet.
    fn buffers_its_dump(self) -> bool {
        self == Runtime::CPython
    }

    /// The command name its process has (`comm`).
    pub(super) fn comm(self, program: &str) -> String {
        match self {
            Runtime::Node => "node".to_owned(),
            Runtime::Jvm => "java".to_owned(),
            Runtime::CPython => {
                let name = Path::new(program)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                name.chars().take(15).collect()
            }
        }
    }

    /// Whether a sample with these frames (leaf first) is named after the program's code.
    fn named(self, frames: &[String]) -> bool {
        match self {
            Runtime::Node => frames.first().is_some_and(|leaf| {
                ["parseAtom", "parseTerm", "parseExpr", "evalNode"]
                    .iter()
                    .any(|name| {
                        leaf.contains(&format!("JS:*{name} "))
                            || leaf.contains(&format!("JS:~{name} "))
                    })
            }),
            // A long run's main is compiled on stack with alpha and beta inlined into it.
            Runtime::Jvm => frames.first().is_some_and(|leaf| leaf.contains("Hot.")),
            Runtime::CPython => frames.iter().any(|frame| frame.contains("py::spin_hot")),
        }
    }
}

/// A work directory: the hot programs (compiled, for the JVM), a HOME for perf's build-id
/// cache.
pub(super) struct Work {
    dir: tempfile::TempDir,
}

impl Work {
    pub(super) fn new() -> Work {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("home")).unwrap();
        let app = dir.path().join("app");
        fs::create_dir(&app).unwrap();
        fs::write(app.join("hot.js"), HOT_JS).unwrap();
        fs::write(app.join("hot.py"), HOT_PY).unwrap();
        fs::write(app.join("Hot.java"), HOT_JAVA).unwrap();
        Work { dir }
    }

    pub(super) fn app(&self) -> PathBuf {
        self.dir.path().join("app")
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Compiles Hot.java in `app`, once.
    fn javac(&self, test: &str) -> bool {
        if self.app().join("Hot.class").exists() {
            return true;
        }
        if !runs("javac", "-version") {
            skip(test, Need::Tool("javac"), "no javac on PATH");
            return false;
        }
        let out = Command::new("javac")
            .arg("Hot.java")
            .current_dir(self.app())
            .output()
            .unwrap();
        assert!(out.status.success(), "javac: {}", text(&out.stderr));
        true
    }

    /// `perfclock record ARGS` (in `app`, HOME in the work directory), to its end.
    pub(super) fn record(&self, args: &[String]) -> Output {
        let output = Command::new(perfclock())
            .arg("record")
            .args(args)
            .current_dir(self.app())
            .env("HOME", self.path("home"))
            .output()
            .unwrap();
        println!(
            "perfclock record {args:?}: {:?}\n{}",
            output.status,
            text(&output.stderr)
        );
        output
    }

    /// `perfclock record` started now, in the background.
    fn record_spawn(&self, args: &[String]) -> Child {
        Command::new(perfclock())
            .arg("record")
            .args(args)
            .current_dir(self.app())
            .env("HOME", self.path("home"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `perf script -F FIELDS -i DATA` (HOME in the work directory), call chains without inlined
    /// frames: perf would run addr2line over every binary a system-wide recording caught
    /// (minutes for a compiler's).
    pub(super) fn perf_script(&self, data: &Path, fields: &str) -> String {
        let script = Command::new("perf")
            .args(["script", "--no-inline", "-F", fields, "-i"])
            .arg(data)
            .env("HOME", self.path("home"))
            .output()
            .unwrap();
        assert!(
            script.status.success(),
            "perf script: {}",
            text(&script.stderr)
        );
        text(&script.stdout)
    }

    /// Of process `comm`'s samples in `out` (pid `pid`, if given): how many, and how many
    /// `runtime` names.
    pub(super) fn named_share(
        &self,
        out: &Path,
        runtime: Runtime,
        comm: &str,
        pid: Option<u32>,
    ) -> (u64, u64) {
        let script = self.perf_script(out, "comm,pid,ip,sym");
        let (mut samples, mut named) = (0, 0);
        let mut current: Option<Vec<String>> = None;
        let mut judge = |frames: Option<Vec<String>>| {
            if let Some(frames) = frames {
                samples += 1;
                if runtime.named(&frames) {
                    named += 1;
                }
            }
        };
        for line in script.lines() {
            if line.starts_with(|c: char| c.is_whitespace()) {
                if let Some(frames) = current.as_mut() {
                    let frame = line.trim();
                    frames.push(frame.split_once(' ').map_or("", |(_, sym)| sym).to_owned());
                }
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            judge(current.take());
            let mut fields = line.split_whitespace();
            let (Some(name), Some(sample_pid)) = (fields.next(), fields.next()) else {
                continue;
            };
            let ours = name == comm && pid.is_none_or(|pid| sample_pid == pid.to_string());
            current = ours.then(Vec::new);
            // Without call chains the frame is on the header line: ip and sym after the pid.
            if let (true, Some(_ip)) = (ours, fields.next()) {
                let sym: Vec<&str> = fields.collect();
                if !sym.is_empty() {
                    if let Some(frames) = current.as_mut() {
                        frames.push(sym.join(" "));
                    }
                }
            }
        }
        judge(current.take());
        eprintln!(
            "{}: {named} of {samples} samples of {comm} named",
            out.display()
        );
        (samples, named)
    }

    /// Of the call-chain frames of `comm`'s samples (pid `pid`, if given) in JIT code (a perf
    /// map's, a jitdump's image, or anonymous memory): how many, and how many perf names.
    pub(super) fn jit_frames_named(&self, data: &Path, comm: &str, pid: Option<u32>) -> (u64, u64) {
        let script = self.perf_script(data, "comm,pid,ip,sym,dso");
        let (mut frames, mut named) = (0, 0);
        for sample in script.split("\n\n") {
            let mut lines = sample.lines();
            let mut header = lines.next().unwrap_or("").split_whitespace();
            let (name, sample_pid) = (header.next(), header.next());
            if name != Some(comm) || pid.is_some_and(|pid| sample_pid != Some(&pid.to_string())) {
                continue;
            }
            for frame in lines {
                let Some((rest, dso)) = frame
                    .trim()
                    .strip_suffix(')')
                    .and_then(|f| f.rsplit_once(" ("))
                else {
                    continue;
                };
                let file = dso.rsplit('/').next().unwrap_or(dso);
                let jit = (file.starts_with("perf-") && file.ends_with(".map"))
                    || (file.starts_with("jitted-") && file.ends_with(".so"))
                    || dso == "//anon";
                if jit {
                    frames += 1;
                    named += u64::from(!rest.ends_with(" [unknown]"));
                }
            }
        }
        (frames, named)
    }

    /// How `data` names `runtime`'s process `comm` (pid `pid`, if given).
    fn naming(&self, data: &Path, runtime: Runtime, comm: &str, pid: Option<u32>) -> Naming {
        Naming {
            jit_frames: share(self.jit_frames_named(data, comm, pid)),
            program: share(self.named_share(data, runtime, comm, pid)),
        }
    }
}

/// How a recording names a runtime's process.
#[derive(Debug, Clone, Copy)]
struct Naming {
    /// The share of its frames in JIT code that perf names: what the dump gives perf, whatever
    /// the program did meanwhile.
    jit_frames: f64,
    /// The share of its samples naming the program's own functions.
    program: f64,
}

impl Naming {
    /// Asserts `self`, the naming of `what`, is at least [`MIN_SHARE_RATIO`] of the baseline's
    /// for JIT frames and [`MIN_PROGRAM_RATIO`] of it for the program.
    fn assert_as_good_as(&self, base: &Naming, what: &str) {
        eprintln!("{what}: {self:?}, the baseline {base:?}");
        assert!(
            self.jit_frames >= MIN_SHARE_RATIO * base.jit_frames
                && self.program >= MIN_PROGRAM_RATIO * base.program,
            "{what}: {self:?} named, the baseline {base:?}"
        );
    }
}

fn share((samples, named): (u64, u64)) -> f64 {
    named as f64 / samples.max(1) as f64
}

/// Root, perf and the runtime, or `None` after a skip.
fn ready(test: &str, runtime: Runtime) -> Option<(Work, String)> {
    if !is_root() {
        skip(
            test,
            Need::Root,
            "records other processes and makes containers",
        );
        return None;
    }
    if !runs("perf", "--version") {
        skip(test, Need::Tool("perf"), "`perf --version` did not run");
        return None;
    }
    let program = runtime.program(test)?;
    let work = Work::new();
    if runtime == Runtime::Jvm {
        if !work.javac(test) {
            return None;
        }
        build_agent().unwrap();
    }
    Some((work, program))
}

/// The baseline: `record -- CMD` of the program here, with its writer's flag; its naming.
fn baseline(work: &Work, runtime: Runtime, program: &str, millis: u64) -> Naming {
    let mut args = vec!["-o".to_owned(), "base.data".to_owned()];
    args.extend(runtime.perf_options().iter().map(|s| (*s).to_owned()));
    args.push("--".to_owned());
    args.extend(runtime.command(program, true, millis));
    let output = work.record(&args);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let data = work.app().join("base.data");
    work.naming(&data, runtime, &runtime.comm(program), None)
}

/// A program in a container of its own: `unshare --mount --pid --fork --mount-proc`, a tmpfs
/// on `/tmp`, the program's files copied to `/tmp/app`, its working directory.
pub(super) struct Container {
    unshare: Child,
    /// The program's pid here.
    pub(super) pid: u32,
}

impl Container {
    pub(super) fn start(work: &Work, command: &[String], comm: &str) -> Container {
        // The working directory keeps the program's files reachable once the tmpfs hides the
        // host's /tmp, where the work directory may be.
        let script = format!(
            "cd {} && mount -t tmpfs perfclock-test /tmp && mkdir /tmp/app && cp -r . /tmp/app/ \
             && cd /tmp/app && exec {}",
            work.app().display(),
            command.join(" ")
        );
        let mut unshare = Command::new("unshare")
            .args([
                "--mount",
                "--pid",
                "--fork",
                "--mount-proc",
                "--propagation",
                "private",
            ])
            .args(["sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            let children = fs::read_to_string(format!("/proc/{0}/task/{0}/children", unshare.id()))
                .unwrap_or_default();
            if let Some(pid) = children
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .next()
            {
                let name = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if name.trim_end() == comm {
                    return Container { unshare, pid };
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = unshare.kill();
        let _ = unshare.wait();
        panic!("the container did not start {command:?}");
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// `record -p` of the program running in a container, then `record -a` with the program
/// starting in a container during the recording: each named as well as the baseline
/// ([`Naming::assert_as_good_as`]).
fn in_containers(test: &str, runtime: Runtime, warm_ms: u64, record_s: u64) {
    let Some((work, program)) = ready(test, runtime) else {
        return;
    };
    if !runs("unshare", "--version") {
        skip(
            test,
            Need::Tool("unshare"),
            "no unshare (util-linux) on PATH",
        );
        return;
    }
    let _turn = jvm_lock();
    let base = baseline(&work, runtime, &program, record_s * 1000);
    assert!(base.program > 0.2, "the baseline: {base:?}");
    let comm = runtime.comm(&program);
    // Running past the recording's end; a runtime that buffers its dump exits during the
    // recording instead (and writes its dump then: a container that exits before the recording
    // ends keeps its names).
    let runs_for = if runtime.buffers_its_dump() {
        warm_ms + record_s * 500
    } else {
        warm_ms + record_s * 1000 + 2000
    };
    let command = runtime.command(&program, true, runs_for);
    let perf_options: Vec<String> = runtime
        .perf_options()
        .iter()
        .map(|s| (*s).to_owned())
        .collect();

    // -p: running already, then recorded.
    let container = Container::start(&work, &command, &comm);
    std::thread::sleep(Duration::from_millis(warm_ms));
    let mut args = vec!["-o".to_owned(), work.path("p.data").display().to_string()];
    args.extend(["-p".to_owned(), container.pid.to_string()]);
    args.extend(["--duration".to_owned(), record_s.to_string()]);
    args.extend(perf_options.iter().cloned());
    let output = work.record(&args);
    let pid = container.pid;
    drop(container);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    work.naming(&work.path("p.data"), runtime, &comm, Some(pid))
        .assert_as_good_as(&base, "record -p of a container");

    // -a: the container starts a second into the recording.
    let mut args = vec![
        "-o".to_owned(),
        work.path("a.data").display().to_string(),
        "-a".to_owned(),
    ];
    args.extend(["--duration".to_owned(), (record_s + 3).to_string()]);
    args.extend(perf_options);
    let recording = work.record_spawn(&args);
    std::thread::sleep(Duration::from_secs(1));
    // It ends two seconds before the recording does.
    let command = runtime.command(&program, true, record_s * 1000);
    let container = Container::start(&work, &command, &comm);
    let pid = container.pid;
    let output = recording.wait_with_output().unwrap();
    drop(container);
    println!("record -a: {}", text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    work.naming(&work.path("a.data"), runtime, &comm, Some(pid))
        .assert_as_good_as(&base, "record -a of a container started mid-recording");
}

#[test]
fn node_in_a_container_is_named_by_record_p_and_record_a() {
    in_containers(
        "node_in_a_container_is_named_by_record_p_and_record_a",
        Runtime::Node,
        1500,
        3,
    );
}

#[test]
fn cpython_in_a_container_is_named_by_record_p_and_record_a() {
    in_containers(
        "cpython_in_a_container_is_named_by_record_p_and_record_a",
        Runtime::CPython,
        1000,
        3,
    );
}

#[test]
fn a_jvm_in_a_container_is_named_by_record_p_and_record_a() {
    in_containers(
        "a_jvm_in_a_container_is_named_by_record_p_and_record_a",
        Runtime::Jvm,
        2500,
        4,
    );
}

/// `record -- CMD` with no flag of the runtime's: named as with the flag; the control
/// (`--no-runtime-flags`) names nothing; and nothing the runtime wrote because of perfclock is
/// left in its working directory or `/tmp`.
fn without_a_flag(test: &str, runtime: Runtime) {
    let Some((work, program)) = ready(test, runtime) else {
        return;
    };
    let _turn = jvm_lock();
    let before: Vec<PathBuf> = tmp_dumps();
    let mut args = vec!["-o".to_owned(), "out.data".to_owned()];
    args.extend(runtime.perf_options().iter().map(|s| (*s).to_owned()));
    args.push("--".to_owned());
    args.extend(runtime.command(&program, false, 3000));
    let output = work.record(&args);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let comm = runtime.comm(&program);
    let named = work.named_share(&work.app().join("out.data"), runtime, &comm, None);
    assert!(share(named) > 0.2, "named without a flag: {named:?}");
    let left: Vec<String> = fs::read_dir(work.app())
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("jit-") || name.starts_with("isolate-"))
        .collect();
    assert!(left.is_empty(), "left in the working directory: {left:?}");
    let new_in_tmp: Vec<PathBuf> = tmp_dumps()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert!(new_in_tmp.is_empty(), "left in /tmp: {new_in_tmp:?}");

    // The control: the runtime's writer left off.
    let mut args = vec![
        "-o".to_owned(),
        "control.data".to_owned(),
        "--no-runtime-flags".to_owned(),
    ];
    args.extend(runtime.perf_options().iter().map(|s| (*s).to_owned()));
    args.push("--".to_owned());
    args.extend(runtime.command(&program, false, 2000));
    let output = work.record(&args);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let control = work.named_share(&work.app().join("control.data"), runtime, &comm, None);
    assert!(control.0 > 100, "control: only {} samples", control.0);
    assert_eq!(control.1, 0, "control: named with --no-runtime-flags");
}

/// The jitdumps in `/tmp` now.
fn tmp_dumps() -> Vec<PathBuf> {
    fs::read_dir("/tmp")
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| {
                    path.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("jit-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn node_is_named_without_its_flag() {
    without_a_flag("node_is_named_without_its_flag", Runtime::Node);
}

#[test]
fn cpython_is_named_without_its_flag() {
    without_a_flag("cpython_is_named_without_its_flag", Runtime::CPython);
}

/// A Node running here, started with `--perf-prof`, recorded by `record -p`; then a Node that
/// starts during `record -a`: each named as well as the baseline ([`Naming::assert_as_good_as`]).
#[test]
fn a_running_node_and_one_starting_during_record_a_are_named() {
    let test = "a_running_node_and_one_starting_during_record_a_are_named";
    let Some((work, program)) = ready(test, Runtime::Node) else {
        return;
    };
    let _turn = jvm_lock();
    let base = baseline(&work, Runtime::Node, &program, 3000);
    let start_node = |millis| {
        let command = Runtime::Node.command(&program, true, millis);
        Command::new(&command[0])
            .args(&command[1..])
            .current_dir(work.app())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut node = start_node(6000);
    std::thread::sleep(Duration::from_millis(1500));
    let args = [
        "-o",
        "p.data",
        "-p",
        &node.id().to_string(),
        "--duration",
        "3",
    ]
    .map(str::to_owned);
    let output = work.record(&args);
    let pid = node.id();
    let _ = node.kill();
    let _ = node.wait();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    work.naming(&work.app().join("p.data"), Runtime::Node, "node", Some(pid))
        .assert_as_good_as(&base, "record -p");

    let recording =
        work.record_spawn(&["-o", "a.data", "-a", "--duration", "6"].map(str::to_owned));
    std::thread::sleep(Duration::from_secs(1));
    let mut node = start_node(4000);
    let pid = node.id();
    let output = recording.wait_with_output().unwrap();
    let _ = node.kill();
    let _ = node.wait();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    work.naming(&work.app().join("a.data"), Runtime::Node, "node", Some(pid))
        .assert_as_good_as(&base, "record -a");
}
