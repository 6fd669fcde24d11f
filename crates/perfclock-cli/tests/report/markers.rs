//! `perfclock report --during`, `--split marker` and pprof's `marker` label on a program that
//! writes perfclock markers around its phases (`crates/perfclock-markers`'s example `phases`:
//! `hash`, `sort`, `write_file`, one after another), recorded by `perfclock record`. The
//! report finds the marker file through the recording's mappings; for each phase, the flame
//! graph's and `go tool pprof -tags`' counts equal the `perf script` samples of the process
//! whose time lies in that phase's spans, read here from the marker file, and the samples pprof
//! labels with a phase (by their timestamps) are exactly those. Control: the same spans moved
//! 3 ms later hold another set of samples, by a tenth of the phase's at least. A hostile marker
//! file (escape sequences in a name, lines that are no marker) is read and escaped; swapped for
//! a link or a FIFO, it is not read.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use crate::common::{
    cargo_build, compile_c, flame_counts, go_or_skip, go_pprof, perf_record, perf_script,
    perfclock, record, report, report_status, run, tools_or_skip,
};

/// The phases' marker names and the function each runs.
const PHASES: [(&str, &str); 3] = [
    ("hash", "phase_hash"),
    ("sort", "phase_sort"),
    ("write_file", "phase_write_file"),
];

/// How far the control moves the spans.
const CONTROL_SHIFT_NS: u64 = 3_000_000;

/// A sample of `perf script -F pid,time --ns`: its pid and time.
struct ScriptSample {
    pid: u32,
    time_ns: u64,
}

fn script_samples(work: &Path, data: &str) -> Vec<ScriptSample> {
    let script = run(
        work,
        "perf",
        &["script", "-F", "pid,time", "--ns", "-i", data],
    );
    let mut samples: Vec<ScriptSample> = Vec::new();
    for line in script.lines().filter(|line| !line.trim().is_empty()) {
        // `PID SECONDS.NANOS:`
        let mut words = line.split_whitespace();
        let pid = words.next().and_then(|pid| pid.parse().ok());
        let time = words
            .next()
            .and_then(|t| t.strip_suffix(':'))
            .and_then(|t| t.split_once('.'))
            .and_then(|(s, ns)| {
                Some(s.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?)
            });
        let (Some(pid), Some(time_ns)) = (pid, time) else {
            panic!("not a sample header: {line:?}");
        };
        samples.push(ScriptSample { pid, time_ns });
    }
    samples
}

/// The spans of a marker file, `(start, end, name)`.
fn spans(file: &str) -> Vec<(u64, u64, String)> {
    file.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ' ');
            let start = fields.next()?.parse().ok()?;
            let end = fields.next()?.parse().ok()?;
            Some((start, end, fields.next()?.to_owned()))
        })
        .filter(|(start, end, _)| end > start)
        .collect()
}

/// The times of the samples of `pid` that lie in a span named `name`, the spans moved by
/// `shift`.
fn inside(
    samples: &[ScriptSample],
    pid: u32,
    spans: &[(u64, u64, String)],
    name: &str,
    shift: u64,
) -> BTreeSet<u64> {
    samples
        .iter()
        .filter(|sample| {
            sample.pid == pid
                && spans.iter().any(|(start, end, span)| {
                    span == name && start + shift <= sample.time_ns && sample.time_ns < end + shift
                })
        })
        .map(|sample| sample.time_ns)
        .collect()
}

/// Each sample of `go tool pprof -raw`'s output: its `timestamp` and `marker` labels.
fn pprof_raw_samples(raw: &str) -> Vec<(u64, Option<String>)> {
    let mut samples: Vec<(Option<u64>, Option<String>)> = Vec::new();
    let label = |line: &str, key: &str| -> Option<String> {
        let (_, rest) = line.split_once(&format!("{key}:["))?;
        Some(rest.split_once(']')?.0.to_owned())
    };
    let mut in_samples = false;
    for line in raw.lines() {
        // Sections start at the margin: `Samples:` (its value types' line after it),
        // `Locations`, `Mappings`.
        if line.starts_with("Samples:") {
            in_samples = true;
            continue;
        }
        if !line.starts_with(' ') {
            in_samples &= !line.starts_with(|c: char| c.is_ascii_uppercase());
            continue;
        }
        if !in_samples {
            continue;
        }
        // `COUNT PERIOD: LOCATION...` starts a sample; its label lines follow.
        if line.trim_start().starts_with(|c: char| c.is_ascii_digit()) && line.contains(": ") {
            samples.push((None, None));
        }
        let Some(sample) = samples.last_mut() else {
            continue;
        };
        if let Some(timestamp) = label(line, "timestamp") {
            sample.0 = timestamp.split(' ').next().and_then(|ns| ns.parse().ok());
        }
        if let Some(marker) = label(line, "marker") {
            sample.1 = Some(marker);
        }
    }
    samples
        .into_iter()
        .map(|(timestamp, marker)| (timestamp.expect("every sample has a timestamp"), marker))
        .collect()
}

