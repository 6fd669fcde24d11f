//! Hostile conditions for the marker writer: many threads, unwritable and noexec directories, a
//! full disk, and a writer killed mid-write. In every case the file must hold only whole lines
//! that samply 0.13 parses to what was written (it stops at the first line it cannot parse), and
//! errors must be typed.
//!
//! The tmpfs cases need `mount` (root in a namespace that allows it); where it is refused they
//! skip (perfclock-testutil), unless PERFCLOCK_REQUIRE_MOUNT=1 makes them fail.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use perfclock_markers::line::MAX_NAME_BYTES;
use perfclock_markers::{MarkerError, Markers};
use perfclock_testutil::pid_namespace::{self, Role};
use perfclock_testutil::{skip, Need};

use perfclock_testutil::samply::parse_like_samply;

/// Every line of `path`, parsed as samply would; fails on a partial or unparsable line, on
/// invalid UTF-8, and on a line crossing a 4 KiB boundary.
fn read_markers(path: &Path) -> Vec<(u64, u64, String)> {
    let bytes = std::fs::read(path).unwrap();
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "{} ends with a partial line",
        path.display()
    );
    let text = std::str::from_utf8(&bytes).expect("marker file is UTF-8");
    let mut offset = 0;
    let mut out = Vec::new();
    for line in text.split_inclusive('\n') {
        assert_eq!(
            offset / 4096,
            (offset + line.len() - 1) / 4096,
            "line at {offset} crosses a 4 KiB boundary"
        );
        offset += line.len();
        let (s, e, n) = parse_like_samply(line.strip_suffix('\n').unwrap())
            .unwrap_or_else(|| panic!("samply would stop at {line:?}"));
        out.push((s, e, n.to_owned()));
    }
    out
}

fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pcm-hostile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A marker name that shows whether it arrived whole: `m<start> <filler> e<start>`.
fn checked_name(start: u64, filler: usize) -> String {
    format!("m{start} {} e{start}", "x".repeat(filler))
}

fn assert_whole(start: u64, name: &str) {
    let want_head = format!("m{start} ");
    let want_tail = format!(" e{start}");
    assert!(
        name.starts_with(&want_head) && name.ends_with(&want_tail),
        "marker {start} has a cut name: {name:?}"
    );
}

