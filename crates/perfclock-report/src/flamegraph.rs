//! The flame graph of a recording: its stacks folded into the FlameGraph suite's format
//! (`root;...;leaf COUNT`, [`folded`]) and drawn as inferno's interactive SVG ([`write_svg`],
//! or inline in an HTML page, [`write_html`]), which opens offline in any browser: click to zoom, Ctrl-F or the Search button to highlight,
//! each frame's share in its tooltip.
//!
//! Each sample counts once, whatever its period: the totals are then `perf script`'s sample
//! counts (perf report's `Samples` column), and samples of events with different units (cycles,
//! nanoseconds) never add up to a meaningless sum.
//!
//! Frames carry the FlameGraph suite's annotations, which inferno strips from the names it shows:
//! kernel code `_[k]`, JIT code `_[j]`, code a JIT inlined `_[i]`. The JVMTI agent names a
//! stretch of inlined code `callee <- caller <- ... <- compiled method`, one perf frame; here it
//! becomes the frames it stands for, the compiled method `_[j]` and each inlined method `_[i]`
//! above it, so a method weighs the same inlined or not.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;

use inferno::flamegraph::color::{Color, MultiPalette, PaletteMap};
use inferno::flamegraph::{from_lines, Direction, Options, Palette, TextTruncateDirection};

use crate::error::FlameGraphError;
use crate::samples::{Frame, FrameKind, Sample};

/// What goes below each stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Split {
    /// Nothing: one graph for all processes.
    #[default]
    None,
    /// A root frame per process, `comm-pid` (the comm of its main thread where it was sampled).
    Process,
    /// A root frame per thread, `comm-pid/tid`.
    Thread,
    /// A root frame per marker span name ([`Sample::marker`]), [`NO_MARKER`] for the samples
    /// outside every span.
    Marker,
}

/// The root of the samples outside every marker span in [`Split::Marker`].
pub const NO_MARKER: &str = "[no marker]";

/// What the SVG shows besides the stacks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlameGraphOptions {
    /// The title at the top.
    pub title: String,
    /// A line under the title (the recording, its event), if any.
    pub subtitle: Option<String>,
    /// What goes below each stack.
    pub split: Split,
    /// An icicle graph: the root at the top, callees below their callers.
    pub icicle: bool,
}

impl Default for FlameGraphOptions {
    fn default() -> Self {
        FlameGraphOptions {
            title: "Flame Graph".to_owned(),
            subtitle: None,
            split: Split::None,
            icicle: false,
        }
    }
}

/// The folded stacks of `samples`, `root;...;leaf COUNT`, one line per distinct stack, sorted;
/// each sample counts once, so the counts sum to `samples.len()`.
pub fn folded(samples: &[Sample], split: Split) -> Vec<String> {
    Folded::new(samples, split).lines()
}

/// Writes the interactive SVG flame graph of `samples` to `out`.
///
/// inferno's `java` palette colours by the annotations: kernel orange, JIT green, inlined aqua.
/// Its guess for names without one takes `JVM_Sleep` or `libjvm.so` for Java, so native frames
/// are pinned to its native hues (red, C++ yellow) and the split's roots to blue.
///
/// # Errors
/// [`FlameGraphError`].
pub fn write_svg(
    samples: &[Sample],
    options: &FlameGraphOptions,
    out: impl Write,
) -> Result<(), FlameGraphError> {
    if samples.is_empty() {
        return Err(FlameGraphError::NoSamples);
    }
    let folded = Folded::new(samples, options.split);
    let mut pinned = PaletteMap::default();
    for name in &folded.native {
        pinned.insert(name, native_color(name));
    }
    for name in &folded.roots {
        pinned.insert(name, shade(name, Hue::Blue));
    }
    draw(&folded, pinned, options, out)
}

/// Two recordings to compare: NEW drawn, coloured by how each function changed since BASE.
#[derive(Debug, Clone, Copy)]
pub struct Diff<'a> {
    /// What NEW is compared with.
    pub base: &'a [Sample],
    /// What is drawn.
    pub new: &'a [Sample],
    /// Whether BASE's counts are scaled to NEW's total before comparing (for recordings of
    /// different lengths or loads); otherwise counts compare as they are.
    pub normalize: bool,
}

