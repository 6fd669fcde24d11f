//! The packaged `perfclock doctor` on this kernel: when the test bed boots with a package
//! (`PERFCLOCK_TESTBED_PACKAGE`, tests/e2e/testbed/run.sh), the kernel command line names its binary
//! in `TESTBED_PACKAGE_DOCTOR` and the guest's libraries (the binary's loader, libc, libgcc_s,
//! copied from the toolchain's sysroot) in `TESTBED_PACKAGE_LIBS`. The doctor must exit 0, say
//! it is in kernel mode and count 0 violations among its kernel stamps.

use std::process::Command;

use crate::guest_fs;
use crate::report::Report;

/// The kernel command line's name for the packaged binary (unset: no package in this guest).
const DOCTOR_ENV: &str = "TESTBED_PACKAGE_DOCTOR";
/// The directory of the libraries the packaged binary loads.
const LIBS_ENV: &str = "TESTBED_PACKAGE_LIBS";

pub(crate) fn run(report: &mut Report) {
    let Some(doctor) = std::env::var_os(DOCTOR_ENV) else {
        return;
    };
    // What a dynamically linked program started by PID 1 of an initramfs expects: /dev/null
    // (spawning with a null stdin opens it), /proc and /sys (glibc's CPU count, perf).
    let pid1 = std::process::id() == 1;
    for mounted in [
        guest_fs::ensure_devtmpfs(pid1),
        guest_fs::ensure_proc(pid1),
        guest_fs::ensure_sysfs(pid1),
    ] {
        if let Err(error) = mounted {
            report.fail("package-doctor", format_args!("{error}"));
            return;
        }
    }
    let mut command = Command::new(&doctor);
    command.arg("doctor");
    if let Some(libs) = std::env::var_os(LIBS_ENV) {
        command.env("LD_LIBRARY_PATH", libs);
    }
    let output = match command.output() {
        Ok(output) => output,
        Err(error) => {
            report.fail(
                "package-doctor",
                format_args!("cannot run {} doctor: {error}", doctor.to_string_lossy()),
            );
            return;
        }
    };
    let text = String::from_utf8_lossy(&output.stdout);
    for line in text
        .lines()
        .chain(String::from_utf8_lossy(&output.stderr).lines())
    {
        println!("TESTBED INFO package-doctor | {line}");
    }
    let verdict = judge(&text);
    let ok = output.status.success() && verdict.kernel_mode && verdict.violations == Some(0);
    report.check(
        ok,
        "package-doctor",
        format_args!(
            "binary={} status={} kernel_mode={} stamps={} violations={}",
            doctor.to_string_lossy(),
            output.status,
            verdict.kernel_mode,
            verdict.stamps.map_or("-".to_owned(), |n| n.to_string()),
            verdict.violations.map_or("-".to_owned(), |n| n.to_string()),
        ),
    );
}

/// What the doctor's output says.
#[derive(Debug, PartialEq, Eq)]
struct Verdict {
    /// A `mode: kernel` line.
    kernel_mode: bool,
    /// From `N kernel stamps, error bound B ns: V violations ...`.
    stamps: Option<u64>,
    violations: Option<u64>,
}

fn judge(text: &str) -> Verdict {
    let kernel_mode = text.lines().any(|line| line.starts_with("mode: kernel"));
    let counts = text.lines().find_map(|line| {
        let (stamps, rest) = line.split_once(" kernel stamps, ")?;
        let (_, rest) = rest.split_once(": ")?;
        let (violations, _) = rest.split_once(" violations")?;
        Some((stamps.trim().parse().ok()?, violations.trim().parse().ok()?))
    });
    Verdict {
        kernel_mode,
        stamps: counts.map(|(stamps, _)| stamps),
        violations: counts.map(|(_, violations)| violations),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mode_and_violations_from_the_doctors_output() {
        let kernel = "perfclock doctor (cntvct, aarch64)\nmode: kernel — the kernel publishes\n\
                      60000 kernel stamps, error bound 0 ns: 0 violations (worst 0 ns), 0 discarded\n";
        assert_eq!(
            judge(kernel),
            Verdict {
                kernel_mode: true,
                stamps: Some(60000),
                violations: Some(0)
            }
        );
        let calibrated = "mode: calibrated\n\
                          60000 kernel stamps, error bound 473 ns: 3 violations (worst 9 ns)\n";
        assert_eq!(
            judge(calibrated),
            Verdict {
                kernel_mode: false,
                stamps: Some(60000),
                violations: Some(3)
            }
        );
        assert_eq!(
            judge("perfclock: no clock: refused\n"),
            Verdict {
                kernel_mode: false,
                stamps: None,
                violations: None
            }
        );
    }
}
