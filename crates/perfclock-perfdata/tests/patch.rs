//! Layout checks and the patching copy on synthetic perf.data: TIME_CONV and CLOCK_DATA
//! inserted with every section found at its moved place, an independent reader
//! (linux-perf-data) parsing the output, and every malformed input a typed error.

use std::io::Cursor;

use perfclock_core::TimeConversion;
use perfclock_perfdata::synth::{self, Synth};
use perfclock_perfdata::{
    read_layout, scan_records, time_conv_record, with_file_name, ClockData, Feature, FormatError,
    LayoutError, Patch, PatchError, PerfDataError, RecordType, RecordsError, TIME_CONV_RECORD_SIZE,
};

fn time_conv() -> Vec<u8> {
    let conversion = TimeConversion::new(2_796_202_667, 31, 123_456).unwrap();
    time_conv_record(&conversion).to_vec()
}

fn sample(attrs_after_data: bool) -> synth::Built {
    Synth {
        records: vec![
            synth::comm(7, "java"),
            synth::mmap2(7, "/usr/lib/libc.so.6"),
            synth::mmap2(7, "/tmp/x/jit-7.dump"),
            synth::mmap(8, "/tmp/y/jit-8.dump"),
            synth::mmap2(7, "/tmp/x/jit-7.dump"),
            synth::mmap2(9, "/tmp/jit-9.dumpx"),
        ],
        // perf_header_string: u32 length, then the NUL-padded string.
        features: vec![
            (Feature::HOSTNAME, b"\x08\0\0\0host\0\0\0\0".to_vec()),
            (Feature::CMDLINE, vec![5; 24]),
        ],
        attrs_after_data,
    }
    .build()
}

/// Layout, scan, and the copy with `record` inserted and `features` added.
fn patch_with(
    bytes: &[u8],
    record: Option<&[u8]>,
    features: &[(Feature, Vec<u8>)],
) -> Result<Vec<u8>, PerfDataError> {
    let mut input = Cursor::new(bytes);
    let layout = read_layout(&mut input)?;
    scan_records(&mut input, &layout)?;
    let mut patch = Patch::new(&layout);
    if let Some(record) = record {
        patch.insert_record(record)?;
    }
    for (feature, contents) in features {
        patch.add_feature(*feature, contents.clone())?;
    }
    let mut out = Vec::new();
    patch.write(&mut input, &mut out)?;
    assert_eq!(out.len() as u64, bytes.len() as u64 + patch.grown_by());
    Ok(out)
}

fn patch(bytes: &[u8], record: &[u8]) -> Result<Vec<u8>, PerfDataError> {
    patch_with(bytes, Some(record), &[])
}

/// Checks `out` is `built` with `record` inserted, every section found at its moved place.
fn assert_inserted(built: &synth::Built, out: &[u8], record: &[u8]) {
    let (data_at, data_len) = built.data;
    let input = &built.bytes;
    let n = record.len();
    assert_eq!(out.len(), input.len() + n);
    assert_eq!(synth::u64_at(out, 40), data_at as u64, "data offset kept");
    assert_eq!(
        synth::u64_at(out, 48),
        (data_len + n) as u64,
        "data size grown"
    );
    assert_eq!(&out[data_at..data_at + n], record);
    assert_eq!(
        &out[data_at + n..data_at + n + data_len],
        &input[data_at..data_at + data_len]
    );
    let moved = |offset: usize| {
        if offset >= data_at {
            offset + n
        } else {
            offset
        }
    };
    // Feature table: right after the data; each entry points at its unchanged contents.
    let table = data_at + n + data_len;
    for (index, old) in built.feature_offsets.iter().enumerate() {
        let entry = table + 16 * index;
        let size = synth::u64_at(input, data_at + data_len + 16 * index + 8) as usize;
        assert_eq!(synth::u64_at(out, entry) as usize, moved(*old));
        assert_eq!(synth::u64_at(out, entry + 8) as usize, size);
        assert_eq!(
            &out[moved(*old)..moved(*old) + size],
            &input[*old..*old + size]
        );
    }
    // Attribute section and its ID section.
    let attrs = synth::u64_at(out, 24) as usize;
    assert_eq!(attrs, moved(built.attrs));
    let ids = synth::u64_at(out, attrs + 120) as usize;
    assert_eq!(ids, moved(built.ids));
    assert_eq!(synth::u64_at(out, ids), 42);
    assert_eq!(
        &out[attrs..attrs + 120],
        &input[built.attrs..built.attrs + 120]
    );
}

