//! The samples as a pprof profile (`profile.proto`, gzipped): what `go tool pprof`, Pyroscope,
//! Parca and Google Cloud Profiler ingest.
//!
//! # What goes where
//! - One pprof sample per perf sample, values `[1, period]`: pprof's consumers aggregate
//!   identical stacks themselves, and a sample of its own keeps its thread and time labels
//!   (`pid`, `tid`, `thread_name`; `timestamp` in wall-clock ns when
//!   [`PprofOptions::wall_clock_offset_ns`] is given; `marker`, the name of the marker span it
//!   lies in, when it lies in one: [`crate::markers`]).
//! - A [`Mapping`](proto::Mapping) per DSO, named as perf names it: kernel frames are those whose
//!   mapping is `[kernel.kallsyms]` (or `[module]`). Function names stay as perf shows them, so
//!   pprof's totals read like `perf report`'s.
//! - A [`Location`](proto::Location) per distinct (DSO, address, name): the address is kept (for
//!   pprof's address granularity) and no location is ever ambiguous, even where two processes
//!   map one library at different addresses.
//! - A [`Function`](proto::Function) per distinct (name, DSO). A JIT frame named as the JVM agent
//!   spells inlining, `callee <- caller <- ... <- compiled method`, becomes one location with a
//!   line per method, innermost first, which is pprof's own form of inlined frames. A JIT frame
//!   whose name ends in a source position (V8's `JS:*parseExpr /app/hot.js:3:19`) gives its
//!   function a file name and its line a line and column. A JIT frame's own source line (from
//!   the jitdump's debug info, [`crate::jit_lines`]) is its innermost method's line, and that
//!   function's file where it has none.
//! - The period's value type is `("cpu", "nanoseconds")` when every sample comes from
//!   `cpu-clock` or `task-clock` (their period is CPU time in ns); otherwise it is the event's
//!   name with unit `count`, and with several events each sample also carries an `event` label.
//! - The first mapping is the main binary, as pprof reads it (`File:` in its reports): the
//!   executable of the process with the most samples, where a frame of it was sampled (the DSO
//!   whose file name is the process's comm, which the kernel cuts to 15 bytes).
//! - The duration is the span of the sample times; the start time (`time_nanos`) is wall-clock
//!   and needs [`PprofOptions::wall_clock_offset_ns`].
//! - Every mapping says it has functions: perf has symbolized every frame already (`[unknown]`
//!   included), and pprof must not resymbolize addresses of a process that no longer exists.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;

use crate::samples::{FrameKind, Sample};

