//! The state a calibrated clock's handle and its calibration thread share: the published page
//! and its mirror, the bound, the counters, the stop flag.

use std::ptr::NonNull;
use std::sync::atomic::AtomicBool;

use perfclock_core::page::PerfEventMmapPage;
use perfclock_os::mapping::page_size;
use perfclock_os::{Access, Mapping};

use crate::error::CalibError;
use crate::published::BoundCell;
use crate::stats::AtomicStats;

/// The published page and its mirror (see `PageWriter::new_mirrored`): the writer finishes the
/// mirror before it touches the page, so a writer preempted mid-update never blocks readers.
/// Two anonymous mappings, so the two never overlap.
#[derive(Debug)]
pub(crate) struct OwnedPage {
    page: Mapping,
    mirror: Mapping,
}

impl OwnedPage {
    pub(crate) fn new() -> Result<Self, CalibError> {
        let map = || {
            Mapping::anonymous(page_size(), Access::ReadWrite)
                .map_err(|error| CalibError::Pages(error.kind()))
        };
        Ok(Self {
            page: map()?,
            mirror: map()?,
        })
    }

    /// The page readers try first. Valid while `self` lives.
    pub(crate) fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.page.as_ptr().cast()
    }

    /// The mirror. Valid while `self` lives.
    pub(crate) fn mirror(&self) -> NonNull<PerfEventMmapPage> {
        self.mirror.as_ptr().cast()
    }
}

/// What the handle ([`CalibratedClock`](crate::CalibratedClock)) and the calibration thread
/// share: the pages, kept alive by whichever of the two drops last.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) page: OwnedPage,
    pub(crate) bound: BoundCell,
    pub(crate) stats: AtomicStats,
    pub(crate) stop: AtomicBool,
}
