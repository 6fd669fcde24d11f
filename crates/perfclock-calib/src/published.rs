//! Turning a [`Fit`] into what readers see: the kernel's integer `TimeConversion` in a page of
//! our own memory, and an error bound that grows with the counter distance from the fit.
//!
//! # The published line
//! At the publishing counter value `c_p` the fit says the true clock lies in `[L, U]`. We publish
//! the line through the middle of that range with the middle slope of the feasible range
//! `[s_min, s_max]`, quantised to `mult / 2^shift` (shift 31, or less if `mult` would not fit in
//! `u32`, i.e. for counters slower than 0.5 GHz). `time_zero` absorbs the offset (wrapping, like the
//! kernel's).
//!
//! # `error_bound_ns` (definition)
//! For a counter value `c`, `bound(c) = base + growth * |c - c_p|` where
//! - `base = ceil((U - L) / 2) + noise + 2`: half the feasible band at `c_p`, the kernel clock's
//!   own jitter allowance (the truth at an instant is the line plus up to `noise`), and 2 ns for
//!   rounding `time_zero` and the floor in the kernel formula;
//! - `growth = max(s_max - s_q, s_q - s_min)` with `s_q` the quantised slope: the feasible lines
//!   can run away from the published one by at most this many ns per counter tick.
//!
//! Every line in the polygon satisfies `|line(c) - published(c)| <= bound(c)` for all `c`, so the
//! bound stays honest however long ago the fit was made; the refiner republishes so it stays small.

use core::sync::atomic::{AtomicU64, Ordering};

use perfclock_core::SeqLock;
use perfclock_core::TimeConversion;

use crate::error::{CalibError, PublishError};
use crate::fit::{signed_diff, Fit};

/// Shift used for the published conversion unless `mult` would overflow `u32`: 31, the largest an
/// x86 kernel publishes (it lowers 32 to 31 because the page's original conversion shifted a
/// 32-bit value), so readers' fast paths and tools see the form they see in kernel mode. The
/// quantum, 2^-32 ns per tick at most, is far inside any fit's slope range.
pub const PREFERRED_SHIFT: u16 = 31;
/// Added to every bound for rounding `time_zero` and the kernel formula's floor, ns.
pub const ROUNDING_NS: u64 = 2;
/// Fixed-point scale of [`BoundModel::growth_q48`]: ns per counter tick times 2^48.
pub use perfclock_core::shared_page::GROWTH_SCALE_LOG2;

/// `bound(c) = base_ns + growth * |c - counter_ref|` (see the module docs): the type the
/// shared page stores, so a calibration's bound is published there as it is.
pub use perfclock_core::shared_page::SharedBound as BoundModel;

/// What one fit publishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Solution {
    /// The conversion readers use.
    pub conversion: TimeConversion,
    /// Its error bound.
    pub bound: BoundModel,
}

/// The integer multiplier and shift closest to `slope` ns per tick.
pub fn quantise_slope(slope: f64) -> Result<(u32, u16), CalibError> {
    if !(slope.is_finite() && slope > 0.0) {
        return Err(PublishError::SlopeOutOfRange.into());
    }
    let mut shift = PREFERRED_SHIFT;
    loop {
        let mult = (slope * (1u64 << shift) as f64).round();
        if (1.0..4_294_967_296.0).contains(&mult) {
            // Truncation is exact: mult is integral and in range.
            return Ok((mult as u32, shift));
        }
        if mult < 1.0 || shift == 0 {
            return Err(PublishError::SlopeOutOfRange.into());
        }
        shift -= 1;
    }
}

