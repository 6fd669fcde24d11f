//! The verdict on each load: its timestamp, converted as perf converts it, against the kernel
//! stamps taken before and after the `code_load` call.

use std::collections::HashMap;

use perfclock_core::TimeConversion;

use super::read_back::DumpLoad;
use super::{load_name, CODE};
use crate::page::Tolerance;
use crate::report::min_or_dash;

/// Problems printed in full.
const EXAMPLES: usize = 3;

/// perf's `tsc_to_perf_time` (`tools/perf/util/tsc.c`), in its own `u64` arithmetic: what
/// `perf inject --jit` computes for each arch timestamp from an extended TIME_CONV record.
fn perf_tsc_to_perf_time(conversion: &TimeConversion, cycles: u64) -> u64 {
    let cycles = if conversion.is_short() {
        conversion
            .cycles()
            .wrapping_add(cycles.wrapping_sub(conversion.cycles()) & conversion.mask())
    } else {
        cycles
    };
    let shift = u32::from(conversion.shift());
    let mult = u64::from(conversion.mult());
    let quot = cycles >> shift;
    let rem = cycles & ((1u64 << shift) - 1);
    conversion
        .zero()
        .wrapping_add(quot.wrapping_mul(mult))
        .wrapping_add(rem.wrapping_mul(mult) >> shift)
}

/// `conversion` with `time_zero` moved `skew_ns` later: the self-test's clock that runs ahead
/// of the kernel's (`TESTBED_SELFTEST_SKEW_NS`), which every load must then be caught by.
pub(super) fn skewed(conversion: &TimeConversion, skew_ns: u64) -> TimeConversion {
    let zero = conversion.zero().wrapping_add(skew_ns);
    let moved = if conversion.is_short() {
        TimeConversion::new_short(
            conversion.mult(),
            conversion.shift(),
            zero,
            conversion.cycles(),
            conversion.mask(),
        )
    } else {
        TimeConversion::new(conversion.mult(), conversion.shift(), zero)
    };
    // Only time_zero changed, and no value of it is invalid.
    moved.unwrap_or(*conversion)
}

/// The kernel stamps around one load: `t_a` before the `code_load` call, `t_b` after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub(super) index: u64,
    pub(super) t_a: u64,
    pub(super) t_b: u64,
}

/// Whose loads the dump should hold.
#[derive(Debug, Clone, Copy)]
pub(super) struct Writer {
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) addr: u64,
}

/// The judged loads of one dump.
#[derive(Debug, Clone)]
pub(super) struct LoadStats {
    pub(super) loads: u64,
    /// Converted timestamp outside its window by more than the tolerance.
    pub(super) violations: u64,
    /// Outside by at most the tolerance (arm64's 1 ns).
    pub(super) slips: u64,
    max_excess_ns: u64,
    /// Smallest distance from a load to the nearer kernel stamp, over loads inside.
    min_margin_ns: u64,
    /// Narrowest `t_b - t_a`.
    tightest_ns: u64,
    /// `cycles_to_ns` and perf's `u64` formula disagreed.
    perf_formula_mismatches: u64,
    /// Loads with an index no window has, a duplicate index, or another name, code, pid, tid
    /// or address than was registered.
    wrong_loads: u64,
    /// Windows whose load the dump lacks.
    missing_loads: u64,
    examples: Vec<String>,
}

impl LoadStats {
    fn new() -> LoadStats {
        LoadStats {
            loads: 0,
            violations: 0,
            slips: 0,
            max_excess_ns: 0,
            min_margin_ns: u64::MAX,
            tightest_ns: u64::MAX,
            perf_formula_mismatches: 0,
            wrong_loads: 0,
            missing_loads: 0,
            examples: Vec::new(),
        }
    }

    fn example(&mut self, text: String) {
        if self.examples.len() < EXAMPLES {
            self.examples.push(text);
        }
    }

    pub(super) fn ok(&self) -> bool {
        self.loads > 0
            && self.violations == 0
            && self.perf_formula_mismatches == 0
            && self.wrong_loads == 0
            && self.missing_loads == 0
    }

    pub(super) fn details(&self) -> String {
        let mut s = format!(
            "loads={} violations={} slips_1ns={} max_excess_ns={} min_margin_ns={} \
             tightest_window_ns={} perf_formula_mismatches={} wrong_loads={} missing_loads={}",
            self.loads,
            self.violations,
            self.slips,
            self.max_excess_ns,
            min_or_dash(self.min_margin_ns),
            min_or_dash(self.tightest_ns),
            self.perf_formula_mismatches,
            self.wrong_loads,
            self.missing_loads,
        );
        for e in &self.examples {
            s += &format!(" example=[{e}]");
        }
        s
    }
}

