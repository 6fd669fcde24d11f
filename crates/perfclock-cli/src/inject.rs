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

use perfclock_core::TimeConversion;
use perfclock_jitdump::timeconv::{TimeConvMode, TimeConvRecord, SUFFIX};
use perfclock_jitdump::JitClock;
use perfclock_jitdump::TimeConvError;
use perfclock_perfdata::{
    check_output_path, read_layout, scan_records, time_conv_record, ClockData, Feature, JitDumpMap,
    OutputFile, Patch, PerfDataError, Scan,
};

use crate::clock_data;
use crate::error::{ClockDataError, InjectError};
use crate::foreign::{self, Pairings};
use crate::output::{chain, errln};
use crate::signals::TempCleanup;

/// A sidecar is a dozen short lines; anything longer is not one.
const MAX_SIDECAR_BYTES: u64 = 64 * 1024;

/// Where the kernel publishes this boot's identity.
const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

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
    pub foreign: Vec<(PathBuf, foreign::Outcome)>,
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
                agreed,
            } => {
                let conversion = record.conversion();
                format!(
                    "added PERF_RECORD_TIME_CONV from {} ({} mode, error bound {} ns; time_mult \
                     {}, time_shift {}, time_zero {}; {agreed} record(s) agreed)",
                    path.display(),
                    record.mode().as_str(),
                    record.error_bound_ns(),
                    conversion.mult(),
                    conversion.shift(),
                    conversion.zero()
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

    /// One line per dump of another writer: converted (where to), passed as it is, or skipped
    /// (why).
    pub(crate) fn foreign_lines(&self) -> Vec<String> {
        self.foreign
            .iter()
            .map(|(dump, outcome)| match outcome {
                foreign::Outcome::Arch => format!(
                    "{}: counter timestamps (another writer's, no perfclock record beside it): \
                     converted by the TIME_CONV as they are",
                    dump.display()
                ),
                foreign::Outcome::Copied {
                    copy,
                    records,
                    bound_ns,
                } => format!(
                    "{}: CLOCK_MONOTONIC timestamps (another writer's): {records} records \
                     converted to counter values within {bound_ns} ns into {}, which the output \
                     maps instead",
                    dump.display(),
                    copy.display()
                ),
                foreign::Outcome::Skipped(reason) => format!(
                    "warning: {}: not injected: {}",
                    dump.display(),
                    chain(reason)
                ),
            })
            .collect()
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
        /// Its conversion.
        record: Box<TimeConvRecord>,
        /// How many sidecars were found and agreed.
        agreed: usize,
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
                foreign: Vec::new(),
            },
            clock_data,
        ));
    }
    if let Some(clockid) = layout.clockid {
        return Err(InjectError::OtherClock(clockid));
    }
    let (sidecars, foreign_maps) = sidecars_and_foreign(options, &scan)?;
    let (time_conv, conversion) = if scan.has_time_conv {
        // The kernel's own: this boot's clock converts exactly as it does.
        let conversion = if foreign_maps.is_empty() {
            None
        } else {
            Some(this_clock(options, &metadata, &scan)?.2)
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
        let (path, record, agreed) = sidecar_time_conv(&scan, sidecars, &mut patch)?;
        let conversion = record.conversion();
        let source = TimeConvSource::Sidecar {
            path,
            record: Box::new(record),
            agreed,
        };
        (source, Some(conversion))
    };
    let foreign = match conversion {
        Some(conversion) if !foreign_maps.is_empty() => {
            let pairings = pairings(options)?;
            let mut copies: Option<PathBuf> = None;
            let mut make_dir = || match &copies {
                Some(dir) => Ok(dir.clone()),
                None => {
                    let dir = foreign::make_copies_dir(&options.copies_beside)?;
                    copies = Some(dir.clone());
                    Ok(dir)
                }
            };
            foreign::convert(
                &foreign_maps,
                &mut file,
                &conversion,
                &pairings,
                &mut make_dir,
                &mut patch,
            )
            .map_err(InjectError::Foreign)?
        }
        _ => Vec::new(),
    };
    write_patched_or_copy(options, mode, cleanup, &mut file, &layout, &patch)?;
    Ok((Outcome { time_conv, foreign }, clock_data))
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

/// The sidecars of perfclock's dumps, and the maps of dumps without one that are where the
/// recording names them (other writers'). A dump that is neither is perfclock's, moved: its
/// missing sidecar is the error, with where to look.
#[allow(clippy::type_complexity)]
fn sidecars_and_foreign<'s>(
    options: &InjectOptions,
    scan: &'s Scan,
) -> Result<(Vec<(PathBuf, TimeConvRecord)>, Vec<&'s JitDumpMap>), InjectError> {
    let mut sidecars = Vec::new();
    let mut foreign = Vec::new();
    for map in &scan.jit_dumps {
        match read_sidecar(map.pid, &map.path, &options.dump_dirs) {
            Ok(sidecar) => sidecars.push(sidecar),
            Err(InjectError::SidecarMissing { .. }) if map.path.is_file() => foreign.push(map),
            Err(error) => return Err(error),
        }
    }
    Ok((sidecars, foreign))
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
/// sidecar used, its record, and how many agreed.
fn sidecar_time_conv(
    scan: &Scan,
    sidecars: Vec<(PathBuf, TimeConvRecord)>,
    patch: &mut Patch,
) -> Result<(PathBuf, TimeConvRecord, usize), InjectError> {
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
    patch.insert_record(&time_conv_record(&record.conversion_at(anchor)))?;
    Ok((path.clone(), record.clone(), sidecars.len()))
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
    let allowed_ns = a.error_bound_ns().saturating_add(b.error_bound_ns());
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
        let bound = i128::from(sidecar.1.error_bound_ns());
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
    match fs::read_to_string(BOOT_ID_PATH) {
        Ok(boot_id) if boot_id.trim() == record.boot_id() => {}
        Ok(boot_id) => errln!(
            "perfclock inject-time-conv: warning: {} was written on boot {}, this machine is on \
             boot {}: fine if IN was recorded on that boot (analysed after a reboot or \
             elsewhere); if IN was recorded on this boot, the record is stale",
            path.display(),
            record.boot_id(),
            boot_id.trim()
        ),
        Err(error) => errln!(
            "perfclock inject-time-conv: warning: cannot read {BOOT_ID_PATH} ({error}): the \
             record's boot is not checked"
        ),
    }
}
