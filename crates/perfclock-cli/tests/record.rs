//! `perfclock record` against the real perf and a real JVM: a Java workload with two hot
//! methods, recorded with one command, read by `perf script` (and `samply import`); the refused
//! perf options, a command that fails, a missing perf and SIGINT mid-run.
//!
//! Needs perf, a JDK (java and javac on PATH) and permission to profile (root, or
//! perf_event_paranoid <= 2 for one's own processes). Without them the tests say `SKIPPED`
//! (fatal under PERFCLOCK_REQUIRE_PERF=1 / PERFCLOCK_REQUIRE_TOOLS=1).

use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use perfclock_testutil::perf_script::tod_ns;
use perfclock_testutil::{is_root, skip, Need};

/// Two hot methods on the main thread; arguments: milliseconds to run, exit status.
const HOT_JAVA: &str = include_str!("fixtures/Hot.java");

/// Two phases, each running one hot method, stamped with `Instant.now()` (CLOCK_REALTIME) at
/// their edges; argument: milliseconds per phase. Prints `phases A0 A1 B0 B1` (ns since the
/// epoch) at the end.
const PHASES_JAVA: &str = include_str!("fixtures/Phases.java");

/// How far a sample's wall-clock time may lie outside the phase the workload stamped.
const PHASE_TOLERANCE_NS: u64 = 1_000_000;
/// The control's error in the wall clock: far more than the tolerance, and long enough that a
/// phase's thread has samples in it at its end even on a loaded machine.
const CONTROL_SHIFT_NS: u64 = 20_000_000;

/// The share of the main thread's samples that must fall in Hot.alpha or Hot.beta.
const MIN_HOT_SHARE: f64 = 0.80;

fn perfclock() -> &'static str {
    env!("CARGO_BIN_EXE_perfclock")
}

/// One JVM recording at a time: two at once on a 2-core machine starve each other's JIT.
fn jvm_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The agent beside the test's perfclock, built once with the same profile.
fn build_agent() -> Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = Path::new(perfclock()).parent().unwrap();
            let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            cargo.args(["build", "-p", "perfclock-jvmti"]);
            if dir.file_name().is_some_and(|n| n == "release") {
                cargo.arg("--release");
            }
            let output = cargo.output().map_err(|e| format!("cargo: {e}"))?;
            if !output.status.success() {
                return Err(format!(
                    "cargo build -p perfclock-jvmti: {}",
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            if dir.join("libperfclock_agent.so").is_file() {
                Ok(())
            } else {
                Err(format!("no libperfclock_agent.so in {}", dir.display()))
            }
        })
        .clone()
}

fn runs(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A work directory with Hot.class and a HOME, or `None` after saying why not.
fn setup(test: &str) -> Option<tempfile::TempDir> {
    if !runs("perf", "--version") {
        skip(test, Need::Tool("perf"), "`perf --version` did not run");
        return None;
    }
    if !runs("javac", "-version") || !runs("java", "-version") {
        skip(test, Need::Tool("javac"), "no java and javac on PATH");
        return None;
    }
    build_agent().unwrap();
    let work = tempfile::tempdir().unwrap();
    fs::create_dir(work.path().join("home")).unwrap();
    fs::write(work.path().join("Hot.java"), HOT_JAVA).unwrap();
    fs::write(work.path().join("Phases.java"), PHASES_JAVA).unwrap();
    let javac = Command::new("javac")
        .arg("-d")
        .arg(work.path())
        .arg(work.path().join("Hot.java"))
        .arg(work.path().join("Phases.java"))
        .output()
        .unwrap();
    assert!(
        javac.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&javac.stderr)
    );
    Some(work)
}

/// `perfclock record ARGS` in `work`, with HOME there (perf inject's build-id cache).
fn record(work: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(perfclock());
    command
        .arg("record")
        .args(args)
        .current_dir(work)
        .env("HOME", work.join("home"))
        .env_remove("JAVA_TOOL_OPTIONS");
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether a `perf script` sample line's symbol is a hot method: demangled (`Hot.alpha(long)`)
/// or, where the agent named the inlining chain, as the JVM spells it
/// (`LHot;alpha(J)J <- LHot;main(...)`, which perf leaves as it is).
fn in_hot_method(line: &str) -> bool {
    ["Hot.alpha(", "Hot.beta(", "Hot;alpha(", "Hot;beta("]
        .iter()
        .any(|name| line.contains(name))
}

/// (samples of the workload's main thread, of which in Hot.alpha or Hot.beta), from `perf
/// script`. The main thread is the `java` thread with the most samples (it runs the loop).
fn hot_share(work: &Path, data: &str) -> (usize, usize) {
    let output = Command::new("perf")
        .args(["script", "-G", "-F", "comm,tid,ip,sym", "-i", data])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "perf script: {}",
        text(&output.stderr)
    );
    let script = text(&output.stdout);
    let mut threads: std::collections::HashMap<&str, (usize, usize)> = Default::default();
    for line in script.lines() {
        let mut fields = line.split_whitespace();
        if let (Some("java"), Some(tid)) = (fields.next(), fields.next()) {
            let counts = threads.entry(tid).or_default();
            counts.0 += 1;
            counts.1 += usize::from(in_hot_method(line));
        }
    }
    threads.into_values().max().unwrap_or_default()
}

