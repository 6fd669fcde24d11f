//! Why a clock could not be opened ([`Error`]), a snapshot taken ([`SnapshotError`], Linux), or
//! a source of paravirt mode's offset accepted ([`ParavirtRefusal`](crate::paravirt::ParavirtRefusal)
//! and its causes); each message says what to change.
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors").

use std::fmt;
#[cfg(target_os = "linux")]
use std::io;
#[cfg(target_os = "linux")]
use std::path::PathBuf;

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
#[cfg(target_os = "linux")]
use crate::paravirt::kmsg::KMSG_PATH;
#[cfg(target_os = "linux")]
use crate::paravirt::page::VvarLayout;
#[cfg(all(feature = "calibrated", target_os = "linux"))]
use crate::paravirt::{OffsetSource, MAX_BRACKETS_BOUND_NS};
#[cfg(all(feature = "calibrated", target_os = "linux"))]
use perfclock_calib::pvclock_offset::{OffsetError, OffsetIntersection};
#[cfg(target_os = "linux")]
use perfclock_core::PvclockError;

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

#[cfg(target_os = "linux")]
/// Why no pvclock page was found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PvclockPageError {
    /// `/proc/self/maps` or `/sys/devices/system/cpu/online` could not be read.
    Unreadable {
        /// The file.
        path: &'static str,
        /// The errno.
        errno: i32,
    },
    /// No `[vvar_vclock]` or `[vvar]` mapping: not x86_64 Linux, or a vDSO disabled (`vdso=0`).
    NoVvar,
    /// The candidate page is not populated (`EFAULT` from the probe): kvm-clock's vDSO mode was
    /// never used in this boot, or this is no KVM guest.
    NotPopulated {
        /// Where it was looked for.
        layout: VvarLayout,
    },
    /// The probe's system call failed for another reason than the page, or cannot tell a
    /// missing page here (it did not say `EFAULT` for an address never mapped).
    Probe {
        /// The errno.
        errno: i32,
    },
    /// An entry is not a usable pvclock entry.
    Entry {
        /// Where it was looked for.
        layout: VvarLayout,
        /// The vCPU whose entry it is.
        vcpu: usize,
        /// What is wrong with it.
        error: PvclockError,
    },
    /// vCPU `vcpu`'s entry describes another clock than vCPU 0's (`tsc_timestamp`,
    /// `system_time`, `tsc_to_system_mul`, `tsc_shift`), in every copy.
    EntriesDiffer {
        /// The vCPU.
        vcpu: usize,
    },
}

#[cfg(target_os = "linux")]
impl fmt::Display for PvclockPageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PvclockPageError::Unreadable { path, errno } => write!(
                f,
                "{path} is unreadable ({})",
                io::Error::from_raw_os_error(*errno)
            ),
            PvclockPageError::NoVvar => {
                f.write_str("no [vvar_vclock] or [vvar] mapping in /proc/self/maps (no vDSO?)")
            }
            PvclockPageError::NotPopulated { layout } => write!(
                f,
                "the {layout} is not populated (kvm-clock's vDSO mode never used: not a KVM \
                 guest, or booted with another clocksource)"
            ),
            PvclockPageError::Probe { errno } => write!(
                f,
                "the probe (rt_sigprocmask reading the page) failed or cannot tell a missing \
                 page here ({})",
                io::Error::from_raw_os_error(*errno)
            ),
            PvclockPageError::Entry {
                layout,
                vcpu,
                error,
            } => write!(f, "vCPU {vcpu}'s entry in the {layout}: {error}"),
            PvclockPageError::EntriesDiffer { vcpu } => write!(
                f,
                "vCPU {vcpu}'s pvclock entry differs from vCPU 0's (no KVM master clock)"
            ),
        }
    }
}

#[cfg(target_os = "linux")]
impl std::error::Error for PvclockPageError {}

#[cfg(target_os = "linux")]
/// Why the kernel log gave no offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KmsgError {
    /// `/dev/kmsg` could not be opened or read (errno): `kernel.dmesg_restrict = 1` without
    /// `CAP_SYSLOG`, or a container without the device.
    Unreadable {
        /// The errno.
        errno: i32,
    },
    /// No `kvm-clock: using sched offset of N cycles` from the kernel: not kvm-clock's
    /// sched_clock, or the record was overwritten since boot.
    NoKvmSchedOffset,
    /// No `sched_clock: Marking stable` from the kernel (never stable, or overwritten).
    NoMarkingStable,
    /// `sched_clock: Marking unstable` after the last `Marking stable`.
    MarkedUnstable,
    /// A `Marking stable (a, b)->(c, d)` with `d != a + b - c`: not the line this parser knows.
    Inconsistent([i64; 4]),
    /// The difference does not fit an `i64`.
    OutOfRange,
}

