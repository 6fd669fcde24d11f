//! perf script's two runs as `perfclock report` reads them (`perfclock_report::read_structure`,
//! `Structure::read_names`), on arbitrary bytes (the structure run's output, a NUL, the names
//! run's) and on a recording of arbitrary samples, thread and function names printed as perf
//! 6.1 prints them. Arbitrary bytes give a typed error or samples, never a panic. perf's own
//! output is always read, with perf's samples, threads, times, periods, events and frame
//! addresses whatever the names hold; each name is read back as printed unless a name holds a
//! line break (which may then move text to the next frame's name) or a DSO holds ` (`. Then
//! everything `perfclock report` makes of the samples: the folded stacks weigh each sample once
//! whatever the split; the pprof profile has one sample per perf sample, every location and
//! string it refers to exists, and it encodes and decodes to itself; the SVG is written, and so
//! is the differential SVG of the samples against themselves made comparable. The
//! same bytes as `perf buildid-list`'s output: every id kept is even-length lowercase hex, for a
//! non-empty DSO name.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use perfclock_report::compare;
use perfclock_report::flamegraph::{self, Diff, FlameGraphOptions, Split};
use perfclock_report::pprof::{self, PprofOptions};
use perfclock_report::{Frame, FrameKind, ParseError, Sample};
use prost::Message;

/// The longest thread name the kernel keeps (`TASK_COMM_LEN` less its NUL).
const COMM_BYTES: usize = 15;

/// Events as a recorder names them: not the processes' to choose.
const EVENTS: [&str; 4] = [
    "cpu-clock:ppp",
    "cycles",
    "sched:sched_switch",
    "task-clock:u",
];

#[derive(Arbitrary, Debug)]
struct Recording {
    /// Call chains (frame lines under each header), or each sample's one frame on its header.
    stack_lines: bool,
    samples: Vec<PrintedSample>,
}

#[derive(Arbitrary, Debug)]
struct PrintedSample {
    comm: String,
    pid: u32,
    tid: u32,
    time_ns: u64,
    period: u64,
    event: u8,
    frames: Vec<(u64, String, String)>,
}

/// `text` as a C string can carry it: up to its first NUL, at most `max` bytes.
fn c_string(text: &str, max: usize) -> String {
    let mut text = text.split('\0').next().unwrap_or_default();
    while text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text = &text[..end];
    }
    text.to_owned()
}

impl Recording {
    /// The samples as perf has them: pids and tids as the kernel hands them out, names as C
    /// strings, one frame at least where each sample's frame is on its header line.
    fn samples(&self) -> Vec<Sample> {
        self.samples
            .iter()
            .map(|printed| {
                let mut frames: Vec<Frame> = printed
                    .frames
                    .iter()
                    .map(|(ip, function, dso)| {
                        Frame::new(
                            *ip,
                            &c_string(function, usize::MAX),
                            &c_string(dso, usize::MAX),
                            FrameKind::Native,
                        )
                    })
                    .collect();
                if !self.stack_lines {
                    frames.truncate(1);
                    if frames.is_empty() {
                        frames.push(Frame::new(0, "[unknown]", "[unknown]", FrameKind::Unknown));
                    }
                }
                Sample {
                    comm: c_string(&printed.comm, COMM_BYTES),
                    // PID_MAX_LIMIT: perf prints them as ints.
                    pid: printed.pid % (1 << 22),
                    tid: printed.tid % (1 << 22),
                    time_ns: printed.time_ns,
                    period: printed.period,
                    event: EVENTS[usize::from(printed.event) % EVENTS.len()].to_owned(),
                    frames,
                    marker: None,
                }
            })
            .collect()
    }

    /// What `perf script` prints for `samples` in the structure run and the names run.
    fn perf_runs(&self, samples: &[Sample]) -> (String, String) {
        let (mut structure, mut names) = (String::new(), String::new());
        for sample in samples {
            let (seconds, nanos) = (
                sample.time_ns / 1_000_000_000,
                sample.time_ns % 1_000_000_000,
            );
            let ids = format!(
                "{:5}/{:<5} {seconds:5}.{nanos:09}: ",
                sample.pid, sample.tid
            );
            let fields = format!("{:10} {}: ", sample.period, sample.event);
            if self.stack_lines {
                structure += &format!("{} {ids}{fields}\n", sample.comm);
                names += &format!("{ids}\n");
                for frame in &sample.frames {
                    structure += &format!("\t{:16x}\n", frame.ip);
                    names += &format!("\t{:16x} {} ({})\n", frame.ip, frame.function, frame.dso);
                }
                structure += "\n";
                names += "\n";
            } else {
                let frame = &sample.frames[0];
                structure += &format!("{:>16} {ids}{fields}{:16x}\n", sample.comm, frame.ip);
                names += &format!("{ids}{:16x} {} ({})\n", frame.ip, frame.function, frame.dso);
            }
        }
        (structure, names)
    }
}

