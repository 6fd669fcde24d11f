//! [`Clock`] off Linux: perf events are Linux's, so every constructor fails with
//! [`Error::Unsupported`] and no clock exists; programs can still depend on perfclock on every
//! platform.

use super::{Clock, Mode, Options};
use crate::diagnosis::Withheld;
use crate::error::Error;

/// [`Options::open`] off Linux.
pub(super) fn open(_options: Options) -> Result<Clock, Error> {
    Err(Error::Unsupported)
}

/// No value exists, so no [`Clock`] does: every method below is unreachable.
#[derive(Debug)]
pub(super) enum Source {}

impl Source {
    pub(super) fn mode(&self) -> Mode {
        match *self {}
    }

    pub(super) fn error_bound_ns(&self) -> u64 {
        match *self {}
    }

    pub(super) fn resume_after_fork(&self) -> Result<bool, Error> {
        match *self {}
    }

    pub(super) fn reattach_shared_page(&self) -> bool {
        match *self {}
    }

    pub(super) fn withheld(&self) -> Option<&Withheld> {
        match *self {}
    }
}
