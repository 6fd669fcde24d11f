//! Compiles `tests/c/abi_test.c` with the system C compiler against `include/perfclock.h` and the
//! static library (then the shared one) this `cargo test` built, and runs it.
//!
//! The libraries are the `staticlib`/`cdylib` artifacts cargo places next to the test binary's
//! `deps/` directory. If they are missing or older than the crate's rlib (e.g. a filtered build),
//! the test builds them with `cargo build -p perfclock-ffi` into the same target directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

const CRATE_DIR: &str = env!("CARGO_MANIFEST_DIR");
/// What Rust's std needs from the C side when a staticlib is linked by a C compiler
/// (`--print native-static-libs` on linux-gnu).
const NATIVE_LIBS: [&str; 7] = [
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// `target/<profile>/`, the directory holding the test binary's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in <target>/<profile>/deps/")
        .to_path_buf()
}

fn modified(path: &Path) -> Option<SystemTime> {
    path.metadata().and_then(|m| m.modified()).ok()
}

/// Newest `deps/libperfclock_ffi-*.rlib`: the library code the test binary itself was built from.
fn newest_rlib(profile: &Path) -> Option<SystemTime> {
    std::fs::read_dir(profile.join("deps"))
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("libperfclock_ffi-") && name.ends_with(".rlib")
        })
        .filter_map(|e| modified(&e.path()))
        .max()
}

/// Paths of the static and shared library, built if they are missing or stale.
fn libraries() -> (PathBuf, PathBuf) {
    let profile = profile_dir();
    let archive = profile.join("libperfclock_ffi.a");
    let shared = profile.join("libperfclock_ffi.so");
    let fresh = |p: &Path| match (modified(p), newest_rlib(&profile)) {
        (Some(lib), Some(rlib)) => lib >= rlib,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if !fresh(&archive) || !fresh(&shared) {
        let target_dir = profile.parent().expect("profile dir has a parent");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "perfclock-ffi"]);
        build.env("CARGO_TARGET_DIR", target_dir);
        if profile.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        eprintln!("building the C libraries: {build:?}");
        let status = build.status().expect("run cargo build");
        assert!(
            status.success(),
            "cargo build -p perfclock-ffi failed: {status}"
        );
    }
    assert!(archive.is_file(), "{} missing", archive.display());
    assert!(shared.is_file(), "{} missing", shared.display());
    (archive, shared)
}

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
}

#[test]
fn c_program_against_static_library() {
    let (archive, _) = libraries();
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perfclock_abi_test_static");
    compile(&exe, &[archive.as_os_str()]);
    let stdout = run(Command::new(&exe), "abi_test (static)");
    check_report(&stdout);
}

#[test]
fn c_program_against_shared_library() {
    let (_, shared) = libraries();
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
