//! Checking a perf-domain clock against fresh kernel stamps.
//!
//! Each check brackets one kernel-stamped record (see `perfclock_calib::ground_truth`) with the clock's
//! own readings: `now_ns()` and a raw counter read converted with `cycles_to_ns`, both before
//! and after the action. A clock that is within its published error bound `b` of the kernel's
//! perf clock must satisfy `ns_before - b <= kernel_ns <= ns_after + b` for every record; any
//! record outside is a violation, reported with its distance.

use core::fmt;

use perfclock_calib::fit::{signed_diff, Constraint, Fit, FitOptions};
use perfclock_calib::{GroundTruth, RecordKind, Stamped};
use perfclock_core::ReadError;
use perfclock_os::thread::affinity::AffinityGuard;

use crate::error::VerifyError;
use crate::PerfTimeSource;

/// What [`verify_with`] checks.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Records per kind (spread over the CPUs when `alternate_cpus`).
    pub per_kind: usize,
    /// Kinds to use; empty: every kind this process can open.
    pub kinds: Vec<RecordKind>,
    /// Move the calling thread across every CPU it may run on, in turns, so that each CPU's
    /// counter is checked. The thread's affinity is restored afterwards.
    pub alternate_cpus: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            per_kind: 1000,
            kinds: Vec::new(),
            alternate_cpus: true,
        }
    }
}

/// Results for one kind on one CPU (the CPU the kernel wrote the record on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindReport {
    /// The record kind.
    pub kind: RecordKind,
    /// The CPU.
    pub cpu: u32,
    /// Records checked.
    pub events: u64,
    /// Records outside `[now_before - bound, now_after + bound]`.
    pub violations_now: u64,
    /// Records outside the same interval computed from `cycles_to_ns(read_counter())`.
    pub violations_counter: u64,
    /// The largest distance outside the interval, ns (0 without violations).
    pub worst_violation_ns: u64,
    /// The largest distance of a stamp outside `[now_before, now_after]` ignoring the bound,
    /// ns: a lower bound on the clock's actual error (0 when every stamp is inside).
    pub worst_unbounded_ns: u64,
    /// The narrowest `now_after - now_before`, ns.
    pub tightest_ns: u64,
    /// The median `now_after - now_before`, ns.
    pub median_ns: u64,
}

/// The outcome of [`verify`]. `Display` prints a table.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifyReport {
    /// The clock's `error_bound_ns()` at the start.
    pub bound_ns: u64,
    /// The clock's `error_bound_ns()` at the end (a calibrated clock refines while the check
    /// runs).
    pub bound_end_ns: u64,
    /// [`narrowest_half_band_ns`] of the check's own brackets (their counter reads), ns.
    pub narrowest_half_band_ns: Option<f64>,
    /// One row per (kind, cpu), sorted.
    pub rows: Vec<KindReport>,
    /// Brackets discarded because their record was missing, ambiguous or lost.
    pub discarded: u64,
    /// CPUs the thread was pinned to in turn (empty: not pinned).
    pub pinned_cpus: Vec<usize>,
}

impl VerifyReport {
    /// Records checked in all.
    pub fn events(&self) -> u64 {
        self.rows.iter().map(|r| r.events).sum()
    }

    /// Violations in all, by either reading.
    pub fn violations(&self) -> u64 {
        self.rows
            .iter()
            .map(|r| r.violations_now + r.violations_counter)
            .sum()
    }

    /// The largest violation in ns.
    pub fn worst_violation_ns(&self) -> u64 {
        self.rows
            .iter()
            .map(|r| r.worst_violation_ns)
            .max()
            .unwrap_or(0)
    }

    /// True when records were checked and none violated the bound.
    pub fn passed(&self) -> bool {
        self.events() > 0 && self.violations() == 0
    }

