//! Paravirt mode's constant: on a KVM guest whose sched_clock is kvm-clock, the perf clock is
//! `pvclock(tsc) + C`, the pvclock read from the vDSO's page ([`page`]) and
//! `C = __sched_clock_offset - kvm_sched_clock_offset` fixed at boot. This module finds the
//! page and `C`, from the most trustworthy source at hand (a root-published file, the kernel log
//! ([`kmsg`]), brackets), each cross-checked against kernel-stamped brackets before it is trusted
//! (docs/design.md, "Paravirt mode").
//!
//! # Safety
//! One unsafe call makes a [`PvclockReader`] of the page [`page::find`]
//! validated (a vDSO data page, mapped read-only and populated for the life of the process).
#![allow(unsafe_code)]

use kmsg::KmsgError;
use page::{PvclockPage, PvclockPageError};
use std::fmt;
use std::path::PathBuf;

use crate::shared_page::OwnedOffset;
use crate::Refusal;
#[cfg(feature = "calibrated")]
use perfclock_calib::pvclock_offset::{bracket_offsets, OffsetError, OffsetIntersection};
#[cfg(feature = "calibrated")]
use perfclock_calib::GroundTruth;
use perfclock_core::published_offset::{OffsetOrigin, PublishedOffset};
use perfclock_core::pvclock::{PvclockParams, PvclockReader};
use perfclock_core::PvclockError;

pub mod kmsg;
pub mod page;

/// Brackets of each record kind taken when `C` comes from brackets alone at open: about
/// 1 ms of bracketing (about 4 us a bracket), for a bound of about 500 ns on this project's guests.
pub const OPEN_BRACKETS_PER_KIND: usize = 80;
/// Brackets of each kind that cross-check a `C` from the kernel log at open.
pub const CHECK_BRACKETS_PER_KIND: usize = 8;
/// A brackets-only `C` whose bound (half the intersection's width) exceeds this is refused: the
/// calibrated mode does as well.
pub const MAX_BRACKETS_BOUND_NS: u64 = 2_000;

/// The environment variable that, switched off (`off`, `0`, `false`, `no`, any case), skips
/// paravirt mode as `Options::paravirt(false)` does.
pub const ENV: &str = "PERFCLOCK_PARAVIRT";

/// Whether [`ENV`] switches paravirt mode off ([`perfclock_os::env::env_switch`]). Never
/// true in a setuid, setgid or file-capability process (AT_SECURE), whose environment is not
/// its user's to set; false for a value that is no switch, which opening a clock refuses
/// ([`environment_switch`]).
pub fn disabled_by_environment() -> bool {
    environment_switch() == Ok(Some(false))
}

/// [`ENV`] as a switch.
///
/// # Errors
/// [`BadSwitch`](perfclock_os::BadSwitch) for a value that is none of the switch's
/// spellings.
pub fn environment_switch() -> Result<Option<bool>, perfclock_os::BadSwitch> {
    perfclock_os::env::env_switch(ENV)
}

/// Where `C` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffsetSource {
    /// A page published by root (`perfclock serve`), cross-checked by its publisher.
    Published,
    /// The kernel log's `kvm-clock: using sched offset` and `sched_clock: Marking stable`
    /// records, cross-checked against brackets here.
    KernelLog,
    /// The middle of the brackets' intersection; the bound is half its width.
    Brackets,
    /// An offset file of this user's own (`PERFCLOCK_PUBLISHED_OFFSET`), not root's: only a
    /// claim, accepted inside the brackets' intersection, whose whole width is the bound.
    UserFile {
        /// The file's owner.
        uid: u32,
    },
}

impl fmt::Display for OffsetSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffsetSource::Published => f.write_str("a root-published offset page"),
            OffsetSource::KernelLog => f.write_str("the kernel log (/dev/kmsg)"),
            OffsetSource::Brackets => f.write_str("kernel-stamped brackets alone"),
            OffsetSource::UserFile { uid } => write!(
                f,
                "an offset file of uid {uid} (not root's: checked against kernel-stamped \
                 brackets here)"
            ),
        }
    }
}

