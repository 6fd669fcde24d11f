//! Other writers' jitdumps in a recording (V8/Node, CPython, .NET, Wasmtime, LLVM's listener,
//! perf's JVMTI agent: docs/jit.md, "Other runtimes' jitdumps"), made symbolizable from a
//! default `perf record`.
//!
//! A dump without perfclock's time conversion record beside it is another writer's. Its header
//! says which form its timestamps are in:
//! - `JITDUMP_FLAGS_ARCH_TIMESTAMP`: counter values, converted by the recording's TIME_CONV as
//!   they are; it passes unchanged.
//! - flags 0: `CLOCK_MONOTONIC` nanoseconds, as every such writer stamps them, which `perf inject
//!   --jit` accepts only from a `perf record -k 1`. Checked against `CLOCK_MONOTONIC` itself (no
//!   record stamped after the latest pairing, none at 0), then copied in the arch form
//!   ([`perfclock_jitdump::foreign`]): each timestamp moved to the perf clock through the
//!   `CLOCK_MONOTONIC`/perf-clock pairings ([`Pairings`]), then to the counter value that the
//!   recording's TIME_CONV converts back to that perf time (to the cycle).
//!
//! The recording is pointed at the copy: perf's `/jit-` in each of the original's maps becomes
//! `/jiX-` (same length: nothing moves; `perf inject --jit` then passes the map by instead of
//! refusing the dump and failing as a whole), and a map of the copy, with the first original
//! map's fields and sample-id fields, is inserted. A dump that cannot be read or told is
//! disabled the same way and named with the reason: the other dumps are still injected. The
//! original dump is never modified; the copies, and the `jitted-*.so` that `perf inject --jit`
//! writes beside them, stay in a directory next to OUT.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use perfclock::ClockSnapshot;
use perfclock_core::TimeConversion;
use perfclock_jitdump::foreign::{ForeignDump, RecordAt};
use perfclock_jitdump::ForeignDumpError;
use perfclock_perfdata::{
    with_file_name, JitDumpMap, Patch, RecordHeader, SampledAddresses, RECORD_HEADER_SIZE,
};

use crate::error::ForeignError;

/// The most a timekeeping clock's rate may differ from the perf clock's: NTP's frequency
/// adjustment is at most 500 ppm (`MAXFREQ` in the kernel's `timex.h`); the tick adjustment
/// adds up to another 500 ppm (`MAXPHASE` slewed at `MAXFREQ`). Moving a pairing by `d` ns of
/// the perf clock moves `CLOCK_MONOTONIC - perf` by at most `d / 1000`.
pub(crate) const MAX_RATE_PPM: u64 = 1000;

/// `CLOCK_MONOTONIC`/perf-clock pairings taken during (or after) the recording, in time order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pairings {
    /// (`CLOCK_MONOTONIC` ns, `CLOCK_MONOTONIC - perf` ns, the pairing's uncertainty ns).
    points: Vec<(u64, i64, u64)>,
}

impl Pairings {
    /// The monotonic pairings of `snapshots`, in time order.
    pub(crate) fn of(snapshots: &[ClockSnapshot]) -> Self {
        let mut points: Vec<(u64, i64, u64)> = snapshots
            .iter()
            .map(|s| {
                (
                    s.monotonic.ns,
                    s.monotonic.offset_ns,
                    s.monotonic.uncertainty_ns,
                )
            })
            .collect();
        points.sort_unstable_by_key(|point| point.0);
        points.dedup_by_key(|point| point.0);
        Pairings { points }
    }

    /// The latest `CLOCK_MONOTONIC` reading paired.
    fn latest(&self) -> Option<u64> {
        self.points.last().map(|point| point.0)
    }

