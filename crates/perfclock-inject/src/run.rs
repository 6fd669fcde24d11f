//! The step itself: IN read and checked, its TIME_CONV chosen, its dumps copied, OUT written.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;

use perfclock::ClockSnapshot;
use perfclock_core::{BootId, TimeConversion};
use perfclock_os::untrusted_file::Root;
use perfclock_perfdata::{
    read_layout, sampled_addresses, scan_records, time_conv_record, ClockData, Feature, Layout,
    Patch, PerfDataError, SampledAddresses, Scan,
};

use crate::clock_data::{self, ClockDataError};
use crate::copies::LazyCopies;
use crate::dumps::{self, Copying, Dump, DumpError, DumpReport, Writer};
use crate::input::{open_input, InputError};
use crate::options::{ClockDataSource, InjectOptions};
use crate::outcome::{Injected, Outcome, Unfiltered, Warning};
use crate::output::{write_output, OutputError, TempFiles};
use crate::pairings::Pairings;
use crate::perfmap::FollowedMap;
use crate::sidecar::{self, AgreementError, Sidecar, SidecarError};
use crate::time_conv::{self, ClockError, TimeConvSource};
use crate::timed_maps::{self, MapOutcome, MapReport, Timing};

/// Why the step failed as a whole. One dump's trouble never is: it is a
/// [`DumpOutcome::Skipped`](crate::DumpOutcome::Skipped).
#[derive(Debug)]
#[non_exhaustive]
pub enum InjectError {
    /// IN, or where OUT goes.
    Input(InputError),
    /// `--clock-data-now` cannot be honoured.
    ClockData(ClockDataError),
    /// The sidecars cannot all be right, and no exact clock here tells which is.
    Sidecars(AgreementError),
    /// This machine's clock was needed and cannot be had.
    Clock(ClockError),
    /// OUT or the copies could not be written.
    Output(OutputError),
}

impl fmt::Display for InjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Input(error) => write!(f, "{error}"),
            Self::ClockData(error) => write!(f, "{error}"),
            Self::Sidecars(error) => write!(f, "{error}"),
            Self::Clock(error) => write!(f, "{error}"),
            Self::Output(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for InjectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // Each shows its inner error's message; the inner error's cause follows.
        match self {
            Self::Input(error) => error.source(),
            Self::ClockData(error) => error.source(),
            Self::Sidecars(error) => error.source(),
            Self::Clock(error) => error.source(),
            Self::Output(error) => error.source(),
        }
    }
}

