//! The calibrated clock's figures on this machine, run by hand:
//!
//! - `startup`: time to the first calibration and the first bound over 11 starts, and how a
//!   bound without refinement grows (`PERFCLOCK_INIT_MS` overrides the init budget).
//! - `long-run`: verifies >= 100,000 fresh records right after start and again after
//!   `PERFCLOCK_CALIB_SECS` (default 60) seconds, printing the bound and the thread's CPU share.
//! - `band`: collects interleaved brackets for `PERFCLOCK_BAND_SECS` (default 10), fits them
//!   with several settings, and prints the band half-width at the end of the data.
//!
//! `cargo run --release -p perfclock-check --example calibration_figures -- startup|long-run|band`

use std::time::{Duration, Instant};

use perfclock::error_chain as chain;
use perfclock_calib::fit::{signed_diff, Constraint, Fit, FitOptions};
use perfclock_calib::published::solve;
use perfclock_calib::{CalibratedClock, CalibrationOptions, GroundTruth, RecordKind};
use perfclock_check::verify;
use perfclock_core::counter;

fn main() {
    let result = match std::env::args().nth(1).as_deref() {
        Some("startup") => startup(),
        Some("long-run") => long_run(),
        Some("band") => band(),
        _ => Err("usage: calibration_figures startup|long-run|band".to_owned()),
    };
    if let Err(message) = result {
        eprintln!("{message}");
        std::process::exit(1);
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

fn startup() -> Result<(), String> {
    let (mut times, mut bounds) = (Vec::new(), Vec::new());
    let mut options = CalibrationOptions::default();
    if let Ok(ms) = std::env::var("PERFCLOCK_INIT_MS") {
        let ms = ms.parse().map_err(|_| "PERFCLOCK_INIT_MS: not a number")?;
        options = options.init_budget(Duration::from_millis(ms));
    }
    for _ in 0..11 {
        let t = Instant::now();
        let clock = CalibratedClock::start(options.clone()).map_err(|e| chain(&e))?;
        times.push(t.elapsed().as_micros() as u64);
        bounds.push(clock.error_bound_ns());
    }
    // Without refinement the bound grows with the time since calibration.
    let once = CalibratedClock::start(options.refine(false)).map_err(|e| chain(&e))?;
    let conv = once.reader().conversion().map_err(|e| chain(&e))?;
    let ticks_per_s = (1_000_000_000u128 << conv.shift()) / u128::from(conv.mult().max(1));
    let now = counter::read_counter().ok_or("no counter")?;
    for secs in [0u64, 1, 10, 60, 600] {
        let at = now + (ticks_per_s as u64) * secs;
        println!(
            "refine off: bound {secs} s after calibration: {} ns",
            once.error_bound_at(at)
        );
    }
    println!("start() us: median {} all {times:?}", median(&times));
    println!("first bound ns: median {} all {bounds:?}", median(&bounds));
    Ok(())
}

fn long_run() -> Result<(), String> {
    let secs: u64 = env_or("PERFCLOCK_CALIB_SECS", 60);
    let t = Instant::now();
    let clock = CalibratedClock::start(CalibrationOptions::default()).map_err(|e| chain(&e))?;
    println!(
        "start() {} us, bound {} ns",
        t.elapsed().as_micros(),
        clock.error_bound_ns()
    );
    let early = verify(&clock, 34_000).map_err(|e| chain(&e))?;
    println!(
        "right after init ({} ms):\n{early}",
        t.elapsed().as_millis()
    );
    let started = Instant::now();
    let mut next = 10;
    while started.elapsed().as_secs() < secs {
        std::thread::sleep(Duration::from_secs(1));
        let el = started.elapsed().as_secs();
        if el >= next {
            let st = clock.stats();
            println!(
                "t={el}s bound {} ns {:?} {st:?} cpu {:.4}%",
                clock.error_bound_ns(),
                clock.bound_model(),
                st.thread_cpu_ns as f64 / t.elapsed().as_nanos() as f64 * 100.0
            );
            next = el + 10.max(secs / 20);
        }
    }
    let late = verify(&clock, 34_000).map_err(|e| chain(&e))?;
    let st = clock.stats();
    println!(
        "after {secs}s:\n{late}\nstats {st:?}; cpu {:.4}% of one CPU",
        st.thread_cpu_ns as f64 / t.elapsed().as_nanos() as f64 * 100.0
    );
    let violations = early.violations() + late.violations();
    if violations > 0 {
        return Err(format!("{violations} violations"));
    }
    Ok(())
}

fn band() -> Result<(), String> {
    let secs: u64 = env_or("PERFCLOCK_BAND_SECS", 10);
    let mut truth = GroundTruth::open_available().map_err(|e| chain(&e))?;
    let mut per_kind: Vec<(RecordKind, Vec<Constraint>)> =
        truth.kinds().into_iter().map(|k| (k, Vec::new())).collect();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(secs) {
        for (kind, v) in per_kind.iter_mut() {
            let mut b = Vec::new();
            truth.collect(*kind, 16, &mut b).map_err(|e| chain(&e))?;
            v.extend(b.iter().map(|b| Constraint {
                before: b.before,
                after: b.after,
                kernel_ns: b.kernel_ns,
            }));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let all: Vec<Constraint> = per_kind
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .collect();
    for (noise, trim) in [(10.0, 1), (5.0, 1), (0.0, 0), (10.0, 0)] {
        let opts = FitOptions {
            noise_ns: noise,
            trim_per_side: trim,
            ..FitOptions::default()
        };
        match Fit::new(&all, &opts) {
            Ok(f) => {
                let (l, u) = f.range_at(f.last_counter);
                let sol = solve(&f, f.last_counter).map_err(|e| chain(&e))?;
                println!(
                    "all kinds n={} noise {noise} trim {trim}: band {:.1} ns, bound {} ns, rejected {}, slope range {:.3e}",
                    all.len(), u - l, sol.bound.base_ns, f.rejected,
                    (f.slope_max - f.slope_min) / f.slope_best
                );
                let line_off = (l + u) / 2.0;
                for (kind, v) in &per_kind {
                    // How close each kind gets to either side of the middle line.
                    let (mut entry, mut exit) = (f64::INFINITY, f64::INFINITY);
                    for c in v {
                        let y = signed_diff(c.kernel_ns, f.ns_ref);
                        let at_b = line_off + f.slope_best * signed_diff(c.before, f.counter_ref);
                        let at_a = line_off + f.slope_best * signed_diff(c.after, f.counter_ref);
                        entry = entry.min(y - at_b);
                        exit = exit.min(at_a - y);
                    }
                    println!(
                        "  {kind:?}: n={} min entry {entry:.0} ns, min exit {exit:.0} ns",
                        v.len()
                    );
                }
            }
            Err(e) => println!("noise {noise} trim {trim}: {}", chain(&e)),
        }
    }
    for (kind, v) in &per_kind {
        if let Ok(f) = Fit::new(v, &FitOptions::default()) {
            let (l, u) = f.range_at(f.last_counter);
            println!("{kind:?} alone: band {:.1} ns", u - l);
        }
    }
    Ok(())
}
