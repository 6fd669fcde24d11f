//! Why a clock could not be opened ([`Error`]), a snapshot taken ([`SnapshotError`], Linux), or
//! a shared page refused ([`Refusal`], Linux); each message says what to change. Paravirt mode's
//! refusals are beside the code that raises them, under [`crate::paravirt`].
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors").

use std::fmt;

#[cfg(all(feature = "calibrated", target_os = "linux"))]
use perfclock_calib::CalibError;
#[cfg(target_os = "linux")]
use perfclock_core::PageDefect;
use perfclock_core::ReadError;
#[cfg(target_os = "linux")]
use perfclock_os::SysError;

use crate::diagnosis::Withheld;
#[cfg(target_os = "linux")]
use crate::kernel::MAX_KERNEL_PAGES;

// The one printer of an error chain: in perfclock-core, which the test helpers can depend on.
pub use perfclock_core::error_chain;

/// Why [`crate::Clock::open`] (or [`crate::init`]) gave no clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `perf_event_open` or the page's `mmap` failed: refused (paranoid level, capabilities,
    /// seccomp), no perf support, or out of file descriptors.
    #[cfg(target_os = "linux")]
    PerfEvent(SysError),
    /// The kernel's page does not publish the conversion (`cap_user_time_zero = 0`) and
    /// kernel-exact mode was required.
    KernelWithholdsTime(Withheld),
    /// The kernel's page could not be read or publishes parameters that make no sense.
    Page(ReadError),
    /// No usable cycle counter: none on this architecture, or (x86_64) this thread may not read
    /// the TSC (`prctl(PR_SET_TSC, PR_TSC_SIGSEGV)`), so every read would die with SIGSEGV.
    Unsupported,
    /// Too many kernel-mode clocks are open at once.
    #[cfg(target_os = "linux")]
    TooManyClocks,
    /// Neither mode could be had: the kernel withholds the parameters and calibration failed.
    #[cfg(all(feature = "calibrated", target_os = "linux"))]
    Calibration {
        /// Why kernel mode was not possible.
        withheld: Box<Withheld>,
        /// Why calibration failed.
        reason: CalibError,
    },
    /// A project variable holds a value that is none of its spellings (`PERFCLOCK_PARAVIRT=x`).
    #[cfg(target_os = "linux")]
    Environment(perfclock_os::BadSwitch),
}

impl Error {
    /// The failed system call behind this error: the clock's own `perf_event_open`/`mmap`, or
    /// the one that made calibration fail. Its [`SysError::kind`] says what to fix.
    #[cfg(target_os = "linux")]
    pub fn sys_error(&self) -> Option<&SysError> {
        match self {
            Error::PerfEvent(error) => Some(error),
            #[cfg(all(feature = "calibrated", target_os = "linux"))]
            Error::Calibration {
                reason: CalibError::Open(error),
                ..
            } => Some(error),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(target_os = "linux")]
            // Transparent: the system call's own message, which names the errno and the knob.
            Error::PerfEvent(error) => error.fmt(f),
            Error::KernelWithholdsTime(withheld) => withheld.fmt(f),
            Error::Page(_) => f.write_str("the kernel's perf page is unusable"),
            // On Linux x86_64 the TSC always exists: only a prctl can make it unreadable.
            #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
            Error::Unsupported => f.write_str(
                "this thread may not read the TSC: prctl(PR_SET_TSC, PR_TSC_SIGSEGV) was called \
                 by it or by the thread that created it, so every counter read would die with \
                 SIGSEGV; call prctl(PR_SET_TSC, PR_TSC_ENABLE) before opening the clock, or open \
                 it from a thread that may read the TSC",
            ),
            #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
            Error::Unsupported => f.write_str(
                "perfclock supports x86_64 (TSC) and aarch64 (CNTVCT_EL0) on Linux only",
            ),
            #[cfg(target_os = "linux")]
            Error::TooManyClocks => write!(
                f,
                "{MAX_KERNEL_PAGES} kernel-mode clocks are open already: share one (`perfclock::init`)"
            ),
            #[cfg(all(feature = "calibrated", target_os = "linux"))]
            Error::Calibration { withheld, .. } => write!(
                f,
                "kernel mode is not possible: {} Calibrated mode failed too",
                withheld.without_calibration_advice()
            ),
            // Transparent: the variable, its value and the spellings it takes.
            #[cfg(target_os = "linux")]
            Error::Environment(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // Transparent: its Display is this one's, so its causes come next.
            #[cfg(target_os = "linux")]
            Error::PerfEvent(error) => std::error::Error::source(error),
            Error::Page(error) => Some(error),
            Error::KernelWithholdsTime(_) | Error::Unsupported => None,
            #[cfg(target_os = "linux")]
            Error::TooManyClocks => None,
            #[cfg(all(feature = "calibrated", target_os = "linux"))]
            Error::Calibration { reason, .. } => Some(reason),
            #[cfg(target_os = "linux")]
            Error::Environment(_) => None,
        }
    }
}