    /// The perf-clock time of `CLOCK_MONOTONIC` reading `mono`, and a bound on its error:
    /// between two pairings the offset is interpolated (the true offset and the line both move
    /// at most [`MAX_RATE_PPM`] away from the nearer pairing: the bound is the larger
    /// uncertainty plus twice that over the distance); outside them the nearest one's offset is
    /// used (its uncertainty plus [`MAX_RATE_PPM`] over the distance).
    pub(crate) fn perf_ns(&self, mono: u64) -> Option<(u64, u64)> {
        let after = self.points.partition_point(|point| point.0 <= mono);
        let (offset, uncertainty, distance) = match (
            after.checked_sub(1).map(|i| self.points[i]),
            self.points.get(after).copied(),
        ) {
            (Some(at), _) if at.0 == mono => (at.1, at.2, 0),
            (Some(before), Some(next)) => {
                let span = i128::from(next.0 - before.0);
                let into = i128::from(mono - before.0);
                let step = i128::from(next.1) - i128::from(before.1);
                let offset = i128::from(before.1) + step * into / span;
                let distance = (mono - before.0).min(next.0 - mono);
                (
                    offset as i64,
                    before.2.max(next.2),
                    distance.saturating_mul(2),
                )
            }
            (Some(only), None) | (None, Some(only)) => (only.1, only.2, mono.abs_diff(only.0)),
            (None, None) => return None,
        };
        let perf = i128::from(mono) - i128::from(offset);
        let perf = u64::try_from(perf).ok()?;
        let drift = distance / (1_000_000 / MAX_RATE_PPM);
        Some((perf, uncertainty.saturating_add(drift)))
    }
}

/// Who wrote a dump the recording maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Writer {
    /// perfclock's writer (its time conversion record beside it): counter timestamps.
    Perfclock,
    /// Another runtime: see the [module docs](self).
    Other,
}

/// What became of one dump.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Left as it is: every code load sampled (or no samples to filter by), and counter
    /// timestamps already.
    Unchanged,
    /// Copied: only its sampled code loads, in the arch form.
    Copied {
        /// The copy the recording now maps.
        copy: PathBuf,
        /// Its code loads, and how many of them the copy keeps.
        loads: (usize, usize),
        /// Where its timestamps were `CLOCK_MONOTONIC`, the largest error bound of one moved to
        /// a counter value, ns.
        retimed_bound_ns: Option<u64>,
    },
    /// Not injected, for the reason given; its maps were disabled so the others are.
    Skipped(ForeignError),
}

/// Makes every dump of `maps` symbolizable and keeps only its sampled code: see the
/// [module docs](self). `input` is the recording; `conversion` the TIME_CONV the output
/// carries (needed for `CLOCK_MONOTONIC` dumps); `sampled` the recording's sampled addresses
/// (`None`: every load kept); `copies` makes the copies' directory when the first copy needs it.
///
/// # Errors
/// [`ForeignError`] only where the output as a whole cannot be written (the copies' directory,
/// a copy, the recording); a dump that cannot be read or told is an [`Outcome::Skipped`] (or,
/// perfclock's own, [`Outcome::Unchanged`]: perf reads it as before).
pub(crate) fn rewrite(
    maps: &[(&JitDumpMap, Writer)],
    input: &mut File,
    conversion: Option<&TimeConversion>,
    pairings: &Pairings,
    sampled: Option<&SampledAddresses>,
    copies: &mut dyn FnMut() -> Result<PathBuf, ForeignError>,
    patch: &mut Patch,
) -> Result<Vec<(PathBuf, Writer, Outcome)>, ForeignError> {
    let mut outcomes = Vec::with_capacity(maps.len());
    for (index, &(map, writer)) in maps.iter().enumerate() {
        let pid = map_pid(map, input).unwrap_or(map.pid);
        let sampled = sampled.filter(|sampled| sampled.has_process(pid));
        let outcome = match judge(map, writer, conversion, pairings, sampled, pid) {
            Ok(None) => Outcome::Unchanged,
            Ok(Some(Judged {
                copy,
                loads,
                retimed_bound_ns,
            })) => {
                let dir = copies()?.join(format!("dump-{index}"));
                fs::create_dir(&dir).map_err(|e| ForeignError::CopyDir(dir.clone(), e))?;
                let path = dir.join(map.path.file_name().unwrap_or_default());
                fs::write(&path, &copy).map_err(|e| ForeignError::WriteCopy(path.clone(), e))?;
                fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
                    .map_err(|e| ForeignError::WriteCopy(path.clone(), e))?;
                point_at_copy(map, &path, input, patch)?;
                Outcome::Copied {
                    copy: path,
                    loads,
                    retimed_bound_ns,
                }
            }
            Err(_) if writer == Writer::Perfclock => Outcome::Unchanged,
            Err(reason) => {
                disable(map, patch)?;
                Outcome::Skipped(reason)
            }
        };
        outcomes.push((map.path.clone(), writer, outcome));
    }
    Ok(outcomes)
}