/// `C` and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeasuredOffset {
    /// `C = __sched_clock_offset - kvm_sched_clock_offset`, ns.
    pub offset_ns: i64,
    /// Where it came from.
    pub source: OffsetSource,
    /// 0 from the kernel log or root's published page; half the brackets' intersection from
    /// brackets alone; its whole width for a user's own offset file.
    pub bound_ns: u64,
    /// The brackets' intersection it was checked against (or taken from); `None` for a
    /// published page (its publisher checked it).
    #[cfg(feature = "calibrated")]
    pub intersection: Option<OffsetIntersection>,
}

/// Where a paravirt-mode [`crate::Clock`] reads: the page, vCPU 0's entry, and `C`.
#[derive(Debug, Clone)]
pub struct ParavirtClock {
    page: PvclockPage,
    reader: PvclockReader<'static>,
    measured: MeasuredOffset,
    /// The published file `C` came from, if it did.
    published: Option<PublishedOffset>,
    refused: Vec<ParavirtRefusal>,
}

impl ParavirtClock {
    /// The page (where it was found, how many vCPUs' entries were compared).
    pub fn page(&self) -> &PvclockPage {
        &self.page
    }

    /// The reader of vCPU 0's entry.
    pub fn reader(&self) -> PvclockReader<'static> {
        self.reader
    }

    /// `C`, where it came from, and the brackets it was checked against.
    pub fn offset(&self) -> &MeasuredOffset {
        &self.measured
    }

    /// The published offset `C` came from (its origin, the intersection that checked it, the
    /// writer), when it came from one.
    pub fn published(&self) -> Option<&PublishedOffset> {
        self.published.as_ref()
    }

    /// The sources of `C` tried first and refused, in order.
    pub fn refused(&self) -> &[ParavirtRefusal] {
        &self.refused
    }

    /// The offset's bound while the entry keeps `PVCLOCK_TSC_STABLE_BIT`; `u64::MAX` once it
    /// does not (or cannot be read): the kernel then clamps its readings, which this clock does
    /// not follow. Async-signal-safe (atomic loads of the entry).
    pub fn error_bound_ns(&self) -> u64 {
        bound_while_stable(self.reader.params(), self.measured.bound_ns)
    }

    /// Opens paravirt mode: the page, then `C` from a root-published page, the kernel log
    /// (cross-checked against brackets), or brackets alone, the first that passes.
    ///
    /// # Errors
    /// Every refusal, in the order tried.
    pub(crate) fn open() -> Result<ParavirtClock, Vec<ParavirtRefusal>> {
        let (page, reader) = find_page().map_err(|refusal| vec![refusal])?;
        // Root's file first: its publisher cross-checked `C` once for the boot.
        let mut refused = match Self::from_published(page, reader) {
            Ok(clock) => return Ok(clock),
            Err(refused) => refused,
        };
        let from_log = kmsg::read_offset()
            .map_err(ParavirtRefusal::KernelLog)
            .and_then(|offset_ns| {
                cross_check(
                    &reader,
                    offset_ns,
                    OffsetSource::KernelLog,
                    CHECK_BRACKETS_PER_KIND,
                )
            });
        let measured = from_log.or_else(|refusal| {
            refused.push(refusal);
            measure_from_brackets_if_built(&reader)
        });
        Self::with_offset(page, reader, measured, None, refused)
    }

    /// The clock on `page` with `C` from `measured` (taken from `published`, if from a file),
    /// or the refusals with `measured`'s own last.
    fn with_offset(
        page: PvclockPage,
        reader: PvclockReader<'static>,
        measured: Result<MeasuredOffset, ParavirtRefusal>,
        published: Option<PublishedOffset>,
        mut refused: Vec<ParavirtRefusal>,
    ) -> Result<ParavirtClock, Vec<ParavirtRefusal>> {
        match measured {
            Ok(measured) => Ok(ParavirtClock {
                page,
                reader,
                measured,
                published,
                refused,
            }),
            Err(refusal) => {
                refused.push(refusal);
                Err(refused)
            }
        }
    }
}