/// Reads IN, adds the TIME_CONV (and clock data) it needs, copies every jitdump it maps into a
/// private directory beside [`InjectOptions::copies_beside`] and points IN at the copies, and
/// writes OUT (through a temporary file `temps` learns of, renamed into place when complete).
/// Keep the returned copies once OUT is where it is read from.
///
/// # Errors
/// [`InjectError`], naming what is wrong and what to pass or change.
pub fn inject(options: &InjectOptions, temps: &dyn TempFiles) -> Result<Injected, InjectError> {
    // First, to be as close as possible to the recording.
    let snapshot = match &options.clock_data {
        ClockDataSource::Now => Some(perfclock::snapshot().map_err(ClockDataError::Snapshot)),
        ClockDataSource::None | ClockDataSource::Recorded(_) => None,
    };
    let (mut file, metadata) =
        open_input(&options.input, &options.output).map_err(InjectError::Input)?;
    let perf_data = |error| InjectError::Input(InputError::PerfData(error));
    let layout = read_layout(&mut file).map_err(perf_data)?;
    let scan = scan_records(&mut file, &layout).map_err(perf_data)?;
    let mode = metadata.permissions().mode();
    let mut warnings = Vec::new();
    let mut patch = Patch::new(&layout);
    let clock_data = clock_data(
        options,
        snapshot,
        &mut file,
        &layout,
        &mut patch,
        &mut warnings,
    )?;
    let write = |file: &mut File, patch: &Patch<'_>| {
        write_patched_or_copy(options, mode, temps, file, &layout, patch)
            .map_err(InjectError::Output)
    };
    let maps = followed_maps(options);
    if scan.jit_dumps.is_empty() && maps.is_empty() {
        let untimed_maps = untimed_maps(options, sampled(options, &mut file).0.as_ref());
        if clock_data.is_none() && !scan.has_time_conv && untimed_maps.is_empty() {
            return Err(InjectError::Input(InputError::NoJitMarker));
        }
        write(&mut file, &patch)?;
        return Ok(without_jit_code(&scan, clock_data, untimed_maps, warnings));
    }
    check_clock_and_markers(&layout, &scan, &mut warnings)?;
    let this_boot = perfclock_os::time::boot_id().map_err(|error| error.kind());
    let (dumps, sidecars) = writers(options, &scan, this_boot.ok());
    let any_other = dumps
        .iter()
        .any(|dump| matches!(dump.writer, Ok(Writer::Other)));
    let needs_clock = any_other || !maps.is_empty();
    let (time_conv, conversion) = time_conv_source(
        options,
        &metadata,
        &scan,
        &sidecars,
        needs_clock,
        &mut patch,
    )?;
    warnings.extend(time_conv::boot_warning(&time_conv, this_boot).map(Warning::Boot));
    let (sampled, unfiltered) = sampled(options, &mut file);
    let pairings = pairings(options, any_other).map_err(InjectError::Clock)?;
    let mut copying = Copying {
        input: &mut file,
        conversion: conversion.as_ref(),
        pairings: &pairings,
        sampled: sampled.as_ref(),
        filter: unfiltered.is_none(),
        dump_dirs: &options.dump_dirs,
        copies: LazyCopies::new(&options.copies_beside, temps),
    };
    let dumps = dumps::copy_all(dumps, &mut copying, &mut patch).map_err(InjectError::Output)?;
    let first_sample_ns = scan.sample_times.map(|(first, _)| first);
    let timing = (&layout, conversion.as_ref(), first_sample_ns);
    let maps = time_maps(maps, &dumps, &mut copying, timing, &mut patch)?;
    let untimed_maps = untimed_maps(options, copying.sampled);
    let copies = copying.copies.into_dir();
    let namespaced = namespaced_processes(&dumps, &maps);
    orphan_anonymous_maps(&namespaced, &mut file, &layout, &mut patch).map_err(perf_data)?;
    write(&mut file, &patch)?;
    let outcome = Outcome {
        time_conv,
        dumps,
        maps,
        untimed_maps,
        unfiltered,
        warnings,
    };
    Ok(Injected {
        outcome,
        clock_data,
        copies,
    })
}

/// A recording with JIT code must be in perf's clock; its markers compressed are a warning.
fn check_clock_and_markers(
    layout: &Layout,
    scan: &Scan,
    warnings: &mut Vec<Warning>,
) -> Result<(), InjectError> {
    if let Some(clockid) = layout.clockid {
        return Err(InjectError::Input(InputError::OtherClock(clockid)));
    }
    if scan.compressed_markers {
        // Seen with perf 6.1: inject --jit passes compressed records through unread, so it
        // never sees the marker, and succeeds without injecting anything.
        warnings.push(Warning::CompressedMaps);
    }
    Ok(())
}

/// What a recording that maps no dump and had no map followed gets: its TIME_CONV as it was,
/// the clock data, and the maps perf will read untimed.
fn without_jit_code(
    scan: &Scan,
    clock_data: Option<ClockData>,
    untimed_maps: Vec<std::path::PathBuf>,
    warnings: Vec<Warning>,
) -> Injected {
    let time_conv = if scan.has_time_conv {
        TimeConvSource::InInput
    } else {
        TimeConvSource::NotNeeded
    };
    let outcome = Outcome {
        time_conv,
        dumps: Vec::new(),
        maps: Vec::new(),
        untimed_maps,
        unfiltered: None,
        warnings,
    };
    Injected {
        outcome,
        clock_data,
        copies: None,
    }
}

