//! Each error's cause named, with a non-zero exit, within the 10 s bound: real JVMs that
//! refuse, and fake ones that misbehave (a full listen queue, thousands of argfiles, a hostile
//! answer, death on SIGQUIT, an option file whose read never returns).

use super::*;

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
    if !as_root(test, "mounting the stalling FUSE file system needs root") {
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
