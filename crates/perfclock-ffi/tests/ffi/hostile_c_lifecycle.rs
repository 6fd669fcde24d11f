//! The C ABI's lifecycle in hostile places, as C programs compiled here with the system
//! compiler against the library this `cargo test` built (`tests/c/`), each run in a child
//! process with a watchdog (its own `alarm`, and a kill here), so a hang is a failure, never a
//! stuck run.
//!
//! - A library whose constructor calls `perfclock_init()`, loaded with `dlopen`: the
//!   constructor runs with the dynamic loader's lock held, and the calibration thread blocks on
//!   that lock (registering its thread-local destructors) until `dlopen` returns.
//!   `perfclock_init` must give up after the start timeout with an error code instead of waiting
//!   for the thread for ever, `dlopen` must return, and a `perfclock_init()` after it must
//!   succeed (`dlopen_host.c`, `dlopen_plugin.c`).
//! - A fork child that keeps running: without a refiner its bound must become
//!   unknown, and `perfclock_init()` in the child must start refinement again (`fork_reinit.c`).

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{libraries, CRATE_DIR};
use perfclock_testutil::{skip, Need};

/// Past the programs' own `alarm(60)`: a hang shows as SIGALRM, this is the backstop.
const PROGRAM_TIMEOUT: Duration = Duration::from_secs(90);
/// `PERFCLOCK_OK` and `PERFCLOCK_E_CALIBRATION` of `perfclock.h`.
const PERFCLOCK_OK: i32 = 0;
const PERFCLOCK_E_CALIBRATION: i32 = -9;

fn compile(args: &[&std::ffi::OsStr], what: &str) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut command = Command::new(cc);
    command
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(Path::new(CRATE_DIR).join("include"))
        .args(args);
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {command:?}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Runs `command` with a backstop timeout; returns its stdout, failing unless it exited 0.
fn run_watched(command: &mut Command, what: &str) -> String {
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the program") {
            break status;
        }
        if started.elapsed() > PROGRAM_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} hung: killed after {PROGRAM_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    let _ = child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout);
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr);
    println!("--- {what}\n{stdout}{stderr}");
    assert!(
        status.success(),
        "{what} failed ({status:?}; SIGALRM is a hang)\n{stdout}{stderr}"
    );
    stdout
}

fn field(stdout: &str, key: &str) -> Option<i64> {
    stdout.lines().find_map(|line| {
        line.strip_prefix(key)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn init_in_a_dlopened_constructor_returns_instead_of_hanging() {
    let shared = libraries().shared;
    let lib_dir = shared.parent().expect("library dir");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let plugin = out.join("libperfclock_dlopen_plugin.so");
    let host = out.join("perfclock_dlopen_host");
    let rpath = format!("-Wl,-rpath,{}", lib_dir.display());
    let tests_c = Path::new(CRATE_DIR).join("tests/c");
    compile(
        &[
            "-shared".as_ref(),
            "-fPIC".as_ref(),
            tests_c.join("dlopen_plugin.c").as_os_str(),
            shared.as_os_str(),
            rpath.as_ref(),
            "-o".as_ref(),
            plugin.as_os_str(),
        ],
        "compile dlopen_plugin.c",
    );
    compile(
        &[
            tests_c.join("dlopen_host.c").as_os_str(),
            "-ldl".as_ref(),
            "-o".as_ref(),
            host.as_os_str(),
        ],
        "compile dlopen_host.c",
    );

    // Calibrated mode's thread is what a dlopen constructor must not wait for.
    let stdout = run_watched(
        Command::new(&host)
            .arg(&plugin)
            .env("PERFCLOCK_PARAVIRT", "off"),
        "dlopen host",
    );
    let in_constructor = field(&stdout, "CONSTRUCTOR-INIT").expect("constructor's result");
    // Kernel mode starts no thread, so it succeeds even there; calibrated mode gives up.
    assert!(
        [PERFCLOCK_OK, PERFCLOCK_E_CALIBRATION].contains(&(in_constructor as i32)),
        "constructor's perfclock_init returned {in_constructor}"
    );
    assert_eq!(
        field(&stdout, "INIT-AFTER-DLOPEN"),
        Some(i64::from(PERFCLOCK_OK)),
        "perfclock_init after dlopen returned"
    );
    if in_constructor == i64::from(PERFCLOCK_OK) {
        skip(
            "the calibrated-mode path of init in a dlopen constructor",
            Need::CalibratedMode,
            "the clock opened in kernel mode, which starts no thread",
        );
    }
}

#[test]
fn init_in_a_fork_child_restarts_refinement() {
    let shared = libraries().shared;
    let lib_dir = shared.parent().expect("library dir");
    let program = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perfclock_fork_reinit");
    let rpath = format!("-Wl,-rpath,{}", lib_dir.display());
    compile(
        &[
            Path::new(CRATE_DIR)
                .join("tests/c/fork_reinit.c")
                .as_os_str(),
            shared.as_os_str(),
            rpath.as_ref(),
            "-o".as_ref(),
            program.as_os_str(),
        ],
        "compile fork_reinit.c",
    );
    let stdout = run_watched(
        Command::new(&program).env("PERFCLOCK_PARAVIRT", "off"),
        "fork_reinit",
    );
    let mode = field(&stdout, "MODE");
    if mode != Some(2) {
        skip(
            "init_in_a_fork_child_restarts_refinement",
            Need::CalibratedMode,
            format_args!("MODE {mode:?} (2 is calibrated), so no refiner"),
        );
        return;
    }
    assert_eq!(
        field(&stdout, "CHILD-BOUND-FROZEN"),
        None,
        "a frozen fork child claimed a finite bound (u64::MAX does not fit the i64 field)"
    );
    assert!(
        stdout.contains(&format!("CHILD-BOUND-FROZEN {}", u64::MAX)),
        "{stdout}"
    );
    assert_eq!(field(&stdout, "CHILD-INIT"), Some(i64::from(PERFCLOCK_OK)));
    let resumed = field(&stdout, "CHILD-BOUND-RESUMED").expect("a finite bound after init");
    assert!(resumed > 0, "{stdout}");
    assert_eq!(field(&stdout, "CHILD-WENT-BACK"), Some(0), "{stdout}");
}
