//! Kernel mode's page: the first page of a `PERF_COUNT_SW_DUMMY` event of this process, and
//! keeping it readable in fork children.
//!
//! # Safety
//! The kernel marks a perf mapping do-not-copy, so a fork child would fault on the first read.
//! Every mapped page's address is registered here, and a `pthread_atfork` child handler maps a
//! fresh event's page at each registered address (`MAP_FIXED`) before the child runs any user
//! code. If the child cannot open an event, an anonymous zero page takes the address instead,
//! which readers report as [`perfclock_core::ReadError::TimeZeroUnavailable`], never a fault.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use perf_event_open_sys::bindings as sys;
use perfclock_core::PerfEventMmapPage;
use perfclock_event::{page_size, EventAttr, PageMapping, PerfEvent, SysError};

/// Kernel pages mapped at once (one per kernel-mode [`crate::Clock`]).
pub const MAX_KERNEL_PAGES: usize = 64;

/// Addresses of mapped kernel pages; 0 is a free slot.
static FORK_REMAP: [AtomicUsize; MAX_KERNEL_PAGES] =
    [const { AtomicUsize::new(0) }; MAX_KERNEL_PAGES];
static INSTALL_ATFORK: Once = Once::new();

/// The kernel's time page of a dummy event. The event's descriptor is closed at once: the
/// mapping keeps the event alive and costs no file descriptor.
#[derive(Debug)]
pub struct KernelPage {
    mapping: PageMapping,
    slot: usize,
}

/// Why the page could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    Open(SysError),
    /// [`MAX_KERNEL_PAGES`] kernel-mode clocks are open already.
    TooManyClocks,
}

impl KernelPage {
    pub fn map() -> Result<Self, MapError> {
        INSTALL_ATFORK.call_once(|| {
            // SAFETY: registers a handler that only makes async-signal-safe system calls; it is
            // registered once and stays valid (a plain `extern "C" fn`).
            unsafe { libc::pthread_atfork(None, None, Some(remap_in_child)) };
        });
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

    pub fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.mapping.page()
    }
}

impl Drop for KernelPage {
    fn drop(&mut self) {
        FORK_REMAP[self.slot].store(0, Ordering::Release);
    }
}

/// The `pthread_atfork` child handler: the child is single-threaded here and has not returned
/// from `fork` yet. Only system calls: no allocation, no locks.
extern "C" fn remap_in_child() {
    let length = page_size();
    for slot in &FORK_REMAP {
        let address = slot.load(Ordering::Acquire);
        if address == 0 {
            continue;
        }
        // SAFETY: `address` is a page-aligned mapping the parent owned; in the child the range is
        // unmapped (do-not-copy), so mapping over it with MAP_FIXED clobbers nothing else.
        unsafe { remap_one(address as *mut libc::c_void, length) };
    }
}

/// # Safety
/// `address..address + length` must be the child's hole left by a do-not-copy perf mapping.
unsafe fn remap_one(address: *mut libc::c_void, length: usize) {
    let mut attr = *EventAttr::dummy().as_raw();
    // SAFETY: a valid attr for a user-space-only software event of this thread.
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(&mut attr, 0, -1, -1, sys::PERF_FLAG_FD_CLOEXEC as _)
    };
    let fixed = libc::MAP_SHARED | libc::MAP_FIXED;
    if fd >= 0 {
        // SAFETY: maps the new event's page over the hole, per the caller's contract.
        let mapped = unsafe { libc::mmap(address, length, libc::PROT_READ, fixed, fd, 0) };
        // SAFETY: `fd` is ours; the mapping (if any) keeps the event alive.
        unsafe { libc::close(fd) };
        if mapped != libc::MAP_FAILED {
            return;
        }
    }
    let anonymous = libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_ANONYMOUS;
    // SAFETY: as above; a zero page reads as "no capabilities", a typed error for readers.
    unsafe { libc::mmap(address, length, libc::PROT_READ, anonymous, -1, 0) };
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