/// pprof's messages, as prost-build generates them from `proto/profile.proto` (package
/// `perftools.profiles`), written out so that building needs no `protoc`. Each tag is the
/// proto's field number; the tests encode every message against hand-checked bytes.
pub mod proto {
    /// A profile: samples, their stacks' tables and one table of strings.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        /// The type and unit of each of a sample's values.
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        /// The samples.
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        /// The images the addresses are in.
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        /// The stacks' frames.
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        /// The functions the locations are in.
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        /// Every string of the profile; `string_table[0]` is `""`.
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        /// A regular expression of frames to drop (string index).
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        /// A regular expression of frames to keep (string index).
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        /// When the collection started, ns since the Unix epoch.
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        /// How long the collection lasted, ns.
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        /// What [`period`](Self::period) counts.
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        /// The number of events between samples.
        #[prost(int64, tag = "12")]
        pub period: i64,
        /// Free-form text (string indices).
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        /// The preferred sample value's type (string index); unset means the last.
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
        /// A link to the profile type's documentation (string index).
        #[prost(int64, tag = "15")]
        pub doc_url: i64,
    }

    /// A value's meaning: type and unit (string indices).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        /// `cpu`, `samples`, ...
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        /// `nanoseconds`, `count`, ...
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    /// A stack with its values and labels.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// The stack's locations, leaf first.
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        /// One value per [`Profile::sample_type`].
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        /// The sample's context (thread, time, ...).
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    /// A key with a string or a number.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// The key (string index).
        #[prost(int64, tag = "1")]
        pub key: i64,
        /// A string value (string index).
        #[prost(int64, tag = "2")]
        pub str: i64,
        /// A numeric value.
        #[prost(int64, tag = "3")]
        pub num: i64,
        /// The numeric value's unit (string index).
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    /// An image mapped into memory.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        /// Its id, from 1.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Where it starts.
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        /// Where it ends.
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        /// The file offset mapped at `memory_start`.
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        /// The file, or a pseudo-file like `[kernel.kallsyms]` (string index).
        #[prost(int64, tag = "5")]
        pub filename: i64,
        /// The file's build id (string index).
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        /// Its locations carry function names.
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        /// Its functions carry file names.
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        /// Its lines carry line numbers.
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        /// Its locations carry inlined frames.
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    /// A frame: an address and the functions at it.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        /// Its id, from 1.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Its mapping's id (0: none).
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        /// The instruction address.
        #[prost(uint64, tag = "3")]
        pub address: u64,
        /// The functions at the address, inlined ones first, the caller they are inlined into
        /// last.
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        /// Several symbols share the address.
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    /// A function and a source position in it.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        /// The function's id.
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        /// The source line (0: unknown).
        #[prost(int64, tag = "2")]
        pub line: i64,
        /// The source column (0: unknown).
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    /// A function.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        /// Its id, from 1.
        #[prost(uint64, tag = "1")]
        pub id: u64,
        /// Its name for people (string index).
        #[prost(int64, tag = "2")]
        pub name: i64,
        /// Its name for the system, e.g. mangled (string index).
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        /// Its source file (string index).
        #[prost(int64, tag = "4")]
        pub filename: i64,
        /// Its first line in the file.
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// What [`profile`] adds beyond the samples.
#[derive(Debug, Clone, Default)]
pub struct PprofOptions {
    /// Wall clock minus perf clock, ns (wall clock = perf time + offset): with it each sample
    /// gets a `timestamp` label (wall-clock ns) and the profile its start time.
    pub wall_clock_offset_ns: Option<i128>,
    /// Build ids (as hex) by DSO, as perf names the DSO.
    pub build_ids: BTreeMap<String, String>,
}

/// The pprof profile of `samples` (see the [module docs](self) for what goes where), with
/// sample types `[("samples", "count"), (period)]` and the profile's period the most common
/// sample period.
pub fn profile(samples: &[Sample], options: &PprofOptions) -> proto::Profile {
    let mut builder = Builder::new(options);
    let (period_type, period_unit, several_events) = period_meaning(samples);
    let period_type = builder.value_type(period_type, period_unit);
    let count_type = builder.value_type("samples", "count");
    builder.profile.sample_type = vec![count_type, period_type.clone()];
    builder.profile.period_type = Some(period_type);
    builder.profile.period = saturating_i64(most_common_period(samples));

    if let Some(dso) = main_binary(samples) {
        builder.mapping(dso);
    }
    let pid_key = builder.string("pid");
    let tid_key = builder.string("tid");
    let thread_name_key = builder.string("thread_name");
    let wall_clock = options.wall_clock_offset_ns.map(|offset| {
        let keys = (builder.string("timestamp"), builder.string("nanoseconds"));
        (offset, keys)
    });
    let event_key = several_events.then(|| builder.string("event"));
    let marker_key = builder.string("marker");
    let mut wall_clock_start: Option<i64> = None;
    for sample in samples {
        let location_id = sample
            .frames
            .iter()
            .map(|frame| builder.location(frame))
            .collect();
        let mut label = vec![
            num_label(pid_key, i64::from(sample.pid)),
            num_label(tid_key, i64::from(sample.tid)),
            proto::Label {
                key: thread_name_key,
                str: builder.string(&sample.comm),
                ..Default::default()
            },
        ];
        if let Some((offset, (timestamp_key, nanoseconds))) = wall_clock {
            let wall_ns = saturating_i64(i128::from(sample.time_ns) + offset);
            label.push(proto::Label {
                num_unit: nanoseconds,
                ..num_label(timestamp_key, wall_ns)
            });
            wall_clock_start = Some(wall_clock_start.map_or(wall_ns, |first| first.min(wall_ns)));
        }
        if let Some(marker) = &sample.marker {
            label.push(proto::Label {
                key: marker_key,
                str: builder.string(marker),
                ..Default::default()
            });
        }
        if let Some(event_key) = event_key {
            label.push(proto::Label {
                key: event_key,
                str: builder.string(&sample.event),
                ..Default::default()
            });
        }
        builder.profile.sample.push(proto::Sample {
            location_id,
            value: vec![1, saturating_i64(sample.period)],
            label,
        });
    }
    let times = samples.iter().map(|sample| sample.time_ns);
    if let (Some(first), Some(last)) = (times.clone().min(), times.max()) {
        builder.profile.duration_nanos = saturating_i64(i128::from(last - first));
    }
    if let Some(first) = wall_clock_start {
        builder.profile.time_nanos = first;
    }
    builder.finish()
}