    /// Distinct CPUs the records were written on.
    pub fn cpus_seen(&self) -> Vec<u32> {
        let mut cpus: Vec<u32> = self.rows.iter().map(|r| r.cpu).collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} kernel stamps, error bound {} ns: {} violations (worst {} ns), {} discarded",
            self.events(),
            self.bound_ns,
            self.violations(),
            self.worst_violation_ns(),
            self.discarded
        )?;
        match self.narrowest_half_band_ns {
            Some(half_band) if self.bound_ns == 0 && self.bound_end_ns == 0 => writeln!(
                f,
                "the brackets' narrowest half band {half_band:.0} ns (the clock's bound is 0: \
                 it is not fitted to brackets)"
            )?,
            Some(half_band) => writeln!(
                f,
                "the brackets' narrowest half band {half_band:.0} ns; error bound at the start \
                 {} ns = {}, at the end {} ns = {}",
                self.bound_ns,
                Ratio(self.bound_ns, half_band),
                self.bound_end_ns,
                Ratio(self.bound_end_ns, half_band),
            )?,
            None => {}
        }
        writeln!(
            f,
            "{:<10} {:>3} {:>7} {:>9} {:>9} {:>9} {:>11} {:>11} {:>9}",
            "kind",
            "cpu",
            "events",
            "viol_now",
            "viol_cyc",
            "worst_ns",
            "outside_ns",
            "tightest_ns",
            "p50_ns"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:<10} {:>3} {:>7} {:>9} {:>9} {:>9} {:>11} {:>11} {:>9}",
                r.kind.name(),
                r.cpu,
                r.events,
                r.violations_now,
                r.violations_counter,
                r.worst_violation_ns,
                r.worst_unbounded_ns,
                r.tightest_ns,
                r.median_ns
            )?;
        }
        Ok(())
    }
}

/// How tightly `brackets` pin the kernel clock down: half of the smallest entry (the counter
/// read before the action to the stamp) plus the smallest exit (the stamp to the counter read
/// after it), in ns, on the slope that fits them best (the calibrator's fit with its default
/// noise allowance and trim); `None` when they cannot be fitted. The two minima may come from
/// different records (one kind's stamp sits early, another's late), and their sum does not
/// depend on where a line lies, only on its slope. No bound derived from these brackets can
/// honestly be narrower.
pub fn narrowest_half_band_ns(brackets: &[Constraint]) -> Option<f64> {
    let fit = Fit::new(brackets, &FitOptions::default()).ok()?;
    let at = |counter: u64| fit.slope_best * signed_diff(counter, fit.counter_ref);
    let (mut entry, mut exit) = (f64::INFINITY, f64::INFINITY);
    for c in brackets.iter().filter(|c| c.after >= c.before) {
        let stamp = signed_diff(c.kernel_ns, fit.ns_ref);
        entry = entry.min(stamp - at(c.before));
        exit = exit.min(at(c.after) - stamp);
    }
    Some((entry + exit) / 2.0)
}

/// `bound / half_band` as "1.07x" ("-" when the half band is not positive).
struct Ratio(u64, f64);

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.1 > 0.0 {
            write!(f, "{:.2}x", self.0 as f64 / self.1)
        } else {
            f.write_str("-")
        }
    }
}

/// Checks `clock` against `n` fresh kernel stamps of every available kind, alternating over
/// the CPUs the thread may run on. See [`verify_with`].
///
/// # Errors
/// [`VerifyError`] when ground truth cannot be opened or the clock fails to read.
pub fn verify(clock: &impl PerfTimeSource, n: usize) -> Result<VerifyReport, VerifyError> {
    verify_with(
        clock,
        &VerifyOptions {
            per_kind: n,
            ..VerifyOptions::default()
        },
    )
}

/// Brackets at most this many records of one kind before moving to the next CPU.
const BATCH: usize = 16;

#[derive(Clone, Copy)]
struct Reading {
    now: Result<u64, ReadError>,
    counter: Option<u64>,
}

#[derive(Default)]
struct Acc {
    events: u64,
    violations_now: u64,
    violations_counter: u64,
    worst: u64,
    worst_unbounded: u64,
    widths: Vec<u64>,
}

impl Acc {
    /// Counts one record stamped `kernel_ns`, bracketed by the clock's `now_ns()` readings
    /// `now` and its converted counter readings `counter` (each before, after).
    fn add(&mut self, kernel_ns: u64, now: Around, counter: Around, bound: u64) {
        let (before, after) = now;
        self.events += 1;
        self.widths.push(after.saturating_sub(before));
        if let Some(d) = outside(kernel_ns, before, after, 0) {
            self.worst_unbounded = self.worst_unbounded.max(d);
        }
        if let Some(d) = outside(kernel_ns, before, after, bound) {
            self.violations_now += 1;
            self.worst = self.worst.max(d);
        }
        if let Some(d) = outside(kernel_ns, counter.0, counter.1, bound) {
            self.violations_counter += 1;
            self.worst = self.worst.max(d);
        }
    }

