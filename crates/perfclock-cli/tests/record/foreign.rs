//! Other runtimes' own jitdumps under `perfclock record`: Node, Wasmtime, CPython 3.13, a JVM
//! and Node together, named in perf report and samply; plain `perf inject` refuses the same
//! recordings (the controls).

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use perfclock_testutil::{skip, Need};

use super::common::*;

/// The hot JavaScript of `tests/fixtures/hot.js`, run for `ms` milliseconds.
const HOT_JS: &str = include_str!("../fixtures/hot.js");

/// Node's hot functions as `perf report` names V8's code (`JS:*parseExpr /path/hot.js:…`).
const HOT_JS_FUNCTIONS: [&str; 3] = ["parseExpr", "parseTerm", "evalNode"];

/// `perf report`'s share of samples, in percent (no children), whose symbol line `wanted`
/// accepts.
fn report_share(work: &Path, data: &str, wanted: impl Fn(&str) -> bool) -> f64 {
    let report = Command::new("perf")
        .args([
            "report",
            "--stdio",
            "--no-children",
            "--sort",
            "sym",
            "-i",
            data,
        ])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report.stderr));
    text(&report.stdout)
        .lines()
        .filter(|line| wanted(line))
        .filter_map(|line| line.trim().split('%').next()?.trim().parse::<f64>().ok())
        .sum()
}

/// `perf report`'s share of samples (no children) whose symbol names each hot JS function
/// (optimized `JS:*` or interpreted `JS:~`), and their sum. The sum is what the tests judge:
/// TurboFan may inline any of the three into its caller in a given run (then that one has no
/// code of its own and no share), and a recording perf cannot name has none of them.
fn hot_js_shares(work: &Path, data: &str) -> (Vec<f64>, f64) {
    let shares: Vec<f64> = HOT_JS_FUNCTIONS
        .iter()
        .map(|name| {
            report_share(work, data, |line| {
                line.contains(&format!("JS:*{name} ")) || line.contains(&format!("JS:~{name} "))
            })
        })
        .collect();
    let sum = shares.iter().sum();
    (shares, sum)
}

/// The control of another runtime's `CLOCK_MONOTONIC` dump: `perf record -q CALL_GRAPH -o
/// raw.data -- COMMAND` in `work`, then plain `perf inject --jit` refuses it, asking for
/// `perf record -k 1`. raw.data stays for the caller.
fn plain_inject_refuses(work: &Path, call_graph: &[&str], command: &[&str]) {
    let raw = Command::new("perf")
        .args(["record", "-q"])
        .args(call_graph)
        .args(["-o", "raw.data", "--"])
        .args(command)
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert!(raw.status.success(), "{}", text(&raw.stderr));
    let plain = Command::new("perf")
        .args(["inject", "--jit", "-i", "raw.data", "-o", "plain.data"])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert!(
        !plain.status.success() && text(&plain.stderr).contains("perf record -k 1"),
        "plain perf inject accepted a CLOCK_MONOTONIC dump: {}",
        text(&plain.stderr)
    );
}

/// The working directory of a Node test, with hot.js in it, and the lock the JVM tests share;
/// `None` (said through the skip helper) without perf or node.
fn node_work(test: &str) -> Option<(tempfile::TempDir, std::sync::MutexGuard<'static, ()>)> {
    let work = setup(test)?;
    if !runs("node", "--version") {
        skip(test, Need::Tool("node"), "no node on PATH (Debian: nodejs)");
        return None;
    }
    let lock = jvm_lock();
    fs::write(work.path().join("hot.js"), HOT_JS).unwrap();
    Some((work, lock))
}

/// Node (V8's `--perf-prof`, a `CLOCK_MONOTONIC` jitdump in the working directory) under
/// `perfclock record` with a default `perf record`: the hot JS functions are named in perf
/// report and in samply import. The control: the same dump with plain `perf inject --jit` is
/// refused ("-k 1"), and `perfclock inject-time-conv` makes that recording symbolizable too.
#[test]
fn node_functions_are_named_from_a_default_recording() {
    let test = perfclock_testutil::test_name!();
    let Some((work, _lock)) = node_work(test) else {
        return;
    };
    let output = record(
        work.path(),
        &[
            "-o",
            "out.data",
            "--",
            "node",
            "--perf-prof",
            "hot.js",
            "4000",
        ],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 0);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("CLOCK_MONOTONIC timestamps (another writer's)"),
        "{stderr}"
    );
    let (shares, sum) = hot_js_shares(work.path(), "out.data");
    eprintln!("perf report: {HOT_JS_FUNCTIONS:?} {shares:?} of the samples");
    assert!(sum >= 30.0, "{shares:?}\n{stderr}");
    // samply names what perf report names (an inlined function has nothing of its own).
    let reported: Vec<&str> = HOT_JS_FUNCTIONS
        .iter()
        .zip(&shares)
        .filter(|(_, share)| **share > 0.0)
        .map(|(name, _)| *name)
        .collect();
    samply_names(work.path(), "out.data", &reported);

    // The control and inject-time-conv: a plain recording of the same program.
    plain_inject_refuses(
        work.path(),
        &["-g"],
        &["node", "--perf-prof", "hot.js", "3000"],
    );
    let converted = Command::new(perfclock())
        .args(["inject-time-conv", "raw.data", "-o", "conv.data"])
        .current_dir(work.path())
        .output()
        .unwrap();
    assert!(converted.status.success(), "{}", text(&converted.stderr));
    let injected = Command::new("perf")
        .args(["inject", "--jit", "-i", "conv.data", "-o", "jit.data"])
        .current_dir(work.path())
        .env("HOME", work.path().join("home"))
        .output()
        .unwrap();
    assert!(injected.status.success(), "{}", text(&injected.stderr));
    let (shares, sum) = hot_js_shares(work.path(), "jit.data");
    assert!(sum >= 30.0, "{shares:?}");
}

