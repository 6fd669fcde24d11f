//! Owned mappings of perf events: the time page, and the page followed by a ring.
//!
//! # Safety
//! Each mapping is owned by exactly one [`PageMapping`] that unmaps it on drop; pointers into it
//! are only handed out as raw pointers, because the kernel writes that memory concurrently.
#![allow(unsafe_code)]

use core::ptr::NonNull;

use perfclock_core::page::PerfEventMmapPage;

use crate::sys::page_size;

/// A mapping whose first page is a `perf_event_mmap_page`. Unmapped on drop.
///
/// The page stays valid after the event's descriptor is closed (the mapping holds a reference
/// to the event), and is not inherited by a fork child (the kernel marks it do-not-copy).
#[derive(Debug)]
pub struct PageMapping {
    /// Invariant: the start of a mapping of `len` bytes that this value owns.
    ptr: NonNull<PerfEventMmapPage>,
    len: usize,
}

// SAFETY: the mapping is process-wide memory; nothing here is tied to the mapping thread, and
// all access to the kernel-written page goes through raw pointers (atomic loads by readers).
unsafe impl Send for PageMapping {}
// SAFETY: as above; `&PageMapping` only hands out the raw pointer.
unsafe impl Sync for PageMapping {}

impl PageMapping {
    /// # Safety
    /// `ptr..ptr + len` must be a mapping from `mmap` that nothing else owns or unmaps.
    pub(crate) unsafe fn from_raw(ptr: NonNull<PerfEventMmapPage>, len: usize) -> Self {
        Self { ptr, len }
    }

    /// The page. The kernel writes it concurrently: read it only with atomic/volatile loads
    /// (e.g. `perfclock_core::PageReader`), never through a `&PerfEventMmapPage`.
    /// Valid for as long as `self` lives.
    pub fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.ptr
    }
}

impl Drop for PageMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned and we own the mapping; no
        // reference into it outlives `self` (only raw pointers were handed out, documented as
        // valid for the life of `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The time page followed by the data ring (see [`crate::RingReader`]).
#[derive(Debug)]
pub struct RingMapping {
    /// Invariant: one page followed by `data_len` bytes, writable.
    page: PageMapping,
    data_len: usize,
}

impl RingMapping {
    /// # Safety
    /// `page` must map one page followed by `data_len` (a power of two) writable bytes.
    pub(crate) unsafe fn from_raw(page: PageMapping, data_len: usize) -> Self {
        Self { page, data_len }
    }

    /// The control page (time fields, `data_head`, `data_tail`).
    pub fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.page.page()
    }

    /// Start of the data area (one page after the control page).
    pub fn data(&self) -> NonNull<u8> {
        // SAFETY: the mapping is `page_size() + data_len` bytes long, so one page in is still
        // inside it (and non-null).
        unsafe { NonNull::new_unchecked(self.page.ptr.as_ptr().cast::<u8>().add(page_size())) }
    }

    /// Size of the data area in bytes (a power of two).
    pub fn data_len(&self) -> usize {
        self.data_len
    }
}

#[cfg(test)]
impl RingMapping {
    /// A ring in ordinary anonymous memory, laid out like a perf mapping, so that tests can
    /// play the kernel's part.
    pub(crate) fn anonymous_for_test(data_pages_log2: u32) -> Self {
        let page = page_size();
        let data_len = page << data_pages_log2;
        let len = page + data_len;
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        // SAFETY: the fresh mapping above, owned by nothing else, one page plus `data_len`.
        unsafe {
            RingMapping::from_raw(
                PageMapping::from_raw(NonNull::new(ptr.cast()).unwrap(), len),
                data_len,
            )
        }
    }
}
