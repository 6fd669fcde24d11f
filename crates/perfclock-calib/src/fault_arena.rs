//! Anonymous pages that fault when read: the action of page-fault brackets.

use perfclock_os::mapping::page_size;
use perfclock_os::{Access, Mapping};

use crate::bracket::os_error;
use crate::error::BracketError;

/// Pages of the fault arena; dropped with one `madvise` per pass.
const FAULT_ARENA_PAGES: usize = 64;

/// Anonymous pages that are read to fault, and dropped again with `MADV_DONTNEED`.
pub(crate) struct FaultArena {
    mapping: Mapping,
    page: usize,
    next: usize,
}

impl FaultArena {
    pub(crate) fn new() -> Result<Self, BracketError> {
        let page = page_size();
        let mapping =
            Mapping::anonymous(page * FAULT_ARENA_PAGES, Access::Read).map_err(os_error("mmap"))?;
        // Keeps THP from backing the arena with one huge zero page (which would fault once for
        // 2 MiB); failure only costs that, so it is ignored.
        let _ = mapping.no_huge_pages();
        Ok(Self {
            mapping,
            page,
            // Start with a drop so that every page faults on first use.
            next: FAULT_ARENA_PAGES,
        })
    }

    /// The next page that will fault when read, dropping the whole arena when all were used.
    pub(crate) fn next_page(&mut self) -> Result<FaultPage<'_>, BracketError> {
        if self.next == FAULT_ARENA_PAGES {
            // On private anonymous memory this only zaps the page tables: the next read of
            // each page faults and maps the zero page again.
            self.mapping
                .discard()
                .map_err(os_error("madvise(MADV_DONTNEED)"))?;
            self.next = 0;
        }
        let offset = self.next * self.page;
        self.next += 1;
        Ok(FaultPage {
            mapping: &self.mapping,
            offset,
        })
    }

    /// The mapping's page size in bytes.
    pub(crate) fn page_size(&self) -> usize {
        self.page
    }
}

/// A page of the arena that faults when read: valid while the arena lives and is not dropped
/// again (both guaranteed by the borrow).
pub(crate) struct FaultPage<'a> {
    mapping: &'a Mapping,
    /// Below the mapping's length: a multiple of the page size under `FAULT_ARENA_PAGES` pages.
    offset: usize,
}

impl FaultPage<'_> {
    /// The page's address, as the kernel reports it in the fault's `PERF_SAMPLE_ADDR`.
    pub(crate) fn addr(&self) -> u64 {
        self.mapping.as_ptr().as_ptr() as u64 + self.offset as u64
    }

    /// Reads the page, which makes the kernel take (and stamp) a page fault.
    pub(crate) fn fault(&self) {
        self.mapping.touch(self.offset);
    }
}
