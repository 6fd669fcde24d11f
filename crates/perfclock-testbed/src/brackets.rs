//! Kernel-stamped brackets on both CPUs at once.
//!
//! A thread pinned to each CPU makes the kernel write records (COMM from `prctl`, page-fault
//! samples, MMAP2 of an executable mapping; `perfclock_calib::GroundTruth` does the actions and
//! the matching) and reads the clock just before and just after each action, three ways:
//!
//! - `unordered`: the core's `PageReader` on the thread's own event page with `read_counter`;
//! - `ordered`: the same with `read_counter_ordered`;
//! - `facade`: the process-wide `perfclock::now_ns()`.
//!
//! Each record's kernel timestamp must lie between the two readings (within [`Tolerance`]), and
//! for the core reads `ns_to_cycles(kernel timestamp)` must lie between the two counter values.

use core_affinity::CoreId;
use perfclock_calib::{GroundTruth, RecordKind, Stamped};
use perfclock_core::{counter, PageReader, ReadError, Reading};
use perfclock_os::{EventAttr, PerfEvent};

use crate::page::Tolerance;
use crate::report::{chain, min_or_dash, Judged, Report};
use crate::Budget;

/// Discarded brackets in a row (no record, two records, lost records) after which a worker gives
/// up; `GroundTruth::collect` uses the same bound.
const MAX_CONSECUTIVE_DISCARDS: u32 = 64;
/// Violations printed in full, per group.
const EXAMPLES: usize = 3;

/// How the readings around an action were taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    Unordered,
    Ordered,
    Facade,
}

impl Read {
    fn name(self) -> &'static str {
        match self {
            Read::Unordered => "unordered",
            Read::Ordered => "ordered",
            Read::Facade => "facade",
        }
    }
}

/// Judged brackets of one group (one CPU, one way of reading).
#[derive(Debug, Clone)]
pub(crate) struct Stats {
    pub events: u64,
    /// Records per kind, in `RecordKind::ALL` order.
    pub per_kind: [u64; 3],
    /// Kernel stamp outside the readings by more than the tolerance.
    pub violations: u64,
    /// Outside by at most the tolerance (arm64's 1 ns).
    pub slips: u64,
    pub max_excess_ns: u64,
    /// Narrowest `after - before`, ns.
    pub tightest_ns: u64,
    /// Smallest distance from the stamp to the nearer reading, over brackets that hold it.
    pub min_margin_ns: u64,
    widths: Vec<u64>,
    pub inverse_checked: u64,
    pub inverse_violations: u64,
    pub inverse_slips: u64,
    /// Records the kernel wrote on another CPU than the one the thread was pinned to.
    pub wrong_cpu: u64,
    pub discards: u64,
    /// Why the group stopped early, if it did.
    pub error: Option<String>,
    examples: Vec<String>,
}

impl Stats {
    /// What these brackets add to the run's totals.
    pub(crate) fn judged(&self) -> Judged {
        Judged {
            events: self.events,
            violations: self.violations,
            slips: self.slips,
            tightest_ns: self.tightest_ns,
        }
    }

    pub(crate) fn new() -> Stats {
        Stats {
            events: 0,
            per_kind: [0; 3],
            violations: 0,
            slips: 0,
            max_excess_ns: 0,
            tightest_ns: u64::MAX,
            min_margin_ns: u64::MAX,
            widths: Vec::new(),
            inverse_checked: 0,
            inverse_violations: 0,
            inverse_slips: 0,
            wrong_cpu: 0,
            discards: 0,
            error: None,
            examples: Vec::new(),
        }
    }

