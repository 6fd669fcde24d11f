//! The record parser on arbitrary bytes: framing and decoding never panic, and every field it
//! returns lies inside the record it framed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_os::perf_event::record::{Parsed, Record};

fuzz_target!(|data: &[u8]| {
    // The first 9 bytes choose how the event was opened; the rest is the ring's bytes.
    let Some((opened, ring)) = data.split_first_chunk::<9>() else {
        return;
    };
    let sample_type = u64::from_ne_bytes(opened[..8].try_into().unwrap());
    let sample_id_all = opened[8] & 1 != 0;
    let mut rest = ring;
    while let Ok(record) = Record::from_bytes(rest) {
        let size = record.bytes.len();
        assert!(size >= 8 && size % 8 == 0 && size <= rest.len());
        if let Ok(parsed) = record.parse(sample_type, sample_id_all) {
            let inside = |field: &[u8]| {
                let start = field.as_ptr() as usize;
                let record_start = record.bytes.as_ptr() as usize;
                start >= record_start && start + field.len() <= record_start + size
            };
            match parsed {
                Parsed::Comm { comm, .. } => assert!(inside(comm)),
                Parsed::Mmap2 { filename, .. } => assert!(inside(filename)),
                _ => {}
            }
        }
        rest = &rest[size..];
    }
});