fn assert_hot(work: &Path, data: &str, what: &str) {
    let (samples, hot) = hot_share(work, data);
    let share = hot as f64 / samples.max(1) as f64;
    eprintln!("{what}: {hot} of {samples} main-thread samples in Hot.alpha/Hot.beta ({share:.3})");
    assert!(
        samples >= 100,
        "{what}: only {samples} samples of the java thread"
    );
    assert!(
        share >= MIN_HOT_SHARE,
        "{what}: {hot}/{samples} in the hot methods"
    );
}

fn assert_ok_output(work: &Path, output: &Output, code: i32) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    assert!(work.join("out.data").is_file(), "{stderr}");
    assert!(!work.join("out.data.raw").exists(), "raw kept: {stderr}");
    assert!(stderr.contains("perf report -i out.data"), "{stderr}");
    assert!(
        stderr.contains("added PERF_RECORD_TIME_CONV")
            || stderr.contains("holds a PERF_RECORD_TIME_CONV"),
        "{stderr}"
    );
}

#[test]
fn one_command_names_the_hot_java_methods() {
    let Some(work) = setup("one_command_names_the_hot_java_methods") else {
        return;
    };
    let _lock = jvm_lock();
    let output = record(
        work.path(),
        &[
            "-o", "out.data", "--", "java", "-cp", ".", "Hot", "6000", "0",
        ],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 0);
    assert_hot(work.path(), "out.data", "perf script");
    samply_names_the_hot_methods(work.path());
    report_totals_are_perf_scripts(work.path());
}

