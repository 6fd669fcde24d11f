//! Paravirt mode over time, nothing refitted: opens the clock once, then every 25 s checks it
//! against fresh kernel stamps (three kinds, both vCPUs) and prints the result, for as many
//! seconds as asked (default 600).
//!
//! `cargo run --release -p perfclock-check --example paravirt_soak -- [SECONDS] [STAMPS_PER_KIND]`
//!
//! Exits non-zero if the clock is not in paravirt mode or any stamp falls outside its bound.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use perfclock::error_chain as chain;
use perfclock::{Mode, Options};

const EVERY: Duration = Duration::from_secs(25);

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(600);
    let per_kind: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2_000);
    let clock = match Options::default().open() {
        Ok(clock) if clock.mode() == Mode::Paravirt => clock,
        Ok(clock) => {
            eprintln!("not paravirt mode: {:?}", clock.mode());
            return ExitCode::FAILURE;
        }
        Err(error) => {
            eprintln!("no clock: {}", chain(&error));
            return ExitCode::FAILURE;
        }
    };
    let paravirt = clock.paravirt().expect("paravirt state");
    println!(
        "C = {} ns from {}, bound {} ns, checked against {:?}",
        paravirt.offset().offset_ns,
        paravirt.offset().source,
        clock.error_bound_ns(),
        paravirt.offset().intersection.map(|i| i.to_string())
    );
    let start = Instant::now();
    let (mut checks, mut stamps, mut violations) = (0u64, 0u64, 0u64);
    loop {
        let entry = paravirt.reader().raw();
        match perfclock_check::verify(&clock, per_kind) {
            Ok(report) => {
                checks += 1;
                stamps += report.events();
                violations += report.violations();
                println!(
                    "{:>5.0} s: {} stamps, {} violations (worst {} ns), bound {} ns, entry version {:?}",
                    start.elapsed().as_secs_f64(),
                    report.events(),
                    report.violations(),
                    report.worst_violation_ns(),
                    clock.error_bound_ns(),
                    entry.map(|e| e.version)
                );
            }
            Err(error) => {
                eprintln!("check failed: {}", chain(&error));
                return ExitCode::FAILURE;
            }
        }
        if start.elapsed() + EVERY > Duration::from_secs(seconds) {
            break;
        }
        std::thread::sleep(EVERY);
    }
    println!(
        "{checks} checks over {:.0} s, {stamps} stamps, {violations} violations, nothing refitted",
        start.elapsed().as_secs_f64()
    );
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
