//! `perfclock inject-time-conv IN -o OUT [--dump-dir DIR]...`: adds the `PERF_RECORD_TIME_CONV`
//! that `perf record` leaves out where the kernel withholds the conversion, taken from the
//! timeconv records perfclock's jitdump writer leaves next to each `jit-<pid>.dump` (or, where
//! only other writers' dumps are mapped, from this machine's perf clock), so that `perf inject
//! --jit` accepts the jitdump's counter timestamps; other writers' `CLOCK_MONOTONIC` dumps are
//! copied in that form and the recording pointed at the copies (`foreign`).

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use perfclock_core::published_offset::{parse_boot_id, write_boot_id};
use perfclock_core::TimeConversion;
use perfclock_jitdump::timeconv::{TimeConvMode, TimeConvRecord, SUFFIX};
use perfclock_jitdump::JitClock;
use perfclock_jitdump::TimeConvError;
use perfclock_perfdata::{
    check_output_path, read_layout, sampled_addresses, scan_records, time_conv_record, ClockData,
    Feature, JitDumpMap, OutputFile, Patch, PerfDataError, Scan,
};

use crate::clock_data;
use crate::error::{ClockDataError, InjectError};
use crate::foreign::{self, Pairings};
use crate::output::{chain, errln};
use crate::signals::TempCleanup;

/// A sidecar is a dozen short lines; anything longer is not one.
const MAX_SIDECAR_BYTES: u64 = 64 * 1024;

/// What to do: the command line of `inject-time-conv`.
#[derive(Debug, Clone)]
pub(crate) struct InjectOptions {
    /// The recording, never modified.
    pub input: PathBuf,
    /// Where the recording with the TIME_CONV record goes.
    pub output: PathBuf,
    /// Directories to look for `jit-<pid>.dump.timeconv` in, instead of the dump's own.
    pub dump_dirs: Vec<PathBuf>,
    /// Whether to add HEADER_CLOCK_DATA, and from which snapshot.
    pub clock_data: ClockDataSource,
    /// Snapshots taken during the recording (`perfclock record`): the `CLOCK_MONOTONIC`
    /// pairings of other writers' dumps. Empty: one is taken now, for a recording of this boot.
    pub pairings: Vec<perfclock::ClockSnapshot>,
    /// Other writers' converted dumps go into a new `NAME.jit-XXXXXX` beside this path (the
    /// final output's: `perfclock record` writes OUT through a temporary file elsewhere).
    pub copies_beside: PathBuf,
    /// Give perf inject every code load, not only those a sample or call chain touched.
    pub all_jit_code: bool,
}

/// Where HEADER_CLOCK_DATA's pairing of wall-clock and perf-clock time comes from.
#[derive(Debug, Clone)]
pub(crate) enum ClockDataSource {
    /// No HEADER_CLOCK_DATA.
    None,
    /// A snapshot taken now, for a recording made earlier on this boot (`--clock-data-now`:
    /// checked against IN's modification time for a CLOCK_REALTIME step since).
    Now,
    /// A snapshot taken during the recording (`perfclock record`, which checks for a step
    /// itself).
    Recorded(perfclock::ClockSnapshot),
}

/// What was written.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Where OUT's TIME_CONV comes from.
    pub time_conv: TimeConvSource,
    /// Each dump of another writer, and what became of it.
    pub dumps: Vec<(PathBuf, foreign::Writer, foreign::Outcome)>,
    /// Why the dumps kept every code load, if they did.
    pub unfiltered: Option<String>,
}

impl Outcome {
    /// Whether OUT maps a jitdump for `perf inject --jit`.
    pub(crate) fn maps_jitdumps(&self) -> bool {
        !matches!(self.time_conv, TimeConvSource::NotNeeded)
    }