impl ParavirtClock {
    /// Opens paravirt mode only if a published offset is accepted: `None` otherwise (the
    /// caller then goes the whole way, kernel page first). A publisher writes an offset only
    /// after its own kernel page withheld the parameters in this boot, and which sched_clock
    /// the kernel uses is fixed at boot, so such a file also says that kernel mode does not
    /// apply: the kernel page's `perf_event_open` (most of `init()`'s cost here) is skipped.
    pub(crate) fn open_published() -> Option<ParavirtClock> {
        let (page, reader) = find_page().ok()?;
        Self::from_published(page, reader).ok()
    }

    /// The clock on `page` with `C` from the first published offset accepted, or the
    /// refusals of every one looked at.
    fn from_published(
        page: PvclockPage,
        reader: PvclockReader<'static>,
    ) -> Result<ParavirtClock, Vec<ParavirtRefusal>> {
        let (published, refusals) = crate::shared_page::open_published_offset();
        let refused: Vec<ParavirtRefusal> = refusals
            .into_iter()
            .map(|(path, refusal)| ParavirtRefusal::Published { path, refusal })
            .collect();
        let Some(OwnedOffset {
            offset: published,
            owner,
        }) = published
        else {
            return Err(refused);
        };
        let measured = if owner == 0 {
            Ok(measured_from_published(&published))
        } else {
            measured_from_users_file(&reader, &published, owner)
        };
        Self::with_offset(page, reader, measured, Some(published), refused)
    }
}

/// `C` from an offset file that is not root's: only a claim, kept if it lies inside this
/// process's own kernel-stamped brackets, with their whole width as the bound (the claim and
/// the true `C` both lie inside).
fn measured_from_users_file(
    reader: &PvclockReader<'static>,
    published: &PublishedOffset,
    uid: u32,
) -> Result<MeasuredOffset, ParavirtRefusal> {
    let source = OffsetSource::UserFile { uid };
    let checked = cross_check(reader, published.offset_ns, source, CHECK_BRACKETS_PER_KIND)?;
    Ok(MeasuredOffset {
        bound_ns: checked.bound_ns.max(width_of(&checked)),
        ..checked
    })
}

/// The whole width of the intersection a `C` was checked against.
#[cfg(feature = "calibrated")]
fn width_of(measured: &MeasuredOffset) -> u64 {
    measured
        .intersection
        .map_or(u64::MAX, |i| i.hi().abs_diff(i.lo()))
}

#[cfg(not(feature = "calibrated"))]
fn width_of(_: &MeasuredOffset) -> u64 {
    u64::MAX
}

/// `C` as a published file gives it: bound 0 when its publisher took it from the kernel log
/// (and checked it against brackets), the brackets' own bound otherwise.
fn measured_from_published(published: &PublishedOffset) -> MeasuredOffset {
    MeasuredOffset {
        offset_ns: published.offset_ns,
        source: OffsetSource::Published,
        bound_ns: match published.origin {
            OffsetOrigin::KernelLog => 0,
            OffsetOrigin::Brackets => published.bracket_bound_ns(),
        },
        #[cfg(feature = "calibrated")]
        intersection: None,
    }
}

/// `bound_ns` while the entry read keeps the stable bit, else unknown (`u64::MAX`).
fn bound_while_stable(entry: Result<PvclockParams, PvclockError>, bound_ns: u64) -> u64 {
    match entry {
        Ok(params) if params.is_stable() => bound_ns,
        _ => u64::MAX,
    }
}

#[cfg(feature = "calibrated")]
fn measure_from_brackets_if_built(
    reader: &PvclockReader,
) -> Result<MeasuredOffset, ParavirtRefusal> {
    measure_from_brackets(reader, OPEN_BRACKETS_PER_KIND)
}

#[cfg(not(feature = "calibrated"))]
fn measure_from_brackets_if_built(
    _reader: &PvclockReader,
) -> Result<MeasuredOffset, ParavirtRefusal> {
    Err(ParavirtRefusal::NoBrackets)
}

