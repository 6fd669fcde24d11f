//! The samples of a recording, with their stacks symbolized by `perf script` (the same names
//! perf report shows, JIT code included once `perf inject --jit` has run), read into
//! [`Sample`]s.
//!
//! perf's own symbolizer is the reference for every output here: the totals of a flame graph
//! or a pprof profile then equal `perf script`'s sample counts by construction, and JIT names
//! come from the `jitted-*.so` images exactly as perf report shows them.
//!
//! # Read by structure, never by a pattern a name can hold
//! `perf script` prints names as they are, and names are anyone's: a process sets its own thread
//! name (`prctl(PR_SET_NAME)`, `/proc/self/comm`), a JIT names its code, and either may hold line
//! breaks and text that reads like a sample's header or a frame. So `perf script` runs twice:
//!
//! 1. The *structure* run ([`STRUCTURE_ARGS`]) prints no function and no image name:
//!    ```text
//!    COMM PID/TID SECONDS.NANOS: PERIOD EVENT:
//!    \tIP                       one line per frame, leaf first; a blank line ends the stack
//!    ```
//!    or, for a recording without call chains (no `-g`), one line per sample:
//!    ```text
//!    COMM PID/TID SECONDS.NANOS: PERIOD EVENT: IP
//!    ```
//!    The one name in it is COMM, which perf prints where a sample starts (after the blank line
//!    that ends a stack) and which the kernel caps at 15 bytes, too short to hold the fixed
//!    fields that end a header line. Every line from a sample's start up to the first line that
//!    ends in those fields is the thread name, line breaks included. This run alone says how
//!    many samples there are, and each one's thread, time, period, event and frame addresses
//!    ([`read_structure`]).
//! 2. The *names* run ([`NAMES_ARGS`]) prints each frame's function and image, and no thread
//!    name:
//!    ```text
//!    PID/TID SECONDS.NANOS:
//!    \tIP SYMBOL (DSO)
//!    ```
//!    or `PID/TID SECONDS.NANOS: IP SYMBOL (DSO)` without call chains. It is read against the
//!    structure ([`Structure::read_names`]): the samples, their order and their frames'
//!    addresses are known, so the one line that may start the next item is known too, the next
//!    frame's `\tIP ` or the next sample's `PID/TID SECONDS.NANOS:` with its exact numbers.
//!    Every other line continues the name before it, its line break kept. A frame's DSO is its
//!    last parenthesized group (SYMBOL may hold spaces and parentheses: `Hot.alpha(long)`,
//!    `JS:*parseExpr /app/hot.js:3:19`).
//!
//! No name can add, drop or move a sample, a frame, a time or a period. A name can only hold,
//! after a line break, the exact line of the frame after it (its address, as perf prints it) or
//! of the next sample (pid, tid and time to the nanosecond): the name ends there and the rest
//! joins the following frame's name in the same sample. Text that is not UTF-8 is read with
//! U+FFFD in place of the invalid bytes.
//!
//! Reading perf.data's sample records directly (linux-perf-data) would make the structure
//! binary, but the names would still have to come from perf and be matched to its samples: that
//! means rebuilding perf's sample order, its call chains as it resolves them (context markers
//! dropped, its stack-depth limit), its thread names (COMM, FORK and EXEC records) and its event
//! names, and keeping them in step with every perf version, with a reader that panics on some
//! hostile files. Two runs of perf itself agree by construction. The price is that perf resolves
//! the call chains twice.

use std::io::BufRead;

use crate::error::ParseError;

/// What kind of code a frame is in, from its DSO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// The kernel (`[kernel.kallsyms]`, a module `[name]`).
    Kernel,
    /// JIT-compiled code: an image `perf inject --jit` wrote (`jitted-PID-N.so`), or a
    /// runtime's perf map (`/tmp/perf-PID.map`).
    Jit,
    /// Native code of a file (an executable or a library).
    Native,
    /// perf could not tell (`[unknown]`).
    Unknown,
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The instruction address.
    pub ip: u64,
    /// The function's name as perf shows it (`[unknown]` where it has none).
    pub function: String,
    /// The image the address is in, as perf names it.
    pub dso: String,
    /// The code's kind.
    pub kind: FrameKind,
    /// The source line at the address, where one is known (JIT code with debug info:
    /// [`crate::jit_lines`]).
    pub source: Option<SourceLine>,
}

