//! The allocator that counts what the handler's calls allocate.
//!
//! # Safety
//! `GlobalAlloc` is an unsafe trait: every call is forwarded unchanged to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    /// Set while this thread runs the handler's calls: allocations then count.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting the allocations made while the proof runs a call. The proof's
/// binary installs it: `#[global_allocator] static ALLOCATOR: CountingAllocator =
/// CountingAllocator;`.
#[derive(Debug)]
pub struct CountingAllocator;

impl CountingAllocator {
    fn count() {
        if IN_HANDLER.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only an
// atomic and a const-initialised thread-local without a destructor (no allocation).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::count();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::count();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::count();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        Self::count();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Runs `call` on this thread, returning what it returned and how many times this thread
/// allocated, reallocated or freed meanwhile (0 unless the binary installed
/// [`CountingAllocator`]).
pub(crate) fn counting<T>(call: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    IN_HANDLER.with(|flag| flag.set(true));
    let result = call();
    IN_HANDLER.with(|flag| flag.set(false));
    (result, ALLOCATIONS.load(Ordering::Relaxed) - before)
}

/// Whether the binary installed [`CountingAllocator`]: one allocation must count.
pub(crate) fn installed() -> bool {
    let ((), allocations) = counting(|| drop(std::hint::black_box(Box::new(0u64))));
    allocations > 0
}
