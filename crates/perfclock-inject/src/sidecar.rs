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

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::{BootId, TimeConversion};

    const BOOT: BootId = BootId::from_words([0x0b3f_4c5e_1111_2222, 0x3333_4444_5555_6666]);

    /// 1 ns per tick from `zero`: a record's conversion at counter `c` is `zero + c`.
    fn record(
        pid: u32,
        mode: TimeConvMode,
        zero: u64,
        bound_ns: u64,
        written: u64,
    ) -> TimeConvRecord {
        let conversion = TimeConversion::new(1 << 31, 31, zero).unwrap();
        TimeConvRecord::new(pid, BOOT, mode, "tsc", conversion, bound_ns, written)
    }

    fn sidecar(name: &str, record: TimeConvRecord) -> Sidecar {
        Sidecar {
            path: PathBuf::from(name),
            record,
        }
    }

    /// `text` written as `jit-<pid>.dump`'s sidecar in a new directory: the directory and the
    /// dump's path.
    fn dump_with_sidecar(pid: u32, text: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let dump = dir.path().join(format!("jit-{pid}.dump"));
        std::fs::write(dir.path().join(format!("jit-{pid}.dump{SUFFIX}")), text).unwrap();
        (dir, dump)
    }

    fn read_text(pid: u32, text: &[u8]) -> Result<Sidecar, SidecarError> {
        let (dir, _) = dump_with_sidecar(pid, text);
        let path = dir.path().join(format!("jit-{pid}.dump{SUFFIX}"));
        let file = std::fs::File::open(&path).unwrap();
        read(path, file, pid)
    }

    #[test]
    fn a_written_record_is_read_back_as_it_was() {
        let written = record(42, TimeConvMode::Calibrated, 1_000, 250, 9_000);
        let sidecar = read_text(42, written.to_string().as_bytes()).unwrap();
        assert_eq!(sidecar.record, written);
        assert!(sidecar.path.ends_with(format!("jit-42.dump{SUFFIX}")));
    }

    #[test]
    fn a_record_that_is_not_utf8_is_not_text() {
        let mut text = record(42, TimeConvMode::Kernel, 0, 0, 1)
            .to_string()
            .into_bytes();
        text.push(0xff);
        let error = read_text(42, &text).unwrap_err();
        assert!(matches!(error, SidecarError::NotText(_)), "{error:?}");
    }

    #[test]
    fn malformed_records_are_invalid_with_the_parsers_reason() {
        let error = read_text(42, b"not a record\npid=42\n").unwrap_err();
        assert!(
            matches!(
                error,
                SidecarError::Invalid(_, TimeConvError::NotARecord { .. })
            ),
            "{error:?}"
        );
        // The magic line, then a line without `=`.
        let text = format!("{}\npid 42\n", perfclock_jitdump::timeconv::MAGIC_LINE);
        let error = read_text(42, text.as_bytes()).unwrap_err();
        assert!(
            matches!(
                error,
                SidecarError::Invalid(_, TimeConvError::MalformedLine { line: 2 })
            ),
            "{error:?}"
        );
        // A whole record but for one key.
        let whole = record(42, TimeConvMode::Kernel, 0, 0, 1).to_string();
        let without: String = whole
            .lines()
            .filter(|line| !line.starts_with("time_zero="))
            .map(|line| format!("{line}\n"))
            .collect();
        let error = read_text(42, without.as_bytes()).unwrap_err();
        assert!(
            matches!(
                error,
                SidecarError::Invalid(_, TimeConvError::MissingKey("time_zero"))
            ),
            "{error:?}"
        );
        // Its Display names the file, never the content.
        assert!(!error.to_string().contains("tsc"), "{error}");
    }

    #[test]
    fn a_record_of_a_dump_not_in_counter_values_is_refused_with_its_clock() {
        for clock in [JitClock::Perf, JitClock::Monotonic] {
            let text = record(42, TimeConvMode::Kernel, 0, 0, 1)
                .with_clock(clock)
                .to_string();
            let error = read_text(42, text.as_bytes()).unwrap_err();
            assert!(
                matches!(error, SidecarError::NotArchClock { clock: c, .. } if c == clock),
                "{error:?}"
            );
        }
        // The accepting control: an arch dump's record.
        let text = record(42, TimeConvMode::Kernel, 0, 0, 1)
            .with_clock(JitClock::Arch)
            .to_string();
        assert!(read_text(42, text.as_bytes()).is_ok());
    }

    #[test]
    fn a_record_naming_another_pid_is_refused_with_both_pids() {
        let text = record(7, TimeConvMode::Kernel, 0, 0, 1).to_string();
        let error = read_text(42, text.as_bytes()).unwrap_err();
        assert!(
            matches!(
                error,
                SidecarError::Pid {
                    dump_pid: 42,
                    record_pid: 7,
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(read_text(7, text.as_bytes()).is_ok());
    }

    #[test]
    fn find_reads_the_sidecar_beside_the_dump_and_none_where_there_is_none() {
        let written = record(42, TimeConvMode::Kernel, 0, 0, 1);
        let (dir, dump) = dump_with_sidecar(42, written.to_string().as_bytes());
        let found = find(&dump, 42, Root::Here, &[]).unwrap().unwrap();
        assert_eq!(found.record, written);
        assert_eq!(found.path, dir.path().join(format!("jit-42.dump{SUFFIX}")));
        // Another dump in the same directory has none: not an error.
        let other = dir.path().join("jit-43.dump");
        assert!(find(&other, 43, Root::Here, &[]).unwrap().is_none());
    }

    #[test]
    fn find_looks_only_in_the_dump_dirs_when_given() {
        let written = record(42, TimeConvMode::Kernel, 0, 0, 1);
        let (beside, dump) = dump_with_sidecar(42, written.to_string().as_bytes());
        let empty = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        // The sidecar beside the dump is not looked at when dump dirs are given.
        let dirs = [empty.path().to_owned()];
        assert!(find(&dump, 42, Root::Here, &dirs).unwrap().is_none());
        // The one in a dump dir is.
        let moved = elsewhere.path().join(format!("jit-42.dump{SUFFIX}"));
        std::fs::write(&moved, written.to_string()).unwrap();
        let dirs = [empty.path().to_owned(), elsewhere.path().to_owned()];
        let found = find(&dump, 42, Root::Here, &dirs).unwrap().unwrap();
        assert_eq!(found.path, moved);
        drop(beside);
    }

    #[test]
    fn find_refuses_an_oversized_sidecar_unopened() {
        let (_dir, dump) = dump_with_sidecar(42, &vec![b'x'; MAX_SIDECAR_BYTES as usize + 1]);
        let error = find(&dump, 42, Root::Here, &[]).unwrap_err();
        assert!(
            matches!(
                error,
                SidecarError::Open(
                    _,
                    UntrustedFileError::TooLarge {
                        len,
                        max: MAX_SIDECAR_BYTES
                    }
                ) if len == MAX_SIDECAR_BYTES + 1
            ),
            "{error:?}"
        );
        // At the bound, it is opened (and then read: it is no record).
        let (_dir, dump) = dump_with_sidecar(42, &vec![b'x'; MAX_SIDECAR_BYTES as usize]);
        let error = find(&dump, 42, Root::Here, &[]).unwrap_err();
        assert!(matches!(error, SidecarError::Invalid(..)), "{error:?}");
    }

    #[test]
    fn find_refuses_a_sidecar_that_is_a_link() {
        let written = record(42, TimeConvMode::Kernel, 0, 0, 1);
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, written.to_string()).unwrap();
        let link = dir.path().join(format!("jit-42.dump{SUFFIX}"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = find(&dir.path().join("jit-42.dump"), 42, Root::Here, &[]).unwrap_err();
        assert!(
            matches!(
                            error,
                            SidecarError::Open(
                                ref path,
            UntrustedFileError::NotRegular {
                                    kind: "a symbolic link"
                                }
                            ) if *path == link
                        ),
            "{error:?}"
        );
    }

    #[test]
    fn the_reference_is_the_tightest_bound_then_the_latest_written() {
        let sidecars = [
            sidecar("a", record(1, TimeConvMode::Calibrated, 0, 300, 10)),
            sidecar("b", record(2, TimeConvMode::Calibrated, 0, 100, 10)),
            sidecar("c", record(3, TimeConvMode::Calibrated, 0, 100, 20)),
            sidecar("d", record(4, TimeConvMode::Calibrated, 0, 200, 30)),
        ];
        assert_eq!(reference(&sidecars).unwrap().path, Path::new("c"));
        assert!(reference(&[]).is_none());
    }

    #[test]
    fn agree_at_allows_the_sum_of_the_bounds_and_no_more() {
        let a = record(1, TimeConvMode::Calibrated, 1_000, 100, 10);
        // 150 ns apart, 150 allowed.
        let b = record(2, TimeConvMode::Calibrated, 1_150, 50, 10);
        assert_eq!(agree_at(&a, &b, 5_000), Ok(()));
        // 151 ns apart.
        let c = record(2, TimeConvMode::Calibrated, 1_151, 50, 10);
        assert_eq!(agree_at(&a, &c, 5_000), Err((151, 150)));
    }

    #[test]
    fn kernel_records_agree_only_when_identical() {
        let a = record(1, TimeConvMode::Kernel, 1_000, 0, 10);
        assert_eq!(agree_at(&a, &a.clone(), 5_000), Ok(()));
        let b = record(2, TimeConvMode::Kernel, 1_001, 0, 10);
        assert_eq!(agree_at(&a, &b, 5_000), Err((1, 0)));
    }

    #[test]
    fn sidecars_that_agree_within_their_bounds_are_consistent() {
        let sidecars = [
            sidecar("a", record(1, TimeConvMode::Kernel, 1_000, 0, 10)),
            sidecar("b", record(2, TimeConvMode::Calibrated, 1_090, 100, 20)),
            sidecar("c", record(3, TimeConvMode::Calibrated, 950, 60, 30)),
        ];
        assert_eq!(check_consistent(&sidecars), Ok(()));
        assert_eq!(check_consistent(&[]), Ok(()));
    }

    #[test]
    fn a_sidecar_disagreeing_with_the_reference_is_named_with_the_gap() {
        let sidecars = [
            sidecar("a", record(1, TimeConvMode::Kernel, 1_000, 0, 10)),
            sidecar("b", record(2, TimeConvMode::Calibrated, 1_500, 100, 20)),
        ];
        // The kernel record (bound 0) is the reference; b is 500 ns off, 100 allowed, at its
        // own written counter.
        assert_eq!(
            check_consistent(&sidecars),
            Err(AgreementError::Disagree(Disagreement {
                first: Some(PathBuf::from("a")),
                second: PathBuf::from("b"),
                counter: 20,
                apart_ns: 500,
                allowed_ns: 100,
            }))
        );
    }

    #[test]
    fn two_sidecars_each_within_the_reference_but_not_each_other_disagree() {
        // The reference (bound 10) at 1000; b 101 above and c 101 below, bound 100 each: each
        // is within 110 ns of the reference, but b and c are 202 apart, 200 allowed.
        let sidecars = [
            sidecar("a", record(1, TimeConvMode::Calibrated, 1_000, 10, 10)),
            sidecar("b", record(2, TimeConvMode::Calibrated, 1_101, 100, 10)),
            sidecar("c", record(3, TimeConvMode::Calibrated, 899, 100, 10)),
        ];
        assert_eq!(
            check_consistent(&sidecars),
            Err(AgreementError::Disagree(Disagreement {
                first: Some(PathBuf::from("b")),
                second: PathBuf::from("c"),
                counter: 10,
                apart_ns: 202,
                allowed_ns: 200,
            }))
        );
        // One ns closer each, they meet.
        let sidecars = [
            sidecar("a", record(1, TimeConvMode::Calibrated, 1_000, 10, 10)),
            sidecar("b", record(2, TimeConvMode::Calibrated, 1_100, 100, 10)),
            sidecar("c", record(3, TimeConvMode::Calibrated, 900, 100, 10)),
        ];
        assert_eq!(check_consistent(&sidecars), Ok(()));
    }

    #[test]
    fn sidecars_naming_another_counter_or_boot_are_inconsistent() {
        let conversion = TimeConversion::new(1 << 31, 31, 0).unwrap();
        let first = sidecar("a", record(1, TimeConvMode::Kernel, 0, 0, 10));
        let other_counter = TimeConvRecord::new(
            2,
            BOOT,
            TimeConvMode::Kernel,
            "cntvct_el0",
            conversion,
            0,
            10,
        );
        assert_eq!(
            check_consistent(&[first.clone(), sidecar("b", other_counter)]),
            Err(AgreementError::Inconsistent {
                what: "counter",
                first: PathBuf::from("a"),
                second: PathBuf::from("b"),
            })
        );
        let other_boot = TimeConvRecord::new(
            2,
            BootId::from_words([0x9999_9999_1111_2222, 0x3333_4444_5555_6666]),
            TimeConvMode::Kernel,
            "tsc",
            conversion,
            0,
            10,
        );
        assert_eq!(
            check_consistent(&[first.clone(), sidecar("b", other_boot)]),
            Err(AgreementError::Inconsistent {
                what: "boot_id",
                first: PathBuf::from("a"),
                second: PathBuf::from("b"),
            })
        );
        // The same counter and boot: consistent.
        let same = record(2, TimeConvMode::Kernel, 0, 0, 20);
        assert_eq!(check_consistent(&[first, sidecar("b", same)]), Ok(()));
    }

    #[test]
    fn disagreement_display_escapes_the_paths() {
        let error = AgreementError::Disagree(Disagreement {
            first: Some(PathBuf::from("/tmp/a\nb")),
            second: PathBuf::from("/tmp/\x1b[31m"),
            counter: 20,
            apart_ns: 500,
            allowed_ns: 100,
        });
        let shown = error.to_string();
        assert!(shown.starts_with("/tmp/a\\nb and /tmp/\\x1b[31m disagree by 500 ns at counter 20"));
        assert!(
            !shown.contains('\n') && !shown.contains('\x1b'),
            "{shown:?}"
        );
    }
}