/// A file and a line in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceLine {
    /// The file, as the debug info names it (`Hot.java`).
    pub file: String,
    /// The line, from 1.
    pub line: u32,
}

impl Frame {
    /// A frame at `ip` in `function` of `dso`.
    pub fn new(ip: u64, function: &str, dso: &str, kind: FrameKind) -> Frame {
        Frame {
            ip,
            function: function.to_owned(),
            dso: dso.to_owned(),
            kind,
            source: None,
        }
    }
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The thread's name at the sample (without the spaces around it, which perf's padding
    /// hides).
    pub comm: String,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Perf-clock time, ns.
    pub time_ns: u64,
    /// The event's period: for `cpu-clock`, nanoseconds of CPU time the sample stands for.
    pub period: u64,
    /// The event's name (`cpu-clock:ppp`, `cycles`).
    pub event: String,
    /// The stack, leaf first.
    pub frames: Vec<Frame>,
    /// The name of the marker span the sample lies in, if any ([`crate::markers`]).
    pub marker: Option<String>,
}

/// The arguments of the `perf script` run whose output [`read_structure`] reads.
pub const STRUCTURE_ARGS: &[&str] = &["script", "-F", "comm,pid,tid,time,period,event,ip", "--ns"];

/// The arguments of the `perf script` run whose output [`Structure::read_names`] reads.
pub const NAMES_ARGS: &[&str] = &["script", "-F", "pid,tid,time,ip,sym,dso", "--ns"];

/// Every sample of a recording with its frames' addresses, not yet named: what the structure
/// run says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Structure {
    samples: Vec<Unnamed>,
}

/// A sample as the structure run prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unnamed {
    /// The sample with no frames yet.
    sample: Sample,
    /// Its frames' addresses, leaf first.
    ips: Vec<u64>,
    /// Whether perf prints its stack as frame lines under the header (a call-chain recording)
    /// rather than its one frame on the header line.
    stack_lines: bool,
}

impl Structure {
    /// How many samples the recording has.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether the recording has no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The samples with their frames named from the output of `perf script` run with
    /// [`NAMES_ARGS`] on the same recording.
    ///
    /// # Errors
    /// [`ParseError::NamesDisagree`] where that output does not hold the structure's next
    /// sample or frame (not the same recording), [`ParseError::Io`].
    pub fn read_names(self, output: impl BufRead) -> Result<Vec<Sample>, ParseError> {
        let mut reader = NamesReader {
            samples: Vec::with_capacity(self.samples.len()),
            structure: self.samples,
            at: None,
            text: String::new(),
        };
        for line in lossy_lines(output) {
            reader.line(&line?)?;
        }
        reader.finish()
    }
}

/// Reads the output of `perf script` run with [`STRUCTURE_ARGS`].
///
/// # Errors
/// [`ParseError::Line`] for a line that is neither part of a sample's header nor a frame,
/// [`ParseError::Io`].
pub fn read_structure(output: impl BufRead) -> Result<Structure, ParseError> {
    let mut samples: Vec<Unnamed> = Vec::new();
    // The lines of a thread name that a line break split, while a header is being read.
    let mut comm_lines: Vec<(usize, String)> = Vec::new();
    let mut in_stack = false;
    for (index, line) in lossy_lines(output).enumerate() {
        let line = line?;
        let bad = |line: String| ParseError::Line {
            number: index + 1,
            text: line,
        };
        if in_stack {
            if line.is_empty() {
                in_stack = false;
            } else {
                let ip = stack_line_ip(&line).ok_or_else(|| bad(line.clone()))?;
                if let Some(unnamed) = samples.last_mut() {
                    unnamed.ips.push(ip);
                }
            }
        } else if let Some(header) = structure_header(&line) {
            let mut comm: String = comm_lines.drain(..).map(|(_, text)| text + "\n").collect();
            comm.push_str(header.comm_end);
            in_stack = header.ip.is_none();
            samples.push(Unnamed {
                sample: Sample {
                    comm: comm.trim_matches(' ').to_owned(),
                    pid: header.pid,
                    tid: header.tid,
                    time_ns: header.time_ns,
                    period: header.period,
                    event: header.event.to_owned(),
                    frames: Vec::new(),
                    marker: None,
                },
                ips: header.ip.into_iter().collect(),
                stack_lines: in_stack,
            });
        } else {
            comm_lines.push((index + 1, line));
        }
    }
    // Text after the last sample that no header line ended.
    if let Some((number, text)) = comm_lines
        .into_iter()
        .find(|(_, text)| !text.trim().is_empty())
    {
        return Err(ParseError::Line { number, text });
    }
    Ok(Structure { samples })
}

