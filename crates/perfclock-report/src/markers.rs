//! perfclock's marker files (`marker-<pid>.txt`, `crates/perfclock-markers`) read into spans,
//! and each sample given the span it lies in.
//!
//! A marker file holds one marker per line, `START END NAME`: two decimal perf-clock
//! nanoseconds (the writer's default clock, the samples' of a default `perf record`) and the
//! name to the end of the line; an instant has `START == END`. The file is another process's
//! and may hold anything: [`Spans::read_spans`] reads it as samply 0.13 reads a line (split at the
//! first two spaces, both times decimal, a name not empty) and counts every other line instead
//! of stopping there, reads no line longer than the writer writes, and never fails.
//!
//! A sample lies in a span of its own process (the process that mapped the file) when
//! `START <= time < END`. Where spans overlap, the one that started last is the sample's (the
//! innermost of nested spans); of spans that start together, the one that ends first; of equal
//! spans, the later line. [`Spans::assign`] sweeps the samples in time order once, so a long
//! span around many short ones costs no rescans.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::io::BufRead;

use crate::samples::Sample;

/// The longest line read: the writer's (two 20-digit times, two spaces, a name of at most 1024
/// bytes; a START field padded with zeros to keep a line inside a 4 KiB block) fits.
pub const MAX_LINE_BYTES: usize = 4096;

/// A marker file is read up to this many bytes.
pub const MAX_MARKER_FILE_BYTES: u64 = 1 << 30;

/// One span of a marker file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Perf-clock ns, inclusive.
    pub start_ns: u64,
    /// Perf-clock ns, exclusive.
    pub end_ns: u64,
    /// Its name, an index into [`Spans::names`].
    pub name: usize,
}

/// What a marker file held besides its spans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileCounts {
    /// Spans read.
    pub spans: usize,
    /// Instants (`START == END`), which hold no sample.
    pub instants: usize,
    /// Lines that are not a marker: no two decimal times, an empty name, an end before the
    /// start, not UTF-8, or longer than [`MAX_LINE_BYTES`].
    pub unreadable: usize,
}

/// The spans of every marker file of a recording, by process.
#[derive(Debug, Clone, Default)]
pub struct Spans {
    names: Vec<String>,
    indices: HashMap<String, usize>,
    by_pid: HashMap<u32, Vec<Span>>,
}

impl Spans {
    /// No spans.
    pub fn new() -> Spans {
        Spans::default()
    }

    /// Every span name, each once.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Reads the marker file `file` of process `pid` (at most [`MAX_MARKER_FILE_BYTES`] of it
    /// should be given) and adds its spans.
    ///
    /// # Errors
    /// Reading `file` failed; the spans read until then are kept.
    pub fn read_spans(&mut self, pid: u32, file: impl BufRead) -> std::io::Result<FileCounts> {
        let mut counts = FileCounts::default();
        let mut file = file;
        let mut line = Vec::new();
        loop {
            line.clear();
            let (read, whole) = read_line(&mut file, &mut line)?;
            if read == 0 {
                break;
            }
            match whole.then(|| parse_line(&line)).flatten() {
                Some((start_ns, end_ns, _)) if start_ns == end_ns => counts.instants += 1,
                Some((start_ns, end_ns, name)) => {
                    let name = self.intern(name);
                    self.by_pid.entry(pid).or_default().push(Span {
                        start_ns,
                        end_ns,
                        name,
                    });
                    counts.spans += 1;
                }
                None => counts.unreadable += 1,
            }
        }
        Ok(counts)
    }

    fn intern(&mut self, name: &str) -> usize {
        if let Some(&index) = self.indices.get(name) {
            return index;
        }
        self.names.push(name.to_owned());
        self.indices.insert(name.to_owned(), self.names.len() - 1);
        self.names.len() - 1
    }

