//! `perfclock report --diff`: a JVM program recorded twice under `perfclock record`, the second
//! time with one function (`price`) four times slower and the others (`tax`, `ship`)
//! unchanged. In the differential flame graph `price` is the reddest frame and `tax` and `ship`
//! are neutral; `go tool pprof -diff_base` on the pprof pair shows each function's change in
//! self samples, equal to `perf script`'s; the flame graph's counts are NEW's `perf script`
//! counts. Controls: `--normalize` (BASE scaled to NEW's total) turns the unchanged functions
//! blue, which is why counts compare as they are by default; and the profiles of a plain report
//! keep each process's JIT image names, which the pair has taken out.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::common::{
    go_or_skip, go_pprof, java_work, perf_script, record, report, stacks, svg_frames, SvgFrame,
};

/// The workload's functions as perf names them, and as the flame graph shows them.
const FUNCTIONS: [(&str, &str); 3] = [
    (
        "org.example.shop.Cart.price(long, int)",
        "Cart.price(long, int) org.example.shop",
    ),
    (
        "org.example.shop.Cart.tax(long)",
        "Cart.tax(long) org.example.shop",
    ),
    (
        "org.example.shop.Cart.ship(long)",
        "Cart.ship(long) org.example.shop",
    ),
];

/// Rounds of the workload: about 2 s at BASE's speed on the project's machines.
const ROUNDS: &str = "60000";

/// The lightest a neutral frame's fill may be in any channel below white's 250 (inferno's
/// scale: 150 levels from no change to the graph's largest; 15 is a tenth of the largest).
const NEUTRAL_MIN: u8 = 235;

/// Each sample's leaf-first stack from `perf script` of `data`.
fn perf_stacks(work: &Path, data: &str) -> Vec<Vec<String>> {
    stacks(&perf_script(work, "comm,tid,time,ip,sym", data))
}

/// Samples with `function` at the leaf (innermost of an inlined chain, which perf names
/// `callee <- caller`) and anywhere in the stack.
fn counts(stacks: &[Vec<String>], function: &str) -> (i64, u64) {
    let is = |frame: &String| frame.starts_with(function);
    let leaf = stacks
        .iter()
        .filter(|stack| stack.first().is_some_and(is))
        .count() as i64;
    let anywhere = stacks
        .iter()
        .filter(|stack| stack.iter().any(|frame| frame.contains(function)))
        .count() as u64;
    (leaf, anywhere)
}

/// `go tool pprof -top`'s flat per function (negative in a diff).
fn flat(top: &str) -> BTreeMap<String, i64> {
    top.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            Some((fields.get(5..)?.join(" "), fields.first()?.parse().ok()?))
        })
        .collect()
}

/// Whether `fill` is within [`NEUTRAL_MIN`] of white in every channel.
fn neutral(fill: (u8, u8, u8)) -> bool {
    fill.0 >= NEUTRAL_MIN && fill.1 >= NEUTRAL_MIN && fill.2 >= NEUTRAL_MIN
}

/// How red `fill` is: 0 for white or blue, 150 for inferno's deepest red.
fn redness(fill: (u8, u8, u8)) -> u8 {
    if fill.0 == 255 && fill.1 == fill.2 {
        250u8.saturating_sub(fill.1)
    } else {
        0
    }
}

/// The frames of the flame graph `page` that show `shown`.
fn frames_of<'a>(frames: &'a [SvgFrame], shown: &str) -> Vec<&'a SvgFrame> {
    frames.iter().filter(|frame| frame.name == shown).collect()
}

