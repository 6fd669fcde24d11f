//! JVM source lines in pprof: a JVM recording under `perfclock record` (perfclock's agent
//! writes `JIT_CODE_DEBUG_INFO` before each load), reported as pprof; `go tool pprof -top
//! -lines` gives each JIT leaf function and line the samples `perf script -F ip,sym,srcline`
//! gives it (perf reads the lines from the images `perf inject --jit` wrote). Control: with the
//! dump moved away, the report warns naming it and pprof has no line for those frames.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::common::{go_or_skip, go_pprof, java_work, record, report, run};

/// `(function, FILE:LINE)` to samples, of JIT leaves with a line, from `perf script -F
/// ip,sym,srcline -G` limited to the JIT images (`--dsos`): a frame line, then its srcline on
/// the next line (`  Cart.java:14`) where perf has one. An inlined chain counts for its
/// innermost method, as pprof's inline frames do.
fn perf_lines(script: &str) -> BTreeMap<(String, String), u64> {
    let mut counts = BTreeMap::new();
    let mut function: Option<String> = None;
    for line in script.lines() {
        let trimmed = line.trim();
        match trimmed.split_once(' ') {
            // `ADDRESS SYMBOL`
            Some((address, symbol)) if u64::from_str_radix(address, 16).is_ok() => {
                let innermost = symbol.split(" <- ").next().unwrap_or(symbol);
                function = Some(innermost.to_owned());
            }
            // `FILE:LINE`, or `??:0` where perf has none.
            _ => {
                let function = function.take();
                if let Some(name) = function.filter(|_| !trimmed.starts_with("??")) {
                    *counts.entry((name, trimmed.to_owned())).or_default() += 1;
                }
            }
        }
    }
    counts
}

/// `go tool pprof -top -lines`' flat per `(function, FILE:LINE)`, the file's last component
/// (perf prints the file name, pprof the debug info's path).
fn pprof_lines(top: &str) -> BTreeMap<(String, String), u64> {
    top.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flat = fields.first()?.parse().ok()?;
            let (position, function) = fields.get(5..)?.split_last()?;
            let (file, number) = position.rsplit_once(':')?;
            number.parse::<u32>().ok()?;
            let file = file.rsplit('/').next().unwrap_or(file);
            Some(((function.join(" "), format!("{file}:{number}")), flat))
        })
        .collect()
}

fn jit_images(dump_dir: &Path) -> String {
    let mut images: Vec<String> = fs::read_dir(dump_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "so"))
        .map(|path| path.display().to_string())
        .collect();
    images.sort();
    images.join(",")
}

#[test]
fn jit_frames_lines_in_pprof_are_perf_scripts() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = java_work(test) else {
        return;
    };
    let work = work.path();
    let command = [
        "java",
        "-cp",
        "classes",
        "org.example.shop.Cart",
        "60000",
        "1",
    ];
    if record(test, work, "jvm.data", &command).is_none() {
        return;
    }
    if !go_or_skip(test) {
        return;
    }
    let stderr = report(work, &["jvm.data", "--pprof", "jvm.pb.gz"]);
    println!("{stderr}");
    let dump = fs::read_dir(work)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().contains("jvm.data.jitted-"))
        .flat_map(|dir| fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()))
        .flat_map(|dir| fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()))
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("jit-") && n.ends_with(".dump"))
        })
        .expect("perfclock record's copy of the JVM's dump");
    let images = jit_images(dump.parent().unwrap());
    let script = run(
        work,
        "perf",
        &[
            "script",
            "-F",
            "ip,sym,srcline",
            "-G",
            "--dsos",
            &images,
            "-i",
            "jvm.data",
        ],
    );
    let perf = perf_lines(&script);
    let top = |profile: &str| {
        go_pprof(
            work,
            &[
                "-top",
                "-lines",
                "-sample_index=samples",
                "-symbolize=none",
                "-nodecount=100000",
                "-nodefraction=0",
                profile,
            ],
        )
    };
    let pprof = pprof_lines(&top("jvm.pb.gz"));
    println!("perf script: {perf:#?}");
    let cart: Vec<_> = perf
        .iter()
        .filter(|((function, _), _)| function.starts_with("org.example.shop.Cart."))
        .collect();
    assert!(
        cart.len() >= 3 && cart.iter().map(|(_, &n)| n).sum::<u64>() >= 1000,
        "the workload's lines in perf script: {cart:?}"
    );
    for (key, count) in &perf {
        assert_eq!(
            pprof.get(key),
            Some(count),
            "{key:?}: pprof against perf script"
        );
    }
    let pprof_cart: u64 = pprof
        .iter()
        .filter(|((function, _), _)| function.starts_with("org.example.shop.Cart."))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(
        pprof_cart,
        cart.iter().map(|(_, &n)| n).sum::<u64>(),
        "pprof gives the workload no line perf does not"
    );

    // Control: without the dump, no lines.
    fs::rename(&dump, dump.with_extension("moved")).unwrap();
    let stderr = report(work, &["jvm.data", "--pprof", "nodump.pb.gz"]);
    assert!(
        stderr.contains("warning: no source lines from ")
            && stderr.contains(&*dump.to_string_lossy()),
        "{stderr}"
    );
    let without = pprof_lines(&top("nodump.pb.gz"));
    assert!(
        !without
            .keys()
            .any(|(function, _)| function.starts_with("org.example.shop.Cart.")),
        "{without:?}"
    );
}