    /// Gives each sample the name of the span it lies in ([`Sample::marker`]; see the [module
    /// docs](self) for overlaps), and returns, for each sample, whether a span named in
    /// `during` holds it (any of them, the innermost or not).
    pub fn assign(&self, samples: &mut [Sample], during: &[String]) -> Vec<bool> {
        let wanted: HashSet<usize> = during
            .iter()
            .filter_map(|name| self.indices.get(name).copied())
            .collect();
        let mut inside = vec![false; samples.len()];
        let mut by_pid: HashMap<u32, Vec<usize>> = HashMap::new();
        for (index, sample) in samples.iter().enumerate() {
            by_pid.entry(sample.pid).or_default().push(index);
        }
        for (pid, mut indices) in by_pid {
            let Some(spans) = self.by_pid.get(&pid) else {
                continue;
            };
            indices.sort_by_key(|&index| samples[index].time_ns);
            let mut order: Vec<usize> = (0..spans.len()).collect();
            order.sort_by_key(|&i| spans[i].start_ns);
            let mut next = order.into_iter().peekable();
            // Started spans, latest start first (then the earliest end, then the later line);
            // a top that has ended is dropped when met, as time only grows.
            let mut innermost: BinaryHeap<(u64, Reverse<u64>, usize)> = BinaryHeap::new();
            // Started spans by end, soonest first, to keep the count of open spans per name.
            let mut ending: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
            let mut open_wanted = 0usize;
            for index in indices {
                let time = samples[index].time_ns;
                while let Some(&i) = next.peek() {
                    if spans[i].start_ns > time {
                        break;
                    }
                    next.next();
                    innermost.push((spans[i].start_ns, Reverse(spans[i].end_ns), i));
                    ending.push(Reverse((spans[i].end_ns, i)));
                    open_wanted += usize::from(wanted.contains(&spans[i].name));
                }
                while let Some(&Reverse((end, i))) = ending.peek() {
                    if end > time {
                        break;
                    }
                    ending.pop();
                    open_wanted -= usize::from(wanted.contains(&spans[i].name));
                }
                while innermost
                    .peek()
                    .is_some_and(|&(_, Reverse(end), _)| end <= time)
                {
                    innermost.pop();
                }
                samples[index].marker = innermost
                    .peek()
                    .map(|&(_, _, i)| self.names[spans[i].name].clone());
                inside[index] = open_wanted > 0;
            }
        }
        inside
    }
}

/// Reads one line into `line` (without its `\n`), keeping at most [`MAX_LINE_BYTES`] of it:
/// the bytes consumed and whether the line was whole.
fn read_line(file: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<(usize, bool)> {
    let mut consumed = 0;
    let mut whole = true;
    loop {
        let buffer = file.fill_buf()?;
        if buffer.is_empty() {
            return Ok((consumed, whole));
        }
        let (taken, end) = match buffer.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, Some(at)),
            None => (buffer.len(), None),
        };
        let text = &buffer[..end.unwrap_or(taken)];
        if whole && line.len() + text.len() <= MAX_LINE_BYTES {
            line.extend_from_slice(text);
        } else {
            whole = false;
            line.clear();
        }
        file.consume(taken);
        consumed += taken;
        if end.is_some() {
            return Ok((consumed, whole));
        }
    }
}

/// `START END NAME` as samply 0.13 reads it (`process_marker_span_line`), with an end not
/// before the start.
fn parse_line(line: &[u8]) -> Option<(u64, u64, &str)> {
    let line = std::str::from_utf8(line).ok()?;
    let mut fields = line.splitn(3, ' ');
    let start: u64 = fields.next()?.parse().ok()?;
    let end: u64 = fields.next()?.parse().ok()?;
    let name = fields.next()?;
    (!name.is_empty() && end >= start).then_some((start, end, name))
}