/// Why a snapshot could not be taken.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The process-wide clock could not be opened ([`snapshot`](crate::snapshot) only).
    Clock(Error),
    /// The perf clock could not be read.
    Read(ReadError),
    /// No user-space counter to bracket with on this platform.
    NoCounter,
    /// `clock_gettime` failed for one of the clocks (a seccomp policy can refuse it).
    ClockGettime {
        /// `"CLOCK_MONOTONIC"`, `"CLOCK_BOOTTIME"` or `"CLOCK_REALTIME"`.
        clock: &'static str,
        /// The `errno` it set.
        errno: i32,
    },
    /// `CLOCK_REALTIME` is set before 1970 and has no nanosecond value in a `u64`.
    RealtimeBeforeEpoch,
}

#[cfg(target_os = "linux")]
impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Clock(_) => f.write_str("no perf clock to snapshot"),
            SnapshotError::Read(_) => f.write_str("reading the perf clock failed"),
            SnapshotError::NoCounter => {
                f.write_str("no user-space counter on this platform to bracket the clocks with")
            }
            SnapshotError::ClockGettime { clock, errno } => write!(
                f,
                "clock_gettime({clock}) failed with errno {errno}: allow clock_gettime in the \
                 process's seccomp policy"
            ),
            SnapshotError::RealtimeBeforeEpoch => {
                f.write_str("CLOCK_REALTIME is before 1970: set the system time")
            }
        }
    }
}

#[cfg(target_os = "linux")]
impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SnapshotError::Clock(e) => Some(e),
            SnapshotError::Read(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(all(test, feature = "calibrated", target_os = "linux"))]
mod tests {
    use super::*;
    use perfclock_core::ParamError;
    use perfclock_os::Op;
    use perfclock_testutil::error_chain::assert_each_cause_once;

    /// Each wrapper says what failed; its cause follows once, down to the system's text and the
    /// knob that fixes it.
    #[test]
    fn each_cause_is_printed_once() {
        let refused = || SysError::new(Op::PerfEventOpen, libc::EACCES);
        let calibration = Error::Calibration {
            withheld: Box::new(Withheld::observe(0)),
            reason: CalibError::Open(refused()),
        };
        let printed = assert_each_cause_once(&calibration);
        assert!(printed.contains("Permission denied"), "{printed}");
        assert!(printed.contains("perf_event_paranoid"), "{printed}");

        let page = Error::Page(ReadError::InvalidParameters(ParamError::ZeroMultiplier));
        let printed = assert_each_cause_once(&page);
        assert!(printed.ends_with("time_mult is 0"), "{printed}");

        let snapshot = SnapshotError::Clock(Error::PerfEvent(refused()));
        let printed = assert_each_cause_once(&snapshot);
        assert_eq!(printed.matches("Permission denied").count(), 1, "{printed}");
        assert!(printed.contains("perf_event_paranoid"), "{printed}");
    }

    /// A failed calibration must not advise the calibrated mode that just failed, but still
    /// name the kernel-mode remedies and the calibration's own reason.
    #[test]
    fn calibration_error_does_not_advise_calibration() {
        let error = Error::Calibration {
            withheld: Box::new(Withheld::observe(0)),
            reason: CalibError::Timeout,
        };
        let message = error_chain(&error);
        assert!(!message.contains("calibrated mode"), "{message}");
        assert!(message.contains("start_timeout"), "{message}");
        assert!(message.contains("no-kvmclock"), "{message}");
        // The plain diagnosis (kernel-only open) still offers calibrated mode.
        assert!(Withheld::observe(0).to_string().contains("calibrated mode"));
    }