/// The DSO of the executable of the process with the most samples, where one of its samples
/// has a frame in it: the native DSO whose file name is the process's comm (the comm of its
/// main thread where that was sampled), or starts with it when the comm has the 15 bytes the
/// kernel keeps.
fn main_binary(samples: &[Sample]) -> Option<&str> {
    let mut by_pid: HashMap<u32, usize> = HashMap::new();
    for sample in samples {
        *by_pid.entry(sample.pid).or_default() += 1;
    }
    let (&pid, _) = by_pid.iter().max_by_key(|&(&pid, &count)| (count, pid))?;
    let of_pid = || samples.iter().filter(move |sample| sample.pid == pid);
    let comm = of_pid()
        .find(|sample| sample.tid == pid)
        .or_else(|| of_pid().next())
        .map(|sample| sample.comm.as_str())?;
    let is_executable = |dso: &str| {
        let file = dso.rsplit('/').next().unwrap_or(dso);
        file == comm || (comm.len() == 15 && file.starts_with(comm))
    };
    of_pid()
        .flat_map(|sample| &sample.frames)
        .find(|frame| frame.kind == FrameKind::Native && is_executable(&frame.dso))
        .map(|frame| frame.dso.as_str())
}

/// Writes `profile` encoded and gzipped, as pprof files are stored.
///
/// # Errors
/// Writing to `out` failed.
pub fn write_gzipped(profile: &proto::Profile, out: impl std::io::Write) -> std::io::Result<()> {
    use prost::Message as _;
    let mut gzip = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gzip.write_all(&profile.encode_to_vec())?;
    gzip.finish()?.flush()
}

/// The tables being filled: each string, mapping, function and location once.
struct Builder<'a> {
    options: &'a PprofOptions,
    profile: proto::Profile,
    strings: HashMap<String, i64>,
    mappings: HashMap<&'a str, u64>,
    functions: HashMap<(&'a str, &'a str), u64>,
    locations: HashMap<(&'a str, u64, &'a str), u64>,
}

impl<'a> Builder<'a> {
    fn new(options: &'a PprofOptions) -> Self {
        let mut builder = Builder {
            options,
            profile: proto::Profile::default(),
            strings: HashMap::new(),
            mappings: HashMap::new(),
            functions: HashMap::new(),
            locations: HashMap::new(),
        };
        // pprof requires string_table[0] == "".
        builder.string("");
        builder
    }

    fn finish(self) -> proto::Profile {
        self.profile
    }

    fn string(&mut self, text: &str) -> i64 {
        if let Some(&index) = self.strings.get(text) {
            return index;
        }
        let index = self.profile.string_table.len() as i64;
        self.profile.string_table.push(text.to_owned());
        self.strings.insert(text.to_owned(), index);
        index
    }

    fn value_type(&mut self, r#type: &str, unit: &str) -> proto::ValueType {
        proto::ValueType {
            r#type: self.string(r#type),
            unit: self.string(unit),
        }
    }

    fn mapping(&mut self, dso: &'a str) -> u64 {
        if let Some(&id) = self.mappings.get(dso) {
            return id;
        }
        let id = self.profile.mapping.len() as u64 + 1;
        let build_id = match self.options.build_ids.get(dso) {
            Some(build_id) => self.string(build_id),
            None => 0,
        };
        let filename = self.string(dso);
        self.profile.mapping.push(proto::Mapping {
            id,
            filename,
            build_id,
            has_functions: true,
            ..Default::default()
        });
        self.mappings.insert(dso, id);
        id
    }

