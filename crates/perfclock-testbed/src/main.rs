//! In-guest test program of the real-kernel test bed (`tests/e2e/testbed/run.sh`).
//!
//! It runs as `/init` (PID 1) of a qemu guest booted with one of Debian's kernels, where the
//! kernel really publishes the time parameters (`cap_user_time_zero = 1`), and checks perfclock
//! against timestamps the kernel stamped into perf records. Results go to the console, one line
//! each, for the script to collect:
//!
//! - `TESTBED PASS <check> key=value...` / `TESTBED FAIL <check> ...` / `TESTBED INFO ...`
//! - `SKIPPED <what>: <why>`
//! - `TESTBED SUMMARY arch=... kernel=... events=... violations=... slips_1ns=... tightest_ns=...`
//! - last: `TESTBED-DONE pass` or `TESTBED-DONE fail`
//!
//! As PID 1 it powers the guest off at the end (the kernel panics if PID 1 exits). Run anywhere
//! else it exits with status 0 or 1 instead; on a kernel that withholds the parameters (our KVM
//! machines) it fails, because then there is nothing real to test.
//!
//! Event counts can be scaled from the kernel command line, which passes `NAME=value` words it
//! does not know to init's environment: `TESTBED_CORE_OPS`, `TESTBED_FACADE_OPS`,
//! `TESTBED_HANDOFFS`, `TESTBED_CHILD_OPS`, `TESTBED_JITDUMP_OPS` (see [`Budget`]).
//! `TESTBED_SELFTEST_SKEW_NS=N` skews the first reading of every bracket by N ns, to see the run
//! fail.
//!
//! Started with `PERFCLOCK_SIGSAFE_ROLE` set, the program is the signal-safety proof's child
//! instead (the `signal-safety` check starts it so).

mod brackets;
mod fork;
mod guest_fs;
mod handoff;
mod jitdump;
mod package;
mod page;
mod refinement;
mod report;
mod signal_safety;
#[cfg(test)]
mod synthetic;

use std::io::Write;

use report::Report;

/// The signal-safety proof's child (this program again) counts the allocations of the
/// functions it calls from its handler.
#[global_allocator]
static ALLOCATOR: perfclock_signal_safety::CountingAllocator =
    perfclock_signal_safety::CountingAllocator;

/// How many kernel-stamped records and handoffs each part of the run takes.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Per CPU: records bracketed with raw core reads, half unordered, half ordered.
    core_ops: u64,
    /// Per CPU: records bracketed with the facade's `perfclock::now_ns()`.
    facade_ops: u64,
    /// Timestamps handed between the two pinned threads, per kind of read.
    handoffs: u64,
    /// Records the fork child brackets with its (re-mapped) clock.
    child_ops: u64,
    /// jitdump loads, each between two kernel-stamped records.
    jitdump_ops: u64,
}

impl Budget {
    /// 2 x (40,000 + 12,000) + 2,000 = 106,000 records per architecture, plus 2,000 jitdump
    /// loads. Under TCG with two vCPUs this takes tens of seconds per guest (see the README's
    /// figures).
    const DEFAULT: Budget = Budget {
        core_ops: 40_000,
        facade_ops: 12_000,
        handoffs: 20_000,
        child_ops: 2_000,
        jitdump_ops: 2_000,
    };

    fn from_env() -> Budget {
        let get = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let d = Budget::DEFAULT;
        Budget {
            core_ops: get("TESTBED_CORE_OPS", d.core_ops),
            facade_ops: get("TESTBED_FACADE_OPS", d.facade_ops),
            handoffs: get("TESTBED_HANDOFFS", d.handoffs),
            child_ops: get("TESTBED_CHILD_OPS", d.child_ops),
            jitdump_ops: get("TESTBED_JITDUMP_OPS", d.jitdump_ops),
        }
    }
}

/// Kernel-stamped records required per architecture, and per CPU through the facade.
const MIN_EVENTS_PER_ARCH: u64 = 100_000;
const MIN_FACADE_EVENTS_PER_CPU: u64 = 10_000;

fn run(report: &mut Report) {
    let budget = Budget::from_env();
    report.info(format_args!(
        "arch={} kernel={} version={:?} counter={} budget={budget:?}",
        std::env::consts::ARCH,
        report::kernel_release(),
        report::kernel_version(),
        perfclock_core::counter::COUNTER_NAME,
    ));
    if brackets::selftest_skew_ns() != 0 {
        report.info(format_args!(
            "self-test: first readings skewed by +{} ns, brackets must FAIL",
            brackets::selftest_skew_ns()
        ));
    }
    // Mapped before the kernel's conversion is final, by a thread that sleeps until after.
    let sleeper = refinement::Sleeper::start();
    refinement::wait_for_final_clock(report, std::process::id() == 1);
    match sleeper {
        Ok(sleeper) => sleeper.report(report),
        Err(error) => report.fail("page-refresh", format_args!("{error}")),
    }
    let Some(tolerance) = page::check(report) else {
        return;
    };
    signal_safety::run(report);
    let cpus = brackets::two_cpus(report);
    let Some(cpus) = cpus else { return };
    brackets::run(report, &budget, tolerance, cpus);
    handoff::run(report, &budget, cpus);
    fork::run(report, &budget, tolerance);
    jitdump::run(report, &budget, tolerance);
    package::run(report);
}

fn main() {
    perfclock_signal_safety::child_if_asked();
    let pid1 = std::process::id() == 1;
    let mut report = Report::new();
    // A panic in a check is a failure of that check, never a hang or a kernel panic.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut report)));
    if outcome.is_err() {
        report.fail("panic", format_args!("a check panicked (message above)"));
    }
    report.summary(MIN_EVENTS_PER_ARCH, MIN_FACADE_EVENTS_PER_CPU);
    let pass = report.passed();
    println!("TESTBED-DONE {}", if pass { "pass" } else { "fail" });
    let _ = std::io::stdout().flush();
    if pid1 {
        power_off();
    }
    std::process::exit(if pass { 0 } else { 1 });
}

fn power_off() {
    // SAFETY: sync and reboot take no pointers; as PID 1 in a throwaway guest, powering off is
    // exactly what we want (the guest has nothing else to keep).
    unsafe {
        libc::sync();
        libc::reboot(libc::LINUX_REBOOT_CMD_POWER_OFF);
    }
}
