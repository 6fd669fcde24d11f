//! What the report tests share: running tools, the recordings of the JIT workloads (a JVM and
//! Node under `perfclock record`), reading `perf script`, the flame graph, `go tool pprof` and
//! headless Chromium's DOM.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use perfclock_testutil::{skip, Need};

/// A shop's cart in package `org.example.shop`: fixed work of `price`, `tax` and `ship`;
/// arguments: rounds, `price`'s slowdown (1: as fast as the others).
pub(crate) const CART_JAVA: &str = include_str!("fixtures/Cart.java");

/// Three hot JavaScript functions the JIT compiles; argument: milliseconds to run.
pub(crate) const HOT_JS: &str = include_str!("../fixtures/hot.js");

pub(crate) fn perfclock() -> &'static str {
    env!("CARGO_BIN_EXE_perfclock")
}

pub(crate) fn runs(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `program args` in `work` (HOME there: perf's build-id cache), asserting success.
pub(crate) fn run(work: &Path, program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .current_dir(work)
        .env("HOME", work)
        .env("GOCACHE", work.join("go-cache"))
        .env("GOPATH", work.join("go-path"))
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// Whether `go` runs here, for `go tool pprof`; if not, the rest of the test is skipped.
pub(crate) fn go_or_skip(test: &str) -> bool {
    if runs("go", "version") {
        return true;
    }
    skip(test, Need::Tool("go"), "no go on PATH (Debian: golang-go)");
    false
}

/// `go tool pprof ARGS` in `work`, asserting success; its standard output.
pub(crate) fn go_pprof(work: &Path, args: &[&str]) -> String {
    let mut all = vec!["tool", "pprof"];
    all.extend_from_slice(args);
    run(work, "go", &all)
}

/// Writes the C program `source` to `work/<source_file>` and compiles it to `work/<binary>` with
/// frame pointers. -O0: at -O1 a leaf function sets up no frame, and the frame-pointer walk
/// loses its caller.
pub(crate) fn compile_c(work: &Path, source_file: &str, source: &str, binary: &str) {
    fs::write(work.join(source_file), source).unwrap();
    run(
        work,
        "cc",
        &["-O0", "-fno-omit-frame-pointer", "-o", binary, source_file],
    );
}

/// A work directory (HOME there) holding the C program `source`, compiled to `binary`
/// ([`compile_c`]) and recorded there to `<binary>.data` by `perf record -q -g -e cpu-clock
/// OPTIONS -o <binary>.data ./<binary> ARGS`; `None` after saying why not (no perf or cc, or
/// perf cannot record here).
pub(crate) fn record_c_program(
    test: &str,
    source_file: &str,
    source: &str,
    binary: &str,
    options: &[&str],
    args: &[&str],
) -> Option<tempfile::TempDir> {
    if !tools_or_skip(test, &[("perf", "--version"), ("cc", "--version")]) {
        return None;
    }
    let work = tempfile::tempdir().unwrap();
    compile_c(work.path(), source_file, source, binary);
    let (data, program) = (format!("{binary}.data"), format!("./{binary}"));
    let mut record_args = vec!["-q", "-g", "-e", "cpu-clock"];
    record_args.extend_from_slice(options);
    record_args.extend(["-o", &data, &program]);
    record_args.extend_from_slice(args);
    perf_record(test, work.path(), work.path(), &record_args)?;
    Some(work)
}

/// `perf record ARGS` in `work` with HOME at `home` (perf's build-id cache); `None` (skipped)
/// where it fails, as it does where perf cannot record here.
pub(crate) fn perf_record(
    test: &str,
    work: &Path,
    home: &Path,
    args: &[&str],
) -> Option<std::process::Output> {
    let output = Command::new("perf")
        .arg("record")
        .args(args)
        .current_dir(work)
        .env("HOME", home)
        .output()
        .unwrap();
    if !output.status.success() {
        skip(
            test,
            Need::Perf,
            format!("perf record failed: {}", text(&output.stderr)),
        );
        return None;
    }
    Some(output)
}

/// `perf script -F FIELDS -i DATA` in `work`, asserting success; its standard output.
pub(crate) fn perf_script(work: &Path, fields: &str, data: &str) -> String {
    run(work, "perf", &["script", "-F", fields, "-i", data])
}

/// Each sample's stack from `perf script -F comm,tid,time,ip,sym` of a call-graph recording,
/// leaf first.
pub(crate) fn stacks(script: &str) -> Vec<Vec<String>> {
    let mut stacks: Vec<Vec<String>> = Vec::new();
    for line in script.lines().filter(|line| !line.trim().is_empty()) {
        if line.starts_with(char::is_whitespace) {
            // `IP SYMBOL`
            let symbol = line.trim().split_once(' ').map_or("", |(_, symbol)| symbol);
            if let Some(stack) = stacks.last_mut() {
                stack.push(symbol.trim().to_owned());
            }
        } else {
            stacks.push(Vec::new());
        }
    }
    stacks
}

/// `go tool pprof -top`'s flat and cum per function.
pub(crate) fn pprof_top(top: &str) -> BTreeMap<String, (u64, u64)> {
    top.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (flat, cum) = (fields.first()?.parse().ok()?, fields.get(3)?.parse().ok()?);
            Some((fields.get(5..)?.join(" "), (flat, cum)))
        })
        .collect()
}

/// The flame graph's samples per frame name (summed over the frames of that name).
pub(crate) fn flame_counts(flame: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for title in flame.split("<title>").skip(1) {
        let Some((title, _)) = title.split_once("</title>") else {
            continue;
        };
        let Some((name, rest)) = title.rsplit_once(" (") else {
            continue;
        };
        let Some(Ok(count)) = rest
            .split_once(" sample")
            .map(|(count, _)| count.replace(',', "").parse::<u64>())
        else {
            continue;
        };
        *counts.entry(name.to_owned()).or_default() += count;
    }
    counts
}

/// One recording at a time: two JITs at once on a 2-core machine starve each other, and a
/// recording's counts would take the other's load.
pub(crate) fn recording_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The JVM agent beside the test's perfclock, built once with the same profile.
pub(crate) fn build_agent() -> Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = Path::new(perfclock()).parent().unwrap();
            cargo_build(&["-p", "perfclock-jvmti"])?;
            if dir.join("libperfclock_agent.so").is_file() {
                Ok(())
            } else {
                Err(format!("no libperfclock_agent.so in {}", dir.display()))
            }
        })
        .clone()
}