/// `perfclock report` of the recording: the flame graph's total and the pprof profile's
/// totals (in `go tool pprof`) are `perf script`'s sample count, and each hot method's flat
/// count in pprof is the number of samples `perf script` shows it at the leaf of; the flame
/// graph, opened in headless Chromium offline, names the hot method.
fn report_totals_are_perf_scripts(work: &Path) {
    let test = perfclock_testutil::test_name!();
    let report = Command::new(perfclock())
        .args([
            "report",
            "out.data",
            "-o",
            "flame.html",
            "--pprof",
            "profile.pb.gz",
        ])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report.stderr));
    // perf script's samples and each one's leaf symbol.
    let script = Command::new("perf")
        .args([
            "script",
            "-F",
            "comm,tid,time,ip,sym",
            "--ns",
            "-i",
            "out.data",
        ])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    let script = text(&script.stdout);
    let mut leaves = Vec::new();
    let mut at_leaf = false;
    for line in script.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            at_leaf = true;
            leaves.push(String::new());
        } else if at_leaf {
            at_leaf = false;
            // `IP SYMBOL`: the symbol after the address.
            let symbol = line.trim().split_once(' ').map_or("", |(_, symbol)| symbol);
            *leaves.last_mut().unwrap() = symbol.trim().to_owned();
        }
    }
    let total = leaves.len();
    let leaf_count = |method: &str| {
        leaves
            .iter()
            .filter(|leaf| leaf.starts_with(method))
            .count()
    };
    let flame = fs::read_to_string(work.join("flame.html")).unwrap();
    let all = format!("<title>all ({} samples, 100%)", thousands(total));
    assert!(
        flame.contains(&all),
        "the flame graph's total is not {total}"
    );
    if !runs("go", "version") {
        skip(test, Need::Tool("go"), "no go on PATH (Debian: golang-go)");
    } else {
        let gohome = work.join("gohome");
        let top = Command::new("go")
            .args([
                "tool",
                "pprof",
                "-top",
                "-sample_index=samples",
                "-symbolize=none",
                "-nodecount=50",
                "profile.pb.gz",
            ])
            .current_dir(work)
            .env("HOME", &gohome)
            .env("GOCACHE", gohome.join("cache"))
            .env("GOPATH", gohome.join("path"))
            .env("GOTOOLCHAIN", "local")
            .output()
            .unwrap();
        let top = text(&top.stdout);
        assert!(top.contains(&format!("Total samples = {total}")), "{top}");
        for method in ["Hot.alpha(long)", "Hot.beta(long)"] {
            let expected = leaf_count(method);
            let flat: u64 = top
                .lines()
                .filter(|line| line.contains(method))
                .filter_map(|line| line.split_whitespace().next()?.parse::<u64>().ok())
                .sum();
            assert_eq!(
                flat as usize, expected,
                "{method}: pprof {flat}, perf script {expected}\n{top}"
            );
        }
        // libjvm's mapping carries the build id its ELF note holds (read by readelf, not perf).
        let raw = Command::new("go")
            .args(["tool", "pprof", "-raw", "profile.pb.gz"])
            .current_dir(work)
            .env("HOME", &gohome)
            .env("GOCACHE", gohome.join("cache"))
            .env("GOPATH", gohome.join("path"))
            .env("GOTOOLCHAIN", "local")
            .output()
            .unwrap();
        let raw = text(&raw.stdout);
        let libjvm = raw
            .lines()
            .skip_while(|line| *line != "Mappings")
            .find(|line| line.contains("/libjvm.so "))
            .unwrap_or_else(|| panic!("no libjvm mapping\n{raw}"));
        let path = libjvm.split_whitespace().nth(2).unwrap();
        let notes = Command::new("readelf").args(["-n", path]).output().unwrap();
        let note = text(&notes.stdout);
        let build_id = note
            .lines()
            .find_map(|line| line.trim().strip_prefix("Build ID: "))
            .unwrap_or_else(|| panic!("{path} has no build id note\n{note}"));
        assert!(
            libjvm.split_whitespace().nth(3) == Some(build_id),
            "libjvm's mapping {libjvm:?}, its ELF note's build id {build_id}"
        );
    }
    if !runs("chromium", "--version") {
        skip(
            test,
            Need::Tool("chromium"),
            "no chromium on PATH (Debian: chromium)",
        );
        return;
    }
    // The page's script ran offline: a search from the address (as a shared link carries it)
    // highlighted the hot method's frames and says what share they hold.
    let url = format!("file://{}?s=Hot.alpha", work.join("flame.html").display());
    // A window the whole graph fits in: headless Chromium's screenshot does not follow the
    // page's scroll to the graph's root.
    let height: u32 = flame
        .split_once("<svg ")
        .and_then(|(_, svg)| {
            svg.split_once("height=\"")?
                .1
                .split_once('"')?
                .0
                .parse()
                .ok()
        })
        .expect("the page's SVG has a height");
    let window = format!("--window-size=1200,{}", height + 16);
    let chromium = |args: &[&str]| {
        Command::new("chromium")
            .args(["--headless=new", "--no-sandbox", "--disable-gpu"])
            .args(["--hide-scrollbars", &window])
            .arg("--virtual-time-budget=5000")
            .args(args)
            .arg(&url)
            .current_dir(work)
            .env("HOME", work.join("home"))
            .output()
            .unwrap()
    };
    let dom = text(&chromium(&["--dump-dom"]).stdout);
    assert!(
        dom.contains("Hot.alpha(long)"),
        "the browser's DOM lacks the hot method"
    );
    // The text element's, not the script's own "Matched: " string.
    let matched = dom
        .split_once("id=\"matched\"")
        .and_then(|(_, element)| element.split_once("Matched: "))
        .and_then(|(_, rest)| rest.split('%').next()?.parse::<f64>().ok());
    assert!(
        matched.is_some_and(|share| share > 0.0),
        "the page's search did not run or matched nothing: {matched:?}"
    );
    // What a user sees: the screenshot shows JIT frames in their green and the searched
    // method's frames in the search's magenta. A 100-pixel-wide frame is 1,600 pixels; a blank
    // page, or one whose script did not run, has none of either.
    let shot = chromium(&["--screenshot=flame.png"]);
    assert!(shot.status.success(), "{}", text(&shot.stderr));
    let (green, magenta) = frame_pixels(&work.join("flame.png"));
    assert!(
        green >= 1_000 && magenta >= 1_000,
        "the screenshot has {green} JIT-green and {magenta} search-magenta pixels: blank, or not \
         the flame graph with its search done"
    );
}

/// How many pixels of an RGB(A) PNG are in the green inferno's java palette gives JIT frames
/// (`_[j]`: red and blue 50-110, green 200-255), and how many in the magenta its search paints
/// matched frames (230, 0, 230); the page's background is grey to yellow.
fn frame_pixels(png: &Path) -> (usize, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    assert!(
        info.bit_depth == png::BitDepth::Eight && channels >= 3,
        "{:?}",
        (info.color_type, info.bit_depth)
    );
    let pixels = &pixels[..info.buffer_size()];
    let pixels = || pixels.chunks_exact(channels);
    let green = pixels()
        .filter(|p| p[1] >= 200 && (50..=110).contains(&p[0]) && (50..=110).contains(&p[2]))
        .count();
    let magenta = pixels().filter(|p| p[..3] == [230, 0, 230]).count();
    (green, magenta)
}

