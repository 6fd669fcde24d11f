//! A fork child reads the clock.
//!
//! The kernel does not copy perf mappings into a fork child; the facade re-maps its page there
//! (`pthread_atfork`). The child reads `perfclock::now_ns()` (which must lie between the
//! parent's readings before `fork` and after `waitpid`), checks it is still in kernel mode, and
//! brackets kernel-stamped records of its own with the facade, sending the results back
//! through a pipe.

use std::io::Read as _;
use std::os::fd::{FromRawFd, OwnedFd};

use perfclock_calib::{GroundTruth, RecordKind};
use perfclock_core::ReadError;

use crate::brackets::{collect, Stats};
use crate::page::Tolerance;
use crate::report::{chain, Report};
use crate::Budget;

/// The child's report: one line of numbers, one of details.
fn child(budget: &Budget, tolerance: Tolerance) -> String {
    let now = perfclock::now_ns();
    let kernel_mode = perfclock::mode() == Some(perfclock::Mode::Kernel);
    let stats = match GroundTruth::open(&RecordKind::ALL) {
        Ok(mut truth) => {
            collect(
                &mut truth,
                budget.child_ops,
                tolerance,
                None,
                || match perfclock::now_ns() {
                    0 => Err(ReadError::TimeZeroUnavailable { capabilities: 0 }),
                    ns => Ok((ns, None)),
                },
            )
        }
        Err(e) => {
            let mut s = Stats::new();
            s.error = Some(format!("GroundTruth::open in the child: {}", chain(&e)));
            s
        }
    };
    format!(
        "{now} {} {} {} {} {} {}\n{}\n",
        u8::from(kernel_mode),
        stats.events,
        stats.violations,
        stats.slips,
        stats.tightest_ns,
        u8::from(stats.ok()),
        stats.details()
    )
}

pub(crate) fn run(report: &mut Report, budget: &Budget, tolerance: Tolerance) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        report.fail(
            "fork",
            format_args!("pipe2: {}", std::io::Error::last_os_error()),
        );
        return;
    }
    // SAFETY: both descriptors are fresh and owned by nothing else.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let before = perfclock::now_ns();
    // SAFETY: the worker threads have all been joined, so the child is a copy of a
    // single-threaded process; it only runs the code below and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(read_end);
        write_child_result_and_exit(&write_end, budget, tolerance);
    }
    drop(write_end);
    if pid < 0 {
        report.fail(
            "fork",
            format_args!("fork: {}", std::io::Error::last_os_error()),
        );
        return;
    }
    let mut text = String::new();
    let read_ok = std::fs::File::from(read_end)
        .read_to_string(&mut text)
        .is_ok();
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let after = perfclock::now_ns();
    let exited = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    report_child(report, &text, (before, after), exited, status, read_ok);
}

/// In the child: writes its result to the pipe and leaves at once.
fn write_child_result_and_exit(write_end: &OwnedFd, budget: &Budget, tolerance: Tolerance) -> ! {
    let text = child(budget, tolerance);
    let mut off = 0;
    while off < text.len() {
        // SAFETY: writes from a live buffer to the pipe we own.
        let n = unsafe {
            libc::write(
                std::os::fd::AsRawFd::as_raw_fd(write_end),
                text[off..].as_ptr().cast(),
                text.len() - off,
            )
        };
        if n <= 0 {
            break;
        }
        off += n as usize;
    }
    // SAFETY: leaves the child at once, without running the parent's atexit handlers or
    // flushing stdio buffers it inherited.
    unsafe { libc::_exit(0) };
}

/// The child's result `text`, read between the parent's readings `parent` (before, after).
fn report_child(
    report: &mut Report,
    text: &str,
    parent: (u64, u64),
    exited: bool,
    status: libc::c_int,
    read_ok: bool,
) {
    let (before, after) = parent;
    let mut lines = text.lines();
    let numbers: Vec<u64> = lines
        .next()
        .unwrap_or("")
        .split(' ')
        .filter_map(|w| w.parse().ok())
        .collect();
    let details = lines.next().unwrap_or("");
    let [child_ns, kernel_mode, events, violations, slips, tightest, ok] = numbers[..] else {
        report.fail(
            "fork",
            format_args!(
                "no result from the child (exited={exited} status={status:#x} read_ok={read_ok})"
            ),
        );
        return;
    };
    let mut stats = Stats::new();
    (
        stats.events,
        stats.violations,
        stats.slips,
        stats.tightest_ns,
    ) = (events, violations, slips, tightest);
    report.add_events(stats.judged(), None);
    let inside = before <= child_ns && child_ns <= after;
    report.check(
        exited && inside && kernel_mode == 1,
        "fork-child-reads",
        format_args!(
            "parent_before={before} child_now_ns={child_ns} parent_after={after} \
             child_kernel_mode={kernel_mode} child_exited_ok={exited}"
        ),
    );
    report.check(
        ok == 1,
        "fork-child-brackets",
        format_args!("read=facade {details}"),
    );
}