    fn location(&mut self, frame: &'a crate::Frame) -> u64 {
        let key = (frame.dso.as_str(), frame.ip, frame.function.as_str());
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let mapping_id = self.mapping(&frame.dso);
        let names: Vec<&'a str> = if frame.kind == FrameKind::Jit {
            frame.function.split(INLINED_INTO).collect()
        } else {
            vec![&frame.function]
        };
        let mut line = Vec::with_capacity(names.len());
        for (depth, name) in names.into_iter().enumerate() {
            let position = match frame.kind {
                FrameKind::Jit => source_position(name),
                _ => None,
            };
            // The address's own line is the innermost method's.
            let source = frame.source.as_ref().filter(|_| depth == 0);
            let function_id = self.function(name, &frame.dso, position);
            if let Some(source) = source {
                self.set_filename(function_id, &source.file);
            }
            line.push(proto::Line {
                function_id,
                line: source.map_or_else(|| position.map_or(0, |p| p.line), |s| i64::from(s.line)),
                column: if source.is_some() {
                    0
                } else {
                    position.map_or(0, |p| p.column)
                },
            });
        }
        let mapping = &mut self.profile.mapping[mapping_id as usize - 1];
        mapping.has_inline_frames |= line.len() > 1;
        if line.iter().any(|l| l.line != 0) {
            mapping.has_filenames = true;
            mapping.has_line_numbers = true;
        }
        let id = self.profile.location.len() as u64 + 1;
        self.profile.location.push(proto::Location {
            id,
            mapping_id,
            address: frame.ip,
            line,
            is_folded: false,
        });
        self.locations.insert(key, id);
        id
    }

    /// Gives function `id` the file `file` if it has none.
    fn set_filename(&mut self, id: u64, file: &str) {
        if self.profile.function[id as usize - 1].filename == 0 {
            let file = self.string(file);
            self.profile.function[id as usize - 1].filename = file;
        }
    }

    fn function(&mut self, name: &'a str, dso: &'a str, position: Option<SourcePosition>) -> u64 {
        if let Some(&id) = self.functions.get(&(name, dso)) {
            return id;
        }
        let id = self.profile.function.len() as u64 + 1;
        let name_index = self.string(name);
        let filename = match position {
            Some(position) => self.string(position.file),
            None => 0,
        };
        self.profile.function.push(proto::Function {
            id,
            name: name_index,
            // perf shows demangled names only; the raw symbol is not in its output.
            system_name: name_index,
            filename,
            start_line: position.map_or(0, |p| p.line),
        });
        self.functions.insert((name, dso), id);
        id
    }
}

/// How the JVM agent joins an inlined method to its caller: `callee <- caller`.
const INLINED_INTO: &str = " <- ";

/// A source position at the end of a JIT function's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SourcePosition<'a> {
    file: &'a str,
    line: i64,
    column: i64,
}

/// `FILE:LINE:COLUMN` as the last word of `name` (V8 names a function by where it starts).
fn source_position(name: &str) -> Option<SourcePosition<'_>> {
    let (_, word) = name.rsplit_once(' ')?;
    let (rest, column) = word.rsplit_once(':')?;
    let (file, line) = rest.rsplit_once(':')?;
    let number = |digits: &str| -> Option<i64> {
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    };
    if file.is_empty() {
        return None;
    }
    Some(SourcePosition {
        file,
        line: number(line)?,
        column: number(column)?,
    })
}

/// The period's (type, unit), and whether the samples come from several events.
fn period_meaning(samples: &[Sample]) -> (&str, &'static str, bool) {
    let first = samples.first().map_or("", |s| s.event.as_str());
    let several_events = samples.iter().any(|s| s.event != first);
    let is_cpu_time = |event: &str| {
        ["cpu-clock", "task-clock"].iter().any(|clock| {
            event == *clock
                || event
                    .strip_prefix(clock)
                    .is_some_and(|m| m.starts_with(':'))
        })
    };
    if samples.iter().all(|s| is_cpu_time(&s.event)) {
        ("cpu", "nanoseconds", several_events)
    } else if several_events {
        ("events", "count", true)
    } else {
        (first, "count", false)
    }
}

