//! `perfclock report` of a native program's call-graph recording (`perf record -g` of a C
//! program with frame pointers): the flame graph and the pprof profile, read back by `go tool
//! pprof`, count for each of its functions what `perf script` counts, at the leaf and anywhere
//! in the stack. A program that names its thread and its hot function with line breaks and
//! forged sample headers gets the same totals as perf, with and without call chains. The JVM's
//! totals are checked with its recording in `tests/record/jvm.rs`, the C JIT's in
//! `tests/e2e/jit-reload/run.sh`.

use std::fs;
use std::path::Path;
use std::process::Command;

use perfclock_testutil::{skip, Need};

use crate::common::{flame_counts, pprof_top, run, runs, stacks, text};

/// Three functions with distinct stacks: `hot_inner` under `hot_outer` (the most samples), and
/// `cold_path`, each called from `main`.
const SPIN_C: &str = include_str!("../fixtures/spin.c");

const FUNCTIONS: [&str; 3] = ["hot_inner", "hot_outer", "cold_path"];

/// A program that names its thread `argv[1]` and spends its time in `hostile_leaf`, whose
/// symbol the test renames.
const HOSTILE_NAMES_C: &str = include_str!("../fixtures/hostile_names.c");

/// A thread name as the kernel keeps it (15 bytes at most): a line break, then the start of a
/// sample header.
const HOSTILE_COMM: &str = "a\n1/1 1.00000:";

/// A function name holding a whole sample header of `perf script`'s output and, after a line
/// break, a frame line.
const HOSTILE_FUNCTION: &str =
    "x 1/1 1.000000001: 1000000000 cpu-clock: 0 y\n\tdeadbeef forged (/x)";