fn read(structure: &[u8], names: &[u8]) -> Result<Vec<Sample>, ParseError> {
    perfclock_report::read_structure(structure)?.read_names(names)
}

/// What `perfclock report` writes from `samples`, checked.
fn check_outputs(samples: &[Sample], salt: usize) {
    for split in [Split::None, Split::Process, Split::Thread, Split::Marker] {
        let total: u64 = flamegraph::folded(samples, split)
            .iter()
            .map(|line| {
                let (_, count) = line
                    .rsplit_once(' ')
                    .expect("a folded line ends in its count");
                count.parse::<u64>().expect("the count is a number")
            })
            .sum();
        assert_eq!(total, samples.len() as u64);
    }
    let options = PprofOptions {
        wall_clock_offset_ns: Some(i128::from(salt as u64) << 60),
        ..PprofOptions::default()
    };
    let profile = pprof::profile(samples, &options);
    assert_eq!(profile.sample.len(), samples.len());
    let strings = profile.string_table.len() as i64;
    assert_eq!(profile.string_table.first().map(String::as_str), Some(""));
    for sample in &profile.sample {
        for id in &sample.location_id {
            assert!(
                profile.location.iter().any(|l| l.id == *id),
                "location {id}"
            );
        }
        for label in &sample.label {
            assert!((0..strings).contains(&label.key) && (0..strings).contains(&label.str));
        }
    }
    for function in &profile.function {
        assert!((0..strings).contains(&function.name));
    }
    let bytes = profile.encode_to_vec();
    assert_eq!(
        pprof::proto::Profile::decode(bytes.as_slice()).as_ref(),
        Ok(&profile)
    );
    let mut svg = Vec::new();
    let graph = FlameGraphOptions::default();
    match flamegraph::write_svg(samples, &graph, &mut svg) {
        Ok(()) => assert!(!svg.is_empty()),
        Err(error) => assert!(
            samples.is_empty(),
            "{error:?}: {:?}",
            flamegraph::folded(samples, Split::None)
        ),
    }
    // The recording against itself made comparable: every frame keeps its stack's count.
    let comparable = compare::comparable(samples.to_vec());
    assert_eq!(comparable.len(), samples.len());
    let diff = Diff {
        base: samples,
        new: &comparable,
        normalize: salt % 2 == 0,
    };
    let mut svg = Vec::new();
    match flamegraph::write_diff_svg(&diff, &graph, &mut svg) {
        Ok(()) => assert!(!svg.is_empty()),
        Err(error) => assert!(samples.is_empty(), "{error:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    for (dso, id) in perfclock_report::build_ids::parse(&String::from_utf8_lossy(data)) {
        assert!(!dso.is_empty() && dso.trim() == dso, "{dso:?}");
        assert!(!id.is_empty() && id.len() % 2 == 0, "{id:?}");
        assert!(
            id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{id:?}"
        );
    }

    let (structure, names) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(samples) = read(structure, names) {
        check_outputs(&samples, data.len());
    }

    let Ok(recording) = Recording::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    let printed = recording.samples();
    let (structure, names) = recording.perf_runs(&printed);
    let samples = read(structure.as_bytes(), names.as_bytes())
        .unwrap_or_else(|error| panic!("perf's output is read: {error}\n{structure}\n{names}"));
    assert_eq!(samples.len(), printed.len());
    let names_are_plain = printed.iter().flat_map(|s| &s.frames).all(|frame| {
        !frame.function.contains('\n') && !frame.dso.contains('\n') && !frame.dso.contains(" (")
    });
    for (read, printed) in samples.iter().zip(&printed) {
        let fields = |s: &Sample| (s.pid, s.tid, s.time_ns, s.period, s.event.clone());
        assert_eq!(fields(read), fields(printed));
        assert_eq!(read.comm, printed.comm.trim_matches(' '));
        let ips = |s: &Sample| s.frames.iter().map(|f| f.ip).collect::<Vec<_>>();
        assert_eq!(ips(read), ips(printed));
        if names_are_plain {
            let names = |s: &Sample| {
                s.frames
                    .iter()
                    .map(|f| (f.function.clone(), f.dso.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(names(read), names(printed));
        }
    }
    check_outputs(&samples, data.len());
});
