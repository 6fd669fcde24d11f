//! No system calls on the read path: after `init()`, a million reads run under a seccomp BPF
//! filter that kills the whole process (SIGSYS) on any system call but `write`, `exit` and
//! `exit_group`. (Seccomp strict mode is no use: it disables `rdtsc` on x86.)
//!
//! The calibrated clock's background thread makes system calls, so two cases:
//! - `thread`: default options (refinement on); the filter is installed on the reading thread
//!   only (seccomp filters are per thread without TSYNC), so the refiner keeps republishing
//!   while the filtered thread reads.
//! - `process`: `refine(false)`; the filter is installed on every thread of the process
//!   (`SECCOMP_FILTER_FLAG_TSYNC`) after the calibration thread has finished.
//!
//! A negative control makes one `getpid` under the same filter and must die of SIGSYS, so the
//! test fails if the filter were not in force.
// The report counts the refiner's republishes (`Clock::calibrated`, built with `calibrated`
// only).
#![cfg(feature = "calibrated")]

use std::fmt::Write as _;
use std::time::Duration;

use hostile::{allow_only, child_case, install_filter, raw_print, run_child, watchdog, StackText};
use perfclock::Options;
use perfclock_testutil::{child_skipped, hostile, skip_child, Need};

const READS: u64 = 1_000_000;

#[test]
fn a_million_reads_make_no_system_call() {
    let _turn = perfclock_testutil::one_at_a_time();
    if let Some(case) = child_case() {
        no_syscall_child(&case);
        return;
    }
    let test = perfclock_testutil::test_path!();
    for case in ["thread", "process"] {
        let run = run_child(&test, case, Duration::from_secs(60));
        if child_skipped(run.status, &run.stderr) {
            // Without a clock there is no read path to watch, and the control below would
            // stop at the same place.
            return;
        }
        run.expect_success(&format!("NOSYSCALL-OK {case} reads {READS}"));
    }
    let control = run_child(&test, "control", Duration::from_secs(60));
    assert!(
        control.stdout.contains("CONTROL filter installed"),
        "the control did not get as far as the filter:\n{}\n{}",
        control.stdout,
        control.stderr
    );
    assert_eq!(
        control.signal(),
        Some(libc::SIGSYS),
        "one getpid under the filter must kill the process: {:?}\n{}",
        control.status,
        control.stderr
    );
    println!("control: getpid under the filter killed the child with SIGSYS, as it must");
}

fn filter() -> Vec<libc::sock_filter> {
    allow_only(&[libc::SYS_write, libc::SYS_exit, libc::SYS_exit_group])
}

/// Installs the filter on every thread of the process at once.
fn install_filter_all_threads(program: &[libc::sock_filter]) {
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(rc, 0);
    // SAFETY: `fprog` points to `program`, live for the call; the kernel copies it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &fprog as *const libc::sock_fprog,
        )
    };
    assert_eq!(
        rc,
        0,
        "seccomp(TSYNC) failed (another thread has a different filter?): {}",
        std::io::Error::last_os_error()
    );
}

fn no_syscall_child(case: &str) {
    watchdog(30);
    let options = if case == "process" {
        Options::default().refine(false)
    } else {
        Options::default()
    };
    let clock = perfclock::init_with(options)
        .unwrap_or_else(|e| skip_child(&format!("no system calls ({case})"), Need::Perf, e));
    // Warm up: every call below once, and the raw `write` and `_exit` symbols resolved, before
    // the filter is in force.
    let mut last = clock.now_ns().expect("first read");
    let _ = (
        perfclock::try_now_ns(),
        perfclock::error_bound_ns(),
        perfclock::mode(),
    );
    raw_print(&format!(
        "{case}: mode {:?}, installing the filter\n",
        clock.mode()
    ));
    if case == "process" {
        // The calibration thread has published and ends by itself with refinement off.
        std::thread::sleep(Duration::from_millis(100));
        install_filter_all_threads(&filter());
    } else {
        install_filter(&filter());
    }
    if case == "control" {
        raw_print("CONTROL filter installed\n");
        // SAFETY: getpid has no memory effects; the filter kills the process here.
        unsafe { libc::syscall(libc::SYS_getpid) };
        raw_print("CONTROL survived a system call under the filter\n");
        // SAFETY: leaves at once; reaching this is the failure the parent detects.
        unsafe { libc::_exit(3) };
    }
    let refinements = || clock.calibrated().map_or(0, |c| c.stats().refinements);
    let refinements_before = refinements();
    // From here on: no allocation, no std I/O, nothing that could make a system call.
    let (mut reads, mut failures, mut back, mut bound_unknown) = (0u64, 0u64, 0u64, 0u64);
    for i in 0..READS {
        let values = [
            clock.now_ns().ok(),
            perfclock::try_now_ns(),
            Some(perfclock::now_ns()).filter(|&ns| ns != 0),
        ];
        for value in values {
            match value {
                Some(ns) => {
                    reads += 1;
                    if ns < last {
                        back += 1;
                    }
                    last = ns;
                }
                None => failures += 1,
            }
        }
        if i % 1_000 == 0 {
            if perfclock::error_bound_ns() == u64::MAX || perfclock::mode().is_none() {
                bound_unknown += 1;
            }
            let counter = clock.read_counter().unwrap_or(0);
            if clock.cycles_to_ns(counter).is_err() || clock.conversion().is_err() {
                failures += 1;
            }
        }
    }
    let mut report = StackText::default();
    let ok = failures == 0 && back == 0 && bound_unknown == 0 && reads == 3 * READS;
    let _ = writeln!(
        report,
        "{case}: {reads} reads under the filter, {failures} failed, {back} went back, \
         {bound_unknown} unknown bounds; the refiner republished {} times meanwhile",
        refinements() - refinements_before
    );
    if ok {
        let _ = writeln!(report, "NOSYSCALL-OK {case} reads {READS}");
    }
    report.write_to(1);
    // SAFETY: leaves at once with the verdict; the harness would make system calls.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) };
}
