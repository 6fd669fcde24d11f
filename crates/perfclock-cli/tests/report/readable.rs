//! The hot JIT functions' names survive in their frames as a browser draws them: Node's and a
//! JVM's recordings under `perfclock record`, reported as HTML and opened in headless Chromium
//! in a window narrow enough that the names do not fit. The widest frames of the workload's
//! functions show the function, and their tooltips and the search keep the whole text. The
//! control is the same page with inferno's default (the left of a name cut): the function goes.
//! The same holds for the SVG alone.
//! The icicle graph (`--icicle`) keeps the names and puts the root at the top.

use std::fs;
use std::path::Path;

use crate::common::{
    chromium_dom, java_work, record, report, svg_frames, tools_or_skip, SvgFrame, HOT_JS,
};

/// A window in which the workloads' widest JIT frames are too narrow for their names.
const WINDOW_WIDTH: u32 = 700;

/// How many of the widest frames of the workload's functions are read.
const WIDEST: usize = 3;

/// The widest frames (at most [`WIDEST`]) that `workload` says are the workload's, with text.
fn widest(frames: &[SvgFrame], workload: impl Fn(&str) -> bool) -> Vec<SvgFrame> {
    let mut frames: Vec<SvgFrame> = frames
        .iter()
        .filter(|frame| workload(&frame.name) && !frame.text.trim().is_empty())
        .cloned()
        .collect();
    frames.sort_by_key(|frame| std::cmp::Reverse(frame.samples));
    frames.truncate(WIDEST);
    frames
}

/// Opens `page` in Chromium as perfclock wrote it and as inferno's default would cut names:
/// the widest workload frames must show `function(name)` in the first, and one at least must
/// lose it in the control.
fn check(work: &Path, page: &Path, workload: fn(&str) -> bool, function: fn(&str) -> String) {
    let html = fs::read_to_string(page).unwrap();
    assert!(
        html.contains("var truncate_text_right = true;"),
        "the page cuts names on the right"
    );
    let frames = widest(
        &svg_frames(&chromium_dom(work, page, WINDOW_WIDTH)),
        workload,
    );
    println!("{}: {frames:#?}", page.display());
    assert_eq!(frames.len(), WIDEST, "the workload's frames: {frames:#?}");
    for frame in &frames {
        let name = function(&frame.name);
        assert!(
            frame.text.contains(&name),
            "the frame of {:?} shows {:?}, without {name:?}",
            frame.name,
            frame.text
        );
    }
    assert!(
        frames
            .iter()
            .any(|frame| frame.text.trim_end().ends_with("..")),
        "no frame was too narrow for its name: the window checks nothing"
    );

    let control = page.with_extension(format!(
        "control.{}",
        page.extension().and_then(|e| e.to_str()).unwrap_or("html")
    ));
    fs::write(
        &control,
        html.replace(
            "var truncate_text_right = true;",
            "var truncate_text_right = false;",
        ),
    )
    .unwrap();
    let cut = widest(
        &svg_frames(&chromium_dom(work, &control, WINDOW_WIDTH)),
        workload,
    );
    let lost: Vec<&SvgFrame> = cut
        .iter()
        .filter(|frame| {
            frame.text.starts_with("..") && !frame.text.contains(&function(&frame.name))
        })
        .collect();
    assert!(
        !lost.is_empty(),
        "cut on the left, some frame should lose its function: {cut:#?}"
    );
}

/// V8's `JS:*parseTerm /dir/hot.js:11:19`: `parseTerm`.
fn js_function(name: &str) -> String {
    let word = name.split(' ').next().unwrap_or(name);
    word.trim_start_matches("JS:")
        .trim_start_matches(['*', '~', '^', '+'])
        .to_owned()
}

/// `Cart.price(long, int) org.example.shop`: `Cart.price`.
fn java_function(name: &str) -> String {
    name.split('(').next().unwrap_or(name).to_owned()
}

#[test]
fn node_frames_show_their_functions_when_cut() {
    let test = perfclock_testutil::test_name!();
    if !tools_or_skip(
        test,
        &[
            ("perf", "--version"),
            ("node", "--version"),
            ("chromium", "--version"),
        ],
    ) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let work = work.path();
    fs::create_dir(work.join("home")).unwrap();
    fs::write(work.join("hot.js"), HOT_JS).unwrap();
    if record(test, work, "node.data", &["node", "hot.js", "2000"]).is_none() {
        return;
    }
    report(work, &["node.data", "-o", "node.html"]);
    let workload = |name: &str| name.starts_with("JS:") && name.contains("/hot.js:");
    check(work, &work.join("node.html"), workload, js_function);
    // The SVG alone, as the browser draws it.
    report(work, &["node.data", "-o", "node.svg"]);
    check(work, &work.join("node.svg"), workload, js_function);

    // The icicle graph as the browser lays it out: the root above every workload frame, the
    // names as readable.
    report(work, &["node.data", "--icicle", "-o", "icicle.html"]);
    check(work, &work.join("icicle.html"), workload, js_function);
    let frames = svg_frames(&chromium_dom(work, &work.join("icicle.html"), WINDOW_WIDTH));
    let root = frames.iter().find(|frame| frame.name == "all").unwrap();
    let highest = frames
        .iter()
        .filter(|frame| workload(&frame.name))
        .map(|frame| frame.y)
        .fold(f64::INFINITY, f64::min);
    assert!(
        root.y < highest,
        "the icicle's root at y {} is not above its workload frames (from y {highest})",
        root.y
    );
    let flame = svg_frames(&chromium_dom(work, &work.join("node.html"), WINDOW_WIDTH));
    let flame_root = flame.iter().find(|frame| frame.name == "all").unwrap();
    assert!(flame
        .iter()
        .filter(|frame| workload(&frame.name))
        .all(|frame| frame.y < flame_root.y));
}

#[test]
fn java_frames_show_class_and_method_first() {
    let test = perfclock_testutil::test_name!();
    if !tools_or_skip(test, &[("chromium", "--version")]) {
        return;
    }
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
    let workload = |name: &str| name.starts_with("Cart.") && name.ends_with(") org.example.shop");
    for page in ["jvm.html", "jvm.svg"] {
        report(work, &["jvm.data", "-o", page]);
        check(work, &work.join(page), workload, java_function);
    }
}
