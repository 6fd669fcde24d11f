//! Compiles `tests/e2e/jit-reload/jit_reload.c` (the workspace's) against the static library, runs it (3 reloads,
//! no perf), and checks its jitdump with an independent reader (`linux-perf-data`): one load
//! per reload, all at the same address with distinct code, stamps in file order, and each
//! stamp, converted with the `.timeconv` record, between the program's clock readings around
//! the load. The full check under `perf record` is `tests/e2e/jit-reload/run.sh`.
//!
//! Needs the perfclock clock; without it the test skips (perfclock-testutil) unless
//! `PERFCLOCK_REQUIRE_PERF=1` (CI), which makes it fail.

use std::io::Cursor;
use std::path::Path;
use std::process::Command;

use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord};
use perfclock_jitdump::timeconv::TimeConvRecord;

use crate::common::{libraries, CRATE_DIR, NATIVE_LIBS};
use perfclock_testutil::{skip, Need};

const RELOADS: usize = 3;

/// One `load` line of the program's log.
#[derive(Debug)]
struct LogLoad {
    name: String,
    addr: u64,
    size: usize,
    before_ns: u64,
    after_ns: u64,
}

fn parse_log(stdout: &str) -> Vec<LogLoad> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("load "))
        .map(|rest| {
            let f: Vec<&str> = rest.split_whitespace().collect();
            LogLoad {
                name: f[1].to_owned(),
                addr: u64::from_str_radix(f[2], 16).unwrap(),
                size: f[3].parse().unwrap(),
                before_ns: f[4].parse().unwrap(),
                after_ns: f[5].parse().unwrap(),
            }
        })
        .collect()
}

#[test]
#[cfg_attr(
    not(target_arch = "x86_64"),
    ignore = "jit_reload.c hand-assembles x86-64 code"
)]
fn c_jit_reload_writes_a_dump_perf_can_read() {
    if let Err(error) = perfclock::init() {
        skip(
            "c_jit_reload_writes_a_dump_perf_can_read",
            Need::Perf,
            error,
        );
        return;
    }
    let archive = libraries().archive;
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let exe = tmp.join("jit_reload");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let compiled = Command::new(cc)
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(Path::new(CRATE_DIR).join("include"))
        .arg(Path::new(CRATE_DIR).join("../../tests/e2e/jit-reload/jit_reload.c"))
        .arg(&archive)
        .args(NATIVE_LIBS)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run cc");
    assert!(compiled.success(), "compiling jit_reload.c: {compiled}");

    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(&exe)
        .arg(dir.path())
        .args([RELOADS.to_string(), "20".into()])
        .output()
        .expect("run jit_reload");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "jit_reload: {}", output.status);
    assert!(!stdout.contains("not ok - "));
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok - ")).count(), 9);
    let log = parse_log(&stdout);
    assert_eq!(log.len(), RELOADS);

    let dump_path = stdout
        .lines()
        .find_map(|l| l.strip_prefix("dump "))
        .expect("dump line");
    let bytes = std::fs::read(dump_path).unwrap();
    let timeconv = std::fs::read_to_string(format!("{dump_path}.timeconv")).unwrap();
    let timeconv = TimeConvRecord::parse(&timeconv).unwrap();
    let mut reader = JitDumpReader::new(Cursor::new(&bytes[..])).unwrap();
    assert_eq!(reader.header().flags & 1, 1, "JITDUMP_FLAGS_ARCH_TIMESTAMP");
    assert_eq!(reader.header().pid, timeconv.pid());
    let mut loads = Vec::new();
    let mut closed = false;
    let mut last_stamp = reader.header().timestamp;
    while let Some(raw) = reader.next_record().unwrap() {
        assert!(raw.timestamp >= last_stamp, "stamps out of file order");
        last_stamp = raw.timestamp;
        match raw.parse().unwrap() {
            JitDumpRecord::CodeLoad(load) => loads.push((
                raw.timestamp,
                load.code_addr,
                load.code_index,
                load.function_name.as_slice().into_owned(),
                load.code_bytes.as_slice().into_owned(),
            )),
            JitDumpRecord::CodeClose => closed = true,
            other => panic!("unexpected record {other:?}"),
        }
    }
    assert!(closed, "no close record");
    assert_eq!(loads.len(), RELOADS);
    // Slack for the calibrated fit being refined between the reading and the final record.
    let slack = 2 * timeconv.error_bound_ns() + 50_000;
    for (k, ((stamp, addr, index, name, code), logged)) in loads.iter().zip(&log).enumerate() {
        assert_eq!(name, format!("jit_fn_{k}").as_bytes());
        assert_eq!(name, logged.name.as_bytes());
        assert_eq!(*addr, logged.addr);
        assert_eq!(*addr, log[0].addr, "every function at the same address");
        assert_eq!(code.len(), logged.size);
        assert_eq!(*index, k as u64);
        // Converted as the record converts exactly at the stamp (see `conversion_at`).
        let at = timeconv.conversion_at(*stamp).cycles_to_ns(*stamp);
        assert!(
            logged.before_ns <= at + slack && at <= logged.after_ns + slack,
            "{}: stamp at {at} ns, logged {}..{} ns",
            logged.name,
            logged.before_ns,
            logged.after_ns
        );
    }
    let codes: std::collections::HashSet<_> = loads.iter().map(|l| &l.4).collect();
    assert_eq!(codes.len(), RELOADS, "the functions' code is distinct");
}