    /// Where OUT's TIME_CONV comes from, in one line.
    pub(crate) fn time_conv_line(&self) -> String {
        match &self.time_conv {
            TimeConvSource::InInput => "the recording holds a PERF_RECORD_TIME_CONV already (perf \
                 record writes one where the kernel publishes the conversion)"
                .to_owned(),
            TimeConvSource::NotNeeded => {
                "no jitdump is mapped: no PERF_RECORD_TIME_CONV is needed".to_owned()
            }
            TimeConvSource::Sidecar {
                path,
                record,
                inserted,
            } => {
                let conversion = inserted.conversion;
                format!(
                    "added PERF_RECORD_TIME_CONV from {} ({} mode, error bound {} ns; time_mult \
                     {}, time_shift {}, time_zero {}; {} record(s) agreed)",
                    path.display(),
                    record.mode().as_str(),
                    inserted.bound_ns,
                    conversion.mult(),
                    conversion.shift(),
                    conversion.zero(),
                    inserted.agreed
                )
            }
            TimeConvSource::ThisClock {
                mode,
                bound_ns,
                conversion,
            } => format!(
                "added PERF_RECORD_TIME_CONV from this machine's perf clock ({mode:?} mode, error \
                 bound {bound_ns} ns; time_mult {}, time_shift {}, time_zero {})",
                conversion.mult(),
                conversion.shift(),
                conversion.zero()
            ),
        }
    }

    /// One line per dump of another writer (converted where to, passed as it is, or skipped
    /// why), and one for perfclock's dumps together: how many of their code loads the samples
    /// touched, which alone reach `perf inject --jit`.
    pub(crate) fn foreign_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let (mut own, mut own_loads, mut own_kept) = (0usize, 0usize, 0usize);
        for (dump, writer, outcome) in &self.dumps {
            let line = match (writer, outcome) {
                (foreign::Writer::Perfclock, foreign::Outcome::Copied { loads, .. }) => {
                    own += 1;
                    own_loads += loads.0;
                    own_kept += loads.1;
                    continue;
                }
                (foreign::Writer::Perfclock, _) => continue,
                (foreign::Writer::Other, foreign::Outcome::Unchanged) => format!(
                    "{}: counter timestamps (another writer's, no perfclock record beside it): \
                     converted by the TIME_CONV as they are",
                    dump.display()
                ),
                (
                    foreign::Writer::Other,
                    foreign::Outcome::Copied {
                        copy,
                        loads,
                        retimed_bound_ns,
                    },
                ) => match retimed_bound_ns {
                    Some(bound) => format!(
                        "{}: CLOCK_MONOTONIC timestamps (another writer's): converted to counter \
                         values within {bound} ns, {} of its {} code loads sampled, into {}, \
                         which the output maps instead",
                        dump.display(),
                        loads.1,
                        loads.0,
                        copy.display()
                    ),
                    None => format!(
                        "{}: counter timestamps (another writer's): {} of its {} code loads \
                         sampled, copied into {}, which the output maps instead",
                        dump.display(),
                        loads.1,
                        loads.0,
                        copy.display()
                    ),
                },
                (foreign::Writer::Other, foreign::Outcome::Skipped(reason)) => format!(
                    "warning: {}: not injected: {}",
                    dump.display(),
                    chain(reason)
                ),
            };
            lines.push(line);
        }
        if own > 0 {
            lines.push(format!(
                "perfclock's jitdumps: {own_kept} of {own_loads} code loads in {own} dump(s) hold \
                 sampled code; only those become images for perf report"
            ));
        }
        if let Some(why) = &self.unfiltered {
            lines.push(format!("every code load goes to perf inject --jit: {why}"));
        }
        lines
    }
}

/// Where OUT's TIME_CONV comes from.
#[derive(Debug)]
pub(crate) enum TimeConvSource {
    /// IN held one already (perf record wrote it in kernel mode).
    InInput,
    /// IN maps no jitdump and has no TIME_CONV: none is needed (only the clock data was added).
    NotNeeded,
    /// A perfclock dump's time conversion record.
    Sidecar {
        /// The sidecar whose conversion was used.
        path: PathBuf,
        /// Its record.
        record: Box<TimeConvRecord>,
        /// What was inserted from it.
        inserted: Inserted,
    },
    /// This machine's perf clock (only other writers' dumps are mapped).
    ThisClock {
        /// Its mode.
        mode: perfclock::Mode,
        /// Its bound, ns.
        bound_ns: u64,
        /// The conversion inserted.
        conversion: TimeConversion,
    },
}