    /// Judges one bracket: `stamp` holds the readings in ns, `cycles` the counter values and
    /// conversion when the readings came from raw core reads.
    pub(crate) fn judge(
        &mut self,
        stamp: &Stamped<u64>,
        cycles: Option<(&Reading, &Reading)>,
        tolerance: Tolerance,
        expected_cpu: Option<u32>,
    ) {
        let (before, after, kernel) = (stamp.before, stamp.after, stamp.kernel_ns);
        self.events += 1;
        if let Some(i) = RecordKind::ALL.iter().position(|k| *k == stamp.kind) {
            self.per_kind[i] += 1;
        }
        let excess = before
            .saturating_sub(kernel)
            .max(kernel.saturating_sub(after));
        if excess > tolerance.ns {
            self.violations += 1;
            self.example(format_args!(
                "{} before={before} kernel={kernel} after={after} excess_ns={excess}",
                stamp.kind
            ));
        } else if excess > 0 {
            self.slips += 1;
        } else {
            self.min_margin_ns = self
                .min_margin_ns
                .min((kernel - before).min(after - kernel));
        }
        self.max_excess_ns = self.max_excess_ns.max(excess);
        let width = after.saturating_sub(before);
        self.tightest_ns = self.tightest_ns.min(width);
        self.widths.push(width);
        if let Some((b, a)) = cycles {
            self.inverse_checked += 1;
            let at = b.conversion.ns_to_cycles(kernel);
            if at > a.cycles.saturating_add(tolerance.cycles)
                || at.saturating_add(tolerance.cycles) < b.cycles
            {
                self.inverse_violations += 1;
                self.example(format_args!(
                    "{} ns_to_cycles({kernel})={at} outside [{}, {}]",
                    stamp.kind, b.cycles, a.cycles
                ));
            } else if at > a.cycles || at < b.cycles {
                self.inverse_slips += 1;
            }
        }
        if expected_cpu.is_some_and(|cpu| cpu != stamp.cpu) {
            self.wrong_cpu += 1;
        }
    }

    fn example(&mut self, args: std::fmt::Arguments<'_>) {
        if self.examples.len() < EXAMPLES {
            self.examples.push(args.to_string());
        }
    }

    pub(crate) fn ok(&self) -> bool {
        self.error.is_none()
            && self.violations == 0
            && self.inverse_violations == 0
            && self.wrong_cpu == 0
    }

    fn median_ns(&self) -> u64 {
        let mut w = self.widths.clone();
        w.sort_unstable();
        w.get(w.len() / 2).copied().unwrap_or(0)
    }

    /// `key=value` details for a PASS/FAIL line.
    pub(crate) fn details(&self) -> String {
        let mut s = format!(
            "events={} comm={} page-fault={} mmap2={} violations={} slips_1ns={} \
             max_excess_ns={} tightest_ns={} median_ns={} min_margin_ns={} discards={}",
            self.events,
            self.per_kind[0],
            self.per_kind[1],
            self.per_kind[2],
            self.violations,
            self.slips,
            self.max_excess_ns,
            min_or_dash(self.tightest_ns),
            self.median_ns(),
            min_or_dash(self.min_margin_ns),
            self.discards,
        );
        if self.inverse_checked > 0 {
            s += &format!(
                " ns_to_cycles_checked={} ns_to_cycles_violations={} ns_to_cycles_slips={}",
                self.inverse_checked, self.inverse_violations, self.inverse_slips
            );
        }
        s += &format!(" wrong_cpu={}", self.wrong_cpu);
        if let Some(e) = &self.error {
            s += &format!(" error={e:?}");
        }
        for e in &self.examples {
            s += &format!(" example=[{e}]");
        }
        s
    }
}

/// The two CPUs to pin to, or a FAIL when the guest has fewer.
pub(crate) fn two_cpus(report: &mut Report) -> Option<[CoreId; 2]> {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    match ids.as_slice() {
        [a, b, ..] => Some([*a, *b]),
        _ => {
            report.fail(
                "cpus",
                format_args!("need two CPUs to pin to, core_affinity found {}", ids.len()),
            );
            None
        }
    }
}

