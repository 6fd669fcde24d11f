//! An image's build id from arbitrary bytes (`perfclock_perfdata::elf_build_id`): the images
//! `perf inject --jit` writes hold what a runtime's dump carried. The reader must return
//! (never panic), and a build id it finds must fit an MMAP2 record. An odd first byte puts an
//! ELF64 header whose section table starts at byte 0x40 before the rest of the input, so the
//! section headers and notes get fuzzed without the fuzzer having to find the magic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_perfdata::{elf_build_id, MAX_BUILD_ID_BYTES};

fuzz_target!(|input: &[u8]| {
    let owned;
    let bytes = match input.split_first() {
        Some((first, rest)) if first % 2 == 1 => {
            let mut header = vec![0u8; 0x40];
            header[..6].copy_from_slice(b"\x7fELF\x02\x01");
            header[0x28..0x30].copy_from_slice(&0x40u64.to_le_bytes());
            header[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes());
            header[0x3c..0x3e].copy_from_slice(&u16::from(*first).to_le_bytes());
            owned = [header, rest.to_vec()].concat();
            &owned[..]
        }
        _ => input,
    };
    if let Some(id) = elf_build_id(bytes) {
        assert!((1..=MAX_BUILD_ID_BYTES).contains(&id.len()));
    }
});