const HOT_WASM_PY: &str = include_str!("../fixtures/hot_wasm.py");

/// Wasmtime (its jitdump profiler through the `wasmtime` Python package: a `CLOCK_MONOTONIC`
/// dump in the working directory) under `perfclock record` with a default `perf record`: the
/// hot WebAssembly function is named in perf report. The control: plain `perf inject --jit`
/// refuses the same kind of recording ("-k 1").
#[test]
fn wasmtime_functions_are_named_from_a_default_recording() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = setup(test) else {
        return;
    };
    let importable = Command::new("python3")
        .args(["-c", "import wasmtime"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !importable {
        skip(
            test,
            Need::Tool("python3"),
            "python3 cannot import wasmtime (python3 -m pip install wasmtime)",
        );
        return;
    }
    let _lock = jvm_lock();
    fs::write(work.path().join("hot_wasm.py"), HOT_WASM_PY).unwrap();
    let output = record(
        work.path(),
        &["-o", "out.data", "--", "python3", "hot_wasm.py", "30"],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 0);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("CLOCK_MONOTONIC timestamps (another writer's)"),
        "{stderr}"
    );
    let share = report_share(work.path(), "out.data", |line| {
        line.trim_end().ends_with("[.] spin_hot")
    });
    eprintln!("perf report: spin_hot {share}% of the samples");
    assert!(share >= 50.0, "spin_hot: {share}%\n{stderr}");

    plain_inject_refuses(work.path(), &["-g"], &["python3", "hot_wasm.py", "5"]);
}

const HOT_PY: &str = include_str!("../fixtures/hot.py");

/// CPython 3.13's perf trampolines (`-X perf_jit`: a `CLOCK_MONOTONIC` dump in /tmp) under
/// `perfclock record --call-graph dwarf`, which CPython needs where it is built without frame
/// pointers: the Python functions are named in perf report's call chains. The samples carry
/// user stacks, so every trampoline goes to perf inject (perf unwinds through them only when it
/// reports). The control: plain `perf inject --jit` refuses the same kind of recording.
#[test]
fn cpython_functions_are_named_from_a_dwarf_recording() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = setup(test) else {
        return;
    };
    // CI names its interpreter (.ci/provision); elsewhere the one on PATH.
    let python = std::env::var("PERFCLOCK_CPYTHON").unwrap_or_else(|_| "python3.13".to_owned());
    if !runs(&python, "--version") {
        skip(
            test,
            Need::Tool("python3.13"),
            format!("{python} does not run (CPython 3.13 or newer writes jitdumps; PERFCLOCK_CPYTHON names one)"),
        );
        return;
    }
    let _lock = jvm_lock();
    fs::write(work.path().join("hot.py"), HOT_PY).unwrap();
    let output = record(
        work.path(),
        &[
            "-o",
            "out.data",
            "--call-graph",
            "dwarf",
            "--",
            &python,
            "-X",
            "perf_jit",
            "hot.py",
            "20",
        ],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 0);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("CLOCK_MONOTONIC timestamps (another writer's)")
            && stderr.contains("the samples carry user stacks"),
        "{stderr}"
    );
    let report = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "-i", "out.data"])
        .current_dir(work.path())
        .env("HOME", work.path().join("home"))
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report.stderr));
    let report = text(&report.stdout);
    for function in ["py::spin_hot:", "py::main:", "py::<module>:"] {
        assert!(
            report.contains(function),
            "perf report does not name {function}\n{stderr}"
        );
    }

    plain_inject_refuses(
        work.path(),
        &["--call-graph", "dwarf"],
        &[python.as_str(), "-X", "perf_jit", "hot.py", "2"],
    );
}

/// A JVM (perfclock's agent, counter timestamps and its time conversion record) and Node (a
/// `CLOCK_MONOTONIC` dump) in one recording: both are named, through the one TIME_CONV.
#[test]
fn a_jvm_and_node_recorded_together_are_both_named() {
    let test = perfclock_testutil::test_name!();
    let Some((work, _lock)) = node_work(test) else {
        return;
    };
    let output = record(
        work.path(),
        &[
            "-o",
            "out.data",
            "--",
            "sh",
            "-c",
            "java -cp . Hot 5000 0 & node --perf-prof hot.js 4000; wait",
        ],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 0);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("record(s) agreed"),
        "the JVM's record: {stderr}"
    );
    assert!(
        stderr.contains("CLOCK_MONOTONIC timestamps (another writer's)"),
        "{stderr}"
    );
    let (shares, sum) = hot_js_shares(work.path(), "out.data");
    assert!(sum >= 10.0, "{shares:?}\n{stderr}");
    let java = report_share(work.path(), "out.data", in_hot_method);
    assert!(
        java >= 20.0,
        "{java}% of the samples in Hot.alpha/Hot.beta\n{stderr}"
    );
}

/// `samply import` of `data` names each of `functions` (in its function table).
fn samply_names(work: &Path, data: &str, functions: &[&str]) {
    if !runs("samply", "--version") {
        skip("samply_names", Need::Tool("samply"), "no samply on PATH");
        return;
    }
    let output = Command::new("samply")
        .args(["import", "-s", "-n", "-o", "names.json", data])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "samply import: {}",
        text(&output.stderr)
    );
    let profile = fs::read_to_string(work.join("names.json")).unwrap();
    for function in functions {
        assert!(
            profile.contains(&format!("\"{function} ")),
            "samply import does not name {function}"
        );
    }
}
