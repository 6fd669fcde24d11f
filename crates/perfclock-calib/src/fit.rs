//! The feasible-band fit: which lines `ns = o + s * counter` agree with every bracket.
//!
//! A bracket says the kernel read its clock somewhere between two counter reads: with the
//! true clock `f` (linear here, up to a jitter of `noise_ns`),
//! `f(before) - noise <= kernel_ns <= f(after) + noise`. For a line `o + s * x` that is one
//! half-plane on each side in the `(s, o)` plane:
//!
//! ```text
//! lo_i(s) = kernel_ns_i - noise - s * after_i   <=  o  <=  kernel_ns_i + noise - s * before_i = hi_i(s)
//! ```
//!
//! The set of lines consistent with *every* bracket is the convex polygon between
//! `lo(s) = max_i lo_i(s)` (convex) and `hi(s) = min_i hi_i(s)` (concave). Its extent is the error
//! bound: at a counter value `c` the true clock lies in `[L(c), U(c)]`, the smallest and largest
//! value any feasible line takes there. Nothing here comes from residuals.
//!
//! Why this shrugs off preempted brackets: a preempted (wide) bracket is still true, it just
//! constrains nothing. Only the narrowest brackets bind, and which ones bind depends on where the
//! kernel's stamp sits inside each kind of bracket: a kind whose stamp sits early (small entry
//! cost) tightens `hi`, one whose stamp sits late (small exit cost) tightens `lo`, so mixing kinds
//! narrows the band to about `min entry cost + min exit cost`.
//!
//! Robustness: if the brackets contradict each other (the polygon is empty, e.g. a kernel clock
//! step inside the window), the binding constraint on each side is dropped and the fit retried, up
//! to a limit; on top of that `trim_per_side` binding constraints are always dropped, so a
//! single wrong record cannot make the band look narrower than it is. Dropping constraints only
//! ever widens the polygon, so both are on the safe side. Floating point is fine here: this runs
//! on the calibration thread, never in the read path; the published result is integer.

use crate::error::{CalibError, FitError};

/// One kernel-stamped bracket, reduced to what the fit needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Constraint {
    /// Counter read just before the action.
    pub before: u64,
    /// Counter read just after it.
    pub after: u64,
    /// The kernel's timestamp on the record the action produced (perf clock, ns).
    pub kernel_ns: u64,
}

/// Fit tuning.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitOptions {
    /// Jitter allowed between the kernel clock and a straight line, ns (each side).
    pub noise_ns: f64,
    /// Binding constraints always dropped on each side (guards against one wrong record).
    pub trim_per_side: usize,
    /// Contradicting constraints that may be dropped before the fit gives up, as a fraction of
    /// the constraints (at least 4 are always allowed).
    pub max_reject_fraction: f64,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            noise_ns: DEFAULT_NOISE_NS,
            trim_per_side: 1,
            max_reject_fraction: 0.02,
        }
    }
}

/// Default jitter allowance: covers how far the kernel clock strays from one line in the counter
/// (figures in docs/measurements.md).
pub const DEFAULT_NOISE_NS: f64 = 10.0;

/// A constraint in coordinates relative to the fit's reference point.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rel {
    xb: f64,
    xa: f64,
    y: f64,
}

/// The result: the polygon of feasible lines, with the reference point its coordinates use.
#[derive(Clone, Debug)]
pub struct Fit {
    /// Counter origin of the relative coordinates (the last bracket's `after`).
    pub counter_ref: u64,
    /// Nanosecond origin of the relative coordinates (the last bracket's `kernel_ns`).
    pub ns_ref: u64,
    /// Slope (ns per counter tick) with the most slack: the centre of the polygon's widest point.
    pub slope_best: f64,
    /// Smallest feasible slope (rounded outward).
    pub slope_min: f64,
    /// Largest feasible slope (rounded outward).
    pub slope_max: f64,
    /// Constraints the polygon was computed from.
    pub used: usize,
    /// Constraints dropped as contradicting or trimmed.
    pub rejected: usize,
    /// Earliest counter value among the brackets.
    pub first_counter: u64,
    /// Latest counter value among the brackets.
    pub last_counter: u64,
    noise_ns: f64,
    rel: Vec<Rel>,
}

