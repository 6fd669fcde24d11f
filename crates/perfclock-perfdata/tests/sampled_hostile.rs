//! `sampled_addresses` on records whose claimed sizes or fields linux-perf-data would trust: a
//! clear answer, never an allocation sized by the claim or a panic (found by the perfdata fuzz
//! target).

use std::io::Cursor;

use perfclock_perfdata::synth::{self, Synth};
use perfclock_perfdata::{sampled_addresses, PerfDataError, RecordType, RecordsError};

/// `perf_event_attr.sample_type`'s offset in the attribute.
const SAMPLE_TYPE_AT: usize = 24;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;

fn file(records: Vec<Vec<u8>>) -> synth::Built {
    Synth {
        records,
        features: Vec::new(),
        attrs_after_data: false,
    }
    .build()
}

fn words(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|word| word.to_le_bytes()).collect()
}

#[test]
fn aux_data_claimed_past_the_data_is_refused() {
    // An AUXTRACE body: size, offset, reference, idx, tid, cpu+reserved.
    let claimed = 0x7f7f_7f7f_7f7f_7f7f;
    let auxtrace = synth::record(RecordType::AUXTRACE, &words(&[claimed, 0, 0, 0, 0, 0]));
    let built = file(vec![auxtrace.clone(), synth::comm(1, "x")]);
    let error = sampled_addresses(Cursor::new(&built.bytes)).unwrap_err();
    let after = (built.data.0 + auxtrace.len()) as u64;
    assert!(
        matches!(error, PerfDataError::Records(RecordsError::RecordPastData { offset }) if offset == after),
        "{error:?}"
    );

    // The control: AUX data that is there is skipped, and the records after it are read.
    let aux = words(&[7; 2]);
    let auxtrace = synth::record(RecordType::AUXTRACE, &words(&[16, 0, 0, 0, 0, 0]));
    let built = file(vec![[auxtrace, aux].concat(), synth::comm(1, "x")]);
    sampled_addresses(Cursor::new(&built.bytes)).unwrap();
}

#[test]
fn a_call_chain_longer_than_memory_is_skipped() {
    // pid/tid, then the chain: its length, then its addresses.
    let sample = |chain: &[u64]| {
        let mut body = words(&[7 | 7 << 32, chain.len() as u64]);
        body.extend(words(chain));
        synth::record(RecordType::SAMPLE, &body)
    };
    let mut hostile = sample(&[0x1000]);
    let length_at = hostile.len() - 16;
    hostile[length_at..length_at + 8].copy_from_slice(&(u64::MAX / 4).to_le_bytes());
    let mut built = file(vec![hostile, sample(&[0x2000, 0x3000])]);
    let at = built.attrs + SAMPLE_TYPE_AT;
    built.bytes[at..at + 8]
        .copy_from_slice(&(PERF_SAMPLE_TID | PERF_SAMPLE_CALLCHAIN).to_le_bytes());
    let sampled = sampled_addresses(Cursor::new(&built.bytes)).unwrap();
    assert_eq!(sampled.samples(), 1);
    assert!(sampled.any_in(7, 0x2000, 0) && sampled.any_in(7, 0x3000, 0));
    assert!(!sampled.any_in(7, 0x1000, 0));
}

#[test]
fn an_mmap2_build_id_longer_than_20_bytes_is_passed_over() {
    // PERF_RECORD_MISC_MMAP_BUILD_ID: the body carries a build id (its length byte, 3 bytes of
    // padding, 20 bytes) where the device numbers would be; linux-perf-event-reader asserts the
    // length is at most 20.
    const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
    let mut hostile = synth::mmap2(7, "/tmp/x.so");
    hostile[4..6].copy_from_slice(&MISC_MMAP_BUILD_ID.to_le_bytes());
    let build_id_len_at = 8 + 4 + 4 + 8 + 8 + 8;
    hostile[build_id_len_at] = 21;
    let sample = synth::record(RecordType::SAMPLE, &words(&[7 | 7 << 32]));
    let mut built = file(vec![hostile, sample]);
    let at = built.attrs + SAMPLE_TYPE_AT;
    built.bytes[at..at + 8].copy_from_slice(&PERF_SAMPLE_TID.to_le_bytes());
    let sampled = sampled_addresses(Cursor::new(&built.bytes)).unwrap();
    assert_eq!(sampled.samples(), 1);
    assert!(sampled.has_process(7));
}
