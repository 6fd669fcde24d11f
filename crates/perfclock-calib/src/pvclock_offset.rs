//! The offset `C` of a paravirtual perf clock (`perf ns = pvclock(tsc) + C`) as kernel-stamped
//! brackets pin it: each bracket `pvclock(before) <= stamp - C <= pvclock(after)` confines `C`
//! to `[stamp - pvclock(after), stamp - pvclock(before)]`, and every `C` the kernel could have
//! used lies in the intersection of those intervals ([`OffsetIntersection`]).
//!
//! Used twice: to cross-check a `C` read elsewhere (the kernel log, a published page), which must
//! lie inside, and, where nothing else is readable, to take `C` at the intersection's middle
//! with half its width as the bound. The slope is the kernel's own (the pvclock entry), so
//! nothing is fitted and the bound does not grow with time.

use core::fmt;

use perfclock_core::counter;
use perfclock_core::pvclock::PvclockReader;
use perfclock_core::PvclockError;

use crate::bracket::Stamped;
use crate::{CalibError, GroundTruth, KindSet, RecordKind, MAX_CONSECUTIVE_DISCARDS};

/// The offsets consistent with every bracket so far: `lo..=hi`, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetIntersection {
    lo: i64,
    hi: i64,
    brackets: u32,
    kinds: KindSet,
    /// Bit `n` set: a stamp was taken on CPU `n` (CPUs 0..63).
    cpus: u64,
}

impl Default for OffsetIntersection {
    fn default() -> Self {
        OffsetIntersection {
            lo: i64::MIN,
            hi: i64::MAX,
            brackets: 0,
            kinds: KindSet::EMPTY,
            cpus: 0,
        }
    }
}

impl OffsetIntersection {
    /// Narrows the intersection by one bracket whose readings are pvclock ns (without `C`).
    pub fn add(&mut self, stamp: &Stamped<u64>) {
        let lo = stamp.kernel_ns.wrapping_sub(stamp.after) as i64;
        let hi = stamp.kernel_ns.wrapping_sub(stamp.before) as i64;
        self.lo = self.lo.max(lo);
        self.hi = self.hi.min(hi);
        self.brackets += 1;
        self.kinds = self.kinds.with(stamp.kind);
        if stamp.cpu < 64 {
            self.cpus |= 1 << stamp.cpu;
        }
    }

    /// The lowest consistent offset, ns.
    pub fn lo(&self) -> i64 {
        self.lo
    }

    /// The highest consistent offset, ns.
    pub fn hi(&self) -> i64 {
        self.hi
    }

    /// Brackets added.
    pub fn brackets(&self) -> u32 {
        self.brackets
    }

    /// The kinds of record among them.
    pub fn kinds(&self) -> KindSet {
        self.kinds
    }

    /// The CPUs (below 64) the kernel stamped them on, one bit each.
    pub fn cpus(&self) -> u64 {
        self.cpus
    }

    /// No offset is consistent with every bracket: the clock is not `pvclock + C`.
    pub fn is_empty(&self) -> bool {
        self.lo > self.hi
    }

    /// Whether `offset` is consistent with every bracket.
    pub fn contains(&self, offset: i64) -> bool {
        self.lo <= offset && offset <= self.hi
    }

    /// The middle (rounded down), the offset brackets alone give.
    pub fn middle(&self) -> i64 {
        ((i128::from(self.lo) + i128::from(self.hi)).div_euclid(2)) as i64
    }

    /// The most the middle is from any consistent offset, ns (rounded up).
    pub fn half_width_ns(&self) -> u64 {
        let width = (i128::from(self.hi) - i128::from(self.lo)).max(0) as u128;
        u64::try_from(width.div_ceil(2)).unwrap_or(u64::MAX)
    }
}

impl fmt::Display for OffsetIntersection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}, {}] ns ({} ns wide, {} brackets)",
            self.lo,
            self.hi,
            (i128::from(self.hi) - i128::from(self.lo)).max(0),
            self.brackets
        )
    }
}