/// A header line of the structure run, read from its end: the fields perf prints after COMM.
struct StructureHeader<'a> {
    /// What precedes PID on the line: the thread name's last line and perf's padding.
    comm_end: &'a str,
    pid: u32,
    tid: u32,
    time_ns: u64,
    period: u64,
    event: &'a str,
    /// The one frame of a sample printed without its call chain.
    ip: Option<u64>,
}

/// `... PID/TID SECONDS.NANOS: PERIOD EVENT:` or `... PID/TID SECONDS.NANOS: PERIOD EVENT: IP`.
fn structure_header(line: &str) -> Option<StructureHeader<'_>> {
    let words = words(line);
    let (ip, rest) = match words.split_last()? {
        (&(_, last), _) if last.ends_with(':') => (None, words.as_slice()),
        (&(_, last), rest) => (Some(hex(last)?), rest),
    };
    let [.., (pid_at, pid_tid), (_, time), (_, period), (_, event)] = rest else {
        return None;
    };
    let (pid, tid) = pid_tid.split_once('/')?;
    Some(StructureHeader {
        comm_end: &line[..*pid_at],
        pid: u32::try_from(number(pid)?).ok()?,
        tid: u32::try_from(number(tid)?).ok()?,
        time_ns: time_ns(time.strip_suffix(':')?)?,
        period: number(period)?,
        event: event.strip_suffix(':').filter(|name| !name.is_empty())?,
        ip,
    })
}

/// A frame line of the structure run, `\tIP` (` (inlined)` after an inlined function's frame):
/// its address.
fn stack_line_ip(line: &str) -> Option<u64> {
    let text = line.strip_prefix('\t')?.trim_start_matches(' ');
    hex(text.strip_suffix(" (inlined)").unwrap_or(text))
}

/// What the names run is read into: the samples named so far and the item being read.
struct NamesReader {
    structure: Vec<Unnamed>,
    samples: Vec<Sample>,
    /// The item whose text is being read: `None` before the first sample's header.
    at: Option<Item>,
    /// Its text so far: what follows its address on its first line, then each line that
    /// continues it.
    text: String,
}

/// A place in the names run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    /// Sample `.0`'s header line.
    Header(usize),
    /// Frame `.1` of sample `.0`, on its own line.
    Frame(usize, usize),
}

impl NamesReader {
    fn line(&mut self, line: &str) -> Result<(), ParseError> {
        let next = self.next_item();
        match next.and_then(|item| self.starts(item, line)) {
            Some(rest) => {
                self.finish_item();
                self.at = next;
                self.text.clear();
                self.text.push_str(rest);
            }
            // Perf prints nothing before the first sample.
            None if self.at.is_none() => {
                if !line.trim().is_empty() {
                    return Err(self.disagree(0));
                }
            }
            None => {
                self.text.push('\n');
                self.text.push_str(line);
            }
        }
        Ok(())
    }

    /// The item after the one being read, if the structure has one.
    fn next_item(&self) -> Option<Item> {
        let next = match self.at {
            None => Item::Header(0),
            Some(Item::Header(sample)) if self.structure[sample].stack_lines => {
                if self.structure[sample].ips.is_empty() {
                    Item::Header(sample + 1)
                } else {
                    Item::Frame(sample, 0)
                }
            }
            Some(Item::Header(sample)) => Item::Header(sample + 1),
            Some(Item::Frame(sample, frame)) => {
                if frame + 1 < self.structure[sample].ips.len() {
                    Item::Frame(sample, frame + 1)
                } else {
                    Item::Header(sample + 1)
                }
            }
        };
        let sample = match next {
            Item::Header(sample) | Item::Frame(sample, _) => sample,
        };
        (sample < self.structure.len()).then_some(next)
    }

