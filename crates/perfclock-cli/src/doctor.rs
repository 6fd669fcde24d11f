//! `perfclock doctor`: the newcomer's first run. Opens the perf clock, says which mode it is in
//! and why, and measures it against timestamps the kernel stamped.
//!
//! ```text
//! perfclock doctor [RECORDS_PER_KIND]
//! ```
//! Exits non-zero if no clock can be had or any kernel stamp falls outside the clock's bound.

use std::process::ExitCode;
use std::time::Instant;

use perfclock::{shared_page, Clock, Mode};
use perfclock_core::counter;

use crate::output::chain;
use crate::output::{out, outln};

/// Runs the doctor with `per_kind` kernel stamps per record kind, spread over the CPUs.
pub(crate) fn run(per_kind: usize) -> ExitCode {
    // First, so that a failed open still shows which shared pages were refused and why.
    describe_shared_pages();
    let opened = Instant::now();
    let clock = match perfclock::init() {
        Ok(clock) => clock,
        Err(error) => {
            outln!("perfclock: no clock: {}", chain(&error));
            return ExitCode::FAILURE;
        }
    };
    let open_time = opened.elapsed();
    outln!(
        "perfclock doctor ({} counter, {})",
        counter::COUNTER_NAME,
        std::env::consts::ARCH
    );
    describe_mode(clock, open_time);
    describe_conversion(clock);
    let passed = check_against_kernel(clock, per_kind);
    compare_with_monotonic(clock);
    measure_read_cost(clock);
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn describe_mode(clock: &Clock, open_time: std::time::Duration) {
    match clock.mode() {
        Mode::Kernel => outln!(
            "mode: kernel — the kernel publishes the conversion (cap_user_time_zero=1); readings \
             are the kernel's own arithmetic (error bound 0 ns)"
        ),
        Mode::Shared => {
            outln!(
                "mode: shared — calibrated by a `perfclock serve` of this machine and read from \
                 its page (no thread, perf event or ring in this process)"
            );
            if let Some(page) = clock.shared_page() {
                outln!(
                    "shared page: {}, server pid {}, heartbeat {:.2} s ago",
                    page.path.display(),
                    page.server_pid,
                    page.heartbeat_age_ns as f64 / 1e9
                );
            }
            if let Some(withheld) = clock.withheld() {
                outln!("why: {withheld}");
            }
        }
        Mode::Paravirt => describe_paravirt(clock),
        Mode::Calibrated => {
            outln!("mode: calibrated");
            describe_paravirt_refusal();
            if let Some(withheld) = clock.withheld() {
                outln!("why: {withheld}");
            }
        }
    }
    outln!("opened in {:.1} ms", open_time.as_secs_f64() * 1e3);
    if let Some(calibrated) = clock.calibrated() {
        let stats = calibrated.stats();
        outln!(
            "calibration: first bound after {:.1} ms, fit over {:.1} ms of {} brackets, \
             background thread used {:.2} ms of CPU so far",
            stats.first_calibration_ns as f64 / 1e6,
            stats.last_fit_span_ns as f64 / 1e6,
            stats.last_fit_brackets,
            stats.thread_cpu_ns as f64 / 1e6
        );
    }
    outln!("error bound now: {} ns", clock.error_bound_ns());
}

fn describe_paravirt(clock: &Clock) {
    outln!(
        "mode: paravirt — the kernel's paravirtual sched_clock (kvm-clock), read as the kernel \
         reads it: the vDSO's pvclock entry with the kernel's arithmetic, bit for bit, plus the \
         boot's constant offset C = __sched_clock_offset - kvm_sched_clock_offset"
    );
    let Some(paravirt) = clock.paravirt() else {
        return;
    };
    let page = paravirt.page();
    outln!(
        "pvclock page: {} ({} online vCPUs' entries describe one clock, stable bit set)",
        page.layout(),
        page.vcpus_checked()
    );
    let stopped: Vec<String> = page.guest_stopped_vcpus().map(|v| v.to_string()).collect();
    if !stopped.is_empty() {
        outln!(
            "PVCLOCK_GUEST_STOPPED on vCPU {}: the host paused this VM (a snapshot, a migration) \
             and no watchdog has run there since; the kernel's sched_clock ignores the bit, and \
             so does this clock",
            stopped.join(", ")
        );
    }
    let offset = paravirt.offset();
    outln!(
        "offset C: {} ns ({:.6} ms), from {}",
        offset.offset_ns,
        offset.offset_ns as f64 / 1e6,
        offset.source
    );
    if let Some(intersection) = offset.intersection {
        outln!("kernel-stamped brackets' intersection: {intersection}");
    }
    if let Some(published) = paravirt.published() {
        outln!(
            "published by pid {} from {}, checked against {} kernel-stamped brackets: \
             intersection [{}, {}] ns",
            published.writer_pid,
            published.origin.as_str(),
            published.brackets,
            published.intersection_ns.0,
            published.intersection_ns.1
        );
    }
    for refusal in paravirt.refused() {
        outln!("offset source refused first: {}", chain(refusal));
    }
    if clock.error_bound_ns() == u64::MAX {
        outln!(
            "warning: the pvclock entry lost PVCLOCK_TSC_STABLE_BIT: the kernel now clamps its \
             readings, which this clock cannot follow; a new process falls back to calibration"
        );
    }
}

/// Why paravirt mode was not used, where it might have been: the page's refusal (the offset's
/// sources are tried only once the page is found; the brackets they need are not repeated here).
fn describe_paravirt_refusal() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    if perfclock::paravirt::disabled_by_environment() {
        outln!("paravirt mode: disabled ({}=off)", perfclock::paravirt::ENV);
        return;
    }
    match perfclock::paravirt::find_page() {
        Ok((page, _)) => outln!(
            "paravirt mode: the pvclock page ({}) is usable, but no offset passed the \
             cross-check against kernel-stamped brackets",
            page.layout()
        ),
        Err(refusal) => outln!("paravirt mode: not available: {}", chain(&refusal)),
    }
}