/// Writes the differential flame graph of `diff` to `out`: NEW's stacks, each frame coloured
/// by its function's change in self samples (samples with it at the leaf) from BASE to NEW,
/// over the whole recording: red where NEW has more, blue where it has fewer, white where they
/// are equal, the deepest shade for the largest change of the graph (inferno's differential
/// scale). A function BASE has and NEW lacks is not drawn; BASE's share shows in its
/// colour's absence.
///
/// Names are compared as [`write_svg`] shows them; [`comparable`](crate::compare::comparable)
/// makes JIT names of two processes comparable.
///
/// # Errors
/// [`FlameGraphError`].
pub fn write_diff_svg(
    diff: &Diff<'_>,
    options: &FlameGraphOptions,
    out: impl Write,
) -> Result<(), FlameGraphError> {
    if diff.new.is_empty() || diff.base.is_empty() {
        return Err(FlameGraphError::NoSamples);
    }
    let new = Folded::new(diff.new, options.split);
    let base = Folded::new(diff.base, options.split);
    let scale = if diff.normalize {
        diff.new.len() as f64 / diff.base.len() as f64
    } else {
        1.0
    };
    let (new_self, base_self) = (new.self_counts(), base.self_counts());
    let deltas: BTreeMap<&str, f64> = new
        .names()
        .into_iter()
        .map(|name| {
            let count = |counts: &HashMap<&str, u64>| counts.get(name).copied().unwrap_or(0);
            let delta = count(&new_self) as f64 - scale * count(&base_self) as f64;
            (name, delta)
        })
        .collect();
    let largest = deltas
        .values()
        .fold(0.0_f64, |max, delta| max.max(delta.abs()));
    let mut pinned = PaletteMap::default();
    for (name, delta) in &deltas {
        pinned.insert(name, change_color(*delta, largest));
    }
    // inferno's root (`all`), whose function is empty, is no function's change.
    pinned.insert("", change_color(0.0, largest));
    draw(&new, pinned, options, out)
}

/// inferno's differential colour for a change of `delta` samples where the largest of the
/// graph is `largest`: red for growth, blue for shrinkage, deeper as it nears the largest;
/// near white for none.
fn change_color(delta: f64, largest: f64) -> Color {
    if delta == 0.0 || largest == 0.0 {
        return Color {
            r: 250,
            g: 250,
            b: 250,
        };
    }
    let fade = 100 + (150.0 * (1.0 - delta.abs() / largest)) as u8;
    if delta > 0.0 {
        Color {
            r: 255,
            g: fade,
            b: fade,
        }
    } else {
        Color {
            r: fade,
            g: fade,
            b: 255,
        }
    }
}

/// Draws `folded` with inferno, the names in `pinned` in their colours.
fn draw(
    folded: &Folded,
    mut pinned: PaletteMap,
    options: &FlameGraphOptions,
    out: impl Write,
) -> Result<(), FlameGraphError> {
    let lines = folded.lines();
    let mut inferno = Options::default();
    inferno.title.clone_from(&options.title);
    inferno.subtitle.clone_from(&options.subtitle);
    inferno.colors = Palette::Multi(MultiPalette::Java);
    inferno.count_name = "samples".to_owned();
    if options.icicle {
        inferno.direction = Direction::Inverted;
    }
    // A frame's text starts with its function (see `shown_jit_name`): a name too long for its
    // frame loses its end, where the path, the package or the parameters are.
    inferno.text_truncate_direction = TextTruncateDirection::Right;
    // The same recording draws the same SVG.
    inferno.deterministic = true;
    inferno.palette_map = Some(&mut pinned);
    from_lines(&mut inferno, lines.iter().map(String::as_str), out).map_err(FlameGraphError::Write)
}

/// Writes the flame graph of `samples` to `out` as one HTML page: [`write_svg`]'s SVG inline,
/// script included, so the page is as interactive as the SVG and as self-contained (no fetch,
/// opens offline), and opens where an `.html` is what a browser, a mail client or a CI artifact
/// viewer expects.
///
/// # Errors
/// [`FlameGraphError`].
pub fn write_html(
    samples: &[Sample],
    options: &FlameGraphOptions,
    out: impl Write,
) -> Result<(), FlameGraphError> {
    let mut svg = Vec::new();
    write_svg(samples, options, &mut svg)?;
    html_page(&svg, options, out)
}