    /// What follows `item`'s address on `line` if `line` starts `item`.
    fn starts<'l>(&self, item: Item, line: &'l str) -> Option<&'l str> {
        match item {
            Item::Header(sample) => {
                let unnamed = &self.structure[sample];
                let rest = names_header(line, &unnamed.sample)?;
                if unnamed.stack_lines {
                    Some(rest)
                } else {
                    after_ip(rest, unnamed.ips[0])
                }
            }
            Item::Frame(sample, frame) => {
                let rest = line.strip_prefix('\t')?;
                after_ip(rest, self.structure[sample].ips[frame])
            }
        }
    }

    /// Names the item that was being read with its text.
    fn finish_item(&mut self) {
        match self.at {
            None => {}
            Some(Item::Header(sample)) => {
                let unnamed = &self.structure[sample];
                let mut named = unnamed.sample.clone();
                if !unnamed.stack_lines {
                    named.frames.push(frame_of(unnamed.ips[0], &self.text));
                }
                // Else its frames follow, or it has none: nothing after its time is a name.
                self.samples.push(named);
            }
            Some(Item::Frame(sample, frame)) => {
                let ips = &self.structure[sample].ips;
                let mut text = self.text.as_str();
                if frame + 1 == ips.len() {
                    // The blank line that ends the stack.
                    text = text.strip_suffix('\n').unwrap_or(text);
                }
                // The sample's header came first, so it is the last one named.
                if let Some(named) = self.samples.last_mut() {
                    named.frames.push(frame_of(ips[frame], text));
                }
            }
        }
    }

    fn finish(mut self) -> Result<Vec<Sample>, ParseError> {
        if let Some(Item::Header(sample) | Item::Frame(sample, _)) = self.next_item() {
            return Err(self.disagree(sample));
        }
        self.finish_item();
        Ok(self.samples)
    }

    fn disagree(&self, sample: usize) -> ParseError {
        ParseError::NamesDisagree {
            sample: sample + 1,
            samples: self.structure.len(),
        }
    }
}

/// What follows the names run's `PID/TID SECONDS.NANOS:` on `line`, if those are `sample`'s.
fn names_header<'l>(line: &'l str, sample: &Sample) -> Option<&'l str> {
    let line = line.trim_start_matches(' ');
    let (pid_tid, rest) = line.split_once(' ')?;
    let (pid, tid) = pid_tid.split_once('/')?;
    let (time, rest) = rest.trim_start_matches(' ').split_once(':')?;
    let matches = number(pid) == Some(u64::from(sample.pid))
        && number(tid) == Some(u64::from(sample.tid))
        && time_ns(time) == Some(sample.time_ns);
    matches.then(|| rest.strip_prefix(' ').unwrap_or(rest))
}

/// What follows `ip` on `text` (spaces, the address in hex, then a space or the end), if it is
/// there.
fn after_ip(text: &str, ip: u64) -> Option<&str> {
    let text = text.trim_start_matches(' ');
    let end = text
        .find(|c: char| !c.is_ascii_hexdigit())
        .unwrap_or(text.len());
    if hex(&text[..end])? != ip {
        return None;
    }
    let rest = &text[end..];
    if rest.is_empty() {
        Some(rest)
    } else {
        rest.strip_prefix(' ')
    }
}

/// A frame at `ip` from the names run's `SYMBOL (DSO)`; text without a DSO is all function.
fn frame_of(ip: u64, text: &str) -> Frame {
    let (function, dso) = text
        .strip_suffix(')')
        .and_then(|rest| rest.rsplit_once(" ("))
        .unwrap_or((text, UNKNOWN));
    Frame {
        ip,
        function: function.to_owned(),
        kind: kind_of(dso),
        dso: dso.to_owned(),
        source: None,
    }
}

