//! Where the calibrator's brackets come from: [`BracketSource`], the kernel's records
//! ([`GroundTruth`]) by default, and the round-robin over record kinds the calibrator draws from.
//!
//! A kind whose bracketing fails for good (its action refused by a seccomp or SELinux policy,
//! its records never arriving) is dropped and the others go on, at the first calibration and
//! later; calibration fails only when every kind has failed. The kinds still working and those
//! dropped are published in [`crate::CalibStats`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{BracketError, CalibError};
use crate::fit::{signed_diff, Constraint, Fit};
use crate::shared::Shared;
use crate::{Bracket, GroundTruth, KindSet, RecordKind};

/// A kind is kept for refinement if its tightest bracket side is within this of the best
/// kind's: a kind that never binds a side only costs CPU.
const KIND_USEFUL_SLACK_NS: f64 = 100.0;

/// Brackets of kernel-stamped records. [`GroundTruth`] is the real one; tests wrap it to
/// distort what the calibrator sees (a clock jump, a noisy kind).
pub trait BracketSource {
    /// The kinds this source can bracket.
    fn kinds(&self) -> Vec<RecordKind>;

    /// Kinds this source was meant to bracket but could not open (reported as failed).
    fn unavailable(&self) -> KindSet {
        KindSet::EMPTY
    }

    /// Appends about `n` brackets of `kind` to `out`.
    ///
    /// # Errors
    /// [`CalibError::Bracket`] when bracketing failed for good.
    fn collect(
        &mut self,
        kind: RecordKind,
        n: usize,
        out: &mut Vec<Bracket>,
    ) -> Result<(), CalibError>;
}

impl BracketSource for GroundTruth {
    fn kinds(&self) -> Vec<RecordKind> {
        GroundTruth::kinds(self)
    }

    fn unavailable(&self) -> KindSet {
        GroundTruth::unavailable(self)
    }

    fn collect(
        &mut self,
        kind: RecordKind,
        n: usize,
        out: &mut Vec<Bracket>,
    ) -> Result<(), CalibError> {
        GroundTruth::collect(self, kind, n, out)
    }
}

/// The default source: ground truth of `kinds`, or of every kind this process can open when
/// `kinds` is empty. Opens per-thread events: call it on the thread that will collect.
///
/// # Errors
/// [`CalibError::Open`] when the events cannot be opened.
pub fn open_ground_truth(kinds: &[RecordKind]) -> Result<GroundTruth, CalibError> {
    if kinds.is_empty() {
        GroundTruth::open_available()
    } else {
        GroundTruth::open(kinds)
    }
}

/// A bracket source with the kinds interleaved round-robin, so every stretch of history has
/// every kind, narrowed after a fit to the kinds that bind, and without the kinds that failed.
pub(crate) struct Probe {
    source: Box<dyn BracketSource>,
    /// Every kind opened that has not failed.
    all: Vec<RecordKind>,
    /// Kinds refinement uses: those that came close to binding a side at the last calibration.
    active: Vec<RecordKind>,
    /// Kinds dropped after failing for good.
    failed: KindSet,
    scratch: Vec<Bracket>,
    /// Where the working and failed kinds are published, once the thread has its shared state.
    report: Option<Arc<Shared>>,
}

impl Probe {
    pub(crate) fn new(source: Box<dyn BracketSource>) -> Self {
        let all = source.kinds();
        Self {
            failed: source.unavailable(),
            source,
            active: all.clone(),
            all,
            scratch: Vec::new(),
            report: None,
        }
    }

    /// Publish the working and failed kinds in `shared`'s statistics, now and on every change.
    pub(crate) fn reporting_to(mut self, shared: Arc<Shared>) -> Self {
        self.report = Some(shared);
        self.publish_kinds();
        self
    }

    fn publish_kinds(&self) {
        if let Some(shared) = &self.report {
            let working: KindSet = self.all.iter().copied().collect();
            let stats = &shared.stats;
            stats.kinds_working.store(working.bits(), Ordering::Relaxed);
            stats
                .kinds_failed
                .store(self.failed.bits(), Ordering::Relaxed);
        }
    }

    /// The kinds still working.
    #[cfg(test)]
    fn working(&self) -> KindSet {
        self.all.iter().copied().collect()
    }

