//! Where the output's `PERF_RECORD_TIME_CONV` comes from: the recording's own (kernel mode),
//! the tightest of perfclock's sidecars once they agree, or this machine's clock.

use std::fmt;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use perfclock_core::{BootId, TimeConversion};
use perfclock_jitdump::timeconv::TimeConvRecord;
use perfclock_perfdata::Scan;

use crate::input::shown;
use crate::sidecar::{self, Disagreement, Sidecar};

/// Where the output's TIME_CONV comes from.
#[derive(Debug)]
#[non_exhaustive]
pub enum TimeConvSource {
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
    /// This machine's perf clock (no usable sidecar).
    ThisClock {
        /// Its mode.
        mode: perfclock::Mode,
        /// Its bound over the recording, ns.
        bound_ns: u64,
        /// The conversion inserted.
        conversion: TimeConversion,
    },
}

impl fmt::Display for TimeConvSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InInput => f.write_str(
                "the recording holds a PERF_RECORD_TIME_CONV already (perf record writes one \
                 where the kernel publishes the conversion)",
            ),
            Self::NotNeeded => {
                f.write_str("no jitdump is mapped: no PERF_RECORD_TIME_CONV is needed")
            }
            Self::Sidecar {
                path,
                record,
                inserted,
            } => {
                let conversion = inserted.conversion;
                write!(
                    f,
                    "added PERF_RECORD_TIME_CONV from {} ({} mode, error bound {} ns; time_mult \
                     {}, time_shift {}, time_zero {}; {} record(s) agreed)",
                    shown(path),
                    record.mode().as_str(),
                    inserted.bound_ns,
                    conversion.mult(),
                    conversion.shift(),
                    conversion.zero(),
                    inserted.agreed
                )
            }
            Self::ThisClock {
                mode,
                bound_ns,
                conversion,
            } => write!(
                f,
                "added PERF_RECORD_TIME_CONV from this machine's perf clock ({mode:?} mode, \
                 error bound {bound_ns} ns; time_mult {}, time_shift {}, time_zero {})",
                conversion.mult(),
                conversion.shift(),
                conversion.zero()
            ),
        }
    }
}

/// The TIME_CONV put in from a sidecar: the conversion, its bound over the recording, and how
/// many sidecars agreed.
#[derive(Debug, Clone, Copy)]
pub struct Inserted {
    /// The conversion inserted.
    pub conversion: TimeConversion,
    /// Its bound over the recording's samples, ns.
    pub bound_ns: u64,
    /// How many sidecars were found and agreed.
    pub agreed: usize,
}

/// Why this machine's clock cannot give the TIME_CONV.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClockError {
    /// The recording is not of this boot (and no sidecar gives its conversion).
    OtherBoot(PathBuf),
    /// No perf clock can be had here.
    NoClock(perfclock::Error),
    /// The clock gave no conversion.
    Conversion(perfclock::ReadError),
    /// No snapshot for a pairing.
    Snapshot(perfclock::SnapshotError),
}

impl fmt::Display for ClockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OtherBoot(input) => write!(
                f,
                "IN {} maps jitdumps without a perfclock time conversion record, whose stamps \
                 need this boot's perf clock to convert, but IN was recorded before this \
                 machine last booted: convert it on the boot that recorded it (or record with \
                 perfclock record, which converts them as it finishes)",
                shown(input)
            ),
            Self::NoClock(_) | Self::Conversion(_) | Self::Snapshot(_) => f.write_str(
                "IN maps jitdumps without a perfclock time conversion record, whose stamps need \
                 this machine's perf clock, and there is none",
            ),
        }
    }
}

impl std::error::Error for ClockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::OtherBoot(_) => None,
            Self::NoClock(error) => Some(error),
            Self::Conversion(error) => Some(error),
            Self::Snapshot(error) => Some(error),
        }
    }
}

