//! Anonymous pages that fault when read: the action of page-fault brackets.
//!
//! # Safety
//! The arena owns one private anonymous mapping for its whole life; every pointer it hands out
//! lies inside it, and it is unmapped only on drop.
#![allow(unsafe_code)]

use core::marker::PhantomData;
use core::ptr::NonNull;

use perfclock_event::sys::page_size;

use crate::bracket::syscall_error;
use crate::error::BracketError;

/// Pages of the fault arena; dropped with one `madvise` per pass.
const FAULT_ARENA_PAGES: usize = 64;

/// Anonymous pages that are read to fault, and dropped again with `MADV_DONTNEED`.
pub(crate) struct FaultArena {
    base: NonNull<u8>,
    pages: usize,
    page: usize,
    next: usize,
}

impl FaultArena {
    pub(crate) fn new() -> Result<Self, BracketError> {
        let page = page_size();
        let len = page * FAULT_ARENA_PAGES;
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(syscall_error("mmap"));
        }
        // SAFETY: advice on our own mapping. Keeps THP from backing it with one huge zero page
        // (which would fault once for 2 MiB); failure only costs that, so it is ignored.
        unsafe { libc::madvise(ptr, len, libc::MADV_NOHUGEPAGE) };
        let base = NonNull::new(ptr.cast()).ok_or(BracketError::Syscall {
            op: "mmap",
            errno: libc::EINVAL,
        })?;
        Ok(Self {
            base,
            pages: FAULT_ARENA_PAGES,
            page,
            // Start with a drop so that every page faults on first use.
            next: FAULT_ARENA_PAGES,
        })
    }

    /// The next page that will fault when read, dropping the whole arena when all were used.
    pub(crate) fn next_page(&mut self) -> Result<FaultPage<'_>, BracketError> {
        if self.next == self.pages {
            // SAFETY: our own mapping; MADV_DONTNEED on private anonymous memory only zaps
            // the page tables (the next read maps the zero page again).
            let rc = unsafe {
                libc::madvise(
                    self.base.as_ptr().cast(),
                    self.pages * self.page,
                    libc::MADV_DONTNEED,
                )
            };
            if rc != 0 {
                return Err(syscall_error("madvise(MADV_DONTNEED)"));
            }
            self.next = 0;
        }
        // SAFETY: `next < pages`, so the offset is inside the mapping.
        let p = unsafe { self.base.as_ptr().add(self.next * self.page) };
        self.next += 1;
        Ok(FaultPage {
            ptr: p,
            _arena: PhantomData,
        })
    }

    /// The mapping's page size in bytes.
    pub(crate) fn page_size(&self) -> usize {
        self.page
    }
}

impl Drop for FaultArena {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly our own mapping; no references into it exist.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.pages * self.page) };
    }
}

/// A page of the arena that faults when read: valid while the arena lives and is not dropped
/// again (both guaranteed by the borrow).
pub(crate) struct FaultPage<'a> {
    ptr: *const u8,
    _arena: PhantomData<&'a mut FaultArena>,
}

impl FaultPage<'_> {
    /// The page's address, as the kernel reports it in the fault's `PERF_SAMPLE_ADDR`.
    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Reads the page, which makes the kernel take (and stamp) a page fault.
    pub(crate) fn fault(&self) {
        // SAFETY: `ptr` is inside the arena's readable anonymous mapping, which the borrow keeps
        // mapped; the volatile read cannot be elided, so it faults (the page was dropped with
        // MADV_DONTNEED).
        unsafe { self.ptr.read_volatile() };
    }
}