/// `n` as inferno prints counts: with `,` between thousands.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// `samply import` of the output: the main thread's leaf frames, symbolized from the
/// `jitted-*.so` that `perf inject --jit` wrote, which samply's frames point at (samply
/// symbolizes lazily, in its server; `nm` reads the symbol it would show: `LHot;alpha(J)J`).
fn samply_names_the_hot_methods(work: &Path) {
    for tool in ["samply", "python3", "nm"] {
        if !runs(tool, "--version") {
            skip(
                "samply_names_the_hot_methods",
                Need::Tool(tool),
                format!("no {tool} on PATH"),
            );
            return;
        }
    }
    let output = Command::new("samply")
        .args(["import", "-s", "-n", "-o", "profile.json", "out.data"])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "samply import: {}",
        text(&output.stderr)
    );
    let profile = fs::read_to_string(work.join("profile.json")).unwrap();
    let names = samply_leaf_libraries(&profile);
    assert!(
        names.len() >= 100,
        "samply: {} main-thread samples",
        names.len()
    );
    // One `nm` per library, not per sample.
    let mut hot_library = std::collections::HashMap::new();
    let hot = names
        .iter()
        .flatten()
        .filter(|path| {
            *hot_library.entry(path.to_path_buf()).or_insert_with(|| {
                let symbols = Command::new("nm").arg(path).output().unwrap();
                let symbols = text(&symbols.stdout);
                // The agent's Java form (`Hot.alpha(long)`), its default.
                symbols.contains("Hot.alpha(") || symbols.contains("Hot.beta(")
            })
        })
        .count();
    let share = hot as f64 / names.len() as f64;
    eprintln!(
        "samply import: {hot} of {} main-thread samples in Hot.alpha/Hot.beta ({share:.3})",
        names.len()
    );
    assert!(share >= MIN_HOT_SHARE, "samply: {hot}/{}", names.len());
}

/// For each sample of the thread with the most samples (the workload's main thread), the path
/// of the library its leaf frame is in, if it is a `jitted-*.so`.
fn samply_leaf_libraries(profile: &str) -> Vec<Option<PathBuf>> {
    // The profile's tables, read with python3's json (the test has no JSON crate).
    let script = include_str!("fixtures/samply_leaf_libraries.py");
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(profile.as_bytes())
            .unwrap();
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "reading samply's profile");
    text(&output.stdout)
        .lines()
        .map(|line| (line != "-").then(|| PathBuf::from(line)))
        .collect()
}

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

#[test]
fn a_failing_command_gives_its_status_and_a_complete_output() {
    let Some(work) = setup("a_failing_command_gives_its_status_and_a_complete_output") else {
        return;
    };
    let _lock = jvm_lock();
    let output = record(
        work.path(),
        &[
            "-o", "out.data", "--", "java", "-cp", ".", "Hot", "6000", "3",
        ],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 3);
    assert!(
        text(&output.stderr).contains("the command failed"),
        "{}",
        text(&output.stderr)
    );
    assert_hot(work.path(), "out.data", "exit 3");
}

#[test]
fn sigint_mid_run_still_post_processes() {
    let Some(work) = setup("sigint_mid_run_still_post_processes") else {
        return;
    };
    let _lock = jvm_lock();
    let child = record(
        work.path(),
        &[
            "-o", "out.data", "--", "java", "-cp", ".", "Hot", "120000", "0",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Mid-run: once a JVM has written its jitdump, and a few seconds of hot code later.
    let started = Instant::now();
    // The dumps go to the command's directory inside the dump root `out.data.jit-XXXXXX`.
    let has_dump = |dir: &Path| {
        fs::read_dir(dir).is_ok_and(|mut d| {
            d.any(|f| f.is_ok_and(|f| f.file_name().to_string_lossy().ends_with(".dump")))
        })
    };
    let dump_written = || {
        fs::read_dir(work.path()).unwrap().flatten().any(|root| {
            root.file_name()
                .to_string_lossy()
                .starts_with("out.data.jit-")
                && fs::read_dir(root.path())
                    .is_ok_and(|mut dirs| dirs.any(|d| d.is_ok_and(|d| has_dump(&d.path()))))
        })
    };
    while !dump_written() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no jitdump after 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill on the pid of a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let output = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(100),
        "the JVM ran to its end: SIGINT ignored"
    );
    assert_ok_output(work.path(), &output, 130);
    assert!(
        text(&output.stderr).contains("interrupted"),
        "{}",
        text(&output.stderr)
    );
    assert_hot(work.path(), "out.data", "SIGINT");
}

/// The control: with `--no-java-agent` no jitdump is written, and not one sample of the same
/// workload is named after the hot methods (so the shares above come from the agent's dumps).
#[test]
fn without_the_agent_no_java_method_is_named() {
    let Some(work) = setup("without_the_agent_no_java_method_is_named") else {
        return;
    };
    let _lock = jvm_lock();
    let output = record(
        work.path(),
        &[
            "--no-java-agent",
            "-o",
            "out.data",
            "--",
            "java",
            "-cp",
            ".",
            "Hot",
            "3000",
            "0",
        ],
    )
    .output()
    .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("no jitdump was mapped"), "{stderr}");
    assert!(!work.path().join("out.data.raw").exists(), "{stderr}");
    let (samples, hot) = hot_share(work.path(), "out.data");
    eprintln!("control: {hot} of {samples} main-thread samples named Hot.alpha/Hot.beta");
    assert!(samples >= 100, "control: only {samples} samples");
    assert_eq!(hot, 0, "control: named without a jitdump");
}

