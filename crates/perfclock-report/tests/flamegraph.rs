//! The flame graph of a synthetic recording, read as `perf script`'s two runs print it: the
//! folded stacks against the samples, the SVG's self-containment, and what a browser draws from
//! it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use perfclock_report::flamegraph::{folded, write_svg, FlameGraphOptions, Split};
use perfclock_report::{read_structure, Sample};
use perfclock_testutil::{skip, Need};

const JIT: &str = "/tmp/out.data.jit-1/jitted-4242-17.so";
const LIBJVM: &str = "/usr/lib/jvm/java-17/lib/server/libjvm.so";
const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";
const KERNEL: &str = "[kernel.kallsyms]";

/// The Java thread's callers, leaf first.
const JAVA_BASE: &[(&str, &str)] = &[
    ("Hot.main(java.lang.String[])", JIT),
    ("[unknown]", LIBJVM),
    (
        "JavaCalls::call_helper(JavaValue*, methodHandle const&, JavaCallArguments*, JavaThread*)",
        LIBJVM,
    ),
    ("start_thread", LIBC),
];

/// Stacks (leaf first, above `base`), each with its sample count and thread.
struct Stack {
    comm: &'static str,
    pid: u32,
    tid: u32,
    frames: &'static [(&'static str, &'static str)],
    base: &'static [(&'static str, &'static str)],
    samples: usize,
}

const STACKS: &[Stack] = &[
    // The compiler thread first: the process's root still takes the main thread's name.
    Stack {
        comm: "C2 CompilerThre",
        pid: 4242,
        tid: 4250,
        frames: &[
            ("Compile::Optimize()", LIBJVM),
            (
                "C2Compiler::compile_method(ciEnv*, ciMethod*, int, bool, DirectiveSet*)",
                LIBJVM,
            ),
            ("CompileBroker::compiler_thread_loop()", LIBJVM),
            ("start_thread", LIBC),
        ],
        base: &[],
        samples: 15,
    },
    Stack {
        comm: "java",
        pid: 4242,
        tid: 4243,
        frames: &[("Hot.alpha(long)", JIT)],
        base: JAVA_BASE,
        samples: 120,
    },
    Stack {
        comm: "java",
        pid: 4242,
        tid: 4243,
        frames: &[
            ("clear_page_erms", KERNEL),
            ("handle_mm_fault", KERNEL),
            ("asm_exc_page_fault", KERNEL),
            ("Hot.alpha(long)", JIT),
        ],
        base: JAVA_BASE,
        samples: 20,
    },
    Stack {
        comm: "java",
        pid: 4242,
        tid: 4243,
        frames: &[("Hot.beta(int) <- Hot.gamma(long)", JIT)],
        base: JAVA_BASE,
        samples: 25,
    },
    Stack {
        comm: "java",
        pid: 4242,
        tid: 4243,
        frames: &[("LHot;delta(J)J", JIT)],
        base: JAVA_BASE,
        samples: 10,
    },
    Stack {
        comm: "java",
        pid: 4242,
        tid: 4242,
        frames: &[
            ("__futex_abstimed_wait_common", LIBC),
            ("JavaMain", "/usr/lib/jvm/java-17/lib/libjli.so"),
            ("start_thread", LIBC),
        ],
        base: &[],
        samples: 3,
    },
    Stack {
        comm: "node",
        pid: 5151,
        tid: 5151,
        frames: &[
            (
                "JS:*parseExpr /app/hot.js:3:19",
                "/tmp/x.jit-1/jitted-5151-9.so",
            ),
            ("node::Start(int, char**)", "/usr/bin/node"),
            ("__libc_start_main", LIBC),
        ],
        base: &[],
        samples: 30,
    },
];