/// The conversion and bound to publish for `fit`, anchored at counter value `at_counter`
/// (normally "now", just after the last bracket).
///
/// # Errors
/// [`CalibError::Publish`] when the slope cannot be expressed in the kernel's format.
pub fn solve(fit: &Fit, at_counter: u64) -> Result<Solution, CalibError> {
    let Band { lower, upper, .. } = Band::of(fit, at_counter)?;
    let slope = (fit.slope_min + fit.slope_max) / 2.0;
    let (mult, shift) = quantise_slope(slope)?;
    let slope_q = f64::from(mult) / (1u64 << shift) as f64;
    let middle = (lower + upper) / 2.0;
    // zero + floor(c_p * mult >> shift) = ns_ref + middle
    let scaled = (u128::from(at_counter) * u128::from(mult)) >> shift;
    let target = i128::from(fit.ns_ref) + middle.round() as i128;
    // Wrapping, as the kernel's time_zero: the perf clock may be behind counter * slope.
    let zero = (target - scaled as i128) as u64;
    let conversion = TimeConversion::new(mult, shift, zero).map_err(PublishError::Param)?;
    let half_band = ((upper - lower) / 2.0).ceil();
    let base_ns = half_band as u64 + fit.noise_ns().ceil() as u64 + ROUNDING_NS;
    Ok(Solution {
        conversion,
        bound: BoundModel {
            base_ns,
            growth_q48: growth_q48(fit, slope_q),
            counter_ref: at_counter,
        },
    })
}

/// Perf ns per counter tick of `conversion`.
pub fn slope_of(conversion: &TimeConversion) -> f64 {
    f64::from(conversion.mult()) / (1u64 << conversion.shift()) as f64
}

/// How far the fit's feasible slopes run from `slope` per counter tick, in the bound's fixed
/// point, rounded up.
fn growth_q48(fit: &Fit, slope: f64) -> u64 {
    let growth = (fit.slope_max - slope).max(slope - fit.slope_min).max(0.0);
    let q48 = (growth * (1u64 << GROWTH_SCALE_LOG2) as f64).ceil();
    if q48 >= u64::MAX as f64 {
        u64::MAX
    } else {
        q48 as u64
    }
}

/// The fit's band at one counter value, to measure any line against: the module docs' bound
/// for a line that need not be the polygon's middle (a line published earlier, or a
/// continuation), under a fit that may know more than the one it was published for.
#[derive(Clone, Copy, Debug)]
pub struct Band<'a> {
    fit: &'a Fit,
    at: u64,
    lower: f64,
    upper: f64,
}

impl<'a> Band<'a> {
    /// The band of `fit` at counter value `at`.
    ///
    /// # Errors
    /// [`CalibError::Publish`] when the band is not finite.
    pub fn of(fit: &'a Fit, at: u64) -> Result<Self, CalibError> {
        let (lower, upper) = fit.range_at(at);
        if !(lower.is_finite() && upper.is_finite()) || upper < lower {
            return Err(PublishError::BandNotFinite.into());
        }
        Ok(Self {
            fit,
            at,
            lower,
            upper,
        })
    }

    /// The bound of `conversion`, referenced here: how far the band's farther edge lies from it,
    /// plus the noise allowance and rounding, growing by the widest slope difference.
    pub fn bound_of(&self, conversion: &TimeConversion) -> BoundModel {
        let published = signed_diff(conversion.cycles_to_ns(self.at), self.fit.ns_ref);
        let farthest = (self.upper - published)
            .max(published - self.lower)
            .max(0.0)
            .ceil();
        let slope = slope_of(conversion);
        BoundModel {
            base_ns: (farthest as u64)
                .saturating_add(self.fit.noise_ns().ceil() as u64)
                .saturating_add(ROUNDING_NS),
            growth_q48: growth_q48(self.fit, slope),
            counter_ref: self.at,
        }
    }
}

/// Margin by which a continued line starts above the old one, ns: covers the floor in both
/// conversions so that no reading taken after the switch is below one taken before it.
pub const CONTINUITY_MARGIN_NS: u64 = 2;

