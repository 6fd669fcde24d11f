//! perf.data layout, scan and patch on hostile files: never a panic, and whatever is accepted
//! is patched consistently. Structure-aware: the input describes a perf.data (records of the
//! kinds the scan reads, jitdump names, compressed records, feature sections, where the
//! attributes go) built by the synth builder, then corrupted at chosen bytes, so the fuzzer
//! spends its time past the magic and the header checks; raw bytes are tried too, and the
//! recordings `perf record` wrote (perfdata's test fixtures), cut and corrupted. The samples'
//! addresses are read from every input too.
#![no_main]

use std::io::Cursor;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use perfclock_core::TimeConversion;
use perfclock_perfdata::synth::{self, Synth};
use perfclock_perfdata::{
    read_layout, sampled_addresses, scan_records, time_conv_record, ClockData, Feature, Patch,
    RecordType, TIME_CONV_RECORD_SIZE,
};

#[derive(Debug, Arbitrary)]
enum Record {
    Comm(u32, String),
    Mmap(u32, u16),
    Mmap2(u32, u16),
    TimeConv,
    /// Records compressed into one frame, split over two compressed records.
    Compressed {
        inner: Vec<(u32, u16)>,
        cut: u16,
        second_kind: bool,
    },
    Raw(u32, Vec<u8>),
}

#[derive(Debug, Arbitrary)]
enum Input {
    Raw(Vec<u8>),
    Built {
        records: Vec<Record>,
        features: Vec<(u8, Vec<u8>)>,
        attrs_after_data: bool,
        corruptions: Vec<(u16, u8)>,
    },
    /// One of the fixtures perf wrote, cut to `cut` bytes (when shorter) and corrupted.
    Recorded {
        which: u8,
        cut: u32,
        corruptions: Vec<(u32, u8)>,
    },
}

/// perfdata's fixtures (`crates/perfclock-perfdata/tests/fixtures/regenerate.sh`).
const RECORDED: [&[u8]; 5] = [
    include_bytes!("../../crates/perfclock-perfdata/tests/fixtures/default.data"),
    include_bytes!("../../crates/perfclock-perfdata/tests/fixtures/callgraph.data"),
    include_bytes!("../../crates/perfclock-perfdata/tests/fixtures/dwarf.data"),
    include_bytes!("../../crates/perfclock-perfdata/tests/fixtures/zstd.data"),
    include_bytes!("../../crates/perfclock-perfdata/tests/fixtures/jitdump.data"),
];

fn recorded(which: u8, cut: u32, corruptions: Vec<(u32, u8)>) -> Vec<u8> {
    let file = RECORDED[usize::from(which) % RECORDED.len()];
    let mut file = file[..file.len().min(cut as usize)].to_vec();
    for (at, value) in corruptions {
        if let Some(byte) = file.get_mut(at as usize) {
            *byte = value;
        }
    }
    file
}

/// A jitdump-like name: the same few pids recur, so repeats and distinct names both occur.
fn dump_name(pid: u32, variant: u16) -> String {
    match variant % 4 {
        0 => format!("/tmp/jit-{}.dump", pid % 8),
        1 => format!("/tmp/d{}/jit-{pid}.dump", variant % 3),
        2 => format!("/tmp/jit-{pid}.dumpx"),
        _ => "/usr/lib/libc.so.6".to_owned(),
    }
}

fn compressed_record(kind: RecordType, data: &[u8]) -> Vec<u8> {
    if kind == RecordType::COMPRESSED {
        let mut record = synth::record(kind, &[]);
        let data = &data[..data.len().min(synth::MAX_BODY)];
        record[6..8].copy_from_slice(&((8 + data.len()) as u16).to_le_bytes());
        record.extend_from_slice(data);
        record
    } else {
        let mut body = (data.len() as u64).to_le_bytes().to_vec();
        body.extend_from_slice(data);
        synth::record(kind, &body)
    }
}

