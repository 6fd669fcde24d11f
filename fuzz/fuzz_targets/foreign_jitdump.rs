//! Another writer's jitdump from arbitrary bytes (`perfclock_jitdump::foreign`): a file perfclock
//! reads but did not write. `parse` must return (never panic, never reserve what a record only
//! claims); a parsed dump's arch copy must parse again to the same records, its timestamps the
//! mapped ones and its flag set. An odd first byte puts a valid little-endian header before the
//! rest of the input, so the records get fuzzed without the fuzzer having to find the magic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_jitdump::foreign::ForeignDump;
use perfclock_jitdump::ForeignDumpError;

/// A jitdump header: little-endian, version 1, 40 bytes, x86_64, pid 4242, flags 0.
fn header() -> Vec<u8> {
    let mut bytes = b"DTiJ".to_vec();
    for word in [1u32, 40, 62, 0, 4242] {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
    bytes.extend_from_slice(&[0; 16]);
    bytes
}

fuzz_target!(|input: &[u8]| {
    let owned;
    let data = match input.split_first() {
        Some((first, rest)) if first % 2 == 1 => {
            owned = [header(), rest.to_vec()].concat();
            &owned[..]
        }
        _ => input,
    };
    let Ok(dump) = ForeignDump::parse(data) else {
        return;
    };
    let copy = dump
        .with_counter_timestamps::<ForeignDumpError>(data, |t| Ok(t.wrapping_mul(3)))
        .expect("the parsed bytes copy");
    let again = ForeignDump::parse(&copy).expect("the copy parses");
    assert!(again.has_arch_timestamps());
    assert_eq!(again.pid(), dump.pid());
    assert_eq!(again.records().len(), dump.records().len());
    for (before, after) in dump.records().iter().zip(again.records()) {
        assert_eq!(after.offset, before.offset);
        assert_eq!(after.kind, before.kind);
        assert_eq!(after.timestamp, before.timestamp.wrapping_mul(3));
    }
});
