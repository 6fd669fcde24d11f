//! `perfclock attach` against real JVMs: every JDK under /usr/lib/jvm, a JVM started without
//! any agent, as root, as the JVM's user, in its own mount and pid namespace, and each error
//! cause with its message, a non-zero exit and the 10 s bound.
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

/// The bound on every error (a behaviour, not a performance figure).
const ERROR_BOUND: Duration = Duration::from_secs(10);
/// The watchdog: perfclock still running after this is killed and the test fails.
const WATCHDOG: Duration = Duration::from_secs(60);
/// How long a JVM may take to start on a loaded 2-core machine.
const JVM_START: Duration = Duration::from_secs(90);

/// The test agent and the library with only `Agent_OnLoad` (see above), and the program of the
/// JVMs they are attached to: it prints `ready <pid>` and sleeps.
const AGENT_C: &str = include_str!("fixtures/agent.c");
const LOAD_ONLY_C: &str = include_str!("fixtures/load_only.c");
const IDLE_JAVA: &str = include_str!("fixtures/Idle.java");

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

fn marker_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn attach_loads_the_agent_into_a_running_jvm_of_every_jdk() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fixture(test) else {
        return;
    };
    let agent = fixture.agent.to_str().unwrap();
    for java in &fixture.jdks {
        eprintln!("== {}", java.display());
        let markers = marker_dir(
            fixture,
            &format!("plain-{}", java.display()).replace('/', "_"),
        );
        let marker = markers.join("marker");
        let jvm = Jvm::start(java, fixture, &[], Wrapper::Plain);
        let pid = jvm.pid.to_string();

        let first = attach(&[
            &pid,
            &format!("first@{}", marker.display()),
            "--agent",
            agent,
        ]);
        assert_loaded(
            &first.0,
            &format!("loaded {agent} into JVM {pid} with options"),
        );
        assert_eq!(marker_lines(&marker), ["attached first"]);

        // A second attach runs the loaded library's Agent_OnAttach again, and says so.
        let second = attach(&[
            &pid,
            &format!("second@{}", marker.display()),
            "--agent",
            agent,
        ]);
        assert_loaded(
            &second.0,
            &format!("{agent} was already loaded in JVM {pid}"),
        );
        assert_eq!(marker_lines(&marker), ["attached first", "attached second"]);

        // The JVM's own answers: Agent_OnAttach's error code, a library without it.
        assert_error(
            &attach(&[&pid, "no-marker", "--agent", agent]),
            "agent load failed: Agent_OnAttach returned 42",
        );
        // A code of perfclock's agent gets its meaning.
        assert_error(
            &attach(&[&pid, "code=104", "--agent", agent]),
            "perfclock's agent returns 104 when the perf clock cannot be opened",
        );
        let load_only = fixture.load_only.to_str().unwrap();
        assert_error(
            &attach(&[&pid, "", "--agent", load_only]),
            &format!("Agent_OnAttach is not available in {load_only}"),
        );
        let not_a_library = attach(&[&pid, "", "--agent", "/bin/sh"]);
        assert_error(&not_a_library, "was not loaded");
        assert_error(&not_a_library, "the agent is --agent PATH");

        // More than HotSpot reads of one argument: refused before sending.
        assert_error(
            &attach(&[&pid, &"x".repeat(1100), "--agent", agent]),
            "the agent option string is 1100 bytes; HotSpot accepts at most 1024",
        );

        // HotSpot accepts only its own user or root: perfclock as nobody is refused, before
        // anything reaches the JVM.
        if is_root() {
            let refused = attach_with(
                Path::new(env!("CARGO_BIN_EXE_perfclock")),
                &[
                    &pid,
                    &format!("nobody@{}", marker.display()),
                    "--agent",
                    agent,
                ],
                true,
            );
            assert_error(
                &refused,
                &format!("permission: JVM {pid} runs as uid 0 gid 0 and perfclock as uid 65534"),
            );
        } else {
            skip(
                test,
                Need::Root,
                "the permission case needs setpriv to nobody",
            );
        }
        assert_eq!(marker_lines(&marker), ["attached first", "attached second"]);
        assert!(
            !jvm.output().contains("Full thread dump"),
            "the JVM printed a thread dump: {}",
            jvm.output()
        );
    }
}

