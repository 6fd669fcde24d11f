//! Atomic views of the page's fields that the seqlock protects: the only way readers and writers
//! touch a page.
//!
//! # Safety
//! A view is formed only from a pointer to a valid, 8-aligned page that others access only
//! atomically (or the kernel writes), for the view's lifetime: the contract of [`PageFields::of`].
#![allow(unsafe_code)]

use core::ptr::addr_of_mut;
use core::sync::atomic::AtomicU64;

use crate::page::PerfEventMmapPage;
use crate::seq_lock::SeqLock;

/// Atomic views of the fields the seqlock protects.
pub(crate) struct PageFields<'a> {
    pub(crate) lock: &'a SeqLock,
    pub(crate) capabilities: &'a AtomicU64,
    /// `pmc_width`, `time_shift` and `time_mult` (offsets 48, 50, 52), one 8-aligned word.
    pub(crate) scale: &'a AtomicU64,
    pub(crate) time_zero: &'a AtomicU64,
    pub(crate) time_cycles: &'a AtomicU64,
    pub(crate) time_mask: &'a AtomicU64,
}

impl PageFields<'_> {
    /// # Safety
    /// `page` must be valid, 8-aligned, and accessed concurrently only atomically (or by the
    /// kernel) for the returned lifetime.
    #[inline(always)]
    pub(crate) unsafe fn of<'a>(page: *mut PerfEventMmapPage) -> PageFields<'a> {
        // SAFETY: the caller's contract; every field is naturally aligned in the `repr(C)`
        // layout (checked at compile time in `page`), as `from_ptr` requires, and the 8-byte
        // view at `pmc_width` lies inside the page and overlaps only `time_shift`/`time_mult`,
        // which are accessed through it alone.
        unsafe {
            PageFields {
                lock: SeqLock::from_ptr(addr_of_mut!((*page).lock)),
                capabilities: AtomicU64::from_ptr(addr_of_mut!((*page).capabilities)),
                // `pmc_width` starts the 8-byte word (offset 48, checked in `page`); the
                // page is 8-aligned, so the word is too.
                scale: AtomicU64::from_ptr(addr_of_mut!((*page).pmc_width).cast::<u64>()),
                time_zero: AtomicU64::from_ptr(addr_of_mut!((*page).time_zero)),
                time_cycles: AtomicU64::from_ptr(addr_of_mut!((*page).time_cycles)),
                time_mask: AtomicU64::from_ptr(addr_of_mut!((*page).time_mask)),
            }
        }
    }
}

/// `time_shift` and `time_mult` out of the word at offset 48 (`pmc_width`, `time_shift`,
/// `time_mult`, each in native byte order, as `repr(C)` lays them out).
#[inline(always)]
pub(crate) const fn unpack_scale(word: u64) -> (u16, u32) {
    let bytes = word.to_ne_bytes();
    (
        u16::from_ne_bytes([bytes[2], bytes[3]]),
        u32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
    )
}

/// The word at offset 48 from its three fields (the inverse of [`unpack_scale`]).
pub(crate) const fn pack_scale(pmc_width: u16, time_shift: u16, time_mult: u32) -> u64 {
    let [w0, w1] = pmc_width.to_ne_bytes();
    let [s0, s1] = time_shift.to_ne_bytes();
    let [m0, m1, m2, m3] = time_mult.to_ne_bytes();
    u64::from_ne_bytes([w0, w1, s0, s1, m0, m1, m2, m3])
}
