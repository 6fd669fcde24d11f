//! The calibration thread: collect brackets, fit, publish; then refine, watch for clock jumps,
//! and start over when the clock moved.
//!
//! # Safety
//! The one unsafe call makes the thread the pages' only writer (`PageWriter` over the pages its
//! handle owns, kept alive by the shared state it holds).
#![allow(unsafe_code)]

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use perfclock_core::{counter, PageWriter, TimeConversion};
use perfclock_os::thread;
use perfclock_os::time::{self, ClockId};

use crate::error::BracketError;
use crate::error::CalibError;
use crate::fit::{Constraint, Fit, FitOptions, Rel};
use crate::fork_gate;
use crate::options::{CalibrationOptions, MIN_REFINE_BATCH};
use crate::prune::{prune_hull_into, prune_into, HullScratch, PruneScratch};
use crate::published::{
    continuations, slope_of, solve, tighter_at, Band, BoundCell, BoundModel, LinePublisher,
    LineTarget, Solution, Step, CONTINUITY_MARGIN_NS, PUBLISH_MARGIN_NS,
};
use crate::shared::Shared;
use crate::source::Probe;
use crate::RecordKind;

/// Buckets of time the history is cut into when pruning: each keeps its tightest brackets, so
/// candidates are left everywhere when the window drops old hull vertices.
const PRUNE_BUCKETS: usize = 32;
/// Survivors per side and bucket.
const PRUNE_KEEP: usize = 1;
/// Hull layers kept per side: one more than the fit's default trim, so trimming loses nothing.
const HULL_LAYERS: usize = 2;
/// A first fit needs at least this many brackets, even past the init budget.
const MIN_FIRST_FIT_BRACKETS: usize = 16;
/// Brackets per collection round of a first calibration: the budget is checked between rounds.
const INIT_ROUND_BRACKETS: usize = 96;
/// A first calibration stops collecting at this multiple of the init budget, whatever it has.
const INIT_BUDGET_HARD_FACTOR: u32 = 4;
/// After 1/this of the init budget, the rest goes to the kinds that bind the fit.
const INIT_SELECT_KINDS_FRACTION: u32 = 4;
/// Halvings of the history tried before a calibration from scratch (down to 1/32 of it).
const WINDOW_SHRINK_STEPS: usize = 5;
/// Contradicting brackets tolerated beyond the routine trim (a glitch, not a pattern).
const TOLERATED_EXTRA_REJECTS: usize = 2;
/// A refinement batch is a clock jump when at least this many brackets and at least half of it
/// fall outside the published bound (one stray bracket is noise).
const JUMP_MIN_STRAYS: usize = 2;
/// Brackets checked against an inherited publication before a resumed refiner replaces it.
const RESUME_CHECK_BRACKETS: usize = 24;
/// Brackets a calibration from scratch collects after fitting its init's, to fit up to the
/// moment it publishes (see [`Calibrator::bring_to_now`]).
const CLOSING_BATCH_BRACKETS: usize = 24;
/// The fastest slew a refinement offers, ns: a line above the band comes down by slewing, and
/// one this fast gains within the look ahead what its head start costs (see `continuations`).
const SLEW_HORIZON_NS: f64 = 2.0 * PUBLISH_MARGIN_NS;
/// Smallest share of the full refinement batch (1/this) a short pause takes.
const MIN_REFINE_SHARE: usize = 8;
/// Room for the pruned history on top of a refinement batch: the hull layers and per-slice
/// survivors are a few dozen brackets, far below this.
const HISTORY_SLACK: usize = 4096;
/// A calibration from scratch after the first keeps at most this multiple of the first one's
/// brackets (its buffers are sized for it, so that it need not allocate).
const RECALIBRATION_BRACKETS_FACTOR: usize = 2;

/// State of the background thread.
struct Calibrator {
    shared: Arc<Shared>,
    writer: PageWriter,
    options: CalibrationOptions,
    probe: Probe,
    history: Vec<Constraint>,
    /// The published line.
    line: LinePublisher,
    /// The slope (ns per tick) of the fit behind the published line.
    fit_slope: f64,
    /// Buffers reused round after round: once [`Calibrator::reserve_steady_state`] has sized
    /// them, the refiner's loop never calls the allocator, so it never holds a malloc lock a raw
    /// `clone()` could copy locked.
    buffers: Buffers,
    /// Whether the buffers are sized: calibrations from scratch then stop at their capacity.
    steady: bool,
}