/// The recording as `perf script`'s two runs print it (structure, then names), samples
/// interleaved.
fn perf_script_output() -> (String, String) {
    let (mut structure, mut names) = (String::new(), String::new());
    let most = STACKS.iter().map(|s| s.samples).max().unwrap_or(0);
    let mut time_ns = 2_412_000_000_000_u64;
    for round in 0..most {
        for stack in STACKS.iter().filter(|s| round < s.samples) {
            time_ns += 250_000;
            let ids = format!(
                "{}/{} {}.{:09}: ",
                stack.pid,
                stack.tid,
                time_ns / 1_000_000_000,
                time_ns % 1_000_000_000
            );
            structure += &format!("{} {ids}    250000 cpu-clock:ppp: \n", stack.comm);
            names += &format!("{ids}\n");
            for (ip, (function, dso)) in
                (0x7f1c_2a40_u64..).zip(stack.frames.iter().chain(stack.base))
            {
                structure += &format!("\t    {ip:x}\n");
                names += &format!("\t    {ip:x} {function} ({dso})\n");
            }
            structure += "\n";
            names += "\n";
        }
    }
    (structure, names)
}

fn recording() -> Vec<Sample> {
    let (structure, names) = perf_script_output();
    let samples = read_structure(structure.as_bytes())
        .unwrap()
        .read_names(names.as_bytes())
        .unwrap();
    assert_eq!(
        samples.len(),
        STACKS.iter().map(|s| s.samples).sum::<usize>()
    );
    samples
}

/// A folded line's frames and count.
fn split_line(line: &str) -> (Vec<&str>, u64) {
    let (stack, count) = line.rsplit_once(' ').unwrap();
    (stack.split(';').collect(), count.parse().unwrap())
}

/// A folded frame's name as inferno shows it: without its annotation.
fn shown(frame: &str) -> &str {
    ["_[k]", "_[j]", "_[i]"]
        .iter()
        .find_map(|suffix| frame.strip_suffix(suffix))
        .unwrap_or(frame)
}

#[test]
fn folded_counts_are_the_samples_and_each_leaf_keeps_its_count() {
    let samples = recording();
    // The leaf function a reader expects: the innermost method of inlined code, `;` as `:`.
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for sample in &samples {
        let leaf = sample.frames[0].function.split(" <- ").next().unwrap();
        *expected.entry(leaf.replace(';', ":")).or_default() += 1;
    }
    for split in [Split::None, Split::Process, Split::Thread] {
        let lines = folded(&samples, split);
        let mut leaves: BTreeMap<String, u64> = BTreeMap::new();
        for line in &lines {
            let (frames, count) = split_line(line);
            *leaves
                .entry(shown(frames.last().unwrap()).to_owned())
                .or_default() += count;
        }
        assert_eq!(
            leaves.values().sum::<u64>(),
            samples.len() as u64,
            "{split:?}"
        );
        assert_eq!(leaves, expected, "{split:?}");
    }
}

#[test]
fn split_modes_put_processes_or_threads_at_the_root() {
    let samples = recording();
    let roots = |split| -> BTreeSet<String> {
        folded(&samples, split)
            .iter()
            .map(|line| split_line(line).0[0].to_owned())
            .collect()
    };
    assert_eq!(roots(Split::Process), set(&["java-4242", "node-5151"]));
    assert_eq!(
        roots(Split::Thread),
        set(&[
            "C2 CompilerThre-4242/4250",
            "java-4242/4242",
            "java-4242/4243",
            "node-5151/5151"
        ])
    );
    assert_eq!(
        roots(Split::None),
        set(&["start_thread", "__libc_start_main"])
    );
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|&n| n.to_owned()).collect()
}

#[test]
fn frames_are_annotated_by_kind() {
    let lines = folded(&recording(), Split::None);
    let frames: BTreeSet<&str> = lines.iter().flat_map(|l| split_line(l).0).collect();
    for frame in [
        "clear_page_erms_[k]",
        "asm_exc_page_fault_[k]",
        "Hot.alpha(long)_[j]",
        "JS:*parseExpr /app/hot.js:3:19_[j]",
        "LHot:delta(J)J_[j]",
        // Inlined code: the compiled method, then the method inlined into it.
        "Hot.gamma(long)_[j]",
        "Hot.beta(int)_[i]",
        "[libjvm.so]",
        "start_thread",
        "node::Start(int, char**)",
    ] {
        assert!(frames.contains(frame), "{frame} not in {frames:#?}");
    }
    assert!(
        lines.iter().any(|l| l
            .contains("Hot.main(java.lang.String[])_[j];Hot.gamma(long)_[j];Hot.beta(int)_[i] 25")),
        "{lines:#?}"
    );
}