/// `target`, or, if publishing it would step the clock back (the old line is ahead of it at
/// `at`, or less than [`CONTINUITY_MARGIN_NS`] behind), a line that continues the old one at `at`
/// (plus [`CONTINUITY_MARGIN_NS`]) and slews into `target` over `horizon_ticks`: lower slope, same
/// shift rules. Its bound is [`bound_toward`]'s, referenced to counter value `now` (the
/// publishing time; `at` may lie after it). Forward steps are published as they are: they never
/// make time go back.
///
/// # Errors
/// [`CalibError::Publish`] if the slewed slope cannot be expressed.
pub fn continue_from(
    old: &TimeConversion,
    target: &Solution,
    at: u64,
    horizon_ticks: u64,
    now: u64,
) -> Result<Solution, CalibError> {
    let old_ns = old.cycles_to_ns(at);
    let target_ns = target.conversion.cycles_to_ns(at);
    // How far the target must rise to lie the margin above the old line at `at`.
    let d = (old_ns.wrapping_sub(target_ns) as i64).saturating_add(CONTINUITY_MARGIN_NS as i64);
    if d <= 0 || horizon_ticks == 0 {
        return Ok(*target);
    }
    let d = d as u64;
    let t = &target.conversion;
    let slope_target = slope_of(t);
    let slope = slope_target - d as f64 / horizon_ticks as f64;
    let (mult, shift) = quantise_slope(slope)?;
    let scaled = ((u128::from(at) * u128::from(mult)) >> shift) as u64;
    let zero = (old_ns + CONTINUITY_MARGIN_NS).wrapping_sub(scaled);
    let conversion = TimeConversion::new(mult, shift, zero).map_err(PublishError::Param)?;
    Ok(Solution {
        conversion,
        bound: bound_toward(&conversion, target, now),
    })
}

/// The bound of `line`, a line published instead of `target` (a continuation slewing into it),
/// referenced at counter value `now`: `target`'s bound plus the distance between the two lines,
/// growing by both: `|line(c) - target(c)| <= |line(now) - target(now)| + slew * |c - now|`,
/// and `target`'s bound at `c` is at most its bound at `now` plus its growth times `|c - now|`.
/// 2 ns more cover the floors in the two conversions.
pub fn bound_toward(line: &TimeConversion, target: &Solution, now: u64) -> BoundModel {
    let gap = line
        .cycles_to_ns(now)
        .abs_diff(target.conversion.cycles_to_ns(now));
    let slew = (slope_of(line) - slope_of(&target.conversion)).abs();
    let extra_growth = (slew * (1u64 << GROWTH_SCALE_LOG2) as f64).ceil() as u64;
    BoundModel {
        base_ns: target
            .bound
            .at(now)
            .saturating_add(gap)
            .saturating_add(ROUNDING_NS),
        growth_q48: target
            .bound
            .growth_q48
            .saturating_add(extra_growth)
            .saturating_add(1),
        counter_ref: now,
    }
}

/// Of two honest bounds for one line, the smaller at counter value `look`.
pub fn tighter_at(look: u64, a: BoundModel, b: BoundModel) -> BoundModel {
    if a.at(look) < b.at(look) {
        a
    } else {
        b
    }
}

/// How far ahead of "now" a continuation is checked to lie above the old line, ns: the new line
/// must be written before the counter gets there (see [`continue_within`]). A writer preempted
/// for longer between choosing a line and writing it drops the line and tries again later.
pub const PUBLISH_MARGIN_NS: f64 = 50e6;

/// The line to publish after `old` for `target`, chosen at counter value `now`, and the counter
/// value before which it must be written (`now` plus [`PUBLISH_MARGIN_NS`] in ticks of
/// `target`'s slope); `None` if none can be published safely now (the caller keeps `old`, whose
/// bound keeps growing honestly, and tries again later). The first of [`continuations`].
pub fn continue_within(
    old: &TimeConversion,
    target: &Solution,
    now: u64,
    horizon_ticks: u64,
) -> Option<(Solution, u64)> {
    continuations(old, target, now, horizon_ticks).next()
}

/// Every line that may be published after `old` for `target`, chosen at counter value `now`,
/// each with the counter value before which it must be written (`now` plus
/// [`PUBLISH_MARGIN_NS`] in ticks of `target`'s slope).
///
/// Readers keep using `old` until the page is written. Each line lies at least
/// [`CONTINUITY_MARGIN_NS`] above `old` at `now` and at the deadline, hence (both being lines)
/// everywhere in between, floors included: a reading taken with it is never below one taken
/// with `old` at the same or an earlier counter value, as long as it is written before the
/// deadline. They are [`continue_from`]'s lines anchored at `now` (above `old` from there on when
/// steeper), then at the deadline (above `old` up to there when flatter, starting above it at
/// `now` by the slope difference times the margin), each over `horizon_ticks` and longer
/// horizons, so that a larger step back still finds an expressible slope; `target` itself where
/// that is ahead.
pub fn continuations<'a>(
    old: &'a TimeConversion,
    target: &'a Solution,
    now: u64,
    horizon_ticks: u64,
) -> impl Iterator<Item = (Solution, u64)> + 'a {
    let slope = slope_of(&target.conversion);
    let deadline = now.saturating_add((PUBLISH_MARGIN_NS / slope) as u64);
    let above = move |next: &Solution, c: u64| {
        next.conversion.cycles_to_ns(c) >= old.cycles_to_ns(c).saturating_add(CONTINUITY_MARGIN_NS)
    };
    [now, deadline]
        .into_iter()
        .flat_map(move |anchor| {
            [1, 3, 10, 30, 100, 1000, 10_000, 100_000]
                .into_iter()
                .map(move |factor| (anchor, horizon_ticks.saturating_mul(factor)))
        })
        .filter_map(move |(anchor, horizon)| continue_from(old, target, anchor, horizon, now).ok())
        .filter(move |next| above(next, now) && above(next, deadline))
        .map(move |next| (next, deadline))
}

