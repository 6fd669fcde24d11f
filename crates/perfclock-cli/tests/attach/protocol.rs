//! The attach protocol against real JVMs: every JDK's, a socket a killed JVM left under a pid
//! reused, and a JVM still starting attached once the agent can run.

use super::*;

#[test]
fn attach_loads_the_agent_into_a_running_jvm_of_every_jdk() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fixture(test) else {
        return;
    };
    let agent = fixture.agent.to_str().unwrap();
    for java in &fixture.jdks {
        eprintln!("== {}", java.display());
        let marker = marker_for(fixture, "plain", java);
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
fn a_socket_left_by_a_killed_jvm_with_the_same_pid_is_replaced() {
    let test = perfclock_testutil::test_name!();
    let Some(fixture) = fixture(test) else {
        return;
    };
    if !as_root(test, "the JVM's /tmp socket is made as the JVM's user") {
        return;
    }
    let agent = fixture.agent.to_str().unwrap();
    for java in &fixture.jdks {
        eprintln!("== {}", java.display());
        let marker = marker_for(fixture, "stale", java);
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