    /// Back to every kind (a calibration from scratch). In place: `active` always has room for
    /// every kind, so this does not allocate.
    pub(crate) fn use_all_kinds(&mut self) {
        self.active.clear();
        self.active.extend_from_slice(&self.all);
    }

    /// Room for a collection of `brackets` per kind without allocating.
    pub(crate) fn reserve(&mut self, brackets: usize) {
        self.scratch
            .reserve(brackets.saturating_sub(self.scratch.len()));
    }

    /// Drops `kind` after it failed for good.
    fn drop_kind(&mut self, kind: RecordKind) {
        self.failed = self.failed.with(kind);
        self.all.retain(|k| *k != kind);
        self.active.retain(|k| *k != kind);
        if self.active.is_empty() {
            self.use_all_kinds();
        }
        self.publish_kinds();
    }

    /// About `n` brackets of the active kinds, appended to `out` (and their kinds to `tags`, if
    /// given). Each kind's share is taken in one run: back-to-back brackets of one kind are
    /// warmer (caches, predictors) and so tighter than brackets alternating between kinds.
    /// A kind that fails for good is dropped and its share taken from the others.
    ///
    /// # Errors
    /// The error of the last working kind when it fails too (it is kept, for a later try), or
    /// one that no kind can avoid (no counter on this architecture).
    pub(crate) fn collect(
        &mut self,
        n: usize,
        out: &mut Vec<Constraint>,
        mut tags: Option<&mut Vec<RecordKind>>,
    ) -> Result<(), CalibError> {
        let start = out.len();
        let mut i = 0;
        while i < self.active.len() {
            let kind = self.active[i];
            // The kinds left share what is still missing (a dropped kind's share included).
            let missing = n.saturating_sub(out.len() - start);
            let per = missing.div_ceil(self.active.len() - i).max(1);
            self.scratch.clear();
            let result = self.source.collect(kind, per, &mut self.scratch);
            // Brackets taken before a failure are as good as any.
            for b in &self.scratch {
                out.push(Constraint {
                    before: b.before,
                    after: b.after,
                    kernel_ns: b.kernel_ns,
                });
                if let Some(t) = tags.as_deref_mut() {
                    t.push(kind);
                }
            }
            match result {
                Ok(()) => i += 1,
                // Not the kind's fault: no other kind can do better.
                Err(e) if e.bracket_error() == Some(&BracketError::CounterUnsupported) => {
                    return Err(e)
                }
                // The last kind is kept: its failure is reported, and a later round (a
                // refinement after a pause) may succeed where this one did not.
                Err(e) if self.all.len() <= 1 => return Err(e),
                // `kind` leaves `active`, so index `i` now holds the next kind.
                Err(_) => self.drop_kind(kind),
            }
        }
        Ok(())
    }