fn svg_of(samples: &[Sample]) -> String {
    let mut options = FlameGraphOptions::default();
    options.title = "perfclock report: <synthetic> & hot".to_owned();
    options.split = Split::Process;
    let mut svg = Vec::new();
    write_svg(samples, &options, &mut svg).unwrap();
    String::from_utf8(svg).unwrap()
}

#[test]
fn the_svg_is_interactive_and_loads_nothing() {
    let svg = svg_of(&recording());
    // The title, escaped; the count's name; the embedded script's zoom and search.
    assert!(svg.contains("perfclock report: &lt;synthetic&gt; &amp; hot"));
    assert!(svg.contains("<title>Hot.alpha(long) (140 samples, 62.78%)</title>"));
    for script in ["function zoom(", "function search(", "ctrlKey", "<title>"] {
        assert!(svg.contains(script), "no {script}");
    }
    assert!(svg.contains(r#"total_samples="223""#));

    // Every absolute URL is a name, not a load: the DTD's system id (browsers never fetch it),
    // the namespaces, and links in the comments and in the script's text.
    let mut rest = svg.as_str();
    while let Some(at) = rest.find("://") {
        let start = rest[..at]
            .rfind(|c: char| !c.is_ascii_alphanumeric())
            .map_or(0, |i| i + 1);
        let end = rest[at..]
            .find(['"', ' ', '\'', ')', '<'])
            .map_or(rest.len(), |i| at + i);
        let (before, url) = (&rest[..start], &rest[start..end]);
        let named = [
            "//DTD SVG 1.1//EN\" \"",
            "xmlns=\"",
            "xmlns:xlink=\"",
            "xmlns:fg=\"",
        ]
        .iter()
        .any(|attribute| before.ends_with(attribute))
            || [
                "https://github.com/",
                "https://web.dev/",
                "http://www.brendangregg.com/",
            ]
            .iter()
            .any(|text| url.starts_with(text));
        assert!(named, "{url}");
        rest = &rest[end..];
    }
    for load in [
        "href=\"http",
        "src=",
        "url(http",
        "@import",
        "fetch(",
        "XMLHttpRequest",
        "<image",
        "import(",
    ] {
        assert!(!svg.contains(load), "{load}");
    }
}

/// Runs `command` to its end, killing it after `limit`.
fn run_with_limit(command: &mut Command, limit: Duration) -> std::process::Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).map(|_| out)
    });
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stderr.read_to_end(&mut out).map(|_| out)
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::process::Output {
        status,
        stdout: reader.join().unwrap().unwrap(),
        stderr: err_reader.join().unwrap().unwrap(),
    }
}

