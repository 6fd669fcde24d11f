//! `perfclock report IN [-o FLAME.html|FLAME.svg] [--pprof PROFILE.pb.gz] [--diff BASE
//! [--pprof-base BASE.pb.gz] [--normalize]]`: what a recording turns into, from the samples
//! `perf script` symbolizes (JIT names after `perf inject --jit`, which `perfclock record` has
//! run): an interactive flame graph that opens offline in any browser and a gzipped pprof
//! profile for `go tool pprof` and the fleet's profilers (`perfclock_report`); with `--diff`,
//! IN's flame graph coloured by the change since BASE and a pprof pair for `go tool pprof
//! -diff_base`. Each file is written complete under a temporary name and renamed, or not at
//! all; the recordings are only read.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, ExitCode, Stdio};

use perfclock_cli::{ReportArgs, SplitBy};
use perfclock_core::untrusted::Untrusted;
use perfclock_os::untrusted_file::{open_untrusted, Root};
use perfclock_perfdata::{
    check_output_path, maps_of, read_layout, ClockData, Feature, OutputFile, PerfDataError,
};
use perfclock_report::flamegraph::{self, Diff, FlameGraphOptions, Split};
use perfclock_report::jit_lines::{self, DumpLines};
use perfclock_report::markers::{self, Spans};
use perfclock_report::pprof::{self, PprofOptions};
use perfclock_report::{build_ids, compare};
use perfclock_report::{FrameKind, ParseError, Sample, SourceLine, NAMES_ARGS, STRUCTURE_ARGS};

use crate::output::{chain, errln};

const NAME: &str = "perfclock report";

/// Runs the subcommand.
pub(crate) fn run(options: &ReportArgs) -> ExitCode {
    match report(options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            errln!("{NAME}: error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn report(options: &ReportArgs) -> Result<(), String> {
    if options.flamegraph.is_none() && options.pprof.is_none() {
        return Err("nothing to write: pass -o FLAME.html, --pprof PROFILE.pb.gz, or both".into());
    }
    if options.diff.is_some() && options.pprof.is_some() != options.pprof_base.is_some() {
        return Err(
            "--diff writes pprof profiles in pairs: pass both --pprof NEW.pb.gz and --pprof-base \
             BASE.pb.gz, or neither"
                .into(),
        );
    }
    let outputs = [&options.flamegraph, &options.pprof, &options.pprof_base];
    for out in outputs.into_iter().flatten() {
        check_output_path(out).map_err(|e| chain(&e))?;
    }
    let samples = recording(options, &options.input)?;
    let (samples, base) = match &options.diff {
        None => (samples, None),
        Some(base_input) => {
            let base = recording(options, base_input)?;
            warn_if_incomparable(&base, &samples);
            (
                compare::comparable(samples),
                Some(compare::comparable(base)),
            )
        }
    };
    if let Some(path) = &options.flamegraph {
        write_flamegraph(options, path, &samples, base.as_deref())?;
    }
    if let Some(path) = &options.pprof {
        write_pprof(&options.input, path, &samples)?;
    }
    if let (Some(path), Some(base_input), Some(base)) = (&options.pprof_base, &options.diff, &base)
    {
        write_pprof(base_input, path, base)?;
        if let Some(new_path) = &options.pprof {
            errln!(
                "{NAME}: compare them with go tool pprof -diff_base {} -top {}",
                path.display(),
                new_path.display()
            );
        }
    }
    Ok(())
}

/// The samples of the recording `input`, read through perf script, each with the marker span
/// it lies in, only those `--during` asks for; said on standard error.
fn recording(options: &ReportArgs, input: &Path) -> Result<Vec<Sample>, String> {
    let mut samples = samples(input)?;
    if samples.is_empty() {
        return Err(format!("{} holds no sample", input.display()));
    }
    errln!(
        "{NAME}: {}: {} samples of {} thread(s) read through perf script",
        input.display(),
        samples.len(),
        samples.iter().map(|s| s.tid).collect::<HashSet<_>>().len()
    );
    add_jit_lines(&mut samples);
    let needs_markers = !options.during.is_empty() || options.split == Some(SplitBy::Marker);
    let spans = match marker_spans(input) {
        Ok(spans) => spans,
        Err(error) if needs_markers => return Err(error),
        Err(error) => {
            errln!(
                "{NAME}: warning: {}: no marker files searched: {error}",
                input.display()
            );
            Spans::new()
        }
    };
    let inside = spans.assign(&mut samples, &options.during);
    if options.during.is_empty() {
        return Ok(samples);
    }
    let missing: Vec<&String> = options
        .during
        .iter()
        .filter(|name| !spans.names().contains(name))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{}: no marker span is named {}; its spans are named: {}",
            input.display(),
            quoted(missing.iter().map(|name| name.as_str())),
            quoted(spans.names().iter().map(String::as_str))
        ));
    }
    let mut inside = inside.into_iter();
    samples.retain(|_| inside.next().unwrap_or(false));
    errln!(
        "{NAME}: {}: {} samples lie in spans named {}",
        input.display(),
        samples.len(),
        quoted(options.during.iter().map(String::as_str))
    );
    if samples.is_empty() {
        return Err(format!(
            "{}: no sample lies in the spans --during names",
            input.display()
        ));
    }
    Ok(samples)
}