/// This machine's perf clock, for a recording of this boot: its mode, the bound over the
/// recording, and its conversion anchored in the middle of the recording's samples
/// ([`perfclock::Clock::conversion_at`]; without sample times, now). `recorded` says the
/// pairings were taken during the recording (so it is of this boot).
pub(crate) fn this_clock(
    input: &std::path::Path,
    metadata: &fs::Metadata,
    recorded: bool,
    scan: &Scan,
) -> Result<(perfclock::Mode, u64, TimeConversion), ClockError> {
    if !recorded && recorded_before_boot(metadata) {
        return Err(ClockError::OtherBoot(input.to_owned()));
    }
    let clock = perfclock::init().map_err(ClockError::NoClock)?;
    let now = clock.read_counter().unwrap_or(0);
    let cycles_of = |ns: u64| clock.ns_to_cycles(ns).unwrap_or(now);
    let (first, last) = scan.sample_times.map_or((now, now), |(first, last)| {
        (cycles_of(first), cycles_of(last))
    });
    let anchor = first + (last - first.min(last)) / 2;
    let conversion = clock
        .conversion_at(anchor)
        .map_err(ClockError::Conversion)?;
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

/// The sidecars of this boot that disagree with this machine's clock, where it is exact (bound
/// 0: kernel mode, or paravirt mode with its offset from the kernel or a published page): the
/// kernel's own arithmetic is the judge, so a stale or forged record cannot pass for the truth.
/// Elsewhere (a calibrated clock, another boot) none is judged here: the sidecars are checked
/// against each other ([`sidecar::check_consistent`]).
pub(crate) fn disagreeing_with_this_clock(
    sidecars: &[Sidecar],
    this_boot: Option<BootId>,
) -> Vec<(usize, Disagreement)> {
    let Some(boot_id) = this_boot else {
        return Vec::new();
    };
    let Ok(clock) = perfclock::init() else {
        return Vec::new();
    };
    if clock.error_bound_ns() != 0 {
        return Vec::new();
    }
    let mut disagreeing = Vec::new();
    for (index, sidecar) in sidecars.iter().enumerate() {
        let record = &sidecar.record;
        if record.boot_id() != boot_id {
            continue;
        }
        let counter = record.written_counter();
        let Ok(truth) = clock.cycles_to_ns(counter) else {
            continue;
        };
        // This clock's own form anchored at `counter` is exact there: the record alone brings
        // an error.
        let allowed_ns = record
            .error_bound_ns()
            .saturating_add(record.conversion_error_at_ns(counter, counter));
        let apart_ns = record
            .conversion_at(counter)
            .cycles_to_ns(counter)
            .abs_diff(truth);
        if apart_ns > allowed_ns {
            disagreeing.push((
                index,
                Disagreement {
                    first: None,
                    second: sidecar.path.clone(),
                    counter,
                    apart_ns,
                    allowed_ns,
                },
            ));
        }
    }
    disagreeing
}

/// The TIME_CONV of the sidecars (which must agree): the one used and what was inserted.
///
/// # Errors
/// [`sidecar::AgreementError`].
pub(crate) fn from_sidecars(
    scan: &Scan,
    sidecars: &[Sidecar],
) -> Result<Option<(Sidecar, Inserted)>, sidecar::AgreementError> {
    sidecar::check_consistent(sidecars)?;
    // All agree within their bounds, so the truth lies within each one's bound. A paravirt
    // record's conversion is anchored in the middle of the samples (exact there at any uptime).
    let Some(reference) = sidecar::reference(sidecars) else {
        return Ok(None);
    };
    let record = &reference.record;
    let anchor = scan
        .sample_times
        .map_or(record.written_counter(), |(first, last)| {
            record.cycles_at(first / 2 + last / 2)
        });
    let conversion = record.conversion_at(anchor);
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
    Ok(Some((reference.clone(), inserted)))
}

/// Whether the sidecar used was written on another boot than `this_boot` (its kind of error
/// when unreadable): not an error (analysing a recording after a reboot or on another machine,
/// the reason for --dump-dir, is ordinary, and the conversion belongs to the recording's boot),
/// but worth a word if IN is of this boot.
pub(crate) fn boot_warning(
    source: &TimeConvSource,
    this_boot: Result<BootId, std::io::ErrorKind>,
) -> Option<BootWarning> {
    let TimeConvSource::Sidecar { path, record, .. } = source else {
        return None;
    };
    match this_boot {
        Ok(this_boot) if record.boot_id() == this_boot => None,
        Ok(this_boot) => Some(BootWarning::OtherBoot {
            path: path.clone(),
            written_on: record.boot_id(),
            this_boot,
        }),
        Err(kind) => Some(BootWarning::Unknown(kind)),
    }
}

/// The sidecars' boot, against this machine's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BootWarning {
    /// Written on another boot.
    OtherBoot {
        /// A sidecar.
        path: PathBuf,
        /// The boot it names.
        written_on: BootId,
        /// This machine's.
        this_boot: BootId,
    },
    /// This machine's boot id is unreadable.
    Unknown(std::io::ErrorKind),
}