fn build(
    records: Vec<Record>,
    features: Vec<(u8, Vec<u8>)>,
    attrs_after_data: bool,
    corruptions: Vec<(u16, u8)>,
) -> Vec<u8> {
    let mut bytes = Vec::new();
    for record in records {
        match record {
            Record::Comm(pid, name) => bytes.push(synth::comm(pid, &name)),
            Record::Mmap(pid, variant) => bytes.push(synth::mmap(pid, &dump_name(pid, variant))),
            Record::Mmap2(pid, variant) => bytes.push(synth::mmap2(pid, &dump_name(pid, variant))),
            Record::TimeConv => bytes.push(synth::record(RecordType::TIME_CONV, &[1; 48])),
            Record::Compressed {
                inner,
                cut,
                second_kind,
            } => {
                let inner: Vec<u8> = inner
                    .iter()
                    .flat_map(|(pid, variant)| synth::mmap2(*pid, &dump_name(*pid, *variant)))
                    .collect();
                let Ok(frame) = zstd::bulk::compress(&inner, 1) else {
                    continue;
                };
                let cut = usize::from(cut) % (frame.len() + 1);
                let kind = if second_kind {
                    RecordType::COMPRESSED2
                } else {
                    RecordType::COMPRESSED
                };
                bytes.push(compressed_record(kind, &frame[..cut]));
                bytes.push(compressed_record(kind, &frame[cut..]));
            }
            Record::Raw(kind, body) => bytes.push(synth::record(RecordType(kind), &body)),
        }
    }
    let mut features: Vec<(Feature, Vec<u8>)> = features
        .into_iter()
        .map(|(bit, contents)| (Feature(u32::from(bit)), contents))
        .collect();
    features.sort_by_key(|(feature, _)| *feature);
    features.dedup_by_key(|(feature, _)| *feature);
    let mut file = Synth {
        records: bytes,
        features,
        attrs_after_data,
    }
    .build()
    .bytes;
    for (at, value) in corruptions {
        let at = usize::from(at);
        if let Some(byte) = file.get_mut(at) {
            *byte = value;
        }
    }
    file
}

fuzz_target!(|input: Input| {
    let bytes = match input {
        Input::Raw(bytes) => bytes,
        Input::Built {
            records,
            features,
            attrs_after_data,
            corruptions,
        } => build(records, features, attrs_after_data, corruptions),
        Input::Recorded {
            which,
            cut,
            corruptions,
        } => recorded(which, cut, corruptions),
    };
    // The sampled addresses (linux-perf-data's reader under perfclock's use of it): any input
    // is an answer or an error, never a panic or a hang.
    if let Ok(sampled) = sampled_addresses(Cursor::new(&bytes)) {
        let _ = sampled.any_in(1, 0, u64::MAX);
    }
    let mut file = Cursor::new(&bytes);
    let Ok(layout) = read_layout(&mut file) else {
        return;
    };
    let Ok(scan) = scan_records(&mut file, &layout) else {
        return;
    };
    let conversion = TimeConversion::new(1_000_000_000, 30, 7).unwrap();
    let clock_data = ClockData::perf_clock(1_700_000_000_000_000_000, 42);
    let mut patch = Patch::new(&layout);
    patch.insert_record(&time_conv_record(&conversion)).unwrap();
    let adds_clock_data = patch
        .add_feature(Feature::CLOCK_DATA, clock_data.to_bytes().to_vec())
        .is_ok();
    let mut out = Vec::new();
    if patch.write(&mut file, &mut out).is_err() {
        return;
    }
    // Accepted: the output is the input grown by the insertions, and reads back with the same
    // maps, the TIME_CONV, and the clock data where it was added.
    assert_eq!(out.len() as u64, bytes.len() as u64 + patch.grown_by());
    let mut reread = Cursor::new(&out);
    let layout_out = read_layout(&mut reread).expect("the output's layout");
    let scan_out = scan_records(&mut reread, &layout_out).expect("the output's records");
    assert!(scan_out.has_time_conv);
    // The same maps, each record moved by the TIME_CONV inserted before them.
    let moved = TIME_CONV_RECORD_SIZE as u64;
    assert_eq!(scan_out.jit_dumps.len(), scan.jit_dumps.len());
    for (after, before) in scan_out.jit_dumps.iter().zip(&scan.jit_dumps) {
        assert_eq!((after.pid, &after.path), (before.pid, &before.path));
        assert_eq!(after.first_record, before.first_record.map(|at| at + moved));
        let shifted: Vec<u64> = before.marker_slashes.iter().map(|at| at + moved).collect();
        assert_eq!(after.marker_slashes, shifted);
    }
    assert_eq!(scan_out.sample_times, scan.sample_times);
    assert_eq!(scan_out.records, scan.records + 1);
    assert_eq!(layout_out.clockid, layout.clockid);
    if adds_clock_data {
        let (_, section) = layout_out
            .feature_sections
            .iter()
            .find(|(feature, _)| *feature == Feature::CLOCK_DATA)
            .expect("CLOCK_DATA in the table");
        let at = section.offset as usize;
        let contents = &out[at..at + section.size as usize];
        assert_eq!(ClockData::parse(contents), Some(clock_data));
    }
});