/// The most of a jitdump read for its source lines (as much as `perfclock record` copies).
const MAX_DUMP_BYTES: u64 = 4 << 30;

/// Gives each JIT frame in an image `perf inject --jit` wrote (`jitted-PID-N.so`) the source
/// line that the dump beside it (`jit-PID.dump`, where perf inject wrote the image) has for its
/// address, as `perf script -F+srcline` shows it. Each dump is read once, as an untrusted file;
/// one that cannot be read is a warning, and its frames keep no line.
fn add_jit_lines(samples: &mut [Sample]) {
    let mut dumps: HashMap<PathBuf, Option<DumpLines>> = HashMap::new();
    let frames = samples
        .iter_mut()
        .flat_map(|sample| &mut sample.frames)
        .filter(|frame| frame.kind == FrameKind::Jit);
    for frame in frames {
        let image = Path::new(&frame.dso);
        let Some((pid, index)) = image
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(jit_lines::jitted_image)
        else {
            continue;
        };
        let dump = image.with_file_name(format!("jit-{pid}.dump"));
        let lines = dumps
            .entry(dump)
            .or_insert_with_key(|dump| dump_lines(dump));
        if let Some(lines) = lines {
            frame.source = lines
                .line_at(index, frame.ip)
                .map(|(file, line)| SourceLine {
                    file: file.to_owned(),
                    line,
                });
        }
    }
}

/// The source lines of the jitdump `path`, said on standard error, or `None` after a warning.
fn dump_lines(path: &Path) -> Option<DumpLines> {
    let shown = Untrusted(path.as_os_str().as_encoded_bytes());
    let read = open_untrusted(Root::Here, path, MAX_DUMP_BYTES)
        .map_err(|error| error.to_string())
        .and_then(|opened| {
            DumpLines::read(BufReader::new(opened.file), opened.len).map_err(|e| chain(&e))
        });
    match read {
        Ok((lines, counts)) => {
            errln!(
                "{NAME}: source lines from {shown}: {} of its {} code loads have them{}",
                counts.with_lines,
                counts.loads,
                if counts.malformed > 0 {
                    format!(" ({} malformed records skipped)", counts.malformed)
                } else {
                    String::new()
                }
            );
            Some(lines)
        }
        Err(error) => {
            errln!("{NAME}: warning: no source lines from {shown}: {error}");
            None
        }
    }
}

/// `names`, each escaped and quoted, comma-separated (the first 20).
fn quoted<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let shown: Vec<String> = names
        .take(20)
        .map(|name| format!("\"{}\"", Untrusted::str(name)))
        .collect();
    if shown.is_empty() {
        "(none)".to_owned()
    } else {
        shown.join(", ")
    }
}

/// The spans of every marker file the recording `input` maps (`marker-<pid>.txt` or
/// `marker-<pid>-<tid>.txt` in its MMAP records, as samply finds them), each read at its path
/// as an untrusted file: no link followed, a regular file, at most
/// `markers::MAX_MARKER_FILE_BYTES`. A file that cannot be read is a warning.
fn marker_spans(input: &Path) -> Result<Spans, String> {
    let mut file =
        File::open(input).map_err(|e| format!("cannot open {}: {e}", input.display()))?;
    let layout = read_layout(&mut file).map_err(|e| chain(&e))?;
    let is_marker_file = |path: &Path| {
        path.file_name()
            .and_then(|name| name.to_str())
            .and_then(markers::marker_file_pid)
            .is_some()
    };
    let maps =
        maps_of(&mut file, &layout, |_, path| is_marker_file(path)).map_err(|e| chain(&e))?;
    let mut spans = Spans::new();
    let mut seen = HashSet::new();
    for map in maps {
        if !seen.insert((map.pid, map.path.clone())) {
            continue;
        }
        let shown = Untrusted(map.path.as_os_str().as_encoded_bytes());
        let opened = match open_untrusted(Root::Here, &map.path, markers::MAX_MARKER_FILE_BYTES) {
            Ok(opened) => opened,
            Err(error) => {
                errln!(
                    "{NAME}: warning: the marker file {shown} of process {} is not read: {error}",
                    map.pid
                );
                continue;
            }
        };
        let reader = BufReader::new(opened.file.take(opened.len));
        match spans.read_spans(map.pid, reader) {
            Ok(counts) => errln!(
                "{NAME}: markers of process {} from {shown}: {} spans, {} instants (they hold \
                 no sample){}",
                map.pid,
                counts.spans,
                counts.instants,
                if counts.unreadable > 0 {
                    format!(", {} lines that are no marker, skipped", counts.unreadable)
                } else {
                    String::new()
                }
            ),
            Err(error) => {
                errln!("{NAME}: warning: reading the marker file {shown} stopped: {error}")
            }
        }
    }
    Ok(spans)
}

