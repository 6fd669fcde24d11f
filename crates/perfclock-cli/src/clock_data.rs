//! `inject-time-conv --clock-data-now`: HEADER_CLOCK_DATA from a snapshot taken by this process,
//! for a recording made earlier on this boot. The pairing is exact now (the snapshot's
//! uncertainty); for a sample of the recording it is off by whatever CLOCK_REALTIME did between
//! the sample and now: NTP's slew (at most 500 ppm of the time since) or a step. A step is
//! looked for by comparing the snapshot with the pairing the recording itself implies at its
//! end: IN's modification time (written by perf record just after its last sample) against the
//! last sample's time (HEADER_SAMPLE_TIME).

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::time::UNIX_EPOCH;

use perfclock::ClockSnapshot;
use perfclock_perfdata::{ClockData, Feature, Layout, MAX_REALTIME_SLEW_PPM};

use crate::error::ClockDataError;
use crate::output::errln;

/// The file's mtime is stamped with the coarse clock (one jiffy, 4 ms at HZ=250) when perf
/// writes its header; allowance for that granularity.
const MTIME_GRANULARITY_NS: u64 = 10_000_000;
/// perf record writes its header after the last sample and after its build-id pass; more than
/// this between the two is taken as CLOCK_REALTIME stepped forward (a warning).
const MAX_HEADER_DELAY_NS: u64 = 60_000_000_000;

/// The CLOCK_DATA for IN from `snapshot`, after the boot and step checks; warnings on stderr.
///
/// # Errors
/// [`ClockDataError`]: IN predates this boot, or CLOCK_REALTIME was stepped back since.
pub(crate) fn from_snapshot(
    file: &mut File,
    layout: &Layout,
    snapshot: &ClockSnapshot,
) -> Result<ClockData, ClockDataError> {
    let mtime_ns = file
        .metadata()
        .ok()
        .and_then(|metadata| metadata.modified().ok())
        .and_then(|mtime| mtime.duration_since(UNIX_EPOCH).ok())
        .map(|since| since.as_nanos() as u64);
    if let (Some(mtime_ns), Some(boot_s)) = (mtime_ns, boot_time_s()) {
        if mtime_ns / 1_000_000_000 < boot_s {
            return Err(ClockDataError::OtherBoot {
                mtime_s: mtime_ns / 1_000_000_000,
                boot_s,
            });
        }
    }
    match (mtime_ns, last_sample_ns(file, layout)) {
        (Some(mtime_ns), Some(last_ns)) if last_ns <= snapshot.perf_ns => {
            // Where the recording's end puts wall time minus where the snapshot puts it, at
            // the last sample: the header delay (>= 0) plus any step back since.
            let implied_wall = i128::from(snapshot.realtime.offset_ns) + i128::from(last_ns);
            let apart = i128::from(mtime_ns) - implied_wall;
            let since = snapshot.perf_ns - last_ns;
            let allowed = snapshot.realtime.uncertainty_ns
                + since / 1_000_000 * MAX_REALTIME_SLEW_PPM
                + MTIME_GRANULARITY_NS;
            if apart < -i128::from(allowed) {
                return Err(ClockDataError::SteppedBack {
                    by_ns: apart.unsigned_abs() as u64,
                    allowed_ns: allowed,
                });
            }
            if apart > i128::from(MAX_HEADER_DELAY_NS) {
                errln!(
                    "perfclock inject-time-conv: warning: IN was written {} s after its last \
                     sample by the snapshot's wall clock: CLOCK_REALTIME was probably stepped \
                     forward since the recording, and its wall times are late by up to that",
                    apart / 1_000_000_000
                );
            }
        }
        _ => errln!(
            "perfclock inject-time-conv: warning: IN has no HEADER_SAMPLE_TIME (or its last \
             sample lies after now): a CLOCK_REALTIME step since the recording cannot be \
             detected"
        ),
    }
    Ok(ClockData::perf_clock(
        snapshot.realtime.ns,
        snapshot.perf_ns,
    ))
}

/// The last sample's time from HEADER_SAMPLE_TIME (first u64, last u64).
fn last_sample_ns(file: &mut File, layout: &Layout) -> Option<u64> {
    let section = layout.feature_section(Feature::SAMPLE_TIME)?;
    if section.size < 16 {
        return None;
    }
    let mut times = [0u8; 16];
    file.seek(SeekFrom::Start(section.offset)).ok()?;
    file.read_exact(&mut times).ok()?;
    let last = u64::from_le_bytes(times[8..16].try_into().ok()?);
    (last != 0).then_some(last)
}

/// This boot's start (`btime` in /proc/stat), s since the epoch.
fn boot_time_s() -> Option<u64> {
    fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}