/// The refiner's working storage, see [`Calibrator::buffers`].
#[derive(Default)]
struct Buffers {
    /// A refinement batch (or the resume check's).
    batch: Vec<Constraint>,
    /// A calibration from scratch's brackets, and their kinds.
    raw: Vec<Constraint>,
    tags: Vec<RecordKind>,
    /// Where the history is pruned into before the two are swapped.
    pruned: Vec<Constraint>,
    hull: HullScratch,
    prune: PruneScratch,
    /// A fit's storage between fits.
    rel: Vec<Rel>,
    /// Jump check: the batch's offsets from the published line.
    offsets: Vec<i64>,
}

impl Buffers {
    /// The constraints worth keeping of `history`, written to `out`: two hull layers per side
    /// (lossless for the fit, see [`crate::prune::prune_hull`]) plus the tightest bracket per side
    /// in each slice of time, so that when the window drops old hull vertices there are
    /// candidates left everywhere.
    fn prune_history(
        hull: &mut HullScratch,
        prune: &mut PruneScratch,
        rel: &mut Vec<Rel>,
        history: &[Constraint],
        out: &mut Vec<Constraint>,
    ) {
        out.clear();
        prune_hull_into(history, HULL_LAYERS, out, hull);
        if let Ok(rough) = Fit::new_reusing(out, &FitOptions::default(), rel) {
            let slope = rough.slope_best;
            *rel = rough.into_spare();
            prune_into(history, slope, PRUNE_BUCKETS, PRUNE_KEEP, out, prune);
            out.sort_unstable_by_key(|c| (c.before, c.after, c.kernel_ns));
            out.dedup();
        }
    }
}

/// The refiner's pages and bound, as its [`LinePublisher`] writes them.
struct RefinerPages<'a> {
    writer: &'a PageWriter,
    bound: &'a BoundCell,
}

impl LineTarget for RefinerPages<'_> {
    fn publish_conversion(&self, conversion: &TimeConversion) {
        self.writer.publish(conversion);
    }

    fn store_bound(&self, bound: &BoundModel) {
        self.bound.store(bound);
    }
}

impl Calibrator {
    /// Publish `fit`. `continuous`: never step the clock back (refinements, see
    /// [`Calibrator::choose`]); off after a jump, where the old line is simply wrong.
    fn publish(&mut self, fit: &Fit, continuous: bool) -> Result<(), CalibError> {
        let now = counter::read_counter().ok_or(BracketError::CounterUnsupported)?;
        let target = solve(fit, now)?;
        let step = match (continuous, self.line.current()) {
            (true, Some(old)) => self.choose(fit, &old, &target, now)?,
            _ => Step::Switch {
                line: target,
                before: u64::MAX,
            },
        };
        if matches!(step, Step::Keep(None)) {
            return Ok(());
        }
        let pages = RefinerPages {
            writer: &self.writer,
            bound: &self.shared.bound,
        };
        // No fork may copy the page or the bound mid-update (see `fork_gate`).
        let gate = fork_gate::hold();
        let published = self.line.take(&pages, step, now);
        drop(gate);
        if published {
            self.note_fit(fit);
            self.fit_slope = fit.slope_best;
        }
        Ok(())
    }

