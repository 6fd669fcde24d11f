//! The calibration crate's errors.
//!
//! [`CalibError`]: why ground truth could not be had or a calibrated clock could not be
//! started ([`OffsetError`](crate::pvclock_offset::OffsetError), why kernel-stamped brackets
//! pinned no paravirtual clock offset, is in the module that returns it). The reasons of
//! each calibration step (bracketing, fitting, publishing) are this crate's own and stay
//! private: a variant of `CalibError` carries them in an opaque [`StepFailure`], `Display` says
//! which step failed and `source()` gives the step's reason.
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors").

use perfclock_core::ParamError;
use perfclock_os::{RingError, SysError};

use crate::kind::RecordKind;

/// Why calibration failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CalibError {
    /// The ground-truth events could not be opened or mapped; `source()` says why.
    Open(SysError),
    /// Bracketing (or setting up an action) failed for good, or this architecture has no
    /// counter; `source()` says which.
    Bracket(StepFailure),
    /// The brackets could not be fitted; `source()` says why.
    Fit(StepFailure),
    /// The fit could not be published as a conversion; `source()` says why.
    Publish(StepFailure),
    /// The background thread could not be spawned.
    Spawn(std::io::ErrorKind),
    /// The two pages the clock publishes in could not be mapped.
    Pages(std::io::ErrorKind),
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
            Self::Open(_) => f.write_str("calibration records unavailable"),
            Self::Bracket(_) => f.write_str("calibration bracketing failed"),
            Self::Fit(_) => f.write_str("calibration fit failed"),
            Self::Publish(_) => f.write_str("calibration result unpublishable"),
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
            Self::Pages(std::io::ErrorKind::OutOfMemory) => f.write_str(
                "cannot map the calibrated clock's two pages: no memory (`ulimit -v`, the \
                 cgroup's memory limit)",
            ),
            Self::Pages(k) => write!(f, "cannot map the calibrated clock's two pages: {k}"),
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
            Self::Bracket(e) | Self::Fit(e) | Self::Publish(e) => Some(e.0.error()),
            Self::Spawn(_)
            | Self::Pages(_)
            | Self::Timeout
            | Self::ThreadDied
            | Self::InvalidOptions { .. } => None,
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
        Self::Bracket(StepFailure(Step::Bracket(e)))
    }
}
impl From<FitError> for CalibError {
    fn from(e: FitError) -> Self {
        Self::Fit(StepFailure(Step::Fit(e)))
    }
}
impl From<PublishError> for CalibError {
    fn from(e: PublishError) -> Self {
        Self::Publish(StepFailure(Step::Publish(e)))
    }
}

impl CalibError {
    /// Whether trying again may succeed: a bracket's record was missing, matched twice or was
    /// lost around the action ([`crate::GroundTruth::collect`] retries these itself).
    pub fn is_transient(&self) -> bool {
        self.bracket_error().is_some_and(BracketError::is_transient)
    }

    /// The bracketing step's own reason, if that step failed.
    pub(crate) fn bracket_error(&self) -> Option<&BracketError> {
        match self {
            Self::Bracket(StepFailure(Step::Bracket(e))) => Some(e),
            _ => None,
        }
    }
}

/// Why a step of calibration (bracketing, fitting, publishing) failed, inside a [`CalibError`]:
/// opaque; its `Display` says why, and it is the [`CalibError`]'s `source()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepFailure(Step);

impl core::fmt::Display for StepFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self.0.error(), f)
    }
}

/// The reason of the step that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Bracket(BracketError),
    Fit(FitError),
    Publish(PublishError),
}

impl Step {
    fn error(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Self::Bracket(e) => e,
            Self::Fit(e) => e,
            Self::Publish(e) => e,
        }
    }
}

/// Why a bracket could not be produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BracketError {
    /// The [`crate::GroundTruth`] was not opened with this kind.
    KindNotOpened(RecordKind),
    /// No matching record after the action (transient: retry).
    Missing(RecordKind),
    /// More than one matching record (transient: retry).
    Ambiguous {
        /// The kind.
        kind: RecordKind,
        /// How many matched.
        matches: u32,
    },
    /// The kernel reported lost records around the action (transient: retry).
    Lost {
        /// The kind.
        kind: RecordKind,
        /// The `lost` count.
        lost: u64,
    },
    /// A malformed ring.
    Ring(RingError),
    /// A system call of the action failed.
    Syscall {
        /// Which call.
        op: &'static str,
        /// errno.
        errno: i32,
    },
    /// No cycle counter on this architecture.
    CounterUnsupported,
    /// [`crate::GroundTruth::collect`] gave up after this many discarded brackets in a row.
    TooManyDiscards {
        /// The kind.
        kind: RecordKind,
        /// Consecutive discards.
        discards: u32,
        /// The last transient error.
        last: DiscardReason,
    },
}

/// Why the last bracket in a [`BracketError::TooManyDiscards`] was discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiscardReason {
    /// No matching record.
    Missing,
    /// Several matching records.
    Ambiguous,
    /// Lost records.
    Lost,
}