/// The published [`BoundModel`], readable lock-free from any thread (and from signal handlers:
/// loads only, bounded retries) while one writer updates it. Same seqlock shape as the page, and
/// mirrored like it: the writer finishes the second slot before it touches the first, so a writer
/// preempted mid-update never leaves readers without a bound.
#[derive(Debug)]
pub struct BoundCell {
    slots: [BoundSlot; 2],
}

#[derive(Debug)]
struct BoundSlot {
    /// Guards the three fields below, with the page's protocol.
    seq: SeqLock,
    base_ns: AtomicU64,
    growth_q48: AtomicU64,
    counter_ref: AtomicU64,
}

/// Attempts before [`BoundCell::load`] gives up and reports [`BoundModel::UNKNOWN`].
pub const BOUND_MAX_RETRIES: u32 = 10_000;

impl Default for BoundCell {
    fn default() -> Self {
        Self::new(BoundModel::UNKNOWN)
    }
}

impl BoundCell {
    /// A cell holding `model`.
    pub const fn new(model: BoundModel) -> Self {
        Self {
            slots: [BoundSlot::new(model), BoundSlot::new(model)],
        }
    }

    /// Replace the model: the second slot, then the first. Single writer.
    pub fn store(&self, model: &BoundModel) {
        self.slots[1].store(model);
        self.slots[0].store(model);
    }

    /// A consistent snapshot, or [`BoundModel::UNKNOWN`] if the writer kept both slots busy.
    pub fn load(&self) -> BoundModel {
        for _ in 0..BOUND_MAX_RETRIES {
            if let Some(model) = self.slots.iter().find_map(BoundSlot::attempt) {
                return model;
            }
            core::hint::spin_loop();
        }
        BoundModel::UNKNOWN
    }
}

impl BoundSlot {
    const fn new(model: BoundModel) -> Self {
        Self {
            seq: SeqLock::new(),
            base_ns: AtomicU64::new(model.base_ns),
            growth_q48: AtomicU64::new(model.growth_q48),
            counter_ref: AtomicU64::new(model.counter_ref),
        }
    }

    fn store(&self, model: &BoundModel) {
        let _update = self.seq.write();
        self.base_ns.store(model.base_ns, Ordering::Relaxed);
        self.growth_q48.store(model.growth_q48, Ordering::Relaxed);
        self.counter_ref.store(model.counter_ref, Ordering::Relaxed);
    }

    /// One read section: `None` if the writer was in it.
    fn attempt(&self) -> Option<BoundModel> {
        let stamp = self.seq.optimistic_read()?;
        let model = BoundModel {
            base_ns: self.base_ns.load(Ordering::Relaxed),
            growth_q48: self.growth_q48.load(Ordering::Relaxed),
            counter_ref: self.counter_ref.load(Ordering::Relaxed),
        };
        self.seq.validate_read(stamp).then_some(model)
    }
}

/// Where a line is published: a conversion page (or two, mirrored) and a bound readers pair
/// with it. The in-process refiner's pages and `perfclock serve`'s shared page are both; only a
/// [`LinePublisher`] writes them.
pub trait LineTarget {
    /// Publishes `conversion` (a seqlock write section of the page).
    fn publish_conversion(&self, conversion: &TimeConversion);
    /// Stores `bound`.
    fn store_bound(&self, bound: &BoundModel);
}