    /// What a refinement publishes after `old`, given `fit` and its middle line `target`, at
    /// counter value `now`.
    ///
    /// It keeps the published line (with its bound under `fit` when that is smaller ahead than the
    /// one published) or moves to one of the continuations that may follow it (see
    /// [`continuations`]), whichever lies nearest the band a while ahead (the next refinement, at
    /// least two publish margins), among those whose bound now is no more than the allowed growth
    /// above the kept line's, or than the kept line's will be by then. A continuation still ahead
    /// of the kept line there must come nearer by more than the allowed growth: the fit's middle
    /// jitters from fit to fit, and following it both ways would ratchet the line up (it may step
    /// forward, never back). One that is behind by then corrects the slope, stepping forward now
    /// only by the head start a flatter line needs.
    fn choose(
        &self,
        fit: &Fit,
        old: &Solution,
        target: &Solution,
        now: u64,
    ) -> Result<Step, CalibError> {
        let slope = fit.slope_best.max(f64::MIN_POSITIVE);
        // A continuation flatter than the old line starts above it by the slope difference
        // times the publish margin (see `continuations`); the old line's own drift from the
        // band repays that after one margin more.
        let ahead_ns = (self.options.pause_after(&target.bound, slope).as_nanos() as f64)
            .max(2.0 * PUBLISH_MARGIN_NS);
        let look = now.saturating_add((ahead_ns / slope) as u64);
        let (band_now, band_look) = (Band::of(fit, now)?, Band::of(fit, look)?);
        let allowed = self.options.allowed_growth_ns;
        let kept = band_now.bound_of(&old.conversion);
        let kept_later = band_look.bound_of(&old.conversion).base_ns;
        let ceiling = kept.base_ns.saturating_add(allowed).max(kept_later);
        let old_look = old.conversion.cycles_to_ns(look);
        let better = continuations(
            &old.conversion,
            target,
            now,
            (SLEW_HORIZON_NS / slope) as u64,
        )
        .map(|(next, before)| {
            let measured = band_now.bound_of(&next.conversion);
            let later = band_look.bound_of(&next.conversion).base_ns;
            // A line still ahead of the old one at `look` moved the clock forward for good:
            // it must come nearer by more than the allowed growth. One below it by then
            // corrects the slope; its step now is its head start.
            let ahead = next.conversion.cycles_to_ns(look)
                > old_look.saturating_add(CONTINUITY_MARGIN_NS + 1);
            let hysteresis = if ahead { allowed } else { 0 };
            (next, before, measured, later.saturating_add(hysteresis))
        })
        .filter(|(_, _, measured, judged)| measured.base_ns <= ceiling && *judged < kept_later)
        .min_by_key(|(_, _, _, judged)| *judged);
        Ok(match better {
            Some((next, before, measured, _)) => Step::Switch {
                line: Solution {
                    conversion: next.conversion,
                    bound: tighter_at(look, measured, next.bound),
                },
                before,
            },
            None => Step::Keep((kept.at(look) < old.bound.at(look)).then_some(kept)),
        })
    }

    /// Records `fit`, now what the published bound stands on, in the statistics.
    fn note_fit(&self, fit: &Fit) {
        let st = &self.shared.stats;
        st.last_fit_span_ns.store(
            (fit.span_counter() as f64 * fit.slope_best) as u64,
            Ordering::Relaxed,
        );
        st.last_fit_brackets
            .store(fit.used as u64, Ordering::Relaxed);
    }

