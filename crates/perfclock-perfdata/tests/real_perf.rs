//! perf.data files written by `perf record` itself (Debian linux-perf 6.1, x86_64; see
//! `tests/fixtures/regenerate.sh`): scanned, patched with `PERF_RECORD_TIME_CONV` and
//! `HEADER_CLOCK_DATA`, and the patched files read back by perf (`perf report`, `perf script`).
//! The synthetic files of the other tests come from this crate's own writer, which would share
//! any misreading with the reader; these do not.
//!
//! The read-back needs `perf` on PATH; without it those checks skip (perfclock-testutil) unless
//! `PERFCLOCK_REQUIRE_TOOLS=1` (CI) makes that a failure.

use std::fs::File;
use std::io::{BufWriter, Cursor};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use perfclock_core::TimeConversion;
use perfclock_perfdata::{
    read_layout, scan_records, time_conv_record, ClockData, Feature, OutputFile, Patch, Scan,
};
use perfclock_testutil::{skip, Need};

/// A fixture and what perf recorded into it.
struct Fixture {
    name: &'static str,
    /// Recorded with `-z`: the records sit inside PERF_RECORD_COMPRESSED.
    compressed: bool,
    /// The recording maps a `jit-<pid>.dump`.
    jitdump: bool,
}

const FIXTURES: [Fixture; 5] = [
    Fixture {
        name: "default.data",
        compressed: false,
        jitdump: false,
    },
    Fixture {
        name: "callgraph.data",
        compressed: false,
        jitdump: false,
    },
    Fixture {
        name: "dwarf.data",
        compressed: false,
        jitdump: false,
    },
    Fixture {
        name: "zstd.data",
        compressed: true,
        jitdump: false,
    },
    Fixture {
        name: "jitdump.data",
        compressed: false,
        jitdump: true,
    },
];

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn scan(bytes: &[u8]) -> Scan {
    let mut input = Cursor::new(bytes);
    let layout = read_layout(&mut input).unwrap();
    scan_records(&mut input, &layout).unwrap()
}

/// A conversion no kernel on this machine publishes, so perf's dump of it is ours.
const MULT: u32 = 2_796_202_667;
const SHIFT: u16 = 31;
const ZERO: u64 = 123_456_789;

fn conversion() -> TimeConversion {
    TimeConversion::new(MULT, SHIFT, ZERO).unwrap()
}

/// A wall-clock pair that is not now: 2023-11-14 22:13:20 UTC at perf time 5 s.
const CLOCK_DATA: ClockData = ClockData {
    clockid: perfclock_perfdata::PERF_CLOCK_CLOCKID,
    wall_clock_ns: 1_700_000_000_000_000_000,
    clockid_time_ns: 5_000_000_000,
};

/// `fixture` with TIME_CONV and CLOCK_DATA inserted, written to `out` as the CLI does.
fn patch(fixture: &Path, out: &Path) {
    let mut input = File::open(fixture).unwrap();
    let layout = read_layout(&mut input).unwrap();
    scan_records(&mut input, &layout).unwrap();
    let mut patch = Patch::new(&layout);
    patch
        .insert_record(&time_conv_record(&conversion()))
        .unwrap();
    patch
        .add_feature(Feature::CLOCK_DATA, CLOCK_DATA.to_bytes().to_vec())
        .unwrap();
    let mut output = OutputFile::create(out, 0o644).unwrap();
    patch
        .write(&mut input, &mut BufWriter::new(output.file()))
        .unwrap();
    output.commit().unwrap();
}

#[test]
fn recordings_of_perf_scan() {
    for fixture in &FIXTURES {
        let bytes = std::fs::read(fixture_path(fixture.name)).unwrap();
        let mut input = Cursor::new(&bytes[..]);
        let layout = read_layout(&mut input).unwrap();
        assert_eq!(layout.file_len, bytes.len() as u64);
        assert_eq!(
            layout.clockid, None,
            "{}: a default-clock recording",
            fixture.name
        );
        assert!(
            layout.features().contains(Feature::CMDLINE),
            "{}",
            fixture.name
        );
        assert!(
            !layout.features().contains(Feature::CLOCK_DATA),
            "{}",
            fixture.name
        );
        assert_eq!(
            layout.features().contains(Feature::COMPRESSED),
            fixture.compressed,
            "{}",
            fixture.name
        );
        let scan = scan_records(&mut input, &layout).unwrap();
        // Recorded where the kernel withholds the conversion: perf wrote no TIME_CONV.
        assert!(!scan.has_time_conv, "{}", fixture.name);
        assert!(
            scan.records > 20,
            "{}: {} records",
            fixture.name,
            scan.records
        );
        assert_eq!(
            !scan.jit_dumps.is_empty(),
            fixture.jitdump,
            "{}",
            fixture.name
        );
        if fixture.jitdump {
            assert_eq!(scan.jit_dumps.len(), 1);
            let dump = &scan.jit_dumps[0];
            let name = dump.path.file_name().unwrap().to_str().unwrap();
            assert_eq!(name, format!("jit-{}.dump", dump.pid));
        }
    }
}