/// A dump's copy: its bytes, its code loads and how many it keeps, the retiming's bound.
struct Judged {
    copy: Vec<u8>,
    loads: (usize, usize),
    retimed_bound_ns: Option<u64>,
}

/// Reads `map`'s dump and judges its clock; the copy it needs (`None`: none).
fn judge(
    map: &JitDumpMap,
    writer: Writer,
    conversion: Option<&TimeConversion>,
    pairings: &Pairings,
    sampled: Option<&SampledAddresses>,
    pid: u32,
) -> Result<Option<Judged>, ForeignError> {
    let bytes = fs::read(&map.path).map_err(|e| ForeignError::ReadDump(map.path.clone(), e))?;
    let dump =
        ForeignDump::parse(&bytes).map_err(|e| ForeignError::BadDump(map.path.clone(), e))?;
    let keep = dump.keep_loads(|record| {
        let (start, size) = record.code.unwrap_or_default();
        sampled.is_none_or(|sampled| sampled.any_in(pid, start, size))
    });
    let is_load = |record: &RecordAt| record.code.is_some();
    let loads = dump.records().iter().filter(|r| is_load(r)).count();
    let kept = dump
        .records()
        .iter()
        .zip(&keep)
        .filter(|(r, k)| is_load(r) && **k)
        .count();
    let keeps = |index: usize, _: &RecordAt| keep[index];
    let monotonic = writer == Writer::Other && !dump.has_arch_timestamps();
    if !monotonic && kept == loads {
        return Ok(None);
    }
    if !monotonic {
        let copy = dump.copy(&bytes, keeps, None::<fn(u64) -> Result<u64, ForeignError>>)?;
        return Ok(Some(Judged {
            copy,
            loads: (loads, kept),
            retimed_bound_ns: None,
        }));
    }
    let conversion = conversion.ok_or(ForeignError::NoPairing)?;
    let latest = pairings.latest().ok_or(ForeignError::NoPairing)?;
    // Every stamp is checked, kept or not: a CLOCK_MONOTONIC stamp is never 0 (the clock starts
    // at boot, long before a JIT runs) and never later than the latest pairing, taken after
    // the recording.
    if let Some(record) = dump
        .records()
        .iter()
        .find(|r| r.timestamp == 0 || r.timestamp > latest)
    {
        return Err(ForeignError::NotMonotonic {
            dump: map.path.clone(),
            stamp: record.timestamp,
            latest,
        });
    }
    let mut bound_ns = 0u64;
    let retime = |mono: u64| -> Result<u64, ForeignError> {
        let (perf, bound) = pairings.perf_ns(mono).ok_or(ForeignError::NoPairing)?;
        bound_ns = bound_ns.max(bound);
        Ok(conversion.ns_to_cycles(perf))
    };
    let copy = dump.copy(&bytes, keeps, Some(retime))?;
    Ok(Some(Judged {
        copy,
        loads: (loads, kept),
        retimed_bound_ns: Some(bound_ns),
    }))
}

