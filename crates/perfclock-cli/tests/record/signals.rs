//! Signals and failures around `perf record`: a failing command, SIGINT, SIGHUP, SIGKILL of
//! perfclock or perf, a signal during `perf inject`.

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::common::*;

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
    // The dumps go to the command's directory inside the dump root `out.data.jit-XXXXXX`.
    let has_dump = |dir: &Path| {
        fs::read_dir(dir).is_ok_and(|mut d| {
            d.any(|f| f.is_ok_and(|f| f.file_name().to_string_lossy().ends_with(".dump")))
        })
    };
    let dump_written = || {
        fs::read_dir(work.path()).unwrap().flatten().any(|root| {
            root.file_name()
                .to_string_lossy()
                .starts_with("out.data.jit-")
                && fs::read_dir(root.path())
                    .is_ok_and(|mut dirs| dirs.any(|d| d.is_ok_and(|d| has_dump(&d.path()))))
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

/// A command that writes its pid to `cmd.pid` in the work directory and sleeps for long.
const SLEEPER: &[&str] = &["sh", "-c", "echo $$ > cmd.pid; exec sleep 1000"];

/// Starts `perfclock record --no-java-agent -o out.data -- SLEEPER` in `work`; returns it and
/// the command's pid once the command runs.
fn record_sleeper(work: &Path, new_group: bool) -> (std::process::Child, u32) {
    let mut args = vec!["--no-java-agent", "-o", "out.data", "--"];
    args.extend_from_slice(SLEEPER);
    let mut command = record(work, &args);
    command.stderr(Stdio::piped());
    if new_group {
        use std::os::unix::process::CommandExt as _;
        command.process_group(0);
    }
    let child = command.spawn().unwrap();
    let pid_file = work.join("cmd.pid");
    assert!(
        wait_until(Duration::from_secs(20), || fs::read_to_string(&pid_file)
            .is_ok_and(|text| text.ends_with('\n'))),
        "the command never started"
    );
    let pid = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // perf's first samples, so that the recording has data.
    std::thread::sleep(Duration::from_millis(500));
    (child, pid)
}

/// Stops a command left running (a failed test's debris) and says whether it was.
fn reap_leftover(pid: u32) -> bool {
    let was = alive(pid);
    if was {
        send(pid, libc::SIGKILL);
    }
    was
}

/// SIGHUP (a closed terminal), to perfclock alone or to its whole process group: perf stops the
/// command, OUT is written, and perfclock exits 128 + SIGHUP; nothing is left running.
#[test]
fn sighup_stops_perf_and_the_command_and_still_writes_out() {
    let Some(work) = perf_or_skip("sighup_stops_perf_and_the_command_and_still_writes_out") else {
        return;
    };
    for group in [false, true] {
        let dir = work.path();
        let _ = fs::remove_file(dir.join("cmd.pid"));
        let _ = fs::remove_file(dir.join("out.data"));
        let (child, command_pid) = record_sleeper(dir, group);
        let target = if group {
            // The process group, as a terminal's hangup reaches it.
            -i32::try_from(child.id()).unwrap()
        } else {
            i32::try_from(child.id()).unwrap()
        };
        // SAFETY: kill with plain integers, to the child (or its group) this test started.
        unsafe {
            libc::kill(target, libc::SIGHUP);
        }
        let output = child.wait_with_output().unwrap();
        let stderr = text(&output.stderr);
        let stopped = wait_until(Duration::from_secs(10), || !alive(command_pid));
        let leftover = reap_leftover(command_pid);
        assert!(
            stopped && !leftover,
            "group {group}: the command still runs: {stderr}"
        );
        assert_eq!(
            output.status.code(),
            Some(128 + libc::SIGHUP),
            "group {group}: {stderr}"
        );
        assert!(
            dir.join("out.data").is_file(),
            "group {group}: no OUT: {stderr}"
        );
    }
}

/// SIGKILL of perfclock stops perf (its parent-death signal), which stops the command.
#[test]
fn sigkill_of_perfclock_stops_perf_and_the_command() {
    let Some(work) = perf_or_skip("sigkill_of_perfclock_stops_perf_and_the_command") else {
        return;
    };
    let (mut child, command_pid) = record_sleeper(work.path(), false);
    send(child.id(), libc::SIGKILL);
    child.wait().unwrap();
    let stopped = wait_until(Duration::from_secs(10), || !alive(command_pid));
    let leftover = reap_leftover(command_pid);
    assert!(
        stopped && !leftover,
        "the command outlived perfclock's SIGKILL"
    );
}

/// The pids whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(str::to_owned))
                    == Some(parent.to_string())
            })
        })
        .collect()
}

