//! Per-user limits a calibrated clock runs into, hit for real in a child process that becomes
//! the unprivileged user `nobody` (root is exempt from both limits):
//! - `ulimit -u` (RLIMIT_NPROC) at the process's own thread count: the calibration thread
//!   cannot start; the error must name `ulimit -u`, not "WouldBlock".
//! - `ulimit -l` (RLIMIT_MEMLOCK) at Docker's 64 KiB while clocks are opened one after another:
//!   their rings exhaust the per-user budget (`perf_event_mlock_kb` per CPU), then the 64 KiB;
//!   the error must name `ulimit -l`/RLIMIT_MEMLOCK and say the budget is per user.
//!
//! Needs root (to become `nobody`), `perf_event_paranoid` <= 2 and calibrated mode; otherwise
//! it skips (perfclock-testutil: a failure under the need's require variable).
#![cfg(feature = "calibrated")]

use std::time::Duration;

use hostile::{child_case, run_child, watchdog};
use perfclock::error_chain as chain;
use perfclock::{Error, Mode, Options};
use perfclock_calib::CalibError;
use perfclock_os::{ErrorKind, Op};
use perfclock_testutil::error_chain::assert_each_cause_once;
use perfclock_testutil::hostile;
use perfclock_testutil::{child_skipped, skip, skip_child, Need};

const NOBODY: libc::uid_t = 65534;
/// Docker's default `ulimit -l`.
const DOCKER_MEMLOCK: u64 = 64 * 1024;
/// More clocks than the per-user budget of any machine this runs on holds.
const MAX_CLOCKS: usize = 200;

#[test]
fn per_user_limits_name_their_knob() {
    let _turn = perfclock_testutil::one_at_a_time();
    let test = perfclock_testutil::test_path!();
    if let Some(case) = child_case() {
        limits_child(&test, &case);
        return;
    }
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        skip(
            &test,
            Need::Root,
            format_args!("euid {euid} cannot become `nobody`"),
        );
        return;
    }
    for case in ["nproc", "memlock"] {
        let run = run_child(&test, case, Duration::from_secs(120));
        if child_skipped(run.status, &run.stderr) {
            continue;
        }
        run.expect_success(&format!("LIMITS-OK {case}"));
        println!(
            "{case}: {}",
            run.field(&format!("LIMITS-OK {case}")).unwrap_or("?")
        );
    }
}

fn set_limit(resource: libc::__rlimit_resource_t, value: u64) {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: a valid, initialised struct.
    let rc = unsafe { libc::setrlimit(resource, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

fn become_nobody() {
    // SAFETY: plain id changes of this process (glibc applies them to every thread); after
    // them the process has no capabilities, so the per-user limits apply to it.
    unsafe {
        assert_eq!(libc::setgroups(0, core::ptr::null()), 0, "setgroups");
        assert_eq!(libc::setgid(NOBODY), 0, "setgid");
        assert_eq!(libc::setuid(NOBODY), 0, "setuid");
    }
}

/// Exits as skipped unless this kernel gives `nobody` a calibrated clock (else there is
/// nothing to limit).
fn skip_unless_calibrated(test: &str, case: &str) {
    let test = format!("{test} {case}");
    match Options::default().paravirt(false).open() {
        Ok(clock) if clock.mode() == Mode::Calibrated => {}
        Ok(clock) => skip_child(
            &test,
            Need::CalibratedMode,
            format_args!("the clock opened in {:?} mode", clock.mode()),
        ),
        Err(error) => skip_child(
            &test,
            Need::Perf,
            format_args!("no clock as nobody: {error}"),
        ),
    }
}

fn limits_child(test: &str, case: &str) {
    watchdog(100);
    become_nobody();
    skip_unless_calibrated(test, case);
    match case {
        "nproc" => {
            // Every task of user nobody counts, and this process is one: a limit of 1 refuses
            // every new thread. (A limit of this process's thread count let one through in CI:
            // /proc's count can still include a thread that has left the kernel's.)
            set_limit(libc::RLIMIT_NPROC, 1);
            let error = Options::default()
                .paravirt(false)
                .open()
                .expect_err("no thread can be started");
            let message = assert_each_cause_once(&error);
            println!("nproc: {error:?}\n  message: {message}");
            assert!(
                matches!(
                    &error,
                    Error::Calibration {
                        reason: CalibError::Spawn(std::io::ErrorKind::WouldBlock),
                        ..
                    }
                ),
                "{error:?}"
            );
            assert!(message.contains("ulimit -u"), "{message}");
            assert!(!message.contains("WouldBlock"), "{message}");
            println!("LIMITS-OK nproc EAGAIN named as ulimit -u");
        }
        "memlock" => {
            set_limit(libc::RLIMIT_MEMLOCK, DOCKER_MEMLOCK);
            let mut clocks = Vec::new();
            let error = loop {
                assert!(clocks.len() < MAX_CLOCKS, "no limit hit");
                // Refining clocks keep their ground-truth rings mapped (a clock that calibrated
                // once has unmapped them).
                match Options::default().paravirt(false).open() {
                    Ok(clock) => clocks.push(clock),
                    Err(error) => break error,
                }
            };
            let message = chain(&error);
            println!(
                "memlock: clock {} failed: {error:?}\n  message: {message}",
                clocks.len() + 1
            );
            let sys = error.sys_error().expect("a failed system call");
            assert_eq!(
                (sys.op(), sys.errno(), sys.kind()),
                (Op::Mmap, libc::EPERM, ErrorKind::MmapLimit),
                "{error:?}"
            );
            for knob in [
                "ulimit -l",
                "RLIMIT_MEMLOCK",
                "perf_event_mlock_kb",
                "per user",
            ] {
                assert!(message.contains(knob), "{knob} missing: {message}");
            }
            println!("LIMITS-OK memlock {} clocks fit", clocks.len());
        }
        other => panic!("unknown case {other}"),
    }
}
