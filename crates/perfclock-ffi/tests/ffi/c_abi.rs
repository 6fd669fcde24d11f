//! Compiles `tests/c/abi_test.c` with the system C compiler against `include/perfclock.h` and the
//! static library (then the shared one) this `cargo test` built, and runs it.
//!
//! The libraries are the `staticlib`/`cdylib` artifacts cargo places next to the test binary's
//! `deps/` directory, brought up to date with `cargo build -p perfclock-ffi` into the same target
//! directory first (`cargo test` does not update them).

use std::path::Path;
use std::process::Command;

use crate::common::{libraries, CRATE_DIR, NATIVE_LIBS};

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

fn run(mut command: Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("--- {what}: {command:?}\n{stdout}{stderr}");
    assert!(output.status.success(), "{what} failed: {}", output.status);
    stdout
}

fn compile(out: &Path, link: &[&std::ffi::OsStr]) {
    let mut command = Command::new(cc());
    command
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(Path::new(CRATE_DIR).join("include"))
        .arg(Path::new(CRATE_DIR).join("tests/c/abi_test.c"))
        .args(link)
        .args(NATIVE_LIBS)
        .arg("-o")
        .arg(out);
    run(command, "compile abi_test.c");
}

fn check_report(stdout: &str) {
    assert!(
        stdout.contains("# MODE EXERCISED: "),
        "no mode line in output"
    );
    assert!(!stdout.contains("not ok - "), "a check failed");
    let checks = stdout.lines().filter(|l| l.starts_with("ok - ")).count();
    assert!(checks >= 10, "only {checks} checks ran");
    // Without a clock the program checks the "no clock" answers only: say so.
    if let Some(line) = stdout
        .lines()
        .find(|l| l.starts_with("# MODE EXERCISED: none"))
    {
        perfclock_testutil::skip(
            "the C program's checks with a clock",
            perfclock_testutil::Need::Perf,
            line,
        );
    }
}

#[test]
fn c_program_against_static_library() {
    let archive = libraries().archive;
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perfclock_abi_test_static");
    compile(&exe, &[archive.as_os_str()]);
    let stdout = run(Command::new(&exe), "abi_test (static)");
    check_report(&stdout);
}

#[test]
fn c_program_against_shared_library() {
    let shared = libraries().shared;
    let dir = shared.parent().expect("library dir");
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perfclock_abi_test_shared");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    compile(&exe, &[shared.as_os_str(), rpath.as_ref()]);
    let stdout = run(Command::new(&exe), "abi_test (shared)");
    check_report(&stdout);
}

#[test]
fn header_is_self_contained_and_pedantic_c99() {
    let exe_dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let source = exe_dir.join("perfclock_header_only.c");
    std::fs::write(
        &source,
        "#include \"perfclock.h\"\nint main(void) { return 0; }\n",
    )
    .expect("write source");
    let mut command = Command::new(cc());
    command
        .args([
            "-std=c99",
            "-pedantic",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fsyntax-only",
            "-I",
        ])
        .arg(Path::new(CRATE_DIR).join("include"))
        .arg(&source);
    run(command, "compile perfclock.h alone");
}