#[test]
fn attach_as_root_acts_as_the_jvms_user() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fixture(test) else {
        return;
    };
    if !is_root() {
        skip(
            test,
            Need::Root,
            "the JVM runs as nobody and perfclock as root",
        );
        return;
    }
    let agent = fixture.agent.to_str().unwrap();
    for java in &fixture.jdks {
        eprintln!("== {}", java.display());
        let markers = marker_dir(
            fixture,
            &format!("nobody-{}", java.display()).replace('/', "_"),
        );
        let marker = markers.join("marker");
        // HotSpot's trace names the trigger file it used: its working directory (root's, 0755)
        // admits only a file root creates, so /tmp shows perfclock created it as nobody.
        let jvm = Jvm::start(java, fixture, &["-Xlog:attach=trace"], Wrapper::Nobody);
        let status = fs::read_to_string(format!("/proc/{}/status", jvm.pid)).unwrap();
        assert!(status.contains("\nUid:\t65534\t65534"), "{status}");
        let pid = jvm.pid.to_string();

        // Root, as the JVM's user (HotSpot checks the peer's credentials).
        let root = attach(&[
            &pid,
            &format!("root@{}", marker.display()),
            "--agent",
            agent,
        ]);
        assert_loaded(&root.0, &format!("loaded {agent} into JVM {pid}"));
        // The JVM's own user, without root.
        let own = attach_with(
            Path::new(env!("CARGO_BIN_EXE_perfclock")),
            &[&pid, &format!("own@{}", marker.display()), "--agent", agent],
            true,
        );
        assert_loaded(&own.0, "was already loaded");
        assert_eq!(marker_lines(&marker), ["attached root", "attached own"]);
        // The JVM's output reaches the test through a reader thread: wait for the line.
        let started = Instant::now();
        while !jvm.output().contains("Attach triggered by") && started.elapsed() < JVM_START {
            thread::sleep(Duration::from_millis(20));
        }
        let trace = jvm.output();
        assert!(
            trace.contains(&format!("Attach triggered by /tmp/.attach_pid{pid}")),
            "the trigger file was not the JVM user's: {trace}"
        );
        // perfclock is root again after the attach: nothing it created is left behind.
        assert!(!Path::new(&format!("{}/.attach_pid{pid}", fixture.dir.display())).exists());
    }
}