impl fmt::Display for BootWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OtherBoot {
                path,
                written_on,
                this_boot,
            } => write!(
                f,
                "{} was written on boot {written_on}, this machine is on boot {this_boot}: fine \
                 if IN was recorded on that boot (analysed after a reboot or elsewhere); if IN \
                 was recorded on this boot, the record is stale",
                shown(path),
            ),
            Self::Unknown(kind) => write!(
                f,
                "cannot read {} ({kind}): the records' boot is not checked",
                perfclock_os::time::BOOT_ID_PATH
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::pvclock::PvclockParams;
    use perfclock_jitdump::timeconv::{PvclockConversion, TimeConvMode};
    use std::path::Path;

    const BOOT: BootId = BootId::from_words([0x0b3f_4c5e_1111_2222, 0x3333_4444_5555_6666]);

    /// 1 ns per tick from `zero`.
    fn record(mode: TimeConvMode, zero: u64, bound_ns: u64, written: u64) -> TimeConvRecord {
        let conversion = TimeConversion::new(1 << 31, 31, zero).unwrap();
        TimeConvRecord::new(1, BOOT, mode, "tsc", conversion, bound_ns, written)
    }

    fn sidecar(name: &str, record: TimeConvRecord) -> Sidecar {
        Sidecar {
            path: PathBuf::from(name),
            record,
        }
    }

    fn scan(sample_times: Option<(u64, u64)>) -> Scan {
        let mut scan = Scan::default();
        scan.sample_times = sample_times;
        scan
    }

    #[test]
    fn from_sidecars_inserts_the_tightest_records_conversion_and_counts_all() {
        let sidecars = [
            sidecar("loose", record(TimeConvMode::Calibrated, 1_050, 100, 30)),
            sidecar("tight", record(TimeConvMode::Calibrated, 1_000, 20, 10)),
            sidecar("looser", record(TimeConvMode::Calibrated, 980, 200, 40)),
        ];
        let (used, inserted) = from_sidecars(&scan(Some((5_000, 9_000))), &sidecars)
            .unwrap()
            .unwrap();
        assert_eq!(used.path, Path::new("tight"));
        assert_eq!(inserted.conversion, sidecars[1].record.conversion());
        // No pvclock form: the bound is the record's own, with no drift.
        assert_eq!(inserted.bound_ns, 20);
        assert_eq!(inserted.agreed, 3);
    }

    #[test]
    fn from_sidecars_of_none_is_none() {
        assert!(from_sidecars(&scan(None), &[]).unwrap().is_none());
    }

    #[test]
    fn from_sidecars_refuses_sidecars_that_disagree() {
        let sidecars = [
            sidecar("a", record(TimeConvMode::Kernel, 1_000, 0, 10)),
            sidecar("b", record(TimeConvMode::Calibrated, 2_000, 100, 20)),
        ];
        let error = from_sidecars(&scan(None), &sidecars).unwrap_err();
        assert_eq!(
            error,
            sidecar::AgreementError::Disagree(Disagreement {
                first: Some(PathBuf::from("a")),
                second: PathBuf::from("b"),
                counter: 20,
                apart_ns: 1_000,
                allowed_ns: 100,
            })
        );
    }

    #[test]
    fn a_paravirt_record_is_anchored_in_the_middle_of_the_samples() {
        // A counter of about 0.59 ns per tick, the boot's offset 5 s.
        let params = PvclockParams::new(1_000_003, 2_000_000, 0x4bda_12f7, 1, 1).unwrap();
        let offset_ns = 5_000_000_000;
        let fallback = TimeConversion::new(1, 0, 0).unwrap();
        let record = TimeConvRecord::new(
            1,
            BOOT,
            TimeConvMode::Paravirt,
            "tsc",
            fallback,
            7,
            3_000_000,
        )
        .with_pvclock(PvclockConversion { params, offset_ns });
        let (first, last) = (6_000_000_000, 8_000_000_000);
        let sidecars = [sidecar("pv", record.clone())];
        let (_, inserted) = from_sidecars(&scan(Some((first, last))), &sidecars)
            .unwrap()
            .unwrap();
        let middle = record.cycles_at(7_000_000_000);
        assert_eq!(inserted.conversion, record.conversion_at(middle));
        // Exact in the middle: the pvclock's own time there.
        assert_eq!(
            inserted.conversion.cycles_to_ns(middle),
            params.perf_ns(middle, offset_ns)
        );
        let drift = record
            .conversion_error_at_ns(record.cycles_at(first), middle)
            .max(record.conversion_error_at_ns(record.cycles_at(last), middle));
        assert_eq!(inserted.bound_ns, 7 + drift);
        // Without sample times: anchored where the record was written.
        let (_, unanchored) = from_sidecars(&scan(None), &sidecars).unwrap().unwrap();
        assert_eq!(unanchored.conversion, record.conversion_at(3_000_000));
        assert_eq!(
            unanchored.bound_ns,
            7 + record.conversion_error_at_ns(3_000_000, 3_000_000)
        );
    }

    /// A TIME_CONV taken from a sidecar written on boot `boot_id`.
    fn from_boot(boot_id: BootId) -> TimeConvSource {
        let conversion = TimeConversion::new(1 << 31, 31, 0).unwrap();
        TimeConvSource::Sidecar {
            path: PathBuf::from("/tmp/jit-1.dump.timeconv"),
            record: Box::new(TimeConvRecord::new(
                1,
                boot_id,
                TimeConvMode::Kernel,
                "tsc",
                conversion,
                0,
                1,
            )),
            inserted: Inserted {
                conversion,
                bound_ns: 0,
                agreed: 1,
            },
        }
    }

    #[test]
    fn boot_warning_only_for_a_sidecar_of_another_boot() {
        let other = BootId::from_words([BOOT.words()[0], BOOT.words()[1] ^ 1]);
        assert_eq!(boot_warning(&TimeConvSource::InInput, Ok(BOOT)), None);
        assert_eq!(boot_warning(&from_boot(BOOT), Ok(BOOT)), None);
        assert_eq!(
            boot_warning(&from_boot(other), Ok(BOOT)),
            Some(BootWarning::OtherBoot {
                path: PathBuf::from("/tmp/jit-1.dump.timeconv"),
                written_on: other,
                this_boot: BOOT,
            })
        );
        let unreadable = std::io::ErrorKind::PermissionDenied;
        assert_eq!(
            boot_warning(&from_boot(BOOT), Err(unreadable)),
            Some(BootWarning::Unknown(unreadable))
        );
    }

    #[test]
    fn boot_warning_display_escapes_the_path() {
        let warning = BootWarning::OtherBoot {
            path: PathBuf::from("/tmp/a\nb.timeconv"),
            written_on: BOOT,
            this_boot: BootId::from_words([BOOT.words()[0], BOOT.words()[1] ^ 1]),
        };
        let shown = warning.to_string();
        assert!(
            shown.starts_with(&format!(
                "/tmp/a\\nb.timeconv was written on boot {BOOT}, this machine is on boot {}",
                BootId::from_words([BOOT.words()[0], BOOT.words()[1] ^ 1])
            )),
            "{shown:?}"
        );
        assert!(!shown.contains('\n'), "{shown:?}");
    }
}