#[test]
fn inserts_a_time_conv_and_moves_what_follows_the_data_as_perf_lays_it_out() {
    let built = sample(false);
    let record = time_conv();
    let out = patch(&built.bytes, &record).unwrap();
    assert_inserted(&built, &out, &record);
    let mut reread = Cursor::new(&out);
    let layout = read_layout(&mut reread).unwrap();
    let scan = scan_records(&mut reread, &layout).unwrap();
    assert!(scan.has_time_conv);
    assert_eq!(scan.records, 7);
}

#[test]
fn moves_attribute_and_id_sections_written_after_the_data() {
    let built = sample(true);
    assert!(built.attrs > built.data.0);
    let record = time_conv();
    let out = patch(&built.bytes, &record).unwrap();
    assert_inserted(&built, &out, &record);
}

#[test]
fn an_independent_reader_parses_the_time_conv_and_the_clock_data() {
    use linux_perf_data::{PerfFileReader, PerfFileRecord, UserRecordType};
    let clock_data = ClockData::perf_clock(1_700_000_000_000_000_007, 5_000_000);
    for attrs_after_data in [false, true] {
        let built = sample(attrs_after_data);
        let out = patch_with(
            &built.bytes,
            Some(&time_conv()),
            &[(Feature::CLOCK_DATA, clock_data.to_bytes().to_vec())],
        )
        .unwrap();
        let PerfFileReader {
            mut perf_file,
            mut record_iter,
        } = PerfFileReader::parse_file(Cursor::new(&out)).unwrap();
        assert_eq!(perf_file.hostname().unwrap(), Some("host"));
        assert_eq!(
            perf_file.feature_section_data(linux_perf_data::Feature::CMDLINE),
            Some(&[5; 24][..])
        );
        let theirs = perf_file.clock_data().unwrap().expect("CLOCK_DATA present");
        assert_eq!(
            (theirs.clockid, theirs.wall_clock_ns, theirs.clockid_time_ns),
            (u32::MAX, 1_700_000_000_000_000_007, 5_000_000)
        );
        let mut kinds = Vec::new();
        while let Some(record) = record_iter.next_record(&mut perf_file).unwrap() {
            kinds.push(match record {
                PerfFileRecord::EventRecord { record, .. } => record.record_type.0,
                PerfFileRecord::UserRecord(record) => {
                    assert_eq!(record.record_type, UserRecordType::PERF_TIME_CONV);
                    RecordType::TIME_CONV.0
                }
            });
        }
        assert_eq!(kinds, [79, 3, 10, 10, 1, 10, 10]);
        // Our own reader: the new feature's section, and the old ones where they moved to.
        let mut reread = Cursor::new(&out);
        let layout = read_layout(&mut reread).unwrap();
        let sections = &layout.feature_sections;
        assert_eq!(
            sections.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
            [Feature::HOSTNAME, Feature::CMDLINE, Feature::CLOCK_DATA]
        );
        let (_, section) = sections[2];
        let at = section.offset as usize;
        assert_eq!(
            ClockData::parse(&out[at..at + section.size as usize]),
            Some(clock_data)
        );
    }
}