/// `cargo build ARGS` with the profile of the test's perfclock.
pub(crate) fn cargo_build(args: &[&str]) -> Result<(), String> {
    let dir = Path::new(perfclock()).parent().unwrap();
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.arg("build").args(args);
    if dir.file_name().is_some_and(|n| n == "release") {
        cargo.arg("--release");
    }
    let output = cargo.output().map_err(|e| format!("cargo: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("cargo build {args:?}: {}", text(&output.stderr)))
    }
}

/// Whether each of `tools` runs here (`TOOL ARG`); if not, the test is skipped.
pub(crate) fn tools_or_skip(test: &str, tools: &[(&'static str, &str)]) -> bool {
    for &(tool, arg) in tools {
        if !runs(tool, arg) {
            skip(
                test,
                Need::Tool(tool),
                format!("`{tool} {arg}` did not run"),
            );
            return false;
        }
    }
    true
}

/// A work directory with a HOME and the Java workload compiled into `classes`, or `None` after
/// saying why not.
pub(crate) fn java_work(test: &str) -> Option<tempfile::TempDir> {
    if !tools_or_skip(
        test,
        &[
            ("perf", "--version"),
            ("javac", "-version"),
            ("java", "-version"),
        ],
    ) {
        return None;
    }
    build_agent().unwrap();
    let work = tempfile::tempdir().unwrap();
    fs::create_dir(work.path().join("home")).unwrap();
    fs::write(work.path().join("Cart.java"), CART_JAVA).unwrap();
    run(work.path(), "javac", &["-d", "classes", "Cart.java"]);
    Some(work)
}

/// `perfclock record -e cpu-clock -o DATA -- CMD...` in `work`, asserting success; `None`
/// (skipped) where perf cannot record here.
pub(crate) fn record(test: &str, work: &Path, data: &str, command: &[&str]) -> Option<()> {
    let _one = recording_lock();
    let output = Command::new(perfclock())
        .args(["record", "-o", data, "-e", "cpu-clock", "--"])
        .args(command)
        .current_dir(work)
        .env("HOME", work.join("home"))
        .env_remove("JAVA_TOOL_OPTIONS")
        .env_remove("NODE_OPTIONS")
        .output()
        .unwrap();
    if !output.status.success() && text(&output.stderr).contains("perf_event_paranoid") {
        skip(test, Need::Perf, text(&output.stderr));
        return None;
    }
    assert!(
        output.status.success(),
        "perfclock record {command:?}: {}",
        text(&output.stderr)
    );
    Some(())
}

/// `perfclock report ARGS` in `work`, asserting success; its standard error.
pub(crate) fn report(work: &Path, args: &[&str]) -> String {
    let (ok, stderr) = report_status(work, args);
    assert!(ok, "perfclock report {args:?}: {stderr}");
    stderr
}

/// `perfclock report ARGS` in `work` with HOME there, where [`record_c_program`]'s perf kept its
/// build-id cache, asserting success; its standard output.
pub(crate) fn report_at_work(work: &Path, args: &[&str]) -> String {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    run(work, perfclock(), &all)
}

/// `perfclock report ARGS` in `work`: its exit status's success and its standard error.
pub(crate) fn report_status(work: &Path, args: &[&str]) -> (bool, String) {
    let output = Command::new(perfclock())
        .arg("report")
        .args(args)
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    (output.status.success(), text(&output.stderr))
}

/// The DOM headless Chromium has built from `page` once its scripts ran, in a window
/// `width` pixels wide.
pub(crate) fn chromium_dom(work: &Path, page: &Path, width: u32) -> String {
    let output = Command::new("chromium")
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--window-size={width},800"))
        .args(["--virtual-time-budget=5000", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "chromium: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// A frame of a flame graph's SVG as a browser's DOM or the file holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SvgFrame {
    /// Its title's name (without the count and share inferno adds).
    pub(crate) name: String,
    /// Its samples (`fg:w`).
    pub(crate) samples: u64,
    /// Its fill, `(r, g, b)`.
    pub(crate) fill: (u8, u8, u8),
    /// Its rect's top, in pixels from the graph's top.
    pub(crate) y: f64,
    /// Its text, as drawn.
    pub(crate) text: String,
}

/// Every frame of a flame graph's SVG (a `<g>` holding a title, a rect and a text).
pub(crate) fn svg_frames(svg: &str) -> Vec<SvgFrame> {
    let attribute = |tag: &str, name: &str| -> Option<String> {
        let (_, rest) = tag.split_once(&format!(" {name}=\""))?;
        Some(rest.split_once('"')?.0.to_owned())
    };
    let mut frames = Vec::new();
    for group in svg.split("<g><title>").skip(1) {
        let Some((title, rest)) = group.split_once("</title>") else {
            continue;
        };
        let Some((name, _)) = title.rsplit_once(" (") else {
            continue;
        };
        let Some(rect) = rest
            .split_once("<rect")
            .map(|(_, r)| r.split('>').next().unwrap_or(""))
        else {
            continue;
        };
        let text = rest
            .split_once("<text")
            .and_then(|(_, t)| t.split_once('>'))
            .map(|(_, t)| t.split("</text>").next().unwrap_or(""))
            .unwrap_or("");
        let fill = attribute(rect, "fill").and_then(|fill| {
            let rgb = fill.strip_prefix("rgb(")?.strip_suffix(')')?;
            let mut parts = rgb.split(',').map(|c| c.trim().parse::<u8>().ok());
            Some((parts.next()??, parts.next()??, parts.next()??))
        });
        let (Some(samples), Some(fill), Some(y)) = (
            attribute(rect, "fg:w").and_then(|w| w.parse().ok()),
            fill,
            attribute(rect, "y").and_then(|y| y.parse().ok()),
        ) else {
            continue;
        };
        frames.push(SvgFrame {
            name: unescape(name),
            samples,
            fill,
            y,
            text: unescape(text),
        });
    }
    frames
}

/// XML's five escapes undone.
pub(crate) fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}