/// The clock data OUT gets, added to `patch`: this machine's now (`snapshot`, taken when the
/// options asked, with its warning), the recorded pair, or none.
fn clock_data(
    options: &InjectOptions,
    snapshot: Option<Result<ClockSnapshot, ClockDataError>>,
    file: &mut File,
    layout: &Layout,
    patch: &mut Patch<'_>,
    warnings: &mut Vec<Warning>,
) -> Result<Option<ClockData>, InjectError> {
    let clock_data = match (snapshot, &options.clock_data) {
        (Some(snapshot), _) => {
            let snapshot = snapshot.map_err(InjectError::ClockData)?;
            let (data, warning) = clock_data::from_snapshot(file, layout, &snapshot)
                .map_err(InjectError::ClockData)?;
            warnings.extend(warning.map(Warning::ClockData));
            data
        }
        (None, ClockDataSource::Recorded(recorded)) => {
            ClockData::perf_clock(recorded.realtime.ns, recorded.perf_ns)
        }
        (None, _) => return Ok(None),
    };
    patch
        .add_feature(Feature::CLOCK_DATA, clock_data.to_bytes().to_vec())
        .map_err(|error| InjectError::Input(InputError::PerfData(error)))?;
    Ok(Some(clock_data))
}

/// The maps the watch followed that hold a line or a warning.
fn followed_maps(options: &InjectOptions) -> Vec<FollowedMap> {
    let maps = options.held.as_ref().map(|held| held.take_maps());
    let mut maps = maps.unwrap_or_default();
    maps.retain(|map| !map.lines.is_empty() || !map.warnings.is_empty());
    maps
}

/// Where OUT's TIME_CONV comes from, and the conversion the dumps and maps are retimed with:
/// IN's own (this machine's clock asked only when `needs_clock`: a foreign dump or a map to
/// time), or else the sidecars' agreed one or this machine's clock, inserted into `patch`.
fn time_conv_source(
    options: &InjectOptions,
    metadata: &std::fs::Metadata,
    scan: &Scan,
    sidecars: &[Sidecar],
    needs_clock: bool,
    patch: &mut Patch<'_>,
) -> Result<(TimeConvSource, Option<TimeConversion>), InjectError> {
    let recorded = !options.pairings.is_empty();
    let this_clock = || {
        time_conv::this_clock(&options.input, metadata, recorded, scan).map_err(InjectError::Clock)
    };
    if scan.has_time_conv {
        // The kernel's own: this boot's clock converts exactly as it does.
        let conversion = if needs_clock {
            Some(this_clock()?.2)
        } else {
            None
        };
        return Ok((TimeConvSource::InInput, conversion));
    }
    let agreed = time_conv::from_sidecars(scan, sidecars).map_err(InjectError::Sidecars)?;
    let (source, conversion) = match agreed {
        Some((reference, inserted)) => (
            TimeConvSource::Sidecar {
                path: reference.path,
                record: Box::new(reference.record),
                inserted,
            },
            inserted.conversion,
        ),
        None => {
            let (mode, bound_ns, conversion) = this_clock()?;
            let source = TimeConvSource::ThisClock {
                mode,
                bound_ns,
                conversion,
            };
            (source, conversion)
        }
    };
    insert_time_conv(patch, &conversion)
        .map_err(|error| InjectError::Input(InputError::PerfData(error)))?;
    Ok((source, Some(conversion)))
}

/// The followed maps timed into dumps of their sampled lines, but for processes whose own dump
/// was copied; `timing` is IN's layout, the conversion (none: no map is timed) and the first
/// sample's time.
fn time_maps(
    maps: Vec<FollowedMap>,
    dumps: &[DumpReport],
    copying: &mut Copying<'_>,
    (layout, conversion, first_sample_ns): (&Layout, Option<&TimeConversion>, Option<u64>),
    patch: &mut Patch<'_>,
) -> Result<Vec<MapReport>, InjectError> {
    let Some(conversion) = conversion.filter(|_| !maps.is_empty()) else {
        return Ok(Vec::new());
    };
    let with_dumps: Vec<u32> = dumps
        .iter()
        .filter(|dump| matches!(dump.outcome, crate::DumpOutcome::Copied { .. }))
        .map(|dump| dump.process)
        .collect();
    let mut timing = Timing {
        input: copying.input,
        layout,
        conversion,
        first_sample_ns,
        sampled: copying.sampled,
        filter: copying.filter,
        with_dumps: &with_dumps,
        copies: &mut copying.copies,
    };
    timed_maps::time_all(maps, &mut timing, patch).map_err(InjectError::Output)
}

