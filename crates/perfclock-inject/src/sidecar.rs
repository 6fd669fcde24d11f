//! The time conversion records (sidecars) perfclock's jitdump writers leave beside each dump
//! (`jit-<pid>.dump.timeconv`): found, read as untrusted files, and checked against each other.
//! A sidecar is another process's file: its content is never quoted in a message.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use perfclock_jitdump::timeconv::{TimeConvMode, TimeConvRecord, SUFFIX};
use perfclock_jitdump::{JitClock, TimeConvError};
use perfclock_os::untrusted_file::{open_untrusted, Root, UntrustedFileError};

use crate::input::shown;

/// A sidecar is a dozen short lines; anything longer is not one.
pub const MAX_SIDECAR_BYTES: u64 = 64 * 1024;

/// Why a dump's sidecar was not used (the dump is then left out).
#[derive(Debug)]
#[non_exhaustive]
pub enum SidecarError {
    /// It could not be opened as an untrusted file (a link, not a regular file, too long,
    /// unreadable by its owner).
    Open(PathBuf, UntrustedFileError),
    /// Reading it failed.
    Read(PathBuf, std::io::Error),
    /// It is not UTF-8 text.
    NotText(PathBuf),
    /// It is not a valid record.
    Invalid(PathBuf, TimeConvError),
    /// Its dump's timestamps are not raw counter values: nothing for a TIME_CONV to convert.
    NotArchClock {
        /// The sidecar.
        path: PathBuf,
        /// The dump's clock.
        clock: JitClock,
    },
    /// Its pid is not its dump's.
    Pid {
        /// The sidecar.
        path: PathBuf,
        /// The dump's pid.
        dump_pid: u32,
        /// The pid the sidecar names.
        record_pid: u32,
    },
    /// Its conversion differs from this machine's exact clock, or from the reference sidecar,
    /// by more than their bounds allow: stale, another run's, or forged.
    Disagrees(Disagreement),
}

impl fmt::Display for SidecarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open(path, _) => write!(f, "its time conversion record {}", shown(path)),
            Self::Read(path, _) => {
                write!(f, "cannot read its time conversion record {}", shown(path))
            }
            Self::NotText(path) => write!(
                f,
                "{} is not text: not a time conversion record",
                shown(path)
            ),
            Self::Invalid(path, _) => write!(f, "{}", shown(path)),
            Self::NotArchClock { path, clock } => write!(
                f,
                "{} says its dump's timestamps are {clock}, not raw counter values: a TIME_CONV \
                 record would not apply to them. {}",
                shown(path),
                not_arch_clock_advice(*clock)
            ),
            Self::Pid {
                path,
                dump_pid,
                record_pid,
            } => write!(
                f,
                "{} says pid={record_pid} but belongs to jit-{dump_pid}.dump: it was copied from \
                 another dump; pass --dump-dir with the directory of the right one",
                shown(path)
            ),
            Self::Disagrees(disagreement) => write!(f, "{disagreement}"),
        }
    }
}

impl std::error::Error for SidecarError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open(_, error) => Some(error),
            Self::Read(_, error) => Some(error),
            Self::Invalid(_, error) => Some(error),
            Self::NotText(_)
            | Self::NotArchClock { .. }
            | Self::Pid { .. }
            | Self::Disagrees(_) => None,
        }
    }
}

/// What to do with a dump stamped in `clock` instead of raw counter values.
fn not_arch_clock_advice(clock: JitClock) -> &'static str {
    match clock {
        JitClock::Perf => {
            "A perf-clock dump needs no conversion: open the recording with `samply import` as \
             it is, or write the dump with jitdump_clock=arch (PERFCLOCK_JITDUMP_CLOCK=arch) for \
             perf inject --jit"
        }
        _ => {
            "A CLOCK_MONOTONIC dump goes with a recording stamped in CLOCK_MONOTONIC: `samply \
             record`, or `perf record -k monotonic` followed by `perf inject --jit` directly; for \
             a default perf record write the dump with jitdump_clock=arch \
             (PERFCLOCK_JITDUMP_CLOCK=arch)"
        }
    }
}

/// Two conversions that differ by more than their bounds allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    /// One sidecar (or `None`: this machine's clock).
    pub first: Option<PathBuf>,
    /// The other.
    pub second: PathBuf,
    /// Counter value where they were compared.
    pub counter: u64,
    /// How far apart their conversions are there, ns.
    pub apart_ns: u64,
    /// The sum of their bounds, ns.
    pub allowed_ns: u64,
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Disagreement {
            first,
            second,
            counter,
            apart_ns,
            allowed_ns,
        } = self;
        match first {
            Some(first) => write!(f, "{} and {}", shown(first), shown(second))?,
            None => write!(f, "this machine's clock and {}", shown(second))?,
        }
        write!(
            f,
            " disagree by {apart_ns} ns at counter {counter}, more than their error bounds' sum \
             ({allowed_ns} ns): a record is stale or from another run; move it away or pass \
             --dump-dir with the right directory"
        )
    }
}

/// Sidecars of one recording that cannot all be right: they name different counters or boots,
/// or disagree with the one that would go into the output.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AgreementError {
    /// Two name different counters or boots.
    Inconsistent {
        /// Which field.
        what: &'static str,
        /// One sidecar.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
    /// Two conversions differ by more than their bounds allow.
    Disagree(Disagreement),
}

impl fmt::Display for AgreementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inconsistent {
                what,
                first,
                second,
            } => write!(
                f,
                "{} and {} name different {what}s, but one recording has one: one of them is \
                 stale; move it away or pass --dump-dir with the right directory",
                shown(first),
                shown(second)
            ),
            Self::Disagree(disagreement) => write!(f, "{disagreement}"),
        }
    }
}

