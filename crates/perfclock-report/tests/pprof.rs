//! The pprof profile of hand-built samples: its totals and tables, and what `go tool pprof`
//! reads from the gzipped file.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use perfclock_report::pprof::{self, proto, PprofOptions};
use perfclock_report::{Frame, FrameKind, Sample};
use perfclock_testutil::{skip, Need};

const PERIOD_NS: u64 = 250_000;
/// The perf-clock time of the first sample, and wall clock minus perf clock.
const FIRST_NS: u64 = 2_412_136_291_842;
const WALL_OFFSET_NS: i128 = 1_764_945_000_000_000_000 - 2_412_000_000_000;

/// A JVM thread in JIT code with an inlined method, the same JVM in the kernel, node in
/// V8-named code, and a node thread in code perf could not name: each stack `count` times.
fn samples() -> Vec<Sample> {
    let jvm = vec![
        Frame::new(
            0x7f1c_2a40,
            "LHot;alpha(J)J <- LHot;loop()V",
            "/tmp/out.jit/jitted-4242-17.so",
            FrameKind::Jit,
        ),
        Frame::new(
            0x7f1c_2b00,
            "LHot;main([Ljava/lang/String;)V",
            "/tmp/out.jit/jitted-4242-3.so",
            FrameKind::Jit,
        ),
        Frame::new(
            0x7f2d_1000,
            "thread_native_entry(Thread*)",
            "/usr/lib/jvm/lib/server/libjvm.so",
            FrameKind::Native,
        ),
        Frame::new(
            0x7f3e_0100,
            "start_thread",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            FrameKind::Native,
        ),
    ];
    let kernel = vec![
        Frame::new(
            0xffff_ffff_8162_105f,
            "clear_page_erms",
            "[kernel.kallsyms]",
            FrameKind::Kernel,
        ),
        Frame::new(
            0xffff_ffff_8100_2000,
            "asm_exc_page_fault",
            "[kernel.kallsyms]",
            FrameKind::Kernel,
        ),
        jvm[1].clone(),
    ];
    let node = vec![
        Frame::new(
            0x7ff9_7ca9_68a8,
            "JS:*parseExpr /tmp/nodet/hot.js:3:19",
            "/tmp/x.jit/jitted-30749-9.so",
            FrameKind::Jit,
        ),
        Frame::new(
            0x7ff9_7ca9_0010,
            "JS:~main /tmp/nodet/hot.js:1:1",
            "/tmp/x.jit/jitted-30749-2.so",
            FrameKind::Jit,
        ),
        Frame::new(
            0x55_0000_1234,
            "node::Start(int, char**)",
            "/usr/bin/node",
            FrameKind::Native,
        ),
    ];
    let unknown = vec![
        Frame::new(0, "[unknown]", "[unknown]", FrameKind::Unknown),
        Frame::new(
            0x7f00_0000_5000,
            "uv_run",
            "/usr/lib/x86_64-linux-gnu/libuv.so.1",
            FrameKind::Native,
        ),
    ];
    let mut samples = Vec::new();
    let mut add = |comm: &str, pid, tid, period, frames: &Vec<Frame>, count| {
        for _ in 0..count {
            samples.push(Sample {
                comm: comm.into(),
                pid,
                tid,
                time_ns: FIRST_NS + samples.len() as u64 * 1_000_000,
                period,
                event: "cpu-clock:ppp".into(),
                frames: frames.clone(),
                marker: None,
            });
        }
    };
    add("java", 4242, 4250, PERIOD_NS, &jvm, 3);
    add("C2 CompilerThre", 4242, 4251, PERIOD_NS, &kernel, 2);
    add("node", 30749, 30749, PERIOD_NS, &node, 3);
    add("node", 30749, 30749, 2 * PERIOD_NS, &node, 1);
    add("node worker", 30749, 30750, PERIOD_NS, &unknown, 1);
    samples
}