fn insert_time_conv(
    patch: &mut Patch<'_>,
    conversion: &TimeConversion,
) -> Result<(), PerfDataError> {
    patch
        .insert_record(&time_conv_record(conversion))
        .map(|_| ())
}

/// Each dump with its writer (or why it is left out), and the sidecars of perfclock's dumps
/// that may be used: those found beside their dumps that are of this boot and disagree with
/// this machine's exact clock are left out with their dumps.
fn writers<'s>(
    options: &InjectOptions,
    scan: &'s Scan,
    this_boot: Option<BootId>,
) -> (Vec<Dump<'s>>, Vec<Sidecar>) {
    let mut dumps = Vec::with_capacity(scan.jit_dumps.len());
    let mut sidecars = Vec::new();
    // For each sidecar, the index of its dump.
    let mut owners = Vec::new();
    for map in &scan.jit_dumps {
        let held = options
            .held
            .as_ref()
            .and_then(|held| held.take(map.process, &map.path));
        // Where the path resolved when the dump was held (its process may be gone now).
        let root = held
            .as_ref()
            .map_or_else(|| Root::of_process(map.process), |held| held.root);
        let found = match held.as_ref().map(|held| &held.sidecar) {
            // Held with its record: that record; held without: none was beside it then.
            Some(Some(file)) => file
                .file
                .try_clone()
                .map_err(|error| SidecarError::Read(sidecar_path(&map.path), error))
                .and_then(|file| sidecar::read(sidecar_path(&map.path), file, map.pid))
                .map(Some),
            Some(None) => Ok(None),
            None => sidecar::find(&map.path, map.pid, root, &options.dump_dirs),
        };
        let writer = match found {
            Ok(Some(sidecar)) => {
                owners.push(dumps.len());
                sidecars.push(sidecar);
                Ok(Writer::Perfclock)
            }
            Ok(None) => Ok(Writer::Other),
            Err(error) => Err(DumpError::Sidecar(error)),
        };
        let command = held.as_ref().map(|held| held.command.clone()).or_else(|| {
            std::fs::read_to_string(format!("/proc/{}/comm", map.process))
                .ok()
                .map(|comm| comm.trim_end().to_owned())
        });
        dumps.push(Dump {
            map,
            root,
            writer,
            held: held.map(|held| held.dump),
            command,
        });
    }
    // Records from --dump-dir were chosen by whoever runs this: they are the recording's, as
    // when it is analysed after a move; records found beside the dumps are their writers'.
    let disagreeing = if options.dump_dirs.is_empty() {
        time_conv::disagreeing_with_this_clock(&sidecars, this_boot)
    } else {
        Vec::new()
    };
    for (index, disagreement) in disagreeing.iter().rev() {
        dumps[owners[*index]].writer = Err(DumpError::Sidecar(SidecarError::Disagrees(
            disagreement.clone(),
        )));
        sidecars.remove(*index);
    }
    (dumps, sidecars)
}

/// The perf maps in this machine's `/tmp` of the sampled processes, for a recording not made
/// through a watch: nothing tells when their lines were written.
fn untimed_maps(
    options: &InjectOptions,
    sampled: Option<&SampledAddresses>,
) -> Vec<std::path::PathBuf> {
    let (None, Some(sampled)) = (&options.held, sampled) else {
        return Vec::new();
    };
    let mut maps: Vec<std::path::PathBuf> = sampled
        .pids()
        .map(|pid| std::path::PathBuf::from(format!("/tmp/perf-{pid}.map")))
        .filter(|path| path.exists())
        .collect();
    maps.sort();
    maps
}

