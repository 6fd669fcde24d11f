//! `perfclock report` of a native program's call-graph recording (`perf record -g` of a C
//! program with frame pointers): the flame graph and the pprof profile, read back by `go tool
//! pprof`, count for each of its functions what `perf script` counts, at the leaf and anywhere
//! in the stack. A program that names its thread and its hot function with line breaks and
//! forged sample headers gets the same totals as perf, with and without call chains. A command
//! of two processes gets perf's totals per process, in the flame graph split by process and in
//! `go tool pprof -traces` by pid and leaf. The JVM's
//! totals are checked with its recording in `tests/record/jvm.rs`, the C JIT's in
//! `tests/e2e/jit-reload/run.sh`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::common::{
    compile_c, flame_counts, go_or_skip, go_pprof, perf_record, perf_script, pprof_top,
    record_c_program, report_at_work, run, stacks, tools_or_skip,
};

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

#[test]
fn a_native_programs_report_counts_what_perf_script_counts() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = record_c_program(test, "spin.c", SPIN_C, "spin", &["-F", "2000"], &[]) else {
        return;
    };
    let work = work.path();
    report_at_work(
        work,
        &["spin.data", "-o", "flame.html", "--pprof", "profile.pb.gz"],
    );

    let script = perf_script(work, "comm,tid,time,ip,sym", "spin.data");
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

    if !go_or_skip(test) {
        return;
    }
    let top = go_pprof(
        work,
        &[
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
    let script = perf_script(work, "tid,time", data);
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
    let tools = [
        ("perf", "--version"),
        ("cc", "--version"),
        ("objcopy", "--version"),
    ];
    if !tools_or_skip(test, &tools) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    compile_c(work, "hostile.c", HOSTILE_NAMES_C, "plain");
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
        let mut record_args = vec!["-q", "-e", "cpu-clock:u", "-F", "2000"];
        if call_graph {
            record_args.push("-g");
        }
        record_args.extend(["-o", data, "./hostile", HOSTILE_COMM]);
        if perf_record(test, work, work, &record_args).is_none() {
            return;
        }
        let (flame, pprof) = (format!("{data}.html"), format!("{data}.pb.gz"));
        report_at_work(
            work,
            &[data, "-o", &flame, "--split", "thread", "--pprof", &pprof],
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

/// A command of two processes (`two_processes.c`: the parent in `parent_work`, its fork in
/// `child_work`).
const TWO_PROCESSES_C: &str = include_str!("fixtures/two_processes.c");

/// `go tool pprof -traces`' samples per `(pid, leaf function)`: each block holds a trace's
/// labels, then its count and leaf on one line and its callers below.
fn pprof_traces(traces: &str) -> BTreeMap<(u32, String), u64> {
    let mut counts = BTreeMap::new();
    let mut pid = None;
    for line in traces.lines() {
        if line.starts_with("-----") {
            pid = None;
            continue;
        }
        let trimmed = line.trim();
        if let Some(value) = trimmed.strip_prefix("pid:") {
            pid = value.trim().parse().ok();
            continue;
        }
        let mut words = trimmed.split_whitespace();
        if let (Some(pid), Some(Ok(count)), Some(leaf)) =
            (pid, words.next().map(str::parse::<u64>), words.next())
        {
            *counts.entry((pid, leaf.to_owned())).or_default() += count;
        }
    }
    counts
}

/// Each process's totals, in the flame graph split by process and in `go tool pprof -traces`
/// (by pid label and leaf), are `perf script`'s.
#[test]
fn per_process_totals_and_traces_are_perf_scripts() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = record_c_program(test, "two.c", TWO_PROCESSES_C, "two", &[], &["400"]) else {
        return;
    };
    let work = work.path();
    report_at_work(
        work,
        &[
            "two.data",
            "--split",
            "process",
            "-o",
            "two.html",
            "--pprof",
            "two.pb.gz",
        ],
    );
    // `PID` header lines, each followed by its stack's frame lines (`\tIP SYMBOL`), leaf first.
    let script = perf_script(work, "pid,ip,sym", "two.data");
    let mut perf: BTreeMap<(u32, String), u64> = BTreeMap::new();
    let mut per_pid: BTreeMap<u32, u64> = BTreeMap::new();
    let mut header: Option<u32> = None;
    for line in script.lines().filter(|line| !line.trim().is_empty()) {
        if line.starts_with('\t') {
            if let Some(pid) = header.take() {
                let leaf = line.trim().split_once(' ').map_or("", |(_, symbol)| symbol);
                *perf.entry((pid, leaf.to_owned())).or_default() += 1;
            }
        } else if let Ok(pid) = line.trim().parse::<u32>() {
            *per_pid.entry(pid).or_default() += 1;
            header = Some(pid);
        }
    }
    println!("perf script per pid: {per_pid:?}");
    assert_eq!(per_pid.len(), 2, "two processes: {per_pid:?}");
    // Each process has its own hot function: most of its samples, none of the other's.
    let hot: Vec<&str> = per_pid
        .iter()
        .filter_map(|(&pid, &total)| {
            ["parent_work", "child_work"].into_iter().find(|function| {
                perf.get(&(pid, (*function).to_owned()))
                    .is_some_and(|&n| n * 2 > total)
            })
        })
        .collect();
    assert!(
        hot.contains(&"parent_work") && hot.contains(&"child_work"),
        "each process's hot function: {perf:?}"
    );

    let flame = flame_counts(&fs::read_to_string(work.join("two.html")).unwrap());
    for (pid, count) in &per_pid {
        assert_eq!(
            flame.get(&format!("two-{pid}")),
            Some(count),
            "process {pid}'s root: {flame:?}"
        );
    }

    if !go_or_skip(test) {
        return;
    }
    let traces = go_pprof(
        work,
        &[
            "-traces",
            "-sample_index=samples",
            "-symbolize=none",
            "two.pb.gz",
        ],
    );
    assert_eq!(
        pprof_traces(&traces),
        perf,
        "pprof -traces against perf script"
    );
}
