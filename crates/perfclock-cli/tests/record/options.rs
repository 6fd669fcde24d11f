//! `perfclock record`'s refusals before anything starts: perf options that would misplace or
//! hide the JIT code, a missing perf, an OUT that is no regular file, a planted link, an agent
//! path HotSpot would cut.

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::process::Command;

use perfclock_testutil::{is_root, skip, Need};

use super::common::*;

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

/// An OUT that is a symlink, a FIFO, a directory or (as root) a device node is refused before
/// the command starts, and left as it is.
#[test]
fn an_out_that_is_not_a_regular_file_is_refused_before_the_command_starts() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = perf_or_skip(test) else {
        return;
    };
    let dir = work.path();
    fs::write(dir.join("target"), b"left alone").unwrap();
    std::os::unix::fs::symlink(dir.join("target"), dir.join("link")).unwrap();
    assert!(Command::new("mkfifo")
        .arg(dir.join("fifo"))
        .status()
        .unwrap()
        .success());
    fs::create_dir(dir.join("directory")).unwrap();
    let mut cases = vec![
        ("link", "a symbolic link"),
        ("fifo", "a FIFO"),
        ("directory", "a directory"),
    ];
    if is_root() {
        // The null device's numbers, a node of our own: nothing system-wide is at risk.
        let made = Command::new("mknod")
            .arg(dir.join("null"))
            .args(["c", "1", "3"])
            .status()
            .unwrap();
        assert!(made.success(), "mknod as root");
        cases.push(("null", "a character device"));
    } else {
        skip(test, Need::Root, "the device-node case needs mknod");
    }
    for (out, kind) in cases {
        let before = fs::symlink_metadata(dir.join(out)).unwrap();
        let output = record(
            dir,
            &[
                "--no-java-agent",
                "-o",
                out,
                "--",
                "sh",
                "-c",
                "touch started",
            ],
        )
        .output()
        .unwrap();
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{out}: {stderr}");
        assert!(stderr.contains(kind), "{out}: {stderr}");
        assert!(
            !dir.join("started").exists(),
            "{out}: the command ran: {stderr}"
        );
        let after = fs::symlink_metadata(dir.join(out)).unwrap();
        assert_eq!(
            (before.file_type(), before.ino()),
            (after.file_type(), after.ino()),
            "{out} was replaced"
        );
    }
    assert_eq!(fs::read(dir.join("target")).unwrap(), b"left alone");
}

/// perf's raw recording goes into a private directory of perfclock's: a link planted at the
/// name it had beside OUT (`out.data.raw`) is neither followed nor touched.
#[test]
fn the_raw_recording_never_follows_a_planted_link() {
    let Some(work) = perf_or_skip("the_raw_recording_never_follows_a_planted_link") else {
        return;
    };
    let dir = work.path();
    let victim = dir.join("victim");
    std::os::unix::fs::symlink(&victim, dir.join("out.data.raw")).unwrap();
    let output = record(dir, &["--no-java-agent", "-o", "out.data", "--", "true"])
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        !victim.exists(),
        "perf wrote through the planted link: {stderr}"
    );
    assert!(fs::symlink_metadata(dir.join("out.data.raw"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(dir.join("out.data").is_file(), "{stderr}");
    // What perfclock created beside OUT is gone: only OUT and the test's files remain.
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["home", "out.data", "out.data.raw"], "{stderr}");
}

/// HotSpot ends `-agentpath`'s path at its first `=`: such an agent path is refused before
/// anything runs.
#[test]
fn an_agent_path_with_an_equals_sign_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("a=b");
    fs::create_dir(&dir).unwrap();
    let agent = dir.join("libperfclock_agent.so");
    fs::write(&agent, b"not loaded").unwrap();
    let output = record(
        work.path(),
        &[
            "--agent",
            agent.to_str().unwrap(),
            "-o",
            "out.data",
            "--",
            "sh",
            "-c",
            "touch started",
        ],
    )
    .output()
    .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("holds a `=`"), "{stderr}");
    assert!(
        !work.path().join("started").exists(),
        "the command ran: {stderr}"
    );
}