/// The processes of another pid namespace whose dump was copied or whose map was made into one
/// (each handed to perf inject as pid 0's: [`crate::dumps`]).
fn namespaced_processes(dumps: &[crate::DumpReport], maps: &[MapReport]) -> Vec<u32> {
    let dumps = dumps
        .iter()
        .filter(|dump| matches!(dump.outcome, crate::DumpOutcome::Copied { .. }))
        .filter(|dump| perfclock_perfdata::jitdump_pid(&dump.path) != Some(dump.process))
        .map(|dump| dump.process);
    let maps = maps
        .iter()
        .filter(|map| matches!(map.outcome, MapOutcome::Timed { .. }))
        .filter(|map| map.pid != map.process)
        .map(|map| map.process);
    dumps.chain(maps).collect()
}

/// The anonymous maps (`//anon`, `[anon:`, `/memfd:`) of each of the `namespaced` processes
/// moved to pid 0: what perf inject does itself once it has read a process's dump, so that the
/// process's JIT code is found in the images, not in the anonymous memory it runs in.
fn orphan_anonymous_maps(
    namespaced: &[u32],
    file: &mut File,
    layout: &Layout,
    patch: &mut Patch<'_>,
) -> Result<(), PerfDataError> {
    if namespaced.is_empty() {
        return Ok(());
    }
    let anonymous = |path: &std::path::Path| {
        let bytes = path.as_os_str().as_encoded_bytes();
        bytes.starts_with(b"//anon")
            || bytes.starts_with(b"[anon:")
            || bytes.starts_with(b"/memfd:")
    };
    let maps = perfclock_perfdata::maps_of(file, layout, |pid, path| {
        namespaced.contains(&pid) && anonymous(path)
    })?;
    for map in maps {
        patch.orphan_map(map.offset)?;
    }
    Ok(())
}

/// The path of `dump`'s time conversion record.
fn sidecar_path(dump: &std::path::Path) -> std::path::PathBuf {
    let mut path = dump.as_os_str().to_owned();
    path.push(perfclock_jitdump::timeconv::SUFFIX);
    path.into()
}

/// Which addresses the samples touched (which also counts the samples in each dump's code),
/// and why every load goes to perf inject instead of only those (`Some`), when it does.
fn sampled(
    options: &InjectOptions,
    file: &mut File,
) -> (Option<SampledAddresses>, Option<Unfiltered>) {
    let read = file
        .seek(SeekFrom::Start(0))
        .map_err(PerfDataError::Io)
        .and_then(|_| sampled_addresses(io::BufReader::new(&mut *file)));
    match read {
        Ok(sampled) if options.all_jit_code => (Some(sampled), Some(Unfiltered::Asked)),
        Ok(sampled) if sampled.has_user_stacks() => (Some(sampled), Some(Unfiltered::UserStacks)),
        Ok(sampled) => (Some(sampled), None),
        Err(error) => (None, Some(Unfiltered::Unreadable(error))),
    }
}

/// The recording's pairings, or one taken now for a recording of this boot; none unless
/// `needed` (a foreign dump is retimed).
fn pairings(options: &InjectOptions, needed: bool) -> Result<Pairings, ClockError> {
    if !needed {
        return Ok(Pairings::default());
    }
    if !options.pairings.is_empty() {
        return Ok(Pairings::of(&options.pairings));
    }
    let now = perfclock::snapshot().map_err(ClockError::Snapshot)?;
    Ok(Pairings::of(&[now]))
}

/// OUT: IN with `patch` applied, or a byte copy of IN where the patch changes nothing.
fn write_patched_or_copy(
    options: &InjectOptions,
    mode: u32,
    temps: &dyn TempFiles,
    file: &mut File,
    layout: &Layout,
    patch: &Patch<'_>,
) -> Result<(), OutputError> {
    write_output(&options.output, mode, temps, |out| {
        if patch.is_empty() {
            file.seek(SeekFrom::Start(0))?;
            io::copy(&mut Read::by_ref(file).take(layout.file_len), out)?;
            Ok(())
        } else {
            patch.write(file, out)
        }
    })
}