#[test]
fn attach_reaches_a_jvm_in_its_own_mount_and_pid_namespace() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fixture(test) else {
        return;
    };
    if !is_root() {
        skip(test, Need::Root, "unshare --mount --pid needs root");
        return;
    }
    let agent = fixture.agent.to_str().unwrap();
    for java in &fixture.jdks {
        eprintln!("== {}", java.display());
        let markers = marker_dir(fixture, &format!("ns-{}", java.display()).replace('/', "_"));
        let marker = markers.join("marker");
        let jvm = Jvm::start(java, fixture, &[], Wrapper::Namespace);
        // The setup: another pid namespace (the JVM is its init) and a private /tmp.
        assert_eq!(jvm.ns_pid, 1, "the JVM is not its pid namespace's init");
        assert_ne!(jvm.pid, 1);
        let ours = fs::metadata("/tmp").unwrap().dev();
        let its = fs::metadata(format!("/proc/{}/root/tmp", jvm.pid))
            .unwrap()
            .dev();
        assert_ne!(ours, its, "the JVM's /tmp is not private");
        let pid = jvm.pid.to_string();

        let attached = attach(&[&pid, &format!("ns@{}", marker.display()), "--agent", agent]);
        assert_loaded(
            &attached.0,
            &format!("loaded {agent} into JVM {pid} (pid 1 in its namespace)"),
        );
        assert_eq!(marker_lines(&marker), ["attached ns"]);
        // The socket lives in the JVM's /tmp only.
        assert!(fs::metadata(format!("/proc/{pid}/root/tmp/.java_pid1")).is_ok());
        let again = attach(&[
            &pid,
            &format!("again@{}", marker.display()),
            "--agent",
            agent,
        ]);
        assert_loaded(&again.0, "was already loaded in JVM");
        assert_eq!(marker_lines(&marker), ["attached ns", "attached again"]);

        // An agent in our /tmp is not in the JVM's (private) one: refused before the JVM
        // would fail to open it.
        let ours = tempfile::Builder::new()
            .prefix("perfclock-attach-")
            .tempdir_in("/tmp")
            .unwrap();
        let hidden = ours.path().join("agent.so");
        fs::copy(&fixture.agent, &hidden).unwrap();
        let hidden = hidden.to_str().unwrap();
        assert_error(
            &attach(&[
                &pid,
                &format!("hidden@{}", marker.display()),
                "--agent",
                hidden,
            ]),
            &format!("agent {hidden} is not the same file inside JVM {pid}'s mount namespace"),
        );
        assert_eq!(marker_lines(&marker), ["attached ns", "attached again"]);
    }
}

