//! The writer against an independent reader (`linux-perf-data`'s jitdump reader) and against
//! perf's own tolerance rules: complete records parse, a partial tail is ignored.
//!
//! Needs the perfclock clock (perf events). Without it each test skips (perfclock-testutil)
//! unless `PERFCLOCK_REQUIRE_PERF=1` (CI), which turns that into a failure.

use std::collections::HashSet;
use std::io::Cursor;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord};
use perfclock_jitdump::timeconv::TimeConvRecord;
use perfclock_jitdump::{JitDump, JitDumpError};
use perfclock_testutil::pid_namespace::{self, Role};
use perfclock_testutil::{ok_or_skip, skip, Need};

// perf's `tools/perf/util/jitdump.h`, written out here rather than taken from the writer, so the
// test does not agree with the writer by construction.
/// `JITDUMP_FLAGS_ARCH_TIMESTAMP`.
const FLAGS_ARCH_TIMESTAMP: u64 = 1;
/// `sizeof(struct jitheader)`.
const HEADER_SIZE: usize = 40;
/// `JIT_CODE_CLOSE` of `enum jit_record_type`.
const JIT_CODE_CLOSE: u32 = 3;

/// Whether the clock can be had; prints why not.
/// One parsed `JIT_CODE_LOAD`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Load {
    timestamp: u64,
    tid: u32,
    addr: u64,
    index: u64,
    name: Vec<u8>,
    code: Vec<u8>,
}

/// Everything a reader finds in `bytes`: loads, whether a close record came last, and where the
/// last complete record ends.
#[derive(Debug)]
struct Parsed {
    loads: Vec<Load>,
    closed: bool,
    end: u64,
    timestamps: Vec<u64>,
}

fn parse(bytes: &[u8]) -> Result<Parsed, String> {
    parse_of(bytes, std::process::id())
}