/// Leaf function, samples, CPU ns: what the samples above hold, and pprof must total.
const LEAVES: &[(&str, i64, i64)] = &[
    ("LHot;alpha(J)J", 3, 750_000),
    ("clear_page_erms", 2, 500_000),
    ("JS:*parseExpr /tmp/nodet/hot.js:3:19", 4, 1_250_000),
    ("[unknown]", 1, 250_000),
];

fn options() -> PprofOptions {
    PprofOptions {
        wall_clock_offset_ns: Some(WALL_OFFSET_NS),
        build_ids: BTreeMap::from([("/usr/bin/node".into(), "abc123".into())]),
    }
}

fn string(profile: &proto::Profile, index: i64) -> &str {
    &profile.string_table[usize::try_from(index).unwrap()]
}

fn function(profile: &proto::Profile, id: u64) -> &proto::Function {
    &profile.function[usize::try_from(id).unwrap() - 1]
}

fn location(profile: &proto::Profile, id: u64) -> &proto::Location {
    &profile.location[usize::try_from(id).unwrap() - 1]
}

/// A sample's stack as function names, innermost first, inlined frames included.
fn stack(profile: &proto::Profile, sample: &proto::Sample) -> Vec<String> {
    sample
        .location_id
        .iter()
        .flat_map(|&id| &location(profile, id).line)
        .map(|line| string(profile, function(profile, line.function_id).name).to_owned())
        .collect()
}