const TERNARY_ITERATIONS: usize = 110;
const BISECT_ITERATIONS: usize = 64;

/// `a - b`, signed, as a float: the fit's relative coordinates.
pub fn signed_diff(a: u64, b: u64) -> f64 {
    (i128::from(a) - i128::from(b)) as f64
}

/// `lo(s)` and the index attaining it.
fn lo_at(rel: &[Rel], noise: f64, s: f64) -> (f64, usize) {
    let mut best = f64::NEG_INFINITY;
    let mut idx = 0;
    for (i, r) in rel.iter().enumerate() {
        let v = r.y - noise - s * r.xa;
        if v > best {
            best = v;
            idx = i;
        }
    }
    (best, idx)
}

/// `hi(s)` and the index attaining it.
fn hi_at(rel: &[Rel], noise: f64, s: f64) -> (f64, usize) {
    let mut best = f64::INFINITY;
    let mut idx = 0;
    for (i, r) in rel.iter().enumerate() {
        let v = r.y + noise - s * r.xb;
        if v < best {
            best = v;
            idx = i;
        }
    }
    (best, idx)
}

fn slack(rel: &[Rel], noise: f64, s: f64) -> f64 {
    hi_at(rel, noise, s).0 - lo_at(rel, noise, s).0
}

/// Maximum of a concave function on `[a, b]` by ternary search; returns the argument.
fn argmax_concave(mut a: f64, mut b: f64, f: impl Fn(f64) -> f64) -> f64 {
    for _ in 0..TERNARY_ITERATIONS {
        let m1 = a + (b - a) / 3.0;
        let m2 = b - (b - a) / 3.0;
        if f(m1) < f(m2) {
            a = m1;
        } else {
            b = m2;
        }
    }
    (a + b) / 2.0
}

