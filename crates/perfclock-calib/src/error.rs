//! [`CalibError`]: the calibration crate's one error type: why ground truth could not be had
//! or a calibrated clock could not be started. Its variants carry the reason types of each
//! step ([`BracketError`], [`FitError`], [`PublishError`], the event layer's [`SysError`]),
//! reachable through `source()`.

use perfclock_event::SysError;

use crate::bracket::BracketError;
use crate::fit::FitError;
use crate::published::PublishError;

/// Why calibration failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CalibError {
    /// The ground-truth events could not be opened or mapped.
    Open(SysError),
    /// Bracketing (or setting up an action) failed for good; no counter on this architecture
    /// is [`BracketError::CounterUnsupported`].
    Bracket(BracketError),
    /// The brackets could not be fitted.
    Fit(FitError),
    /// The fit could not be published as a conversion.
    Publish(PublishError),
    /// The background thread could not be spawned.
    Spawn(std::io::ErrorKind),
    /// The thread did not report a first calibration within the start timeout.
    Timeout,
    /// The thread ended without reporting.
    ThreadDied,
    /// A [`crate::CalibrationOptions`] setting is out of range.
    InvalidOptions {
        /// The setter to change.
        setting: &'static str,
        /// What it needs.
        reason: &'static str,
    },
}

impl core::fmt::Display for CalibError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Open(e) => write!(f, "calibration records unavailable: {e}"),
            Self::Bracket(e) => write!(f, "calibration bracketing failed: {e}"),
            Self::Fit(e) => write!(f, "calibration fit failed: {e}"),
            Self::Publish(e) => write!(f, "calibration result unpublishable: {e}"),
            // pthread_create's EAGAIN (WouldBlock) is a thread limit, not a retry hint.
            Self::Spawn(std::io::ErrorKind::WouldBlock) => f.write_str(
                "cannot spawn the calibration thread (EAGAIN): a limit on threads is reached: \
                 the user's processes and threads (`ulimit -u`, RLIMIT_NPROC, counted across all \
                 of the user's processes), the cgroup's pids.max (`docker run --pids-limit`), or \
                 kernel.threads-max; raise it or end other threads",
            ),
            Self::Spawn(std::io::ErrorKind::OutOfMemory) => f.write_str(
                "cannot spawn the calibration thread: no memory for its stack (`ulimit -v`, the \
                 cgroup's memory limit)",
            ),
            Self::Spawn(k) => write!(f, "cannot spawn the calibration thread: {k}"),
            Self::Timeout => f.write_str(
                "calibration did not finish in time (CalibrationOptions::start_timeout)",
            ),
            Self::ThreadDied => f.write_str("calibration thread ended without a result"),
            Self::InvalidOptions { setting, reason } => {
                write!(f, "CalibrationOptions::{setting} {reason}")
            }
        }
    }
}

impl std::error::Error for CalibError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open(e) => Some(e),
            Self::Bracket(e) => Some(e),
            Self::Fit(e) => Some(e),
            Self::Publish(e) => Some(e),
            Self::Spawn(_) | Self::Timeout | Self::ThreadDied | Self::InvalidOptions { .. } => None,
        }
    }
}

impl From<SysError> for CalibError {
    fn from(e: SysError) -> Self {
        Self::Open(e)
    }
}
impl From<BracketError> for CalibError {
    fn from(e: BracketError) -> Self {
        Self::Bracket(e)
    }
}
impl From<FitError> for CalibError {
    fn from(e: FitError) -> Self {
        Self::Fit(e)
    }
}
impl From<PublishError> for CalibError {
    fn from(e: PublishError) -> Self {
        Self::Publish(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawn_errors_name_the_limit() {
        let limit = CalibError::Spawn(std::io::ErrorKind::WouldBlock).to_string();
        for knob in ["ulimit -u", "RLIMIT_NPROC", "pids.max", "threads-max"] {
            assert!(limit.contains(knob), "{knob} missing: {limit}");
        }
        assert!(!limit.contains("WouldBlock"), "{limit}");
        let memory = CalibError::Spawn(std::io::ErrorKind::OutOfMemory).to_string();
        assert!(memory.contains("stack"), "{memory}");
    }
}