#[test]
fn attach_errors_name_the_cause_within_ten_seconds() {
    let test = perfclock_testutil::test_name!();
    let agent_arg = |fixture: &Fixture| fixture.agent.to_str().unwrap().to_owned();

    // Not a JVM: refused without a signal (SIGQUIT would have killed it).
    let mut sleep = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = sleep.id().to_string();
    // spawn() can return before the kernel's exec has renamed the child (it resumes the parent
    // at the exec's point of no return, the rename comes later): wait for the name the error is
    // expected to show. CI saw the test binary's name there once.
    let comm = format!("/proc/{pid}/comm");
    let renamed = Instant::now();
    while fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
        assert!(
            renamed.elapsed() < Duration::from_secs(10),
            "{comm} never became sleep"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_error(
        &attach(&[&pid, "", "--agent", "/bin/sh"]),
        &format!("not a HotSpot JVM: process {pid} (sleep) maps no libjvm.so"),
    );
    assert!(sleep.try_wait().unwrap().is_none(), "sleep was signalled");
    // A timeout too large to add to a clock reading is no panic.
    assert_error(
        &attach(&[&pid, "", "--agent", "/bin/sh", "--timeout", "1e19"]),
        "not a HotSpot JVM",
    );
    let _ = sleep.kill();
    let _ = sleep.wait();

    // A pid that has exited (reaped).
    let mut exited = Command::new("true").spawn().unwrap();
    let pid = exited.id();
    exited.wait().unwrap();
    if Path::new(&format!("/proc/{pid}")).exists() {
        eprintln!("pid {pid} was reused at once: the dead pid case is not checked this run");
    } else {
        assert_error(
            &attach(&[&pid.to_string(), "", "--agent", "/bin/sh"]),
            &format!("no such process: {pid}"),
        );
    }

    let Some(fixture) = fixture(test) else {
        return;
    };
    let agent = agent_arg(fixture);

    // No --agent and no libperfclock_agent.so next to the executable: perfclock run from a
    // directory of its own.
    let lone = fixture.dir.join("lone");
    let _ = fs::remove_dir_all(&lone);
    fs::create_dir_all(&lone).unwrap();
    let exe = lone.join("perfclock");
    fs::hard_link(env!("CARGO_BIN_EXE_perfclock"), &exe)
        .or_else(|_| fs::copy(env!("CARGO_BIN_EXE_perfclock"), &exe).map(drop))
        .unwrap();
    assert_error(
        &attach_with(&exe, &[&std::process::id().to_string()], false),
        &format!("no libperfclock_agent.so next to {}", exe.display()),
    );

    fs::write(
        fixture.dir.join("disable.args"),
        "-XX:+DisableAttachMechanism\n",
    )
    .unwrap();
    fs::write(
        fixture.dir.join("disable.flags"),
        "+DisableAttachMechanism\n",
    )
    .unwrap();
    for java in &fixture.jdks {
        eprintln!("== {}", java.display());
        // Attach disabled where perfclock sees it: refused without a signal.
        for flags in [&["-XX:+DisableAttachMechanism"][..], &["@disable.args"]] {
            let jvm = Jvm::start(java, fixture, flags, Wrapper::Plain);
            assert_error(
                &attach(&[&jvm.pid.to_string(), "", "--agent", &agent]),
                &format!(
                    "attach disabled: JVM {} runs with -XX:+DisableAttachMechanism (from its command line)",
                    jvm.pid
                ),
            );
            assert!(!jvm.output().contains("Full thread dump"), "signalled");
        }
        // Disabled in a -XX:Flags= file perfclock does not read: the socket never appears.
        let jvm = Jvm::start(java, fixture, &["-XX:Flags=disable.flags"], Wrapper::Plain);
        let pid = jvm.pid;
        let result = attach(&[&pid.to_string(), "", "--agent", &agent]);
        assert_error(
            &result,
            &format!("timeout: JVM {pid} did not open its attach socket /proc/{pid}/root/tmp/.java_pid{pid} within 8.0 s"),
        );
        assert!(
            result.1 >= Duration::from_secs(8),
            "gave up early: {:?}",
            result.1
        );
        // The trigger file is removed again.
        assert!(!fixture.dir.join(format!(".attach_pid{pid}")).exists());
        // A shorter --timeout is honoured.
        let short = attach(&[&pid.to_string(), "", "--agent", &agent, "--timeout", "0.5"]);
        assert_error(&short, "within 0.5 s");
        assert_error(&short, "the timeout is --timeout SECONDS (0.5 s now)");
        assert!(short.1 < Duration::from_secs(3), "{:?}", short.1);
    }
}

#[test]
fn a_socket_left_by_a_killed_jvm_with_the_same_pid_is_replaced() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fixture(test) else {
        return;
    };
    if !is_root() {
        skip(
            test,
            Need::Root,
            "the JVM's /tmp socket is made as the JVM's user",
        );
        return;
    }
    let agent = fixture.agent.to_str().unwrap();
    for java in &fixture.jdks {
        eprintln!("== {}", java.display());
        let markers = marker_dir(
            fixture,
            &format!("stale-{}", java.display()).replace('/', "_"),
        );
        let marker = markers.join("marker");
        // In its own namespaces, so the socket path is the JVM's alone and nobody else's test.
        let jvm = Jvm::start(java, fixture, &[], Wrapper::Namespace);
        let pid = jvm.pid.to_string();
        let socket = format!("/proc/{pid}/root/tmp/.java_pid{}", jvm.ns_pid);
        // A socket nobody listens on, as a JVM killed with SIGKILL leaves it.
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        let stale = fs::metadata(&socket).unwrap().ino();
        let attached = attach(&[
            &pid,
            &format!("stale@{}", marker.display()),
            "--agent",
            agent,
        ]);
        assert_loaded(&attached.0, &format!("loaded {agent} into JVM {pid}"));
        assert_eq!(marker_lines(&marker), ["attached stale"]);
        assert_ne!(
            fs::metadata(&socket).unwrap().ino(),
            stale,
            "the JVM's socket is new"
        );
    }
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
const FAKE_JVM_C: &str = include_str!("fixtures/fake_jvm.c");

/// A FUSE file system (the raw protocol on `/dev/fuse`, no library) holding one file,
/// `argfile`, whose reads are never answered: a read of it blocks in the kernel until the
/// server ends. Run as `stall_fuse MOUNTPOINT` (root); prints `mounted` once it serves.
const STALL_FUSE_C: &str = include_str!("fixtures/stall_fuse.c");

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

#[test]
fn a_full_listen_queue_ends_in_a_timeout_not_a_hang() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fake_fixture(test) else {
        return;
    };
    let fake = FakeJvm::start(fixture, "backlog", &[], &fixture.dir, false, &[]);
    let pid = fake.pid.to_string();
    let result = attach(&[&pid, "", "--agent", "/bin/sh", "--timeout", "2"]);
    assert_error(
        &result,
        &format!("timeout: the attach socket /proc/{pid}/root/tmp/.java_pid{pid} accepted no connection within 2.0 s"),
    );
    assert!(
        result.1 >= Duration::from_secs(2),
        "gave up early: {:?}",
        result.1
    );
}

