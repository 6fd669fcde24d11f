//! Why a check could not run.
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors").

use core::fmt;

use perfclock_calib::CalibError;
use perfclock_core::ReadError;

/// Why verification could not run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyError {
    /// The ground-truth events could not be opened.
    Open(CalibError),
    /// A bracket failed for good ([`CalibError::Bracket`]).
    Bracket(CalibError),
    /// The clock failed to read.
    Clock(ReadError),
    /// The clock has no counter (`read_counter()` returned `None`).
    NoCounter,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::Open(_) => f.write_str("cannot open kernel ground truth"),
            VerifyError::Bracket(_) => f.write_str("kernel ground truth failed"),
            VerifyError::Clock(_) => f.write_str("the clock failed to read"),
            VerifyError::NoCounter => f.write_str("the clock has no counter to read"),
        }
    }
}

impl std::error::Error for VerifyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VerifyError::Open(e) => Some(e),
            VerifyError::Bracket(e) => Some(e),
            VerifyError::Clock(e) => Some(e),
            VerifyError::NoCounter => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::ParamError;
    use perfclock_os::{Op, SysError};
    use perfclock_testutil::error_chain::assert_each_cause_once;

    #[test]
    fn each_cause_is_printed_once() {
        let refused = CalibError::Open(SysError::new(Op::PerfEventOpen, libc::EACCES));
        let printed = assert_each_cause_once(&VerifyError::Open(refused));
        assert!(printed.contains("perf_event_paranoid"), "{printed}");

        let read = ReadError::InvalidParameters(ParamError::ZeroMultiplier);
        let printed = assert_each_cause_once(&VerifyError::Clock(read));
        assert!(printed.ends_with("time_mult is 0"), "{printed}");
    }
}