    fn into_report(mut self, kind: RecordKind, cpu: u32) -> KindReport {
        self.widths.sort_unstable();
        KindReport {
            kind,
            cpu,
            events: self.events,
            violations_now: self.violations_now,
            violations_counter: self.violations_counter,
            worst_violation_ns: self.worst,
            worst_unbounded_ns: self.worst_unbounded,
            tightest_ns: self.widths.first().copied().unwrap_or(0),
            median_ns: self.widths.get(self.widths.len() / 2).copied().unwrap_or(0),
        }
    }
}

/// The accumulator of `key` (record kind, CPU), added if it is new with room for `capacity`
/// records.
fn acc_for(
    accs: &mut Vec<((RecordKind, u32), Acc)>,
    key: (RecordKind, u32),
    capacity: usize,
) -> &mut Acc {
    let idx = match accs.iter().position(|(k, _)| *k == key) {
        Some(idx) => idx,
        None => {
            let acc = Acc {
                widths: Vec::with_capacity(capacity),
                ..Acc::default()
            };
            accs.push((key, acc));
            accs.len() - 1
        }
    };
    &mut accs[idx].1
}

/// Two readings around one record, before and after, in nanoseconds.
type Around = (u64, u64);

/// The clock's readings around one record, as `((now_ns before, after), (counter converted
/// before, after))`.
fn readings_ns(
    clock: &impl PerfTimeSource,
    before: &Reading,
    after: &Reading,
) -> Result<(Around, Around), VerifyError> {
    let now_before = before.now.map_err(VerifyError::Clock)?;
    let now_after = after.now.map_err(VerifyError::Clock)?;
    let c_before = before.counter.ok_or(VerifyError::NoCounter)?;
    let c_after = after.counter.ok_or(VerifyError::NoCounter)?;
    let cb = clock.cycles_to_ns(c_before).map_err(VerifyError::Clock)?;
    let ca = clock.cycles_to_ns(c_after).map_err(VerifyError::Clock)?;
    Ok(((now_before, now_after), (cb, ca)))
}

/// Distance of `k` outside `[lo - bound, hi + bound]`, or None inside.
fn outside(k: u64, lo: u64, hi: u64, bound: u64) -> Option<u64> {
    let lo = lo.saturating_sub(bound);
    let hi = hi.saturating_add(bound);
    if k < lo {
        Some(lo - k)
    } else if k > hi {
        Some(k - hi)
    } else {
        None
    }
}