/// As [`parse`], for the dump of process `pid`.
fn parse_of(bytes: &[u8], pid: u32) -> Result<Parsed, String> {
    let mut reader = JitDumpReader::new(Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let header = reader.header().clone();
    assert_eq!(header.version, 1);
    assert_eq!(header.total_size as usize, HEADER_SIZE);
    assert_eq!(header.pid, pid);
    assert_eq!(header.flags, FLAGS_ARCH_TIMESTAMP);
    let mut parsed = Parsed {
        loads: Vec::new(),
        closed: false,
        end: HEADER_SIZE as u64,
        timestamps: vec![header.timestamp],
    };
    while let Some(raw) = reader.next_record().map_err(|e| e.to_string())? {
        assert!(!parsed.closed, "a record follows the close record");
        parsed.end = raw.start_offset + u64::from(raw.record_size);
        parsed.timestamps.push(raw.timestamp);
        match raw.parse().map_err(|e| e.to_string())? {
            JitDumpRecord::CodeLoad(load) => {
                assert_eq!(load.pid, pid);
                assert_eq!(load.vma, load.code_addr);
                parsed.loads.push(Load {
                    timestamp: raw.timestamp,
                    tid: load.tid,
                    addr: load.code_addr,
                    index: load.code_index,
                    name: load.function_name.as_slice().into_owned(),
                    code: load.code_bytes.as_slice().into_owned(),
                });
            }
            JitDumpRecord::CodeClose => {
                assert_eq!(raw.record_type.0, JIT_CODE_CLOSE);
                parsed.closed = true;
            }
            other => panic!("unexpected record {other:?}"),
        }
    }
    Ok(parsed)
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    (unsafe { libc::gettid() }) as u32
}

fn read_timeconv(dump: &JitDump) -> TimeConvRecord {
    let text = std::fs::read_to_string(dump.timeconv_path()).unwrap();
    TimeConvRecord::parse(&text).unwrap()
}

/// The sidecar rewritten now, read back, with the conversion the clock published meanwhile. A
/// `code_load` refreshes the sidecar at most once a second, and a calibrating clock republishes
/// often right after it opens, so only a rewrite bracketed by one unchanged conversion can be
/// compared; the rounds where it changed are retried.
fn timeconv_now(dump: &JitDump) -> (TimeConvRecord, perfclock::TimeConversion) {
    for _ in 0..1000 {
        let before = dump.clock().conversion().unwrap();
        dump.write_timeconv().unwrap();
        let record = read_timeconv(dump);
        if dump.clock().conversion().unwrap() == before {
            return (record, before);
        }
    }
    panic!("the clock republished during each of 1000 sidecar rewrites");
}

#[test]
fn round_trip_with_odd_names() {
    if ok_or_skip("round_trip_with_odd_names", Need::Perf, perfclock::init()).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dump = JitDump::create(dir.path()).unwrap();
    let start_ns = perfclock::now_ns();
    let path = dump.path().to_owned();
    assert_eq!(
        path,
        dir.path().join(format!("jit-{}.dump", std::process::id()))
    );
    let names: [&[u8]; 5] = [
        b"plain",
        b"new\nline",
        b"\xff\xfe invalid utf-8",
        b"",
        b"tab\tand spaces",
    ];
    let mut expected = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let code = vec![0x90; i + 1];
        let addr = 0x7f00_0000_0000 + 0x100 * i as u64;
        let index = dump.code_load(name, addr, &code).unwrap();
        assert_eq!(index, i as u64);
        expected.push((name.to_vec(), addr, code));
    }
    let end_ns = perfclock::now_ns();
    let (record, published) = timeconv_now(&dump);
    assert_eq!(record.pid(), std::process::id());
    assert_eq!(record.conversion(), published);
    assert_eq!(
        record.mode(),
        perfclock_jitdump::timeconv::TimeConvMode::from(dump.clock().mode())
    );
    let bytes = std::fs::read(&path).unwrap();
    let before_close = parse(&bytes).unwrap();
    assert!(!before_close.closed);
    assert_eq!(before_close.end, bytes.len() as u64);
    dump.close().unwrap();

    let bytes = std::fs::read(&path).unwrap();
    let parsed = parse(&bytes).unwrap();
    assert!(parsed.closed);
    assert_eq!(parsed.end, bytes.len() as u64);
    let got: Vec<_> = parsed
        .loads
        .iter()
        .map(|l| (l.name.clone(), l.addr, l.code.clone()))
        .collect();
    assert_eq!(got, expected);
    assert!(parsed.loads.iter().all(|l| l.tid == gettid()));
    assert!(parsed.timestamps.windows(2).all(|w| w[0] <= w[1]));
    // The stamps are counter values the clock converts to perf time between the readings
    // taken around the loads (give or take the clock's bound, which refinements may move).
    // Each is converted as the record says it converts exactly there: a paravirt record's
    // perf-form conversion is exact only near the pvclock entry's own timestamp, and its
    // rounded slope drifts with the distance (hundreds of ns once the entry is minutes old).
    let slack = 2 * record.error_bound_ns();
    let at = |cycles: u64| {
        let ns = record.conversion_at(cycles).cycles_to_ns(cycles);
        (ns, record.conversion_error_at_ns(cycles, cycles))
    };
    let (first_ns, first_error) = at(parsed.loads[0].timestamp);
    let last = parsed.loads.last().unwrap().timestamp;
    let (last_ns, last_error) = at(last);
    let slack = slack + first_error.max(last_error);
    assert!(start_ns <= first_ns + slack, "{start_ns} > {first_ns}");
    assert!(last_ns <= end_ns + slack, "{last_ns} > {end_ns}");
    // The sidecar was rewritten at close and still parses.
    let text = std::fs::read_to_string(path.with_extension("dump.timeconv")).unwrap();
    assert!(TimeConvRecord::parse(&text).unwrap().written_counter() >= last);
}