/// The pvclock page of this process, validated, and a reader of vCPU 0's entry.
///
/// # Errors
/// [`ParavirtRefusal::Page`].
pub fn find_page() -> Result<(PvclockPage, PvclockReader<'static>), ParavirtRefusal> {
    let page = page::find().map_err(ParavirtRefusal::Page)?;
    // SAFETY: `find` validated a vDSO data page: mapped read-only for the life of the process
    // (and at the same address in fork children), populated by its probe (the kernel's fault
    // handler maps it again after any zap), 64-aligned, written only by the host.
    let reader = unsafe { PvclockReader::new(page.entry0()) };
    Ok((page, reader))
}

/// Finds the pvclock page and measures `C` from the kernel log, cross-checked against
/// `brackets_per_kind` kernel-stamped brackets of each record kind (taken on the calling
/// thread, whose events are closed before it returns): what a root `perfclock serve` publishes
/// once per boot. The result's bound is 0.
///
/// # Errors
/// [`ParavirtRefusal`]: no page, the log unreadable or incomplete (`KernelLog`), no brackets,
/// or the log's `C` outside their intersection (`OutsideBrackets`).
///
/// # Example
/// ```no_run
/// let measured = perfclock::paravirt::measure_offset(200)?;
/// println!("C = {} ns from {}", measured.offset_ns, measured.source);
/// # Ok::<(), perfclock::paravirt::ParavirtRefusal>(())
/// ```
pub fn measure_offset(brackets_per_kind: usize) -> Result<MeasuredOffset, ParavirtRefusal> {
    let (_, reader) = find_page()?;
    let offset_ns = kmsg::read_offset().map_err(ParavirtRefusal::KernelLog)?;
    cross_check(
        &reader,
        offset_ns,
        OffsetSource::KernelLog,
        brackets_per_kind,
    )
}

/// `offset_ns` from `source`, accepted if it lies in the intersection of `per_kind` brackets of
/// each kind.
#[cfg(feature = "calibrated")]
pub fn cross_check(
    reader: &PvclockReader,
    offset_ns: i64,
    source: OffsetSource,
    per_kind: usize,
) -> Result<MeasuredOffset, ParavirtRefusal> {
    let intersection = brackets(reader, per_kind)?;
    if !intersection.contains(offset_ns) {
        return Err(ParavirtRefusal::OutsideBrackets {
            source,
            offset_ns,
            intersection,
        });
    }
    Ok(MeasuredOffset {
        offset_ns,
        source,
        bound_ns: 0,
        intersection: Some(intersection),
    })
}

/// Without brackets no `C` is trusted.
#[cfg(not(feature = "calibrated"))]
pub fn cross_check(
    _reader: &PvclockReader,
    _offset_ns: i64,
    _source: OffsetSource,
    _per_kind: usize,
) -> Result<MeasuredOffset, ParavirtRefusal> {
    Err(ParavirtRefusal::NoBrackets)
}

/// `C` from brackets alone: the middle of the intersection of `per_kind` brackets of each kind,
/// the bound half its width.
///
/// # Errors
/// [`ParavirtRefusal::Brackets`], [`ParavirtRefusal::BracketsTooWide`].
#[cfg(feature = "calibrated")]
pub fn measure_from_brackets(
    reader: &PvclockReader,
    per_kind: usize,
) -> Result<MeasuredOffset, ParavirtRefusal> {
    let intersection = brackets(reader, per_kind)?;
    let bound_ns = intersection.half_width_ns();
    if bound_ns > MAX_BRACKETS_BOUND_NS {
        return Err(ParavirtRefusal::BracketsTooWide(intersection));
    }
    Ok(MeasuredOffset {
        offset_ns: intersection.middle(),
        source: OffsetSource::Brackets,
        bound_ns,
        intersection: Some(intersection),
    })
}

/// The intersection of `per_kind` brackets of every kind this thread can open; the events
/// are closed (rings unmapped) when it returns.
#[cfg(feature = "calibrated")]
fn brackets(
    reader: &PvclockReader,
    per_kind: usize,
) -> Result<OffsetIntersection, ParavirtRefusal> {
    let mut truth = GroundTruth::open_available()
        .map_err(|error| ParavirtRefusal::Brackets(OffsetError::Brackets(error)))?;
    bracket_offsets(&mut truth, reader, per_kind).map_err(ParavirtRefusal::Brackets)
}