/// Writes the differential flame graph of `diff` ([`write_diff_svg`]) as one HTML page, as
/// [`write_html`] does.
///
/// # Errors
/// [`FlameGraphError`].
pub fn write_diff_html(
    diff: &Diff<'_>,
    options: &FlameGraphOptions,
    out: impl Write,
) -> Result<(), FlameGraphError> {
    let mut svg = Vec::new();
    write_diff_svg(diff, options, &mut svg)?;
    html_page(&svg, options, out)
}

/// `svg` inline in an HTML page.
fn html_page(
    svg: &[u8],
    options: &FlameGraphOptions,
    mut out: impl Write,
) -> Result<(), FlameGraphError> {
    // The XML declaration and DTD are the standalone file's; an HTML page starts at `<svg`.
    let at = svg
        .windows(5)
        .position(|window| window == b"<svg ")
        .unwrap_or_default();
    let title = options
        .title
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>html, body {{ margin: 0; background: #fff; }} svg {{ display: block; width: 100%; }}</style>\n\
         </head>\n<body>\n"
    )
    .and_then(|()| out.write_all(&svg[at..]))
    .and_then(|()| {
        // An icicle graph's root is at the top, where the page opens.
        if options.icicle {
            Ok(())
        } else {
            out.write_all(SCROLL_TO_ROOT)
        }
    })
    .and_then(|()| out.write_all(b"</body>\n</html>\n"))
    .map_err(FlameGraphError::Write)
}

/// The script that ends [`write_html`]'s page of a flame graph. A flame graph grows up from
/// its root, and a deep stack (a JVM's compiler threads) makes it taller than a window: the
/// page opens scrolled to the bottom, where the root and the widest frames are.
const SCROLL_TO_ROOT: &[u8] = b"
<script>
window.addEventListener(\"load\", function () {
    document.getElementsByTagName(\"svg\")[0].scrollIntoView({ block: \"end\" });
});
</script>
";

/// The name perf gives a frame without a symbol, and a stack without frames.
const UNKNOWN: &str = "[unknown]";

/// How the JVMTI agent joins an inlined method to its callers in a JIT code name.
const INLINED_INTO: &str = " <- ";

/// The stacks of a recording, folded, and the names whose colour is pinned.
struct Folded {
    stacks: BTreeMap<String, u64>,
    native: BTreeSet<String>,
    roots: BTreeSet<String>,
}

impl Folded {
    fn new(samples: &[Sample], split: Split) -> Folded {
        let comms = match split {
            Split::Process => process_comms(samples),
            Split::None | Split::Thread | Split::Marker => HashMap::new(),
        };
        let mut folded = Folded {
            stacks: BTreeMap::new(),
            native: BTreeSet::new(),
            roots: BTreeSet::new(),
        };
        let mut names: Vec<String> = Vec::new();
        for sample in samples {
            names.clear();
            let root = match split {
                Split::None => None,
                Split::Process => {
                    let comm = comms.get(&sample.pid).copied().unwrap_or(&sample.comm);
                    Some(format!("{comm}-{}", sample.pid))
                }
                Split::Thread => Some(format!("{}-{}/{}", sample.comm, sample.pid, sample.tid)),
                Split::Marker => Some(sample.marker.as_deref().unwrap_or(NO_MARKER).to_owned()),
            };
            if let Some(root) = root {
                let root = safe_name(&root);
                folded.roots.insert(root.clone());
                names.push(root);
            }
            let first = names.len();
            for frame in sample.frames.iter().rev() {
                folded.push_frame(frame, &mut names);
            }
            if names.len() == first {
                // Still counted, so the total stays perf's sample count.
                folded.native.insert(UNKNOWN.to_owned());
                names.push(UNKNOWN.to_owned());
            }
            *folded.stacks.entry(names.join(";")).or_default() += 1;
        }
        folded
    }

    /// Appends the folded frames `frame` stands for, caller first.
    fn push_frame(&mut self, frame: &Frame, names: &mut Vec<String>) {
        let name = function_name(frame);
        match frame.kind {
            FrameKind::Kernel => names.push(safe_name(&name) + "_[k]"),
            FrameKind::Jit => {
                // `callee <- caller <- ... <- compiled method`: the code is the compiled method's.
                let mut methods = name.rsplit(INLINED_INTO);
                let compiled = methods.next().unwrap_or(&name);
                names.push(safe_name(&shown_jit_name(compiled)) + "_[j]");
                names.extend(methods.map(|inlined| safe_name(&shown_jit_name(inlined)) + "_[i]"));
            }
            FrameKind::Native | FrameKind::Unknown => {
                let name = safe_name(&name);
                self.native.insert(name.clone());
                names.push(name);
            }
        }
    }

    /// Each name's self samples: the samples of the stacks it ends.
    fn self_counts(&self) -> HashMap<&str, u64> {
        let mut counts: HashMap<&str, u64> = HashMap::new();
        for (stack, count) in &self.stacks {
            let leaf = stack.rsplit(';').next().unwrap_or(stack);
            *counts.entry(leaf).or_default() += count;
        }
        counts
    }

    /// Every name of a frame.
    fn names(&self) -> BTreeSet<&str> {
        self.stacks
            .keys()
            .flat_map(|stack| stack.split(';'))
            .collect()
    }

    fn lines(&self) -> Vec<String> {
        self.stacks
            .iter()
            .map(|(stack, count)| format!("{stack} {count}"))
            .collect()
    }
}

/// A JIT method's name as its frame shows it, function first, so that cutting the end of a
/// name that does not fit its frame keeps the function. A Java method as the JVM agent names
/// it, `PACKAGE.Class.method(PARAMETERS)`, becomes `Class.method(PARAMETERS) PACKAGE`; other
/// names start with their function already (V8's `JS:*parseExpr /app/hot.js:3:19`, a stub's
/// `call_stub`) and stay as they are. Nothing is dropped: the tooltip and the search see the
/// whole text.
fn shown_jit_name(name: &str) -> Cow<'_, str> {
    let Some(head) = name
        .strip_suffix(')')
        .and_then(|rest| rest.split_once('(').map(|(head, _)| head))
    else {
        return Cow::Borrowed(name);
    };
    // A Java method's qualified name has no space and no colon (V8's, CPython's and .NET's
    // names have one or both).
    if head.contains([' ', ':']) {
        return Cow::Borrowed(name);
    }
    let Some((class, _method)) = head.rsplit_once('.') else {
        return Cow::Borrowed(name);
    };
    match class.rsplit_once('.') {
        Some((package, _)) if !package.is_empty() => {
            Cow::Owned(format!("{} {package}", &name[package.len() + 1..]))
        }
        _ => Cow::Borrowed(name),
    }
}