/// Runs the subcommand; warnings go to stderr. `cleanup` learns OUT's temporary file, so a
/// signal removes it.
///
/// # Errors
/// [`InjectError`], naming what is wrong and what to pass or change.
pub(crate) fn run(
    options: &InjectOptions,
    cleanup: &TempCleanup,
) -> Result<(Outcome, Option<ClockData>), InjectError> {
    // First, to be as close as possible to the recording.
    let snapshot = match &options.clock_data {
        ClockDataSource::None | ClockDataSource::Recorded(_) => None,
        ClockDataSource::Now => Some(
            perfclock::snapshot()
                .map_err(|error| InjectError::ClockData(ClockDataError::Snapshot(chain(&error))))?,
        ),
    };
    let (mut file, metadata) = open_input(options)?;
    let layout = read_layout(&mut file)?;
    let scan = scan_records(&mut file, &layout)?;
    let mode = metadata.permissions().mode();
    let clock_data = match (&snapshot, &options.clock_data) {
        (Some(snapshot), _) => Some(
            clock_data::from_snapshot(&mut file, &layout, snapshot)
                .map_err(InjectError::ClockData)?,
        ),
        (None, ClockDataSource::Recorded(recorded)) => Some(ClockData::perf_clock(
            recorded.realtime.ns,
            recorded.perf_ns,
        )),
        (None, _) => None,
    };
    let mut patch = Patch::new(&layout);
    if let Some(clock_data) = &clock_data {
        patch.add_feature(Feature::CLOCK_DATA, clock_data.to_bytes().to_vec())?;
    }
    if scan.jit_dumps.is_empty() {
        if clock_data.is_none() && !scan.has_time_conv {
            return Err(InjectError::NoJitMarker);
        }
        write_patched_or_copy(options, mode, cleanup, &mut file, &layout, &patch)?;
        let time_conv = if scan.has_time_conv {
            TimeConvSource::InInput
        } else {
            TimeConvSource::NotNeeded
        };
        return Ok((
            Outcome {
                time_conv,
                dumps: Vec::new(),
                unfiltered: None,
            },
            clock_data,
        ));
    }
    if let Some(clockid) = layout.clockid {
        return Err(InjectError::OtherClock(clockid));
    }
    let (sidecars, dumps) = sidecars_and_dumps(options, &scan)?;
    let any_foreign = dumps
        .iter()
        .any(|(_, writer)| *writer == foreign::Writer::Other);
    let (time_conv, conversion) = if scan.has_time_conv {
        // The kernel's own: this boot's clock converts exactly as it does.
        let conversion = if any_foreign {
            Some(this_clock(options, &metadata, &scan)?.2)
        } else {
            None
        };
        (TimeConvSource::InInput, conversion)
    } else if sidecars.is_empty() {
        let (mode, bound_ns, conversion) = this_clock(options, &metadata, &scan)?;
        patch.insert_record(&time_conv_record(&conversion))?;
        let source = TimeConvSource::ThisClock {
            mode,
            bound_ns,
            conversion,
        };
        (source, Some(conversion))
    } else {
        let (path, record, inserted) = sidecar_time_conv(&scan, sidecars, &mut patch)?;
        let source = TimeConvSource::Sidecar {
            path,
            record: Box::new(record),
            inserted,
        };
        (source, Some(inserted.conversion))
    };
    // Only the code the samples touched goes to perf inject --jit.
    let (sampled, unfiltered) = if options.all_jit_code {
        (None, Some("--all-jit-code".to_owned()))
    } else {
        match File::open(&options.input)
            .map_err(|e| e.to_string())
            .and_then(|f| sampled_addresses(io::BufReader::new(f)).map_err(|e| chain(&e)))
        {
            Ok(sampled) if sampled.has_user_stacks() => (
                None,
                Some(
                    "the samples carry user stacks (--call-graph dwarf), which perf unwinds only \
                     when it reports: which JIT code those frames reach is not known before"
                        .to_owned(),
                ),
            ),
            Ok(sampled) => (Some(sampled), None),
            Err(why) => (None, Some(format!("the samples could not be read ({why})"))),
        }
    };
    let pairings = if any_foreign {
        pairings(options)?
    } else {
        Pairings::default()
    };
    let mut copies: Option<PathBuf> = None;
    let mut make_dir = || match &copies {
        Some(dir) => Ok(dir.clone()),
        None => {
            let dir = foreign::make_copies_dir(&options.copies_beside)?;
            copies = Some(dir.clone());
            Ok(dir)
        }
    };
    let dumps = foreign::rewrite(
        &dumps,
        &mut file,
        conversion.as_ref(),
        &pairings,
        sampled.as_ref(),
        &mut make_dir,
        &mut patch,
    )
    .map_err(InjectError::Foreign)?;
    write_patched_or_copy(options, mode, cleanup, &mut file, &layout, &patch)?;
    let outcome = Outcome {
        time_conv,
        dumps,
        unfiltered,
    };
    Ok((outcome, clock_data))
}