#[test]
fn rejects_nul_in_name_and_empty_code_without_writing() {
    if ok_or_skip(
        "rejects_nul_in_name_and_empty_code_without_writing",
        Need::Perf,
        perfclock::init(),
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dump = JitDump::create(dir.path()).unwrap();
    let size = std::fs::metadata(dump.path()).unwrap().len();
    assert!(matches!(
        dump.code_load(b"a\0b", 0x1000, &[0xc3]),
        Err(JitDumpError::NameContainsNul { position: 1 })
    ));
    assert!(matches!(
        dump.code_load(b"empty", 0x1000, &[]),
        Err(JitDumpError::EmptyCode)
    ));
    assert_eq!(std::fs::metadata(dump.path()).unwrap().len(), size);
    // Rejected loads use no index.
    assert_eq!(dump.code_load(b"ok", 0x1000, &[0xc3]).unwrap(), 0);
}

#[test]
fn many_threads() {
    if ok_or_skip("many_threads", Need::Perf, perfclock::init()).is_none() {
        return;
    }
    const THREADS: usize = 8;
    const LOADS: usize = 1000;
    let dir = tempfile::tempdir().unwrap();
    let dump = Arc::new(JitDump::create(dir.path()).unwrap());
    let path = dump.path().to_owned();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let dump = Arc::clone(&dump);
            std::thread::spawn(move || {
                let tid = gettid();
                for i in 0..LOADS {
                    let name = format!("t{t}_f{i}");
                    // Sizes vary so records straddle buffer and page boundaries.
                    let code = vec![t as u8; 1 + (i * 7 + t) % 300];
                    dump.code_load(name.as_bytes(), (t * LOADS + i) as u64, &code)
                        .unwrap();
                }
                tid
            })
        })
        .collect();
    let tids: Vec<u32> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    Arc::into_inner(dump).unwrap().close().unwrap();

    let bytes = std::fs::read(&path).unwrap();
    let parsed = parse(&bytes).unwrap();
    assert!(parsed.closed);
    assert_eq!(parsed.end, bytes.len() as u64);
    assert_eq!(parsed.loads.len(), THREADS * LOADS);
    // Indices: unique, and increasing in file order.
    assert!(parsed.loads.windows(2).all(|w| w[0].index < w[1].index));
    // Stamps never decrease in file order, header and close record included.
    assert!(parsed.timestamps.windows(2).all(|w| w[0] <= w[1]));
    let mut seen = HashSet::new();
    for load in &parsed.loads {
        let name = String::from_utf8(load.name.clone()).unwrap();
        let (t, i) = name[1..].split_once("_f").unwrap();
        let (t, i): (usize, usize) = (t.parse().unwrap(), i.parse().unwrap());
        assert!(seen.insert((t, i)), "{name} twice");
        assert_eq!(load.addr, (t * LOADS + i) as u64);
        assert_eq!(load.code, vec![t as u8; 1 + (i * 7 + t) % 300]);
        assert_eq!(load.tid, tids[t]);
    }
}

#[test]
fn truncated_at_every_offset_parses_to_a_prefix() {
    if ok_or_skip(
        "truncated_at_every_offset_parses_to_a_prefix",
        Need::Perf,
        perfclock::init(),
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dump = JitDump::create(dir.path()).unwrap();
    let path = dump.path().to_owned();
    for i in 0..20u64 {
        let name = format!("fn_{i}");
        dump.code_load(
            name.as_bytes(),
            0x4000 + i,
            &vec![0xcc; 1 + i as usize * 13],
        )
        .unwrap();
    }
    dump.close().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let full = parse(&bytes).unwrap();
    // Where each complete record ends.
    let mut ends = vec![HEADER_SIZE as u64];
    let mut reader = JitDumpReader::new(Cursor::new(&bytes[..])).unwrap();
    while let Some(raw) = reader.next_record().unwrap() {
        ends.push(raw.start_offset + u64::from(raw.record_size));
    }
    for cut in 0..=bytes.len() {
        match parse(&bytes[..cut]) {
            Ok(parsed) => {
                assert!(cut >= HEADER_SIZE, "a {cut}-byte header parsed");
                let complete = ends.iter().filter(|&&e| e <= cut as u64).count() - 1;
                let loads = complete.min(full.loads.len());
                assert_eq!(parsed.loads, full.loads[..loads], "cut at {cut}");
                assert_eq!(parsed.end, ends[complete], "cut at {cut}");
            }
            Err(error) => assert!(cut < HEADER_SIZE, "cut at {cut}: {error}"),
        }
    }
}

#[test]
fn unwritable_directory_is_a_typed_error() {
    if ok_or_skip(
        "unwritable_directory_is_a_typed_error",
        Need::Perf,
        perfclock::init(),
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A regular file where the directory should be: fails for root too (ENOTDIR).
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"").unwrap();
    for bad in [not_a_dir.clone(), dir.path().join("missing")] {
        match JitDump::create(&bad) {
            Err(JitDumpError::Io { op: "create", .. }) => {}
            other => panic!("{}: {other:?}", bad.display()),
        }
    }
    // And nothing was left behind in the real directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// Mounts a tmpfs of `size` at `dir`; `None` if this machine does not allow it.
struct Tmpfs<'a>(&'a Path);

impl<'a> Tmpfs<'a> {
    fn mount(dir: &'a Path, size: &str) -> Result<Self, String> {
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(Tmpfs(dir))
        } else {
            Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
        }
    }
}

