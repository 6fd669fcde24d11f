//! `perfclock attach` against real JVMs, one binary with a module per feature: the protocol
//! with every JDK under /usr/lib/jvm and a JVM started without any agent ([`protocol`]), root
//! as the JVM's user and a JVM in its own mount and pid namespace ([`namespaces`]), and each
//! error cause with its message, a non-zero exit and the 10 s bound ([`errors`]).
//!
//! The agent is a test library compiled here with `cc` (`tests/fixtures/agent.c`): its
//! `Agent_OnAttach` appends `attached <OPTIONS>` to the file named after the `@` in its options
//! (options `<OPTIONS>@<FILE>`), returns N for options `code=N` (perfclock's agent's codes) and
//! 42 when there is no `@`; a second library exports only `Agent_OnLoad`, as an agent built for
//! `-agentpath` does.
//!
//! Needs a JDK under /usr/lib/jvm, cc, and root (namespaces, setpriv), and /dev/fuse for the
//! stalling option file. Without one the test skips ([`perfclock_testutil::skip`], naming what
//! is missing), or fails instead where that need's `PERFCLOCK_REQUIRE_*` variable is set (CI).

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use perfclock_testutil::{is_root, skip, Need};

mod errors;
mod namespaces;
mod protocol;

/// The bound on every error (a behaviour, not a performance figure).
const ERROR_BOUND: Duration = Duration::from_secs(10);
/// The watchdog: perfclock still running after this is killed and the test fails.
const WATCHDOG: Duration = Duration::from_secs(60);
/// How long a JVM may take to start on a loaded 2-core machine.
const JVM_START: Duration = Duration::from_secs(90);

/// The test agent and the library with only `Agent_OnLoad` (see above), and the program of the
/// JVMs they are attached to: it prints `ready <pid>` and sleeps.
const AGENT_C: &str = include_str!("../fixtures/agent.c");
const LOAD_ONLY_C: &str = include_str!("../fixtures/load_only.c");
const IDLE_JAVA: &str = include_str!("../fixtures/Idle.java");

/// Every JDK's `java` under /usr/lib/jvm, one per installation (Debian adds symlinked names).
fn jdks() -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir("/usr/lib/jvm") else {
        return Vec::new();
    };
    let homes: BTreeSet<PathBuf> = entries
        .filter_map(|entry| fs::canonicalize(entry.ok()?.path()).ok())
        .filter(|home| home.join("bin/java").is_file())
        .collect();
    homes
        .into_iter()
        .map(|home| home.join("bin/java"))
        .collect()
}

struct Fixture {
    dir: PathBuf,
    classes: PathBuf,
    agent: PathBuf,
    load_only: PathBuf,
    jdks: Vec<PathBuf>,
}