/// `go tool pprof -tags`' sample counts of each value of the label `key`.
fn pprof_tags(tags: &str, key: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let mut in_key = false;
    for line in tags.lines() {
        let line = line.trim();
        if let Some((label, _)) = line.split_once(": Total") {
            in_key = label.trim() == key;
            continue;
        }
        if !in_key {
            continue;
        }
        // `COUNT.0 (SHARE): VALUE`
        if let Some((count, value)) = line.split_once(' ').and_then(|(count, rest)| {
            Some((count.parse::<f64>().ok()? as u64, rest.split_once(": ")?.1))
        }) {
            counts.insert(value.to_owned(), count);
        }
    }
    counts
}

#[test]
fn phase_counts_are_the_samples_inside_their_spans() {
    let test = perfclock_testutil::test_name!();
    if !tools_or_skip(test, &[("perf", "--version")]) {
        return;
    }
    cargo_build(&["-p", "perfclock-markers", "--example", "phases"]).unwrap();
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    fs::create_dir(work.join("home")).unwrap();
    // A copy: perf symbolizes the file at the recorded path, and another build may replace
    // the target directory's.
    let built = Path::new(perfclock())
        .parent()
        .unwrap()
        .join("examples/phases");
    fs::copy(built, work.join("phases")).unwrap();
    let command = [
        "./phases",
        "--dir",
        ".",
        "--rounds",
        "40",
        "--phase-ms",
        "15",
    ];
    if record(test, work, "phases.data", &command).is_none() {
        return;
    }
    let marker_file = fs::read_dir(work)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("marker-") && n.ends_with(".txt"))
        })
        .expect("the program's marker file");
    let pid: u32 = marker_file
        .file_stem()
        .and_then(|stem| stem.to_str()?.strip_prefix("marker-")?.parse().ok())
        .unwrap();
    let spans = spans(&fs::read_to_string(&marker_file).unwrap());
    let samples = script_samples(work, "phases.data");

    let stderr = report(
        work,
        &[
            "phases.data",
            "--split",
            "marker",
            "-o",
            "split.html",
            "--pprof",
            "phases.pb.gz",
        ],
    );
    assert!(
        stderr.contains(&format!("markers of process {pid} from ")),
        "{stderr}"
    );
    let split = flame_counts(&fs::read_to_string(work.join("split.html")).unwrap());
    let mut expected = BTreeMap::new();
    let mut held_by_phase = BTreeMap::new();
    for (phase, _) in PHASES {
        let held = inside(&samples, pid, &spans, phase, 0);
        let moved = inside(&samples, pid, &spans, phase, CONTROL_SHIFT_NS);
        let differing = held.symmetric_difference(&moved).count();
        println!(
            "{phase}: perf script: {} samples in its spans; moved {CONTROL_SHIFT_NS} ns: {} \
             ({differing} samples differ)",
            held.len(),
            moved.len(),
        );
        assert!(held.len() >= 100, "{phase}: too few samples to count");
        assert!(
            differing * 10 >= held.len(),
            "control: spans moved by {CONTROL_SHIFT_NS} ns should hold other samples"
        );
        expected.insert(phase.to_owned(), held.len() as u64);
        assert_eq!(
            split.get(phase),
            Some(&(held.len() as u64)),
            "{phase}: --split marker's root"
        );
        let page = format!("{phase}.html");
        report(work, &["phases.data", "--during", phase, "-o", &page]);
        let during = flame_counts(&fs::read_to_string(work.join(&page)).unwrap());
        assert_eq!(
            during.get("all"),
            Some(&(held.len() as u64)),
            "{phase}: --during's total"
        );
        held_by_phase.insert(phase, (held, moved));
    }
    report(
        work,
        &[
            "phases.data",
            "--during",
            "sort",
            "--during",
            "write_file",
            "-o",
            "two.html",
        ],
    );
    let two = flame_counts(&fs::read_to_string(work.join("two.html")).unwrap());
    assert_eq!(
        two.get("all").copied(),
        Some(expected["sort"] + expected["write_file"]),
        "--during sort --during write_file"
    );

    if !go_or_skip(test) {
        return;
    }
    let tags = go_pprof(work, &["-tags", "-sample_index=samples", "phases.pb.gz"]);
    println!("{tags}");
    let labelled = pprof_tags(&tags, "marker");
    for (phase, count) in &expected {
        assert_eq!(labelled.get(phase), Some(count), "pprof's marker={phase}");
    }
    // Which samples: pprof's wall-clock timestamps are perf times plus one offset.
    let raw = go_pprof(work, &["-raw", "phases.pb.gz"]);
    let labels = pprof_raw_samples(&raw);
    assert_eq!(labels.len(), samples.len(), "pprof's samples");
    let first_perf = samples.iter().map(|s| s.time_ns).min().unwrap();
    let first_wall = labels
        .iter()
        .map(|&(timestamp, _)| timestamp)
        .min()
        .unwrap();
    let perf_time = |wall: u64| wall - (first_wall - first_perf);
    let all_times: BTreeSet<u64> = samples.iter().map(|s| s.time_ns).collect();
    assert!(
        labels
            .iter()
            .all(|&(wall, _)| all_times.contains(&perf_time(wall))),
        "pprof's timestamps are perf script's times and one offset"
    );
    for (phase, (held, moved)) in &held_by_phase {
        let labelled: BTreeSet<u64> = labels
            .iter()
            .filter(|(_, marker)| marker.as_deref() == Some(*phase))
            .map(|&(wall, _)| perf_time(wall))
            .collect();
        assert!(
            labelled == *held,
            "{phase}: pprof's samples are those in its spans"
        );
        assert!(
            labelled != *moved,
            "{phase}: and not those of the moved spans"
        );
    }
}