/// Headless Chromium, offline: every host name resolves to nothing.
fn chromium(profile: &Path, args: &[&str]) -> std::process::Output {
    let mut command = Command::new("chromium");
    command
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--window-size=1200,800",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args);
    let output = run_with_limit(&mut command, Duration::from_secs(120));
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn screenshot(dir: &Path, svg: &Path, name: &str) -> Png {
    let png = dir.join(name);
    chromium(
        &dir.join(format!("profile-{name}")),
        &[
            &format!("--screenshot={}", png.display()),
            &format!("file://{}", svg.display()),
        ],
    );
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
    Png::decode(&bytes)
}

#[test]
fn a_browser_draws_the_flame_graph_offline() {
    let test = perfclock_testutil::test_name!();
    match Command::new("chromium").arg("--version").output() {
        Ok(output) if output.status.success() => {}
        other => return skip(test, Need::Tool("chromium"), format_args!("{other:?}")),
    }
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("graph.svg");
    std::fs::write(&graph, svg_of(&recording())).unwrap();
    // The control: an empty SVG of the same size, drawn the same way.
    let empty = dir.path().join("empty.svg");
    std::fs::write(
        &empty,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="800"></svg>"#,
    )
    .unwrap();

    let drawn = screenshot(dir.path(), &graph, "graph.png");
    let blank = screenshot(dir.path(), &empty, "empty.png");
    assert_eq!((drawn.width, drawn.height), (1200, 800));
    let drawn_hues = drawn.hues();
    let blank_hues = blank.hues();
    println!("flame graph: {drawn_hues:?}\nempty: {blank_hues:?}");
    assert!(
        blank_hues.is_empty(),
        "the empty page has colour: {blank_hues:?}"
    );
    // Pixels of each kind's hue: JIT green, kernel orange, native red and yellow (pinned),
    // inlined aqua, the processes' roots blue. The hot JIT method alone is over half the width.
    let pixels = |hue| drawn_hues.get(hue).copied().unwrap_or(0);
    assert!(pixels("green") > 20_000, "{drawn_hues:?}");
    for hue in ["orange", "red", "yellow", "aqua", "blue"] {
        assert!(pixels(hue) > 500, "{hue}: {drawn_hues:?}");
    }

    let dom = chromium(
        &dir.path().join("profile-dom"),
        &["--dump-dom", &format!("file://{}", graph.display())],
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("Hot.alpha(long)"), "{dom}");
    // The name as shown: its annotation stripped.
    assert!(!dom.contains("Hot.alpha(long)_[j]"));
}

/// A PNG's pixels, as Chromium writes screenshots: 8-bit RGB or RGBA, not interlaced.
struct Png {
    width: usize,
    height: usize,
    /// RGB, row by row.
    rgb: Vec<[u8; 3]>,
}

impl Png {
    fn decode(bytes: &[u8]) -> Png {
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
        let mut at = 8;
        let (mut width, mut height, mut channels) = (0, 0, 0);
        let mut compressed = Vec::new();
        while at + 8 <= bytes.len() {
            let length = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let kind = &bytes[at + 4..at + 8];
            let data = &bytes[at + 8..at + 8 + length];
            match kind {
                b"IHDR" => {
                    width = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
                    height = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                    assert_eq!(data[8], 8, "bit depth");
                    channels = match data[9] {
                        2 => 3,
                        6 => 4,
                        other => panic!("colour type {other}"),
                    };
                    assert_eq!(data[12], 0, "interlaced");
                }
                b"IDAT" => compressed.extend_from_slice(data),
                b"IEND" => break,
                _ => {}
            }
            at += 12 + length;
        }
        let mut raw = Vec::new();
        flate2::read::ZlibDecoder::new(&compressed[..])
            .read_to_end(&mut raw)
            .unwrap();
        let stride = width * channels;
        assert_eq!(raw.len(), height * (stride + 1));
        let mut previous = vec![0u8; stride];
        let mut rgb = Vec::with_capacity(width * height);
        for row in raw.chunks(stride + 1) {
            let (filter, line) = (row[0], &row[1..]);
            let mut current = vec![0u8; stride];
            for i in 0..stride {
                let a = if i >= channels {
                    current[i - channels]
                } else {
                    0
                };
                let b = previous[i];
                let c = if i >= channels {
                    previous[i - channels]
                } else {
                    0
                };
                let predicted = match filter {
                    0 => 0,
                    1 => a,
                    2 => b,
                    3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                    4 => paeth(a, b, c),
                    other => panic!("filter {other}"),
                };
                current[i] = line[i].wrapping_add(predicted);
            }
            rgb.extend(current.chunks(channels).map(|p| [p[0], p[1], p[2]]));
            previous = current;
        }
        Png { width, height, rgb }
    }

    /// How many pixels fall in each of inferno's palette hues (the background's grey-yellow
    /// gradient, white, and text's black and grey in none).
    fn hues(&self) -> BTreeMap<&'static str, usize> {
        let mut hues = BTreeMap::new();
        for &[r, g, b] in &self.rgb {
            let hue = match (r, g, b) {
                (50..=110, 200..=255, 50..=110) => "green",
                (190..=255, 90..=155, 0..=10) => "orange",
                (50..=110, 165..=220, 165..=220) => "aqua",
                (200..=255, 50..=130, 50..=130) => "red",
                (175..=230, 175..=230, 50..=70) => "yellow",
                (80..=140, 80..=140, 205..=255) => "blue",
                _ => continue,
            };
            *hues.entry(hue).or_default() += 1;
        }
        hues
    }
}

fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let p = i16::from(a) + i16::from(b) - i16::from(c);
    let (pa, pb, pc) = (
        (p - i16::from(a)).abs(),
        (p - i16::from(b)).abs(),
        (p - i16::from(c)).abs(),
    );
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}