#[test]
fn many_threads_lose_nothing() {
    let dir = fresh_dir("threads");
    let markers = Markers::open(&dir).unwrap();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let markers = markers.clone();
            std::thread::spawn(move || {
                for i in 0..3000u64 {
                    let start = t * 1_000_000 + i;
                    markers
                        .span(&checked_name(start, (i % 97) as usize), start, start + i)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let path = markers.path().to_path_buf();
    markers.close().unwrap();
    let mut got = read_markers(&path);
    assert_eq!(got.len(), 8 * 3000);
    got.sort();
    for (t, chunk) in got.chunks(3000).enumerate() {
        for (i, (s, e, name)) in chunk.iter().enumerate() {
            let start = t as u64 * 1_000_000 + i as u64;
            assert_eq!((*s, *e), (start, start + i as u64));
            assert_whole(start, name);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hostile_names_stay_one_line_each() {
    let dir = fresh_dir("names");
    let markers = Markers::open(&dir).unwrap();
    markers.span("a\nb\r\nc", 1, 2).unwrap();
    markers.instant("tab\there\0nul", 3).unwrap();
    markers.span(&"long".repeat(1000), 4, 5).unwrap();
    assert!(matches!(
        markers.span("", 6, 6),
        Err(MarkerError::EmptyName)
    ));
    assert!(matches!(
        markers.span("backwards", 8, 7),
        Err(MarkerError::EndBeforeStart {
            start_ns: 8,
            end_ns: 7
        })
    ));
    let path = markers.path().to_path_buf();
    markers.close().unwrap();
    let got = read_markers(&path);
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], (1, 2, "a\u{fffd}b\u{fffd}\u{fffd}c".to_owned()));
    assert_eq!(got[1], (3, 3, "tab here\u{fffd}nul".to_owned()));
    assert_eq!(got[2].2.len(), MAX_NAME_BYTES);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unwritable_directories_are_typed_errors() {
    let missing = std::env::temp_dir().join("pcm-hostile-does-not-exist/deeper");
    let e = Markers::open(&missing).unwrap_err();
    assert!(matches!(e, MarkerError::Create { .. }), "{e:?}");
    assert!(e.to_string().contains("writable directory"), "{e}");
    // Not creatable even for root.
    let e = Markers::open("/proc").unwrap_err();
    assert!(matches!(e, MarkerError::Create { .. }), "{e:?}");
    // A regular file where a directory is expected.
    let dir = fresh_dir("notdir");
    let file = dir.join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let e = Markers::open(&file).unwrap_err();
    assert!(matches!(e, MarkerError::Create { .. }), "{e:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tmpfs mounted for one test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(tag: &str, options: &str) -> Option<Tmpfs> {
        let dir = fresh_dir(tag);
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(&dir)
            .status();
        match status {
            Ok(s) if s.success() => Some(Tmpfs(dir)),
            other => {
                let _ = std::fs::remove_dir_all(&dir);
                skip(tag, Need::Mount, format_args!("mount -t tmpfs: {other:?}"));
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: the writer keeps its marker file open and mapped until the process exits.
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn noexec_directory_is_a_typed_error() {
    let Some(fs) = Tmpfs::mount("noexec", "size=64k,noexec") else {
        return;
    };
    let e = Markers::open(&fs.0).unwrap_err();
    assert!(matches!(e, MarkerError::Map { .. }), "{e:?}");
    assert!(e.to_string().contains("noexec"), "{e}");
}

#[test]
fn full_disk_leaves_whole_lines_and_typed_errors() {
    // 5 pages of tmpfs: the marker file fills it quickly.
    let Some(fs) = Tmpfs::mount("full", "size=20k") else {
        return;
    };
    let markers = Markers::open(&fs.0).unwrap();
    let path = markers.path().to_path_buf();
    let mut error = None;
    let mut start = 0u64;
    while error.is_none() && start < 10_000 {
        start += 1;
        if let Err(e) = markers.span(&checked_name(start, 200), start, start + 1) {
            error = Some(e);
        }
    }
    let Some(MarkerError::Write {
        lost, ref source, ..
    }) = error
    else {
        panic!("expected a write error on a full tmpfs, got {error:?}");
    };
    assert!(lost > 0);
    assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "{source}");
    assert!(error.as_ref().unwrap().to_string().contains("free space"));
    assert!(markers.lost() >= lost);
    let before = read_markers(&path);
    assert!(!before.is_empty());
    for (s, _, name) in &before {
        assert_whole(*s, name);
    }
    // Later markers fail or land whole; the file stays readable throughout.
    for _ in 0..50 {
        start += 1;
        let _ = markers.span(&checked_name(start, 200), start, start + 1);
        let _ = markers.flush();
        for (s, _, name) in read_markers(&path) {
            assert_whole(s, &name);
        }
    }
    drop(markers);
    println!(
        "full disk: {} markers kept, error: {}",
        before.len(),
        error.as_ref().unwrap()
    );
}

/// Re-executed as a child by `killed_mid_write_leaves_only_whole_lines`: writes long markers as
/// fast as it can until killed. Does nothing when run as an ordinary test.
#[test]
fn child_writer_until_killed() {
    let Some(dir) = std::env::var_os("PCM_HOSTILE_CHILD_DIR") else {
        return;
    };
    let markers = Markers::open(dir).unwrap();
    for start in 1u64.. {
        // Long names: each write spans several pages, so a kill can land between pages.
        markers
            .span(
                &checked_name(start, 700 + (start % 300) as usize),
                start,
                start,
            )
            .unwrap();
        if start % 64 == 0 {
            markers.flush().unwrap();
        }
    }
}

#[test]
fn killed_mid_write_leaves_only_whole_lines() {
    let exe = std::env::current_exe().unwrap();
    let mut total = 0;
    for round in 0..12u64 {
        let dir = fresh_dir(&format!("kill{round}"));
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "hostile::child_writer_until_killed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PCM_HOSTILE_CHILD_DIR", &dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // The kill must land after the file exists (a loaded machine can take longer than the
        // delay below to start the child); not a timing assertion: the delay only varies where
        // the kill lands.
        let started = std::time::Instant::now();
        while std::fs::read_dir(&dir).unwrap().next().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the child created no marker file in 60 s"
            );
            assert!(child.try_wait().unwrap().is_none(), "the child exited");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(40 + 17 * round));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("marker-")
            })
            .expect("the child created its marker file");
        let got = read_markers(&file);
        for (s, _, name) in &got {
            assert_whole(*s, name);
        }
        total += got.len();
        std::fs::remove_dir_all(&dir).unwrap();
    }
    println!("killed 12 writers: {total} markers read back, every one whole");
    assert!(total > 0, "the children never got to write");
}

/// Re-executed as a child by `exit_flushes_and_fork_children_write_nothing`: buffers markers,
/// forks a child that writes to the inherited writer and exits through `exit(3)`, then exits
/// itself through `exit(3)` without closing. Does nothing when run as an ordinary test.
#[test]
fn child_buffers_forks_and_exits() {
    let Some(dir) = std::env::var_os("PCM_HOSTILE_EXIT_DIR") else {
        return;
    };
    let markers = Markers::open(dir).unwrap();
    for start in 1..=100u64 {
        markers
            .span(&checked_name(start, 10), start, start)
            .unwrap();
    }
    // SAFETY: the child only calls the writer (which takes no lock once it sees it is in a
    // child) and exit(3).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let _ = markers.span(&checked_name(1_000_000, 10), 1_000_000, 1_000_000);
        let _ = markers.flush();
        // SAFETY: exit(3) runs the atexit handlers, which must not write the parent's markers.
        unsafe { libc::exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert_eq!(markers.lost(), 0, "the parent's writer lost nothing");
    std::process::exit(0); // no close: the atexit flush must write the 100 markers
}

#[test]
fn exit_flushes_and_fork_children_write_nothing() {
    let dir = fresh_dir("exit");
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hostile::child_buffers_forks_and_exits",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PCM_HOSTILE_EXIT_DIR", &dir)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status:?}");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "only the parent's marker file: {files:?}");
    let got = read_markers(&files[0]);
    let starts: Vec<u64> = got.iter().map(|(s, _, _)| *s).collect();
    assert_eq!(
        starts,
        (1..=100).collect::<Vec<u64>>(),
        "each marker exactly once"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn one_file_per_directory_however_it_is_named() {
    let dir = fresh_dir("aliases");
    let first = Markers::open(&dir).unwrap();
    first.span("first", 1, 2).unwrap();
    first.flush().unwrap();
    // The same directory by another name must share the file, not truncate it.
    let second = Markers::open(dir.join(".")).unwrap();
    assert_eq!(first.path(), second.path());
    second.span("second", 3, 4).unwrap();
    second.close().unwrap();
    let path = first.path().to_path_buf();
    first.close().unwrap();
    let names: Vec<String> = read_markers(&path).into_iter().map(|(_, _, n)| n).collect();
    assert_eq!(names, ["first", "second"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The child test of `same_pid_in_two_pid_namespaces_keeps_the_live_file`.
const PIDNS_CHILD: &str = "hostile::pid_namespace_writer";

/// Re-executed as pid 1 of a new pid namespace by
/// `same_pid_in_two_pid_namespaces_keeps_the_live_file`: opens the markers of the shared
/// directory (`marker-1.txt`) and says on stdout what happened. Does nothing when run as an
/// ordinary test.
#[test]
fn pid_namespace_writer() {
    let Some((dir, role)) = pid_namespace::child_role() else {
        return;
    };
    match role {
        Role::First => {
            let markers = Markers::open(&dir).unwrap();
            markers.span("first-before", 1, 2).unwrap();
            markers.flush().unwrap();
            pid_namespace::hold_open(markers.path());
            markers.span("first-after", 3, 4).unwrap();
            markers.close().unwrap();
            pid_namespace::first_done();
        }
        Role::Second => pid_namespace::report_second(
            Markers::open(&dir).map(|markers| {
                markers.span("second", 5, 6).unwrap();
                markers.close().unwrap();
            }),
            |error| match error {
                MarkerError::NameLive(live) => Some(&live.path),
                _ => None,
            },
        ),
    }
}

/// Two containerised writers, both pid 1 in their own pid namespace, sharing one directory: the
/// second must not take the first's live `marker-1.txt` for a stale file. Its open fails with
/// the typed error, and the first keeps writing into the file at the name. Once the first has
/// exited, its file is stale and the next writer replaces it.
#[test]
fn same_pid_in_two_pid_namespaces_keeps_the_live_file() {
    use std::os::unix::fs::MetadataExt as _;
    let test = "same_pid_in_two_pid_namespaces_keeps_the_live_file";
    if !pid_namespace::unshare_or_skip(test) {
        return;
    }
    let dir = fresh_dir("pidns");
    let first = pid_namespace::spawn_first(
        PIDNS_CHILD,
        &dir,
        "the first writer exited before opening its markers",
    );
    let path = first.path.clone();
    assert_eq!(path, dir.canonicalize().unwrap().join("marker-1.txt"));
    let inode = std::fs::metadata(&path).unwrap().ino();

    pid_namespace::assert_second_refused(
        PIDNS_CHILD,
        &dir,
        &path,
        "the second writer's open was not refused as NameLive",
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().ino(),
        inode,
        "the first writer's live file was replaced"
    );

    first.finish(); // the first writer writes once more and exits
    let names: Vec<String> = read_markers(&path).into_iter().map(|(_, _, n)| n).collect();
    assert_eq!(names, ["first-before", "first-after"], "the first's file");

    // The first writer is gone: its file is stale now, and replaced.
    pid_namespace::assert_second_opens(PIDNS_CHILD, &dir);
    let names: Vec<String> = read_markers(&path).into_iter().map(|(_, _, n)| n).collect();
    assert_eq!(names, ["second"], "the stale file replaced");
    std::fs::remove_dir_all(&dir).unwrap();
}