/// The name perf gives what it cannot name.
const UNKNOWN: &str = "[unknown]";

/// The lines of `output`, each without its `\n`, invalid UTF-8 replaced.
fn lossy_lines(output: impl BufRead) -> impl Iterator<Item = Result<String, ParseError>> {
    output.split(b'\n').map(|line| {
        line.map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .map_err(ParseError::Io)
    })
}

/// The space-separated words of `line`, each with its byte offset.
fn words(line: &str) -> Vec<(usize, &str)> {
    let mut words = Vec::new();
    let mut start = None;
    for (at, c) in line.char_indices().chain([(line.len(), ' ')]) {
        match (c == ' ', start) {
            (false, None) => start = Some(at),
            (true, Some(from)) => {
                words.push((from, &line[from..at]));
                start = None;
            }
            _ => {}
        }
    }
    words
}

/// A decimal number of digits only (`str::parse` also takes a sign).
fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A hexadecimal number of digits only.
fn hex(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

/// `SECONDS.NANOS` (nine digits) in ns.
fn time_ns(text: &str) -> Option<u64> {
    let (seconds, nanos) = text.split_once('.')?;
    let nanos = number(nanos).filter(|_| nanos.len() == 9)?;
    number(seconds)?
        .checked_mul(1_000_000_000)?
        .checked_add(nanos)
}

/// A frame's kind from its DSO's name.
fn kind_of(dso: &str) -> FrameKind {
    let file = dso.rsplit('/').next().unwrap_or(dso);
    if dso == UNKNOWN {
        FrameKind::Unknown
    } else if dso.starts_with('[') {
        FrameKind::Kernel
    } else if (file.starts_with("jitted-") && file.ends_with(".so"))
        || (file.starts_with("perf-") && file.ends_with(".map"))
    {
        FrameKind::Jit
    } else {
        FrameKind::Native
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(structure: &str, names: &str) -> Result<Vec<Sample>, ParseError> {
        read_structure(structure.as_bytes())?.read_names(names.as_bytes())
    }

    /// Both runs' output of `samples` as perf 6.1 prints it: with call chains (`stack_lines`)
    /// or each sample's one frame on its header line.
    fn perf_runs(samples: &[Sample], stack_lines: bool) -> (String, String) {
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
            if stack_lines {
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

    fn sample(comm: &str, time_ns: u64, frames: &[(u64, &str, &str)]) -> Sample {
        Sample {
            comm: comm.to_owned(),
            pid: 4242,
            tid: 4250,
            time_ns,
            period: 250_000,
            event: "cpu-clock:ppp".to_owned(),
            frames: frames
                .iter()
                .map(|&(ip, function, dso)| Frame::new(ip, function, dso, kind_of(dso)))
                .collect(),
            marker: None,
        }
    }

    const STRUCTURE: &str = "\
C2 CompilerThre 4242/4250  2412.136291842:     250000 cpu-clock:ppp: 
\t    7f1c2a40
\t    7f1c2b00
\tffffffff8162105f
\t           14645
\t               0

node 30749/30749  2412.136541094:     250000 cpu-clock:ppp: 
\t    7ff97ca968a8
";

    const NAMES: &str = "\
 4242/4250  2412.136291842: 
\t    7f1c2a40 Hot.alpha(long) (/tmp/out.data.jit-x/pid-1/jitted-4242-17.so)
\t    7f1c2b00 Hot.main(java.lang.String[]) <- Hot.loop() (/tmp/j/jitted-4242-3.so)
\tffffffff8162105f __anon_vma_prepare ([kernel.kallsyms])
\t           14645 handle_amd (/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)
\t               0 [unknown] ([unknown])

30749/30749  2412.136541094: 
\t    7ff97ca968a8 JS:*parseExpr /tmp/nodet/hot.js:3:19 (/tmp/x.jit-1/foreign-0/jitted-30749-9.so)
";

    #[test]
    fn perf_scripts_samples_are_read_with_their_frames() {
        let samples = read(STRUCTURE, NAMES).unwrap();
        assert_eq!(samples.len(), 2);
        let java = &samples[0];
        assert_eq!(
            (
                java.comm.as_str(),
                java.pid,
                java.tid,
                java.time_ns,
                java.period
            ),
            ("C2 CompilerThre", 4242, 4250, 2_412_136_291_842, 250_000)
        );
        assert_eq!(java.event, "cpu-clock:ppp");
        let kinds: Vec<FrameKind> = java.frames.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [
                FrameKind::Jit,
                FrameKind::Jit,
                FrameKind::Kernel,
                FrameKind::Native,
                FrameKind::Unknown
            ]
        );
        assert_eq!(java.frames[0].function, "Hot.alpha(long)");
        assert_eq!(
            java.frames[1].function,
            "Hot.main(java.lang.String[]) <- Hot.loop()"
        );
        assert_eq!(java.frames[2].ip, 0xffff_ffff_8162_105f);
        assert_eq!(
            java.frames[3].dso,
            "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
        );
        assert_eq!(
            samples[1].frames[0].function,
            "JS:*parseExpr /tmp/nodet/hot.js:3:19"
        );
        assert_eq!(samples[1].comm, "node");
    }

    #[test]
    fn a_recording_without_call_chains_has_each_samples_frame_on_its_line() {
        let structure = "      jit_reload 28251/28251 11681.860192114:     250000 cpu-clock:  \
                         7fd3d250c62a
 C2 CompilerThre     7/9     5.000000001:          1 cpu-clock:             7f00
";
        let names = "28251/28251 11681.860192114:     7fd3d250c62a handle_amd \
                     (/usr/lib/ld-linux-x86-64.so.2)
    7/9         5.000000001:             7f00 jit_fn_3 (/tmp/jitted-7-3.so)
";
        let samples = read(structure, names).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(
            (samples[0].comm.as_str(), samples[0].pid, samples[0].period),
            ("jit_reload", 28251, 250_000)
        );
        assert_eq!(samples[0].frames.len(), 1);
        assert_eq!(samples[0].frames[0].function, "handle_amd");
        assert_eq!(samples[1].comm, "C2 CompilerThre");
        assert_eq!((samples[1].tid, samples[1].time_ns), (9, 5_000_000_001));
        assert_eq!(
            (
                samples[1].frames[0].function.as_str(),
                samples[1].frames[0].kind
            ),
            ("jit_fn_3", FrameKind::Jit)
        );
    }

    /// A JIT function named like a sample's header: each real sample counts once, named whole.
    #[test]
    fn a_function_named_like_a_sample_header_forges_no_sample() {
        let forged = "x 1/1 1.000000001: 1000000000 cpu-clock: 0 y";
        let real = [
            sample("java", 1_000, &[(0x7f00, forged, "/tmp/jitted-1-1.so")]),
            sample("java", 2_000, &[(0x7f10, forged, "/tmp/jitted-1-1.so")]),
        ];
        for stack_lines in [true, false] {
            let (structure, names) = perf_runs(&real, stack_lines);
            assert_eq!(read(&structure, &names).unwrap(), real, "{names}");
        }
    }

    /// Line breaks in thread and function names, with forged headers and frames after them:
    /// kept, and the samples are perf's.
    #[test]
    fn line_breaks_in_names_are_kept_and_forge_nothing() {
        let comm = "a\n1/1 1.0000:";
        let function = "x 1/1 1.000000001: 1000000000 cpu-clock: 0 y\n\tdeadbeef forged (/x)";
        let real = [
            sample(
                comm,
                1_000,
                &[
                    (0x1167, function, "/tmp/hostile"),
                    (0x119b, "caller\n\n", "/tmp/hostile"),
                    (0x11ee, "main", "/tmp/dir\nwith a break/hostile"),
                ],
            ),
            sample("\n\t 1\n", 2_000, &[(0x1160, "\n", "/tmp/hostile")]),
            sample(comm, 3_000, &[]),
            sample(comm, 4_000, &[(0x1160, function, "/tmp/hostile")]),
        ];
        let (structure, names) = perf_runs(&real, true);
        assert_eq!(
            read(&structure, &names).unwrap(),
            real,
            "{structure}{names}"
        );

        let one_frame: Vec<Sample> = real.into_iter().filter(|s| s.frames.len() == 1).collect();
        let (structure, names) = perf_runs(&one_frame, false);
        assert_eq!(
            read(&structure, &names).unwrap(),
            one_frame,
            "{structure}{names}"
        );
    }

    /// A name holding the exact line of the frame after it ends there, and the rest joins that
    /// frame's name; the samples, their frames and addresses stay perf's.
    #[test]
    fn a_name_holding_the_next_frames_line_moves_text_but_no_frame() {
        let real = [
            sample(
                "java",
                1_000,
                &[
                    (0x10, "x\n\t              20 y", "/a"),
                    (0x20, "caller", "/a"),
                ],
            ),
            sample("java", 2_000, &[(0x30, "z", "/a")]),
        ];
        let (structure, names) = perf_runs(&real, true);
        let samples = read(&structure, &names).unwrap();
        assert_eq!(samples.len(), 2);
        let ips: Vec<Vec<u64>> = samples
            .iter()
            .map(|s| s.frames.iter().map(|f| f.ip).collect())
            .collect();
        assert_eq!(ips, [vec![0x10, 0x20], vec![0x30]]);
        assert_eq!(samples[0].frames[0].function, "x");
        assert_eq!(
            samples[0].frames[1].function,
            "y (/a)\n\t              20 caller"
        );
        assert_eq!(samples[1], real[1]);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_replaced() {
        let structure = b"a\xff 1/2     5.000000001:          1 cpu-clock: \n\t    10\n\n";
        let names = b"    1/2     5.000000001: \n\t    10 f\xfe (/a)\n\n";
        let samples = read_structure(&structure[..])
            .unwrap()
            .read_names(&names[..])
            .unwrap();
        assert_eq!(samples[0].comm, "a\u{fffd}");
        assert_eq!(samples[0].frames[0].function, "f\u{fffd}");
    }

    #[test]
    fn an_inlined_frame_and_a_sample_without_frames_are_read() {
        let structure = "a 1/1 1.000000001: 1 cycles: \n\t  10\n\t  10 (inlined)\n\n\
                         a 1/1 1.000000002: 1 cycles: \n\n";
        let names = "1/1 1.000000001: \n\t  10 inner (inlined)\n\t  10 outer (/a)\n\n\
                     1/1 1.000000002: \n\n";
        let samples = read(structure, names).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[0].frames[0].function, "inner");
        assert_eq!(samples[0].frames[1].function, "outer");
        assert!(samples[1].frames.is_empty());
    }

    #[test]
    fn a_structure_line_that_is_not_perfs_is_an_error_naming_it() {
        for (bad, number) in [
            ("\tff frame before any sample\n", 1),
            ("node 1/1 nonsense\n", 1),
            ("node 1/1 2.000000001: 1 cpu-clock: \n\tnot a frame\n", 2),
            ("node 1/1 2.000000001: 1 cpu-clock: zz\n", 1),
        ] {
            match read_structure(bad.as_bytes()) {
                Err(ParseError::Line { number: n, .. }) if n == number => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn names_of_another_recording_are_an_error_naming_the_sample() {
        let real = [
            sample("a", 1_000, &[(0x10, "f", "/a"), (0x20, "g", "/a")]),
            sample("a", 2_000, &[(0x30, "h", "/a")]),
        ];
        let (structure, names) = perf_runs(&real, true);
        let mut other = real.clone();
        other[1].time_ns = 2_001;
        let (_, other_time) = perf_runs(&other, true);
        other[1].time_ns = 2_000;
        other[0].frames[1].ip = 0x21;
        let (_, other_frame) = perf_runs(&other, true);
        let truncated: String = names
            .lines()
            .take(3)
            .map(|line| line.to_owned() + "\n")
            .collect();
        for (names, sample) in [
            (other_time, 2),
            (other_frame, 1),
            (truncated, 2),
            (format!("warning\n{names}"), 1),
            (String::new(), 1),
        ] {
            match read(&structure, &names) {
                Err(ParseError::NamesDisagree {
                    sample: s,
                    samples: 2,
                }) if s == sample => {}
                other => panic!("{names:?}: {other:?}"),
            }
        }
    }
}