#[test]
fn a_function_made_four_times_slower_is_the_reddest_and_pprof_shows_its_change() {
    let test = perfclock_testutil::test_name!();
    let Some(work) = java_work(test) else {
        return;
    };
    let work = work.path();
    for (data, slowdown) in [("base.data", "1"), ("new.data", "4")] {
        let command = [
            "java",
            "-cp",
            "classes",
            "org.example.shop.Cart",
            ROUNDS,
            slowdown,
        ];
        if record(test, work, data, &command).is_none() {
            return;
        }
    }
    report(
        work,
        &[
            "new.data",
            "--diff",
            "base.data",
            "-o",
            "diff.html",
            "--pprof",
            "new.pb.gz",
            "--pprof-base",
            "base.pb.gz",
        ],
    );
    let (base, new) = (
        perf_stacks(work, "base.data"),
        perf_stacks(work, "new.data"),
    );
    let frames = svg_frames(&fs::read_to_string(work.join("diff.html")).unwrap());
    let total = frames.iter().find(|f| f.name == "all").map(|f| f.samples);
    assert_eq!(total, Some(new.len() as u64), "the flame graph is NEW's");
    let mut changes = BTreeMap::new();
    for (perf_name, shown) in FUNCTIONS {
        let (base_leaf, _) = counts(&base, perf_name);
        let (new_leaf, new_anywhere) = counts(&new, perf_name);
        changes.insert(perf_name, new_leaf - base_leaf);
        let drawn = frames_of(&frames, shown);
        // inferno leaves out frames narrower than 0.1 px of its 1,200-px layout: in NEW's
        // 16,000 samples or so, frames of one sample.
        let drawn_samples: u64 = drawn.iter().map(|f| f.samples).sum();
        let narrowest = new.len() as u64 / 12_000;
        assert!(
            drawn_samples <= new_anywhere && new_anywhere - drawn_samples <= new_anywhere / 1000,
            "{shown}: the flame graph's {drawn_samples} against NEW's perf script's \
             {new_anywhere} (frames of {narrowest} samples or fewer are not drawn)"
        );
        println!(
            "{perf_name}: perf script self samples {base_leaf} -> {new_leaf}, fills {:?}",
            drawn.iter().map(|f| f.fill).collect::<Vec<_>>()
        );
    }
    let (price, tax, ship) = (FUNCTIONS[0].1, FUNCTIONS[1].1, FUNCTIONS[2].1);
    let reddest = frames
        .iter()
        .max_by_key(|frame| (redness(frame.fill), frame.samples))
        .unwrap();
    assert_eq!(reddest.name, price, "the reddest frame: {reddest:?}");
    assert!(redness(reddest.fill) >= 140, "price's red: {reddest:?}");
    for unchanged in [tax, ship] {
        for frame in frames_of(&frames, unchanged) {
            assert!(neutral(frame.fill), "{unchanged} is not neutral: {frame:?}");
        }
    }

    if !go_or_skip(test) {
        return;
    }
    let pprof = |args: &[&str]| {
        let mut all = vec!["-symbolize=none"];
        all.extend_from_slice(args);
        go_pprof(work, &all)
    };
    let top = pprof(&[
        "-diff_base",
        "base.pb.gz",
        "-top",
        "-sample_index=samples",
        "-nodecount=100000",
        "-nodefraction=0",
        "new.pb.gz",
    ]);
    println!("{top}");
    let flat = flat(&top);
    for (function, change) in &changes {
        assert_eq!(
            flat.get(*function),
            Some(change),
            "{function}: pprof -diff_base's flat against perf script's change"
        );
    }
    assert!(
        changes[FUNCTIONS[0].0] > 2 * changes[FUNCTIONS[1].0].abs().max(1),
        "price's change is not the workload's: {changes:?}"
    );
    // The pair names JIT code as one image; a plain report keeps each process's.
    let raw = pprof(&["-raw", "base.pb.gz"]);
    assert!(raw.contains("[jit]") && !raw.contains("jitted-"), "{raw}");
    report(work, &["base.data", "--pprof", "plain.pb.gz"]);
    assert!(pprof(&["-raw", "plain.pb.gz"]).contains("jitted-"));

    // Control: scaled to NEW's total, BASE's unchanged functions weigh more than NEW's, and
    // turn blue.
    report(
        work,
        &[
            "new.data",
            "--diff",
            "base.data",
            "--normalize",
            "-o",
            "normalized.html",
        ],
    );
    let normalized = svg_frames(&fs::read_to_string(work.join("normalized.html")).unwrap());
    for unchanged in [tax, ship] {
        let drawn = frames_of(&normalized, unchanged);
        println!(
            "--normalize: {unchanged}: {:?}",
            drawn.iter().map(|f| f.fill).collect::<Vec<_>>()
        );
        assert!(
            drawn
                .iter()
                .all(|frame| frame.fill.2 == 255 && frame.fill.0 < NEUTRAL_MIN),
            "scaled by total samples, {unchanged} should be blue: {drawn:?}"
        );
    }
}
