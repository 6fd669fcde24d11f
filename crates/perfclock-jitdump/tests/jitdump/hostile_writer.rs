//! The writer where others can write too: a link, a FIFO or another user's file at
//! `jit-<pid>.dump` or its `.timeconv` name is refused with a typed error and left as it was
//! (as root, and as `nobody`); a stale file of our own is replaced; a fork child never writes
//! into its parent's dump, whatever it does with the inherited handle; a second open in one
//! process shares the first instead of truncating it.
//!
//! Needs the perfclock clock (`SKIPPED` without it, fatal under `PERFCLOCK_REQUIRE_PERF=1`) and
//! root for the planted cases (`SKIPPED` on stderr otherwise, fatal under
//! `PERFCLOCK_REQUIRE_ROOT=1`).

use std::io::Cursor;
use std::path::Path;
use std::time::Duration;

use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord};
use perfclock_jitdump::{ForkChild, JitDump, JitDumpError};
use perfclock_testutil::hostile;
use perfclock_testutil::shared_dir;
use perfclock_testutil::{ok_or_skip, Need};

use shared_dir::{Plant, NOBODY};

/// The loads' names in file order and whether a close record ends the file (which must parse
/// to its last byte).
fn read_dump(path: &Path, pid: u32) -> (Vec<String>, usize) {
    let bytes = std::fs::read(path).unwrap();
    let mut reader = JitDumpReader::new(Cursor::new(&bytes[..])).unwrap();
    assert_eq!(reader.header().pid, pid);
    let mut names = Vec::new();
    let mut closes = 0;
    let mut end = 40;
    let mut indices = Vec::new();
    while let Some(raw) = reader.next_record().unwrap() {
        assert_eq!(closes, 0, "a record follows a close record");
        end = raw.start_offset + u64::from(raw.record_size);
        match raw.parse().unwrap() {
            JitDumpRecord::CodeLoad(load) => {
                assert_eq!(load.pid, pid);
                indices.push(load.code_index);
                names.push(String::from_utf8(load.function_name.as_slice().into_owned()).unwrap());
            }
            JitDumpRecord::CodeClose => closes += 1,
            other => panic!("unexpected record {other:?}"),
        }
    }
    assert_eq!(
        end,
        bytes.len() as u64,
        "{} does not parse to its end",
        path.display()
    );
    assert!(
        indices.windows(2).all(|w| w[0] < w[1]),
        "indices not increasing: {indices:?}"
    );
    (names, closes)
}

/// `JitDump::create` in `dir` with `plant` at `name`: refused as `NameTaken`, plant untouched.
fn refused(dir: &Path, name: &str, plant: Plant, writer_uid: u32, foreign_uid: u32) {
    let planted = shared_dir::plant(dir, name, plant, writer_uid, foreign_uid);
    match JitDump::create(dir) {
        Err(error @ JitDumpError::NameTaken(_)) => {
            planted.assert_refused_untouched(&error.to_string());
            println!("refused {plant:?} at {name}: {error}");
        }
        Err(other) => panic!("{plant:?} at {name}: not NameTaken: {other:?}"),
        Ok(dump) => {
            drop(dump);
            panic!("{plant:?} at {name}: created over it");
        }
    }
    // Nothing of ours was left behind: only the plant (and its victim).
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with("victim-of-") && n != name)
        .collect();
    assert!(left.is_empty(), "{plant:?} at {name}: left {left:?}");
}

fn names(pid: u32) -> [String; 2] {
    [
        format!("jit-{pid}.dump"),
        format!("jit-{pid}.dump.timeconv"),
    ]
}

