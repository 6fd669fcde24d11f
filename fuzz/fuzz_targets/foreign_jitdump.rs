//! A jitdump from arbitrary bytes (`perfclock_jitdump::foreign`): a file perfclock reads but did
//! not write. Reading must return (never panic, never reserve what a record only claims past
//! the bytes at hand); a copy that keeps every other code load, retimed and with another pid,
//! must read back as exactly the records the policy kept, in order, with the mapped timestamps,
//! the pid and the arch flag. An odd first byte puts a valid little-endian header before the
//! rest of the input, so the records get fuzzed without the fuzzer having to find the magic.
#![no_main]

use std::io;

use libfuzzer_sys::fuzz_target;
use perfclock_jitdump::foreign::{copy, CopyPolicy, DumpReader, Record, JIT_CODE_LOAD};
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

#[derive(Debug)]
struct Failed;

impl From<ForeignDumpError> for Failed {
    fn from(_: ForeignDumpError) -> Self {
        Failed
    }
}

impl From<io::Error> for Failed {
    fn from(_: io::Error) -> Self {
        Failed
    }
}

/// Keeps every other load; triples each timestamp; pid 77.
#[derive(Default)]
struct Alternate {
    loads: usize,
    /// (kind, timestamp) of each record read.
    read: Vec<(u32, u64)>,
}

impl CopyPolicy for Alternate {
    type Error = Failed;
    fn keep_load(&mut self, _: &Record<'_>) -> bool {
        self.loads += 1;
        self.loads % 2 == 1
    }
    fn timestamp(&mut self, record: &Record<'_>) -> Result<u64, Failed> {
        self.read.push((record.kind, record.timestamp));
        Ok(record.timestamp.wrapping_mul(3))
    }
    fn arch_timestamps(&self) -> bool {
        true
    }
    fn pid(&self) -> Option<u32> {
        Some(77)
    }
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
    let Ok(mut dump) = DumpReader::new(data, data.len() as u64) else {
        return;
    };
    let mut policy = Alternate::default();
    let mut out = Vec::new();
    let Ok(counts) = copy(&mut dump, &mut out, &mut policy) else {
        return;
    };
    assert_eq!(counts.loads, policy.loads);
    assert_eq!(counts.kept, policy.loads.div_ceil(2));
    let mut again = DumpReader::new(&out[..], out.len() as u64).expect("the copy reads");
    assert!(again.has_arch_timestamps());
    assert_eq!(again.pid(), 77);
    let mut loads = 0;
    while let Some(record) = again.next_record().expect("the copy's records read") {
        if record.kind == JIT_CODE_LOAD {
            loads += 1;
        }
        assert!(
            policy
                .read
                .iter()
                .any(|&(kind, stamp)| kind == record.kind
                    && stamp.wrapping_mul(3) == record.timestamp),
            "a record the dump did not hold: {record:?}"
        );
    }
    assert_eq!(loads, counts.kept);
});