/// Compiles Idle.java and the two libraries once, in a directory every user can read (the
/// tests run a JVM as nobody) and outside /tmp (the namespace test hides /tmp).
fn fixture(test: &str) -> Option<&'static Fixture> {
    static FIXTURE: OnceLock<Result<Fixture, (Need, String)>> = OnceLock::new();
    let built = FIXTURE.get_or_init(|| {
        let jdks = jdks();
        if jdks.is_empty() {
            return Err((
                Need::Tool("java"),
                "no JDK under /usr/lib/jvm (Debian: openjdk-17-jdk-headless)".into(),
            ));
        }
        let javac = jdks
            .iter()
            .map(|java| java.with_file_name("javac"))
            .find(|javac| javac.is_file())
            .ok_or((
                Need::Tool("javac"),
                "no javac in any JDK under /usr/lib/jvm".into(),
            ))?;
        // Outside /tmp, which the namespace test hides (the checkout, and so cargo's tmp
        // directory, may lie under it), and outside the checkout, whose directories nobody may
        // not enter: a fresh directory of ours (mkdtemp) under /var/tmp, kept for the process.
        let dir = tempfile::Builder::new()
            .prefix("perfclock-attach-fixture.")
            .tempdir_in("/var/tmp")
            .expect("a directory in /var/tmp")
            .keep();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir_all(dir.join("classes")).unwrap();
        fs::write(dir.join("Idle.java"), IDLE_JAVA).unwrap();
        let status = Command::new(&javac)
            .args(["--release", "11", "-d"])
            .arg(dir.join("classes"))
            .arg(dir.join("Idle.java"))
            .status()
            .map_err(|e| (Need::Tool("javac"), format!("{}: {e}", javac.display())))?;
        assert!(status.success(), "javac Idle.java failed");
        for (name, source) in [("agent", AGENT_C), ("load_only", LOAD_ONLY_C)] {
            let c = dir.join(format!("{name}.c"));
            fs::write(&c, source).unwrap();
            let status = Command::new("cc")
                .args(["-shared", "-fPIC", "-Wall", "-Werror", "-o"])
                .arg(dir.join(format!("{name}.so")))
                .arg(&c)
                .status()
                .map_err(|e| {
                    (
                        Need::Tool("cc"),
                        format!("cc: {e} (Debian: apt-get install -y gcc libc6-dev)"),
                    )
                })?;
            assert!(status.success(), "cc {name}.c failed");
        }
        // The JVM runs as nobody in one test: it must reach the classes and the agent.
        Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(&dir)
            .status()
            .unwrap();
        Ok(Fixture {
            classes: dir.join("classes"),
            agent: dir.join("agent.so"),
            load_only: dir.join("load_only.so"),
            dir,
            jdks,
        })
    });
    match built {
        Ok(fixture) => Some(fixture),
        Err((need, why)) => {
            skip(test, *need, why);
            None
        }
    }
}

/// A directory for one test's marker files, writable by every user.
fn marker_dir(fixture: &Fixture, name: &str) -> PathBuf {
    let dir = fixture.dir.join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// How the JVM is started.
#[derive(Clone, Copy, PartialEq)]
enum Wrapper {
    Plain,
    /// As uid/gid nobody/nogroup, through setpriv.
    Nobody,
    /// In its own mount and pid namespace with a private /tmp (unshare), as a container has.
    Namespace,
}

/// A JVM running Idle, killed on drop.
struct Jvm {
    child: Child,
    /// The java process's pid here.
    pid: u32,
    /// Its pid in its own pid namespace (what Idle printed).
    ns_pid: u32,
    output: Arc<Mutex<String>>,
}

impl Jvm {
    fn start(java: &Path, fixture: &Fixture, flags: &[&str], wrapper: Wrapper) -> Jvm {
        let mut command = match wrapper {
            Wrapper::Plain => Command::new(java),
            Wrapper::Nobody => {
                let mut command = Command::new("setpriv");
                command
                    .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
                    .arg(java);
                command
            }
            Wrapper::Namespace => {
                let mut command = Command::new("unshare");
                command
                    .args(["--mount", "--pid", "--fork", "--kill-child", "--mount-proc"])
                    .args([
                        "sh",
                        "-c",
                        "mount -t tmpfs tmpfs /tmp && exec \"$0\" \"$@\"",
                    ])
                    .arg(java);
                command
            }
        };
        command
            .args(flags)
            .arg("-cp")
            .arg(&fixture.classes)
            .arg("Idle")
            .current_dir(&fixture.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start the JVM");
        let output = Arc::new(Mutex::new(String::new()));
        let (ready_tx, ready) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let output = Arc::clone(&output);
            let ready_tx = ready_tx.clone();
            thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if let Some(pid) = line.strip_prefix("ready ") {
                        let _ = ready_tx.send(pid.parse::<u32>().unwrap());
                    }
                    let mut output = output.lock().unwrap();
                    output.push_str(&line);
                    output.push('\n');
                }
            });
        }
        let ns_pid = ready.recv_timeout(JVM_START).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!(
                "{} {flags:?} did not start: {}",
                java.display(),
                output.lock().unwrap()
            )
        });
        let pid = if wrapper == Wrapper::Namespace {
            let children =
                fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id())).unwrap();
            children.trim().parse().expect("unshare's one child")
        } else {
            child.id()
        };
        assert_eq!(
            fs::read_to_string(format!("/proc/{pid}/comm"))
                .unwrap()
                .trim(),
            "java"
        );
        Jvm {
            child,
            pid,
            ns_pid,
            output,
        }
    }

    fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        // SIGTERM first: the JVM then removes its /tmp/.java_pid socket as it exits (SIGKILL
        // would leave it behind). SIGKILL if it lingers; from here it reaches a namespace's init
        // too, and --kill-child ends unshare with it.
        let signal = |name: &str| {
            let _ = Command::new("kill")
                .args([name, &self.pid.to_string()])
                .status();
        };
        signal("-TERM");
        let started = Instant::now();
        // Until it has exited (gone, or a zombie its parent has not reaped yet).
        while fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .is_ok_and(|stat| !stat.contains(") Z "))
            && started.elapsed() < Duration::from_secs(10)
        {
            thread::sleep(Duration::from_millis(20));
        }
        signal("-KILL");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `perfclock attach ARGS` (as nobody if asked), under a watchdog; its output and wall time.