/// Per phase method (alpha, beta): the wall-clock times `perf script -F+tod` prints for the
/// samples named after it.
fn phase_sample_times(work: &Path, data: &str) -> [Vec<u64>; 2] {
    let output = Command::new("perf")
        .args(["script", "-G", "-F", "tid,tod,ip,sym", "-i", data])
        .current_dir(work)
        .env("HOME", work.join("home"))
        .env("TZ", "UTC")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "perf script -F tod: {}",
        text(&output.stderr)
    );
    let mut times = [Vec::new(), Vec::new()];
    for line in text(&output.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(tod) = fields.get(1..3).and_then(|tod| tod_ns(&tod.join(" "))) else {
            continue;
        };
        for (phase, names) in [
            ["Phases.alpha(", "Phases;alpha("],
            ["Phases.beta(", "Phases;beta("],
        ]
        .iter()
        .enumerate()
        {
            if names.iter().any(|name| line.contains(name)) {
                times[phase].push(tod);
            }
        }
    }
    times
}

/// How many of each phase's samples lie outside `[start - tolerance, end + tolerance]`.
fn outside(times: &[Vec<u64>; 2], stamps: [u64; 4]) -> [usize; 2] {
    let count = |times: &[u64], start: u64, end: u64| {
        times
            .iter()
            .filter(|t| !(start - PHASE_TOLERANCE_NS..=end + PHASE_TOLERANCE_NS).contains(*t))
            .count()
    };
    [
        count(&times[0], stamps[0], stamps[1]),
        count(&times[1], stamps[2], stamps[3]),
    ]
}

/// `perf script -F+tod` works on `perfclock record`'s output (HEADER_CLOCK_DATA from
/// the snapshot taken at the start), and every sample of each phase's method has a wall-clock
/// time inside that phase as the JVM stamped it with `Instant.now()`, within 1 ms. Control: the
/// same file with the wall clock moved 20 ms late puts samples outside.
#[test]
fn wall_clock_times_fall_within_the_phases_the_workload_stamped() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = setup(test) else {
        return;
    };
    let _lock = jvm_lock();
    let output = record(
        work.path(),
        &["-o", "out.data", "--", "java", "-cp", ".", "Phases", "1500"],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 0);
    let stdout = text(&output.stdout);
    let stamps: Vec<u64> = stdout
        .lines()
        .find_map(|line| line.strip_prefix("phases "))
        .unwrap_or_else(|| panic!("the workload printed no phases: {stdout}"))
        .split_whitespace()
        .map(|stamp| stamp.parse().unwrap())
        .collect();
    let stamps: [u64; 4] = stamps.try_into().unwrap();
    let times = phase_sample_times(work.path(), "out.data");
    let outside_phase = outside(&times, stamps);
    eprintln!(
        "{test}: alpha {} samples, {} outside its phase; beta {} samples, {} outside",
        times[0].len(),
        outside_phase[0],
        times[1].len(),
        outside_phase[1]
    );
    assert!(
        times[0].len() >= 100 && times[1].len() >= 100,
        "too few samples named after the phases' methods"
    );
    assert_eq!(outside_phase, [0, 0], "samples outside their phase");

    // Control: the wall clock CONTROL_SHIFT_NS late moves each phase's samples of its last
    // CONTROL_SHIFT_NS - 1 ms out of it. Its setup: the phases that have such samples (a loaded
    // machine may deschedule a phase's thread for a while); at least one must.
    let ends = [stamps[1], stamps[3]];
    let near_end: Vec<usize> = (0..2)
        .filter(|&phase| {
            times[phase].iter().any(|&t| {
                t <= ends[phase] && t + CONTROL_SHIFT_NS - PHASE_TOLERANCE_NS > ends[phase]
            })
        })
        .collect();
    assert!(
        !near_end.is_empty(),
        "control setup: no sample near the end of either phase"
    );
    let data = work.path().join("out.data");
    let mut bytes = fs::read(&data).unwrap();
    let layout = perfclock_perfdata::read_layout(&mut std::io::Cursor::new(&bytes)).unwrap();
    let section = layout
        .feature_section(perfclock_perfdata::Feature::CLOCK_DATA)
        .expect("HEADER_CLOCK_DATA in perfclock record's output");
    let at = section.offset as usize + 8;
    let wall = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    bytes[at..at + 8].copy_from_slice(&(wall + CONTROL_SHIFT_NS).to_le_bytes());
    fs::write(work.path().join("late.data"), &bytes).unwrap();
    let late = outside(&phase_sample_times(work.path(), "late.data"), stamps);
    eprintln!("{test}: control {CONTROL_SHIFT_NS} ns late: {late:?} samples outside");
    for phase in near_end {
        assert!(
            late[phase] > 0,
            "the control moved no sample of phase {phase} out of it"
        );
    }
}

