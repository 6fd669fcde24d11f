//! Users and namespaces: root attaches as the JVM's user, reaches a JVM in its own mount and
//! pid namespace, and creates no trigger file where only its groups may write.

use super::*;

#[test]
fn attach_as_root_acts_as_the_jvms_user() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fixture(test) else {
        return;
    };
    if !as_root(test, "the JVM runs as nobody and perfclock as root") {
        return;
    }
    let agent = fixture.agent.to_str().unwrap();
    for java in &fixture.jdks {
        eprintln!("== {}", java.display());
        let marker = marker_for(fixture, "nobody", java);
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
    if !as_root(test, "unshare --mount --pid needs root") {
        return;
    }
    let agent = fixture.agent.to_str().unwrap();
    for java in &fixture.jdks {
        eprintln!("== {}", java.display());
        let marker = marker_for(fixture, "ns", java);
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
fn root_creates_no_trigger_file_where_only_its_groups_may_write() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fake_fixture(test) else {
        return;
    };
    if !as_root(test, "the target must be another user's process") {
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