/// Each process's comm: its main thread's where that was sampled, else its first sample's.
/// Threads name themselves (a JVM's `C2 CompilerThre`), and a process is one root.
fn process_comms(samples: &[Sample]) -> HashMap<u32, &str> {
    let mut comms: HashMap<u32, &str> = HashMap::new();
    for sample in samples {
        if sample.tid == sample.pid {
            comms.insert(sample.pid, &sample.comm);
        } else {
            comms.entry(sample.pid).or_insert(&sample.comm);
        }
    }
    comms
}

/// The frame's function, or `[image]` for an address perf found no symbol for in a known image
/// (as stackcollapse-perf names it).
fn function_name(frame: &Frame) -> Cow<'_, str> {
    if frame.function != UNKNOWN || frame.dso == UNKNOWN {
        return Cow::Borrowed(&frame.function);
    }
    let image = frame.dso.rsplit('/').next().unwrap_or(&frame.dso);
    if image.starts_with('[') {
        // Already bracketed: `[kernel.kallsyms]`, a module `[nf_conntrack]`.
        Cow::Borrowed(image)
    } else {
        Cow::Owned(format!("[{image}]"))
    }
}

/// `name` as one frame of a folded line, as inferno reads it back: `;` separates frames (so it
/// becomes `:`, as stackcollapse-perf writes it), a line break ends the line, the outer spaces
/// are trimmed, a last word that reads as a number is taken for a count, and a line starting
/// `# ` is a comment (so is a stack of one frame named `#`, which the count's space follows).
/// The spaces it would misread become no-break spaces, which look the same, and a `#` alone
/// gets one after it.
fn safe_name(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    // Trimmed after the control characters became spaces, which inferno would trim too.
    let mut safe = mapped.trim().to_owned();
    if safe.is_empty() {
        return UNKNOWN.to_owned();
    }
    if safe.starts_with("# ") {
        safe.replace_range(1..2, "\u{a0}");
    } else if safe == "#" {
        safe.push('\u{a0}');
    }
    if let Some(space) = safe.rfind(' ') {
        if reads_as_count(&safe[space + 1..]) {
            safe.replace_range(space..space + 1, "\u{a0}");
        }
    }
    safe
}