/// perf on PATH, or `None` after saying the test cannot run.
fn perf_or_skip(test: &str) -> Option<tempfile::TempDir> {
    if !runs("perf", "--version") {
        skip(test, Need::Tool("perf"), "`perf --version` did not run");
        return None;
    }
    let work = tempfile::tempdir().unwrap();
    fs::create_dir(work.path().join("home")).unwrap();
    Some(work)
}

/// Whether process `pid` is alive (a zombie is not).
fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn send(pid: u32, signal: libc::c_int) {
    // SAFETY: kill with plain integers; the pid is one the test started (or its descendant).
    unsafe {
        libc::kill(libc::pid_t::try_from(pid).unwrap(), signal);
    }
}

/// Waits up to `limit` for `done`.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// A command that writes its pid to `cmd.pid` in the work directory and sleeps for long.
const SLEEPER: &[&str] = &["sh", "-c", "echo $$ > cmd.pid; exec sleep 1000"];

/// Starts `perfclock record --no-java-agent -o out.data -- SLEEPER` in `work`; returns it and
/// the command's pid once the command runs.
fn record_sleeper(work: &Path, new_group: bool) -> (std::process::Child, u32) {
    let mut args = vec!["--no-java-agent", "-o", "out.data", "--"];
    args.extend_from_slice(SLEEPER);
    let mut command = record(work, &args);
    command.stderr(Stdio::piped());
    if new_group {
        use std::os::unix::process::CommandExt as _;
        command.process_group(0);
    }
    let child = command.spawn().unwrap();
    let pid_file = work.join("cmd.pid");
    assert!(
        wait_until(Duration::from_secs(20), || fs::read_to_string(&pid_file)
            .is_ok_and(|text| text.ends_with('\n'))),
        "the command never started"
    );
    let pid = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // perf's first samples, so that the recording has data.
    std::thread::sleep(Duration::from_millis(500));
    (child, pid)
}

/// Stops a command left running (a failed test's debris) and says whether it was.
fn reap_leftover(pid: u32) -> bool {
    let was = alive(pid);
    if was {
        send(pid, libc::SIGKILL);
    }
    was
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

/// SIGHUP (a closed terminal), to perfclock alone or to its whole process group: perf stops the
/// command, OUT is written, and perfclock exits 128 + SIGHUP; nothing is left running.
#[test]
fn sighup_stops_perf_and_the_command_and_still_writes_out() {
    let Some(work) = perf_or_skip("sighup_stops_perf_and_the_command_and_still_writes_out") else {
        return;
    };
    for group in [false, true] {
        let dir = work.path();
        let _ = fs::remove_file(dir.join("cmd.pid"));
        let _ = fs::remove_file(dir.join("out.data"));
        let (child, command_pid) = record_sleeper(dir, group);
        let target = if group {
            // The process group, as a terminal's hangup reaches it.
            -i32::try_from(child.id()).unwrap()
        } else {
            i32::try_from(child.id()).unwrap()
        };
        // SAFETY: kill with plain integers, to the child (or its group) this test started.
        unsafe {
            libc::kill(target, libc::SIGHUP);
        }
        let output = child.wait_with_output().unwrap();
        let stderr = text(&output.stderr);
        let stopped = wait_until(Duration::from_secs(10), || !alive(command_pid));
        let leftover = reap_leftover(command_pid);
        assert!(
            stopped && !leftover,
            "group {group}: the command still runs: {stderr}"
        );
        assert_eq!(
            output.status.code(),
            Some(128 + libc::SIGHUP),
            "group {group}: {stderr}"
        );
        assert!(
            dir.join("out.data").is_file(),
            "group {group}: no OUT: {stderr}"
        );
    }
}

/// SIGKILL of perfclock stops perf (its parent-death signal), which stops the command.
#[test]
fn sigkill_of_perfclock_stops_perf_and_the_command() {
    let Some(work) = perf_or_skip("sigkill_of_perfclock_stops_perf_and_the_command") else {
        return;
    };
    let (mut child, command_pid) = record_sleeper(work.path(), false);
    send(child.id(), libc::SIGKILL);
    child.wait().unwrap();
    let stopped = wait_until(Duration::from_secs(10), || !alive(command_pid));
    let leftover = reap_leftover(command_pid);
    assert!(
        stopped && !leftover,
        "the command outlived perfclock's SIGKILL"
    );
}

/// The pids whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(str::to_owned))
                    == Some(parent.to_string())
            })
        })
        .collect()
}