/// What one publication does to the published line: the decision of the refiner's rule
/// ([`continuations`] judged against its fit) or of the server's (the refiner's line followed
/// through [`continue_within`]), which [`LinePublisher::take`] carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The line stays; with this bound when there is one (a bound re-measured toward a newer
    /// line, or the same bound written again so that a heartbeat stored with it moves on).
    Keep(Option<BoundModel>),
    /// Switch to `line`, which must be written before the counter reaches `before` (see
    /// [`continue_within`]; `u64::MAX` for a first line, or one after a jump, which need not
    /// continue anything).
    Switch {
        /// The line to publish.
        line: Solution,
        /// The counter value past which publishing `line` could step a reading back.
        before: u64,
    },
}

/// The line a [`LineTarget`] carries, and the one writer of it: the in-process refiner and
/// `perfclock serve` each decide every publication's [`Step`] by their own rule and take it
/// here, so the order of the writes that keep readers safe is written once.
#[derive(Clone, Copy, Debug, Default)]
pub struct LinePublisher {
    line: Option<Solution>,
}

impl LinePublisher {
    /// A publisher whose target carries `inherited` (a line published before this one took
    /// over: a fork parent's, or an earlier server's), or nothing yet.
    pub const fn new(inherited: Option<Solution>) -> Self {
        LinePublisher { line: inherited }
    }

    /// The line the target carries.
    pub fn current(&self) -> Option<Solution> {
        self.line
    }

    /// Takes `step` on `target` at counter value `now`; whether it wrote anything. A switch
    /// covers both lines' bounds while a reader may pair either conversion with either bound,
    /// and is dropped (the old bound restored) if the counter already passed its `before`: a
    /// writer preempted that long publishes nothing, and the caller tries again later. A
    /// switch to the line already carried, or a kept bound, stores the bound alone.
    pub fn take(&mut self, target: &impl LineTarget, step: Step, now: u64) -> bool {
        match (step, self.line.as_mut()) {
            (Step::Keep(Some(bound)), Some(line)) => {
                target.store_bound(&bound);
                line.bound = bound;
                true
            }
            (Step::Keep(_), _) => false,
            (Step::Switch { line: next, .. }, Some(old)) if old.conversion == next.conversion => {
                target.store_bound(&next.bound);
                *old = next;
                true
            }
            (Step::Switch { line: next, before }, old) => {
                if let Some(old) = old {
                    target.store_bound(&union_bound(&old.bound, &next.bound, now));
                    if perfclock_core::counter::read_counter().is_none_or(|late| late >= before) {
                        target.store_bound(&old.bound);
                        return false;
                    }
                }
                target.publish_conversion(&next.conversion);
                target.store_bound(&next.bound);
                self.line = Some(next);
                true
            }
        }
    }
}

