//! The C ABI must not remember a transient `perfclock_init()` failure: a child process lowers
//! its descriptor limit so the clock's `perf_event_open` fails with EMFILE
//! (`PERFCLOCK_E_FD_EXHAUSTED`), raises it again, and the next `perfclock_init()` must open the
//! clock, after which the reading calls work.

use std::time::Duration;

use hostile::{child_case, run_child, watchdog};
use perfclock_ffi::{
    perfclock_init, perfclock_mode, perfclock_now_ns, PERFCLOCK_E_FD_EXHAUSTED, PERFCLOCK_OK,
};
use perfclock_testutil::hostile;

#[test]
fn init_retries_after_a_transient_failure() {
    if child_case().is_some() {
        retry_child();
        return;
    }
    let run = run_child(
        &perfclock_testutil::test_path!(),
        "retry",
        Duration::from_secs(60),
    );
    run.expect_success("RETRY-OK");
}

fn set_fd_limit(soft: u64, hard: u64) {
    let rlimit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: a valid, initialised struct.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

fn retry_child() {
    watchdog(50);
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    // SAFETY: a NUL-terminated path; the descriptor is closed at once.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open /dev/null");
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    // No free descriptor below the soft limit; the hard limit stays, so it can be raised again.
    set_fd_limit(fd as u64, old.rlim_max);
    assert_eq!(perfclock_init(), PERFCLOCK_E_FD_EXHAUSTED);
    assert_eq!(
        perfclock_init(),
        PERFCLOCK_E_FD_EXHAUSTED,
        "still exhausted"
    );
    assert_eq!(perfclock_now_ns(), 0);
    set_fd_limit(old.rlim_cur, old.rlim_max);
    assert_eq!(perfclock_init(), PERFCLOCK_OK, "the failure was remembered");
    assert_ne!(perfclock_mode(), 0);
    assert_ne!(perfclock_now_ns(), 0);
    // The Rust API sees the same process-wide clock.
    assert!(perfclock::global().is_some());
    assert_eq!(perfclock_init(), PERFCLOCK_OK);
    println!("RETRY-OK");
}