#[test]
fn thousands_of_argfiles_are_not_all_read() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fake_fixture(test) else {
        return;
    };
    // 1 MiB of short options, named 3,000 times: what the launcher would have expanded.
    let argfile = fixture.dir.join("big.args");
    fs::write(&argfile, "-Xa ".repeat(1 << 18)).unwrap();
    let mut args: Vec<String> = vec![format!("@{}", argfile.display()); 3000];
    args.push("Main".into());
    let fake = FakeJvm::start(fixture, "quit", &args, &fixture.dir, false, &[]);
    // perfclock within 1 GiB of address space: reading every file would need several.
    let perfclock = env!("CARGO_BIN_EXE_perfclock");
    let started = Instant::now();
    let output = Command::new("sh")
        .args([
            "-c",
            "ulimit -v 1048576 && exec \"$@\"",
            "sh",
            perfclock,
            "attach",
        ])
        .args([
            &fake.pid.to_string(),
            "",
            "--agent",
            "/bin/sh",
            "--timeout",
            "2",
        ])
        .output()
        .unwrap();
    eprintln!("{}", stderr(&output));
    assert_error(
        &(output, started.elapsed()),
        &format!(
            "did not open its attach socket /proc/{0}/root/tmp/.java_pid{0}",
            fake.pid
        ),
    );
    // The attach went as far as the signal: the fake saw the trigger file.
    let seen = fake.lines.recv_timeout(Duration::from_secs(5));
    assert!(
        seen.as_deref()
            .is_ok_and(|line| line.starts_with("trigger ") && line.contains("=1")),
        "{seen:?}"
    );
}

#[test]
fn root_creates_no_trigger_file_where_only_its_groups_may_write() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fake_fixture(test) else {
        return;
    };
    if !is_root() {
        skip(
            test,
            Need::Root,
            "the target must be another user's process",
        );
        return;
    }
    // Writable by root and group root only; nobody may enter it.
    let guarded = fixture.dir.join("group-root-only");
    let _ = fs::remove_dir_all(&guarded);
    fs::create_dir(&guarded).unwrap();
    fs::set_permissions(&guarded, fs::Permissions::from_mode(0o775)).unwrap();
    let meta = fs::metadata(&guarded).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (0, 0));
    // The hostile target, as nobody, with its working directory there.
    let fake = FakeJvm::start(fixture, "quit", &[], &guarded, true, &[]);
    let pid = fake.pid.to_string();
    // perfclock as root with root's group among its supplementary groups, as a root login has.
    let started = Instant::now();
    let output = Command::new("setpriv")
        .args(["--groups=0", "--"])
        .arg(env!("CARGO_BIN_EXE_perfclock"))
        .args(["attach", &pid, "", "--agent", "/bin/sh", "--timeout", "2"])
        .output()
        .unwrap();
    let result = (output, started.elapsed());
    assert_error(&result, "did not open its attach socket");
    // The trigger file was made, as nobody could: in /tmp, never in the guarded directory.
    assert_eq!(
        fake.lines.recv_timeout(Duration::from_secs(5)).as_deref(),
        Ok("trigger cwd=0 tmp=1")
    );
    assert_eq!(fs::read_dir(&guarded).unwrap().count(), 0);
}

