//! Root's `perfclock record` against another user's jitdumps: the user (`nobody`, through
//! `setpriv`) writes and maps a dump in a directory of their own, then turns hostile
//! (`fixtures/hostile_user.py`): links where perf inject writes its images, a link to root's
//! secrets, a FIFO, a sparse 3 GiB file, a dump gone, a garbage record, control characters in
//! the path. Each is a warning naming the dump, escaped; the recording is written, nothing is
//! written or read through the user's links, and nothing is left behind.
//!
//! Needs root (to record another user's process and to become `nobody`), perf, Debian's
//! python3 (`/usr/bin/python3`: `nobody` must be able to run it, which a python under root's
//! home is not) and setpriv; without them the tests say `SKIPPED` (fatal under the
//! PERFCLOCK_REQUIRE_* variables).

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use perfclock_testutil::{is_root, skip, Need};

const HOSTILE_USER: &str = include_str!("../fixtures/hostile_user.py");
/// `nobody`'s uid and gid on Debian.
const NOBODY: u32 = 65534;
/// A python3 every user can run.
const PYTHON: &str = "/usr/bin/python3";

/// A work directory, `user/` in it owned by `nobody`, and the fixture; `None` after a skip.
struct Setup {
    work: tempfile::TempDir,
}

impl Setup {
    fn new(test: &str) -> Option<Setup> {
        if !is_root() {
            skip(test, Need::Root, "records another user's process as root");
            return None;
        }
        for tool in ["perf", PYTHON, "setpriv"] {
            let runs = Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            if !runs {
                skip(
                    test,
                    Need::Tool(tool),
                    format!("`{tool} --version` did not run"),
                );
                return None;
            }
        }
        let work = tempfile::tempdir().unwrap();
        fs::set_permissions(work.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir(work.path().join("home")).unwrap();
        fs::write(work.path().join("hostile_user.py"), HOSTILE_USER).unwrap();
        Some(Setup { work })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    /// A directory `name` owned by `nobody` (mode 0755).
    fn user_dir(&self, name: &str) -> PathBuf {
        let dir = self.path(name);
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    /// The command that runs the fixture as `nobody`: `scenario` in `dir`.
    fn as_nobody(&self, scenario: &str, dir: &Path, target: Option<&Path>) -> Vec<String> {
        let mut command = vec![
            "setpriv".to_owned(),
            format!("--reuid={NOBODY}"),
            format!("--regid={NOBODY}"),
            "--clear-groups".to_owned(),
            PYTHON.to_owned(),
            self.path("hostile_user.py").display().to_string(),
            scenario.to_owned(),
            dir.display().to_string(),
        ];
        command.extend(target.map(|t| t.display().to_string()));
        command
    }

    /// `perfclock record -o OUT --no-java-agent --all-jit-code ARGS`, HOME in the work
    /// directory (perf inject's build-id cache).
    fn record(&self, args: &[String]) -> Command {
        let mut command = Command::new(super::common::perfclock());
        command
            .args(["record", "-o"])
            .arg(self.path("out.data"))
            .args(["--no-java-agent", "--all-jit-code"])
            .args(args)
            .current_dir(self.work.path())
            .env("HOME", self.path("home"));
        command
    }

    /// Runs `record -- ARGS` to its end (at most two minutes).
    fn record_command(&self, command: &[String]) -> Output {
        let mut args = vec!["--".to_owned()];
        args.extend_from_slice(command);
        finish(self.record(&args), Duration::from_secs(120))
    }

    /// Every file under the copies' directories beside OUT, and those directories.
    fn copies(&self) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let mut dirs = Vec::new();
        let mut files = Vec::new();
        for entry in fs::read_dir(self.work.path()).unwrap() {
            let path = entry.unwrap().path();
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("out.data.jitted-"))
            {
                walk(&path, &mut files);
                dirs.push(path);
            }
        }
        (dirs, files)
    }
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if fs::symlink_metadata(&path).unwrap().is_dir() {
            walk(&path, files);
        } else {
            files.push(path);
        }
    }
}