impl Drop for Tmpfs<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

#[test]
fn full_disk_leaves_only_complete_records() {
    if ok_or_skip(
        "full_disk_leaves_only_complete_records",
        Need::Perf,
        perfclock::init(),
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let _mount = match Tmpfs::mount(dir.path(), "64k") {
        Ok(mount) => mount,
        Err(why) => {
            skip("full_disk_leaves_only_complete_records", Need::Mount, why);
            return;
        }
    };
    let dump = JitDump::create(dir.path()).unwrap();
    let path = dump.path().to_owned();
    let code = vec![0x90u8; 5000];
    let mut loaded = 0;
    let error = loop {
        match dump.code_load(b"filler", 0x1000, &code) {
            Ok(_) => loaded += 1,
            Err(error) => break error,
        }
        assert!(loaded < 1000, "a 64 KiB tmpfs took {loaded} 5 KB records");
    };
    match &error {
        JitDumpError::Io {
            op: "write record",
            source,
            ..
        } => assert!(
            source.raw_os_error() == Some(libc::ENOSPC)
                || source.kind() == std::io::ErrorKind::WriteZero,
            "{source:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(loaded > 0);
    // A smaller record may still fit; either way the file holds complete records only.
    let _ = dump.code_load(b"small", 0x2000, &[0xc3]);
    let _ = dump.close();
    let bytes = std::fs::read(&path).unwrap();
    let parsed = parse(&bytes).unwrap();
    assert_eq!(parsed.end, bytes.len() as u64, "a torn record was left");
    assert!(parsed.loads.len() >= loaded);
    println!(
        "full disk: {loaded} loads before {error}; file {} bytes",
        bytes.len()
    );
}

/// Set in the child of `killed_writer_leaves_complete_records`: the directory to write into.
const CHILD_DIR_ENV: &str = "PERFCLOCK_JITDUMP_TEST_CHILD_DIR";

/// Not a test on its own: with [`CHILD_DIR_ENV`] set, loads code into a dump until killed.
#[test]
fn killed_writer_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return;
    };
    let dump = JitDump::create(dir).unwrap();
    // Large records, so a kill has many chances to land inside a write.
    let code = vec![0x90u8; 200_000];
    for i in 0u64.. {
        dump.code_load(format!("f{i}").as_bytes(), i, &code)
            .unwrap();
    }
}

#[test]
fn killed_writer_leaves_complete_records() {
    if ok_or_skip(
        "killed_writer_leaves_complete_records",
        Need::Perf,
        perfclock::init(),
    )
    .is_none()
    {
        return;
    }
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "writer::killed_writer_child", "--nocapture"])
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let path = dir.path().join(format!("jit-{}.dump", child.id()));
        // Kill it once a few records are in, at a moment that varies with the round.
        let waited = Instant::now();
        while std::fs::metadata(&path).map_or(0, |m| m.len()) < 1_000_000 + round * 333_333 {
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "the child wrote nothing"
            );
            assert!(child.try_wait().unwrap().is_none(), "the child exited");
            std::thread::yield_now();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let parsed = parse_of(&bytes, child.id()).unwrap();
        assert!(!parsed.closed);
        assert!(parsed.loads.len() >= 4);
        // All that may follow the complete records is part of one more record.
        let tail = bytes.len() as u64 - parsed.end;
        assert!(
            tail < 200_100,
            "round {round}: {tail} bytes after the last record"
        );
        println!(
            "round {round}: {} complete loads, {tail} bytes of a partial one",
            parsed.loads.len()
        );
    }
}