/// Judges every load of the dump against the window of its `code_index`.
pub(super) fn judge_loads(
    loads: &[DumpLoad],
    windows: &[Window],
    writer: Writer,
    conversion: &TimeConversion,
    tolerance: Tolerance,
) -> LoadStats {
    let mut stats = LoadStats::new();
    let mut unseen: HashMap<u64, Window> = windows.iter().map(|w| (w.index, *w)).collect();
    for load in loads {
        let Some(window) = unseen.remove(&load.index) else {
            stats.wrong_loads += 1;
            stats.example(format!("index={} unknown or repeated", load.index));
            continue;
        };
        let expected_name = load_name(load.index);
        if load.name != expected_name.as_bytes()
            || load.code != CODE
            || load.pid != writer.pid
            || load.tid != writer.tid
            || load.vma != writer.addr
            || load.code_addr != writer.addr
        {
            stats.wrong_loads += 1;
            stats.example(format!(
                "index={} name={:?} pid={} tid={} vma={:#x} code_addr={:#x} code_len={} \
                 expected name={expected_name:?} pid={} tid={} addr={:#x}",
                load.index,
                String::from_utf8_lossy(&load.name),
                load.pid,
                load.tid,
                load.vma,
                load.code_addr,
                load.code.len(),
                writer.pid,
                writer.tid,
                writer.addr,
            ));
        }
        stats.loads += 1;
        let ns = conversion.cycles_to_ns(load.timestamp);
        let perf_ns = perf_tsc_to_perf_time(conversion, load.timestamp);
        if ns != perf_ns {
            stats.perf_formula_mismatches += 1;
            stats.example(format!(
                "index={} counter={} cycles_to_ns={ns} perf_tsc_to_perf_time={perf_ns}",
                load.index, load.timestamp
            ));
        }
        let (t_a, t_b) = (window.t_a, window.t_b);
        stats.tightest_ns = stats.tightest_ns.min(t_b.saturating_sub(t_a));
        let excess = t_a.saturating_sub(ns).max(ns.saturating_sub(t_b));
        if excess > tolerance.ns {
            stats.violations += 1;
            stats.example(format!(
                "index={} t_a={t_a} load_ns={ns} t_b={t_b} counter={} excess_ns={excess}",
                load.index, load.timestamp
            ));
        } else if excess > 0 {
            stats.slips += 1;
        } else {
            stats.min_margin_ns = stats.min_margin_ns.min((ns - t_a).min(t_b - ns));
        }
        stats.max_excess_ns = stats.max_excess_ns.max(excess);
    }
    stats.missing_loads = unseen.len() as u64;
    if let Some(index) = unseen.keys().min() {
        stats.example(format!(
            "{} loads missing from the dump, first index={index}",
            unseen.len()
        ));
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXACT: Tolerance = Tolerance { ns: 0, cycles: 0 };
    const ARM64: Tolerance = Tolerance { ns: 1, cycles: 1 };
    const WRITER: Writer = Writer {
        pid: 7,
        tid: 8,
        addr: 0x1000,
    };

    /// 1 ns per cycle, time_zero 0: a counter value is its own ns.
    fn identity() -> TimeConversion {
        TimeConversion::new(1 << 20, 20, 0).unwrap()
    }

    fn dump_load(index: u64, timestamp: u64) -> DumpLoad {
        DumpLoad {
            timestamp,
            pid: WRITER.pid,
            tid: WRITER.tid,
            vma: WRITER.addr,
            code_addr: WRITER.addr,
            index,
            name: load_name(index).into_bytes(),
            code: CODE.to_vec(),
        }
    }

    fn window(index: u64, t_a: u64, t_b: u64) -> Window {
        Window { index, t_a, t_b }
    }

    #[test]
    fn perf_formula_matches_cycles_to_ns() {
        let conversions = [
            // Debian's x86_64 TCG guest.
            TimeConversion::new(827_183_298, 31, 123_456_789).unwrap(),
            // arm64 at 24 MHz: inexact mult, a floored (wrapped) time_zero, a 56-bit mask.
            TimeConversion::new_short(
                2_796_202_667,
                26,
                0u64.wrapping_sub(5_000),
                1 << 40,
                (1 << 56) - 1,
            )
            .unwrap(),
            // A 12-bit counter that wraps relative to time_cycles.
            TimeConversion::new_short(1 << 10, 10, 77, 4_000, 0xfff).unwrap(),
        ];
        for conversion in &conversions {
            for cycles in [0, 1, 4_095, 4_097, 1 << 40, (1 << 56) - 1, 1 << 62] {
                assert_eq!(
                    perf_tsc_to_perf_time(conversion, cycles),
                    conversion.cycles_to_ns(cycles),
                    "{conversion:?} at {cycles}"
                );
            }
        }
        // The short counter: raw 3 is 99 ticks after time_cycles 4000 modulo 4096.
        assert_eq!(perf_tsc_to_perf_time(&conversions[2], 3), 77 + 4_099);
    }

    #[test]
    fn skew_moves_only_time_zero() {
        let short = TimeConversion::new_short(87_381_333, 21, 5, 100, (1 << 56) - 1).unwrap();
        let late = skewed(&short, 1_000_000);
        assert_eq!(
            late.cycles_to_ns(12_345),
            short.cycles_to_ns(12_345) + 1_000_000
        );
        assert_eq!(
            (
                late.mult(),
                late.shift(),
                late.cycles(),
                late.mask(),
                late.is_short()
            ),
            (87_381_333, 21, 100, (1 << 56) - 1, true)
        );
        assert_eq!(skewed(&identity(), 0), identity());
        assert_eq!(skewed(&identity(), 7).cycles_to_ns(10), 17);
    }

    #[test]
    fn loads_inside_their_windows_pass_and_outside_fail() {
        let windows = [window(0, 100, 200), window(1, 200, 300)];
        let loads = [dump_load(0, 150), dump_load(1, 200)];
        let s = judge_loads(&loads, &windows, WRITER, &identity(), EXACT);
        assert!(s.ok(), "{}", s.details());
        assert_eq!((s.loads, s.min_margin_ns, s.tightest_ns), (2, 0, 100));

        let late = [dump_load(0, 150), dump_load(1, 301)];
        let s = judge_loads(&late, &windows, WRITER, &identity(), EXACT);
        assert!(!s.ok());
        assert_eq!((s.violations, s.max_excess_ns), (1, 1));
        let early = [dump_load(0, 99), dump_load(1, 250)];
        assert_eq!(
            judge_loads(&early, &windows, WRITER, &identity(), EXACT).violations,
            1
        );
    }

    #[test]
    fn arm64_tolerates_one_ns_and_counts_it() {
        let windows = [window(0, 100, 200)];
        let s = judge_loads(&[dump_load(0, 201)], &windows, WRITER, &identity(), ARM64);
        assert!(s.ok(), "{}", s.details());
        assert_eq!((s.violations, s.slips), (0, 1));
        let s = judge_loads(&[dump_load(0, 202)], &windows, WRITER, &identity(), ARM64);
        assert!(!s.ok());
    }

    #[test]
    fn the_conversion_decides_the_verdict() {
        // Counter 1000 at 1 ns per cycle lies in [900, 1100]; with time_zero 1 ms late it does not.
        let windows = [window(0, 900, 1_100)];
        let loads = [dump_load(0, 1_000)];
        assert!(judge_loads(&loads, &windows, WRITER, &identity(), EXACT).ok());
        let late = TimeConversion::new(1 << 20, 20, 1_000_000).unwrap();
        assert_eq!(
            judge_loads(&loads, &windows, WRITER, &late, EXACT).violations,
            1
        );
    }

    #[test]
    fn missing_repeated_and_foreign_loads_fail() {
        let windows = [window(0, 100, 200), window(1, 200, 300)];
        let s = judge_loads(&[dump_load(0, 150)], &windows, WRITER, &identity(), EXACT);
        assert_eq!(s.missing_loads, 1);
        assert!(!s.ok());

        let repeated = [dump_load(0, 150), dump_load(0, 160), dump_load(1, 250)];
        let s = judge_loads(&repeated, &windows, WRITER, &identity(), EXACT);
        assert_eq!((s.wrong_loads, s.missing_loads), (1, 0));

        let mut other_tid = dump_load(1, 250);
        other_tid.tid += 1;
        let mut other_name = dump_load(0, 150);
        other_name.name = load_name(5).into_bytes();
        let s = judge_loads(
            &[other_name, other_tid],
            &windows,
            WRITER,
            &identity(),
            EXACT,
        );
        assert_eq!((s.wrong_loads, s.violations), (2, 0));
        assert!(!s.ok());
        assert!(!judge_loads(&[], &[], WRITER, &identity(), EXACT).ok());
    }
}
