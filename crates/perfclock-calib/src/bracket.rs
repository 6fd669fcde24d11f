//! A bracket (counter reads around one kernel-stamped record) and why one could not be made.

use core::fmt;

use perfclock_event::RingError;

use crate::kind::RecordKind;

/// A kernel timestamp and what was read just before and just after the action that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamped<T> {
    /// The record the stamp came from.
    pub kind: RecordKind,
    /// Read before the action.
    pub before: T,
    /// Read after the action.
    pub after: T,
    /// The record's `PERF_SAMPLE_TIME` (perf clock, ns).
    pub kernel_ns: u64,
    /// The CPU the kernel wrote the record on.
    pub cpu: u32,
}

/// A bracket in raw counter values (`perfclock_core::counter::read_counter_ordered`).
pub type Bracket = Stamped<u64>;

impl Stamped<u64> {
    /// `after - before`, in counter cycles.
    pub fn width(&self) -> u64 {
        self.after.wrapping_sub(self.before)
    }
}

/// Why a bracket could not be produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BracketError {
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
pub enum DiscardReason {
    /// No matching record.
    Missing,
    /// Several matching records.
    Ambiguous,
    /// Lost records.
    Lost,
}

impl BracketError {
    /// Whether retrying the bracket may succeed.
    pub fn is_transient(&self) -> bool {
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

impl fmt::Display for BracketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
            BracketError::Ring(e) => write!(f, "{e}"),
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
            BracketError::Ring(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RingError> for BracketError {
    fn from(e: RingError) -> Self {
        BracketError::Ring(e)
    }
}

/// Counts per kind since open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindStats {
    /// Brackets attempted.
    pub attempts: u64,
    /// Brackets returned.
    pub accepted: u64,
    /// Discarded: no matching record.
    pub missing: u64,
    /// Discarded: several matching records.
    pub ambiguous: u64,
    /// Discarded: lost records.
    pub lost: u64,
}

/// The bracket error for the system call `op` that just failed (errno from this thread).
pub(crate) fn syscall_error(op: &'static str) -> BracketError {
    BracketError::Syscall {
        op,
        errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
    }
}