impl BracketError {
    /// Whether retrying the bracket may succeed.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            BracketError::Missing(_) | BracketError::Ambiguous { .. } | BracketError::Lost { .. }
        )
    }

    pub(crate) fn discard_reason(&self) -> Option<DiscardReason> {
        match self {
            BracketError::Missing(_) => Some(DiscardReason::Missing),
            BracketError::Ambiguous { .. } => Some(DiscardReason::Ambiguous),
            BracketError::Lost { .. } => Some(DiscardReason::Lost),
            _ => None,
        }
    }
}

impl core::fmt::Display for BracketError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            BracketError::KindNotOpened(kind) => {
                write!(f, "ground truth was not opened for {kind} records")
            }
            BracketError::Missing(kind) => {
                write!(f, "no {kind} record followed the action")
            }
            BracketError::Ambiguous { kind, matches } => {
                write!(f, "{matches} {kind} records matched one action")
            }
            BracketError::Lost { kind, lost } => {
                write!(f, "the kernel lost {lost} records around a {kind} action")
            }
            // Transparent: the ring's own message, and its causes (none today) after it.
            BracketError::Ring(e) => core::fmt::Display::fmt(&e, f),
            BracketError::Syscall { op, errno } => {
                write!(
                    f,
                    "{op} failed: {}",
                    std::io::Error::from_raw_os_error(errno)
                )?;
                if errno == libc::EPERM || errno == libc::EACCES {
                    f.write_str(
                        " (a seccomp filter or an LSM policy such as SELinux refuses it: allow \
                         it, or one of the other record kinds' calls: prctl(PR_SET_NAME), \
                         madvise(MADV_DONTNEED), mmap(PROT_EXEC) of an anonymous page)",
                    )?;
                }
                Ok(())
            }
            BracketError::CounterUnsupported => {
                f.write_str("no cycle counter on this architecture")
            }
            BracketError::TooManyDiscards {
                kind,
                discards,
                last,
            } => write!(
                f,
                "gave up on {kind} brackets after {discards} discards in a row (last: {last:?})"
            ),
        }
    }
}

impl std::error::Error for BracketError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BracketError::Ring(e) => std::error::Error::source(e),
            _ => None,
        }
    }
}

impl From<RingError> for BracketError {
    fn from(e: RingError) -> Self {
        BracketError::Ring(e)
    }
}

/// Why a fit failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FitError {
    /// Fewer than two usable brackets.
    TooFewBrackets {
        /// Usable brackets given.
        usable: usize,
    },
    /// The brackets span too little counter time to determine a slope.
    Underdetermined,
    /// The clock does not run forward over the brackets.
    NotIncreasing,
    /// No line agrees with the brackets even after dropping the allowed number.
    Inconsistent {
        /// Constraints dropped before giving up.
        rejected: usize,
    },
}

impl core::fmt::Display for FitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::TooFewBrackets { usable } => {
                write!(f, "too few usable brackets to fit ({usable})")
            }
            Self::Underdetermined => f.write_str("brackets span too little time to fit a slope"),
            Self::NotIncreasing => {
                f.write_str("kernel timestamps do not increase with the counter")
            }
            Self::Inconsistent { rejected } => write!(
                f,
                "no line agrees with the brackets (dropped {rejected} contradicting ones)"
            ),
        }
    }
}

impl std::error::Error for FitError {}

/// Why a fit cannot be published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PublishError {
    /// The slope is not positive or not finite, or too large for a `u32` multiplier.
    SlopeOutOfRange,
    /// The band is not finite.
    BandNotFinite,
    /// The core crate refused the parameters; `source()` says why.
    Param(ParamError),
}

impl core::fmt::Display for PublishError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::SlopeOutOfRange => {
                f.write_str("fitted slope cannot be expressed as mult/2^shift")
            }
            Self::BandNotFinite => f.write_str("fitted band is not finite"),
            Self::Param(_) => f.write_str("conversion parameters refused"),
        }
    }
}

impl std::error::Error for PublishError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Param(e) => Some(e),
            Self::SlopeOutOfRange | Self::BandNotFinite => None,
        }
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

#[cfg(test)]
mod chain_tests {
    use super::*;
    use perfclock_testutil::error_chain::assert_each_cause_once;

    /// Each step's reason comes once, through `source()`, down to the root cause.
    #[test]
    fn each_cause_is_printed_once() {
        let open = CalibError::Open(SysError::new(perfclock_os::Op::PerfEventOpen, libc::EACCES));
        let printed = assert_each_cause_once(&open);
        assert!(printed.contains("perf_event_paranoid"), "{printed}");

        let ring = CalibError::from(BracketError::Ring(RingError::HeadOutOfRange {
            head: 9,
            tail: 1,
        }));
        let printed = assert_each_cause_once(&ring);
        assert!(printed.contains("data_head 9"), "{printed}");
        assert_eq!(printed.matches("data_head").count(), 1, "{printed}");

        let publish = CalibError::from(PublishError::Param(ParamError::ZeroMultiplier));
        let printed = assert_each_cause_once(&publish);
        assert!(printed.ends_with("time_mult is 0"), "{printed}");

        let fit = CalibError::from(FitError::NotIncreasing);
        assert!(assert_each_cause_once(&fit).contains("do not increase"));
    }
}