/// `TESTBED_SELFTEST_SKEW_NS`: added to every first reading, to prove that the checks and the
/// script catch a clock that runs ahead of the kernel's. 0 (off) unless set.
pub(crate) fn selftest_skew_ns() -> u64 {
    static SKEW: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SKEW.get_or_init(|| {
        std::env::var("TESTBED_SELFTEST_SKEW_NS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

/// Collects `n` brackets of the calling thread, cycling through the record kinds.
///
/// `read` returns the readings in ns plus, for core reads, the full `Reading`.
pub(crate) fn collect(
    truth: &mut GroundTruth,
    n: u64,
    tolerance: Tolerance,
    expected_cpu: Option<u32>,
    mut read: impl FnMut() -> Result<(u64, Option<Reading>), ReadError>,
) -> Stats {
    let mut stats = Stats::new();
    let mut discards_in_a_row = 0;
    let mut i = 0usize;
    while stats.events < n {
        let kind = RecordKind::ALL[i % RecordKind::ALL.len()];
        i += 1;
        let stamped = match truth.bracket_with(kind, &mut read) {
            Ok(s) => s,
            Err(e) if e.is_transient() => {
                stats.discards += 1;
                discards_in_a_row += 1;
                if discards_in_a_row >= MAX_CONSECUTIVE_DISCARDS {
                    stats.error = Some(format!(
                        "{discards_in_a_row} discards in a row, last: {}",
                        chain(&e)
                    ));
                    break;
                }
                continue;
            }
            Err(e) => {
                stats.error = Some(format!("{kind}: {}", chain(&e)));
                break;
            }
        };
        discards_in_a_row = 0;
        let (before, after) = match (stamped.before, stamped.after) {
            (Ok(b), Ok(a)) => (b, a),
            (Err(e), _) | (_, Err(e)) => {
                stats.error = Some(format!("clock read failed: {}", chain(&e)));
                break;
            }
        };
        let ns = Stamped {
            kind,
            before: before.0.saturating_add(selftest_skew_ns()),
            after: after.0,
            kernel_ns: stamped.kernel_ns,
            cpu: stamped.cpu,
        };
        let cycles = before.1.as_ref().zip(after.1.as_ref());
        stats.judge(&ns, cycles, tolerance, expected_cpu);
    }
    stats
}

/// What one pinned worker measured.
struct Worker {
    cpu: usize,
    groups: Vec<(Read, Stats)>,
    error: Option<String>,
}

fn worker(cpu: CoreId, budget: &Budget, tolerance: Tolerance) -> Worker {
    let mut out = Worker {
        cpu: cpu.id,
        groups: Vec::new(),
        error: None,
    };
    if !core_affinity::set_for_current(cpu) {
        out.error = Some(format!("could not pin to CPU {}", cpu.id));
        return out;
    }
    let mut truth = match GroundTruth::open(&RecordKind::ALL) {
        Ok(t) => t,
        Err(e) => {
            out.error = Some(format!("GroundTruth::open: {}", chain(&e)));
            return out;
        }
    };
    // This thread's own event page: the kernel refreshes it whenever the thread is scheduled in
    // on this CPU, so the core reads below use exactly what the kernel publishes here.
    let mapping = match PerfEvent::open(&EventAttr::dummy()).and_then(|e| e.map_page_only()) {
        Ok(m) => m,
        Err(e) => {
            out.error = Some(format!("dummy event page: {e}"));
            return out;
        }
    };
    // SAFETY: a live read-only perf page written only by the kernel; `mapping` outlives every
    // use of the reader (both live until the end of this function).
    let reader = unsafe { PageReader::new(mapping.page().cast()) };
    let expected = u32::try_from(cpu.id).ok();
    let core_read = |ordered: bool| {
        move || {
            let r = reader.read_with(|| {
                if ordered {
                    counter::read_counter_ordered().unwrap_or(0)
                } else {
                    counter::read_counter().unwrap_or(0)
                }
            })?;
            Ok((r.ns(), Some(r)))
        }
    };
    let half = budget.core_ops / 2;
    let s = collect(&mut truth, half, tolerance, expected, core_read(false));
    out.groups.push((Read::Unordered, s));
    let s = collect(
        &mut truth,
        budget.core_ops - half,
        tolerance,
        expected,
        core_read(true),
    );
    out.groups.push((Read::Ordered, s));
    // `perfclock::now_ns()` returns 0 only when no clock can be had.
    let facade = || match perfclock::now_ns() {
        0 => Err(ReadError::TimeZeroUnavailable { capabilities: 0 }),
        ns => Ok((ns, None)),
    };
    let s = collect(&mut truth, budget.facade_ops, tolerance, expected, facade);
    out.groups.push((Read::Facade, s));
    out
}

/// Runs a worker on each CPU at the same time and reports each group.
pub(crate) fn run(report: &mut Report, budget: &Budget, tolerance: Tolerance, cpus: [CoreId; 2]) {
    let start = std::time::Instant::now();
    let workers: Vec<Worker> = std::thread::scope(|scope| {
        let handles: Vec<_> = cpus
            .iter()
            .map(|&cpu| scope.spawn(move || worker(cpu, budget, tolerance)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| Worker {
                    cpu: usize::MAX,
                    groups: Vec::new(),
                    error: Some("worker panicked".to_owned()),
                })
            })
            .collect()
    });
    for (index, w) in workers.iter().enumerate() {
        if let Some(e) = &w.error {
            report.fail("brackets", format_args!("cpu={} error={e:?}", w.cpu));
        }
        for (read, stats) in &w.groups {
            let facade_cpu = (*read == Read::Facade).then_some(index);
            report.add_events(stats.judged(), facade_cpu);
            report.check(
                stats.ok(),
                "brackets",
                format_args!("cpu={} read={} {}", w.cpu, read.name(), stats.details()),
            );
        }
    }
    report.info(format_args!(
        "brackets took {:.1} s of guest time (TCG: says nothing about speed)",
        start.elapsed().as_secs_f64()
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::TimeConversion;

    const EXACT: Tolerance = Tolerance { ns: 0, cycles: 0 };
    const ARM64: Tolerance = Tolerance { ns: 1, cycles: 1 };

    fn stamp(before: u64, kernel_ns: u64, after: u64) -> Stamped<u64> {
        Stamped {
            kind: RecordKind::Comm,
            before,
            after,
            kernel_ns,
            cpu: 1,
        }
    }

    #[test]
    fn a_stamp_inside_passes_and_outside_fails() {
        let mut s = Stats::new();
        s.judge(&stamp(100, 150, 200), None, EXACT, Some(1));
        assert!(s.ok());
        assert_eq!((s.events, s.tightest_ns, s.min_margin_ns), (1, 100, 50));
        s.judge(&stamp(100, 99, 200), None, EXACT, Some(1));
        assert!(!s.ok());
        assert_eq!((s.violations, s.max_excess_ns), (1, 1));
    }

    #[test]
    fn arm64_tolerates_one_ns_and_counts_it() {
        let mut s = Stats::new();
        s.judge(&stamp(100, 99, 200), None, ARM64, None);
        assert!(s.ok());
        assert_eq!((s.violations, s.slips), (0, 1));
        s.judge(&stamp(100, 202, 200), None, ARM64, None);
        assert!(!s.ok());
    }

    #[test]
    fn a_record_from_another_cpu_fails() {
        let mut s = Stats::new();
        s.judge(&stamp(100, 150, 200), None, EXACT, Some(0));
        assert_eq!(s.wrong_cpu, 1);
        assert!(!s.ok());
    }

    #[test]
    fn ns_to_cycles_outside_the_counter_reads_fails() {
        let conversion = TimeConversion::new(1 << 20, 20, 0).unwrap(); // 1 ns per cycle
        let reading = |cycles| Reading { cycles, conversion };
        let (b, a) = (reading(100), reading(200));
        let mut s = Stats::new();
        s.judge(&stamp(100, 150, 200), Some((&b, &a)), EXACT, None);
        assert!(s.ok());
        // The ns bracket holds, but the counter values say the record came later.
        let (b, a) = (reading(160), reading(200));
        s.judge(&stamp(100, 150, 200), Some((&b, &a)), EXACT, None);
        assert_eq!(s.inverse_violations, 1);
        assert!(!s.ok());
    }
}