fn attach_with(program: &Path, args: &[&str], as_nobody: bool) -> (Output, Duration) {
    let mut command = if as_nobody {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(program);
        command
    } else {
        Command::new(program)
    };
    let started = Instant::now();
    let mut child = command
        .arg("attach")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run perfclock");
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > WATCHDOG {
            let _ = child.kill();
            panic!("perfclock attach {args:?} still ran after {WATCHDOG:?}");
        }
        thread::sleep(Duration::from_millis(5));
    }
    let elapsed = started.elapsed();
    let output = child.wait_with_output().unwrap();
    eprintln!(
        "perfclock attach {args:?}: {:?} in {elapsed:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    (output, elapsed)
}

fn attach(args: &[&str]) -> (Output, Duration) {
    attach_with(Path::new(env!("CARGO_BIN_EXE_perfclock")), args, false)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Exit 0, and the message says which JVM.
fn assert_loaded(output: &Output, expected: &str) {
    let message = stderr(output);
    assert_eq!(output.status.code(), Some(0), "{message}");
    assert!(
        message.contains(expected),
        "expected {expected:?} in {message}"
    );
}

/// Exit 1 within the bound, with `expected` in the error and no panic.
fn assert_error(result: &(Output, Duration), expected: &str) {
    let (output, elapsed) = result;
    let message = stderr(output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(message.contains("perfclock attach: error: "), "{message}");
    assert!(
        message.contains(expected),
        "expected {expected:?} in {message}"
    );
    assert!(!message.contains("panicked"), "{message}");
    assert!(*elapsed < ERROR_BOUND, "took {elapsed:?}: {message}");
}

/// The file the agent appends to in `java`'s run of a test's `kind` (its own directory).
fn marker_for(fixture: &Fixture, kind: &str, java: &Path) -> PathBuf {
    marker_dir(
        fixture,
        &format!("{kind}-{}", java.display()).replace('/', "_"),
    )
    .join("marker")
}

/// Whether this runs as root; if not, the test is skipped, saying `why` it needs root.
fn as_root(test: &str, why: &str) -> bool {
    if !is_root() {
        skip(test, Need::Root, why);
    }
    is_root()
}

fn marker_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A process that passes for a HotSpot JVM as far as `perfclock attach` can tell (it maps a file
/// named `libjvm.so`), and misbehaves as `FAKE_MODE` says:
/// - `backlog`: listens on `/tmp/.java_pid<pid>` with a backlog of 0 and connects to itself,
///   so the listen queue is full and a blocking `connect` never returns;
/// - `answer`: answers every connection with the bytes of the file `FAKE_ANSWER`;
/// - `quit`: catches SIGQUIT and, on each, prints where `.attach_pid<pid>` exists
///   (`trigger cwd=0|1 tmp=0|1`); it never opens a socket;
/// - `die`: exits on SIGQUIT, as a JVM that crashes while starting its listener.
///
/// It prints `ready <pid>` once set up, and removes its socket when it gets SIGTERM.
const FAKE_JVM_C: &str = include_str!("../fixtures/fake_jvm.c");

/// A FUSE file system (the raw protocol on `/dev/fuse`, no library) holding one file,
/// `argfile`, whose reads are never answered: a read of it blocks in the kernel until the
/// server ends. Run as `stall_fuse MOUNTPOINT` (root); prints `mounted` once it serves.
const STALL_FUSE_C: &str = include_str!("../fixtures/stall_fuse.c");

/// The fake JVM, compiled once with `cc`, and the file it maps as `libjvm.so`, in a directory
/// every user can read (one test runs it as nobody).
struct FakeFixture {
    dir: PathBuf,
    program: PathBuf,
    stall_fuse: PathBuf,
    libjvm: PathBuf,
}

fn fake_fixture(test: &str) -> Option<&'static FakeFixture> {
    static FIXTURE: OnceLock<Result<FakeFixture, (Need, String)>> = OnceLock::new();
    let built = FIXTURE.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("perfclock-attach-fake.")
            .tempdir_in("/var/tmp")
            .expect("a directory in /var/tmp")
            .keep();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        for (name, source) in [("fake_jvm", FAKE_JVM_C), ("stall_fuse", STALL_FUSE_C)] {
            let c = dir.join(format!("{name}.c"));
            fs::write(&c, source).unwrap();
            let status = Command::new("cc")
                .args(["-O1", "-Wall", "-Werror", "-o"])
                .arg(dir.join(name))
                .arg(&c)
                .status()
                .map_err(|e| {
                    (
                        Need::Tool("cc"),
                        format!("cc: {e} (Debian: apt-get install -y gcc libc6-dev)"),
                    )
                })?;
            assert!(status.success(), "cc {name}.c failed");
        }
        let program = dir.join("fake_jvm");
        let libjvm = dir.join("libjvm.so");
        fs::write(&libjvm, vec![0u8; 4096]).unwrap();
        fs::set_permissions(&libjvm, fs::Permissions::from_mode(0o644)).unwrap();
        Ok(FakeFixture {
            stall_fuse: dir.join("stall_fuse"),
            dir,
            program,
            libjvm,
        })
    });
    match built {
        Ok(fixture) => Some(fixture),
        Err((need, why)) => {
            skip(test, *need, why);
            None
        }
    }
}