/// Given `slack(inside) >= 0`, the point towards `direction` (+1 or -1) where the slack turns
/// negative, taken on the outside (so the reported slope range is never too small).
fn feasible_edge(rel: &[Rel], noise: f64, inside: f64, direction: f64) -> Result<f64, FitError> {
    let mut step = inside.abs().max(f64::MIN_POSITIVE) * 1e-12;
    let mut outside = inside + direction * step;
    let mut tries = 0;
    while slack(rel, noise, outside) >= 0.0 {
        step *= 2.0;
        outside = inside + direction * step;
        tries += 1;
        if tries > 80 || !outside.is_finite() {
            return Err(FitError::Underdetermined);
        }
    }
    let (mut good, mut bad) = (inside, outside);
    for _ in 0..BISECT_ITERATIONS {
        let mid = (good + bad) / 2.0;
        if slack(rel, noise, mid) >= 0.0 {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Ok(bad)
}

impl Fit {
    /// Fit the polygon of lines consistent with `constraints`.
    ///
    /// Brackets with `after < before` are ignored (not counted as usable).
    ///
    /// # Errors
    /// [`CalibError::Fit`] when there are too few brackets, they span no time, the timestamps do not
    /// increase, or they contradict each other beyond `max_reject_fraction`.
    ///
    /// # Example
    /// Brackets of a clock at 0.5 ns per tick whose stamps sit 100 ticks into 300-tick brackets:
    /// ```
    /// use perfclock_calib::fit::{Constraint, Fit, FitOptions};
    ///
    /// let brackets: Vec<Constraint> = (0..50u64)
    ///     .map(|i| {
    ///         let before = 1_000_000 + i * 10_000;
    ///         Constraint { before, after: before + 300, kernel_ns: (before + 100) / 2 }
    ///     })
    ///     .collect();
    /// let fit = Fit::new(&brackets, &FitOptions::default())?;
    /// assert!(fit.slope_min <= 0.5 && 0.5 <= fit.slope_max);
    /// # Ok::<(), perfclock_calib::CalibError>(())
    /// ```
    pub fn new(constraints: &[Constraint], options: &FitOptions) -> Result<Self, CalibError> {
        Ok(Self::new_reusing(constraints, options, &mut Vec::new())?)
    }

    /// As [`Fit::new`], building the fit's storage in `spare` (taken; left in place on error)
    /// instead of a new allocation: the refiner hands back [`Fit::into_spare`] after each fit,
    /// so with enough capacity its loop never calls the allocator (a raw `clone()` copy could find
    /// a malloc lock held).
    pub(crate) fn new_reusing(
        constraints: &[Constraint],
        options: &FitOptions,
        spare: &mut Vec<Rel>,
    ) -> Result<Self, FitError> {
        let mut rel = core::mem::take(spare);
        rel.clear();
        match Self::build(constraints, options, rel) {
            Ok(fit) => Ok(fit),
            Err((e, rel)) => {
                *spare = rel;
                Err(e)
            }
        }
    }

    /// The fit's storage, for the next [`Fit::new_reusing`].
    pub(crate) fn into_spare(self) -> Vec<Rel> {
        self.rel
    }

    /// [`Fit::new`] into the empty `rel`, which is given back with the error.
    fn build(
        constraints: &[Constraint],
        options: &FitOptions,
        mut rel: Vec<Rel>,
    ) -> Result<Self, (FitError, Vec<Rel>)> {
        let valid = || constraints.iter().filter(|c| c.after >= c.before);
        let usable = valid().count();
        if usable < 2 {
            return Err((FitError::TooFewBrackets { usable }, rel));
        }
        // max_by_key/min_by_key: the last maximum and the first minimum.
        let (Some(last), Some(first)) = (
            valid().max_by_key(|c| c.after),
            valid().min_by_key(|c| c.before),
        ) else {
            return Err((FitError::TooFewBrackets { usable: 0 }, rel));
        };
        let counter_ref = last.after;
        let ns_ref = last.kernel_ns;
        rel.extend(valid().map(|c| Rel {
            xb: signed_diff(c.before, counter_ref),
            xa: signed_diff(c.after, counter_ref),
            y: signed_diff(c.kernel_ns, ns_ref),
        }));
        let noise = options.noise_ns.max(0.0);

        // A first slope from the bracket midpoints of the earliest and latest brackets.
        let mid = |c: &Constraint| (c.before as f64 + c.after as f64) / 2.0;
        let dx = mid(last) - mid(first);
        let dy = signed_diff(last.kernel_ns, first.kernel_ns);
        if dx <= 0.0 {
            return Err((FitError::Underdetermined, rel));
        }
        if dy <= 0.0 {
            return Err((FitError::NotIncreasing, rel));
        }
        let s0 = dy / dx;

        let (best, rejected) = match best_slope(&mut rel, noise, s0, options) {
            Ok(found) => found,
            Err(e) => return Err((e, rel)),
        };
        if best <= 0.0 {
            return Err((FitError::NotIncreasing, rel));
        }
        let slope_min = match feasible_edge(&rel, noise, best, -1.0) {
            Ok(s) => s,
            Err(e) => return Err((e, rel)),
        };
        let slope_max = match feasible_edge(&rel, noise, best, 1.0) {
            Ok(s) => s,
            Err(e) => return Err((e, rel)),
        };
        Ok(Self {
            counter_ref,
            ns_ref,
            slope_best: best,
            slope_min,
            slope_max,
            used: rel.len(),
            rejected,
            first_counter: first.before,
            last_counter: last.after,
            noise_ns: noise,
            rel,
        })
    }

    /// Counter ticks between the earliest and the latest bracket.
    pub fn span_counter(&self) -> u64 {
        self.last_counter.saturating_sub(self.first_counter)
    }

    /// Jitter allowance the fit used, ns.
    pub fn noise_ns(&self) -> f64 {
        self.noise_ns
    }

    /// The range `[L, U]` of values feasible lines take at `counter`, in ns relative to
    /// [`Fit::ns_ref`].
    pub fn range_at(&self, counter: u64) -> (f64, f64) {
        let x = signed_diff(counter, self.counter_ref);
        let (a, b) = (self.slope_min, self.slope_max);
        let rel = &self.rel;
        let noise = self.noise_ns;
        // U: max over s of hi(s) + s x (concave); L: min over s of lo(s) + s x (convex).
        let s_u = argmax_concave(a, b, |s| hi_at(rel, noise, s).0 + s * x);
        let s_l = argmax_concave(a, b, |s| -(lo_at(rel, noise, s).0 + s * x));
        // Endpoints too, in case the optimum sits on them.
        let upper = [s_u, a, b]
            .iter()
            .map(|&s| hi_at(rel, noise, s).0 + s * x)
            .fold(f64::NEG_INFINITY, f64::max);
        let lower = [s_l, a, b]
            .iter()
            .map(|&s| lo_at(rel, noise, s).0 + s * x)
            .fold(f64::INFINITY, f64::min);
        (lower, upper)
    }

    /// For each bracket, how far (ns, positive = inside) it sits from contradicting the line
    /// `ns_ref + offset + slope * (c - counter_ref)`: diagnostics for tests and the doctor.
    pub fn min_margin(&self, constraints: &[Constraint], offset: f64, slope: f64) -> f64 {
        constraints
            .iter()
            .map(|c| {
                let y = signed_diff(c.kernel_ns, self.ns_ref);
                let at_b = offset + slope * signed_diff(c.before, self.counter_ref);
                let at_a = offset + slope * signed_diff(c.after, self.counter_ref);
                (y - at_b).min(at_a - y)
            })
            .fold(f64::INFINITY, f64::min)
    }
}

/// The best slope of `rel` (around the first slope `s0`), once the constraint that binds on each
/// side has been dropped `options.trim_per_side` times and until the rest is feasible (within
/// `options.max_reject_fraction`); also how many constraints were dropped. Dropped constraints
/// leave `rel`.
fn best_slope(
    rel: &mut Vec<Rel>,
    noise: f64,
    s0: f64,
    options: &FitOptions,
) -> Result<(f64, usize), FitError> {
    let max_reject = ((rel.len() as f64 * options.max_reject_fraction) as usize).max(4);
    let mut rejected = 0usize;
    let mut trims_left = options.trim_per_side;
    let best = loop {
        if rel.len() < 2 {
            return Err(FitError::Inconsistent { rejected });
        }
        let s = argmax_concave(s0 / 4.0, s0 * 4.0, |s| slack(rel, noise, s));
        let feasible = slack(rel, noise, s) >= 0.0;
        if feasible && trims_left == 0 {
            break s;
        }
        if feasible {
            trims_left -= 1;
        } else if rejected + 2 > max_reject {
            return Err(FitError::Inconsistent { rejected });
        }
        // Drop the binding constraint on each side (the latest one is kept as reference
        // only through counter_ref, which stays valid).
        let (_, i_lo) = lo_at(rel, noise, s);
        let (_, i_hi) = hi_at(rel, noise, s);
        let (a, b) = if i_lo > i_hi {
            (i_lo, i_hi)
        } else {
            (i_hi, i_lo)
        };
        rel.swap_remove(a);
        if a != b {
            rel.swap_remove(b);
        }
        rejected += if a != b { 2 } else { 1 };
    };
    Ok((best, rejected))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prune::{prune, prune_hull};

    /// Synthetic kernel clock: ns = zero + c * num / den, stamp at `entry` ticks after `before`,
    /// bracket `entry + exit` wide, plus occasional preemption.
    struct Synth {
        zero: u64,
        num: u64,
        den: u64,
    }

    impl Synth {
        fn ns(&self, c: u64) -> u64 {
            self.zero + (u128::from(c) * u128::from(self.num) / u128::from(self.den)) as u64
        }
        fn bracket(&self, before: u64, entry: u64, exit: u64) -> Constraint {
            let stamp = before + entry;
            Constraint {
                before,
                after: stamp + exit,
                kernel_ns: self.ns(stamp),
            }
        }
    }

    fn lcg(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *state >> 33
    }

    const CLOCK: Synth = Synth {
        zero: 1_000_000,
        num: 10,
        den: 29,
    };

    fn brackets(n: usize, spacing: u64, seed: u64, entry: u64, exit: u64) -> Vec<Constraint> {
        let mut st = seed;
        (0..n as u64)
            .map(|i| {
                let pre = lcg(&mut st) % 200;
                // One in 20 brackets preempted for ~30 us on one side.
                let preempt = if lcg(&mut st) % 20 == 0 { 90_000 } else { 0 };
                let (e, x) = if lcg(&mut st) % 2 == 0 {
                    (entry + pre + preempt, exit)
                } else {
                    (entry, exit + pre + preempt)
                };
                CLOCK.bracket(5_000_000_000 + i * spacing, e, x)
            })
            .collect()
    }

    #[test]
    fn truth_inside_the_band_and_band_near_min_costs() {
        let data = brackets(2000, 50_000, 7, 800, 1800);
        let fit = Fit::new(&data, &FitOptions::default()).expect("fit");
        let truth_slope = 10.0 / 29.0;
        assert!(
            fit.slope_min <= truth_slope && truth_slope <= fit.slope_max,
            "{fit:?}"
        );
        for probe in [fit.last_counter, fit.last_counter + 3_000_000_000] {
            let (l, u) = fit.range_at(probe);
            let t = signed_diff(CLOCK.ns(probe), fit.ns_ref);
            assert!(l <= t + 1.0 && t <= u + 1.0, "truth {t} outside [{l}, {u}]");
        }
        let (l, u) = fit.range_at(fit.last_counter);
        // Band ~ (min entry + min exit) / 2.9 + 2 * noise: about 900 + 20 ns, never much less.
        let width = u - l;
        assert!(width > 850.0 && width < 1100.0, "width {width}");
    }

    #[test]
    fn mixing_kinds_narrows_the_band() {
        // Kind A: stamp early (entry 300, exit 2500); kind B: stamp late (entry 2500, exit 300).
        let a = brackets(1000, 100_000, 1, 300, 2500);
        let b = brackets(1000, 100_000, 2, 2500, 300);
        let wa = {
            let f = Fit::new(&a, &FitOptions::default()).expect("fit a");
            let (l, u) = f.range_at(f.last_counter);
            u - l
        };
        let mut both = a.clone();
        both.extend_from_slice(&b);
        let f = Fit::new(&both, &FitOptions::default()).expect("fit both");
        let (l, u) = f.range_at(f.last_counter);
        assert!(u - l < wa / 2.0, "mixed {} vs single {wa}", u - l);
        let t = signed_diff(CLOCK.ns(f.last_counter), f.ns_ref);
        assert!(l <= t + 1.0 && t <= u + 1.0);
    }

    #[test]
    fn contradicting_record_is_dropped_not_trusted() {
        let mut data = brackets(500, 100_000, 3, 800, 1800);
        // A wrong record: its stamp claims 5 us later than the truth.
        data[250].kernel_ns += 5_000;
        let fit = Fit::new(&data, &FitOptions::default()).expect("fit");
        assert!(fit.rejected >= 1);
        let (l, u) = fit.range_at(fit.last_counter);
        let t = signed_diff(CLOCK.ns(fit.last_counter), fit.ns_ref);
        assert!(l <= t + 1.0 && t <= u + 1.0);
    }

    #[test]
    fn slope_uncertainty_grows_the_range_away_from_the_data() {
        let data = brackets(200, 100_000, 4, 800, 1800);
        let fit = Fit::new(&data, &FitOptions::default()).expect("fit");
        let (l0, u0) = fit.range_at(fit.last_counter);
        let (l1, u1) = fit.range_at(fit.last_counter + 30_000_000_000);
        assert!(u1 - l1 > (u0 - l0) * 2.0);
    }

    #[test]
    fn bad_input_gives_typed_errors() {
        assert_eq!(
            Fit::new(&[], &FitOptions::default()).unwrap_err(),
            FitError::TooFewBrackets { usable: 0 }.into()
        );
        let c = Constraint {
            before: 10,
            after: 5,
            kernel_ns: 1,
        };
        assert!(matches!(
            Fit::new_reusing(&[c, c], &FitOptions::default(), &mut Vec::new()),
            Err(FitError::TooFewBrackets { .. })
        ));
        let same = Constraint {
            before: 10,
            after: 20,
            kernel_ns: 100,
        };
        assert!(Fit::new(&[same, same], &FitOptions::default()).is_err());
        let backwards = [
            Constraint {
                before: 0,
                after: 10,
                kernel_ns: 1000,
            },
            Constraint {
                before: 1000,
                after: 1010,
                kernel_ns: 10,
            },
        ];
        assert_eq!(
            Fit::new(&backwards, &FitOptions::default()).unwrap_err(),
            FitError::NotIncreasing.into()
        );
    }

    #[test]
    fn pruning_keeps_the_band_honest() {
        let data = brackets(5000, 20_000, 5, 800, 1800);
        let full = Fit::new(&data, &FitOptions::default()).expect("fit");
        let pruned = prune(&data, full.slope_best, 32, 4);
        assert!(pruned.len() <= 32 * 8);
        let p = Fit::new(&pruned, &FitOptions::default()).expect("fit pruned");
        let probe = full.last_counter + 1_000_000_000;
        let (lf, uf) = full.range_at(probe);
        let (lp, up) = p.range_at(probe);
        // Same reference point (last bracket kept? not necessarily): compare absolute values.
        let shift = signed_diff(p.ns_ref, full.ns_ref);
        assert!(lp + shift <= lf + 1e-3 && up + shift >= uf - 1e-3);
        let t = signed_diff(CLOCK.ns(probe), full.ns_ref);
        assert!(lp + shift <= t + 1.0 && t <= up + shift + 1.0);
    }

    #[test]
    fn hull_pruning_is_lossless() {
        let data = brackets(5000, 20_000, 6, 800, 1800);
        let opts = FitOptions {
            trim_per_side: 0,
            ..FitOptions::default()
        };
        let full = Fit::new(&data, &opts).expect("fit");
        let pruned = prune_hull(&data, 1);
        assert!(pruned.len() < 200, "{}", pruned.len());
        let p = Fit::new(&pruned, &opts).expect("fit pruned");
        let probe = full.last_counter + 1_000_000_000;
        let shift = signed_diff(p.ns_ref, full.ns_ref);
        let (lf, uf) = full.range_at(probe);
        let (lp, up) = p.range_at(probe);
        assert!(
            (lp + shift - lf).abs() < 0.01 && (up + shift - uf).abs() < 0.01,
            "{lf} {uf} vs {} {}",
            lp + shift,
            up + shift
        );
        // Two layers keep the trimmed fit's band too.
        let trimmed = Fit::new(&data, &FitOptions::default()).expect("trimmed");
        let p2 = Fit::new(&prune_hull(&data, 2), &FitOptions::default()).expect("trimmed pruned");
        let (lt, ut) = trimmed.range_at(probe);
        let (l2, u2) = p2.range_at(probe);
        let shift2 = signed_diff(p2.ns_ref, trimmed.ns_ref);
        assert!(l2 + shift2 <= lt + 0.01 && u2 + shift2 >= ut - 0.01);
    }
}
