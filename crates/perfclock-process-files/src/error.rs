//! The failures every per-process file shares (a clock name that is no clock's,
//! [`UnknownClock`](crate::UnknownClock), is `clock_name`'s).
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors"); none wraps
//! another error.

use std::fmt;
use std::path::PathBuf;

/// A handle used in a fork child of the process that opened it: a child never writes into,
/// nor closes, its parent's file. The child opens its own (named with its own pid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForkChild {
    /// The process that opened the file.
    pub opened_by: u32,
    /// This process.
    pub pid: u32,
}

impl ForkChild {
    /// `Ok` in the process that opened the file (`opened_by`), else the error.
    ///
    /// # Errors
    /// [`ForkChild`] when `pid` is not `opened_by`.
    pub fn check(opened_by: u32, pid: u32) -> Result<(), ForkChild> {
        if pid == opened_by {
            Ok(())
        } else {
            Err(ForkChild { opened_by, pid })
        }
    }
}

impl fmt::Display for ForkChild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ForkChild { opened_by, pid } = self;
        write!(
            f,
            "this handle belongs to process {opened_by}, and this is its fork child {pid}: a \
             child never writes into its parent's file; open a new one in the child"
        )
    }
}

impl std::error::Error for ForkChild {}

/// The process already has the directory's file open in another clock: one file per process
/// and directory, one clock per file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockMismatch<C> {
    /// The open file.
    pub path: PathBuf,
    /// Its clock.
    pub open: C,
    /// The clock asked for.
    pub requested: C,
}

impl<C: fmt::Display> fmt::Display for ClockMismatch<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ClockMismatch {
            path,
            open,
            requested,
        } = self;
        write!(
            f,
            "{} is open in this process with the {open} clock, and a file has one clock: open \
             it with {open} or use another directory for the {requested} clock",
            path.display()
        )
    }
}

impl<C: fmt::Debug + fmt::Display> std::error::Error for ClockMismatch<C> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_child_is_another_pid() {
        assert_eq!(ForkChild::check(7, 7), Ok(()));
        assert_eq!(
            ForkChild::check(7, 8),
            Err(ForkChild {
                opened_by: 7,
                pid: 8
            })
        );
    }
}