/// The period most samples have (the smallest of equally common ones); 0 without samples.
pub fn most_common_period(samples: &[Sample]) -> u64 {
    let mut counts: HashMap<u64, usize> = HashMap::new();
    for sample in samples {
        *counts.entry(sample.period).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map_or(0, |(period, _)| period)
}

fn num_label(key: i64, num: i64) -> proto::Label {
    proto::Label {
        key,
        num,
        ..Default::default()
    }
}

fn saturating_i64(value: impl TryInto<i64> + PartialOrd + Default) -> i64 {
    let negative = value < Default::default();
    value
        .try_into()
        .unwrap_or(if negative { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Frame;
    use prost::Message as _;

    /// Each message with every field set to its own field number (bools true), against the
    /// bytes written out by hand: key `(number << 3) | wire type`, then the value.
    #[test]
    fn the_scalar_messages_encode_with_the_protos_field_numbers() {
        use super::proto::*;
        let value_type = ValueType { r#type: 1, unit: 2 };
        assert_eq!(value_type.encode_to_vec(), [0x08, 1, 0x10, 2]);
        let line = Line {
            function_id: 1,
            line: 2,
            column: 3,
        };
        assert_eq!(line.encode_to_vec(), [0x08, 1, 0x10, 2, 0x18, 3]);
        let label = Label {
            key: 1,
            str: 2,
            num: 3,
            num_unit: 4,
        };
        assert_eq!(label.encode_to_vec(), [0x08, 1, 0x10, 2, 0x18, 3, 0x20, 4]);
        let function = Function {
            id: 1,
            name: 2,
            system_name: 3,
            filename: 4,
            start_line: 5,
        };
        assert_eq!(
            function.encode_to_vec(),
            [0x08, 1, 0x10, 2, 0x18, 3, 0x20, 4, 0x28, 5]
        );
        let mapping = Mapping {
            id: 1,
            memory_start: 2,
            memory_limit: 3,
            file_offset: 4,
            filename: 5,
            build_id: 6,
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
        };
        assert_eq!(
            mapping.encode_to_vec(),
            [
                0x08, 1, 0x10, 2, 0x18, 3, 0x20, 4, 0x28, 5, 0x30, 6, 0x38, 1, 0x40, 1, 0x48, 1,
                0x50, 1
            ]
        );
    }

    /// Messages and packed numbers are length-delimited (wire type 2).
    #[test]
    fn the_nested_messages_encode_with_the_protos_field_numbers() {
        use super::proto::*;
        let location = Location {
            id: 1,
            mapping_id: 2,
            address: 3,
            line: vec![Line {
                function_id: 4,
                ..Default::default()
            }],
            is_folded: true,
        };
        assert_eq!(
            location.encode_to_vec(),
            [0x08, 1, 0x10, 2, 0x18, 3, 0x22, 2, 0x08, 4, 0x28, 1]
        );
        let sample = Sample {
            location_id: vec![1],
            value: vec![2],
            label: vec![Label {
                key: 3,
                ..Default::default()
            }],
        };
        assert_eq!(
            sample.encode_to_vec(),
            [0x0a, 1, 1, 0x12, 1, 2, 0x1a, 2, 0x08, 3]
        );
        let profile = Profile {
            sample_type: vec![ValueType::default()],
            sample: vec![Sample::default()],
            mapping: vec![Mapping::default()],
            location: vec![Location::default()],
            function: vec![Function::default()],
            string_table: vec![String::new(), "a".into()],
            drop_frames: 7,
            keep_frames: 8,
            time_nanos: 9,
            duration_nanos: 10,
            period_type: Some(ValueType::default()),
            period: 12,
            comment: vec![13],
            default_sample_type: 14,
            doc_url: 15,
        };
        #[rustfmt::skip]
        let expected = [
            0x0a, 0, 0x12, 0, 0x1a, 0, 0x22, 0, 0x2a, 0, // empty messages 1..=5
            0x32, 0, 0x32, 1, b'a', // strings, 6
            0x38, 7, 0x40, 8, 0x48, 9, 0x50, 10,
            0x5a, 0, // period_type, 11
            0x60, 12,
            0x6a, 1, 13, // packed comment, 13
            0x70, 14, 0x78, 15,
        ];
        assert_eq!(profile.encode_to_vec(), expected);
        assert_eq!(Profile::decode(&expected[..]).unwrap(), profile);
    }

    fn sample(event: &str, period: u64, frames: Vec<Frame>) -> Sample {
        Sample {
            comm: "main".into(),
            pid: 7,
            tid: 8,
            time_ns: 1_000,
            period,
            event: event.into(),
            frames,
            marker: None,
        }
    }

    #[test]
    fn inlined_jit_names_become_one_location_with_a_line_per_method() {
        let jit = Frame::new(
            0x10,
            "LLines;helper(J)J <- LLines;outer(J)J",
            "/tmp/jitted-1-2.so",
            FrameKind::Jit,
        );
        let profile = profile(
            &[sample("cpu-clock:ppp", 10, vec![jit])],
            &PprofOptions::default(),
        );
        let names: Vec<&str> = profile.location[0]
            .line
            .iter()
            .map(|l| {
                let function = &profile.function[l.function_id as usize - 1];
                profile.string_table[function.name as usize].as_str()
            })
            .collect();
        assert_eq!(names, ["LLines;helper(J)J", "LLines;outer(J)J"]);
        assert!(profile.mapping[0].has_inline_frames);
    }

    #[test]
    fn a_jit_frames_source_line_goes_to_its_innermost_method() {
        let mut jit = Frame::new(
            0x10,
            "Lines.helper(long) <- Lines.outer(long)",
            "/tmp/jitted-1-2.so",
            FrameKind::Jit,
        );
        jit.source = Some(crate::SourceLine {
            file: "demo/Lines.java".into(),
            line: 42,
        });
        let profile = profile(
            &[sample("cpu-clock:ppp", 10, vec![jit])],
            &PprofOptions::default(),
        );
        let lines: Vec<(&str, &str, i64)> = profile.location[0]
            .line
            .iter()
            .map(|l| {
                let function = &profile.function[l.function_id as usize - 1];
                (
                    profile.string_table[function.name as usize].as_str(),
                    profile.string_table[function.filename as usize].as_str(),
                    l.line,
                )
            })
            .collect();
        assert_eq!(
            lines,
            [
                ("Lines.helper(long)", "demo/Lines.java", 42),
                ("Lines.outer(long)", "", 0)
            ]
        );
        assert!(profile.mapping[0].has_line_numbers && profile.mapping[0].has_filenames);
    }

    #[test]
    fn a_source_position_is_read_from_the_end_of_a_jit_name() {
        assert_eq!(
            source_position("JS:*parseExpr /app/hot.js:3:19"),
            Some(SourcePosition {
                file: "/app/hot.js",
                line: 3,
                column: 19
            })
        );
        for name in [
            "Hot.alpha(long)",
            "JS:*f :3:19",
            "JS:*f /a.js:3:",
            "JS:*f /a.js:x:1",
            "std::map<int, int>::at(int const&)",
        ] {
            assert_eq!(source_position(name), None, "{name}");
        }
    }

    #[test]
    fn the_period_is_cpu_time_only_for_clock_events() {
        let of = |events: &[&str]| {
            let samples: Vec<Sample> = events.iter().map(|e| sample(e, 1, vec![])).collect();
            let (t, u, several) = period_meaning(&samples);
            (t.to_owned(), u, several)
        };
        assert_eq!(
            of(&["cpu-clock:ppp", "cpu-clock"]),
            ("cpu".into(), "nanoseconds", true)
        );
        assert_eq!(of(&["task-clock"]), ("cpu".into(), "nanoseconds", false));
        assert_eq!(of(&["cycles:P"]), ("cycles:P".into(), "count", false));
        assert_eq!(
            of(&["cycles", "instructions"]),
            ("events".into(), "count", true)
        );
        assert_eq!(
            of(&["cpu-clockish"]),
            ("cpu-clockish".into(), "count", false)
        );
    }

    #[test]
    fn the_most_common_period_wins_and_ties_go_to_the_smallest() {
        let samples: Vec<Sample> = [5, 3, 5, 3, 9]
            .iter()
            .map(|&p| sample("cpu-clock", p, vec![]))
            .collect();
        assert_eq!(most_common_period(&samples), 3);
        assert_eq!(most_common_period(&samples[..3]), 5);
        assert_eq!(most_common_period(&[]), 0);
    }

    #[test]
    fn wall_clock_values_saturate() {
        assert_eq!(saturating_i64(i128::MAX), i64::MAX);
        assert_eq!(saturating_i64(i128::MIN), i64::MIN);
        assert_eq!(saturating_i64(u64::MAX), i64::MAX);
        assert_eq!(saturating_i64(-5_i128), -5);
    }
}
