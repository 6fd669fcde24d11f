//! The `PERF_RECORD_TIME_CONV` encoder.

use perfclock_core::TimeConversion;

use crate::record::{RecordHeader, RecordType};

/// The extended `struct perf_record_time_conv`: header, five u64, two u8 flags, 6 bytes padding.
pub const TIME_CONV_RECORD_SIZE: usize = 56;

/// `PERF_RECORD_TIME_CONV` in its 56-byte extended form, as perf's `perf_event__synth_time_conv`
/// writes it, little-endian. `cap_user_time_zero` is 1: with the extended form perf reads it and
/// converts every timestamp to 0 when it is clear.
pub fn time_conv_record(conversion: &TimeConversion) -> [u8; TIME_CONV_RECORD_SIZE] {
    let mut record = [0u8; TIME_CONV_RECORD_SIZE];
    let header = RecordHeader {
        kind: RecordType::TIME_CONV,
        misc: 0,
        size: TIME_CONV_RECORD_SIZE as u16,
    };
    record[0..8].copy_from_slice(&header.to_bytes());
    record[8..16].copy_from_slice(&u64::from(conversion.shift()).to_le_bytes());
    record[16..24].copy_from_slice(&u64::from(conversion.mult()).to_le_bytes());
    record[24..32].copy_from_slice(&conversion.zero().to_le_bytes());
    record[32..40].copy_from_slice(&conversion.cycles().to_le_bytes());
    record[40..48].copy_from_slice(&conversion.mask().to_le_bytes());
    record[48] = 1;
    record[49] = u8::from(conversion.is_short());
    record
}
