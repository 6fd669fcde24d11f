//! The layout of `struct perf_event_mmap_page` (`include/uapi/linux/perf_event.h`).
//!
//! The kernel writes this page while user space reads it, so the reader never forms a reference
//! into it: it takes field addresses with `addr_of!` and loads them atomically.

use core::mem::{offset_of, size_of};

/// Capability bits of [`PerfEventMmapPage::capabilities`].
pub mod caps {
    /// `cap_bit0_is_deprecated`: the bits below are meaningful.
    pub const BIT0_IS_DEPRECATED: u64 = 1 << 1;
    /// `cap_user_rdpmc`: the event's counter can be read with `rdpmc`.
    pub const USER_RDPMC: u64 = 1 << 2;
    /// `cap_user_time`: `time_mult`, `time_shift`, `time_offset` are valid.
    pub const USER_TIME: u64 = 1 << 3;
    /// `cap_user_time_zero`: `time_zero` is valid; counter-to-perf-time conversion is possible.
    pub const USER_TIME_ZERO: u64 = 1 << 4;
    /// `cap_user_time_short`: the counter is narrow; `time_cycles` and `time_mask` are valid.
    pub const USER_TIME_SHORT: u64 = 1 << 5;
}

/// `struct perf_event_mmap_page`, field for field. The capability bitfield union is the plain
/// `capabilities` word; see [`caps`]. Each field is the uapi header's, under its name and
/// documented there.
#[repr(C)]
#[derive(Debug)]
#[allow(missing_docs)]
pub struct PerfEventMmapPage {
    pub version: u32,
    pub compat_version: u32,
    /// Seqlock: odd while the writer is updating the page.
    pub lock: u32,
    pub index: u32,
    pub offset: i64,
    pub time_enabled: u64,
    pub time_running: u64,
    pub capabilities: u64,
    pub pmc_width: u16,
    pub time_shift: u16,
    pub time_mult: u32,
    pub time_offset: u64,
    pub time_zero: u64,
    pub size: u32,
    pub reserved_1: u32,
    pub time_cycles: u64,
    pub time_mask: u64,
    pub reserved: [u8; 928],
    pub data_head: u64,
    pub data_tail: u64,
    pub data_offset: u64,
    pub data_size: u64,
    pub aux_head: u64,
    pub aux_tail: u64,
    pub aux_offset: u64,
    pub aux_size: u64,
}

/// Bytes of the page the kernel lays out (the rest of the 4 KiB page is padding).
pub const PAGE_LAYOUT_BYTES: usize = 1088;

const _: () = {
    assert!(size_of::<PerfEventMmapPage>() == PAGE_LAYOUT_BYTES);
    assert!(offset_of!(PerfEventMmapPage, lock) == 8);
    assert!(offset_of!(PerfEventMmapPage, capabilities) == 40);
    assert!(offset_of!(PerfEventMmapPage, pmc_width) == 48);
    assert!(offset_of!(PerfEventMmapPage, time_shift) == 50);
    assert!(offset_of!(PerfEventMmapPage, time_mult) == 52);
    assert!(offset_of!(PerfEventMmapPage, time_zero) == 64);
    assert!(offset_of!(PerfEventMmapPage, size) == 72);
    assert!(offset_of!(PerfEventMmapPage, time_cycles) == 80);
    assert!(offset_of!(PerfEventMmapPage, time_mask) == 88);
    assert!(offset_of!(PerfEventMmapPage, data_head) == 1024);
    assert!(offset_of!(PerfEventMmapPage, aux_size) == 1080);
};

impl PerfEventMmapPage {
    /// A page with every field zero: no capabilities, so readers report the time unavailable.
    pub const fn zeroed() -> Self {
        PerfEventMmapPage {
            version: 0,
            compat_version: 0,
            lock: 0,
            index: 0,
            offset: 0,
            time_enabled: 0,
            time_running: 0,
            capabilities: 0,
            pmc_width: 0,
            time_shift: 0,
            time_mult: 0,
            time_offset: 0,
            time_zero: 0,
            size: 0,
            reserved_1: 0,
            time_cycles: 0,
            time_mask: 0,
            reserved: [0; 928],
            data_head: 0,
            data_tail: 0,
            data_offset: 0,
            data_size: 0,
            aux_head: 0,
            aux_tail: 0,
            aux_offset: 0,
            aux_size: 0,
        }
    }
}

// The layout test reads the bindings' unions and zeroes their struct.
#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;
    use perf_event_open_sys::bindings::perf_event_mmap_page as Sys;

    #[test]
    fn layout_matches_perf_event_open_sys_bindings() {
        assert_eq!(size_of::<Sys>(), size_of::<PerfEventMmapPage>());
        macro_rules! same_offset {
            ($($field:ident),*) => {$(
                assert_eq!(
                    offset_of!(Sys, $field),
                    offset_of!(PerfEventMmapPage, $field),
                    stringify!($field)
                );
            )*};
        }
        same_offset!(
            version,
            compat_version,
            lock,
            index,
            offset,
            time_enabled,
            time_running,
            pmc_width,
            time_shift,
            time_mult,
            time_offset,
            time_zero,
            size,
            time_cycles,
            time_mask,
            data_head,
            data_tail,
            data_offset,
            data_size,
            aux_head,
            aux_tail,
            aux_offset,
            aux_size
        );
        assert_eq!(
            offset_of!(Sys, __bindgen_anon_1),
            offset_of!(PerfEventMmapPage, capabilities)
        );
    }

    #[test]
    fn capability_bits_match_the_kernel_bitfield() {
        // SAFETY: the bindings' page is plain old data; all-zero bytes are a valid value.
        let mut sys: Sys = unsafe { core::mem::zeroed() };
        // SAFETY: both union variants are plain integers covering the same eight bytes.
        let bits = unsafe { &mut sys.__bindgen_anon_1.__bindgen_anon_1 };
        bits.set_cap_user_rdpmc(1);
        bits.set_cap_user_time(1);
        bits.set_cap_user_time_zero(1);
        bits.set_cap_user_time_short(1);
        bits.set_cap_bit0_is_deprecated(1);
        // SAFETY: as above, reading the union as the whole word.
        let word = unsafe { sys.__bindgen_anon_1.capabilities };
        assert_eq!(
            word,
            caps::BIT0_IS_DEPRECATED
                | caps::USER_RDPMC
                | caps::USER_TIME
                | caps::USER_TIME_ZERO
                | caps::USER_TIME_SHORT
        );
    }
}