/// Brackets `per_kind` records of each kind `truth` opened (round-robin, on the calling
/// thread), each reading the pvclock entry and the counter together before and after the
/// action, and returns their intersection.
///
/// # Errors
/// [`OffsetError`].
pub fn bracket_offsets(
    truth: &mut GroundTruth,
    entry: &PvclockReader,
    per_kind: usize,
) -> Result<OffsetIntersection, OffsetError> {
    let kinds = truth.kinds();
    let mut intersection = OffsetIntersection::default();
    let mut read = || {
        entry
            .read_with(counter::read_counter_ordered_or_zero)
            .map(|(params, cycles)| params.pvclock_ns(cycles))
    };
    for _ in 0..per_kind {
        for &kind in &kinds {
            let stamp = bracket_one(truth, kind, &mut read)?;
            intersection.add(&stamp);
        }
    }
    if intersection.is_empty() {
        return Err(OffsetError::Contradiction(intersection));
    }
    Ok(intersection)
}

/// One bracket of `kind`, retrying discarded ones as [`GroundTruth::collect`] does.
fn bracket_one(
    truth: &mut GroundTruth,
    kind: RecordKind,
    read: &mut impl FnMut() -> Result<u64, PvclockError>,
) -> Result<Stamped<u64>, OffsetError> {
    let mut discards = 0;
    loop {
        match truth.bracket_with(kind, read) {
            Ok(stamped) => {
                let before = stamped.before.map_err(OffsetError::Entry)?;
                let after = stamped.after.map_err(OffsetError::Entry)?;
                return Ok(Stamped {
                    kind,
                    before,
                    after,
                    kernel_ns: stamped.kernel_ns,
                    cpu: stamped.cpu,
                });
            }
            Err(error) if error.is_transient() && discards + 1 < MAX_CONSECUTIVE_DISCARDS => {
                discards += 1;
            }
            Err(error) => return Err(OffsetError::Brackets(error)),
        }
    }
}

/// Why the brackets gave no intersection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OffsetError {
    /// The ground-truth events could not be opened, or bracketing failed; `source()` says why.
    Brackets(CalibError),
    /// The pvclock entry could not be read during bracketing; `source()` says why.
    Entry(PvclockError),
    /// No offset fits every bracket: the perf clock is not `pvclock(tsc) + C` here.
    Contradiction(OffsetIntersection),
}

impl fmt::Display for OffsetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffsetError::Brackets(_) => f.write_str("kernel-stamped brackets unavailable"),
            OffsetError::Entry(_) => f.write_str("the pvclock entry became unreadable"),
            OffsetError::Contradiction(found) => write!(
                f,
                "no offset fits every kernel-stamped bracket (intersection {found}): the perf \
                 clock is not the pvclock plus a constant"
            ),
        }
    }
}

impl std::error::Error for OffsetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OffsetError::Brackets(error) => Some(error),
            OffsetError::Entry(error) => Some(error),
            OffsetError::Contradiction(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(before: u64, kernel_ns: u64, after: u64, cpu: u32) -> Stamped<u64> {
        Stamped {
            kind: RecordKind::Comm,
            before,
            after,
            kernel_ns,
            cpu,
        }
    }

    #[test]
    fn the_intersection_narrows_bracket_by_bracket() {
        let mut both = OffsetIntersection::default();
        // C = -100: stamps at pvclock 1_050 and 2_010 show as 950 and 1_910.
        both.add(&stamp(1_000, 950, 1_100, 0));
        assert_eq!((both.lo(), both.hi()), (-150, -50));
        both.add(&stamp(2_000, 1_910, 2_040, 1));
        assert_eq!((both.lo(), both.hi()), (-130, -90));
        assert!(both.contains(-100) && !both.contains(-89) && !both.contains(-131));
        assert_eq!(both.middle(), -110);
        assert_eq!(both.half_width_ns(), 20);
        assert_eq!(both.cpus(), 0b11);
        assert_eq!(both.brackets(), 2);
    }

    #[test]
    fn disjoint_brackets_are_a_contradiction() {
        let mut none = OffsetIntersection::default();
        none.add(&stamp(1_000, 1_000, 1_010, 0));
        none.add(&stamp(2_000, 1_900, 2_010, 0));
        assert!(none.is_empty());
    }

    #[test]
    fn wrapping_offsets_stay_signed() {
        let mut negative = OffsetIntersection::default();
        // A perf clock below the pvclock (C < 0) near 0: the differences wrap as u64.
        negative.add(&stamp(100_000_000, 5, 100_000_100, 0));
        assert_eq!(negative.hi(), 5 - 100_000_000);
        assert_eq!(negative.lo(), 5 - 100_000_100);
    }
}
