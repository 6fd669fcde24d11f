//! `perf_event_open` refused: a child process installs a seccomp filter that makes
//! `perf_event_open` fail with EACCES, EPERM, then ENOSYS (one child each). `init()` must return
//! the matching typed error with a message that says what to change, the signal-safe calls must
//! answer "no clock", and nothing may panic.

use std::time::Duration;

use hostile::{child_case, fail_with_errno, install_filter, run_child_with, watchdog};
use perfclock::{Clock, Error};
use perfclock_os::{ErrorKind, EventAttr};
use perfclock_testutil::hostile;

#[test]
fn perf_event_open_refused_is_a_typed_error() {
    let _turn = perfclock_testutil::one_at_a_time();
    if let Some(case) = child_case() {
        refused_child(&case);
        return;
    }
    let test = perfclock_testutil::test_path!();
    for errno in ["EACCES", "EPERM", "ENOSYS"] {
        // No published offset or shared page: with one, paravirt and shared mode open without a
        // perf event, and the refusal would not be seen (a machine whose root published its
        // offset, as `perfclock serve --once` does, runs this test too).
        let run = run_child_with(
            &test,
            errno,
            Duration::from_secs(30),
            &[
                ("PERFCLOCK_PUBLISHED_OFFSET", "off".to_owned()),
                ("PERFCLOCK_SHARED_PAGE", "off".to_owned()),
            ],
        );
        run.expect_success(&format!("REFUSED-OK {errno}"));
    }
}

fn errno_of(name: &str) -> i32 {
    match name {
        "EACCES" => libc::EACCES,
        "EPERM" => libc::EPERM,
        "ENOSYS" => libc::ENOSYS,
        other => panic!("unknown case {other}"),
    }
}

fn refused_child(name: &str) {
    watchdog(20);
    let errno = errno_of(name);
    // Only this thread (and threads it spawns later) sees the filter.
    install_filter(&fail_with_errno(libc::SYS_perf_event_open, errno));
    // The filter works: a raw perf_event_open now fails with exactly this errno.
    let mut attr = *EventAttr::dummy().as_raw();
    // SAFETY: a valid attr; the call is refused by the filter before the kernel looks at it.
    let fd = unsafe { perf_event_open_sys::perf_event_open(&mut attr, 0, -1, -1, 0) };
    assert_eq!(fd, -1, "the seccomp filter did not refuse perf_event_open");
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(errno));

    let error = perfclock::init().expect_err("init must fail when perf_event_open is refused");
    let message = error.to_string();
    println!("{name}: init() -> {error:?}\n  message: {message}");
    match (errno, &error) {
        (libc::EACCES | libc::EPERM, Error::PerfEvent(sys))
            if sys.kind() == ErrorKind::PermissionDenied =>
        {
            assert_eq!(sys.errno(), errno);
            // The kind the C ABI maps to PERFCLOCK_E_PERMISSION_DENIED (-1).
            assert_eq!(error.sys_error(), Some(sys));
            assert!(message.contains("perf_event_open refused"), "{message}");
            let os = std::io::Error::from_raw_os_error(errno).to_string();
            assert!(
                message.contains(&os),
                "the system's text for {name} missing: {message}"
            );
            // What to change: the filter, the paranoid level or the capability.
            assert!(
                message.contains("seccomp") && message.contains("perf_event_paranoid"),
                "the message does not say what to change: {message}"
            );
        }
        (libc::ENOSYS, Error::PerfEvent(sys)) if sys.kind() == ErrorKind::NoPerfSupport => {
            assert_eq!(sys.errno(), errno);
            // The kind the C ABI maps to PERFCLOCK_E_NO_PERF_SUPPORT (-2).
            assert_eq!(error.sys_error(), Some(sys));
            let os = std::io::Error::from_raw_os_error(errno).to_string();
            assert!(
                message.contains(&os),
                "the system's text for ENOSYS missing: {message}"
            );
            assert!(
                message.contains("CONFIG_PERF_EVENTS") && message.contains("seccomp"),
                "the message does not say what to change: {message}"
            );
        }
        _ => panic!("{name}: wrong error kind {error:?}"),
    }
    // The failure is remembered and the signal-safe calls say "no clock".
    assert_eq!(perfclock::init().err(), Some(error.clone()));
    assert_eq!(perfclock::try_now_ns(), None);
    assert_eq!(perfclock::now_ns(), 0);
    assert_eq!(perfclock::mode(), None);
    assert_eq!(perfclock::error_bound_ns(), u64::MAX);
    // Opening a clock directly fails the same way, in both constructors.
    assert_eq!(Clock::open().err(), Some(error.clone()));
    assert_eq!(Clock::open_kernel_only().err(), Some(error));
    println!("REFUSED-OK {name}");
}