    /// Calibrate from nothing: collect for the init budget, fit, publish. `continuous` as in
    /// [`Calibrator::publish`]: on when resuming an inherited publication that no jump has
    /// invalidated.
    fn calibrate_from_scratch(&mut self, continuous: bool) -> Result<(), CalibError> {
        self.history.clear();
        self.probe.use_all_kinds();
        let budget = self.options.init_budget;
        let start = Instant::now();
        let Buffers {
            raw,
            tags,
            hull,
            prune,
            rel,
            ..
        } = &mut self.buffers;
        raw.clear();
        tags.clear();
        // A round may overshoot its size by one bracket per kind.
        let round_room = INIT_ROUND_BRACKETS + RecordKind::ALL.len();
        let mut selected = false;
        let hard_limit = budget.saturating_mul(INIT_BUDGET_HARD_FACTOR);
        while start.elapsed() < budget || raw.len() < MIN_FIRST_FIT_BRACKETS {
            if self.shared.stop.load(Ordering::Relaxed) {
                // `start` gave up waiting (or the clock was dropped): nobody reads this page.
                return Err(CalibError::ThreadDied);
            }
            self.probe
                .collect(INIT_ROUND_BRACKETS, raw, Some(&mut *tags))?;
            if start.elapsed() > hard_limit {
                break;
            }
            if self.steady
                && raw.len() >= MIN_FIRST_FIT_BRACKETS
                && raw.len() + round_room > raw.capacity()
            {
                // As many as the buffers hold: growing them would allocate.
                break;
            }
            if !selected && start.elapsed() * INIT_SELECT_KINDS_FRACTION >= budget {
                selected = true;
                // The history is rebuilt below: it serves as the rough fit's pruned input.
                Buffers::prune_history(hull, prune, rel, raw, &mut self.history);
                if let Ok(rough) = Fit::new_reusing(&self.history, &self.options.fit, rel) {
                    self.probe.select_useful(&rough, raw, tags);
                    *rel = rough.into_spare();
                }
            }
        }
        Buffers::prune_history(hull, prune, rel, raw, &mut self.history);
        let fit = Fit::new_reusing(&self.history, &self.options.fit, rel)?;
        if !selected {
            self.probe.select_useful(&fit, raw, tags);
        }
        let fit = self.bring_to_now(fit)?;
        let published = self.publish(&fit, continuous);
        self.buffers.rel = fit.into_spare();
        published?;
        self.shared
            .stats
            .calibrations
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// `fit` over the init's history and a closing batch collected now. Pruning thousands of
    /// brackets and fitting them takes milliseconds, and a fit's band widens after its last
    /// bracket by its slope range per tick, tens of ns per ms over a first calibration's short
    /// span: the closing batch and a fit of the pruned history take a tenth of that. `fit`
    /// itself when the batch cannot be collected or contradicts it (a jump just now, which the
    /// next refinement's jump check sees); its band, extrapolated to now, is still honest.
    fn bring_to_now(&mut self, fit: Fit) -> Result<Fit, CalibError> {
        let fitted = self.history.len();
        let b = &mut self.buffers;
        b.batch.clear();
        if self
            .probe
            .collect(CLOSING_BATCH_BRACKETS, &mut b.batch, None)
            .is_err()
        {
            return Ok(fit);
        }
        self.history.extend_from_slice(&b.batch);
        let tolerated = fit.rejected + TOLERATED_EXTRA_REJECTS;
        let mut rel = fit.into_spare();
        match Fit::new_reusing(&self.history, &self.options.fit, &mut rel) {
            Ok(closed) if closed.rejected <= tolerated => return Ok(closed),
            Ok(closed) => rel = closed.into_spare(),
            Err(_) => {}
        }
        self.history.truncate(fitted);
        Ok(Fit::new_reusing(
            &self.history,
            &self.options.fit,
            &mut rel,
        )?)
    }

    /// Size every buffer for the steady state, after the first calibration: from then on the
    /// refiner's rounds (refinements, jump checks, calibrations from scratch) reuse them and
    /// never call the allocator.
    fn reserve_steady_state(&mut self) {
        let kinds = RecordKind::ALL.len();
        let batch = self.options.refine_batch + kinds;
        let raw = self.buffers.raw.len().max(MIN_FIRST_FIT_BRACKETS)
            * RECALIBRATION_BRACKETS_FACTOR
            + INIT_ROUND_BRACKETS
            + kinds;
        let history = raw.max(batch + HISTORY_SLACK);
        let b = &mut self.buffers;
        let small_batch = RESUME_CHECK_BRACKETS.max(CLOSING_BATCH_BRACKETS) + kinds;
        reserve_total(&mut b.batch, batch.max(small_batch));
        reserve_total(&mut b.offsets, batch.max(small_batch));
        reserve_total(&mut b.raw, raw);
        reserve_total(&mut b.tags, raw);
        reserve_total(&mut self.history, history);
        reserve_total(&mut b.pruned, history);
        reserve_total(&mut b.rel, history);
        b.hull = HullScratch::with_capacity(history);
        b.prune = PruneScratch::with_capacity(history, PRUNE_BUCKETS);
        self.probe.reserve(batch.max(INIT_ROUND_BRACKETS + kinds));
        self.steady = true;
    }

    /// Fit the history; if it needed to drop contradicting brackets beyond the routine trim (the
    /// clock is not quite a straight line over the whole window), forget the older half of the
    /// history and try again. Counts window shrinks.
    fn fit_shrinking_window(&mut self) -> Option<Fit> {
        let routine = 2 * self.options.fit.trim_per_side;
        for _ in 0..WINDOW_SHRINK_STEPS {
            if let Ok(f) = Fit::new_reusing(&self.history, &self.options.fit, &mut self.buffers.rel)
            {
                if f.rejected <= routine + TOLERATED_EXTRA_REJECTS {
                    return Some(f);
                }
                self.buffers.rel = f.into_spare();
            }
            let first = self.history.iter().map(|c| c.before).min()?;
            let last = self.history.iter().map(|c| c.after).max()?;
            let middle = first + (last - first) / 2;
            self.history.retain(|c| c.before >= middle);
            self.shared
                .stats
                .window_shrinks
                .fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    /// The first round of a refiner: a calibration from scratch. Started again in a fork child
    /// over the publication it inherited (`current`), it first checks a batch against that
    /// publication (the clock may have jumped since the parent last refined, e.g. a restored VM
    /// snapshot), and publishes continuously (never stepping back) unless the check found a jump.
    fn resume(&mut self) -> Result<(), CalibError> {
        let Some(sol) = self.line.current() else {
            return self.calibrate_from_scratch(false);
        };
        let b = &mut self.buffers;
        b.batch.clear();
        self.probe
            .collect(RESUME_CHECK_BRACKETS, &mut b.batch, None)?;
        let jumped = is_jump(&self.shared, &sol, &b.batch, &mut b.offsets);
        self.calibrate_from_scratch(!jumped)
    }

    /// One refinement round. Returns the pause before the next.
    /// `since_last` is the pause just taken: short pauses (early on, while the slope baseline
    /// is short) take smaller batches, so the CPU spent per second stays about constant.
    fn refine(&mut self, since_last: Duration) -> Result<Duration, CalibError> {
        // `validate` keeps the batch within MIN_REFINE_BATCH..=65536.
        let full = self.options.refine_batch;
        let share = since_last.as_secs_f64() / self.options.max_refine_interval.as_secs_f64();
        let smallest = (full / MIN_REFINE_SHARE).max(MIN_REFINE_BATCH);
        let n = ((full as f64 * share) as usize).clamp(smallest, full.max(smallest));
        let b = &mut self.buffers;
        b.batch.clear();
        self.probe.collect(n, &mut b.batch, None)?;
        let Some(sol) = self.line.current() else {
            self.calibrate_from_scratch(false)?;
            return Ok(self.options.min_refine_interval);
        };
        if is_jump(&self.shared, &sol, &b.batch, &mut b.offsets) {
            self.calibrate_from_scratch(false)?;
            return Ok(self.options.min_refine_interval);
        }
        self.history.extend_from_slice(&b.batch);
        if let Some(last) = self.history.iter().map(|c| c.after).max() {
            let window_ticks = (self.options.window.as_nanos() as f64 / self.fit_slope) as u64;
            let oldest = last.saturating_sub(window_ticks);
            self.history.retain(|c| c.before >= oldest);
            Buffers::prune_history(
                &mut b.hull,
                &mut b.prune,
                &mut b.rel,
                &self.history,
                &mut b.pruned,
            );
            std::mem::swap(&mut self.history, &mut b.pruned);
        }
        let fit = match self.fit_shrinking_window() {
            Some(f) => f,
            None => {
                // Even the recent history contradicts itself: something moved. Start over.
                self.calibrate_from_scratch(false)?;
                return Ok(self.options.min_refine_interval);
            }
        };
        let published = self.publish(&fit, true);
        self.buffers.rel = fit.into_spare();
        published?;
        self.shared
            .stats
            .refinements
            .fetch_add(1, Ordering::Relaxed);
        let sol = self.line.current().unwrap_or(sol);
        Ok(self.options.pause_after(&sol.bound, self.fit_slope))
    }
}

/// Grows `v`'s capacity to at least `total` elements.
fn reserve_total<T>(v: &mut Vec<T>, total: usize) {
    v.reserve(total.saturating_sub(v.len()));
}

/// Whether `batch` shows that the clock jumped away from `sol` (suspend, host migration, a
/// restored VM snapshot): at least [`JUMP_MIN_STRAYS`] brackets and half of the batch fall
/// outside its bound. Counts strays and jumps in `shared`'s statistics; `offsets` is scratch.
fn is_jump(shared: &Shared, sol: &Solution, batch: &[Constraint], offsets: &mut Vec<i64>) -> bool {
    let stray = batch.iter().filter(|b| outside_bound(sol, b)).count();
    let st = &shared.stats;
    st.stray_brackets.fetch_add(stray as u64, Ordering::Relaxed);
    if stray < JUMP_MIN_STRAYS || stray * 2 < batch.len() {
        return false;
    }
    offsets.clear();
    offsets.extend(batch.iter().map(|b| {
        let mid = b.before / 2 + b.after / 2;
        let published = sol.conversion.cycles_to_ns(mid);
        i64::try_from(i128::from(b.kernel_ns) - i128::from(published)).unwrap_or(0)
    }));
    offsets.sort_unstable();
    st.last_jump_ns
        .store(offsets[offsets.len() / 2], Ordering::Relaxed);
    st.jumps.fetch_add(1, Ordering::Relaxed);
    true
}

/// Whether bracket `b` contradicts the published conversion by more than its bound.
fn outside_bound(sol: &Solution, b: &Constraint) -> bool {
    let conv = &sol.conversion;
    let at_before = conv.cycles_to_ns(b.before);
    let at_after = conv.cycles_to_ns(b.after);
    let bound_b = sol.bound.at(b.before);
    let bound_a = sol.bound.at(b.after);
    b.kernel_ns.saturating_add(bound_b) < at_before
        || b.kernel_ns > at_after.saturating_add(bound_a)
}

fn thread_cpu_ns() -> u64 {
    time::clock_gettime_ns(ClockId::ThreadCpuTime)
        .ok()
        .and_then(|ns| u64::try_from(ns).ok())
        .unwrap_or(0)
}

/// The thread's body. `probe` is opened here: the events are per thread. `inherited`: what a
/// fork child's copy of the page publishes, when the refiner is started again there (see
/// `CalibratedClock::resume_after_fork`); the first round then continues from it.
pub(crate) fn run(
    shared: Arc<Shared>,
    options: CalibrationOptions,
    open: impl FnOnce(&CalibrationOptions) -> Result<Probe, CalibError>,
    tx: mpsc::SyncSender<Result<(), CalibError>>,
    spawned_at: Instant,
    inherited: Option<Solution>,
) {
    // No signal handler runs here (the fork gate relies on it); pthread_sigmask fails only for
    // an invalid argument, which this call never passes.
    let _ = thread::block_all_signals();
    let tid = thread::gettid();
    shared
        .stats
        .thread_tid
        .store(u64::from(tid), Ordering::Relaxed);
    let probe = match open(&options) {
        Ok(p) => p.reporting_to(shared.clone()),
        Err(e) => {
            // The receiver may have timed out and gone; then nobody needs the reason.
            let _ = tx.send(Err(e));
            return;
        }
    };
    // SAFETY: the pages are page-aligned, distinct, outlive the thread (it holds `shared`), and this
    // thread is their only writer; readers use atomics.
    let writer = unsafe { PageWriter::new_mirrored(shared.page.page(), shared.page.mirror()) };
    let refine = options.refine;
    let mut cal = Calibrator {
        shared: shared.clone(),
        writer,
        options,
        probe,
        history: Vec::new(),
        line: LinePublisher::new(inherited),
        fit_slope: inherited.map_or(1.0, |sol| slope_of(&sol.conversion)),
        buffers: Buffers::default(),
        steady: false,
    };
    let first = cal.resume();
    if first.is_ok() && refine {
        // Before `start` returns: from then on the refiner never calls the allocator.
        cal.reserve_steady_state();
    }
    shared
        .stats
        .first_calibration_ns
        .store(spawned_at.elapsed().as_nanos() as u64, Ordering::Relaxed);
    shared
        .stats
        .thread_cpu_ns
        .store(thread_cpu_ns(), Ordering::Relaxed);
    let ok = first.is_ok();
    // The receiver may have timed out and gone: then nobody is waiting and we just go on.
    let _ = tx.send(first);
    if !ok || !refine {
        return;
    }
    let mut pause = cal.options.min_refine_interval;
    while !shared.stop.load(Ordering::Relaxed) {
        std::thread::park_timeout(pause);
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        pause = match cal.refine(pause) {
            Ok(p) => p,
            // Transient trouble (e.g. fd limits): keep the last publication, its bound keeps
            // growing honestly; try again later.
            Err(_) => cal.options.max_refine_interval,
        };
        shared
            .stats
            .thread_cpu_ns
            .store(thread_cpu_ns(), Ordering::Relaxed);
    }
}