#[test]
fn a_feature_between_existing_ones_takes_its_place_in_the_table() {
    // Bits 3 and 29 set; 11 added lands between them.
    let built = Synth {
        records: vec![synth::comm(1, "x")],
        features: vec![
            (Feature::HOSTNAME, b"\x08\0\0\0host\0\0\0\0".to_vec()),
            (
                Feature::CLOCK_DATA,
                ClockData::perf_clock(9, 8).to_bytes().to_vec(),
            ),
        ],
        attrs_after_data: true,
    }
    .build();
    let out = patch_with(&built.bytes, None, &[(Feature::CMDLINE, vec![1; 16])]).unwrap();
    let mut reread = Cursor::new(&out);
    let layout = read_layout(&mut reread).unwrap();
    let contents: Vec<(Feature, Vec<u8>)> = layout
        .feature_sections
        .iter()
        .map(|(feature, s)| {
            let at = s.offset as usize;
            (*feature, out[at..at + s.size as usize].to_vec())
        })
        .collect();
    assert_eq!(
        contents,
        [
            (Feature::HOSTNAME, b"\x08\0\0\0host\0\0\0\0".to_vec()),
            (Feature::CMDLINE, vec![1; 16]),
            (
                Feature::CLOCK_DATA,
                ClockData::perf_clock(9, 8).to_bytes().to_vec()
            ),
        ]
    );
    let attrs = synth::u64_at(&out, 24) as usize;
    assert_eq!(
        attrs,
        built.attrs + 16,
        "attrs after the table moved by the new entry"
    );
    assert_eq!(
        synth::u64_at(&out, synth::u64_at(&out, attrs + 120) as usize),
        42
    );
    // A feature the file has already is refused.
    let error = patch_with(&built.bytes, None, &[(Feature::CLOCK_DATA, vec![0; 24])]).unwrap_err();
    assert!(
        matches!(
            error,
            PerfDataError::Patch(PatchError::FeaturePresent(Feature::CLOCK_DATA))
        ),
        "{error}"
    );
}

#[test]
fn refuses_what_it_cannot_patch_with_typed_errors() {
    let built = sample(false);
    let err = |bytes: &[u8]| patch(bytes, &time_conv()).unwrap_err();
    assert!(matches!(
        err(b""),
        PerfDataError::Format(FormatError::TooShort { len: 0 })
    ));
    assert!(matches!(
        err(b"PERFILE2"),
        PerfDataError::Format(FormatError::TooShort { len: 8 })
    ));
    assert!(matches!(
        err(&[7; 200]),
        PerfDataError::Format(FormatError::NotPerfData { .. })
    ));
    let mut pipe = b"PERFILE2".to_vec();
    pipe.extend_from_slice(&16u64.to_le_bytes());
    assert!(matches!(
        err(&pipe),
        PerfDataError::Format(FormatError::PipeMode)
    ));
    let mut swapped = built.bytes.clone();
    swapped[..8].copy_from_slice(b"2ELIFREP");
    assert!(matches!(
        err(&swapped),
        PerfDataError::Format(FormatError::ByteSwapped)
    ));
    let mut v1 = built.bytes.clone();
    v1[..8].copy_from_slice(b"PERFFILE");
    assert!(matches!(
        err(&v1),
        PerfDataError::Format(FormatError::VersionOne)
    ));
    for (feature, expected) in [
        (Feature::AUXTRACE, "HEADER_AUXTRACE"),
        (Feature::DIR_FORMAT, "--threads"),
    ] {
        let with_feature = Synth {
            records: vec![synth::comm(1, "x")],
            features: vec![(feature, vec![0; 16])],
            ..Synth::default()
        };
        let message = err(&with_feature.build().bytes).to_string();
        assert!(message.contains(expected), "{message}");
    }
    let mut zero_size = built.bytes.clone();
    zero_size[built.data.0 + 6..built.data.0 + 8].copy_from_slice(&0u16.to_le_bytes());
    assert!(matches!(
        err(&zero_size),
        PerfDataError::Records(RecordsError::RecordTooSmall { size: 0, .. })
    ));
    let mut past = built.bytes.clone();
    let short_data = built.data.1 as u64 - 8;
    past[48..56].copy_from_slice(&short_data.to_le_bytes());
    // The feature table now starts inside the last record: its entries are garbage, or the
    // last record runs past the data.
    assert!(patch(&past, &time_conv()).is_err());
    let mut unfinished = Synth {
        records: vec![synth::comm(1, "x")],
        ..Synth::default()
    }
    .build()
    .bytes;
    unfinished[48..56].copy_from_slice(&0u64.to_le_bytes());
    assert!(matches!(
        err(&unfinished),
        PerfDataError::Layout(LayoutError::Unfinished { trailing: 24 })
    ));
    let mut attr_zero = built.bytes.clone();
    attr_zero[16..24].copy_from_slice(&0u64.to_le_bytes());
    assert!(matches!(
        err(&attr_zero),
        PerfDataError::Format(FormatError::AttrSize(0))
    ));
    // A feature section over the feature table itself: an insertion there would cut it.
    let mut over_table = built.bytes.clone();
    let table = built.data.0 + built.data.1;
    over_table[table..table + 8].copy_from_slice(&(table as u64 + 8).to_le_bytes());
    assert!(
        matches!(
            err(&over_table),
            PerfDataError::Layout(LayoutError::InsideData { .. })
        ),
        "{}",
        err(&over_table)
    );
    // Records to insert must be whole.
    let mut input = Cursor::new(&built.bytes);
    let layout = read_layout(&mut input).unwrap();
    let mut patch = Patch::new(&layout);
    for bad in [&time_conv()[..50], &[0u8; 4][..], &time_conv()[..48]] {
        assert!(matches!(
            patch.insert_record(bad),
            Err(PerfDataError::Patch(PatchError::BadInsertion(_)))
        ));
    }
    assert!(matches!(
        patch.add_feature(Feature(256), vec![]),
        Err(PerfDataError::Patch(PatchError::BadInsertion(_)))
    ));
}

