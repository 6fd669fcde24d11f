//! A perf page snapshot from arbitrary bytes: the first 1088 bytes (zero-padded) are the page,
//! the next 8 the counter value. Whatever the bytes, the reader must end (odd lock: `Contended`)
//! and agree with a model written from the uapi header's rules; `raw()` must return the fields
//! as laid out; republishing the fields with `PageWriter` must read back identically.
#![no_main]

use core::ptr::NonNull;

use libfuzzer_sys::fuzz_target;
use perfclock_core::page::{caps, PerfEventMmapPage, PAGE_LAYOUT_BYTES};
use perfclock_core::RawTimeFields;
use perfclock_core::{PageReader, PageWriter, ParamError, ReadError};

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    for (i, byte) in word.iter_mut().enumerate() {
        *byte = bytes.get(offset + i).copied().unwrap_or(0);
    }
    u64::from_ne_bytes(word)
}

fn reference_ns(raw: &RawTimeFields, cycles: u64) -> u64 {
    let cycles = if raw.capabilities & caps::USER_TIME_SHORT != 0 {
        raw.time_cycles
            .wrapping_add(cycles.wrapping_sub(raw.time_cycles) & raw.time_mask)
    } else {
        cycles
    };
    let shift = u32::from(raw.time_shift);
    let quot = u128::from(cycles >> shift);
    let rem = u128::from(cycles & ((1u64 << shift) - 1));
    let mult = u128::from(raw.time_mult);
    (u128::from(raw.time_zero) + quot * mult + ((rem * mult) >> shift)) as u64
}

fn expected(raw: &RawTimeFields, cycles: u64) -> Result<u64, ReadError> {
    if raw.capabilities & caps::USER_TIME_ZERO == 0 {
        return Err(ReadError::TimeZeroUnavailable {
            capabilities: raw.capabilities,
        });
    }
    let short = raw.capabilities & caps::USER_TIME_SHORT != 0;
    let mask_ok = raw.time_mask != 0 && raw.time_mask & raw.time_mask.wrapping_add(1) == 0;
    if short && !mask_ok {
        return Err(ParamError::InvalidMask(raw.time_mask).into());
    }
    if raw.time_mult == 0 {
        return Err(ParamError::ZeroMultiplier.into());
    }
    if raw.time_shift > 63 {
        return Err(ParamError::ShiftTooLarge(raw.time_shift).into());
    }
    Ok(reference_ns(raw, cycles))
}

fuzz_target!(|data: &[u8]| {
    let page = Box::into_raw(Box::new(PerfEventMmapPage::zeroed()));
    let len = data.len().min(PAGE_LAYOUT_BYTES);
    // SAFETY: `page` is a fresh allocation of PAGE_LAYOUT_BYTES bytes of plain integers (valid
    // for any bytes), not yet shared with any reader or writer.
    unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), page.cast::<u8>(), len) };
    let cycles = u64_at(data, PAGE_LAYOUT_BYTES);
    let page = NonNull::new(page).expect("Box is never null");
    // SAFETY: the page is 8-aligned, lives until the end of this function, and from here on is
    // accessed only through the reader (atomic loads).
    let reader = unsafe { PageReader::new(page) };

    let lock = u32::from_ne_bytes([8, 9, 10, 11].map(|i| data.get(i).copied().unwrap_or(0)));
    let mut counter_reads = 0u32;
    let reading = reader.read_with(|| {
        counter_reads += 1;
        cycles
    });
    if lock % 2 == 1 {
        assert_eq!(reading, Err(ReadError::Contended));
        // (One read only: each spends MAX_RETRIES spins, the bulk of this target's time.)
        assert_eq!(counter_reads, 0, "counter read under an odd lock");
    } else {
        assert_eq!(counter_reads, 1);
        let raw = reader.raw().expect("an even lock that never moves");
        // The fields as the uapi header lays them out.
        assert_eq!(raw.capabilities, u64_at(data, 40));
        assert_eq!(u64::from(raw.time_shift), u64_at(data, 50) & 0xffff);
        assert_eq!(u64::from(raw.time_mult), u64_at(data, 52) & 0xffff_ffff);
        assert_eq!(raw.time_zero, u64_at(data, 64));
        assert_eq!(raw.time_cycles, u64_at(data, 80));
        assert_eq!(raw.time_mask, u64_at(data, 88));
        assert_eq!(reading.map(|r| r.ns()), expected(&raw, cycles));
        assert_eq!(reader.conversion().is_ok(), reading.is_ok());

        // The same fields through the writer's protocol onto a clean page read back the same.
        let copy = NonNull::from(Box::leak(Box::new(PerfEventMmapPage::zeroed())));
        // SAFETY: a fresh 8-aligned page, freed below after its only writer and reader are done.
        let (writer, copy_reader) = unsafe { (PageWriter::new(copy), PageReader::new(copy)) };
        writer.write(&raw);
        assert_eq!(copy_reader.raw(), Ok(raw));
        assert_eq!(
            copy_reader.read_with(|| cycles),
            reader.read_with(|| cycles)
        );
        // SAFETY: allocated by Box above; no reader or writer of it is used after this.
        drop(unsafe { Box::from_raw(copy.as_ptr()) });
    }
    // SAFETY: allocated by Box above; the reader is not used after this.
    drop(unsafe { Box::from_raw(page.as_ptr()) });
});