/// Checks `clock` against fresh kernel stamps. Each check brackets one kernel-stamped record with
/// the clock's own readings (`now_ns()` and a raw counter read converted with `cycles_to_ns`, both
/// before and after the action). A clock within its published error bound `b` satisfies
/// `ns_before - b <= kernel_ns <= ns_after + b` for every record; a record outside is a violation,
/// reported with its distance.
///
/// # Errors
/// [`VerifyError`] when ground truth cannot be opened, a bracket fails for good, or the clock
/// fails to read.
pub fn verify_with(
    clock: &impl PerfTimeSource,
    options: &VerifyOptions,
) -> Result<VerifyReport, VerifyError> {
    let mut gt = if options.kinds.is_empty() {
        GroundTruth::open_available()
    } else {
        GroundTruth::open(&options.kinds)
    }
    .map_err(VerifyError::Open)?;
    let kinds = gt.kinds();
    let bound = clock.error_bound_ns();
    let pin = if options.alternate_cpus {
        AffinityGuard::save().ok()
    } else {
        None
    };
    let cores: Vec<core_affinity::CoreId> = match &pin {
        Some(_) => core_affinity::get_core_ids().unwrap_or_default(),
        None => Vec::new(),
    };
    let mut accs: Vec<((RecordKind, u32), Acc)> = Vec::new();
    // Sized up front, as each row's widths are: the check's page-fault event samples every
    // fault of this thread, and a vector growing by copying faults in hundreds of pages at once,
    // a burst the kernel may throttle the event for (the following brackets then find no
    // record). Pages touched one at a time as the vectors fill are drained between brackets.
    let expected = options.per_kind.saturating_mul(kinds.len());
    let mut brackets: Vec<Constraint> = Vec::with_capacity(expected);
    let mut discarded = 0u64;
    let mut done = vec![0usize; kinds.len()];
    let mut round = 0usize;
    let mut read = || Reading {
        now: clock.now_ns(),
        counter: clock.read_counter(),
    };
    while done.iter().any(|d| *d < options.per_kind) {
        if !cores.is_empty() {
            core_affinity::set_for_current(cores[round % cores.len()]);
        }
        round += 1;
        for (i, &kind) in kinds.iter().enumerate() {
            let todo = (options.per_kind - done[i]).min(BATCH);
            for _ in 0..todo {
                let s = next_bracket(&mut gt, kind, &mut read, &mut discarded)?;
                let (now, counter) = readings_ns(clock, &s.before, &s.after)?;
                if let (Some(before), Some(after)) = (s.before.counter, s.after.counter) {
                    brackets.push(Constraint {
                        before,
                        after,
                        kernel_ns: s.kernel_ns,
                    });
                }
                acc_for(&mut accs, (kind, s.cpu), options.per_kind).add(
                    s.kernel_ns,
                    now,
                    counter,
                    bound,
                );
            }
            done[i] += todo;
        }
    }
    let pinned_cpus = cores.iter().map(|c| c.id).collect();
    drop(pin);
    let mut rows: Vec<KindReport> = accs
        .into_iter()
        .map(|((kind, cpu), acc)| acc.into_report(kind, cpu))
        .collect();
    rows.sort_by_key(|r| (r.kind, r.cpu));
    Ok(VerifyReport {
        bound_ns: bound,
        bound_end_ns: clock.error_bound_ns(),
        narrowest_half_band_ns: narrowest_half_band_ns(&brackets),
        rows,
        discarded,
        pinned_cpus,
    })
}

/// The next bracket of `kind`; a transient miss (no record, two records, lost records) is
/// counted in `discarded` and tried again, up to the calibration's bound in a row.
fn next_bracket<T>(
    gt: &mut GroundTruth,
    kind: RecordKind,
    read: &mut impl FnMut() -> T,
    discarded: &mut u64,
) -> Result<Stamped<T>, VerifyError> {
    let mut discards_in_a_row = 0;
    loop {
        match gt.bracket_with(kind, read) {
            Ok(s) => return Ok(s),
            Err(e) if e.is_transient() => {
                *discarded += 1;
                discards_in_a_row += 1;
                if discards_in_a_row >= perfclock_calib::MAX_CONSECUTIVE_DISCARDS {
                    return Err(VerifyError::Bracket(e));
                }
            }
            Err(e) => return Err(VerifyError::Bracket(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_measures_distance_beyond_the_bound() {
        assert_eq!(outside(100, 90, 110, 0), None);
        assert_eq!(outside(89, 90, 110, 0), Some(1));
        assert_eq!(outside(89, 90, 110, 1), None);
        assert_eq!(outside(115, 90, 110, 2), Some(3));
        assert_eq!(outside(0, 5, 10, 100), None);
        assert_eq!(outside(u64::MAX, 5, u64::MAX - 1, 10), None);
    }

    #[test]
    fn the_narrowest_half_band_takes_entry_and_exit_from_different_records() {
        // A clock of 0.5 ns per tick; brackets 1,000 ticks wide, stamps early and late in turn.
        let brackets: Vec<Constraint> = (0..200u64)
            .map(|i| {
                let before = 1_000_000 + i * 100_000;
                let stamp = before + if i % 2 == 0 { 200 } else { 800 };
                Constraint {
                    before,
                    after: before + 1_000,
                    kernel_ns: stamp / 2,
                }
            })
            .collect();
        let half_band = narrowest_half_band_ns(&brackets).expect("a fit");
        // Entry 100 ns from the early stamps, exit 100 ns from the late ones (each 400 ns on
        // the other side).
        assert!((half_band - 100.0).abs() < 1.0, "{half_band}");
        assert_eq!(narrowest_half_band_ns(&brackets[..1]), None);
    }
}