/// Warns where BASE's and NEW's counts do not stand for the same thing: another event, or
/// another sampling period (a count compares only at the same rate).
fn warn_if_incomparable(base: &[Sample], new: &[Sample]) {
    let events = |samples: &[Sample]| -> BTreeSet<String> {
        samples.iter().map(|s| s.event.clone()).collect()
    };
    if events(base) != events(new) {
        errln!(
            "{NAME}: warning: BASE samples {:?} and IN {:?}: their counts compare other events",
            events(base),
            events(new)
        );
    }
    let (base_period, new_period) = (
        pprof::most_common_period(base),
        pprof::most_common_period(new),
    );
    if base_period != new_period {
        errln!(
            "{NAME}: warning: BASE's most common period is {base_period} and IN's {new_period}: \
             record both at the same frequency (or pass --normalize) for counts to compare"
        );
    }
}

/// Writes the flame graph of `samples` (against `base` with `--diff`) to `path`.
fn write_flamegraph(
    options: &ReportArgs,
    path: &Path,
    samples: &[Sample],
    base: Option<&[Sample]>,
) -> Result<(), String> {
    let mut graph = FlameGraphOptions::default();
    graph.icicle = options.icicle;
    graph.split = match options.split {
        None => Split::None,
        Some(SplitBy::Process) => Split::Process,
        Some(SplitBy::Thread) => Split::Thread,
        Some(SplitBy::Marker) => Split::Marker,
    };
    let event = samples.first().map_or("", |s| s.event.as_str());
    let diff = base.map(|base| Diff {
        base,
        new: samples,
        normalize: options.normalize,
    });
    match (&diff, &options.diff) {
        (Some(diff), Some(base_input)) => {
            graph.title = format!(
                "perfclock report: {} against {}",
                options.input.display(),
                base_input.display()
            );
            graph.subtitle = Some(format!(
                "{} samples of {event} against {}{}: red, more self samples; blue, fewer",
                diff.new.len(),
                diff.base.len(),
                if diff.normalize {
                    " scaled to the same total"
                } else {
                    ""
                }
            ));
        }
        _ => {
            graph.title = format!("perfclock report: {}", options.input.display());
            graph.subtitle = Some(format!("{} samples of {event}", samples.len()));
        }
    }
    let html = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("html") || ext.eq_ignore_ascii_case("htm"));
    write_atomically(path, |out| {
        match (&diff, html) {
            (Some(diff), true) => flamegraph::write_diff_html(diff, &graph, out),
            (Some(diff), false) => flamegraph::write_diff_svg(diff, &graph, out),
            (None, true) => flamegraph::write_html(samples, &graph, out),
            (None, false) => flamegraph::write_svg(samples, &graph, out),
        }
        .map_err(|e| chain(&e))
    })?;
    errln!(
        "{NAME}: wrote the flame graph {} (open it in a browser)",
        path.display()
    );
    Ok(())
}

/// Writes the pprof profile of `samples`, read from the recording `input`, to `path`.
fn write_pprof(input: &Path, path: &Path, samples: &[Sample]) -> Result<(), String> {
    let pprof_options = PprofOptions {
        wall_clock_offset_ns: wall_clock_offset(input),
        build_ids: build_ids(input),
    };
    let profile = pprof::profile(samples, &pprof_options);
    write_atomically(path, |out| {
        pprof::write_gzipped(&profile, out).map_err(|e| e.to_string())
    })?;
    errln!(
        "{NAME}: wrote the pprof profile {} (go tool pprof -top {}; docs/report.md for the \
         fleet's profilers){}",
        path.display(),
        path.display(),
        if pprof_options.wall_clock_offset_ns.is_none() {
            "; no wall-clock times: the recording has no HEADER_CLOCK_DATA (perfclock \
             record, or inject-time-conv --clock-data-now, adds it)"
        } else {
            ""
        }
    );
    Ok(())
}