/// Whether inferno would read `word` as a sample count: digits, with at most one `.`.
fn reads_as_count(word: &str) -> bool {
    word.replacen('.', "", 1)
        .chars()
        .all(|c| c.is_ascii_digit())
}

/// The hues of inferno's palettes that pinned names take.
#[derive(Clone, Copy)]
enum Hue {
    Red,
    Yellow,
    Blue,
}

/// Native code's hue in inferno's java palette: C++ yellow, the rest red.
fn native_color(name: &str) -> Color {
    if name.contains("::") {
        shade(name, Hue::Yellow)
    } else {
        shade(name, Hue::Red)
    }
}

/// A shade of `hue` picked by `name`'s hash, with inferno's formulas for its basic palettes.
fn shade(name: &str, hue: Hue) -> Color {
    // FNV-1a: stable across machines and runs.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    let v = (hash >> 56) as f32 / 256.0;
    let t = |base: u8, span: f32| base + (span * v) as u8;
    let (r, g, b) = match hue {
        Hue::Red => (t(200, 55.0), t(50, 80.0), t(50, 80.0)),
        Hue::Yellow => (t(175, 55.0), t(175, 55.0), t(50, 20.0)),
        Hue::Blue => (t(80, 60.0), t(80, 60.0), t(205, 50.0)),
    };
    Color { r, g, b }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(comm: &str, pid: u32, tid: u32, frames: Vec<Frame>) -> Sample {
        Sample {
            comm: comm.to_owned(),
            pid,
            tid,
            time_ns: 1,
            period: 250_000,
            event: "cpu-clock:ppp".to_owned(),
            frames,
            marker: None,
        }
    }

    fn native(function: &str) -> Frame {
        Frame::new(0x1000, function, "/usr/lib/libc.so.6", FrameKind::Native)
    }

    #[test]
    fn kinds_are_annotated_and_inlined_code_becomes_its_methods() {
        let leaf_first = vec![
            Frame::new(
                0x1000,
                "__x64_sys_write",
                "[kernel.kallsyms]",
                FrameKind::Kernel,
            ),
            Frame::new(
                0x1000,
                "Hot.alpha(long) <- Hot.loop() <- Hot.main(java.lang.String[])",
                "/tmp/jitted-1-2.so",
                FrameKind::Jit,
            ),
            Frame::new(
                0x1000,
                "JavaCalls::call_helper",
                "/jvm/libjvm.so",
                FrameKind::Native,
            ),
            Frame::new(0x1000, "[unknown]", "/jvm/libjvm.so", FrameKind::Native),
            Frame::new(0x1000, "[unknown]", "[unknown]", FrameKind::Unknown),
        ];
        let lines = folded(&[sample("java", 1, 1, leaf_first)], Split::None);
        assert_eq!(
            lines,
            [
                "[unknown];[libjvm.so];JavaCalls::call_helper;Hot.main(java.lang.String[])_[j];\
              Hot.loop()_[i];Hot.alpha(long)_[i];__x64_sys_write_[k] 1"
            ]
        );
    }

    #[test]
    fn java_methods_show_their_class_and_method_first() {
        let cases = [
            ("java.lang.System.nanoTime()", "System.nanoTime() java.lang"),
            (
                "org.example.shop.Cart.total(java.util.List, int)",
                "Cart.total(java.util.List, int) org.example.shop",
            ),
            (
                "com.x.Foo$$Lambda$14/0x0000000800c03000.run()",
                "Foo$$Lambda$14/0x0000000800c03000.run() com.x",
            ),
            // Already function first, or not a Java method.
            ("Hot.alpha(long)", "Hot.alpha(long)"),
            (
                "JS:*parseExpr /app/hot.js:3:19",
                "JS:*parseExpr /app/hot.js:3:19",
            ),
            ("py::f:/app/a.py", "py::f:/app/a.py"),
            ("call_stub", "call_stub"),
            (".a.b()", ".a.b()"),
            (
                "void [System.Private.CoreLib] System.Threading.Thread.Start()",
                "void [System.Private.CoreLib] System.Threading.Thread.Start()",
            ),
        ];
        for (name, shown) in cases {
            assert_eq!(shown_jit_name(name), shown, "{name:?}");
        }
    }

    #[test]
    fn names_cannot_break_the_folded_format() {
        let cases = [
            ("LHot;alpha(J)J", "LHot:alpha(J)J"),
            ("  spaced out  ", "spaced out"),
            ("", "[unknown]"),
            ("line\nbreak", "line break"),
            ("worker 2", "worker\u{a0}2"),
            ("ratio 1.5", "ratio\u{a0}1.5"),
            ("# not a comment", "#\u{a0}not a comment"),
            ("#", "#\u{a0}"),
            (
                "\0\0# hidden behind control characters",
                "#\u{a0}hidden behind control characters",
            ),
            ("JS:*parse /app/hot.js:3:19", "JS:*parse /app/hot.js:3:19"),
        ];
        for (name, safe) in cases {
            assert_eq!(safe_name(name), safe, "{name:?}");
        }
    }

    #[test]
    fn splits_put_the_process_the_thread_or_the_marker_below() {
        let mut samples = [
            sample("C2 CompilerThre", 7, 9, vec![native("f")]),
            sample("java", 7, 7, vec![native("f")]),
            sample("node", 8, 10, vec![native("g")]),
        ];
        samples[1].marker = Some("a;b".to_owned());
        assert_eq!(
            folded(&samples, Split::Marker),
            ["[no marker];f 1", "[no marker];g 1", "a:b;f 1"]
        );
        assert_eq!(folded(&samples, Split::None), ["f 2", "g 1"]);
        assert_eq!(
            folded(&samples, Split::Process),
            ["java-7;f 2", "node-8;g 1"]
        );
        assert_eq!(
            folded(&samples, Split::Thread),
            ["C2 CompilerThre-7/9;f 1", "java-7/7;f 1", "node-8/10;g 1"]
        );
    }

    #[test]
    fn a_sample_without_frames_still_counts() {
        assert_eq!(
            folded(&[sample("x", 1, 1, Vec::new())], Split::None),
            ["[unknown] 1"]
        );
    }

    #[test]
    fn inferno_reads_back_every_sample() {
        // Names that inferno would misread if passed as they are: its total is the check.
        let samples: Vec<Sample> = ["worker 2", "a;b", "# x", "ratio 1.5", "plain"]
            .iter()
            .map(|name| sample("# 3", 1, 1, vec![native(name), native("main 4")]))
            .collect();
        let options = FlameGraphOptions {
            split: Split::Thread,
            ..FlameGraphOptions::default()
        };
        let mut svg = Vec::new();
        write_svg(&samples, &options, &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("total_samples=\"5\""), "{svg}");
        assert!(svg.contains("worker\u{a0}2 (1 samples, 20.00%)"), "{svg}");
    }

    #[test]
    fn a_stack_of_one_frame_named_hash_is_not_a_comment() {
        // Its folded line would start `# `, the count's space after the name.
        let samples = [sample("a", 1, 1, vec![native("#")])];
        let mut svg = Vec::new();
        write_svg(&samples, &FlameGraphOptions::default(), &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("total_samples=\"1\""), "{svg}");
    }

    /// `(function, rgb fill)` of each frame of an SVG inferno drew.
    fn fills(svg: &str) -> BTreeMap<String, String> {
        svg.split("<g><title>")
            .skip(1)
            .filter_map(|group| {
                let (title, rest) = group.split_once("</title>")?;
                let (name, _) = title.rsplit_once(" (")?;
                let (_, fill) = rest.split_once("fill=\"")?;
                Some((name.to_owned(), fill.split('"').next()?.to_owned()))
            })
            .collect()
    }

    #[test]
    fn a_diff_colours_each_function_by_its_change_in_self_samples() {
        let stack = |leaf: &str| vec![native(leaf), native("main")];
        let recording = |f: usize, g: usize, h: usize| -> Vec<Sample> {
            [("f", f), ("g", g), ("h", h)]
                .iter()
                .flat_map(|&(leaf, n)| (0..n).map(move |_| sample("a", 1, 1, stack(leaf))))
                .collect()
        };
        let (base, new) = (recording(10, 10, 20), recording(40, 10, 15));
        let draw = |normalize| {
            let mut svg = Vec::new();
            let diff = Diff {
                base: &base,
                new: &new,
                normalize,
            };
            write_diff_svg(&diff, &FlameGraphOptions::default(), &mut svg).unwrap();
            fills(&String::from_utf8(svg).unwrap())
        };
        let absolute = draw(false);
        // f: +30, the largest; g: 0; h: -5; main: never a leaf.
        assert_eq!(absolute["f"], "rgb(255,100,100)");
        assert_eq!(absolute["g"], "rgb(250,250,250)");
        assert_eq!(absolute["h"], "rgb(225,225,255)");
        assert_eq!(absolute["main"], "rgb(250,250,250)");
        assert_eq!(absolute["all"], "rgb(250,250,250)");
        // BASE scaled to NEW's 65 samples from its 40: f +23.75, the largest; g, unchanged,
        // -6.25 (a quarter of the largest's shade).
        let normalized = draw(true);
        assert_eq!(normalized["f"], "rgb(255,100,100)");
        assert_eq!(normalized["g"], "rgb(210,210,255)");
    }

    #[test]
    fn an_icicle_graph_puts_the_root_at_the_top() {
        let samples = [sample("a", 1, 1, vec![native("leaf"), native("main")])];
        let draw = |icicle| {
            let options = FlameGraphOptions {
                icicle,
                ..FlameGraphOptions::default()
            };
            let mut page = Vec::new();
            write_html(&samples, &options, &mut page).unwrap();
            String::from_utf8(page).unwrap()
        };
        // The y of a frame's rect.
        let y = |page: &str, name: &str| -> f64 {
            let (_, rest) = page.split_once(&format!("<title>{name} (")).unwrap();
            let (_, rest) = rest.split_once(" y=\"").unwrap();
            rest.split('"').next().unwrap().parse().unwrap()
        };
        let (flame, icicle) = (draw(false), draw(true));
        assert!(y(&flame, "all") > y(&flame, "main") && y(&flame, "main") > y(&flame, "leaf"));
        assert!(y(&icicle, "all") < y(&icicle, "main") && y(&icicle, "main") < y(&icicle, "leaf"));
        assert!(icicle.contains("var inverted = true;") && flame.contains("var inverted = false;"));
        assert!(flame.contains("scrollIntoView") && !icicle.contains("scrollIntoView"));
        assert!(icicle.ends_with("</body>\n</html>\n"));
    }

    #[test]
    fn no_samples_is_an_error_not_an_svg_saying_so() {
        let mut svg = Vec::new();
        let error = write_svg(&[], &FlameGraphOptions::default(), &mut svg).unwrap_err();
        assert!(matches!(error, FlameGraphError::NoSamples));
        assert!(svg.is_empty());
    }

    #[test]
    fn pinned_shades_stay_in_their_hue() {
        for name in ["JVM_Sleep", "libjvm.so", "x"] {
            let Color { r, g, b } = shade(name, Hue::Red);
            assert!(r >= 200 && g < 130 && b < 130);
            let Color { r, g, b } = shade(name, Hue::Blue);
            assert!(b >= 205 && r < 140 && g < 140);
        }
        assert_eq!(native_color("A::b"), shade("A::b", Hue::Yellow));
    }
}