/// Runs `command`, killing it after `deadline`: its output.
fn finish(mut command: Command, deadline: Duration) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let watchdog = std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: signal 0 only asks whether the process group exists.
            if unsafe { libc::kill(-pid, 0) } != 0 {
                return false;
            }
        }
        // SAFETY: the test's own process group, made for this command.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        true
    });
    let output = child.wait_with_output().unwrap();
    assert!(
        !watchdog.join().unwrap(),
        "still running after {deadline:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!(
        "status {:?}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Exit 0, OUT written, and a warning that `dump` was left out naming `why`.
fn assert_left_out(setup: &Setup, output: &Output, dump_dir: &Path, why: &str) {
    let message = stderr(output);
    assert_eq!(output.status.code(), Some(0), "{message}");
    assert!(setup.path("out.data").is_file(), "no OUT: {message}");
    let line = message
        .lines()
        .find(|line| {
            line.contains(&format!("warning: {}/jit-", dump_dir.display()))
                && line.contains("not injected")
        })
        .unwrap_or_else(|| panic!("no warning for a dump in {}: {message}", dump_dir.display()));
    assert!(line.contains(why), "expected {why:?} in {line}");
}

/// The jitted images perf inject wrote, as `perf script --show-mmap-events` names them.
fn jitted_maps(setup: &Setup) -> Vec<String> {
    let output = Command::new("perf")
        .args(["script", "--show-mmap-events", "-F", "pid", "-i"])
        .arg(setup.path("out.data"))
        .env("HOME", setup.path("home"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.contains("/jitted-"))
        .map(str::to_owned)
        .collect()
}

/// The user plants `jitted-<pid>-N.so` links to a root-owned file where perf inject would write
/// its images: perf inject writes only into perfclock's private copies' directory, and the
/// file keeps its bytes.
#[test]
fn images_are_written_only_into_the_private_copies() {
    let Some(setup) = Setup::new("images_are_written_only_into_the_private_copies") else {
        return;
    };
    let victim = setup.path("victim");
    fs::write(&victim, b"root's file\n").unwrap();
    let dir = setup.user_dir("user");
    let output = setup.record_command(&setup.as_nobody("images", &dir, Some(&victim)));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        fs::read(&victim).unwrap(),
        b"root's file\n",
        "written through a link"
    );
    let (dirs, files) = setup.copies();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert_eq!(
        fs::metadata(&dirs[0]).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert!(
        files.iter().any(|f| f
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("jitted-")),
        "no image in the copies: {files:?}"
    );
    let maps = jitted_maps(&setup);
    assert!(!maps.is_empty(), "no jitted image mapped");
    assert!(
        maps.iter()
            .all(|m| m.contains(&dirs[0].display().to_string())),
        "{maps:?}"
    );
}

/// The user swaps the dump for a link to root's own dump (0600, in a 0700 directory) and the
/// time conversion record for a link to a root-only text file: neither is read, nothing of
/// them reaches the copies or the terminal.
#[test]
fn links_to_roots_files_are_not_followed() {
    let Some(setup) = Setup::new("links_to_roots_files_are_not_followed") else {
        return;
    };
    let private = setup.path("private");
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    let secret = private.join("secret.dump");
    fs::write(&secret, b"DTiJ ROOTSECRET").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(private.join("secret.dump.line"), b"TOPSECRETLINE\n").unwrap();
    let dir = setup.user_dir("user");
    let output = setup.record_command(&setup.as_nobody("secret", &dir, Some(&secret)));
    assert_left_out(&setup, &output, &dir, "symbolic link");
    assert!(!stderr(&output).contains("TOPSECRETLINE"));
    for file in setup.copies().1 {
        let bytes = fs::read(&file).unwrap();
        assert!(
            !bytes.windows(10).any(|w| w == b"ROOTSECRET"),
            "{} holds root's secret",
            file.display()
        );
    }
}

/// A FIFO where the dump was: refused at once, never opened for reading (which would block).
#[test]
fn a_fifo_in_place_of_the_dump_does_not_hang() {
    let Some(setup) = Setup::new("a_fifo_in_place_of_the_dump_does_not_hang") else {
        return;
    };
    let dir = setup.user_dir("user");
    let output = setup.record_command(&setup.as_nobody("fifo", &dir, None));
    assert_left_out(&setup, &output, &dir, "a FIFO");
}

/// A dump extended to 3 GiB of holes: refused without reading it; perfclock's memory stays
/// small.
#[test]
fn a_sparse_dump_is_refused_in_bounded_memory() {
    let test = "a_sparse_dump_is_refused_in_bounded_memory";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let dir = setup.user_dir("user");
    let output = setup.record_command(&setup.as_nobody("sparse", &dir, None));
    assert_left_out(&setup, &output, &dir, "mostly holes");
    // SAFETY: a zeroed rusage is a valid value for the kernel to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is writable for the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0);
    // ru_maxrss (KiB) of the largest child the tests waited for: perfclock, perf or python.
    assert!(usage.ru_maxrss < 512 * 1024, "{} KiB", usage.ru_maxrss);
}

/// Two users' processes: one's dump is gone, or its record is garbage; the other's is injected
/// as if nothing happened.
#[test]
fn one_users_bad_dump_leaves_the_others_named() {
    let Some(setup) = Setup::new("one_users_bad_dump_leaves_the_others_named") else {
        return;
    };
    for scenario in ["gone", "garbage"] {
        let bad = setup.user_dir(&format!("bad-{scenario}"));
        let good = setup.user_dir(&format!("good-{scenario}"));
        let script = format!(
            "{} & {}; wait",
            setup.as_nobody("healthy", &good, None).join(" "),
            setup.as_nobody(scenario, &bad, None).join(" ")
        );
        let output = setup.record_command(&["sh".to_owned(), "-c".to_owned(), script.clone()]);
        let why = if scenario == "gone" {
            "No such file"
        } else {
            "not a perfclock time conversion record"
        };
        assert_left_out(&setup, &output, &bad, why);
        assert!(
            !stderr(&output).contains("Z2FyYmFnZQ"),
            "the record was quoted"
        );
        let maps = jitted_maps(&setup);
        assert!(
            !maps.is_empty(),
            "{scenario}: the healthy dump was not injected"
        );
        fs::remove_file(setup.path("out.data")).unwrap();
        for dir in setup.copies().0 {
            fs::remove_dir_all(dir).unwrap();
        }
    }
}

/// A directory named with a terminal's escape sequences and a newline: printed escaped, never
/// raw; the recording is written.
#[test]
fn control_characters_in_a_dump_path_are_escaped() {
    let Some(setup) = Setup::new("control_characters_in_a_dump_path_are_escaped") else {
        return;
    };
    let dir = setup.user_dir("x\x1b]52;c;ZXNj\x07\ny");
    let output = setup.record_command(&setup.as_nobody("gone", &dir, None));
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{message}");
    assert!(
        !message.contains('\x1b'),
        "a raw escape reached the terminal"
    );
    assert!(
        message.contains("x\\x1b]52;c;ZXNj\\x07\\ny/jit-"),
        "{message}"
    );
}

/// A process already running when `record -p` starts: perf names its dump through
/// `/proc/PID/maps`, which writes a newline in the path as `\012`. That path names no file: a
/// warning, and the recording is written.
#[test]
fn a_running_process_with_a_newline_in_its_dump_path() {
    let Some(setup) = Setup::new("a_running_process_with_a_newline_in_its_dump_path") else {
        return;
    };
    let dir = setup.user_dir("new\nline");
    let mut user = Command::new(&setup.as_nobody("linger", &dir, None)[0]);
    user.args(&setup.as_nobody("linger", &dir, None)[1..])
        .stdout(Stdio::piped());
    let mut child = user.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let pid = lines.next().unwrap().unwrap();
    let pid = pid.strip_prefix("mapped ").unwrap().to_owned();
    assert_eq!(lines.next().unwrap().unwrap(), "done");
    let output = finish(
        setup.record(&[
            "-p".to_owned(),
            pid,
            "--duration".to_owned(),
            "2".to_owned(),
        ]),
        Duration::from_secs(120),
    );
    let _ = child.kill();
    let _ = child.wait();
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{message}");
    assert!(setup.path("out.data").is_file());
    assert!(
        message.contains("new\\\\012line/jit-") && message.contains("not injected"),
        "{message}"
    );
}

/// SIGTERM while perf inject runs (a `perf` on PATH whose `inject` never ends): OUT is not
/// written, the raw recording is kept and said so, and the copies' directory is gone.
#[test]
fn a_signal_during_perf_inject_removes_the_copies() {
    let Some(setup) = Setup::new("a_signal_during_perf_inject_removes_the_copies") else {
        return;
    };
    let bin = setup.path("bin");
    fs::create_dir(&bin).unwrap();
    let real_perf = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v perf"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let wrapper = bin.join("perf");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = inject ]; then echo stalled-inject >&2; exec sleep 600; fi\n\
             exec {} \"$@\"\n",
            real_perf.trim()
        ),
    )
    .unwrap();
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
    let dir = setup.user_dir("user");
    let mut args = vec!["--".to_owned()];
    args.extend(setup.as_nobody("healthy", &dir, None));
    let mut command = setup.record(&args);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut child = command
        .env("PATH", path)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while !seen.contains("stalled-inject") {
        assert!(start.elapsed() < Duration::from_secs(120), "{seen}");
        let n = err.read(&mut buf).unwrap();
        assert!(n > 0, "ended before perf inject: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!(
        setup.copies().0.len(),
        1,
        "the copies exist while perf inject runs"
    );
    // SAFETY: our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    err.read_to_string(&mut seen).unwrap();
    println!("{seen}");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGTERM)
    );
    assert!(!setup.path("out.data").exists());
    assert!(setup.copies().0.is_empty(), "the copies' directory stayed");
    assert!(
        seen.contains("it was not written; the recording is kept in")
            && seen.contains("the jitdumps' copies and perf's intermediate files were removed"),
        "{seen}"
    );
    let kept = fs::read_dir(setup.work.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| {
            let dir = e.path();
            dir.is_dir()
                && fs::read_dir(&dir)
                    .map(|mut d| {
                        d.any(|f| f.is_ok_and(|f| f.path().extension().is_some_and(|x| x == "raw")))
                    })
                    .unwrap_or(false)
        });
    assert!(kept, "no raw recording kept");
}