/// Every prefix of every fixture, and each fixture with bytes of its header and of its first
/// records flipped: an error or a scan, never a panic (the `perfdata` fuzz target covers
/// arbitrary bytes; these start from files perf wrote).
#[test]
fn damaged_recordings_are_errors() {
    for fixture in &FIXTURES {
        let bytes = std::fs::read(fixture_path(fixture.name)).unwrap();
        let step = (bytes.len() / 500).max(1);
        for len in (0..bytes.len()).step_by(step) {
            let cut = &bytes[..len];
            let mut input = Cursor::new(cut);
            if let Ok(layout) = read_layout(&mut input) {
                let _ = scan_records(&mut input, &layout);
            }
        }
        // The header, the attributes and the start of the data.
        for at in 0..bytes.len().min(2048) {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0xff;
            let mut input = Cursor::new(&damaged[..]);
            if let Ok(layout) = read_layout(&mut input) {
                let _ = scan_records(&mut input, &layout);
            }
        }
    }
}

/// `perf ARGS FILE`'s output, or `None` (the test skips) when perf is not on PATH.
fn perf(test: &str, args: &[&str], file: &Path) -> Option<Output> {
    match Command::new("perf")
        .args(args)
        .arg(file)
        .env("TZ", "UTC")
        .output()
    {
        Ok(output) => {
            assert!(
                output.status.success(),
                "perf {args:?} {}: {:?}\n{}",
                file.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            Some(output)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            skip(test, Need::Tool("perf"), "perf is not on PATH");
            None
        }
        Err(error) => panic!("perf {args:?}: {error}"),
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// `perf report --stats`' count of every record perf read.
fn total_events(test: &str, file: &Path) -> Option<u64> {
    let stats = stdout(&perf(test, &["report", "--stats", "-i"], file)?);
    let line = stats
        .lines()
        .find(|line| line.trim_start().starts_with("TOTAL events:"))
        .unwrap_or_else(|| panic!("no TOTAL in perf report --stats:\n{stats}"));
    Some(line.rsplit(' ').next().unwrap().parse().unwrap())
}

#[test]
fn patched_recordings_read_back_by_perf() {
    let test = "patched_recordings_read_back_by_perf";
    let dir = tempfile::tempdir().unwrap();
    for fixture in &FIXTURES {
        let original = fixture_path(fixture.name);
        let patched = dir.path().join(fixture.name);
        patch(&original, &patched);
        let before = scan(&std::fs::read(&original).unwrap());
        let after_bytes = std::fs::read(&patched).unwrap();
        let after = scan(&after_bytes);
        assert!(after.has_time_conv, "{}", fixture.name);
        assert_eq!(after.records, before.records + 1, "{}", fixture.name);
        // The same dumps, their records moved by the inserted TIME_CONV.
        let named = |scan: &perfclock_perfdata::Scan| -> Vec<_> {
            scan.jit_dumps
                .iter()
                .map(|m| (m.pid, m.path.clone()))
                .collect()
        };
        assert_eq!(named(&after), named(&before), "{}", fixture.name);
        let mut input = Cursor::new(&after_bytes[..]);
        let section = read_layout(&mut input)
            .unwrap()
            .feature_section(Feature::CLOCK_DATA)
            .unwrap();
        let at = section.offset as usize;
        let contents = &after_bytes[at..at + section.size as usize];
        assert_eq!(ClockData::parse(contents), Some(CLOCK_DATA));

        let Some(total) = total_events(test, &original) else {
            return;
        };
        // perf counts a compressed record and each record inside it, as the scan does.
        assert_eq!(before.records, total, "{}: perf and the scan", fixture.name);
        assert_eq!(
            total_events(test, &patched),
            Some(total + 1),
            "{}",
            fixture.name
        );
        perf_reads_the_time_conv(test, &patched);
        perf_reads_the_clock_data(test, &patched);
        let samples = |file: &Path| stdout(&perf(test, &["script", "--ns", "-i"], file).unwrap());
        let (was, is) = (samples(&original), samples(&patched));
        assert!(was.lines().count() > 10, "{}: {was}", fixture.name);
        assert_eq!(was, is, "{}: perf script of the patched file", fixture.name);
    }
}

/// perf's dump of the inserted TIME_CONV holds its fields.
fn perf_reads_the_time_conv(test: &str, patched: &Path) {
    let dump = stdout(&perf(test, &["report", "-D", "-i"], patched).unwrap());
    let record = dump
        .split("PERF_RECORD_TIME_CONV")
        .nth(1)
        .unwrap_or_else(|| panic!("{}: perf dumps no TIME_CONV", patched.display()));
    let field = |name: &str| {
        record
            .lines()
            .find_map(|line| line.strip_prefix(&format!("... {name}")))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {name} in {record}"))
    };
    assert_eq!(field("Time Shift"), SHIFT.to_string());
    // perf's spelling.
    assert_eq!(field("Time Muliplier"), MULT.to_string());
    assert_eq!(field("Time Zero"), ZERO.to_string());
    assert_eq!(field("Cap Time Zero"), "1");
}

/// perf prints the inserted CLOCK_DATA as its reference time, and stamps every sample's
/// wall-clock time from it: `tod = wall_clock + (time - clockid_time)`.
fn perf_reads_the_clock_data(test: &str, patched: &Path) {
    let header = stdout(&perf(test, &["report", "--header-only", "-i"], patched).unwrap());
    let reference = format!(
        "# reference time: 2023-11-14 22:13:20.000000 = {}.{:06} (TOD) = {}.{:09}",
        CLOCK_DATA.wall_clock_ns / 1_000_000_000,
        CLOCK_DATA.wall_clock_ns % 1_000_000_000 / 1_000,
        CLOCK_DATA.clockid_time_ns / 1_000_000_000,
        CLOCK_DATA.clockid_time_ns % 1_000_000_000,
    );
    assert!(
        header.contains(&reference),
        "{reference:?} not in\n{header}"
    );
    let script = stdout(&perf(test, &["script", "--ns", "-F", "time,tod", "-i"], patched).unwrap());
    let mut samples = 0;
    for line in script.lines() {
        // `2023-11-14 23:00:36.922136  2841.922136123:`
        let mut fields = line.split_whitespace();
        let tod = format!("{} {}", fields.next().unwrap(), fields.next().unwrap());
        let time = fields.next().unwrap().trim_end_matches(':');
        let (secs, nanos) = time.split_once('.').unwrap();
        let time_ns = secs.parse::<u64>().unwrap() * 1_000_000_000 + nanos.parse::<u64>().unwrap();
        let expected = CLOCK_DATA.wall_clock_ns + time_ns - CLOCK_DATA.clockid_time_ns;
        // With --ns perf prints the wall-clock time to the nanosecond too: the microseconds
        // through testutil's reader, the last three digits added.
        let (micros, sub_micro) = tod.split_at(tod.len() - 3);
        let tod_ns = perfclock_testutil::perf_script::tod_ns(micros).unwrap()
            + sub_micro.parse::<u64>().unwrap();
        assert_eq!(tod_ns, expected, "{line}");
        samples += 1;
    }
    assert!(samples > 10, "{}: {script}", patched.display());
}

/// The scan's earliest and latest sample times are perf's own: `perf script`'s first and last
/// sample time of each uncompressed fixture (the compressed one's samples are inside
/// compressed records, which the scan does not time).
#[test]
fn sample_times_are_perfs() {
    let test = "sample_times_are_perfs";
    for fixture in FIXTURES.iter().filter(|fixture| !fixture.compressed) {
        let path = fixture_path(fixture.name);
        let scanned = scan(&std::fs::read(&path).unwrap()).sample_times;
        let Some(output) = perf(test, &["script", "-F", "time", "--ns", "-i"], &path) else {
            return;
        };
        let times: Vec<u64> = stdout(&output)
            .lines()
            .filter_map(|line| {
                let (seconds, nanos) = line.trim().trim_end_matches(':').split_once('.')?;
                Some(seconds.parse::<u64>().ok()? * 1_000_000_000 + nanos.parse::<u64>().ok()?)
            })
            .collect();
        let expected = times.iter().min().zip(times.iter().max());
        assert_eq!(
            scanned,
            expected.map(|(lo, hi)| (*lo, *hi)),
            "{}",
            fixture.name
        );
    }
}

/// Every sample of a recording with call chains is read, and every raw address perf's dump
/// (`perf script -D`) shows for a sample (its IP and its call chain's entries, the context
/// markers aside) is among the sampled addresses of its process; an address of no sample is
/// not.
#[test]
fn sampled_addresses_are_perfs() {
    let test = "sampled_addresses_are_perfs";
    let path = fixture_path("callgraph.data");
    let sampled =
        perfclock_perfdata::sampled_addresses(std::fs::File::open(&path).unwrap()).unwrap();
    let Some(output) = perf(test, &["script", "-D", "-i"], &path) else {
        return;
    };
    let (mut pid, mut samples, mut checked) = (0u32, 0u64, 0u64);
    for line in stdout(&output).lines() {
        if let Some((_, rest)) = line.split_once("PERF_RECORD_SAMPLE(") {
            // `...(IP, 0x2): PID/TID: 0xIP period: ...`
            let fields: Vec<&str> = rest.split(": ").collect();
            pid = fields[1].split('/').next().unwrap().parse().unwrap();
            let ip = u64::from_str_radix(
                fields[2]
                    .trim_start_matches("0x")
                    .split(' ')
                    .next()
                    .unwrap(),
                16,
            )
            .unwrap();
            assert!(sampled.any_in(pid, ip, 0), "pid {pid} ip {ip:x}");
            samples += 1;
            checked += 1;
        } else if let Some(entry) = line.strip_prefix(".....  ") {
            let address =
                u64::from_str_radix(entry.split(": ").nth(1).unwrap().trim(), 16).unwrap();
            if address < u64::MAX - 4094 {
                assert!(
                    sampled.any_in(pid, address, 0),
                    "pid {pid} chain {address:x}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > samples && samples > 0, "{checked} {samples}");
    assert_eq!(sampled.samples(), samples);
    assert!(!sampled.any_in(pid, 1, 0));
}