/// OUT: IN with `patch` applied, or a byte copy of IN where the patch changes nothing.
fn write_patched_or_copy(
    options: &InjectOptions,
    mode: u32,
    cleanup: &TempCleanup,
    file: &mut File,
    layout: &perfclock_perfdata::Layout,
    patch: &Patch,
) -> Result<(), InjectError> {
    write_output(&options.output, mode, cleanup, |out| {
        if patch.is_empty() {
            file.seek(SeekFrom::Start(0))?;
            io::copy(&mut Read::by_ref(file).take(layout.file_len), out)?;
            Ok(())
        } else {
            patch.write(file, out)
        }
    })
}

/// The sidecars of perfclock's dumps, and every dump with its writer: perfclock's (a
/// sidecar found) or another's (none, but the dump is where the recording names it). A dump
/// that is neither is perfclock's, moved: its missing sidecar is the error, with where to look.
#[allow(clippy::type_complexity)]
fn sidecars_and_dumps<'s>(
    options: &InjectOptions,
    scan: &'s Scan,
) -> Result<
    (
        Vec<(PathBuf, TimeConvRecord)>,
        Vec<(&'s JitDumpMap, foreign::Writer)>,
    ),
    InjectError,
> {
    let mut sidecars = Vec::new();
    let mut dumps = Vec::new();
    for map in &scan.jit_dumps {
        match read_sidecar(map.pid, &map.path, &options.dump_dirs) {
            Ok(sidecar) => {
                sidecars.push(sidecar);
                dumps.push((map, foreign::Writer::Perfclock));
            }
            Err(InjectError::SidecarMissing { .. }) if map.path.is_file() => {
                dumps.push((map, foreign::Writer::Other));
            }
            Err(error) => return Err(error),
        }
    }
    Ok((sidecars, dumps))
}

/// This machine's perf clock, for a recording of this boot: its mode, the bound over the
/// recording, and its conversion anchored in the middle of the recording's samples
/// ([`perfclock::Clock::conversion_at`]; without sample times, now).
fn this_clock(
    options: &InjectOptions,
    input: &fs::Metadata,
    scan: &Scan,
) -> Result<(perfclock::Mode, u64, TimeConversion), InjectError> {
    if options.pairings.is_empty() && recorded_before_boot(input) {
        return Err(InjectError::ForeignOtherBoot(options.input.clone()));
    }
    let clock = perfclock::init().map_err(|error| InjectError::ForeignNoClock(chain(&error)))?;
    let now = clock.read_counter().unwrap_or(0);
    let cycles_of = |ns: u64| clock.ns_to_cycles(ns).unwrap_or(now);
    let (first, last) = scan.sample_times.map_or((now, now), |(first, last)| {
        (cycles_of(first), cycles_of(last))
    });
    let anchor = first + (last - first.min(last)) / 2;
    let conversion = clock
        .conversion_at(anchor)
        .map_err(|error| InjectError::ForeignNoClock(chain(&error)))?;
    let drift = clock
        .conversion_error_at_ns(first, anchor)
        .max(clock.conversion_error_at_ns(last, anchor));
    let bound = clock.error_bound_ns().saturating_add(drift);
    Ok((clock.mode(), bound, conversion))
}

/// Whether IN was last written before this boot began (its modification time before
/// `CLOCK_REALTIME - CLOCK_BOOTTIME`); unknown counts as not.
fn recorded_before_boot(input: &fs::Metadata) -> bool {
    let Ok(snapshot) = perfclock::snapshot() else {
        return false;
    };
    let booted = i128::from(snapshot.realtime.ns) - i128::from(snapshot.boottime.ns);
    let written = i128::from(input.mtime()) * 1_000_000_000 + i128::from(input.mtime_nsec());
    written < booted
}

/// The recording's pairings, or one taken now for a recording of this boot.
fn pairings(options: &InjectOptions) -> Result<Pairings, InjectError> {
    if !options.pairings.is_empty() {
        return Ok(Pairings::of(&options.pairings));
    }
    let now = perfclock::snapshot().map_err(|error| InjectError::ForeignNoClock(chain(&error)))?;
    Ok(Pairings::of(&[now]))
}

/// IN opened, checked to be a regular file that is not OUT, and OUT checked: a device, FIFO,
/// socket or directory is never replaced. Before anything is read or written.
fn open_input(options: &InjectOptions) -> Result<(File, fs::Metadata), InjectError> {
    let input = &options.input;
    let file = File::open(input).map_err(|error| InjectError::Input(input.clone(), error))?;
    let metadata = file
        .metadata()
        .map_err(|error| InjectError::Input(input.clone(), error))?;
    if !metadata.is_file() {
        return Err(InjectError::InputNotFile(input.clone(), metadata.is_dir()));
    }
    if names_same_file(&metadata, &options.output) {
        return Err(InjectError::SameFile);
    }
    check_output_path(&options.output)?;
    Ok((file, metadata))
}

/// The TIME_CONV record of the dumps' sidecars (which must agree) put into `patch`: the
/// sidecar used, its record, and what was inserted.
fn sidecar_time_conv(
    scan: &Scan,
    sidecars: Vec<(PathBuf, TimeConvRecord)>,
    patch: &mut Patch,
) -> Result<(PathBuf, TimeConvRecord, Inserted), InjectError> {
    if scan.compressed_markers {
        // Seen with perf 6.1: inject --jit passes compressed records through unread, so it
        // never sees the marker, and succeeds without injecting anything.
        errln!(
            "perfclock inject-time-conv: warning: IN's jitdump maps are inside compressed \
             records (perf record -z); perf inject --jit (6.1 at least) does not look inside \
             them and will inject no jitted code: record without -z for perf inject"
        );
    }
    check_consistent(&sidecars)?;
    warn_if_other_boot(&sidecars);
    // All agree within their bounds, so the truth lies within each one's bound. A paravirt
    // record's conversion is anchored in the middle of the samples (exact there at any uptime).
    let (path, record) = reference(&sidecars).ok_or(InjectError::NoJitMarker)?;
    let anchor = scan
        .sample_times
        .map_or(record.written_counter(), |(first, last)| {
            record.cycles_at(first / 2 + last / 2)
        });
    let conversion = record.conversion_at(anchor);
    patch.insert_record(&time_conv_record(&conversion))?;
    // The record's own bound, and how far the anchored form drifts by the first and last sample.
    let (first, last) = scan.sample_times.map_or((anchor, anchor), |(first, last)| {
        (record.cycles_at(first), record.cycles_at(last))
    });
    let drift = record
        .conversion_error_at_ns(first, anchor)
        .max(record.conversion_error_at_ns(last, anchor));
    let inserted = Inserted {
        conversion,
        bound_ns: record.error_bound_ns().saturating_add(drift),
        agreed: sidecars.len(),
    };
    Ok((path.clone(), record.clone(), inserted))
}

/// The TIME_CONV put in from a sidecar: the conversion, its bound over the recording, and how
/// many sidecars agreed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inserted {
    /// The conversion inserted.
    pub conversion: TimeConversion,
    /// Its bound over the recording's samples, ns.
    pub bound_ns: u64,
    /// How many sidecars were found and agreed.
    pub agreed: usize,
}