/// Whether `perf` and `cc` (and `extra`) run here; if not, the test is skipped.
fn tools_run(test: &str, extra: &[&'static str]) -> bool {
    for &tool in ["perf", "cc"].iter().chain(extra) {
        if !runs(tool, "--version") {
            skip(
                test,
                Need::Tool(tool),
                "not on PATH (Debian: linux-perf, gcc, binutils)",
            );
            return false;
        }
    }
    true
}

#[test]
fn a_native_programs_report_counts_what_perf_script_counts() {
    let test = perfclock_testutil::test_name!();
    if !tools_run(test, &[]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    fs::write(work.join("spin.c"), SPIN_C).unwrap();
    // -O0: at -O1 a leaf function sets up no frame, and the frame-pointer walk loses its caller.
    run(
        work,
        "cc",
        &["-O0", "-fno-omit-frame-pointer", "-o", "spin", "spin.c"],
    );
    let record = Command::new("perf")
        .args(["record", "-q", "-g", "-e", "cpu-clock", "-F", "2000"])
        .args(["-o", "spin.data", "./spin"])
        .current_dir(work)
        .env("HOME", work)
        .output()
        .unwrap();
    if !record.status.success() {
        skip(
            test,
            Need::Perf,
            format!("perf record failed: {}", text(&record.stderr)),
        );
        return;
    }
    run(
        work,
        env!("CARGO_BIN_EXE_perfclock"),
        &[
            "report",
            "spin.data",
            "-o",
            "flame.html",
            "--pprof",
            "profile.pb.gz",
        ],
    );

    let script = run(
        work,
        "perf",
        &["script", "-F", "comm,tid,time,ip,sym", "-i", "spin.data"],
    );
    let stacks = stacks(&script);
    let leaf = |function: &str| {
        stacks
            .iter()
            .filter(|stack| stack.first().is_some_and(|leaf| leaf == function))
            .count() as u64
    };
    let anywhere = |function: &str| {
        stacks
            .iter()
            .filter(|stack| stack.iter().any(|frame| frame == function))
            .count() as u64
    };
    let total = stacks.len() as u64;
    println!(
        "perf script: {total} samples; (leaf, anywhere): {:?}",
        FUNCTIONS.map(|function| (function, leaf(function), anywhere(function)))
    );
    assert!(
        anywhere("hot_inner") * 2 > total,
        "the program's hot function has {} of {total} samples",
        anywhere("hot_inner")
    );

    let flame = flame_counts(&fs::read_to_string(work.join("flame.html")).unwrap());
    assert_eq!(flame.get("all"), Some(&total), "the flame graph's total");
    for function in FUNCTIONS {
        assert_eq!(
            flame.get(function),
            Some(&anywhere(function)),
            "{function} in the flame graph"
        );
    }

    if !runs("go", "version") {
        skip(test, Need::Tool("go"), "no go on PATH (Debian: golang-go)");
        return;
    }
    let top = run(
        work,
        "go",
        &[
            "tool",
            "pprof",
            "-top",
            "-sample_index=samples",
            "-symbolize=none",
            "-nodecount=100000",
            "-nodefraction=0",
            "profile.pb.gz",
        ],
    );
    assert!(top.contains(&format!("of {total} total")), "{top}");
    assert!(top.contains("File: spin\n"), "the main binary: {top}");
    let top = pprof_top(&top);
    for function in FUNCTIONS {
        assert_eq!(
            top.get(function),
            Some(&(leaf(function), anywhere(function))),
            "{function}: pprof's (flat, cum) against perf script's"
        );
    }
}

/// How many samples `perf script` prints: one line each when it prints no name and no stack.
fn perf_sample_count(work: &Path, data: &str) -> u64 {
    let script = run(work, "perf", &["script", "-F", "tid,time", "-i", data]);
    script
        .lines()
        .filter(|line| !line.trim().is_empty())
        .count() as u64
}

/// perf report's count of samples whose leaf is the function whose name starts with `start`
/// (`--no-children`: self samples).
fn perf_self_count(work: &Path, data: &str, start: &str) -> Option<u64> {
    let report = run(
        work,
        "perf",
        &[
            "report",
            "--stdio",
            "--no-children",
            "-g",
            "none",
            "--sort",
            "sym",
            "-F",
            "sample,sym",
            "-i",
            data,
        ],
    );
    report.lines().find_map(|line| {
        let (count, symbol) = line.trim_start().split_once(' ')?;
        let symbol = symbol.trim_start().strip_prefix("[.] ")?;
        symbol.starts_with(start).then(|| count.parse().ok())?
    })
}

#[test]
fn hostile_thread_and_function_names_neither_forge_samples_nor_stop_the_report() {
    let test = perfclock_testutil::test_name!();
    if !tools_run(test, &["objcopy"]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    fs::write(work.join("hostile.c"), HOSTILE_NAMES_C).unwrap();
    run(
        work,
        "cc",
        &["-O0", "-fno-omit-frame-pointer", "-o", "plain", "hostile.c"],
    );
    let rename = format!("hostile_leaf={HOSTILE_FUNCTION}");
    run(
        work,
        "objcopy",
        &["--redefine-sym", &rename, "plain", "hostile"],
    );
    // How the flame graph shows the names: control characters as spaces.
    let shown = |name: &str| name.replace(['\n', '\t'], " ");
    for call_graph in [true, false] {
        let data = if call_graph { "g.data" } else { "flat.data" };
        let mut record = Command::new("perf");
        record.args(["record", "-q", "-e", "cpu-clock:u", "-F", "2000"]);
        if call_graph {
            record.arg("-g");
        }
        let record = record
            .args(["-o", data, "./hostile", HOSTILE_COMM])
            .current_dir(work)
            .env("HOME", work)
            .output()
            .unwrap();
        if !record.status.success() {
            skip(
                test,
                Need::Perf,
                format!("perf record failed: {}", text(&record.stderr)),
            );
            return;
        }
        let (flame, pprof) = (format!("{data}.html"), format!("{data}.pb.gz"));
        run(
            work,
            env!("CARGO_BIN_EXE_perfclock"),
            &[
                "report", data, "-o", &flame, "--split", "thread", "--pprof", &pprof,
            ],
        );
        let written = fs::read(work.join(&pprof)).unwrap();
        assert_eq!(
            written.get(..2),
            Some(&[0x1f, 0x8b][..]),
            "{data}: the pprof profile"
        );
        let total = perf_sample_count(work, data);
        let leaf = perf_self_count(work, data, "x 1/1 1.000000001: ").unwrap();
        println!("{data}: perf script: {total} samples, {leaf} in the hostile function");
        assert!(
            leaf * 2 > total,
            "the hostile function has {leaf} of {total}"
        );

        let counts = flame_counts(&fs::read_to_string(work.join(&flame)).unwrap());
        assert_eq!(
            counts.get("all"),
            Some(&total),
            "{data}: the flame graph's total"
        );
        assert_eq!(
            counts.get(&shown(HOSTILE_FUNCTION)),
            Some(&leaf),
            "{data}: the hostile function, whole: {counts:?}"
        );
        // The thread's roots: its whole name, the line break shown as a space, and before the
        // program names its thread, the program's name.
        let root = |comm: &str| {
            counts
                .iter()
                .filter(|(name, _)| name.starts_with(&format!("{comm}-")))
                .map(|(_, count)| count)
                .sum::<u64>()
        };
        let (renamed, before) = (root(&shown(HOSTILE_COMM)), root("hostile"));
        assert_eq!(
            renamed + before,
            total,
            "{data}: the thread's roots: {counts:?}"
        );
        assert!(
            renamed >= leaf,
            "{data}: the renamed thread's root: {counts:?}"
        );
    }
}
