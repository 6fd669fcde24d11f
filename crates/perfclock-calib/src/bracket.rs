//! A bracket (counter reads around one kernel-stamped record).

use crate::error::BracketError;
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

/// The bracket error for the system call `op`, from its `io::Error`.
pub(crate) fn os_error(op: &'static str) -> impl Fn(std::io::Error) -> BracketError {
    move |error| BracketError::Syscall {
        op,
        errno: error.raw_os_error().unwrap_or(0),
    }
}
