//! The lazy path for preloaded libraries: a library in `LD_PRELOAD` that opens the
//! clock on first use costs a process that never reads the clock nothing, while one that calls
//! `perfclock_init()` in its constructor opens perf events in every process it is loaded into.
//! Each is built from C against the static library and preloaded into `ls -l /proc/self/fd`,
//! which lists the descriptors of the very process the library was loaded into. Then a small
//! program calls the lazy library's stamp function: its first call opens the clock.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{libraries, CRATE_DIR, NATIVE_LIBS};
use perfclock_testutil::{skip, Need};

/// How `ls -l` shows a perf event's descriptor.
const PERF_FD: &str = "anon_inode:[perf_event]";

const EAGER_C: &str = include_str!("../fixtures/preload_eager.c");

const LAZY_C: &str = include_str!("../fixtures/preload_lazy.c");

const HOST_C: &str = include_str!("../fixtures/preload_host.c");

/// Runs `command`, killing it after 30 s: a hang is a failure, not a stuck CI.
fn run(mut command: Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{command:?} hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("output")
}

/// Compiles `source` into `dir/out`, with `link` after the source (cc links in command-line
/// order).
fn cc(dir: &Path, source: &str, out: &str, link: &[&str]) -> PathBuf {
    let out_path = dir.join(out);
    let c = out_path.with_extension("c");
    std::fs::write(&c, source).expect("write C source");
    let mut command = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    command
        .args(["-O1", "-Wall", "-Werror", "-I"])
        .arg(Path::new(CRATE_DIR).join("include"))
        .arg(&c)
        .args(link)
        .arg("-o")
        .arg(&out_path);
    let output = run(command);
    assert!(
        output.status.success(),
        "cc {out}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    out_path
}

/// A preloadable shared object of `source` with the static library inside, its Rust symbols
/// kept private (as the README says to link one).
fn preload_lib(dir: &Path, source: &str, name: &str) -> PathBuf {
    let archive = libraries().archive;
    let mut link = vec!["-fPIC", "-shared", "-Wl,--exclude-libs,ALL"];
    link.push(archive.to_str().expect("UTF-8 path"));
    link.extend(NATIVE_LIBS);
    cc(dir, source, &format!("{name}.so"), &link)
}

/// `ls -l /proc/self/fd` with `lib` preloaded: the descriptors of the process it was loaded in.
fn fds_with_preload(lib: &Path) -> String {
    let mut ls = Command::new("ls");
    // Calibrated mode keeps perf events open, which is how an init shows here (paravirt mode
    // leaves none).
    ls.args(["-l", "/proc/self/fd/"])
        .env("LD_PRELOAD", lib)
        .env("PERFCLOCK_PARAVIRT", "off");
    let output = run(ls);
    assert!(output.status.success(), "ls: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn preloaded_library_opens_the_clock_on_first_use_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let eager = preload_lib(dir.path(), EAGER_C, "eager");
    let lazy = preload_lib(dir.path(), LAZY_C, "lazy");

    let fds = fds_with_preload(&eager);
    if !fds.contains(PERF_FD) {
        skip(
            "preloaded_library_opens_the_clock_on_first_use_only",
            Need::Perf,
            format_args!(
                "perfclock_init() opened no perf event here (perf refused?), so the lazy path \
                 cannot be told apart\n{fds}"
            ),
        );
        return;
    }
    let fds = fds_with_preload(&lazy);
    assert!(
        !fds.contains(PERF_FD),
        "the lazy library opened perf events in a process that never read the clock:\n{fds}"
    );

    let host = cc(dir.path(), HOST_C, "host", &["-ldl"]);
    let mut command = Command::new(&host);
    command.env("LD_PRELOAD", &lazy);
    let output = run(command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success() && stdout.contains("STAMPS "),
        "the lazy library's first stamp did not open the clock: {output:?}"
    );
}