/// Why a source of `C` (or the page) was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParavirtRefusal {
    /// No usable pvclock page; `source()` says why.
    Page(PvclockPageError),
    /// The page's entry became unreadable or unusable; `source()` says why.
    Entry(PvclockError),
    /// A published offset file was refused (its trust checks, format or boot); `source()` says
    /// why.
    Published {
        /// The file.
        path: PathBuf,
        /// Why it was refused.
        refusal: Refusal,
    },
    /// The kernel log gave no `C`; `source()` says why.
    KernelLog(KmsgError),
    /// Brackets could not be taken or contradict every `C`; `source()` says why.
    #[cfg(feature = "calibrated")]
    Brackets(OffsetError),
    /// A `C` from `source` lies outside the brackets' intersection.
    #[cfg(feature = "calibrated")]
    OutsideBrackets {
        /// Where the refused `C` came from.
        source: OffsetSource,
        /// The refused `C`, ns.
        offset_ns: i64,
        /// The brackets' intersection.
        intersection: OffsetIntersection,
    },
    /// Brackets alone pin `C` only to more than [`MAX_BRACKETS_BOUND_NS`].
    #[cfg(feature = "calibrated")]
    BracketsTooWide(OffsetIntersection),
    /// Built without the `calibrated` feature: no brackets to check a `C` against.
    NoBrackets,
}

impl fmt::Display for ParavirtRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParavirtRefusal::Page(_) => f.write_str("no usable pvclock page"),
            ParavirtRefusal::Entry(_) => f.write_str("the pvclock entry is unusable"),
            ParavirtRefusal::Published { path, .. } => {
                write!(f, "the published offset {} was refused", path.display())
            }
            ParavirtRefusal::KernelLog(_) => f.write_str("no offset from the kernel log"),
            #[cfg(feature = "calibrated")]
            ParavirtRefusal::Brackets(_) => f.write_str("no offset from kernel-stamped brackets"),
            #[cfg(feature = "calibrated")]
            ParavirtRefusal::OutsideBrackets {
                source,
                offset_ns,
                intersection,
            } => write!(
                f,
                "the offset {offset_ns} ns from {source} lies outside the kernel-stamped \
                 brackets' intersection {intersection}"
            ),
            #[cfg(feature = "calibrated")]
            ParavirtRefusal::BracketsTooWide(intersection) => write!(
                f,
                "kernel-stamped brackets pin the offset only to {intersection}, wider than \
                 2 x {MAX_BRACKETS_BOUND_NS} ns"
            ),
            ParavirtRefusal::NoBrackets => f.write_str(
                "built without the `calibrated` feature: no brackets to check an offset against",
            ),
        }
    }
}

impl std::error::Error for ParavirtRefusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ParavirtRefusal::Page(error) => Some(error),
            ParavirtRefusal::Entry(error) => Some(error),
            ParavirtRefusal::Published { refusal, .. } => Some(refusal),
            ParavirtRefusal::KernelLog(error) => Some(error),
            #[cfg(feature = "calibrated")]
            ParavirtRefusal::Brackets(error) => Some(error),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::pvclock::{GUEST_STOPPED_BIT, TSC_STABLE_BIT};

    #[test]
    fn the_bound_is_unknown_once_the_stable_bit_is_gone() {
        let entry = |flags| PvclockParams::new(1, 2, 3_310_237_869, -1, flags);
        assert_eq!(bound_while_stable(entry(TSC_STABLE_BIT), 0), 0);
        assert_eq!(bound_while_stable(entry(TSC_STABLE_BIT), 480), 480);
        // A pause leaves the clock as it was.
        let stopped = TSC_STABLE_BIT | GUEST_STOPPED_BIT;
        assert_eq!(bound_while_stable(entry(stopped), 0), 0);
        assert_eq!(bound_while_stable(entry(0), 0), u64::MAX);
        assert_eq!(bound_while_stable(entry(GUEST_STOPPED_BIT), 0), u64::MAX);
        assert_eq!(
            bound_while_stable(Err(PvclockError::VersionNeverSettled), 0),
            u64::MAX
        );
    }
}