#[cfg(target_os = "linux")]
impl std::fmt::Display for KmsgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KmsgError::Unreadable { errno } => write!(
                f,
                "{KMSG_PATH} is unreadable ({}; kernel.dmesg_restrict = 1 needs CAP_SYSLOG)",
                io::Error::from_raw_os_error(*errno)
            ),
            KmsgError::NoKvmSchedOffset => f.write_str(
                "the kernel log has no 'kvm-clock: using sched offset' record (not a kvm-clock \
                 sched_clock, or the record was overwritten since boot)",
            ),
            KmsgError::NoMarkingStable => f.write_str(
                "the kernel log has no 'sched_clock: Marking stable' record (overwritten since \
                 boot, or sched_clock never stable)",
            ),
            KmsgError::MarkedUnstable => f.write_str(
                "the kernel log says 'sched_clock: Marking unstable' after 'Marking stable'",
            ),
            KmsgError::Inconsistent([a, b, c, d]) => write!(
                f,
                "the kernel log's 'Marking stable ({a}, {b})->({c}, {d})' has d != a + b - c"
            ),
            KmsgError::OutOfRange => f.write_str("the logged offsets' difference overflows"),
        }
    }
}

#[cfg(target_os = "linux")]
impl std::error::Error for KmsgError {}

#[cfg(target_os = "linux")]
/// Why a source of `C` (or the page) was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParavirtRefusal {
    /// No usable pvclock page; `source()` says why.
    Page(PvclockPageError),
    /// The page's entry became unreadable or unusable; `source()` says why.
    Entry(PvclockError),
    /// A published offset file was refused (its trust checks, format or boot); `source()` says
    /// why.
    Published {
        /// The file.
        path: PathBuf,
        /// Why it was refused.
        refusal: Refusal,
    },
    /// The kernel log gave no `C`; `source()` says why.
    KernelLog(KmsgError),
    /// Brackets could not be taken or contradict every `C`; `source()` says why.
    #[cfg(feature = "calibrated")]
    Brackets(OffsetError),
    /// A `C` from `source` lies outside the brackets' intersection.
    #[cfg(feature = "calibrated")]
    OutsideBrackets {
        /// Where the refused `C` came from.
        source: OffsetSource,
        /// The refused `C`, ns.
        offset_ns: i64,
        /// The brackets' intersection.
        intersection: OffsetIntersection,
    },
    /// Brackets alone pin `C` only to more than [`MAX_BRACKETS_BOUND_NS`].
    #[cfg(feature = "calibrated")]
    BracketsTooWide(OffsetIntersection),
    /// Built without the `calibrated` feature: no brackets to check a `C` against.
    NoBrackets,
}

#[cfg(target_os = "linux")]
impl fmt::Display for ParavirtRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParavirtRefusal::Page(_) => f.write_str("no usable pvclock page"),
            ParavirtRefusal::Entry(_) => f.write_str("the pvclock entry is unusable"),
            ParavirtRefusal::Published { path, .. } => {
                write!(f, "the published offset {} was refused", path.display())
            }
            ParavirtRefusal::KernelLog(_) => f.write_str("no offset from the kernel log"),
            #[cfg(feature = "calibrated")]
            ParavirtRefusal::Brackets(_) => f.write_str("no offset from kernel-stamped brackets"),
            #[cfg(feature = "calibrated")]
            ParavirtRefusal::OutsideBrackets {
                source,
                offset_ns,
                intersection,
            } => write!(
                f,
                "the offset {offset_ns} ns from {source} lies outside the kernel-stamped \
                 brackets' intersection {intersection}"
            ),
            #[cfg(feature = "calibrated")]
            ParavirtRefusal::BracketsTooWide(intersection) => write!(
                f,
                "kernel-stamped brackets pin the offset only to {intersection}, wider than \
                 2 x {MAX_BRACKETS_BOUND_NS} ns"
            ),
            ParavirtRefusal::NoBrackets => f.write_str(
                "built without the `calibrated` feature: no brackets to check an offset against",
            ),
        }
    }
}

#[cfg(target_os = "linux")]
impl std::error::Error for ParavirtRefusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ParavirtRefusal::Page(error) => Some(error),
            ParavirtRefusal::Entry(error) => Some(error),
            ParavirtRefusal::Published { refusal, .. } => Some(refusal),
            ParavirtRefusal::KernelLog(error) => Some(error),
            #[cfg(feature = "calibrated")]
            ParavirtRefusal::Brackets(error) => Some(error),
            _ => None,
        }
    }
}

#[cfg(target_os = "linux")]
/// Why the page could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MapError {
    /// `perf_event_open` or `mmap` failed.
    Open(SysError),
    /// [`MAX_KERNEL_PAGES`] kernel-mode clocks are open already.
    TooManyClocks,
}
