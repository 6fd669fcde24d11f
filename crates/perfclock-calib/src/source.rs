//! Where the calibrator's brackets come from: [`BracketSource`], the kernel's records
//! ([`GroundTruth`]) by default, and the round-robin over record kinds the calibrator draws from.

use crate::error::CalibError;
use crate::fit::{signed_diff, Constraint, Fit};
use crate::ground_truth::{Bracket, BracketError, GroundTruth, RecordKind};

/// A kind is kept for refinement if its tightest bracket side is within this of the best
/// kind's: a kind that never binds a side only costs CPU.
const KIND_USEFUL_SLACK_NS: f64 = 100.0;

/// Brackets of kernel-stamped records. [`GroundTruth`] is the real one; tests wrap it to
/// distort what the calibrator sees (a clock jump, a noisy kind).
pub trait BracketSource {
    /// The kinds this source can bracket.
    fn kinds(&self) -> Vec<RecordKind>;

    /// Appends about `n` brackets of `kind` to `out`.
    ///
    /// # Errors
    /// A [`BracketError`] when bracketing failed for good.
    fn collect(
        &mut self,
        kind: RecordKind,
        n: usize,
        out: &mut Vec<Bracket>,
    ) -> Result<(), BracketError>;
}

impl BracketSource for GroundTruth {
    fn kinds(&self) -> Vec<RecordKind> {
        GroundTruth::kinds(self)
    }

    fn collect(
        &mut self,
        kind: RecordKind,
        n: usize,
        out: &mut Vec<Bracket>,
    ) -> Result<(), BracketError> {
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
/// every kind, narrowed after a fit to the kinds that bind.
pub(crate) struct Probe {
    source: Box<dyn BracketSource>,
    /// Every kind opened.
    all: Vec<RecordKind>,
    /// Kinds refinement uses: those that came close to binding a side at the last calibration.
    active: Vec<RecordKind>,
    scratch: Vec<Bracket>,
}

impl Probe {
    pub(crate) fn new(source: Box<dyn BracketSource>) -> Self {
        let all = source.kinds();
        Self {
            source,
            active: all.clone(),
            all,
            scratch: Vec::new(),
        }
    }

    /// Back to every kind (a calibration from scratch).
    pub(crate) fn use_all_kinds(&mut self) {
        self.active = self.all.clone();
    }

    /// About `n` brackets of the active kinds, appended to `out` (and their kinds to `tags`, if
    /// given). Each kind's share is taken in one run: back-to-back brackets of one kind are
    /// warmer (caches, predictors) and so tighter than brackets alternating between kinds.
    pub(crate) fn collect(
        &mut self,
        n: usize,
        out: &mut Vec<Constraint>,
        mut tags: Option<&mut Vec<RecordKind>>,
    ) -> Result<(), CalibError> {
        let per = n.div_ceil(self.active.len().max(1)).max(1);
        for &kind in &self.active {
            self.scratch.clear();
            self.source.collect(kind, per, &mut self.scratch)?;
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
        let mut best: Vec<(RecordKind, f64, f64)> = Vec::new();
        for (c, &kind) in raw.iter().zip(tags) {
            let y = signed_diff(c.kernel_ns, fit.ns_ref);
            let entry = y - (mid + slope * signed_diff(c.before, fit.counter_ref));
            let exit = mid + slope * signed_diff(c.after, fit.counter_ref) - y;
            match best.iter_mut().find(|b| b.0 == kind) {
                Some(b) => {
                    b.1 = b.1.min(entry);
                    b.2 = b.2.min(exit);
                }
                None => best.push((kind, entry, exit)),
            }
        }
        let min_entry = best.iter().map(|b| b.1).fold(f64::INFINITY, f64::min);
        let min_exit = best.iter().map(|b| b.2).fold(f64::INFINITY, f64::min);
        let useful: Vec<RecordKind> = best
            .iter()
            .filter(|b| {
                b.1 <= min_entry + KIND_USEFUL_SLACK_NS || b.2 <= min_exit + KIND_USEFUL_SLACK_NS
            })
            .map(|b| b.0)
            .collect();
        if !useful.is_empty() {
            self.active = useful;
        }
    }
}
