//! `perfclock report IN [-o FLAME.html|FLAME.svg] [--pprof PROFILE.pb.gz]`: what a recording turns into,
//! from the samples `perf script` symbolizes (JIT names after `perf inject --jit`, which
//! `perfclock record` has run): an interactive flame graph that opens offline in any browser
//! and a gzipped pprof profile for `go tool pprof` and the fleet's profilers
//! (`perfclock_report`). Each file is written complete under a temporary name and renamed, or
//! not at all; IN is only read.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{ChildStdout, Command, ExitCode, Stdio};

use perfclock_cli::{ReportArgs, SplitBy};
use perfclock_perfdata::{
    check_output_path, read_layout, ClockData, Feature, OutputFile, PerfDataError,
};
use perfclock_report::build_ids;
use perfclock_report::flamegraph::{self, FlameGraphOptions, Split};
use perfclock_report::pprof::{self, PprofOptions};
use perfclock_report::{ParseError, Sample, NAMES_ARGS, STRUCTURE_ARGS};

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
    for out in [&options.flamegraph, &options.pprof].into_iter().flatten() {
        check_output_path(out).map_err(|e| chain(&e))?;
    }
    let samples = samples(&options.input)?;
    if samples.is_empty() {
        return Err(format!("{} holds no sample", options.input.display()));
    }
    errln!(
        "{NAME}: {} samples of {} thread(s) read through perf script",
        samples.len(),
        samples
            .iter()
            .map(|s| s.tid)
            .collect::<std::collections::HashSet<_>>()
            .len()
    );
    if let Some(path) = &options.flamegraph {
        let mut graph = FlameGraphOptions::default();
        graph.title = format!("perfclock report: {}", options.input.display());
        graph.subtitle = samples
            .first()
            .map(|s| format!("{} samples of {}", samples.len(), s.event));
        graph.split = match options.split {
            None => Split::None,
            Some(SplitBy::Process) => Split::Process,
            Some(SplitBy::Thread) => Split::Thread,
        };
        let html = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("html") || ext.eq_ignore_ascii_case("htm"));
        write_atomically(path, |out| {
            if html {
                flamegraph::write_html(&samples, &graph, out)
            } else {
                flamegraph::write_svg(&samples, &graph, out)
            }
            .map_err(|e| chain(&e))
        })?;
        errln!(
            "{NAME}: wrote the flame graph {} (open it in a browser)",
            path.display()
        );
    }
    if let Some(path) = &options.pprof {
        let pprof_options = PprofOptions {
            wall_clock_offset_ns: wall_clock_offset(&options.input),
            build_ids: build_ids(&options.input),
        };
        let profile = pprof::profile(&samples, &pprof_options);
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
    }
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
