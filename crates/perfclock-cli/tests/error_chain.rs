//! Every cause printed once, and the root cause still printed: `perfclock doctor` and
//! `perfclock serve --once` run where `perf_event_open` fails with EACCES (a seccomp filter, as a
//! container's default profile does), in the modes that reach different error paths, and no line
//! of their output may repeat a cause. Then `perfclock doctor` where no thread can be created
//! (`clone`/`clone3` fail with EAGAIN, as at a thread limit), so calibration fails below the
//! facade's error and its reason is reached only through `source()`.

use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::time::Duration;

use perfclock_testutil::{hostile, Need};

const BIN: &str = env!("CARGO_BIN_EXE_perfclock");
const TEST: &str = "perf_refused_prints_each_cause_once";

/// A command line to run with perf refused: (what, arguments, environment).
type Run = (&'static str, Vec<String>, Vec<(&'static str, String)>);

/// The runs, with their files in `dir`.
fn runs(dir: &std::path::Path) -> Vec<Run> {
    let page = dir.join("page").display().to_string();
    let absent = || {
        (
            "PERFCLOCK_SHARED_PAGE",
            dir.join("absent").display().to_string(),
        )
    };
    vec![
        (
            "doctor, paravirt off",
            vec!["doctor".into()],
            vec![absent(), ("PERFCLOCK_PARAVIRT", "off".into())],
        ),
        ("doctor", vec!["doctor".into()], vec![absent()]),
        (
            "serve --once",
            vec!["serve".into(), "--once".into(), "--path".into(), page],
            vec![absent()],
        ),
    ]
}

#[test]
fn thread_limit_reaches_doctor_through_the_chain() {
    if hostile::child_case().is_some() {
        let again = |nr| hostile::fail_with_errno(nr, libc::EAGAIN);
        hostile::install_filter(&again(libc::SYS_clone3));
        hostile::install_filter(&again(libc::SYS_clone));
        let error = Command::new(BIN)
            .arg("doctor")
            .env("PERFCLOCK_PARAVIRT", "off")
            .env("PERFCLOCK_SHARED_PAGE", "off")
            .exec();
        panic!("exec {BIN}: {error}");
    }
    // Calibration, which this case needs to fail, is tried only where the kernel withholds the
    // conversion and perf events are permitted.
    const NAME: &str = "thread_limit_reaches_doctor_through_the_chain";
    match perfclock::Clock::open_kernel_only() {
        Err(perfclock::Error::KernelWithholdsTime(_)) => {}
        Ok(_) => {
            let why = "the kernel publishes the conversion: no calibration to fail";
            return perfclock_testutil::skip(NAME, Need::CalibratedMode, why);
        }
        Err(error) => return perfclock_testutil::skip(NAME, Need::Perf, error),
    }
    let run = hostile::run_child(NAME, "doctor without threads", Duration::from_secs(120));
    let output = format!("{}{}", run.stdout, run.stderr);
    eprintln!("--- {:?}\n{output}", run.status);
    let line = output
        .lines()
        .find(|line| line.starts_with("perfclock: no clock: "))
        .unwrap_or_else(|| panic!("doctor did not fail to open the clock:\n{output}"));
    assert!(
        line.contains("Calibrated mode failed too") && line.contains("ulimit -u"),
        "the calibration's reason (the thread limit and its knob) is not printed:\n{line}"
    );
    assert_no_repeated_cause("doctor without threads", line);
}

#[test]
fn perf_refused_prints_each_cause_once() {
    if let Some(case) = hostile::child_case() {
        // The child: perf_event_open refused, then the command in its place.
        let dir = std::env::var_os("H3_DIR").expect("H3_DIR");
        let (_, args, env) = runs(dir.as_ref())
            .into_iter()
            .find(|(what, ..)| *what == case)
            .expect("a known case");
        hostile::install_filter(&hostile::fail_with_errno(
            libc::SYS_perf_event_open,
            libc::EACCES,
        ));
        let error = Command::new(BIN).args(args).envs(env).exec();
        panic!("exec {BIN}: {error}");
    }
    let dir = tempfile::tempdir().unwrap();
    for (what, ..) in runs(dir.path()) {
        let run = hostile::run_child_with(
            TEST,
            what,
            Duration::from_secs(120),
            &[("H3_DIR", dir.path().display().to_string())],
        );
        let output = format!("{}{}", run.stdout, run.stderr);
        eprintln!("--- {what}: {:?}\n{output}", run.status);
        // The setup ran: the command itself answered, and perf was refused.
        assert!(
            output.contains("perfclock"),
            "{what}: no output of the command"
        );
        assert!(
            output.contains("Permission denied") && output.contains("perf_event_paranoid"),
            "{what}: the root cause (EACCES, and the knob) is not printed:\n{output}"
        );
        for line in output.lines() {
            assert_no_repeated_cause(what, line);
        }
    }
}

/// Panics if a `": "`-separated part of `line` (a message of a printed chain) of some length
/// appears twice in it.
fn assert_no_repeated_cause(what: &str, line: &str) {
    let parts: Vec<&str> = line.split(": ").map(str::trim).collect();
    for (at, part) in parts.iter().enumerate() {
        if part.len() < 16 {
            continue;
        }
        assert!(
            !parts[at + 1..].contains(part),
            "{what}: the cause {part:?} is printed twice in:\n{line}"
        );
    }
}
