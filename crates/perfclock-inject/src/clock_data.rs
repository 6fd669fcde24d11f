//! HEADER_CLOCK_DATA from a snapshot taken now, for a recording made earlier on this boot
//! (`inject-time-conv --clock-data-now`). The pairing is exact now (the snapshot's
//! uncertainty); for a sample of the recording it is off by whatever CLOCK_REALTIME did between
//! the sample and now: NTP's slew (at most 500 ppm of the time since) or a step. A step is
//! looked for by comparing the snapshot with the pairing the recording itself implies at its
//! end: IN's modification time (written by perf record just after its last sample) against the
//! last sample's time (HEADER_SAMPLE_TIME).

use std::fmt;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::time::UNIX_EPOCH;

use perfclock::ClockSnapshot;
use perfclock_perfdata::{ClockData, Feature, Layout, MAX_REALTIME_SLEW_PPM};

/// The file's mtime is stamped with the coarse clock (one jiffy, 4 ms at HZ=250) when perf
/// writes its header; allowance for that granularity.
const MTIME_GRANULARITY_NS: u64 = 10_000_000;
/// perf record writes its header after the last sample and after its build-id pass; more than
/// this between the two is taken as CLOCK_REALTIME stepped forward (a warning).
const MAX_HEADER_DELAY_NS: u64 = 60_000_000_000;

/// Why the snapshot cannot give the recording its wall clock.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClockDataError {
    /// perfclock could not take a snapshot.
    Snapshot(perfclock::SnapshotError),
    /// IN was last written before this boot: its perf clock is another boot's.
    OtherBoot {
        /// IN's mtime, s since the epoch.
        mtime_s: u64,
        /// This boot's start, s since the epoch.
        boot_s: u64,
    },
    /// CLOCK_REALTIME went back (relative to the perf clock) since the recording.
    SteppedBack {
        /// How far, ns.
        by_ns: u64,
        /// What slew and granularity allow, ns.
        allowed_ns: u64,
    },
}

impl fmt::Display for ClockDataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Snapshot(_) => f.write_str(
                "--clock-data-now: cannot take a clock snapshot; run without --clock-data-now",
            ),
            Self::OtherBoot { mtime_s, boot_s } => write!(
                f,
                "--clock-data-now: IN was written at {mtime_s} s (Unix time), before this boot \
                 ({boot_s} s): its perf clock belongs to another boot, so a snapshot taken now \
                 says nothing about it; run without --clock-data-now"
            ),
            Self::SteppedBack { by_ns, allowed_ns } => write!(
                f,
                "--clock-data-now: CLOCK_REALTIME is {by_ns} ns behind where the recording's end \
                 puts it (slew allows {allowed_ns} ns): it was stepped back since the recording \
                 (or IN's modification time was changed), so wall times would be off by that \
                 much; take the snapshot during the recording (perfclock record), or run \
                 without --clock-data-now"
            ),
        }
    }
}

impl std::error::Error for ClockDataError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Snapshot(error) => Some(error),
            Self::OtherBoot { .. } | Self::SteppedBack { .. } => None,
        }
    }
}

/// What the step check could not rule out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClockDataWarning {
    /// IN was written this long after its last sample by the snapshot's wall clock: more than
    /// perf takes, so CLOCK_REALTIME was probably stepped forward, and wall times are late by
    /// up to that.
    SteppedForward {
        /// The delay, s.
        delay_s: u64,
    },
    /// IN has no HEADER_SAMPLE_TIME (or its last sample lies after now): a step cannot be
    /// detected.
    Unchecked,
}

impl fmt::Display for ClockDataWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SteppedForward { delay_s } => write!(
                f,
                "IN was written {delay_s} s after its last sample by the snapshot's wall clock: \
                 CLOCK_REALTIME was probably stepped forward since the recording, and its wall \
                 times are late by up to that"
            ),
            Self::Unchecked => f.write_str(
                "IN has no HEADER_SAMPLE_TIME (or its last sample lies after now): a \
                 CLOCK_REALTIME step since the recording cannot be detected",
            ),
        }
    }
}

/// The CLOCK_DATA for IN from `snapshot`, after the boot and step checks, and what the step
/// check could not rule out.
///
/// # Errors
/// [`ClockDataError`]: IN predates this boot, or CLOCK_REALTIME was stepped back since.
pub fn from_snapshot(
    file: &mut File,
    layout: &Layout,
    snapshot: &ClockSnapshot,
) -> Result<(ClockData, Option<ClockDataWarning>), ClockDataError> {
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
    let warning = match (mtime_ns, last_sample_ns(file, layout)) {
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
            (apart > i128::from(MAX_HEADER_DELAY_NS)).then_some(ClockDataWarning::SteppedForward {
                delay_s: (apart / 1_000_000_000) as u64,
            })
        }
        _ => Some(ClockDataWarning::Unchecked),
    };
    Ok((
        ClockData::perf_clock(snapshot.realtime.ns, snapshot.perf_ns),
        warning,
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