/// The recording's samples, through `perf script` (its symbolization is perf report's): its
/// structure first, then the names placed by it (`perfclock_report::samples`).
fn samples(input: &Path) -> Result<Vec<Sample>, String> {
    let structure = perf_script(input, STRUCTURE_ARGS, perfclock_report::read_structure)?;
    perf_script(input, NAMES_ARGS, |output| structure.read_names(output))
}

/// `perf ARGS -i IN`'s output, read by `read` while perf writes it.
fn perf_script<T>(
    input: &Path,
    args: &[&str],
    read: impl FnOnce(BufReader<ChildStdout>) -> Result<T, ParseError>,
) -> Result<T, String> {
    let mut child = Command::new("perf")
        .args(args)
        .arg("-i")
        .arg(input)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                "no `perf` on PATH: install it (Debian: linux-perf)".to_owned()
            } else {
                format!("cannot run perf script: {e}")
            }
        })?;
    let stdout = child.stdout.take().ok_or("perf script has no output")?;
    let mut stderr = child
        .stderr
        .take()
        .ok_or("perf script has no error output")?;
    // Read while stdout is: perf blocks once a pipe is full, and its warnings can fill one.
    let errors = std::thread::spawn(move || {
        let mut errors = Vec::new();
        let _ = stderr.read_to_end(&mut errors);
        errors
    });
    let parsed = read(BufReader::new(stdout));
    // perf is still writing after a parse error; its pipe is closed, so it ends (SIGPIPE).
    let status = child.wait().map_err(|e| e.to_string())?;
    let errors = errors.join().unwrap_or_default();
    // The parse error first: after one, perf's status is only the SIGPIPE it caused.
    let parsed = parsed.map_err(|e| format!("cannot read perf script's output: {}", chain(&e)))?;
    if !status.success() {
        return Err(format!(
            "perf script -i {} failed ({status}): {}",
            input.display(),
            String::from_utf8_lossy(&errors).trim()
        ));
    }
    Ok(parsed)
}

/// The build ids perf recorded for IN's images, by DSO (`perf buildid-list`); none, with a
/// warning, where perf cannot list them: the profile is still right, its mappings only lack ids.
fn build_ids(input: &Path) -> BTreeMap<String, String> {
    let listed = Command::new("perf")
        .args(build_ids::PERF_BUILDID_LIST_ARGS)
        .arg("-i")
        .arg(input)
        .stdin(Stdio::null())
        .output();
    match listed {
        Ok(output) if output.status.success() => {
            build_ids::parse(&String::from_utf8_lossy(&output.stdout))
        }
        Ok(output) => {
            errln!(
                "{NAME}: warning: perf buildid-list failed ({}): the profile's mappings carry \
                 no build ids: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
            BTreeMap::new()
        }
        Err(error) => {
            errln!("{NAME}: warning: cannot run perf buildid-list ({error}): no build ids");
            BTreeMap::new()
        }
    }
}

/// Wall clock minus perf clock from IN's HEADER_CLOCK_DATA, if it has one (only that section
/// is read: a recording can be gigabytes).
fn wall_clock_offset(input: &Path) -> Option<i128> {
    let mut file = File::open(input).ok()?;
    let layout = read_layout(&mut file).ok()?;
    let section = layout.feature_section(Feature::CLOCK_DATA)?;
    let mut contents = vec![0; usize::try_from(section.size).ok()?.min(4096)];
    file.seek(SeekFrom::Start(section.offset)).ok()?;
    file.read_exact(&mut contents).ok()?;
    let clock = ClockData::parse(&contents)?;
    Some(i128::from(clock.wall_clock_ns) - i128::from(clock.clockid_time_ns))
}

/// Writes `path` through a temporary file beside it, renamed over it once `fill` succeeded.
fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<&mut File>) -> Result<(), String>,
) -> Result<(), String> {
    let mut out = OutputFile::create(path, 0o644).map_err(|e| chain(&e))?;
    let filled = {
        let mut writer = BufWriter::new(out.file());
        fill(&mut writer).and_then(|()| writer.flush().map_err(|e| e.to_string()))
    };
    filled?;
    out.commit().map_err(|e: PerfDataError| chain(&e))
}
