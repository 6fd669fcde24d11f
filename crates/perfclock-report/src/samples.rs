//! The samples of a recording, with their stacks symbolized by `perf script` (the same names
//! perf report shows, JIT code included once `perf inject --jit` has run), read into
//! [`Sample`]s.
//!
//! perf's own symbolizer is the reference for every output here: the totals of a flame graph
//! or a pprof profile then equal `perf script`'s sample counts by construction, and JIT names
//! come from the `jitted-*.so` images exactly as perf report shows them. `perf script` is run
//! with a fixed field list and its text read back:
//! ```text
//! COMM PID/TID SECONDS.NANOS: PERIOD EVENT:
//! \tIP SYMBOL (DSO)          one line per frame, leaf first
//! ```
//! or, for a recording without call chains (no `-g`), one line per sample with its one frame:
//! ```text
//! COMM PID/TID SECONDS.NANOS: PERIOD EVENT: IP SYMBOL (DSO)
//! ```
//! COMM may hold spaces (thread names) and is padded on the left when there are no call
//! chains, so a header is found by its `PID/TID SECONDS.NANOS:` pair of words; SYMBOL may hold
//! spaces and parentheses (`Hot.alpha(long)`, `JS:*parseExpr /app/hot.js:3:19`), so a frame's
//! DSO is its last parenthesized group.

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
}

impl Frame {
    /// A frame at `ip` in `function` of `dso`.
    pub fn new(ip: u64, function: &str, dso: &str, kind: FrameKind) -> Frame {
        Frame {
            ip,
            function: function.to_owned(),
            dso: dso.to_owned(),
            kind,
        }
    }
}

/// One sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The thread's name at the sample.
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
}

/// The arguments of `perf script` whose output [`parse`] reads.
pub const PERF_SCRIPT_ARGS: &[&str] = &[
    "script",
    "-F",
    "comm,pid,tid,time,period,event,ip,sym,dso",
    "--ns",
];

/// Reads every sample of `perf script` output run with [`PERF_SCRIPT_ARGS`].
///
/// # Errors
/// [`ParseError`].
pub fn parse(output: impl BufRead) -> Result<Vec<Sample>, ParseError> {
    let mut samples: Vec<Sample> = Vec::new();
    for (index, line) in output.lines().enumerate() {
        let line = line.map_err(ParseError::Io)?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = || ParseError::Line {
            number: index + 1,
            text: line.clone(),
        };
        if let Some(sample) = parse_header(&line) {
            samples.push(sample.ok_or_else(bad)?);
        } else if line.starts_with(char::is_whitespace) {
            let frame = parse_frame(&line).ok_or_else(bad)?;
            samples.last_mut().ok_or_else(bad)?.frames.push(frame);
        } else {
            return Err(bad());
        }
    }
    Ok(samples)
}

/// The sample whose header `line` is, with its frame when it carries one: `None` when `line` has
/// no `PID/TID SECONDS.NANOS:` pair of words (a frame line), `Some(None)` when it has one but
/// what follows is not `PERIOD EVENT: [FRAME]`.
fn parse_header(line: &str) -> Option<Option<Sample>> {
    let words = words(line);
    let (at, pid, tid, time_ns) = words.windows(2).enumerate().find_map(|(at, pair)| {
        let (pid, tid) = pair[0].1.split_once('/')?;
        let (pid, tid) = (number(pid)?, number(tid)?);
        let (seconds, nanos) = pair[1].1.strip_suffix(':')?.split_once('.')?;
        let nanos = number(nanos).filter(|_| nanos.len() == 9)?;
        let time_ns = number(seconds)?
            .checked_mul(1_000_000_000)?
            .checked_add(nanos)?;
        Some((at, pid, tid, time_ns))
    })?;
    let sample = || {
        let period = number(words.get(at + 2)?.1)?;
        let &(event_at, event) = words.get(at + 3)?;
        let inline = line[event_at + event.len()..].trim();
        Some(Sample {
            comm: line[..words[at].0].trim().to_owned(),
            pid: u32::try_from(pid).ok()?,
            tid: u32::try_from(tid).ok()?,
            time_ns,
            period,
            event: event.strip_suffix(':')?.to_owned(),
            frames: if inline.is_empty() {
                Vec::new()
            } else {
                vec![parse_frame(inline)?]
            },
        })
    };
    Some(sample())
}

/// The whitespace-separated words of `line`, each with its byte offset.
fn words(line: &str) -> Vec<(usize, &str)> {
    let mut words = Vec::new();
    let mut start = None;
    for (at, c) in line.char_indices().chain([(line.len(), ' ')]) {
        match (c.is_whitespace(), start) {
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

/// `\tIP SYMBOL (DSO)`.
fn parse_frame(line: &str) -> Option<Frame> {
    let line = line.trim();
    let (ip, rest) = line.split_once(' ')?;
    let ip = u64::from_str_radix(ip, 16).ok()?;
    let rest = rest.strip_suffix(')')?;
    let open = rest.rfind(" (")?;
    let (function, dso) = (&rest[..open], &rest[open + 2..]);
    Some(Frame {
        ip,
        function: function.to_owned(),
        kind: kind_of(dso),
        dso: dso.to_owned(),
    })
}

/// A frame's kind from its DSO's name.
fn kind_of(dso: &str) -> FrameKind {
    let file = dso.rsplit('/').next().unwrap_or(dso);
    if dso == "[unknown]" {
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

    const OUTPUT: &str = "\
C2 CompilerThre 4242/4250  2412.136291842:     250000 cpu-clock:ppp: 
\t    7f1c2a40 Hot.alpha(long) (/tmp/out.data.jit-x/pid-1/jitted-4242-17.so)
\t    7f1c2b00 Hot.main(java.lang.String[]) <- Hot.loop() (/tmp/j/jitted-4242-3.so)
\tffffffff8162105f __anon_vma_prepare ([kernel.kallsyms])
\t           14645 handle_amd (/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)
\t               0 [unknown] ([unknown])

node 30749/30749  2412.136541094:     250000 cpu-clock:ppp: 
\t    7ff97ca968a8 JS:*parseExpr /tmp/nodet/hot.js:3:19 (/tmp/x.jit-1/foreign-0/jitted-30749-9.so)
";

    #[test]
    fn perf_scripts_samples_are_read_with_their_frames() {
        let samples = parse(OUTPUT.as_bytes()).unwrap();
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
            samples[1].frames[0].function,
            "JS:*parseExpr /tmp/nodet/hot.js:3:19"
        );
    }

    #[test]
    fn a_recording_without_call_chains_has_each_samples_frame_on_its_line() {
        let output = "      jit_reload 28251/28251 11681.860192114:     250000 cpu-clock: \
                      7fd3d250c62a handle_amd (/usr/lib/ld-linux-x86-64.so.2)
 C2 CompilerThre 7/9 5.000000001: 1 cpu-clock:      7f00 jit_fn_3 (/tmp/jitted-7-3.so)
";
        let samples = parse(output.as_bytes()).unwrap();
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

    #[test]
    fn what_is_not_perf_scripts_output_is_an_error_naming_the_line() {
        for bad in [
            "\tff frame before any sample (x)\n",
            "node 1/1 nonsense\n",
            "node 1/1 2.000000001: 1 cpu-clock: not a frame\n",
        ] {
            match parse(bad.as_bytes()) {
                Err(ParseError::Line { number: 1, .. }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
