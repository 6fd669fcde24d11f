//! A JVM under `perfclock record`: its hot methods named in perf script, samply and
//! perfclock report; wall-clock times within the phases the workload stamped; a JVM run as
//! another user; `-p` sessions ended on failure; only sampled code becomes an image.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use perfclock_testutil::perf_script::tod_ns;
use perfclock_testutil::{is_root, skip, Need};

use super::common::*;

/// How far a sample's wall-clock time may lie outside the phase the workload stamped.
const PHASE_TOLERANCE_NS: u64 = 1_000_000;
/// The control's error in the wall clock: far more than the tolerance, and long enough that a
/// phase's thread has samples in it at its end even on a loaded machine.
const CONTROL_SHIFT_NS: u64 = 20_000_000;

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
    let script = include_str!("../fixtures/samply_leaf_libraries.py");
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
    // record -p takes a process that has not mapped libjvm.so yet for no JVM: wait until it
    // is one.
    let is_jvm = wait_until(Duration::from_secs(30), || {
        fs::read_to_string(format!("/proc/{jvm_pid}/maps"))
            .is_ok_and(|maps| maps.contains("/libjvm.so"))
    });
    assert!(is_jvm, "java {jvm_pid} did not map libjvm.so within 30 s");
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