/// SIGKILL of perf: perfclock stops the command perf leaves behind, and says perf was killed
/// instead of blaming perf_event_paranoid.
#[test]
fn sigkill_of_perf_stops_the_command_and_names_the_signal() {
    let Some(work) = perf_or_skip("sigkill_of_perf_stops_the_command_and_names_the_signal") else {
        return;
    };
    let (child, command_pid) = record_sleeper(work.path(), false);
    let perf = children_of(child.id());
    assert_eq!(perf.len(), 1, "perfclock's children: {perf:?}");
    send(perf[0], libc::SIGKILL);
    let output = child.wait_with_output().unwrap();
    let stderr = text(&output.stderr);
    let stopped = wait_until(Duration::from_secs(10), || !alive(command_pid));
    let leftover = reap_leftover(command_pid);
    assert!(stopped && !leftover, "the command outlived perf: {stderr}");
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("killed by signal 9"), "{stderr}");
    assert!(!stderr.contains("perf_event_paranoid"), "{stderr}");
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

/// SIGINT while `perf inject --jit` runs: perfclock exits 130 and either wrote OUT complete
/// or wrote nothing and says so; no temporary file is left beside OUT (the raw recording is
/// kept in perfclock's private directory, as the message says).
#[test]
fn sigint_during_perf_inject_leaves_out_complete_or_absent_and_no_temporary() {
    let Some(work) =
        setup("sigint_during_perf_inject_leaves_out_complete_or_absent_and_no_temporary")
    else {
        return;
    };
    let _lock = jvm_lock();
    let mut child = record(
        work.path(),
        &[
            "-o", "out.data", "--", "java", "-cp", ".", "Hot", "4000", "0",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stderr = String::new();
    let mut reader = std::io::BufReader::new(child.stderr.take().unwrap());
    loop {
        let mut line = String::new();
        use std::io::BufRead as _;
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("perfclock ended before perf inject: {stderr}");
        }
        stderr.push_str(&line);
        if line.contains("perf inject --jit") {
            break;
        }
    }
    send(child.id(), libc::SIGINT);
    use std::io::Read as _;
    reader.read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    assert!(
        status.signal() == Some(libc::SIGINT) || status.code() == Some(130),
        "{status}: {stderr}"
    );
    let out = work.path().join("out.data");
    if out.exists() {
        assert!(!stderr.contains("was not written"), "{stderr}");
        assert_hot(work.path(), "out.data", "interrupted after OUT was written");
    } else {
        assert!(
            stderr.contains("was not written"),
            "no OUT and no message: {stderr}"
        );
        assert!(stderr.contains("the recording is kept in"), "{stderr}");
    }
    // Beside OUT: the test's files, the jitdump directory, at most perfclock's private
    // directory holding the raw recording alone, and the jitted images' directory only beside a
    // complete OUT, which names them.
    for entry in fs::read_dir(work.path()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("out.data.jitted-") {
            assert!(out.exists(), "images left without OUT: {stderr}");
            continue;
        }
        if name.starts_with(".out.data.perfclock-") {
            let inside: Vec<String> = fs::read_dir(entry.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(inside, ["out.data.raw"], "{stderr}");
        } else {
            assert!(
                name.ends_with(".java")
                    || name.ends_with(".class")
                    || name == "home"
                    || name == "out.data"
                    || name.starts_with("out.data.jit-"),
                "left beside OUT: {name}: {stderr}"
            );
        }
    }
}

/// As root, a JVM that the command runs as another user (`setpriv --reuid=nobody`) starts,
/// writes its jitdump, and its hot methods are named.
#[test]
fn root_records_a_jvm_run_as_another_user() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = setup(test) else {
        return;
    };
    if !is_root() {
        skip(
            test,
            Need::Root,
            "only root can run the command as another user",
        );
        return;
    }
    if !runs("setpriv", "--version") {
        skip(test, Need::Tool("setpriv"), "no setpriv on PATH");
        return;
    }
    let _lock = jvm_lock();
    // nobody reads the classes; the work directory is the test's, 0700 until now.
    fs::set_permissions(work.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let output = record(
        work.path(),
        &[
            "-o",
            "out.data",
            "--",
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "java",
            "-cp",
            ".",
            "Hot",
            "4000",
            "0",
        ],
    )
    .output()
    .unwrap();
    assert_ok_output(work.path(), &output, 0);
    assert_hot(work.path(), "out.data", "a JVM run as nobody");
}

/// The files the process `pid` holds open whose path contains `needle`.
fn open_files_of(pid: u32, needle: &str) -> Vec<PathBuf> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| fs::read_link(entry.path()).ok())
                .filter(|target| target.to_string_lossy().contains(needle))
                .collect()
        })
        .unwrap_or_default()
}