/// SIGKILL of perf: perfclock stops the command perf leaves behind, and says perf was killed
/// instead of blaming perf_event_paranoid.
#[test]
fn sigkill_of_perf_stops_the_command_and_names_the_signal() {
    let Some(work) = perf_or_skip("sigkill_of_perf_stops_the_command_and_names_the_signal") else {
        return;
    };
    let (child, command_pid) = record_sleeper(work.path(), false);
    let perf = children_of(child.id());
    assert_eq!(perf.len(), 1, "perfclock's children: {perf:?}");
    send(perf[0], libc::SIGKILL);
    let output = child.wait_with_output().unwrap();
    let stderr = text(&output.stderr);
    let stopped = wait_until(Duration::from_secs(10), || !alive(command_pid));
    let leftover = reap_leftover(command_pid);
    assert!(stopped && !leftover, "the command outlived perf: {stderr}");
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("killed by signal 9"), "{stderr}");
    assert!(!stderr.contains("perf_event_paranoid"), "{stderr}");
}

/// SIGINT while `perf inject --jit` runs: perfclock exits 130 and either wrote OUT complete
/// or wrote nothing and says so; no temporary file is left beside OUT (the raw recording is
/// kept in perfclock's private directory, as the message says).
#[test]
fn sigint_during_perf_inject_leaves_out_complete_or_absent_and_no_temporary() {
    let Some(work) =
        setup("sigint_during_perf_inject_leaves_out_complete_or_absent_and_no_temporary")
    else {
        return;
    };
    let _lock = jvm_lock();
    let mut child = record(
        work.path(),
        &[
            "-o", "out.data", "--", "java", "-cp", ".", "Hot", "4000", "0",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stderr = String::new();
    let mut reader = std::io::BufReader::new(child.stderr.take().unwrap());
    loop {
        let mut line = String::new();
        use std::io::BufRead as _;
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("perfclock ended before perf inject: {stderr}");
        }
        stderr.push_str(&line);
        if line.contains("perf inject --jit") {
            break;
        }
    }
    send(child.id(), libc::SIGINT);
    use std::io::Read as _;
    reader.read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    assert!(
        status.signal() == Some(libc::SIGINT) || status.code() == Some(130),
        "{status}: {stderr}"
    );
    let out = work.path().join("out.data");
    if out.exists() {
        assert!(!stderr.contains("was not written"), "{stderr}");
        assert_hot(work.path(), "out.data", "interrupted after OUT was written");
    } else {
        assert!(
            stderr.contains("was not written"),
            "no OUT and no message: {stderr}"
        );
        assert!(stderr.contains("the recording is kept in"), "{stderr}");
    }
    // Beside OUT: the test's files, the jitdump directory, at most perfclock's private
    // directory holding the raw recording alone, and the jitted images' directory only beside a
    // complete OUT, which names them.
    for entry in fs::read_dir(work.path()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("out.data.jitted-") {
            assert!(out.exists(), "images left without OUT: {stderr}");
            continue;
        }
        if name.starts_with(".out.data.perfclock-") {
            let inside: Vec<String> = fs::read_dir(entry.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(inside, ["out.data.raw"], "{stderr}");
        } else {
            assert!(
                name.ends_with(".java")
                    || name.ends_with(".class")
                    || name == "home"
                    || name == "out.data"
                    || name.starts_with("out.data.jit-"),
                "left beside OUT: {name}: {stderr}"
            );
        }
    }
}