/// The pid of the first record that maps `map`'s dump: the process's, in the recording's pid
/// namespace (the name's is the writer's own, which a container's differs from).
fn map_pid(map: &JitDumpMap, input: &mut File) -> Option<u32> {
    let at = map.first_record?;
    let mut pid = [0u8; 4];
    input
        .seek(SeekFrom::Start(at + RECORD_HEADER_SIZE as u64))
        .ok()?;
    input.read_exact(&mut pid).ok()?;
    Some(u32::from_le_bytes(pid))
}

impl From<ForeignDumpError> for ForeignError {
    fn from(error: ForeignDumpError) -> Self {
        ForeignError::DumpChanged(error)
    }
}

/// Disables every map of `map`'s dump: perf's `/jit-` becomes `/jiX-`.
fn disable(map: &JitDumpMap, patch: &mut Patch) -> Result<(), ForeignError> {
    for &slash in &map.marker_slashes {
        patch.overwrite(slash + 3, b"X")?;
    }
    Ok(())
}

/// Disables the original's maps and inserts a map of `copy` with the first one's fields.
fn point_at_copy(
    map: &JitDumpMap,
    copy: &Path,
    input: &mut File,
    patch: &mut Patch,
) -> Result<(), ForeignError> {
    let at = map.first_record.ok_or(ForeignError::CompressedMap)?;
    let mut header = [0u8; RECORD_HEADER_SIZE];
    input.seek(SeekFrom::Start(at))?;
    input.read_exact(&mut header)?;
    let mut record = vec![0u8; usize::from(RecordHeader::parse(header).size)];
    input.seek(SeekFrom::Start(at))?;
    input.read_exact(&mut record)?;
    let name = copy.as_os_str().as_encoded_bytes();
    patch.insert_record(&with_file_name(&record, name)?)?;
    disable(map, patch)
}

/// `OUT.jit-XXXXXX` (random), mode 0755, beside OUT: where the copies and the `jitted-*.so`
/// that `perf inject --jit` writes beside them stay for perf report.
pub(crate) fn make_copies_dir(output: &Path) -> Result<PathBuf, ForeignError> {
    let parent = match output.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let parent = parent
        .canonicalize()
        .map_err(|e| ForeignError::CopyDir(parent.clone(), e))?;
    let name = output.file_name().unwrap_or_default().to_string_lossy();
    let dir = tempfile::Builder::new()
        .prefix(&format!("{name}.jit-"))
        .permissions(fs::Permissions::from_mode(0o755))
        .tempdir_in(&parent)
        .map_err(|e| ForeignError::CopyDir(parent.clone(), e))?
        .keep();
    // mkdtemp's mode goes through the umask.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
        .map_err(|e| ForeignError::CopyDir(dir.clone(), e))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairings(points: &[(u64, i64, u64)]) -> Pairings {
        Pairings {
            points: points.to_vec(),
        }
    }

    #[test]
    fn pairings_interpolate_inside_and_hold_the_nearest_offset_outside() {
        let p = pairings(&[
            (1_000_000_000, -1_500_000, 20),
            (2_000_000_000, -1_500_100, 30),
        ]);
        // At a pairing: its offset, its uncertainty.
        assert_eq!(p.perf_ns(1_000_000_000), Some((1_001_500_000, 20)));
        // Halfway: half the step; the larger uncertainty plus the rate allowance over 0.5 s.
        assert_eq!(
            p.perf_ns(1_500_000_000),
            Some((1_501_500_050, 30 + 1_000_000))
        );
        // Before the first: its offset, the allowance over the distance.
        assert_eq!(p.perf_ns(999_000_000), Some((1_000_500_000, 20 + 1_000)));
        assert_eq!(pairings(&[]).perf_ns(5), None);
        // A perf time before 0 is none.
        assert_eq!(pairings(&[(10, 20, 0)]).perf_ns(10), None);
    }
}