/// The pid a marker file's name carries (`marker-<pid>.txt`, `marker-<pid>-<tid>.txt`, as
/// samply looks for them), or `None` for any other name.
pub fn marker_file_pid(file_name: &str) -> Option<u32> {
    let ids = file_name.strip_prefix("marker-")?.strip_suffix(".txt")?;
    let pid = ids.split_once('-').map_or(ids, |(pid, _)| pid);
    let tid_ok = ids
        .split_once('-')
        .is_none_or(|(_, tid)| !tid.is_empty() && tid.bytes().all(|b| b.is_ascii_digit()));
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) || !tid_ok {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::samples::Frame;

    fn sample(pid: u32, time_ns: u64) -> Sample {
        Sample {
            comm: "a".into(),
            pid,
            tid: pid,
            time_ns,
            period: 1,
            event: "cpu-clock".into(),
            frames: vec![Frame::new(1, "f", "/a", crate::FrameKind::Native)],
            marker: None,
        }
    }

    #[test]
    fn lines_are_read_as_samply_reads_them_and_the_rest_counted() {
        let long = format!("1 2 {}\n", "x".repeat(MAX_LINE_BYTES));
        let file = format!(
            "10 20 load config\n0000030 40 parse\n50 50 ready\n\
             60 70 \n70 60 backwards\n-1 5 negative\nx 5 y\n80 90\n\
             {long}100 110 a name with  spaces\n120 130 last without newline"
        );
        let mut bytes = file.into_bytes();
        bytes.extend_from_slice(b"\n140 150 \xff\n");
        let mut spans = Spans::new();
        let counts = spans.read_spans(7, &bytes[..]).unwrap();
        assert_eq!(
            counts,
            FileCounts {
                spans: 4,
                instants: 1,
                unreadable: 7
            }
        );
        assert_eq!(
            spans.names(),
            [
                "load config",
                "parse",
                "a name with  spaces",
                "last without newline"
            ]
        );
        assert_eq!(
            spans.by_pid[&7][1],
            Span {
                start_ns: 30,
                end_ns: 40,
                name: 1
            }
        );
    }

    #[test]
    fn a_sample_takes_the_innermost_span_of_its_process() {
        let mut spans = Spans::new();
        let file = "0 1000 request\n100 200 query\n100 150 parse\n300 400 query\n\
                    1000 2000 request\n";
        spans.read_spans(1, file.as_bytes()).unwrap();
        spans.read_spans(2, "0 5000 other\n".as_bytes()).unwrap();
        let times = [0, 99, 100, 149, 150, 199, 200, 350, 999, 1000, 2000];
        let mut samples: Vec<Sample> = times.iter().rev().map(|&t| sample(1, t)).collect();
        samples.push(sample(2, 120));
        samples.push(sample(3, 120));
        let inside = spans.assign(&mut samples, &["query".to_owned()]);
        let got: Vec<(u64, Option<&str>, bool)> = samples
            .iter()
            .zip(&inside)
            .map(|(s, &i)| (s.time_ns, s.marker.as_deref(), i))
            .collect();
        assert_eq!(
            got,
            [
                (2000, None, false),
                (1000, Some("request"), false),
                (999, Some("request"), false),
                (350, Some("query"), true),
                (200, Some("request"), false),
                (199, Some("query"), true),
                (150, Some("query"), true),
                (149, Some("parse"), true),
                (100, Some("parse"), true),
                (99, Some("request"), false),
                (0, Some("request"), false),
                (120, Some("other"), false),
                (120, None, false),
            ]
        );
    }

    #[test]
    fn marker_file_names_are_samplys() {
        assert_eq!(marker_file_pid("marker-4242.txt"), Some(4242));
        assert_eq!(marker_file_pid("marker-4242-4250.txt"), Some(4242));
        for name in [
            "marker-.txt",
            "marker-42x.txt",
            "marker-42-.txt",
            "marker-42-x.txt",
            "marker-42.txt.bak",
            "jit-42.dump",
            "marker-+42.txt",
        ] {
            assert_eq!(marker_file_pid(name), None, "{name}");
        }
    }
}
