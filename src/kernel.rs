//! Kernel mode's page: the first page of a `PERF_COUNT_SW_DUMMY` event of this process, and
//! keeping it readable in fork children.
//!
//! # Safety
//! The kernel marks a perf mapping do-not-copy, so a fork child would fault on the first read.
//! Every mapped page's address is registered here, and the child handler ([`crate::fork`])
//! maps a fresh event's page at each registered address (`MAP_FIXED`) before the child runs any
//! user code. If the child cannot open an event, an anonymous zero page takes the address
//! instead, which readers report as [`perfclock_core::ReadError::TimeZeroUnavailable`], never a
//! fault.
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use perfclock_core::page::PerfEventMmapPage;
use perfclock_os::{remap_page_after_fork, EventAttr, PageMapping, PerfEvent, SysError};

/// Kernel pages mapped at once (one per kernel-mode [`crate::Clock`]).
pub(crate) const MAX_KERNEL_PAGES: usize = 64;

/// Addresses of mapped kernel pages; 0 is a free slot.
static FORK_REMAP: [AtomicUsize; MAX_KERNEL_PAGES] =
    [const { AtomicUsize::new(0) }; MAX_KERNEL_PAGES];

/// The kernel's time page of a dummy event. The event's descriptor is closed at once: the
/// mapping keeps the event alive and costs no file descriptor.
#[derive(Debug)]
pub(crate) struct KernelPage {
    mapping: PageMapping,
    slot: usize,
}

impl KernelPage {
    /// Maps a dummy event's page and registers it for the fork child's remap.
    pub(crate) fn map() -> Result<Self, MapError> {
        crate::fork::install();
        let event = PerfEvent::open(&EventAttr::dummy()).map_err(MapError::Open)?;
        let mapping = event.map_page_only().map_err(MapError::Open)?;
        let address = mapping.page().as_ptr() as usize;
        let slot = FORK_REMAP
            .iter()
            .position(|slot| {
                slot.compare_exchange(0, address, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or(MapError::TooManyClocks)?;
        Ok(KernelPage { mapping, slot })
    }

    /// The page (valid while `self` lives).
    pub(crate) fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.mapping.page()
    }
}

impl Drop for KernelPage {
    fn drop(&mut self) {
        FORK_REMAP[self.slot].store(0, Ordering::Release);
    }
}

/// Maps every registered page again in a fork child (called by the child handler in
/// [`crate::fork`]): the child is single-threaded there and has not returned from `fork` yet.
/// Only system calls: no allocation, no locks.
pub(crate) fn remap_in_child() {
    for slot in &FORK_REMAP {
        let Some(address) = NonNull::new(slot.load(Ordering::Acquire) as *mut u8) else {
            continue;
        };
        // SAFETY: `address` is a page-aligned mapping the parent owned; in the child the range is
        // unmapped (do-not-copy), so mapping over it with MAP_FIXED clobbers nothing else.
        unsafe { remap_page_after_fork(address) };
    }
}

/// Why the page could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MapError {
    /// `perf_event_open` or `mmap` failed.
    Open(SysError),
    /// [`MAX_KERNEL_PAGES`] kernel-mode clocks are open already.
    TooManyClocks,
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::PageReader;

    #[test]
    fn fork_child_reads_the_page_at_the_same_address() {
        let page = KernelPage::map().expect("perf_event_open of a dummy event");
        // SAFETY: the page lives until the end of the test.
        let reader = unsafe { PageReader::new(page.page()) };
        let parent = reader.raw().expect("parent read");
        // SAFETY: the child only reads the page and exits with `_exit`.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // Without the remap this read faults (SIGSEGV).
            let status = match reader.raw() {
                Ok(raw) if raw.capabilities == parent.capabilities => 0,
                _ => 1,
            };
            // SAFETY: leaves the child at once, running no parent-owned destructors.
            unsafe { libc::_exit(status) };
        }
        assert!(child > 0, "fork failed");
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(child, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child died: status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "child read a different page");
    }
}
