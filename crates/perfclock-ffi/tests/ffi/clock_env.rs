//! `perfclock_jitdump_open` and `perfclock_markers_open` take their clock from the environment
//! (`PERFCLOCK_JITDUMP_CLOCK`, `PERFCLOCK_MARKERS_CLOCK`): each case runs in a child
//! process of its own (the environment is process-wide), and a bad value must be
//! `PERFCLOCK_E_INVALID_ARGUMENT` with nothing created, never a silent default.
//!
//! The jitdump cases need the perfclock clock (`SKIPPED` without it, fatal under
//! `PERFCLOCK_REQUIRE_PERF=1`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use perfclock_ffi::{
    perfclock_jitdump_close, perfclock_jitdump_open, perfclock_markers_close,
    perfclock_markers_open, PERFCLOCK_E_INVALID_ARGUMENT, PERFCLOCK_OK,
};
use perfclock_testutil::{hostile, skip, Need};

const DIR_ENV: &str = "PERFCLOCK_TEST_DIR";

fn c_dir() -> CString {
    CString::new(std::env::var_os(DIR_ENV).unwrap().as_bytes()).unwrap()
}

/// In the child: opens a jitdump and prints `RC <code>` and, on success, the sidecar's clock.
fn open_jitdump() {
    let dir = c_dir();
    let mut jd = std::ptr::null_mut();
    // SAFETY: a valid C string and out-pointer.
    let rc = unsafe { perfclock_jitdump_open(dir.as_ptr(), &mut jd) };
    println!("RC {rc}");
    if rc == PERFCLOCK_OK {
        let dir = Path::new(std::ffi::OsStr::from_bytes(dir.as_bytes()));
        let sidecar = dir.join(format!("jit-{}.dump.timeconv", std::process::id()));
        let text = std::fs::read_to_string(sidecar).unwrap();
        let clock = text.lines().find_map(|l| l.strip_prefix("clock=")).unwrap();
        println!("CLOCK {clock}");
        // SAFETY: the handle just opened, closed once.
        assert_eq!(unsafe { perfclock_jitdump_close(jd) }, PERFCLOCK_OK);
    }
}

fn open_markers() {
    let dir = c_dir();
    let mut m = std::ptr::null_mut();
    // SAFETY: a valid C string and out-pointer.
    let rc = unsafe { perfclock_markers_open(dir.as_ptr(), &mut m) };
    println!("RC {rc}");
    if rc == PERFCLOCK_OK {
        // SAFETY: the handle just opened, closed once.
        assert_eq!(unsafe { perfclock_markers_close(m) }, PERFCLOCK_OK);
    }
}

/// Runs `test`'s child with `var=value`; returns its `RC` and `CLOCK` and the files it left.
fn child(test: &str, var: &str, value: &str) -> (i32, Option<String>, usize) {
    // Named by the variable too: the two tests run at once and share some values.
    let dir = std::env::temp_dir().join(format!(
        "perfclock-clock-env-{}-{var}-{value}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let run = hostile::run_child_with(
        test,
        test,
        Duration::from_secs(60),
        &[
            (var, value.to_owned()),
            (DIR_ENV, dir.display().to_string()),
        ],
    );
    assert!(run.status.success(), "{var}={value}: {}", run.stderr);
    let rc = run.field("RC").unwrap().trim().parse().unwrap();
    let clock = run.field("CLOCK").map(|c| c.trim().to_owned());
    let files = std::fs::read_dir(&dir).unwrap().count();
    std::fs::remove_dir_all(&dir).unwrap();
    (rc, clock, files)
}

#[test]
fn jitdump_clock_from_the_environment() {
    let test_path = perfclock_testutil::test_path!();
    let test = test_path.as_str();
    if hostile::child_case().as_deref() == Some(test) {
        return open_jitdump();
    }
    if let Err(error) = perfclock::init() {
        skip(
            test,
            Need::Perf,
            format_args!("no perfclock clock here: {error}"),
        );
        return;
    }
    let var = "PERFCLOCK_JITDUMP_CLOCK";
    for clock in ["arch", "perf", "monotonic"] {
        assert_eq!(
            child(test, var, clock),
            (PERFCLOCK_OK, Some(clock.to_owned()), 2)
        );
    }
    assert_eq!(
        child(test, var, ""),
        (PERFCLOCK_OK, Some("arch".to_owned()), 2)
    );
    for bad in ["Monotonic", "tsc", "perf "] {
        assert_eq!(
            child(test, var, bad),
            (PERFCLOCK_E_INVALID_ARGUMENT, None, 0),
            "{bad:?}"
        );
    }
}

#[test]
fn markers_clock_from_the_environment() {
    let test_path = perfclock_testutil::test_path!();
    let test = test_path.as_str();
    if hostile::child_case().as_deref() == Some(test) {
        return open_markers();
    }
    let var = "PERFCLOCK_MARKERS_CLOCK";
    assert_eq!(child(test, var, "perf"), (PERFCLOCK_OK, None, 1));
    if perfclock::init().is_ok() {
        assert_eq!(child(test, var, "monotonic"), (PERFCLOCK_OK, None, 1));
    }
    for bad in ["arch", "mono", "PERF"] {
        assert_eq!(
            child(test, var, bad),
            (PERFCLOCK_E_INVALID_ARGUMENT, None, 0),
            "{bad:?}"
        );
    }
}
