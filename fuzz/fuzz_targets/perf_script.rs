//! perf script's text (`perfclock_report::parse`) on arbitrary bytes, then everything `perfclock
//! report` makes of what it parsed: a typed error or samples, never a panic; the folded stacks
//! weigh each sample once whatever the split; the pprof profile has one sample per perf sample,
//! every location and string it refers to exists, and it encodes and decodes to itself; the SVG
//! is written. The same bytes as `perf buildid-list`'s output: every id kept is even-length
//! lowercase hex, for a non-empty DSO name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock_report::flamegraph::{self, FlameGraphOptions, Split};
use perfclock_report::pprof::{self, PprofOptions};
use prost::Message;

fuzz_target!(|data: &[u8]| {
    for (dso, id) in perfclock_report::build_ids::parse(&String::from_utf8_lossy(data)) {
        assert!(!dso.is_empty() && dso.trim() == dso, "{dso:?}");
        assert!(!id.is_empty() && id.len() % 2 == 0, "{id:?}");
        assert!(id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')), "{id:?}");
    }
    let Ok(samples) = perfclock_report::parse(data) else {
        return;
    };
    for split in [Split::None, Split::Process, Split::Thread] {
        let total: u64 = flamegraph::folded(&samples, split)
            .iter()
            .map(|line| {
                let (_, count) = line.rsplit_once(' ').expect("a folded line ends in its count");
                count.parse::<u64>().expect("the count is a number")
            })
            .sum();
        assert_eq!(total, samples.len() as u64);
    }
    let options = PprofOptions {
        wall_clock_offset_ns: Some(i128::from(data.len() as u64) << 60),
        ..PprofOptions::default()
    };
    let profile = pprof::profile(&samples, &options);
    assert_eq!(profile.sample.len(), samples.len());
    let strings = profile.string_table.len() as i64;
    assert_eq!(profile.string_table.first().map(String::as_str), Some(""));
    for sample in &profile.sample {
        for id in &sample.location_id {
            assert!(profile.location.iter().any(|l| l.id == *id), "location {id}");
        }
        for label in &sample.label {
            assert!((0..strings).contains(&label.key) && (0..strings).contains(&label.str));
        }
    }
    for function in &profile.function {
        assert!((0..strings).contains(&function.name));
    }
    let bytes = profile.encode_to_vec();
    assert_eq!(pprof::proto::Profile::decode(bytes.as_slice()).as_ref(), Ok(&profile));
    let mut svg = Vec::new();
    let graph = FlameGraphOptions::default();
    match flamegraph::write_svg(&samples, &graph, &mut svg) {
        Ok(()) => assert!(!svg.is_empty()),
        Err(error) => assert!(samples.is_empty(), "{error:?}"),
    }
});