/// A program that writes a hostile marker file (a span over all time named with terminal
/// escape sequences, an instant, four lines that are no marker) and maps it executable.
const HOSTILE_MARKERS_C: &str = include_str!("fixtures/hostile_markers.c");

/// The span name the hostile program writes.
const HOSTILE_SPAN: &str = "\x1b]52;c;aGk=\x07 \x1b[2J span";

#[test]
fn a_hostile_marker_file_is_read_as_untrusted() {
    let test = perfclock_testutil::test_name!();
    if !tools_or_skip(test, &[("perf", "--version"), ("cc", "--version")]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    fs::create_dir(work.join("home")).unwrap();
    compile_c(work, "hostile_markers.c", HOSTILE_MARKERS_C, "hostile");
    let record_args = [
        "-q",
        "-g",
        "-e",
        "cpu-clock",
        "-o",
        "hostile.data",
        "./hostile",
        "500",
    ];
    if perf_record(test, work, &work.join("home"), &record_args).is_none() {
        return;
    }
    let marker_file = fs::read_dir(work)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.to_string_lossy().ends_with(".txt"))
        .expect("the hostile marker file");
    let pid: u32 = marker_file
        .file_stem()
        .and_then(|stem| stem.to_str()?.strip_prefix("marker-")?.parse().ok())
        .unwrap();
    let of_pid = perf_script(work, "pid", "hostile.data")
        .lines()
        .filter(|line| line.trim().parse() == Ok(pid))
        .count() as u64;

    let (ok, stderr) = report_status(
        work,
        &[
            "hostile.data",
            "--during",
            HOSTILE_SPAN,
            "-o",
            "during.html",
            "--pprof",
            "h.pb.gz",
        ],
    );
    println!("{stderr}");
    assert!(ok, "{stderr}");
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\x07'),
        "raw escapes: {stderr:?}"
    );
    assert!(
        stderr.contains("\\x1b]52;c;aGk=\\x07 \\x1b[2J span"),
        "{stderr}"
    );
    assert!(
        stderr.contains("1 spans, 1 instants") && stderr.contains("4 lines that are no marker"),
        "{stderr}"
    );
    let during = flame_counts(&fs::read_to_string(work.join("during.html")).unwrap());
    assert_eq!(
        during.get("all"),
        Some(&of_pid),
        "the span holds every sample of its process"
    );

    // The file swapped for a link to another file, then for a FIFO: neither is read, and the
    // report goes on without their spans.
    let planted = work.join("planted.txt");
    fs::write(&planted, "0 18446744073709551615 planted\n").unwrap();
    fs::remove_file(&marker_file).unwrap();
    std::os::unix::fs::symlink(&planted, &marker_file).unwrap();
    let (ok, stderr) = report_status(
        work,
        &["hostile.data", "--during", "planted", "-o", "l.html"],
    );
    assert!(!ok, "a span of the linked file was read: {stderr}");
    assert!(
        stderr.contains(&format!(
            "of process {pid} is not read: it is a symbolic link"
        )) && stderr.contains("no marker span is named \"planted\""),
        "{stderr}"
    );
    fs::remove_file(&marker_file).unwrap();
    run(work, "mkfifo", &[marker_file.to_str().unwrap()]);
    let (ok, stderr) = report_status(work, &["hostile.data", "-o", "fifo.html"]);
    assert!(
        ok && stderr.contains("is not read: it is a FIFO"),
        "{stderr}"
    );
}

/// A pipe-mode recording (`perf record -o -`), whose layout the marker search cannot read, is
/// reported with a warning; asking for markers in it is an error that says why.
#[test]
fn a_pipe_mode_recording_is_reported_without_markers() {
    let test = perfclock_testutil::test_name!();
    if !tools_or_skip(test, &[("perf", "--version")]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    let script = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done";
    let record_args = ["-q", "-e", "cpu-clock", "-o", "-", "--", "sh", "-c", script];
    let Some(record) = perf_record(test, work, work, &record_args) else {
        return;
    };
    fs::write(work.join("pipe.data"), &record.stdout).unwrap();
    let (ok, stderr) = report_status(work, &["pipe.data", "-o", "pipe.html"]);
    assert!(
        ok && stderr.contains("warning: pipe.data: no marker files searched: a pipe-mode"),
        "{stderr}"
    );
    let (ok, stderr) = report_status(work, &["pipe.data", "--during", "x", "-o", "during.html"]);
    assert!(!ok && stderr.contains("error: a pipe-mode"), "{stderr}");
}
