//! [`PageWriter`]: publishes a conversion into a page of ordinary memory (and its mirror) with the
//! kernel's seqlock protocol, so a calibrated clock is read with the same reader as the kernel's.
//!
//! # Safety
//! The writer holds raw pointers to pages that readers load concurrently; it stores through
//! [`PageFields`] only, under its constructor's contract.
#![allow(unsafe_code)]

use core::ptr::NonNull;
use core::sync::atomic::Ordering;

use crate::page::{caps, PerfEventMmapPage};
use crate::page_fields::{pack_scale, PageFields};
use crate::reader::RawTimeFields;
use crate::TimeConversion;

/// Publishes a conversion into a page of ordinary memory (and its mirror) with the kernel's
/// protocol.
#[derive(Debug)]
pub struct PageWriter {
    /// Invariant: both point to writable, 8-aligned `PerfEventMmapPage`s that outlive this
    /// writer, and this is their only writer. `mirror` equals `page` unless mirrored.
    page: NonNull<PerfEventMmapPage>,
    mirror: NonNull<PerfEventMmapPage>,
}

// SAFETY: the writer performs only atomic stores through the pointer; moving it to another thread
// keeps the single-writer invariant.
unsafe impl Send for PageWriter {}

impl PageWriter {
    /// A writer of `page` (see [`PageReader::new`](crate::PageReader::new)(crate::PageReader::new) for an example).
    ///
    /// # Safety
    /// `page` must point to 8-aligned, writable memory of at least
    /// `size_of::<PerfEventMmapPage>()` bytes that outlives the writer, that no other writer
    /// updates, and that nothing accesses except through atomic loads ([`PageReader`](crate::PageReader)).
    pub const unsafe fn new(page: NonNull<PerfEventMmapPage>) -> Self {
        PageWriter { page, mirror: page }
    }

    /// A writer that updates `mirror` completely, then `page`: read both with
    /// [`PageReader::new_mirrored`](crate::PageReader::new_mirrored) and no reader ever waits for this writer.
    ///
    /// # Safety
    /// As [`PageWriter::new`], for both pages, which must not overlap.
    pub const unsafe fn new_mirrored(
        page: NonNull<PerfEventMmapPage>,
        mirror: NonNull<PerfEventMmapPage>,
    ) -> Self {
        PageWriter { page, mirror }
    }

    /// Publishes `conversion` with `cap_user_time` and `cap_user_time_zero` set (and
    /// `cap_user_time_short` for a narrow counter).
    pub fn publish(&self, conversion: &TimeConversion) {
        let short = if conversion.is_short() {
            caps::USER_TIME_SHORT
        } else {
            0
        };
        self.write(&RawTimeFields {
            capabilities: caps::BIT0_IS_DEPRECATED | caps::USER_TIME | caps::USER_TIME_ZERO | short,
            time_mult: conversion.mult(),
            time_shift: conversion.shift(),
            time_zero: conversion.zero(),
            time_cycles: conversion.cycles(),
            time_mask: if conversion.is_short() {
                conversion.mask()
            } else {
                0
            },
        });
    }

    /// Clears the capabilities: readers report [`ReadError::TimeZeroUnavailable`](crate::ReadError::TimeZeroUnavailable) from now on.
    pub fn withdraw(&self) {
        self.write(&RawTimeFields {
            capabilities: caps::BIT0_IS_DEPRECATED,
            time_mult: 0,
            time_shift: 0,
            time_zero: 0,
            time_cycles: 0,
            time_mask: 0,
        });
    }

    /// Writes arbitrary field values, valid or not (tests use it to publish garbage): the
    /// mirror first, if any, then the page.
    pub fn write(&self, raw: &RawTimeFields) {
        if self.mirror != self.page {
            write_page(self.mirror, raw);
        }
        write_page(self.page, raw);
    }
}

pub(crate) fn write_page(page: NonNull<PerfEventMmapPage>, raw: &RawTimeFields) {
    // SAFETY: the writer's contract: the page is ours to write, aligned, and accessed by
    // others only through atomic loads.
    let fields = unsafe { PageFields::of(page.as_ptr()) };
    // The reader loads `time_shift` and `time_mult` as one word, so they are stored as one
    // (same-size accesses); `pmc_width`, the word's other field, is kept. This is the word's
    // only writer, so loading it before the update and storing it within is not a lost update;
    // packing before the update keeps the window in which readers fail short.
    let pmc_width = u16::from_ne_bytes({
        let bytes = fields.scale.load(Ordering::Relaxed).to_ne_bytes();
        [bytes[0], bytes[1]]
    });
    let scale = pack_scale(pmc_width, raw.time_shift, raw.time_mult);
    let update = fields.lock.write();
    fields
        .capabilities
        .store(raw.capabilities, Ordering::Relaxed);
    fields.scale.store(scale, Ordering::Relaxed);
    fields.time_zero.store(raw.time_zero, Ordering::Relaxed);
    fields.time_cycles.store(raw.time_cycles, Ordering::Relaxed);
    fields.time_mask.store(raw.time_mask, Ordering::Relaxed);
    drop(update);
}