#[test]
fn each_leaf_functions_totals_are_the_samples_counts_and_periods() {
    let profile = pprof::profile(&samples(), &options());
    let mut totals: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for sample in &profile.sample {
        let leaf = stack(&profile, sample).remove(0);
        let total = totals.entry(leaf).or_default();
        total.0 += sample.value[0];
        total.1 += sample.value[1];
    }
    let expected: BTreeMap<String, (i64, i64)> = LEAVES
        .iter()
        .map(|&(name, count, ns)| (name.to_owned(), (count, ns)))
        .collect();
    assert_eq!(totals, expected);
    let sample_types: Vec<(&str, &str)> = profile
        .sample_type
        .iter()
        .map(|t| (string(&profile, t.r#type), string(&profile, t.unit)))
        .collect();
    assert_eq!(sample_types, [("samples", "count"), ("cpu", "nanoseconds")]);
    let period_type = profile.period_type.as_ref().unwrap();
    assert_eq!(
        (
            string(&profile, period_type.r#type),
            string(&profile, period_type.unit),
            profile.period
        ),
        ("cpu", "nanoseconds", 250_000)
    );
}

#[test]
fn stacks_are_leaf_first_with_inlined_methods_innermost_first() {
    let profile = pprof::profile(&samples(), &options());
    assert_eq!(
        stack(&profile, &profile.sample[0]),
        [
            "LHot;alpha(J)J",
            "LHot;loop()V",
            "LHot;main([Ljava/lang/String;)V",
            "thread_native_entry(Thread*)",
            "start_thread"
        ]
    );
    assert_eq!(
        stack(&profile, &profile.sample[3]),
        [
            "clear_page_erms",
            "asm_exc_page_fault",
            "LHot;main([Ljava/lang/String;)V"
        ]
    );
    // The JIT frame shared by both JVM stacks is one location.
    assert_eq!(
        profile.sample[0].location_id[1],
        profile.sample[3].location_id[2]
    );
}

#[test]
fn kernel_js_and_unknown_frames_keep_their_images_and_source_positions() {
    let profile = pprof::profile(&samples(), &options());
    let mapping_of = |sample: usize, frame: usize| {
        let id = location(&profile, profile.sample[sample].location_id[frame]).mapping_id;
        &profile.mapping[usize::try_from(id).unwrap() - 1]
    };
    assert_eq!(
        string(&profile, mapping_of(3, 0).filename),
        "[kernel.kallsyms]"
    );
    assert_eq!(string(&profile, mapping_of(9, 0).filename), "[unknown]");
    let node = mapping_of(5, 2);
    assert_eq!(
        (
            string(&profile, node.filename),
            string(&profile, node.build_id)
        ),
        ("/usr/bin/node", "abc123")
    );
    assert_eq!(mapping_of(3, 0).build_id, 0);
    let js = location(&profile, profile.sample[5].location_id[0]);
    assert_eq!(js.address, 0x7ff9_7ca9_68a8);
    assert_eq!((js.line[0].line, js.line[0].column), (3, 19));
    let js_function = function(&profile, js.line[0].function_id);
    assert_eq!(
        (
            string(&profile, js_function.filename),
            js_function.start_line
        ),
        ("/tmp/nodet/hot.js", 3)
    );
    let js_mapping = mapping_of(5, 0);
    assert!(js_mapping.has_filenames && js_mapping.has_line_numbers);
    assert!(mapping_of(0, 0).has_inline_frames && !mapping_of(3, 0).has_inline_frames);
}

#[test]
fn labels_name_the_thread_and_the_wall_clock_time() {
    let samples = samples();
    let profile = pprof::profile(&samples, &options());
    let labels = |index: usize| -> BTreeMap<&str, String> {
        profile.sample[index]
            .label
            .iter()
            .map(|label| {
                let value = if label.str != 0 {
                    string(&profile, label.str).to_owned()
                } else {
                    format!("{}{}", label.num, string(&profile, label.num_unit))
                };
                (string(&profile, label.key), value)
            })
            .collect()
    };
    let first_wall = (i128::from(FIRST_NS) + WALL_OFFSET_NS).to_string();
    assert_eq!(
        labels(3),
        BTreeMap::from([
            ("pid", "4242".to_owned()),
            ("tid", "4251".to_owned()),
            ("thread_name", "C2 CompilerThre".to_owned()),
            (
                "timestamp",
                format!(
                    "{}nanoseconds",
                    i128::from(samples[3].time_ns) + WALL_OFFSET_NS
                )
            ),
        ])
    );
    assert_eq!(labels(0)["timestamp"], format!("{first_wall}nanoseconds"));
    assert_eq!(profile.time_nanos.to_string(), first_wall);
    let last = samples.last().unwrap().time_ns - FIRST_NS;
    assert_eq!(profile.duration_nanos, i64::try_from(last).unwrap());

    // Without the wall clock: no start time, the same duration (a span of perf-clock times).
    let without = pprof::profile(&samples, &PprofOptions::default());
    assert_eq!(without.time_nanos, 0);
    assert_eq!(without.duration_nanos, profile.duration_nanos);
    assert!(without.sample.iter().all(|s| s.label.len() == 3));
    assert!(!without.string_table.iter().any(|s| s == "timestamp"));
}

#[test]
fn the_first_mapping_is_the_busiest_processs_executable() {
    let sample = |pid: u32, comm: &str, frames: Vec<Frame>| Sample {
        comm: comm.into(),
        pid,
        tid: pid,
        time_ns: FIRST_NS,
        period: PERIOD_NS,
        event: "cpu-clock".into(),
        frames,
        marker: None,
    };
    let libc = || Frame::new(0x10, "memcpy", "/usr/lib/libc.so.6", FrameKind::Native);
    // A comm of 15 bytes is the kernel's cut of a longer file name.
    let spin = || {
        Frame::new(
            0x20,
            "main",
            "/opt/bin/spin_for_a_long_time",
            FrameKind::Native,
        )
    };
    let other = || Frame::new(0x30, "main", "/usr/bin/other", FrameKind::Native);
    let samples = [
        sample(9, "other", vec![libc(), other()]),
        sample(7, "spin_for_a_long", vec![libc()]),
        sample(7, "spin_for_a_long", vec![libc(), spin()]),
    ];
    let profile = pprof::profile(&samples, &PprofOptions::default());
    let files: Vec<&str> = profile
        .mapping
        .iter()
        .map(|m| string(&profile, m.filename))
        .collect();
    assert_eq!(
        files,
        [
            "/opt/bin/spin_for_a_long_time",
            "/usr/lib/libc.so.6",
            "/usr/bin/other"
        ]
    );
    // No frame in the executable: the mappings in the order the samples meet them.
    let profile = pprof::profile(&samples[1..2], &PprofOptions::default());
    assert_eq!(
        string(&profile, profile.mapping[0].filename),
        "/usr/lib/libc.so.6"
    );
}

#[test]
fn every_id_and_string_index_refers_to_an_entry() {
    let profile = pprof::profile(&samples(), &options());
    let strings = &profile.string_table;
    assert_eq!(strings[0], "");
    let mut seen = std::collections::HashSet::new();
    assert!(strings.iter().all(|s| seen.insert(s)), "a string twice");
    let index_ok = |index: i64| usize::try_from(index).is_ok_and(|i| i < strings.len());
    // Ids are 1, 2, 3, ... in table order.
    let in_order = |ids: Vec<u64>| ids.iter().enumerate().all(|(i, &id)| id == i as u64 + 1);
    assert!(in_order(profile.mapping.iter().map(|m| m.id).collect()));
    assert!(in_order(profile.location.iter().map(|l| l.id).collect()));
    assert!(in_order(profile.function.iter().map(|f| f.id).collect()));
    let has = |count: usize, id: u64| (1..=count as u64).contains(&id);
    for sample in &profile.sample {
        assert_eq!(sample.value.len(), profile.sample_type.len());
        assert!(sample
            .location_id
            .iter()
            .all(|&id| has(profile.location.len(), id)));
        for label in &sample.label {
            assert!(index_ok(label.key) && label.key != 0);
            assert!(index_ok(label.str) && index_ok(label.num_unit));
        }
    }
    for location in &profile.location {
        assert!(has(profile.mapping.len(), location.mapping_id));
        assert!(!location.line.is_empty());
        assert!(location
            .line
            .iter()
            .all(|line| has(profile.function.len(), line.function_id)));
    }
    for function in &profile.function {
        assert!(index_ok(function.name) && function.name != 0);
        assert!(index_ok(function.system_name) && index_ok(function.filename));
    }
    for mapping in &profile.mapping {
        assert!(index_ok(mapping.filename) && index_ok(mapping.build_id));
    }
    for value_type in profile.sample_type.iter().chain(&profile.period_type) {
        assert!(index_ok(value_type.r#type) && index_ok(value_type.unit));
    }
}

#[test]
fn the_gzipped_file_decodes_to_the_profile() {
    use prost::Message as _;
    let profile = pprof::profile(&samples(), &options());
    let mut file = Vec::new();
    pprof::write_gzipped(&profile, &mut file).unwrap();
    assert_eq!(&file[..2], [0x1f, 0x8b], "gzip's magic");
    let mut encoded = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&file[..]), &mut encoded).unwrap();
    assert_eq!(proto::Profile::decode(&encoded[..]).unwrap(), profile);
}

/// `go tool pprof ARGS FILE` with go's caches in `dir`, or `None` after a skip.
fn go_pprof(test: &str, dir: &Path, args: &[&str], file: &Path) -> Option<String> {
    let output = Command::new("go")
        .args(["tool", "pprof", "-symbolize=none"])
        .args(args)
        .arg(file)
        .current_dir(dir)
        .env("HOME", dir)
        .env("GOCACHE", dir.join("gocache"))
        .env("GOPATH", dir.join("gopath"))
        .env("PPROF_TMPDIR", dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "")
        .output();
    let output = match output {
        Ok(output) => output,
        Err(error) => {
            skip(test, Need::Tool("go"), format!("cannot run go: {error}"));
            return None;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "go tool pprof {args:?}: {}\n{stdout}\n{stderr}",
        output.status
    );
    Some(stdout)
}

#[test]
fn go_tool_pprof_reads_the_leaf_totals_the_labels_and_the_stacks() {
    let test = "go_tool_pprof_reads_the_leaf_totals_the_labels_and_the_stacks";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("profile.pb.gz");
    let profile = pprof::profile(&samples(), &options());
    pprof::write_gzipped(&profile, std::fs::File::create(&file).unwrap()).unwrap();

    let Some(top) = go_pprof(test, dir.path(), &["-top", "-sample_index=samples"], &file) else {
        return;
    };
    eprintln!("{top}");
    // `flat flat% sum% cum cum% name`: each leaf's flat count (an inlined one marked so).
    for &(name, count, _) in LEAVES {
        let line = top
            .lines()
            .find(|line| {
                let line = line.trim_end();
                line.ends_with(name) || line.ends_with(&format!("{name} (inline)"))
            })
            .unwrap_or_else(|| panic!("{name} not in:\n{top}"));
        let flat = line.split_whitespace().next().unwrap();
        assert_eq!(flat, count.to_string(), "{line}");
    }
    let Some(cpu) = go_pprof(test, dir.path(), &["-top", "-sample_index=cpu"], &file) else {
        return;
    };
    eprintln!("{cpu}");
    let parse_expr = cpu.lines().find(|l| l.contains("JS:*parseExpr")).unwrap();
    assert!(parse_expr.trim_start().starts_with("1250us"), "{cpu}");

    let Some(traces) = go_pprof(test, dir.path(), &["-traces"], &file) else {
        return;
    };
    eprintln!("{traces}");
    let traces = traces_of(&traces);
    let has_trace = |labels: &[(&str, &str)], stack: &[&str]| {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|&(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        traces.iter().any(|trace| {
            labels.iter().all(|(k, v)| trace.labels.get(k) == Some(v)) && trace.stack == stack
        })
    };
    assert!(
        has_trace(
            &[("pid", "4242"), ("tid", "4250"), ("thread_name", "java")],
            &[
                "LHot;alpha(J)J",
                "LHot;loop()V",
                "LHot;main([Ljava/lang/String;)V",
                "thread_native_entry(Thread*)",
                "start_thread",
            ]
        ),
        "{traces:#?}"
    );
    assert!(
        has_trace(
            &[
                ("pid", "4242"),
                ("tid", "4251"),
                ("thread_name", "C2 CompilerThre")
            ],
            &[
                "clear_page_erms",
                "asm_exc_page_fault",
                "LHot;main([Ljava/lang/String;)V"
            ]
        ),
        "{traces:#?}"
    );
    assert!(
        has_trace(
            &[("tid", "30750"), ("thread_name", "node worker")],
            &["[unknown]", "uv_run"]
        ),
        "{traces:#?}"
    );
    assert_eq!(traces.len(), 10, "one trace per sample");
    assert!(traces.iter().all(|t| t.labels.contains_key("timestamp")));
}

/// One trace of `go tool pprof -traces`.
#[derive(Debug)]
struct Trace {
    labels: BTreeMap<String, String>,
    /// Function names, leaf first, without pprof's ` (inline)` mark.
    stack: Vec<String>,
}

/// `-traces` prints each sample as label lines (`%10s:  %s`) and stack lines (`%10s   %s`, the
/// value on the first only), with a rule between samples.
fn traces_of(output: &str) -> Vec<Trace> {
    let mut traces = Vec::new();
    for block in output.split("-----------+").skip(1) {
        let mut trace = Trace {
            labels: BTreeMap::new(),
            stack: Vec::new(),
        };
        for line in block.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            if line.get(10..13) == Some("   ") {
                let name = line[13..].trim_end();
                trace
                    .stack
                    .push(name.strip_suffix(" (inline)").unwrap_or(name).to_owned());
            } else if let Some((key, value)) = line.split_once(":  ") {
                trace
                    .labels
                    .insert(key.trim().to_owned(), value.trim().to_owned());
            }
        }
        if !trace.stack.is_empty() {
            traces.push(trace);
        }
    }
    traces
}