/// Whether `output` is `input` (`input_metadata`'s file) under any name: the same inode.
fn names_same_file(input_metadata: &fs::Metadata, output: &Path) -> bool {
    fs::metadata(output)
        .is_ok_and(|out| out.dev() == input_metadata.dev() && out.ino() == input_metadata.ino())
}

/// Writes OUT through a temporary file in its directory (removed on any error or signal),
/// renamed over OUT when complete, with IN's permission bits and at least 0600.
fn write_output(
    output: &Path,
    mode: u32,
    cleanup: &TempCleanup,
    fill: impl FnOnce(&mut BufWriter<&mut File>) -> Result<(), PerfDataError>,
) -> Result<(), InjectError> {
    let mut out = OutputFile::create(output, mode)?;
    let temp = out.temp_path().to_path_buf();
    cleanup.register(&temp);
    let filled = {
        let mut writer = BufWriter::new(out.file());
        fill(&mut writer).and_then(|()| writer.flush().map_err(PerfDataError::Io))
    };
    let result = match filled {
        Ok(()) => cleanup.commit(&temp, || out.commit()),
        // IN's layout was read and checked, so an I/O error now is OUT's (a full disk).
        Err(PerfDataError::Io(error)) => {
            drop(out);
            Err(PerfDataError::Output {
                path: output.to_path_buf(),
                error,
            })
        }
        Err(other) => {
            drop(out);
            Err(other)
        }
    };
    cleanup.forget(&temp);
    Ok(result?)
}

