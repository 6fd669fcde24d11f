//! One refused system call must not kill calibration: a seccomp filter in a child process makes
//! the action of one or two record kinds fail with EPERM (`prctl(PR_SET_NAME)` for COMM,
//! `madvise(MADV_DONTNEED)` for page faults, an executable anonymous `mmap` for MMAP2), as a
//! container or SELinux policy might. `init()` must calibrate from the kinds that still work,
//! report which kinds failed in the calibrator's statistics, and keep refining; with every
//! kind refused it must fail with a typed calibration error that names the refused call.
#![cfg(feature = "calibrated")]

use std::time::{Duration, Instant};

use hostile::{child_case, install_filter, run_child, watchdog};
use perfclock::{Error, Mode, Options};
use perfclock_calib::{CalibError, RecordKind};
use perfclock_testutil::error_chain::assert_each_cause_once;
use perfclock_testutil::hostile;
use perfclock_testutil::{child_skipped, skip_child, Need};

/// Each case: the kinds whose action is refused ("comm-open": `prctl(PR_GET_NAME)`, which the
/// COMM kind needs when it opens).
const CASES: [&str; 5] = [
    "comm",
    "page-fault",
    "mmap2",
    "comm+page-fault",
    "comm-open",
];

#[test]
fn refused_record_kinds_degrade_calibration() {
    let _turn = perfclock_testutil::one_at_a_time();
    let test = perfclock_testutil::test_path!();
    if let Some(case) = child_case() {
        refused_child(&test, &case);
        return;
    }
    let mut seen = Vec::new();
    for case in CASES.into_iter().chain(["comm+page-fault+mmap2"]) {
        let run = run_child(&test, case, Duration::from_secs(60));
        if child_skipped(run.status, &run.stderr) {
            continue;
        }
        run.expect_success(&format!("KINDS-OK {case}"));
        seen.push(format!(
            "{case}: {}",
            run.field(&format!("KINDS-OK {case}")).unwrap_or("?")
        ));
    }
    println!("{}", seen.join("\n"));
}

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH_NATIVE: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH_NATIVE: u32 = 0xC000_00B7;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// A filter that makes system call `nr` fail with EPERM when the low 32 bits of argument `arg`,
/// masked with `mask`, equal `value`; everything else is allowed.
fn refuse_when(nr: libc::c_long, arg: u32, mask: u32, value: u32) -> Vec<libc::sock_filter> {
    let allow = libc::SECCOMP_RET_ALLOW;
    vec![
        insn(BPF_LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        insn(BPF_JEQ_K, 1, 0, AUDIT_ARCH_NATIVE),
        insn(BPF_RET_K, 0, 0, allow),
        insn(BPF_LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        insn(BPF_JEQ_K, 0, 4, nr as u32),
        insn(BPF_LD_W_ABS, 0, 0, 16 + 8 * arg), // low half of args[arg] (little-endian)
        insn(BPF_AND_K, 0, 0, mask),
        insn(BPF_JEQ_K, 0, 1, value),
        insn(
            BPF_RET_K,
            0,
            0,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        insn(BPF_RET_K, 0, 0, allow),
    ]
}

/// Installs the filter for one case's `name` and returns the kind it breaks.
fn refuse(name: &str) -> RecordKind {
    let (kind, program) = match name {
        "comm" => (
            RecordKind::Comm,
            refuse_when(libc::SYS_prctl, 0, !0, libc::PR_SET_NAME as u32),
        ),
        "comm-open" => (
            RecordKind::Comm,
            refuse_when(libc::SYS_prctl, 0, !0, libc::PR_GET_NAME as u32),
        ),
        "page-fault" => (
            RecordKind::PageFault,
            refuse_when(libc::SYS_madvise, 2, !0, libc::MADV_DONTNEED as u32),
        ),
        "mmap2" => (
            RecordKind::Mmap2,
            refuse_when(
                libc::SYS_mmap,
                2,
                libc::PROT_EXEC as u32,
                libc::PROT_EXEC as u32,
            ),
        ),
        other => panic!("unknown case {other}"),
    };
    install_filter(&program);
    kind
}

/// Calibrated mode: the one whose brackets these cases refuse (paravirt mode would read the
/// kernel log first on a KVM guest).
fn calibrated() -> Options {
    Options::default().paravirt(false)
}

fn refused_child(test: &str, case: &str) {
    watchdog(50);
    // On this thread before the clock opens: the calibration thread inherits the filters.
    let refused: Vec<RecordKind> = case.split('+').map(refuse).collect();
    if refused.len() == RecordKind::ALL.len() {
        let error = perfclock::init_with(calibrated()).expect_err("no kind can calibrate");
        let message = assert_each_cause_once(&error);
        println!("all refused: {error:?}\n  message: {message}");
        assert!(
            matches!(
                &error,
                Error::Calibration {
                    reason: CalibError::Bracket(_),
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(
            message.contains("EPERM") || message.contains("not permitted"),
            "{message}"
        );
        println!("KINDS-OK {case} typed error");
        return;
    }
    let clock = match perfclock::init_with(calibrated()) {
        Ok(clock) => clock,
        Err(error) => panic!("{case} refused: init failed although other kinds work: {error}"),
    };
    if clock.mode() == Mode::Kernel {
        skip_child(
            &format!("{test} {case}"),
            Need::CalibratedMode,
            "the kernel publishes the conversion, nothing to calibrate",
        );
    }
    let calibrated = clock.calibrated().expect("calibrated mode");
    let stats = calibrated.stats();
    for &kind in &refused {
        assert!(
            stats.kinds_failed.contains(kind),
            "{kind} not reported: {stats:?}"
        );
        assert!(
            !stats.kinds_working.contains(kind),
            "{kind} still in use: {stats:?}"
        );
    }
    let working: Vec<RecordKind> = RecordKind::ALL
        .into_iter()
        .filter(|kind| !refused.contains(kind))
        .collect();
    for &kind in &working {
        assert!(
            stats.kinds_working.contains(kind),
            "{kind} dropped: {stats:?}"
        );
    }
    // Readings work and the calibrator keeps refining with the remaining kinds.
    let mut last = 0;
    for _ in 0..10_000 {
        let now = clock.now_ns().expect("a read");
        assert!(now >= last, "went back: {now} after {last}");
        last = now;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while calibrated.stats().refinements == 0 {
        assert!(
            Instant::now() < deadline,
            "no refinement: {:?}",
            calibrated.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "KINDS-OK {case} working [{}] failed [{}] bound {} ns",
        stats.kinds_working,
        stats.kinds_failed,
        clock.error_bound_ns()
    );
}