#[test]
fn the_jvms_answer_reaches_the_terminal_escaped_and_bounded() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fake_fixture(test) else {
        return;
    };
    let answer = fixture.dir.join("answer");
    let hostile = |first: &str| {
        let mut bytes = format!(
            "{first}\nreturn code: 0\n\x1b[2J\x1b]52;c;cHduZWQ=\x07\n\
             perfclock attach: loaded /evil into JVM 1\n\r\x1b[31m"
        )
        .into_bytes();
        bytes.extend(std::iter::repeat_n(b'A', 64 * 1024));
        bytes
    };
    let fake = FakeJvm::start(
        fixture,
        "answer",
        &[],
        &fixture.dir,
        false,
        &[("FAKE_ANSWER", &answer)],
    );
    let pid = fake.pid.to_string();
    for (first, exit) in [("0", 0), ("-1", 1)] {
        fs::write(&answer, hostile(first)).unwrap();
        let (output, _) = attach(&[&pid, "", "--agent", "/bin/sh", "--timeout", "5"]);
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(exit), "{message}");
        assert!(
            message.contains("cHduZWQ="),
            "the JVM's text is not shown: {message}"
        );
        let controls: Vec<u8> = output
            .stderr
            .iter()
            .copied()
            .filter(|&b| (b < 0x20 && b != b'\n') || b == 0x7f)
            .collect();
        assert!(
            controls.is_empty(),
            "control bytes {controls:?} in {message}"
        );
        assert!(
            !message.contains("\nperfclock attach: loaded /evil"),
            "a forged line: {message}"
        );
        assert!(output.stderr.len() < 4096, "{} bytes", output.stderr.len());
    }
}

#[test]
fn a_jvm_still_starting_is_attached_once_the_agent_can_run() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fake_fixture(test) else {
        return;
    };
    let answer = fixture.dir.join("answer-starting");
    // Renamed in whole, so the fake never reads half an answer.
    let set_answer = |return_code: i32| {
        let next = fixture.dir.join("answer-starting.next");
        fs::write(&next, format!("0\nreturn code: {return_code}\n")).unwrap();
        fs::rename(&next, &answer).unwrap();
    };
    // perfclock's agent returns 102 while the JVM has no JVMTI environment yet.
    set_answer(102);
    let fake = FakeJvm::start(
        fixture,
        "answer",
        &[],
        &fixture.dir,
        false,
        &[("FAKE_ANSWER", &answer)],
    );
    let pid = fake.pid.to_string();

    let starting = attach(&[&pid, "", "--agent", "/bin/sh", "--timeout", "1"]);
    assert_error(&starting, "returned 102");
    let message = stderr(&starting.0);
    assert!(
        message.contains("perfclock's agent returns 102 when the JVM gave no JVMTI"),
        "{message}"
    );
    assert!(
        starting.1 >= Duration::from_millis(800),
        "gave up after {:?}, before its timeout",
        starting.1
    );

    let live = thread::scope(|scope| {
        scope.spawn(|| {
            thread::sleep(Duration::from_millis(1000));
            set_answer(0);
        });
        attach(&[&pid, "", "--agent", "/bin/sh", "--timeout", "6"])
    });
    assert_loaded(&live.0, "returned 0");
    assert!(
        live.1 >= Duration::from_millis(1000),
        "loaded after {:?}, before the agent could run",
        live.1
    );
}

#[test]
fn a_jvm_that_dies_on_sigquit_ends_the_wait_at_once() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fake_fixture(test) else {
        return;
    };
    let fake = FakeJvm::start(fixture, "die", &[], &fixture.dir, false, &[]);
    let pid = fake.pid.to_string();
    let result = attach(&[&pid, "", "--agent", "/bin/sh", "--timeout", "8"]);
    assert_error(
        &result,
        &format!("JVM {pid} exited while perfclock waited for its attach socket"),
    );
    assert!(result.1 < Duration::from_secs(4), "waited {:?}", result.1);
}