/// Finds and parses the sidecar of `dump` (pid `pid`).
fn read_sidecar(
    pid: u32,
    dump: &Path,
    dump_dirs: &[PathBuf],
) -> Result<(PathBuf, TimeConvRecord), InjectError> {
    let mut name = dump.file_name().unwrap_or_default().to_os_string();
    name.push(SUFFIX);
    let looked: Vec<PathBuf> = if dump_dirs.is_empty() {
        vec![dump.with_file_name(&name)]
    } else {
        dump_dirs.iter().map(|dir| dir.join(&name)).collect()
    };
    let Some(path) = looked.iter().find(|path| path.is_file()) else {
        return Err(InjectError::SidecarMissing {
            dump: dump.to_path_buf(),
            looked,
        });
    };
    let read_error = |error| InjectError::SidecarRead(path.clone(), error);
    let mut bytes = Vec::new();
    File::open(path)
        .map_err(read_error)?
        .take(MAX_SIDECAR_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_SIDECAR_BYTES {
        return Err(InjectError::SidecarInvalid(
            path.clone(),
            format!("longer than {MAX_SIDECAR_BYTES} bytes: not a time conversion record"),
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        InjectError::SidecarInvalid(
            path.clone(),
            "not ASCII text: not a time conversion record".to_owned(),
        )
    })?;
    let record = TimeConvRecord::parse(&text)
        .map_err(|error: TimeConvError| InjectError::SidecarInvalid(path.clone(), chain(&error)))?;
    if record.clock() != JitClock::Arch {
        return Err(InjectError::NotArchClock {
            path: path.clone(),
            clock: record.clock(),
        });
    }
    if record.pid() != pid {
        return Err(InjectError::SidecarPid {
            path: path.clone(),
            dump_pid: pid,
            record_pid: record.pid(),
        });
    }
    Ok((path.clone(), record))
}

/// The sidecar whose conversion goes into OUT: the smallest bound is the tightest guarantee (a
/// kernel-mode record, bound 0, wins); among equal bounds the latest written holds the longest
/// calibration.
fn reference(sidecars: &[(PathBuf, TimeConvRecord)]) -> Option<&(PathBuf, TimeConvRecord)> {
    sidecars
        .iter()
        .min_by_key(|(_, record)| (record.error_bound_ns(), u64::MAX - record.written_counter()))
}

/// Whether `a` and `b` agree at `counter`: within the sum of their bounds, or identical when
/// both are kernel-mode records; the error to return if not.
fn agree_at(
    (first, a): &(PathBuf, TimeConvRecord),
    (second, b): &(PathBuf, TimeConvRecord),
    counter: u64,
) -> Result<(), InjectError> {
    // Each anchored at `counter` is within its floor's few ns of its clock there.
    let allowed_ns = a
        .error_bound_ns()
        .saturating_add(b.error_bound_ns())
        .saturating_add(a.conversion_error_at_ns(counter, counter))
        .saturating_add(b.conversion_error_at_ns(counter, counter));
    // Each at its exact form there (a paravirt record anchored at `counter`).
    let apart_ns = a
        .conversion_at(counter)
        .cycles_to_ns(counter)
        .abs_diff(b.conversion_at(counter).cycles_to_ns(counter));
    let differ = if a.mode() == TimeConvMode::Kernel && b.mode() == TimeConvMode::Kernel {
        a.conversion() != b.conversion()
    } else {
        apart_ns > allowed_ns
    };
    if differ {
        return Err(InjectError::Disagree {
            first: first.clone(),
            second: second.clone(),
            counter,
            apart_ns,
            allowed_ns,
        });
    }
    Ok(())
}

/// Sidecars of one recording must name one counter and one boot, kernel-mode records must be
/// identical, and the conversions must agree within the sum of their bounds. In time linear in
/// the number of sidecars (a system-wide recording may map a hundred thousand dump names):
/// - counter, boot and kernel-mode conversions are compared with the first one (equality is
///   transitive);
/// - each record is compared with the reference ([`reference()`], the one that goes into OUT) at
///   its own written counter and at the reference's;
/// - at the reference's written counter every pair must agree: intervals on a line meet pairwise
///   exactly when the largest lower end is at most the smallest upper end, so that one
///   comparison checks all pairs there.
fn check_consistent(sidecars: &[(PathBuf, TimeConvRecord)]) -> Result<(), InjectError> {
    let Some(reference) = reference(sidecars) else {
        return Ok(());
    };
    let first = &sidecars[0];
    let first_kernel = sidecars
        .iter()
        .find(|(_, record)| record.mode() == TimeConvMode::Kernel);
    for sidecar in sidecars {
        let inconsistent = |what| InjectError::Inconsistent {
            what,
            first: first.0.clone(),
            second: sidecar.0.clone(),
        };
        if sidecar.1.counter() != first.1.counter() {
            return Err(inconsistent("counter"));
        }
        if sidecar.1.boot_id() != first.1.boot_id() {
            return Err(inconsistent("boot_id"));
        }
        if let Some(kernel) = first_kernel {
            if sidecar.1.mode() == TimeConvMode::Kernel {
                agree_at(kernel, sidecar, sidecar.1.written_counter())?;
            }
        }
        agree_at(reference, sidecar, sidecar.1.written_counter())?;
        agree_at(reference, sidecar, reference.1.written_counter())?;
    }
    let at = reference.1.written_counter();
    let ends = |sidecar: &&(PathBuf, TimeConvRecord)| {
        let ns = i128::from(sidecar.1.conversion_at(at).cycles_to_ns(at));
        let bound = i128::from(
            sidecar
                .1
                .error_bound_ns()
                .saturating_add(sidecar.1.conversion_error_at_ns(at, at)),
        );
        (ns - bound, ns + bound)
    };
    let highest_lower = sidecars.iter().max_by_key(|sidecar| ends(sidecar).0);
    let lowest_upper = sidecars.iter().min_by_key(|sidecar| ends(sidecar).1);
    if let (Some(high), Some(low)) = (highest_lower, lowest_upper) {
        agree_at(high, low, at)?;
    }
    Ok(())
}

/// The records were written on another boot than this one's. Not an error: analysing a
/// recording after a reboot or on another machine (the reason for --dump-dir) is ordinary, and
/// the conversion belongs to the recording's boot, not the analysing one's. What would be wrong,
/// sidecars of different boots in one recording, is refused by [`check_consistent`].
fn warn_if_other_boot(sidecars: &[(PathBuf, TimeConvRecord)]) {
    let Some((path, record)) = sidecars.first() else {
        return;
    };
    match perfclock_os::time::boot_id() {
        Ok(boot_id) if parse_boot_id(record.boot_id()) == Some(boot_id) => {}
        Ok(boot_id) => {
            let mut this_boot = String::new();
            // Writing into a String cannot fail.
            let _ = write_boot_id(&mut this_boot, boot_id);
            errln!(
                "perfclock inject-time-conv: warning: {} was written on boot {}, this machine is \
                 on boot {this_boot}: fine if IN was recorded on that boot (analysed after a \
                 reboot or elsewhere); if IN was recorded on this boot, the record is stale",
                path.display(),
                record.boot_id(),
            );
        }
        Err(error) => errln!(
            "perfclock inject-time-conv: warning: cannot read {} ({error}): the record's boot \
             is not checked",
            perfclock_os::time::BOOT_ID_PATH
        ),
    }
}