/// A running fake JVM; its stdout lines arrive on `lines`. Killed (SIGTERM, then SIGKILL) on
/// drop, which removes its socket.
struct FakeJvm {
    child: Child,
    pid: u32,
    lines: mpsc::Receiver<String>,
}

impl FakeJvm {
    /// Starts the fake in `mode` with `args`, in `cwd`, as nobody if asked.
    fn start(
        fixture: &FakeFixture,
        mode: &str,
        args: &[String],
        cwd: &Path,
        as_nobody: bool,
        env: &[(&str, &Path)],
    ) -> FakeJvm {
        let mut command = if as_nobody {
            let mut command = Command::new("setpriv");
            command
                .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
                .arg(&fixture.program);
            command
        } else {
            Command::new(&fixture.program)
        };
        command
            .args(args)
            .env("FAKE_MODE", mode)
            .env("FAKE_LIBJVM", &fixture.libjvm)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start the fake JVM");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let ready = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the fake JVM did not start");
        let pid = child.id();
        assert_eq!(ready, format!("ready {pid}"));
        FakeJvm { child, pid, lines }
    }
}

impl Drop for FakeJvm {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let started = Instant::now();
        while self.child.try_wait().ok().flatten().is_none()
            && started.elapsed() < Duration::from_secs(5)
        {
            thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_file(format!("/tmp/.java_pid{}", self.pid));
        let _ = fs::remove_file(format!("/tmp/.attach_pid{}", self.pid));
    }
}