    /// Keep for refinement only the kinds whose tightest entry (stamp minus `before`) or exit
    /// (`after` minus stamp), measured against `fit`'s middle line, is near the best kind's:
    /// the others never bind and only cost CPU.
    pub(crate) fn select_useful(&mut self, fit: &Fit, raw: &[Constraint], tags: &[RecordKind]) {
        let (l, u) = fit.range_at(fit.last_counter);
        let mid = (l + u) / 2.0;
        let slope = fit.slope_best;
        // Each kind's tightest entry and exit, in order of first appearance; an array, so
        // that the refiner's recalibrations do not allocate.
        let mut best = [(RecordKind::Comm, f64::INFINITY, f64::INFINITY); RecordKind::ALL.len()];
        let mut seen = 0;
        for (c, &kind) in raw.iter().zip(tags) {
            let y = signed_diff(c.kernel_ns, fit.ns_ref);
            let entry = y - (mid + slope * signed_diff(c.before, fit.counter_ref));
            let exit = mid + slope * signed_diff(c.after, fit.counter_ref) - y;
            if let Some(b) = best[..seen].iter_mut().find(|b| b.0 == kind) {
                b.1 = b.1.min(entry);
                b.2 = b.2.min(exit);
            } else if seen < best.len() {
                best[seen] = (kind, entry, exit);
                seen += 1;
            }
        }
        let best = &best[..seen];
        let min_entry = best.iter().map(|b| b.1).fold(f64::INFINITY, f64::min);
        let min_exit = best.iter().map(|b| b.2).fold(f64::INFINITY, f64::min);
        let useful = |b: &&(RecordKind, f64, f64)| {
            b.1 <= min_entry + KIND_USEFUL_SLACK_NS || b.2 <= min_exit + KIND_USEFUL_SLACK_NS
        };
        if best.iter().any(|b| useful(&b)) {
            self.active.clear();
            self.active.extend(best.iter().filter(useful).map(|b| b.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brackets on a fake clock (kernel ns = counter); `refuse_after[kind]` successful
    /// collections later, that kind's action is refused (a policy installed mid-run).
    struct Flaky {
        refuse_after: [Option<u32>; 3],
        calls: [u32; 3],
        counter: u64,
    }

    impl BracketSource for Flaky {
        fn kinds(&self) -> Vec<RecordKind> {
            RecordKind::ALL.to_vec()
        }

        fn collect(
            &mut self,
            kind: RecordKind,
            n: usize,
            out: &mut Vec<Bracket>,
        ) -> Result<(), CalibError> {
            let i = RecordKind::ALL.iter().position(|k| *k == kind).unwrap_or(0);
            if self.refuse_after[i].is_some_and(|after| self.calls[i] >= after) {
                return Err(BracketError::Syscall {
                    op: "prctl(PR_SET_NAME)",
                    errno: libc::EPERM,
                }
                .into());
            }
            self.calls[i] += 1;
            for _ in 0..n {
                self.counter += 1000;
                out.push(Bracket {
                    kind,
                    before: self.counter,
                    after: self.counter + 10,
                    kernel_ns: self.counter + 5,
                    cpu: 0,
                });
            }
            Ok(())
        }
    }

    fn probe(refuse_after: [Option<u32>; 3]) -> Probe {
        Probe::new(Box::new(Flaky {
            refuse_after,
            calls: [0; 3],
            counter: 0,
        }))
    }

    #[test]
    fn a_refused_kind_is_dropped_at_the_first_collection() {
        let mut p = probe([Some(0), None, None]);
        let (mut out, mut tags) = (Vec::new(), Vec::new());
        p.collect(30, &mut out, Some(&mut tags))
            .expect("two kinds work");
        assert!(out.len() >= 30, "{}", out.len());
        assert!(!tags.contains(&RecordKind::Comm));
        assert_eq!(p.failed, KindSet::EMPTY.with(RecordKind::Comm));
        assert_eq!(
            p.working(),
            [RecordKind::PageFault, RecordKind::Mmap2]
                .into_iter()
                .collect()
        );
    }

    #[test]
    fn a_kind_refused_later_is_dropped_and_the_others_go_on() {
        let mut p = probe([None, Some(2), None]);
        for round in 0..5 {
            let (mut out, mut tags) = (Vec::new(), Vec::new());
            p.collect(9, &mut out, Some(&mut tags))
                .expect("other kinds work");
            assert!(out.len() >= 9, "round {round}: {}", out.len());
            if round >= 2 {
                assert!(!tags.contains(&RecordKind::PageFault), "round {round}");
            }
        }
        assert_eq!(p.failed, KindSet::EMPTY.with(RecordKind::PageFault));
        // A calibration from scratch does not bring the dropped kind back.
        p.use_all_kinds();
        assert!(!p.active.contains(&RecordKind::PageFault));
    }

    #[test]
    fn the_last_kind_is_kept_and_its_error_returned() {
        let mut p = probe([Some(0), Some(0), Some(1)]);
        let mut out = Vec::new();
        p.collect(9, &mut out, None).expect("mmap2 works once");
        let error = p
            .collect(9, &mut out, None)
            .expect_err("every kind refused");
        assert!(matches!(error, CalibError::Bracket(_)), "{error:?}");
        assert!(matches!(
            error.bracket_error(),
            Some(BracketError::Syscall {
                errno: libc::EPERM,
                ..
            })
        ));
        assert_eq!(p.working(), KindSet::EMPTY.with(RecordKind::Mmap2));
        // Kept for a later try: the next round asks it again, it does not collect nothing.
        assert!(p.collect(9, &mut out, None).is_err());
    }

    #[test]
    fn kind_sets_print_and_round_trip() {
        let set: KindSet = [RecordKind::Mmap2, RecordKind::Comm].into_iter().collect();
        assert_eq!(set.to_string(), "comm, mmap2");
        assert_eq!(KindSet::EMPTY.to_string(), "none");
        assert_eq!(KindSet::from_bits(set.bits()), set);
    }
}