/// Each shared page `init()` looks at, and what it made of it (`refused (REASON): ...` for
/// one it would not use).
fn describe_shared_pages() {
    let Some(paths) = shared_page::candidates() else {
        outln!("shared pages: disabled ({}=off)", shared_page::ENV);
        return;
    };
    for path in paths {
        match shared_page::probe(&path) {
            Ok(page) => outln!(
                "shared page {}: valid, server pid {}, heartbeat {:.2} s ago, bound {} ns",
                path.display(),
                page.server_pid,
                page.heartbeat_age_ns as f64 / 1e9,
                page.error_bound_ns
            ),
            Err(refusal) if refusal.is_absent() => {
                outln!(
                    "shared page {}: none (no `perfclock serve`)",
                    path.display()
                )
            }
            Err(refusal) => outln!(
                "shared page {}: refused ({}): {refusal}",
                path.display(),
                refusal.reason()
            ),
        }
    }
}

fn describe_conversion(clock: &Clock) {
    if let Some(paravirt) = clock.paravirt() {
        match paravirt.reader().raw() {
            Ok(entry) => outln!(
                "pvclock entry (vCPU 0): version {}, tsc_timestamp {}, system_time {}, \
                 tsc_to_system_mul {}, tsc_shift {}, flags {:#x}",
                entry.version,
                entry.tsc_timestamp,
                entry.system_time,
                entry.tsc_to_system_mul,
                entry.tsc_shift,
                entry.flags
            ),
            Err(error) => outln!("pvclock entry unreadable: {}", chain(&error)),
        }
        return;
    }
    let Some(reader) = clock.reader() else {
        return;
    };
    match reader.raw() {
        Ok(raw) => outln!(
            "published page: capabilities {:#x}, time_mult {}, time_shift {}, time_zero {}, \
             time_cycles {}, time_mask {:#x}",
            raw.capabilities,
            raw.time_mult,
            raw.time_shift,
            raw.time_zero,
            raw.time_cycles,
            raw.time_mask
        ),
        Err(error) => outln!("published page unreadable: {}", chain(&error)),
    }
}

fn check_against_kernel(clock: &Clock, per_kind: usize) -> bool {
    outln!(
        "\nchecking against {per_kind} fresh kernel stamps per record kind, spread over the \
         CPUs ..."
    );
    match perfclock_check::verify(clock, per_kind) {
        Ok(report) => {
            out!("{report}");
            if report.passed() {
                outln!("result: every kernel stamp lies within the clock's bound");
            } else {
                outln!(
                    "result: FAILED: {} stamps outside the bound (worst {} ns)",
                    report.violations(),
                    report.worst_violation_ns()
                );
            }
            report.passed()
        }
        Err(error) => {
            outln!(
                "result: FAILED: could not check against the kernel: {}",
                chain(&error)
            );
            false
        }
    }
}

fn compare_with_monotonic(clock: &Clock) {
    let offset = match perfclock_check::monotonic_offset(clock) {
        Ok(offset) => offset,
        Err(error) => {
            outln!(
                "\nCLOCK_MONOTONIC - perf clock: not measured: {}",
                chain(&error)
            );
            return;
        }
    };
    let misplaced = offset.offset_ns.unsigned_abs() > offset.uncertainty_ns + 1_000;
    outln!(
        "\nCLOCK_MONOTONIC - perf clock = {} ns +- {} ns ({:.3} ms): CLOCK_MONOTONIC stamps {}",
        offset.offset_ns,
        offset.uncertainty_ns,
        offset.offset_ns as f64 / 1e6,
        if misplaced {
            "would misplace events against perf samples"
        } else {
            "are close to the perf clock here"
        }
    );
}

/// `READS` calls of `read`, each result kept; ns per call. Generic, so each read is inlined
/// into its own loop (no indirect call in the measurement).
fn ns_per_call(read: impl Fn() -> u64) -> f64 {
    const READS: u32 = 200_000;
    let start = Instant::now();
    let mut sink = 0u64;
    for _ in 0..READS {
        sink = sink.wrapping_add(std::hint::black_box(read()));
    }
    std::hint::black_box(sink);
    start.elapsed().as_nanos() as f64 / f64::from(READS)
}

fn measure_read_cost(clock: &Clock) {
    const ROUNDS: usize = 11;
    let median = |mut samples: Vec<f64>| {
        samples.sort_by(f64::total_cmp);
        samples[samples.len() / 2]
    };
    // Rounds interleave the three reads, and the ratio is taken within each round, so a change
    // in the machine's load between rounds does not skew it.
    let (mut clock_reads, mut counter_reads, mut monotonic_reads, mut ratios) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let clock_read = ns_per_call(|| clock.now_ns().unwrap_or(0));
        let counter_read = ns_per_call(|| counter::read_counter().unwrap_or(0));
        monotonic_reads.push(ns_per_call(perfclock_check::monotonic_ns));
        ratios.push(clock_read / counter_read);
        clock_reads.push(clock_read);
        counter_reads.push(counter_read);
    }
    outln!(
        "\ncost per read (medians of {ROUNDS} interleaved rounds of 200000): now_ns {:.1} ns, raw \
         {} {:.1} ns ({:.2}x), clock_gettime(CLOCK_MONOTONIC) {:.1} ns",
        median(clock_reads),
        counter::COUNTER_NAME,
        median(counter_reads),
        median(ratios),
        median(monotonic_reads)
    );
}