#[test]
fn planted_names_are_refused_and_left_alone() {
    let test = "planted_names_are_refused_and_left_alone";
    if ok_or_skip(test, Need::Perf, perfclock::init()).is_none() || !shared_dir::root_or_skip(test)
    {
        return;
    }
    for name in names(std::process::id()) {
        for plant in Plant::REFUSED {
            let dir = shared_dir::open_dir("jit-plant");
            refused(&dir, &name, plant, 0, NOBODY);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

#[test]
fn own_stale_files_are_replaced() {
    let test = "own_stale_files_are_replaced";
    if ok_or_skip(test, Need::Perf, perfclock::init()).is_none() || !shared_dir::root_or_skip(test)
    {
        return;
    }
    let dir = shared_dir::open_dir("jit-stale");
    let [dump_name, timeconv_name] = names(std::process::id());
    let dump_plant = shared_dir::plant(&dir, &dump_name, Plant::OwnStaleFile, 0, 0);
    let timeconv_plant = shared_dir::plant(&dir, &timeconv_name, Plant::OwnStaleFile, 0, 0);
    let dump = JitDump::create(&dir).unwrap();
    dump.code_load(b"fresh", 0x1000, &[0xc3]).unwrap();
    dump.close().unwrap();
    dump_plant.assert_replaced(0);
    timeconv_plant.assert_replaced(0);
    assert_eq!(
        read_dump(&dir.join(&dump_name), std::process::id()),
        (vec!["fresh".into()], 1)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Child of `as_nobody_planted_names_are_refused`: plants as root, drops to `nobody`, creates.
fn as_nobody_case() {
    hostile::watchdog(60);
    let pid = std::process::id();
    let root_dir = shared_dir::open_dir("jit-nobody");
    let mut dirs = Vec::new();
    for name in names(pid) {
        for plant in Plant::REFUSED {
            let dir = shared_dir::open_subdir(&root_dir, &format!("{name}-{plant:?}"));
            // Planted by root, aimed at nobody's own files.
            let planted = shared_dir::plant(&dir, &name, plant, NOBODY, 0);
            dirs.push((dir, name.clone(), planted));
        }
    }
    let stale_dir = shared_dir::open_subdir(&root_dir, "stale");
    let stale = shared_dir::plant(&stale_dir, &names(pid)[0], Plant::OwnStaleFile, NOBODY, 0);
    shared_dir::become_nobody();
    if let Err(error) = perfclock::init() {
        panic!("no clock as nobody: {error}");
    }
    for (dir, name, planted) in &dirs {
        match JitDump::create(dir) {
            Err(error @ JitDumpError::NameTaken(_)) => {
                planted.assert_refused_untouched(&error.to_string());
            }
            Err(other) => panic!("{:?} at {name}: not NameTaken: {other:?}", planted.plant),
            Ok(_) => panic!("{:?} at {name}: created over it", planted.plant),
        }
    }
    JitDump::create(&stale_dir).unwrap().close().unwrap();
    stale.assert_replaced(NOBODY);
    println!("AS_NOBODY_OK {} refused", dirs.len());
    // Root cleans up (the parent): nobody may not remove root's plants.
}

#[test]
fn as_nobody_planted_names_are_refused() {
    let test = perfclock_testutil::test_path!();
    shared_dir::as_nobody_test(
        &test,
        "jit-nobody",
        "AS_NOBODY_OK 8 refused",
        || ok_or_skip(&test, Need::Perf, perfclock::init()).is_some(),
        as_nobody_case,
    );
}

/// How a fork child treats the inherited handle.
#[derive(Debug, Clone, Copy)]
enum ChildDoes {
    LoadAndClose,
    LoadAndExitWithoutClosing,
    CloseOnly,
}

/// Child of `fork_children_never_write_into_the_parent_dump`.
fn fork_case(dir: &Path) {
    hostile::watchdog(60);
    let dump = JitDump::create(dir).unwrap();
    let parent = std::process::id();
    for i in 0..100 {
        dump.code_load(format!("parent_{i}").as_bytes(), 0x1000 + i, &[0xc3; 37])
            .unwrap();
    }
    let mut dump = Some(dump);
    for does in [
        ChildDoes::LoadAndClose,
        ChildDoes::LoadAndExitWithoutClosing,
        ChildDoes::CloseOnly,
    ] {
        // SAFETY: the child only uses the writer (which allocates: glibc's malloc is reset for
        // a fork child) and leaves with _exit.
        let pid = unsafe { hostile::fork() };
        if pid == 0 {
            let dump = dump.take().unwrap();
            let mut code = 0;
            let mut expect_fork_child = |what: &str, result: Result<(), JitDumpError>| match result
            {
                Err(JitDumpError::ForkChild(ForkChild { opened_by, pid })) => {
                    if opened_by != parent || pid == parent {
                        hostile::raw_print(&format!("{what}: wrong pids\n"));
                        code = 3;
                    }
                }
                other => {
                    hostile::raw_print(&format!("{does:?} {what}: {other:?}\n"));
                    code = 2;
                }
            };
            if !matches!(does, ChildDoes::CloseOnly) {
                for i in 0..50u64 {
                    let name = format!("child_{does:?}_{i}_with_a_longer_name");
                    let result = dump.code_load(name.as_bytes(), 0x9000 + i, &[0x90; 91]);
                    expect_fork_child("code_load", result.map(drop));
                }
            }
            if matches!(does, ChildDoes::LoadAndExitWithoutClosing) {
                // SAFETY: ends the child at once, no destructor or atexit handler.
                unsafe { libc::_exit(code) };
            }
            expect_fork_child("close", dump.close());
            // SAFETY: as above.
            unsafe { libc::_exit(code) };
        }
        hostile::assert_exited_zero(pid, format_args!("{does:?}"));
    }
    let dump = dump.unwrap();
    for i in 100..200 {
        dump.code_load(format!("parent_{i}").as_bytes(), 0x1000 + i, &[0xc3; 37])
            .unwrap();
    }
    let path = dump.path().to_owned();
    dump.close().unwrap();
    let (names, closes) = read_dump(&path, parent);
    let expected: Vec<String> = (0..200).map(|i| format!("parent_{i}")).collect();
    assert_eq!(names, expected, "the parent's dump holds something else");
    assert_eq!(closes, 1);
    let others: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        others.len(),
        2,
        "only the parent's dump and sidecar: {others:?}"
    );
    println!("FORK_OK 200 parent loads, children refused");
}

#[test]
fn fork_children_never_write_into_the_parent_dump() {
    let test_path = perfclock_testutil::test_path!();
    let test = test_path.as_str();
    if hostile::child_case().as_deref() == Some(test) {
        return fork_case(&hostile::child_dir());
    }
    if ok_or_skip(test, Need::Perf, perfclock::init()).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = hostile::run_child_in(test, test, Duration::from_secs(90), dir.path());
    run.expect_success("FORK_OK");
}

#[test]
fn a_second_open_shares_the_first() {
    if ok_or_skip(
        "a_second_open_shares_the_first",
        Need::Perf,
        perfclock::init(),
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let first = JitDump::create(dir.path()).unwrap();
    for i in 0..100 {
        first
            .code_load(format!("first_{i}").as_bytes(), i, &[0xc3; 20])
            .unwrap();
    }
    // The same directory by another name: one dump, not a second file or a truncation.
    let second = JitDump::create(dir.path().join(".")).unwrap();
    assert_eq!(
        std::fs::canonicalize(second.path()).unwrap(),
        std::fs::canonicalize(first.path()).unwrap()
    );
    for i in 0..100 {
        second
            .code_load(format!("second_{i}").as_bytes(), i, &[0xc3; 20])
            .unwrap();
    }
    let path = first.path().to_owned();
    first.close().unwrap();
    // The first close leaves the dump open for the second handle.
    for i in 100..200 {
        second
            .code_load(format!("second_{i}").as_bytes(), i, &[0xc3; 20])
            .unwrap();
    }
    let (before, closes) = read_dump(&path, std::process::id());
    assert_eq!((before.len(), closes), (300, 0));
    second.close().unwrap();
    let (names, closes) = read_dump(&path, std::process::id());
    let mut expected: Vec<String> = (0..100).map(|i| format!("first_{i}")).collect();
    expected.extend((0..200).map(|i| format!("second_{i}")));
    assert_eq!(names, expected);
    assert_eq!(closes, 1);
}