/// `record -p` that fails after attaching one JVM (the second pid does not exist) ends that
/// JVM's agent session on its way out: the JVM no longer holds its jitdump open, and nothing
/// was recorded.
#[test]
fn a_failed_record_p_ends_the_sessions_it_started() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = setup(test) else {
        return;
    };
    let _lock = jvm_lock();
    let mut jvm = Command::new("java")
        .args(["-cp", ".", "Hot", "60000", "0"])
        .current_dir(work.path())
        .env_remove("JAVA_TOOL_OPTIONS")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let jvm_pid = jvm.id();
    // A pid that names no process: above the kernel's pid_max.
    let absent = 4_194_305u32;
    let output = record(
        work.path(),
        &[
            "-p",
            &format!("{jvm_pid},{absent}"),
            "--duration",
            "2",
            "-o",
            "out.data",
        ],
    )
    .output()
    .unwrap();
    let stderr = text(&output.stderr);
    let held = open_files_of(jvm_pid, ".jit-");
    let _ = jvm.kill();
    let _ = jvm.wait();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("attached JVM {jvm_pid}")),
        "{stderr}"
    );
    assert!(stderr.contains("nothing recorded"), "{stderr}");
    assert!(
        held.is_empty(),
        "the JVM still holds its recording's dump open: {held:?}\n{stderr}"
    );
    assert!(!work.path().join("out.data").exists());
}

/// The hot JavaScript of `tests/fixtures/hot.js`, run for `ms` milliseconds.
const HOT_JS: &str = include_str!("fixtures/hot.js");

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

const HOT_WASM_PY: &str = include_str!("fixtures/hot_wasm.py");

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

const HOT_PY: &str = include_str!("fixtures/hot.py");

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

/// Only sampled JIT code becomes an image, and nothing a sample shows changes: one recording
/// of a JVM (the agent's dump) made symbolizable twice, with the filter and with
/// `--all-jit-code`, gives the same symbol for every sample and call-chain frame in `perf
/// script`, from a small fraction of the images.
#[test]
fn only_sampled_code_becomes_an_image_and_every_symbol_stays() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = setup(test) else {
        return;
    };
    let _lock = jvm_lock();
    let dir = work.path();
    let agent = Path::new(perfclock()).with_file_name("libperfclock_agent.so");
    fs::create_dir(dir.join("dump")).unwrap();
    let raw = Command::new("perf")
        .args(["record", "-q", "-g", "-o", "raw.data", "--", "java"])
        .arg(format!(
            "-agentpath:{}=jitdump={}",
            agent.display(),
            dir.join("dump").display()
        ))
        .args(["-cp", ".", "Hot", "4000", "0"])
        .current_dir(dir)
        .env("HOME", dir.join("home"))
        .env_remove("JAVA_TOOL_OPTIONS")
        .output()
        .unwrap();
    assert!(raw.status.success(), "{}", text(&raw.stderr));
    let symbols = |all: bool, name: &str| -> (String, String) {
        let mut convert = Command::new(perfclock());
        convert.args([
            "inject-time-conv",
            "raw.data",
            "-o",
            &format!("{name}.conv"),
        ]);
        if all {
            convert.arg("--all-jit-code");
        }
        let converted = convert.current_dir(dir).output().unwrap();
        assert!(converted.status.success(), "{}", text(&converted.stderr));
        let injected = Command::new("perf")
            .args([
                "inject",
                "--jit",
                "-i",
                &format!("{name}.conv"),
                "-o",
                &format!("{name}.jit"),
            ])
            .current_dir(dir)
            .env("HOME", dir.join("home"))
            .output()
            .unwrap();
        assert!(injected.status.success(), "{}", text(&injected.stderr));
        let script = Command::new("perf")
            .args([
                "script",
                "-F",
                "tid,time,ip,sym",
                "--ns",
                "-i",
                &format!("{name}.jit"),
            ])
            .current_dir(dir)
            .env("HOME", dir.join("home"))
            .output()
            .unwrap();
        assert!(script.status.success(), "{}", text(&script.stderr));
        (text(&script.stdout), text(&converted.stderr))
    };
    let (filtered, said) = symbols(false, "filtered");
    let (every, _) = symbols(true, "every");
    assert!(filtered.contains("Hot.alpha("), "no hot method named");
    assert!(
        filtered == every,
        "perf script differs with and without the filter"
    );
    let images = |root: &Path| {
        fs::read_dir(root)
            .map(|entries| entries.count())
            .unwrap_or(0)
    };
    let copies = |name: &str| -> Vec<PathBuf> {
        fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.to_string_lossy()
                    .contains(&format!("{name}.conv.jitted-"))
            })
            .collect()
    };
    let (filtered_copies, every_copies) = (copies("filtered"), copies("every"));
    assert_eq!(
        (filtered_copies.len(), every_copies.len()),
        (1, 1),
        "{said}"
    );
    // Each copy's directory holds the dump's copy and perf inject's images.
    let kept = images(&filtered_copies[0].join("dump-0")) - 1;
    let all = images(&every_copies[0].join("dump-0")) - 1;
    eprintln!("{said}\nimages: {kept} with the filter, {all} without");
    assert!(kept * 5 <= all, "{kept} images kept of {all}");
}
