//! The record scan on synthetic perf.data: jitdump maps found once each, inside compressed
//! records split anywhere, TIME_CONV seen, and the cap on distinct dumps.

use std::io::Cursor;
use std::path::PathBuf;

use perfclock_perfdata::synth::{self, Synth};
use perfclock_perfdata::{
    read_layout, scan_records, Feature, JitDumpMap, PerfDataError, RecordType, RecordsError, Scan,
    MAX_JIT_DUMPS,
};

fn scan_of(records: Vec<Vec<u8>>) -> Result<Scan, PerfDataError> {
    let built = Synth {
        records,
        ..Synth::default()
    }
    .build();
    let mut input = Cursor::new(&built.bytes);
    let layout = read_layout(&mut input)?;
    scan_records(&mut input, &layout)
}

fn map(pid: u32, path: &str) -> (u32, PathBuf) {
    (pid, PathBuf::from(path))
}

/// The pid and path of each map, in order.
fn named(maps: &[JitDumpMap]) -> Vec<(u32, PathBuf)> {
    maps.iter().map(|map| (map.pid, map.path.clone())).collect()
}

#[test]
fn finds_jitdump_maps_once_each_in_file_order_and_no_time_conv() {
    let built = Synth {
        records: vec![
            synth::comm(7, "java"),
            synth::mmap2(7, "/usr/lib/libc.so.6"),
            synth::mmap2(7, "/tmp/x/jit-7.dump"),
            synth::mmap(8, "/tmp/y/jit-8.dump"),
            synth::mmap2(7, "/tmp/x/jit-7.dump"),
            synth::mmap2(9, "/tmp/jit-9.dumpx"),
        ],
        features: vec![(Feature::HOSTNAME, b"\x08\0\0\0host\0\0\0\0".to_vec())],
        attrs_after_data: false,
    }
    .build();
    let mut input = Cursor::new(&built.bytes);
    let layout = read_layout(&mut input).unwrap();
    assert_eq!(layout.data.offset as usize, built.data.0);
    let scan = scan_records(&mut input, &layout).unwrap();
    assert_eq!(scan.records, 6);
    assert!(!scan.has_time_conv);
    assert_eq!(
        named(&scan.jit_dumps),
        vec![map(7, "/tmp/x/jit-7.dump"), map(8, "/tmp/y/jit-8.dump")]
    );
    // Every record that names a dump is kept: its first record, and where perf's `/jit-` is.
    let places: Vec<usize> = scan
        .jit_dumps
        .iter()
        .map(|m| m.marker_slashes.len())
        .collect();
    assert_eq!(places, [2, 1]);
    for map in &scan.jit_dumps {
        let first = map.first_record.unwrap() as usize;
        assert!(first >= built.data.0);
        for &slash in &map.marker_slashes {
            let slash = slash as usize;
            assert_eq!(&built.bytes[slash..slash + 5], b"/jit-");
            assert!(slash > first);
        }
    }
}

#[test]
fn sees_a_time_conv() {
    let time_conv = synth::record(RecordType::TIME_CONV, &[0xAB; 48]);
    let scan = scan_of(vec![time_conv, synth::comm(1, "x")]).unwrap();
    assert!(scan.has_time_conv);
}

/// `PERF_RECORD_COMPRESSED`: unpadded, its whole body is zstd data.
fn compressed(data: &[u8]) -> Vec<u8> {
    let mut record = Vec::new();
    record.extend_from_slice(&RecordType::COMPRESSED.0.to_le_bytes());
    record.extend_from_slice(&0u16.to_le_bytes());
    record.extend_from_slice(&u16::try_from(8 + data.len()).unwrap().to_le_bytes());
    record.extend_from_slice(data);
    record
}

/// `PERF_RECORD_COMPRESSED2`: the data's size, the data, padding to 8 bytes.
fn compressed2(data: &[u8]) -> Vec<u8> {
    let mut body = (data.len() as u64).to_le_bytes().to_vec();
    body.extend_from_slice(data);
    synth::record(RecordType::COMPRESSED2, &body)
}

#[test]
fn scans_inside_compressed_records_split_anywhere() {
    let inner = [
        synth::comm(5, "java"),
        synth::mmap2(5, "/tmp/jit-5.dump"),
        synth::comm(5, "java"),
    ]
    .concat();
    let frame = zstd::bulk::compress(&inner, 1).unwrap();
    // The frame, and so a record inside, cut in two at every point, in both record kinds.
    for cut in 1..frame.len() {
        for wrap in [compressed, compressed2] {
            let scan = scan_of(vec![
                synth::comm(1, "perf"),
                wrap(&frame[..cut]),
                synth::comm(1, "perf"),
                wrap(&frame[cut..]),
            ])
            .unwrap();
            assert_eq!(named(&scan.jit_dumps), vec![map(5, "/tmp/jit-5.dump")]);
            assert_eq!(scan.records, 7);
            assert!(scan.compressed_markers);
        }
    }
    // A stream that ends inside a record, and data that is no zstd.
    let cut_record = zstd::bulk::compress(&inner[..inner.len() - 8], 1).unwrap();
    for records in [vec![compressed(&cut_record)], vec![compressed(&[7; 40])]] {
        assert!(matches!(
            scan_of(records),
            Err(PerfDataError::Records(RecordsError::Compressed { .. }))
        ));
    }
    // A record inside claiming less than its header.
    let zero = zstd::bulk::compress(&[0; 16], 1).unwrap();
    let message = scan_of(vec![compressed2(&zero)]).unwrap_err().to_string();
    assert!(message.contains("less than its own header"), "{message}");
}

/// The distinct names are a set, capped: one more than [`MAX_JIT_DUMPS`] distinct names is a
/// typed error naming the record, while repeats of known names cost nothing (no search of a
/// list per map).
#[test]
fn distinct_dumps_beyond_the_cap_are_refused_and_repeats_are_free() {
    let names: Vec<Vec<u8>> = (0..=MAX_JIT_DUMPS as u32)
        .map(|pid| synth::mmap2(pid, &format!("/tmp/d/jit-{pid}.dump")))
        .collect();
    let at_cap = scan_of(names[..MAX_JIT_DUMPS].to_vec()).unwrap();
    assert_eq!(at_cap.jit_dumps.len(), MAX_JIT_DUMPS);
    assert_eq!(
        named(&at_cap.jit_dumps[12_345..12_346]),
        [map(12_345, "/tmp/d/jit-12345.dump")]
    );
    let error = scan_of(names.clone()).unwrap_err();
    assert!(
        matches!(
            error,
            PerfDataError::Records(RecordsError::TooManyJitDumps { .. })
        ),
        "{error}"
    );
    assert!(error.to_string().contains("131072 distinct"), "{error}");
    // The same name repeated 200k times: one dump.
    let repeated = vec![synth::mmap2(1, "/tmp/d/jit-1.dump"); 200_000];
    let scan = scan_of(repeated).unwrap();
    assert_eq!(named(&scan.jit_dumps), vec![map(1, "/tmp/d/jit-1.dump")]);
    assert_eq!(scan.records, 200_000);
}
