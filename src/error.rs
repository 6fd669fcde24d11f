//! Why a clock could not be opened; each message says what to change.

use std::fmt;

use perfclock_calib::calibrator::CalibError;
use perfclock_calib::event::OpenError;
use perfclock_calib::GroundTruthError;
use perfclock_core::ReadError;

use crate::diagnosis::Withheld;
use crate::kernel::MAX_KERNEL_PAGES;

/// Why [`crate::Clock::open`] (or [`crate::init`]) gave no clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `perf_event_open` or the page's `mmap` failed: refused (paranoid level, capabilities,
    /// seccomp), no perf support, or out of file descriptors.
    PerfEvent(OpenError),
    /// The kernel's page does not publish the conversion (`cap_user_time_zero = 0`) and
    /// kernel-exact mode was required.
    KernelWithholdsTime(Withheld),
    /// The kernel's page could not be read or publishes parameters that make no sense.
    Page(ReadError),
    /// No supported cycle counter on this architecture.
    Unsupported,
    /// Too many kernel-mode clocks are open at once.
    TooManyClocks,
    /// Neither mode could be had: the kernel withholds the parameters and calibration failed.
    Calibration {
        /// Why kernel mode was not possible.
        withheld: Box<Withheld>,
        /// Why calibration failed.
        reason: CalibError,
    },
}

impl Error {
    /// A stable small integer per kind, for the C ABI. A calibration that failed because its
    /// perf events could not be opened reports the open error's code: that is what to fix.
    pub fn code(&self) -> i32 {
        match self {
            Error::PerfEvent(open)
            | Error::Calibration {
                reason: CalibError::GroundTruth(GroundTruthError::Open(open)),
                ..
            } => match open {
                OpenError::PermissionDenied { .. } => -1,
                OpenError::NoPerfSupport { .. } => -2,
                OpenError::FdExhausted { .. } => -3,
                _ => -4,
            },
            Error::KernelWithholdsTime(_) => -5,
            Error::Page(_) => -6,
            Error::Unsupported => -7,
            Error::TooManyClocks => -8,
            Error::Calibration { .. } => -9,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::PerfEvent(error) => error.fmt(f),
            Error::KernelWithholdsTime(withheld) => withheld.fmt(f),
            Error::Page(error) => write!(f, "the kernel's perf page is unusable: {error}"),
            Error::Unsupported => f.write_str(
                "perfclock supports x86_64 (TSC) and aarch64 (CNTVCT_EL0) on Linux only",
            ),
            Error::TooManyClocks => write!(
                f,
                "{MAX_KERNEL_PAGES} kernel-mode clocks are open already: share one (`perfclock::init`)"
            ),
            Error::Calibration { withheld, reason } => {
                write!(f, "calibration failed ({reason}); kernel mode is not possible either: {withheld}")
            }
        }
    }
}

impl std::error::Error for Error {}