/// A mounted [`STALL_FUSE_C`] file system: the server is killed and the mount detached on drop
/// (which ends every read waiting on it).
struct StallFuse {
    server: Child,
    mountpoint: PathBuf,
}

impl Drop for StallFuse {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .status();
    }
}

#[test]
fn an_option_file_whose_read_never_returns_ends_at_the_deadline() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fake_fixture(test) else {
        return;
    };
    if !is_root() {
        skip(
            test,
            Need::Root,
            "mounting the stalling FUSE file system needs root",
        );
        return;
    }
    if !Path::new("/dev/fuse").exists() {
        skip(
            test,
            Need::Mount,
            "no /dev/fuse: the stalling file system is a FUSE mount",
        );
        return;
    }
    let mountpoint = fixture.dir.join("stall-mount");
    fs::create_dir_all(&mountpoint).unwrap();
    let mut server = Command::new(&fixture.stall_fuse)
        .arg(&mountpoint)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut mounted = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut mounted)
        .unwrap();
    let fuse = StallFuse { server, mountpoint };
    assert_eq!(mounted.trim(), "mounted", "the FUSE server did not mount");
    let argfile = fuse.mountpoint.join("argfile");
    // The setup: the file is there, and a read of it blocks.
    assert_eq!(fs::metadata(&argfile).unwrap().len(), 64);
    let (tx, rx) = mpsc::channel();
    let blocked = argfile.clone();
    thread::spawn(move || {
        let _ = tx.send(fs::read(blocked).map(|bytes| bytes.len()));
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(1)).is_err(),
        "a read of {} did not block",
        argfile.display()
    );
    // A target that names the file as an @argfile (a JVM started from such a directory).
    let fake = FakeJvm::start(
        fixture,
        "quit",
        &[format!("@{}", argfile.display()), "Main".into()],
        &fixture.dir,
        false,
        &[],
    );
    let pid = fake.pid.to_string();
    // The error must come at the deadline; the process itself can only end once the blocked
    // read does (the kernel waits for a FUSE request the server has taken, uninterruptibly),
    // so stderr is read as it comes, then the server is stopped.
    let started = Instant::now();
    let mut perfclock = Command::new(env!("CARGO_BIN_EXE_perfclock"))
        .args(["attach", &pid, "", "--agent", "/bin/sh", "--timeout", "2"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = perfclock.stderr.take().unwrap();
    let (line_tx, line) = mpsc::channel();
    thread::spawn(move || {
        let mut error = String::new();
        let _ = BufReader::new(stderr).read_line(&mut error);
        let _ = line_tx.send(error);
    });
    let Ok(error) = line.recv_timeout(ERROR_BOUND) else {
        drop(fuse);
        let _ = perfclock.kill();
        let _ = perfclock.wait();
        panic!("perfclock attach said nothing within {ERROR_BOUND:?}");
    };
    let elapsed = started.elapsed();
    eprintln!("after {elapsed:?}: {error}");
    assert!(
        error.contains(&format!(
            "perfclock attach: error: timeout: reading the JVM's option files for process {pid} \
             did not finish within 2.0 s"
        )),
        "{error}"
    );
    assert!(
        (Duration::from_secs(2)..ERROR_BOUND).contains(&elapsed),
        "the error came after {elapsed:?}"
    );
    drop(fuse);
    let exited = Instant::now();
    while perfclock.try_wait().unwrap().is_none() {
        assert!(
            exited.elapsed() < WATCHDOG,
            "perfclock did not end with the FUSE server"
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(perfclock.wait().unwrap().code(), Some(1));
    // The read the test left behind ends with the server too.
    assert!(rx.recv_timeout(Duration::from_secs(10)).is_ok());
}