#[test]
fn reports_events_recorded_with_another_clock() {
    const ATTR_FLAGS_AT: usize = 40;
    const USE_CLOCKID_BYTE_BIT: u8 = 1 << (25 - 24);
    const ATTR_CLOCKID_AT: usize = 92;
    let built = sample(false);
    assert_eq!(
        read_layout(&mut Cursor::new(&built.bytes)).unwrap().clockid,
        None
    );
    let mut monotonic = built.bytes.clone();
    let attr = built.attrs;
    monotonic[attr + ATTR_FLAGS_AT + 3] |= USE_CLOCKID_BYTE_BIT;
    monotonic[attr + ATTR_CLOCKID_AT..attr + ATTR_CLOCKID_AT + 4]
        .copy_from_slice(&1i32.to_le_bytes());
    let layout = read_layout(&mut Cursor::new(&monotonic)).unwrap();
    assert_eq!(layout.clockid, Some(1));
}

#[test]
fn every_truncation_is_an_error() {
    let built = sample(false);
    for len in 0..built.bytes.len() {
        assert!(
            patch(&built.bytes[..len], &time_conv()).is_err(),
            "truncated to {len} bytes was accepted"
        );
    }
}

/// Corrupts each byte of the header, the attribute entry and the feature table with several
/// values, and random files: errors or a consistent output, never a panic.
#[test]
fn corrupted_files_never_panic() {
    let built = sample(false);
    let clock = ClockData::perf_clock(1, 2).to_bytes().to_vec();
    let metadata_end = built.data.0;
    let table = built.data.0 + built.data.1;
    let positions: Vec<usize> = (0..metadata_end).chain(table..built.bytes.len()).collect();
    for at in positions {
        for value in [0x00, 0x01, 0x7f, 0x80, 0xff] {
            let mut bytes = built.bytes.clone();
            bytes[at] = value;
            let _ = patch_with(
                &bytes,
                Some(&time_conv()),
                &[(Feature::CLOCK_DATA, clock.clone())],
            );
        }
    }
    // xorshift: random bodies under a valid magic and header size.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..2000 {
        let mut bytes = vec![0u8; 512];
        for byte in bytes.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *byte = state as u8;
        }
        bytes[..8].copy_from_slice(b"PERFILE2");
        bytes[8..16].copy_from_slice(&104u64.to_le_bytes());
        let _ = patch(&bytes, &time_conv());
    }
}

