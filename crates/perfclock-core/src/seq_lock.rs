//! [`SeqLock`]: the sequence word of a seqlock, the one protocol under the kernel's page, our
//! own published pages and their mirrors, and the calibrator's bound cell. Modelled on
//! crossbeam-utils' `atomic/seq_lock.rs`, for a single writer that never waits.
//!
//! A read is `optimistic_read()` (an even stamp, or `None` while a write is in progress), loads
//! of the protected fields (relaxed atomics), then `validate_read(stamp)`. A write is `write()`,
//! stores of the fields (relaxed atomics), then dropping the guard. The kernel's update
//! (`perf_event_update_userpage`: `++lock; barrier(); fields; barrier(); ++lock`) follows the
//! same protocol, so a [`SeqLock`] read validates the kernel's page too.
//!
//! # Safety
//! [`SeqLock::from_ptr`] views a `u32` of a page as the sequence word; it is the only unsafe
//! code here.
#![allow(unsafe_code)]

use core::sync::atomic::{fence, AtomicU32, Ordering};

/// A seqlock's sequence word.
#[derive(Debug, Default)]
#[repr(transparent)]
pub struct SeqLock {
    /// Even while the protected fields are stable, odd while the writer is between its stores;
    /// each write adds 2. Only the (single) writer changes it.
    seq: AtomicU32,
}

impl SeqLock {
    /// A stable sequence word (0).
    pub const fn new() -> Self {
        Self {
            seq: AtomicU32::new(0),
        }
    }

    /// A sequence word that lives in memory we do not own as a Rust value (the `lock` field of
    /// a `perf_event_mmap_page`).
    ///
    /// # Safety
    /// `ptr` must be 4-aligned, valid for reads (and for writes, if [`SeqLock::write`] is
    /// called) for `'a`, and accessed concurrently only through atomics or by the kernel.
    #[inline(always)]
    pub unsafe fn from_ptr<'a>(ptr: *mut u32) -> &'a SeqLock {
        // SAFETY: the caller's contract is `AtomicU32::from_ptr`'s; `SeqLock` is a
        // `repr(transparent)` wrapper of `AtomicU32`, so the reference cast keeps layout and
        // validity.
        unsafe { &*(AtomicU32::from_ptr(ptr) as *const AtomicU32).cast::<SeqLock>() }
    }

    /// Starts a read: the stamp to validate against, or `None` while a write is in progress
    /// (then the fields are not worth loading).
    #[inline(always)]
    pub fn optimistic_read(&self) -> Option<u32> {
        // ATOMICS: Acquire pairs with the Release store that ends a write (the guard's drop),
        // so the field loads after this see at least that write.
        let stamp = self.seq.load(Ordering::Acquire);
        (stamp & 1 == 0).then_some(stamp)
    }

    /// Ends a read: whether the fields loaded since [`SeqLock::optimistic_read`] returned
    /// `stamp` belong to one write.
    #[inline(always)]
    pub fn validate_read(&self, stamp: u32) -> bool {
        // ATOMICS: keeps the (relaxed) field loads before the re-read of the sequence; pairs
        // with the Release fence in `write`, so a read that saw any store of a later write sees
        // the sequence changed here.
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == stamp
    }

    /// Starts a write: readers fail validation until the guard drops. Single writer: two
    /// concurrent writers do not corrupt memory but defeat the protocol.
    #[inline]
    pub fn write(&self) -> SeqLockWriteGuard<'_> {
        let odd = self.seq.load(Ordering::Relaxed) | 1;
        self.seq.store(odd, Ordering::Relaxed);
        // ATOMICS: orders the odd sequence before the field stores that follow; pairs with the
        // Acquire fence in `validate_read`.
        fence(Ordering::Release);
        SeqLockWriteGuard { lock: self, odd }
    }
}

/// An update in progress; dropping it publishes the fields stored meanwhile.
#[derive(Debug)]
#[must_use = "dropping the guard at once publishes an empty update"]
pub struct SeqLockWriteGuard<'a> {
    lock: &'a SeqLock,
    odd: u32,
}

impl Drop for SeqLockWriteGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // ATOMICS: Release pairs with the Acquire load in `optimistic_read`: a reader that sees
        // this even value sees every field store of the write.
        self.lock
            .seq
            .store(self.odd.wrapping_add(1), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_across_a_write_fails_validation() {
        let lock = SeqLock::new();
        let stamp = lock.optimistic_read().expect("stable");
        assert!(lock.validate_read(stamp));
        let guard = lock.write();
        assert_eq!(lock.optimistic_read(), None, "a write is in progress");
        assert!(!lock.validate_read(stamp));
        drop(guard);
        assert!(!lock.validate_read(stamp), "a write happened since");
        let after = lock.optimistic_read().expect("stable again");
        assert_eq!(after, stamp + 2);
    }

    #[test]
    fn a_writer_that_never_finishes_keeps_readers_out() {
        let lock = SeqLock::new();
        core::mem::forget(lock.write());
        assert_eq!(lock.optimistic_read(), None);
    }

    #[test]
    fn the_sequence_wraps() {
        let mut word = u32::MAX - 1;
        // SAFETY: a live, aligned u32 only accessed through the lock in this test.
        let lock = unsafe { SeqLock::from_ptr(&mut word) };
        drop(lock.write());
        assert_eq!(lock.optimistic_read(), Some(0));
    }
}
