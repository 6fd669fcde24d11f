//! Measures each ground-truth kind on this machine: bracket width (cycles and ns), cost per
//! bracket, and where the kernel's stamp sits inside the bracket under the one affine line
//! through all brackets of all kinds.
//!
//! `cargo run --release -p perfclock-check --example bracket_widths [brackets-per-kind]`
use std::time::Instant;

use perfclock::error_chain as chain;
use perfclock_calib::{Bracket, GroundTruth};
use perfclock_testutil::bracket_line::{best_line, percentile, sorted, Line, Stamp};

/// The line with the most slack through `bs`.
fn line_through<'a>(bs: impl IntoIterator<Item = &'a Bracket>) -> Line {
    let stamps: Vec<Stamp> = bs
        .into_iter()
        .map(|b| Stamp {
            before: b.before,
            after: b.after,
            kernel_ns: b.kernel_ns,
        })
        .collect();
    best_line(&stamps)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5000);
    let mut gt = match GroundTruth::open_available() {
        Ok(gt) => gt,
        Err(e) => {
            eprintln!("cannot open ground truth: {}", chain(&e));
            std::process::exit(1);
        }
    };
    let kinds = gt.kinds();
    let mut all: Vec<Bracket> = Vec::new();
    let mut per_kind = Vec::new();
    // Interleave kinds in rounds so that all share one time span for the joint line.
    let rounds = 50;
    let mut cost = vec![0.0f64; kinds.len()];
    for _ in 0..rounds {
        for (i, &k) in kinds.iter().enumerate() {
            let start = Instant::now();
            let mut v = Vec::new();
            if let Err(e) = gt.collect(k, n / rounds, &mut v) {
                eprintln!("{k}: {}", chain(&e));
                std::process::exit(1);
            }
            cost[i] += start.elapsed().as_secs_f64();
            all.extend_from_slice(&v);
        }
    }
    all.sort_by_key(|b| b.before);
    let line = line_through(&all);
    println!(
        "{} brackets over {:.3} s; joint line: {:.6} ns/cycle ({:.1} MHz), slack {:.1} ns",
        all.len(),
        (all.last().unwrap().kernel_ns - all[0].kernel_ns) as f64 * 1e-9,
        line.slope,
        1e3 / line.slope,
        line.slack_ns()
    );
    println!(
        "{:<11} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "kind",
        "n",
        "w_min_c",
        "w_p50_c",
        "w_p99_c",
        "w_p50_ns",
        "cost_us",
        "lead_p1",
        "lead_p50",
        "lead_p99",
        "tail_p1",
        "tail_p50",
        "rel_p50"
    );
    for (i, &k) in kinds.iter().enumerate() {
        let bs: Vec<&Bracket> = all.iter().filter(|b| b.kind == k).collect();
        let widths = sorted(bs.iter().map(|b| b.width() as f64).collect());
        let pos = sorted(
            bs.iter()
                .map(|b| line.cycles_at(b.kernel_ns) - b.before as f64)
                .collect(),
        );
        let rel = sorted(
            bs.iter()
                .map(|b| (line.cycles_at(b.kernel_ns) - b.before as f64) / b.width() as f64)
                .collect(),
        );
        let after = sorted(
            bs.iter()
                .map(|b| b.after as f64 - line.cycles_at(b.kernel_ns))
                .collect(),
        );
        let own = line_through(bs.iter().copied());
        per_kind.push((k, own.slack_ns()));
        println!(
            "{:<11} {:>6} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.2} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8.3}",
            k.name(),
            bs.len(),
            widths[0],
            percentile(&widths, 0.5),
            percentile(&widths, 0.99),
            percentile(&widths, 0.5) * line.slope,
            cost[i] / bs.len() as f64 * 1e6,
            percentile(&pos, 0.01),
            percentile(&pos, 0.5),
            percentile(&pos, 0.99),
            percentile(&after, 0.01),
            percentile(&after, 0.5),
            percentile(&rel, 0.5),
        );
    }
    for (k, slack) in per_kind {
        println!("{k}: slack of its own best line {slack:.1} ns");
    }
    for k in kinds {
        let s = gt.stats(k);
        println!(
            "{k}: attempts {} accepted {} missing {} ambiguous {} lost {}",
            s.attempts, s.accepted, s.missing, s.ambiguous, s.lost
        );
    }
    println!("lead = stamp - before, tail = after - stamp, in cycles, under the joint line's mid offset;");
    println!(
        "they share one unknown shift of at most +-{:.0} cycles (half the slack)",
        line.slack_ns() / 2.0 / line.slope
    );
}
