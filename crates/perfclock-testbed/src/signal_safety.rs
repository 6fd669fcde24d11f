//! The signal-safety proof in kernel mode (`perfclock-signal-safety`, the proof the
//! signal-safety test runs in the modes our machines have): every function documented
//! async-signal-safe, called from a signal handler on a thread whose seccomp filter traps every
//! system call, with the allocator counting. The child is this program again
//! (`/proc/self/exe`, with the proof's role in its environment), so it opens the clock from
//! ordinary code in a fresh process, as an application would. Its clock must open in kernel
//! mode, and every function must make no system call and no allocation and return a sane value;
//! the proof's control (one call and one allocation in the handler) must be counted.

use std::path::Path;

use perfclock_signal_safety::{start, Role, Started};

use crate::guest_fs::{ensure_proc, DumpDir};
use crate::report::Report;

const CHECK: &str = "signal-safety";

pub(crate) fn run(report: &mut Report) {
    let pid1 = std::process::id() == 1;
    if let Err(e) = ensure_proc(pid1) {
        report.fail(CHECK, format_args!("{e}"));
        return;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            report.fail(CHECK, format_args!("this program's path: {e}"));
            return;
        }
    };
    let dir = match DumpDir::create(pid1, "perfclock-testbed-signal-safety") {
        Ok(dir) => dir,
        Err(e) => {
            report.fail(CHECK, format_args!("{e}"));
            return;
        }
    };
    check(report, &exe, &dir.path);
    dir.remove();
}

fn check(report: &mut Report, exe: &Path, dir: &Path) {
    match start(exe, Role::Kernel, &[], dir) {
        Ok(Started::Ready(running)) => {
            let judgement = running.judge();
            for failure in &judgement.failures {
                report.info(format_args!("{CHECK} | {}", one_line(failure)));
            }
            report.check(
                judgement.failures.is_empty(),
                CHECK,
                format_args!("{judgement}"),
            );
        }
        Ok(Started::OtherMode(line)) => report.fail(
            CHECK,
            format_args!("the child's clock did not open in kernel mode: {line}"),
        ),
        Err(error) => report.fail(CHECK, format_args!("{}", one_line(&error))),
    }
}

/// A console line per result: the child's report is quoted in some failures.
fn one_line(text: &str) -> String {
    text.trim_end().replace('\n', " | ")
}