/// The bound that covers both `a` and `b` from `counter` on: used while switching between two
/// published conversions, when a reader may pair either page with either bound.
pub fn union_bound(a: &BoundModel, b: &BoundModel, counter: u64) -> BoundModel {
    BoundModel {
        base_ns: a.at(counter).max(b.at(counter)),
        growth_q48: a.growth_q48.max(b.growth_q48),
        counter_ref: counter,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::{Constraint, Fit, FitOptions};

    fn synthetic(n: u64) -> Vec<Constraint> {
        // ns = 7_000 + c * 10 / 29, stamp 800 ticks in, exit 1800 ticks.
        (0..n)
            .map(|i| {
                let before = 3_000_000_000 + i * 100_000 + (i * 37) % 300;
                let stamp = before + 800;
                Constraint {
                    before,
                    after: stamp + 1800,
                    kernel_ns: 7_000 + stamp * 10 / 29,
                }
            })
            .collect()
    }

    #[test]
    fn published_conversion_is_within_its_bound_of_the_truth() {
        let data = synthetic(1000);
        let fit = Fit::new(&data, &FitOptions::default()).expect("fit");
        let at = fit.last_counter + 10_000;
        let sol = solve(&fit, at).expect("solve");
        assert_eq!(sol.conversion.shift(), PREFERRED_SHIFT);
        for dt in [0u64, 1_000_000, 300_000_000, 30_000_000_000] {
            let c = at + dt;
            let truth = 7_000 + c * 10 / 29;
            let published = sol.conversion.cycles_to_ns(c);
            let err = published.abs_diff(truth);
            assert!(
                err <= sol.bound.at(c),
                "dt {dt}: err {err} > {}",
                sol.bound.at(c)
            );
        }
        assert!(sol.bound.at(at) < 600, "{:?}", sol.bound);
        assert!(sol.bound.at(at + 30_000_000_000) > sol.bound.at(at));
    }

    /// A line that is not the fit's middle (an earlier publication, a continuation) gets a
    /// bound that covers every line of the fit's polygon at every counter value, and the truth
    /// with it, and no more than its distance from the middle on top of the middle's own bound.
    #[test]
    fn a_bound_measured_against_the_band_covers_the_polygon_off_the_middle() {
        let data = synthetic(1000);
        let fit = Fit::new(&data, &FitOptions::default()).expect("fit");
        let at = fit.last_counter + 10_000;
        let middle = solve(&fit, at).expect("solve");
        let band = Band::of(&fit, at).expect("band");
        let truth = |c: u64| 7_000 + c * 10 / 29;
        let m = middle.conversion;
        for (dmult, dzero) in [(0i64, 0i64), (0, 250), (0, -300), (3, 40), (-3, -40)] {
            let mult = u32::try_from(i64::from(m.mult()) + dmult).expect("mult");
            let zero = m.zero().wrapping_add_signed(dzero);
            let line = TimeConversion::new(mult, m.shift(), zero).expect("line");
            let bound = band.bound_of(&line);
            let off_middle = line.cycles_to_ns(at).abs_diff(m.cycles_to_ns(at));
            assert!(
                bound.at(at) <= middle.bound.at(at) + off_middle + 2,
                "{dmult} {dzero}: {bound:?} vs {:?} + {off_middle}",
                middle.bound
            );
            for c in [at - 100_000_000, at, at + 30_000_000, at + 3_000_000_000] {
                let (lower, upper) = fit.range_at(c);
                let published = signed_diff(line.cycles_to_ns(c), fit.ns_ref);
                let farthest = (upper - published).max(published - lower) + fit.noise_ns();
                assert!(
                    farthest <= bound.at(c) as f64,
                    "{dmult} {dzero} at {c}: the polygon reaches {farthest} > {bound:?}"
                );
                let err = line.cycles_to_ns(c).abs_diff(truth(c));
                assert!(
                    err <= bound.at(c),
                    "{dmult} {dzero} at {c}: {err} > {bound:?}"
                );
            }
        }
    }

    #[test]
    fn negative_offset_wraps_like_the_kernel() {
        // Perf clock behind counter * slope: time_zero wraps below zero.
        let data: Vec<Constraint> = (0..200u64)
            .map(|i| {
                let before = 1_000_000_000_000 + i * 1_000_000;
                let stamp = before + 500;
                Constraint {
                    before,
                    after: stamp + 500,
                    kernel_ns: stamp / 3 - 300_000_000_000,
                }
            })
            .collect();
        let fit = Fit::new(&data, &FitOptions::default()).expect("fit");
        let at = fit.last_counter;
        let sol = solve(&fit, at).expect("solve");
        let truth = at / 3 - 300_000_000_000;
        assert!(sol.conversion.cycles_to_ns(at).abs_diff(truth) <= sol.bound.at(at));
    }

    #[test]
    fn slow_counters_use_a_smaller_shift() {
        // 24 MHz counter: 41.67 ns per tick does not fit with shift 31.
        let (mult, shift) = quantise_slope(41.666_666).expect("quantise");
        assert!(shift < 32);
        let back = f64::from(mult) / (1u64 << shift) as f64;
        assert!((back - 41.666_666).abs() < 1e-6);
        assert_eq!(
            quantise_slope(0.0),
            Err(PublishError::SlopeOutOfRange.into())
        );
        assert_eq!(
            quantise_slope(f64::NAN),
            Err(PublishError::SlopeOutOfRange.into())
        );
        assert_eq!(
            quantise_slope(1e12),
            Err(PublishError::SlopeOutOfRange.into())
        );
    }

    #[test]
    fn bound_model_arithmetic_saturates() {
        let m = BoundModel {
            base_ns: 100,
            growth_q48: 1 << GROWTH_SCALE_LOG2, // 1 ns per tick
            counter_ref: 1000,
        };
        assert_eq!(m.at(1000), 101);
        assert_eq!(m.at(1010), 111);
        assert_eq!(m.at(990), 111);
        assert_eq!(m.ticks_until_growth(50), 50);
        assert_eq!(BoundModel::UNKNOWN.at(5), u64::MAX);
        let huge = BoundModel {
            base_ns: u64::MAX - 1,
            growth_q48: u64::MAX,
            counter_ref: 0,
        };
        assert_eq!(huge.at(u64::MAX), u64::MAX);
    }

    #[test]
    fn bound_cell_never_tears_under_a_writer() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let a = BoundModel {
            base_ns: 1,
            growth_q48: 1,
            counter_ref: 1,
        };
        let b = BoundModel {
            base_ns: 2,
            growth_q48: 2,
            counter_ref: 2,
        };
        let cell = Arc::new(BoundCell::new(a));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (cell, stop) = (cell.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    cell.store(if i % 2 == 0 { &b } else { &a });
                    i += 1;
                }
            })
        };
        for _ in 0..200_000 {
            let m = cell.load();
            assert!(m == a || m == b || m == BoundModel::UNKNOWN, "torn {m:?}");
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("writer");
    }

    #[test]
    fn continuing_never_steps_back_and_covers_the_target() {
        let old = TimeConversion::new(1_654_000_000, 32, 1_000_000).expect("old");
        let target = Solution {
            conversion: TimeConversion::new(1_654_000_100, 32, 999_800).expect("target"),
            bound: BoundModel {
                base_ns: 400,
                growth_q48: 1000,
                counter_ref: 5_000_000_000,
            },
        };
        let at = 5_000_000_000u64;
        assert!(old.cycles_to_ns(at) > target.conversion.cycles_to_ns(at));
        let horizon = 2_600_000_000;
        let sol = continue_from(&old, &target, at, horizon, at).expect("continue");
        for dc in [0u64, 1, 1000, 1_000_000, horizon, 10 * horizon] {
            let c = at + dc;
            // No reading after the switch is below the old line at the same or an earlier counter.
            if dc <= 1_000_000 {
                assert!(
                    sol.conversion.cycles_to_ns(c) >= old.cycles_to_ns(c),
                    "dc {dc}"
                );
            }
            let gap = sol
                .conversion
                .cycles_to_ns(c)
                .abs_diff(target.conversion.cycles_to_ns(c));
            assert!(
                gap + target.bound.at(c) <= sol.bound.at(c),
                "dc {dc}: gap {gap}, target {} vs {}",
                target.bound.at(c),
                sol.bound.at(c)
            );
        }
        // A forward step is published as it is.
        let behind = TimeConversion::new(1_654_000_000, 32, 0).expect("behind");
        assert_eq!(continue_from(&behind, &target, at, horizon, at), Ok(target));
    }

    /// Every continuation, whatever the target's slope and side, is at least the margin above
    /// the old line over the whole window it must be written in, and its bound covers the
    /// target.
    #[test]
    fn a_continuation_stays_above_the_old_line_until_its_deadline() {
        let old = TimeConversion::new(1_654_000_000, 32, 1_000_000).expect("old");
        let now = 5_000_000_000u64;
        let bound = BoundModel {
            base_ns: 400,
            growth_q48: 1000,
            counter_ref: now,
        };
        // Below and flatter, below and steeper, 1 ns above (less than the margin), far above.
        let targets = [
            (1_653_990_000, 999_000),
            (1_654_010_000, 987_000),
            (1_654_000_000, 1_000_001),
            (1_654_000_000, 2_000_000),
        ];
        let horizon = 2_600_000_000;
        for (mult, zero) in targets {
            let target = Solution {
                conversion: TimeConversion::new(mult, 32, zero).expect("target"),
                bound,
            };
            assert!(continue_within(&old, &target, now, horizon).is_some());
            for (next, deadline) in continuations(&old, &target, now, horizon) {
                assert!(deadline > now, "{mult} {zero}");
                for c in (now..deadline).step_by(997_123).chain([deadline]) {
                    assert!(
                        next.conversion.cycles_to_ns(c)
                            >= old.cycles_to_ns(c) + CONTINUITY_MARGIN_NS,
                        "{mult} {zero}: below the old line at {c}"
                    );
                    let gap = next
                        .conversion
                        .cycles_to_ns(c)
                        .abs_diff(target.conversion.cycles_to_ns(c));
                    assert!(
                        gap + target.bound.at(c) <= next.bound.at(c),
                        "{mult} {zero} at {c}"
                    );
                }
            }
        }
    }

    /// A [`LineTarget`] that records each write, in order.
    #[derive(Default)]
    struct Recorded(core::cell::RefCell<Vec<Write>>);

    #[derive(Debug, PartialEq)]
    enum Write {
        Conversion(TimeConversion),
        Bound(BoundModel),
    }

    impl LineTarget for Recorded {
        fn publish_conversion(&self, conversion: &TimeConversion) {
            self.0.borrow_mut().push(Write::Conversion(*conversion));
        }

        fn store_bound(&self, bound: &BoundModel) {
            self.0.borrow_mut().push(Write::Bound(*bound));
        }
    }

    fn solution(zero: u64, base_ns: u64) -> Solution {
        Solution {
            conversion: TimeConversion::new(1 << 31, 31, zero).unwrap(),
            bound: BoundModel {
                base_ns,
                growth_q48: 1 << 20,
                counter_ref: 1_000,
            },
        }
    }

    #[test]
    fn a_switch_covers_both_bounds_before_the_new_line_is_written() {
        let (old, next) = (solution(0, 400), solution(5, 900));
        let mut publisher = LinePublisher::new(Some(old));
        let target = Recorded::default();
        let step = Step::Switch {
            line: next,
            before: u64::MAX,
        };
        assert!(publisher.take(&target, step, 2_000));
        let union = union_bound(&old.bound, &next.bound, 2_000);
        assert_eq!(
            *target.0.borrow(),
            [
                Write::Bound(union),
                Write::Conversion(next.conversion),
                Write::Bound(next.bound)
            ]
        );
        assert_eq!(publisher.current(), Some(next));
    }

    #[test]
    fn a_switch_found_past_its_deadline_restores_the_old_bound_and_keeps_the_line() {
        let (old, next) = (solution(0, 400), solution(5, 900));
        let mut publisher = LinePublisher::new(Some(old));
        let target = Recorded::default();
        let late = Step::Switch {
            line: next,
            before: 0,
        };
        assert!(!publisher.take(&target, late, 2_000));
        let union = union_bound(&old.bound, &next.bound, 2_000);
        assert_eq!(
            *target.0.borrow(),
            [Write::Bound(union), Write::Bound(old.bound)]
        );
        assert_eq!(publisher.current(), Some(old));
    }

    #[test]
    fn the_same_line_or_a_kept_one_stores_its_bound_alone() {
        let old = solution(0, 400);
        let mut publisher = LinePublisher::new(Some(old));
        let target = Recorded::default();
        let same = Solution {
            bound: solution(0, 300).bound,
            ..old
        };
        let step = Step::Switch {
            line: same,
            before: 0,
        };
        assert!(publisher.take(&target, step, 2_000));
        let kept = solution(0, 350).bound;
        assert!(publisher.take(&target, Step::Keep(Some(kept)), 2_000));
        assert!(!publisher.take(&target, Step::Keep(None), 2_000));
        assert_eq!(
            *target.0.borrow(),
            [Write::Bound(same.bound), Write::Bound(kept)]
        );
        assert_eq!(publisher.current(), Some(Solution { bound: kept, ..old }));
    }

    #[test]
    fn a_first_line_is_written_as_it_is() {
        let mut publisher = LinePublisher::new(None);
        let target = Recorded::default();
        assert!(!publisher.take(&target, Step::Keep(Some(solution(0, 1).bound)), 5));
        let first = solution(7, 500);
        let step = Step::Switch {
            line: first,
            before: u64::MAX,
        };
        assert!(publisher.take(&target, step, 5));
        assert_eq!(
            *target.0.borrow(),
            [
                Write::Conversion(first.conversion),
                Write::Bound(first.bound)
            ]
        );
    }
}