    /// A thread limit (pthread_create's EAGAIN) names the limits, not "WouldBlock".
    #[test]
    fn thread_limit_names_ulimit_u() {
        let error = Error::Calibration {
            withheld: Box::new(Withheld::observe(0)),
            reason: CalibError::Spawn(std::io::ErrorKind::WouldBlock),
        };
        let message = error_chain(&error);
        assert!(message.contains("ulimit -u"), "{message}");
        assert!(!message.contains("WouldBlock"), "{message}");
    }
}

/// Why a shared page (`perfclock serve`'s, see [`crate::shared_page`]) was not used.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// It could not be opened (absent, a symlink, no permission).
    Open {
        /// The `std::io::ErrorKind`.
        kind: std::io::ErrorKind,
        /// The OS error number, if any.
        errno: Option<i32>,
    },
    /// Not a regular file.
    NotRegular,
    /// Owned by a uid other than root's and this process's: its owner could shift our clock.
    OtherOwner {
        /// The file's owner.
        uid: u32,
    },
    /// Writable by group or others: anyone in them could shift our clock.
    Writable {
        /// The file's mode bits.
        mode: u32,
    },
    /// The boot id could not be read, so counter values cannot be matched to this boot.
    NoBootId,
    /// The bytes are not a usable page (truncated, garbage, another version or boot, stale).
    Defect(PageDefect),
    /// The file is a valid page, but no server hands out its live copy on the socket beside it
    /// (`PATH.sock`), or what came is not a sealed page.
    NoServer {
        /// The OS error number of the connection, if any.
        errno: Option<i32>,
    },
}

#[cfg(target_os = "linux")]
impl Refusal {
    /// Whether the page simply is not there (no server was ever started on that path).
    pub fn is_absent(&self) -> bool {
        matches!(
            self,
            Refusal::Open {
                kind: std::io::ErrorKind::NotFound,
                ..
            }
        )
    }

    /// A one-word name of the reason, for scripts and tests.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Open { .. } => "unopenable",
            Refusal::NotRegular => "not-regular",
            Refusal::OtherOwner { .. } => "other-owner",
            Refusal::Writable { .. } => "writable",
            Refusal::NoBootId => "no-boot-id",
            Refusal::NoServer { .. } => "no-server",
            Refusal::Defect(PageDefect::Truncated { .. }) => "truncated",
            Refusal::Defect(PageDefect::Garbage(_)) => "garbage",
            Refusal::Defect(PageDefect::Version { .. }) => "version",
            Refusal::Defect(PageDefect::OtherBoot) => "other-boot",
            Refusal::Defect(PageDefect::Stale { .. }) => "stale",
            Refusal::Defect(PageDefect::Busy) => "busy",
            Refusal::Defect(_) => "defect",
        }
    }
}

#[cfg(target_os = "linux")]
impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Open { kind, errno } => {
                write!(f, "cannot open it without following a symlink ({kind}")?;
                if let Some(errno) = errno {
                    write!(f, ", errno {errno}")?;
                }
                f.write_str(")")
            }
            Refusal::NotRegular => f.write_str("not a regular file"),
            Refusal::OtherOwner { uid } => write!(
                f,
                "owned by uid {uid}, neither root nor this user: its owner could shift this \
                 process's clock"
            ),
            Refusal::Writable { mode } => write!(
                f,
                "mode {:04o} lets group or others write it (and shift this process's clock)",
                mode & 0o7777
            ),
            Refusal::NoBootId => f.write_str("cannot read /proc/sys/kernel/random/boot_id"),
            Refusal::NoServer { errno } => {
                f.write_str("no server hands out the page on its socket (PATH.sock)")?;
                match errno {
                    Some(errno) => write!(f, " (errno {errno}): is `perfclock serve` running?"),
                    None => f.write_str(": is `perfclock serve` running?"),
                }
            }
            Refusal::Defect(defect) => defect.fmt(f),
        }
    }
}

#[cfg(target_os = "linux")]
impl std::error::Error for Refusal {}