/// The child test of `same_pid_in_two_pid_namespaces_keeps_the_live_dump`.
const PIDNS_CHILD: &str = "writer::pid_namespace_jit";

/// Not a test on its own: run as pid 1 of a new pid namespace by
/// `same_pid_in_two_pid_namespaces_keeps_the_live_dump`, creates the dump of the shared
/// directory (`jit-1.dump`) and says on stdout what happened.
#[test]
fn pid_namespace_jit() {
    let Some((dir, role)) = pid_namespace::child_role() else {
        return;
    };
    let code = [0xc3u8; 16];
    match role {
        Role::First => {
            let dump = JitDump::create(&dir).unwrap();
            dump.code_load(b"first_before", 0x1000, &code).unwrap();
            pid_namespace::hold_open(dump.path());
            dump.code_load(b"first_after", 0x2000, &code).unwrap();
            dump.close().unwrap();
            pid_namespace::first_done();
        }
        Role::Second => pid_namespace::report_second(
            JitDump::create(&dir).map(|dump| {
                dump.code_load(b"second", 0x3000, &code).unwrap();
                dump.close().unwrap();
            }),
            |error| match error {
                JitDumpError::NameLive(live) => Some(&live.path),
                _ => None,
            },
        ),
    }
}

/// Two containerised JITs, both pid 1 in their own pid namespace, sharing one dump directory:
/// the second must not take the first's live `jit-1.dump` (nor its sidecar) for stale files.
/// Its create fails with the typed error, and the first's loads land in the dump at the name.
/// Once the first has exited, its dump is stale and the next JIT replaces it.
#[test]
fn same_pid_in_two_pid_namespaces_keeps_the_live_dump() {
    use std::os::unix::fs::MetadataExt as _;
    let test = "same_pid_in_two_pid_namespaces_keeps_the_live_dump";
    if ok_or_skip(test, Need::Perf, perfclock::init()).is_none() {
        return;
    }
    if !pid_namespace::unshare_or_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let first = pid_namespace::spawn_first(
        PIDNS_CHILD,
        dir.path(),
        "the first JIT exited before creating its dump",
    );
    let path = first.path.clone();
    assert_eq!(path, dir.path().join("jit-1.dump"));
    let timeconv_path = dir.path().join("jit-1.dump.timeconv");
    let inode = std::fs::metadata(&path).unwrap().ino();
    let timeconv = std::fs::read_to_string(&timeconv_path).unwrap();

    pid_namespace::assert_second_refused(
        PIDNS_CHILD,
        dir.path(),
        &path,
        "the second JIT's create was not refused as NameLive",
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().ino(),
        inode,
        "the first JIT's live dump was replaced"
    );
    assert_eq!(
        std::fs::read_to_string(&timeconv_path).ok().as_ref(),
        Some(&timeconv),
        "the first JIT's sidecar was removed or rewritten"
    );

    first.finish(); // the first JIT loads once more and closes its dump
    let names =
        |parsed: Parsed| -> Vec<Vec<u8>> { parsed.loads.into_iter().map(|l| l.name).collect() };
    let parsed = parse_of(&std::fs::read(&path).unwrap(), 1).unwrap();
    assert!(
        parsed.closed,
        "the first JIT's close record is in the dump at the name"
    );
    assert_eq!(names(parsed), [&b"first_before"[..], b"first_after"]);

    // The first JIT is gone: its dump is stale now, and replaced.
    pid_namespace::assert_second_opens(PIDNS_CHILD, dir.path());
    let parsed = parse_of(&std::fs::read(&path).unwrap(), 1).unwrap();
    assert_eq!(names(parsed), [&b"second"[..]]);
}