#[test]
fn time_conv_record_is_perfs_extended_form() {
    let record = time_conv();
    assert_eq!(record.len(), TIME_CONV_RECORD_SIZE);
    assert_eq!(u32::from_le_bytes(record[0..4].try_into().unwrap()), 79);
    assert_eq!(u16::from_le_bytes(record[6..8].try_into().unwrap()), 56);
    assert_eq!(synth::u64_at(&record, 8), 31, "time_shift");
    assert_eq!(synth::u64_at(&record, 16), 2_796_202_667, "time_mult");
    assert_eq!(synth::u64_at(&record, 24), 123_456, "time_zero");
    assert_eq!(synth::u64_at(&record, 40), u64::MAX, "time_mask");
    assert_eq!(
        (record[48], record[49]),
        (1, 0),
        "cap_user_time_zero, _short"
    );
    assert_eq!(&record[50..56], &[0; 6]);
}

/// The foreign-dump rewrite's edits: perf's `/jit-` of each map of a dump overwritten in place
/// (nothing moves), and a renamed copy of its first map inserted; the scan of the output finds
/// the copy's name only, and its sample-id trailer is the original's.
#[test]
fn a_dumps_maps_are_disabled_in_place_and_a_renamed_map_inserted() {
    let built = sample(false);
    let mut input = Cursor::new(&built.bytes[..]);
    let layout = read_layout(&mut input).unwrap();
    let scan = scan_records(&mut input, &layout).unwrap();
    let seven = &scan.jit_dumps[0];
    let first = seven.first_record.unwrap() as usize;
    let size = u16::from_le_bytes([built.bytes[first + 6], built.bytes[first + 7]]) as usize;
    let original = &built.bytes[first..first + size];
    let renamed = with_file_name(original, b"/out/foreign-0/jit-7.dump").unwrap();
    let mut patch = Patch::new(&layout);
    for &slash in &seven.marker_slashes {
        patch.overwrite(slash + 3, b"X").unwrap();
    }
    patch.insert_record(&renamed).unwrap();
    // Outside the data section (past the end of offsets too), empty, over bytes already
    // replaced, or reaching into them from before or from within: refused.
    let slash = seven.marker_slashes[0];
    for (at, bytes) in [
        (0, &b"X"[..]),
        (u64::MAX - 1, b"XYZ"),
        (slash + 5, b""),
        (slash + 3, b"Y"),
        (slash + 1, b"ABC"),
        (slash + 2, b"AB"),
    ] {
        let refused = patch.overwrite(at, bytes).map(|_| ()).unwrap_err();
        assert!(
            matches!(refused, PerfDataError::Patch(PatchError::BadInsertion(_))),
            "{at}: {refused:?}"
        );
    }
    let mut out = Vec::new();
    patch.write(&mut input, &mut out).unwrap();
    assert_eq!(out.len(), built.bytes.len() + renamed.len());
    let mut output = Cursor::new(&out[..]);
    let out_layout = read_layout(&mut output).unwrap();
    let after = scan_records(&mut output, &out_layout).unwrap();
    let names: Vec<_> = after.jit_dumps.iter().map(|m| m.path.clone()).collect();
    assert_eq!(
        names,
        [
            std::path::PathBuf::from("/out/foreign-0/jit-7.dump"),
            std::path::PathBuf::from("/tmp/y/jit-8.dump")
        ]
    );
    let copy_at = after.jit_dumps[0].first_record.unwrap() as usize;
    assert_eq!(&out[copy_at..copy_at + renamed.len()], &renamed[..]);
    assert_eq!(after.records, scan.records + 1);
}