impl std::error::Error for AgreementError {}

/// A sidecar read: where it was, and its record.
#[derive(Debug, Clone)]
pub struct Sidecar {
    /// Where it was read.
    pub path: PathBuf,
    /// Its record.
    pub record: TimeConvRecord,
}

/// Where the sidecar of `dump` may be: beside the dump (under `root`), or in each of
/// `dump_dirs` (here).
fn places(dump: &Path, root: Root, dump_dirs: &[PathBuf]) -> Vec<(Root, PathBuf)> {
    let mut name = dump.file_name().unwrap_or_default().to_os_string();
    name.push(SUFFIX);
    if dump_dirs.is_empty() {
        vec![(root, dump.with_file_name(&name))]
    } else {
        dump_dirs
            .iter()
            .map(|dir| (Root::Here, dir.join(&name)))
            .collect()
    }
}

/// The sidecar of `dump` (the writer's pid `pid`), `Ok(None)` where there is none (another
/// writer's dump).
///
/// # Errors
/// [`SidecarError`]: one is there, but unusable.
pub fn find(
    dump: &Path,
    pid: u32,
    root: Root,
    dump_dirs: &[PathBuf],
) -> Result<Option<Sidecar>, SidecarError> {
    for (root, path) in places(dump, root, dump_dirs) {
        match open_untrusted(root, &path, MAX_SIDECAR_BYTES) {
            Ok(opened) => return read(path, opened.file, pid).map(Some),
            Err(UntrustedFileError::Resolve {
                errno: libc::ENOENT,
            }) => continue,
            Err(error) => return Err(SidecarError::Open(path, error)),
        }
    }
    Ok(None)
}

/// The record `file` (at `path`) holds, for a dump of `pid`.
pub(crate) fn read(path: PathBuf, file: std::fs::File, pid: u32) -> Result<Sidecar, SidecarError> {
    let mut bytes = Vec::new();
    if let Err(error) = file.take(MAX_SIDECAR_BYTES).read_to_end(&mut bytes) {
        return Err(SidecarError::Read(path, error));
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return Err(SidecarError::NotText(path));
    };
    let record = match TimeConvRecord::parse(&text) {
        Ok(record) => record,
        Err(error) => return Err(SidecarError::Invalid(path, error)),
    };
    if record.clock() != JitClock::Arch {
        let clock = record.clock();
        return Err(SidecarError::NotArchClock { path, clock });
    }
    if record.pid() != pid {
        let record_pid = record.pid();
        return Err(SidecarError::Pid {
            path,
            dump_pid: pid,
            record_pid,
        });
    }
    Ok(Sidecar { path, record })
}

/// The sidecar whose conversion goes into OUT: the smallest bound is the tightest guarantee (a
/// kernel-mode record, bound 0, wins); among equal bounds the latest written holds the longest
/// calibration.
pub fn reference(sidecars: &[Sidecar]) -> Option<&Sidecar> {
    sidecars.iter().min_by_key(|sidecar| {
        (
            sidecar.record.error_bound_ns(),
            u64::MAX - sidecar.record.written_counter(),
        )
    })
}

/// Whether `a` and `b` agree at `counter`: within the sum of their bounds, or identical when
/// both are kernel-mode records; the disagreement if not.
pub fn agree_at(a: &TimeConvRecord, b: &TimeConvRecord, counter: u64) -> Result<(), (u64, u64)> {
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
        Err((apart_ns, allowed_ns))
    } else {
        Ok(())
    }
}

fn agree(first: &Sidecar, second: &Sidecar, counter: u64) -> Result<(), AgreementError> {
    agree_at(&first.record, &second.record, counter).map_err(|(apart_ns, allowed_ns)| {
        AgreementError::Disagree(Disagreement {
            first: Some(first.path.clone()),
            second: second.path.clone(),
            counter,
            apart_ns,
            allowed_ns,
        })
    })
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
///
/// # Errors
/// [`AgreementError`], naming two sidecars.
pub fn check_consistent(sidecars: &[Sidecar]) -> Result<(), AgreementError> {
    let Some(reference) = reference(sidecars) else {
        return Ok(());
    };
    let first = &sidecars[0];
    let first_kernel = sidecars
        .iter()
        .find(|sidecar| sidecar.record.mode() == TimeConvMode::Kernel);
    for sidecar in sidecars {
        let inconsistent = |what| AgreementError::Inconsistent {
            what,
            first: first.path.clone(),
            second: sidecar.path.clone(),
        };
        if sidecar.record.counter() != first.record.counter() {
            return Err(inconsistent("counter"));
        }
        if sidecar.record.boot_id() != first.record.boot_id() {
            return Err(inconsistent("boot_id"));
        }
        if let Some(kernel) = first_kernel {
            if sidecar.record.mode() == TimeConvMode::Kernel {
                agree(kernel, sidecar, sidecar.record.written_counter())?;
            }
        }
        agree(reference, sidecar, sidecar.record.written_counter())?;
        agree(reference, sidecar, reference.record.written_counter())?;
    }
    let at = reference.record.written_counter();
    let ends = |sidecar: &&Sidecar| {
        let ns = i128::from(sidecar.record.conversion_at(at).cycles_to_ns(at));
        let bound = i128::from(
            sidecar
                .record
                .error_bound_ns()
                .saturating_add(sidecar.record.conversion_error_at_ns(at, at)),
        );
        (ns - bound, ns + bound)
    };
    let highest_lower = sidecars.iter().max_by_key(|sidecar| ends(sidecar).0);
    let lowest_upper = sidecars.iter().min_by_key(|sidecar| ends(sidecar).1);
    if let (Some(high), Some(low)) = (highest_lower, lowest_upper) {
        agree(high, low, at)?;
    }
    Ok(())
}
