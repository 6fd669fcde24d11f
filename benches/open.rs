//! What opening a clock costs: kernel mode's system calls and calibrated mode's first
//! calibration.
//!
//! ```text
//! CARGO_TARGET_DIR=target cargo bench --bench open && python3 benches/summary.py target
//! ```
//!
//! - `kernel page open+mmap+read+munmap`: the system-call work of a kernel-mode open
//!   (`perf_event_open` of a dummy event, `mmap` of its first page, one seqlock read of the
//!   conversion, `close`), plus the `munmap` a kernel-mode clock only pays when dropped. A
//!   successful kernel-mode open makes exactly these system calls (its read succeeds where this
//!   one returns `TimeZeroUnavailable`, at the same cost) and adds only a `pthread_atfork`
//!   registration on the first open and one compare-exchange; so this is kernel-mode `init()`
//!   measured on a machine where kernel mode is not available, an upper bound by the `munmap`.
//! - `Clock::open_kernel_only (fails here)`: the public call as it behaves on a kernel that
//!   withholds the parameters: the same system calls, then the diagnosis (reading
//!   `/proc/cpuinfo` and the clocksource files) that a successful open skips.
//! - `Clock::open (calibrated)`: what `perfclock::init()` does on such a kernel: the kernel page
//!   attempt, the diagnosis, and the first calibration (spawning the calibration thread,
//!   bracketing for `CalibrationOptions::init_budget`, fitting, publishing). The clock is dropped
//!   outside the timed section. The calibrator's own `first_calibration_ns` is printed after.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use perfclock::{Clock, Error, Mode, Options};
use perfclock_core::PageReader;
use perfclock_os::{EventAttr, PerfEvent};
use perfclock_testutil::{skip, Need};

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .without_plots()
        .configure_from_args()
}

fn kernel_mode(c: &mut Criterion) {
    let mut group = c.benchmark_group("open");
    if let Err(error) = PerfEvent::open(&EventAttr::dummy()) {
        skip("kernel-mode open", Need::Perf, error);
        return;
    }
    group.bench_function("kernel page open+mmap+read+munmap", |b| {
        b.iter(|| {
            let event = PerfEvent::open(&EventAttr::dummy()).ok()?;
            let mapping = event.map_page_only().ok()?;
            // SAFETY: the mapping is a live, read-only perf page that outlives the reader,
            // which is used only inside this closure.
            let reader = unsafe { PageReader::new(mapping.page()) };
            Some(black_box(reader.conversion()).is_ok())
        })
    });
    let outcome = Clock::open_kernel_only().map(|clock| clock.mode());
    match outcome {
        Ok(Mode::Kernel) => println!("kernel mode is live here: open_kernel_only succeeds"),
        Err(Error::KernelWithholdsTime(_)) => {
            println!("kernel mode is withheld here: open_kernel_only fails after the diagnosis")
        }
        other => println!("open_kernel_only: {other:?}"),
    }
    group.bench_function("Clock::open_kernel_only (fails here)", |b| {
        b.iter(|| Clock::open_kernel_only().map(|clock| clock.mode()).is_ok())
    });
    group.finish();
}

/// Paravirt mode's open (the page found and probed, `C` from the kernel log cross-checked
/// against brackets, or from brackets alone without root), in this process: the fresh-process
/// figure is `examples/init_cost.rs`'s.
fn paravirt_mode(c: &mut Criterion) {
    let mut group = c.benchmark_group("open");
    match Clock::open().map(|clock| clock.paravirt().map(|p| p.offset().source)) {
        Ok(Some(source)) => println!("paravirt open: C from {source}"),
        other => {
            skip(
                "paravirt open",
                Need::ParavirtMode,
                format_args!("{other:?}"),
            );
            return;
        }
    }
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    group.bench_function("Clock::open (paravirt)", |b| {
        b.iter(|| Clock::open().map(|clock| clock.mode()).is_ok())
    });
    group.finish();
}

fn calibrated_mode(c: &mut Criterion) {
    let mut group = c.benchmark_group("open");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    let mut first_calibration_ms = Vec::new();
    let mut failures = 0u32;
    group.bench_function("Clock::open (calibrated)", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let opened = Options::default().paravirt(false).open();
                total += start.elapsed();
                match &opened {
                    Ok(clock) => {
                        if let Some(calibrated) = clock.calibrated() {
                            let ns = calibrated.stats().first_calibration_ns;
                            first_calibration_ms.push(ns as f64 / 1e6);
                        }
                    }
                    Err(_) => failures += 1,
                }
                // Dropping stops and joins the calibration thread: not part of the open.
                drop(opened);
            }
            total
        })
    });
    group.finish();
    if first_calibration_ms.is_empty() {
        println!("calibrated open: no calibrated clock opened ({failures} failures)");
        return;
    }
    first_calibration_ms.sort_by(f64::total_cmp);
    let count = first_calibration_ms.len();
    println!(
        "calibrated open: first_calibration_ns over {count} opens: median {:.1} ms, max {:.1} ms \
         ({failures} failures)",
        first_calibration_ms[count / 2],
        first_calibration_ms[count - 1]
    );
}

criterion_group! {
    name = benches;
    config = config();
    targets = kernel_mode, paravirt_mode, calibrated_mode
}
criterion_main!(benches);
