//! `perfclock record [OPTIONS] [PERF-OPTIONS]... -- CMD [ARGS]`: profile a command, JIT code
//! included, in one step.
//!
//! 1. Runs `perf record -g [PERF-OPTIONS] -o OUT.raw -- CMD [ARGS]` with perf's default clock,
//!    with perfclock's JVMTI agent appended to `JAVA_TOOL_OPTIONS` so every JVM in CMD's tree
//!    writes a jitdump into one fresh private directory next to OUT.
//! 2. Forwards SIGINT/SIGTERM to perf, which stops the workload and writes its file as
//!    `perf record` always does on those signals; then waits for perf.
//! 3. Adds the TIME_CONV record `perf inject --jit` needs where the recording lacks one
//!    (`inject-time-conv`, run in-process: [`add_time_conv`]), runs `perf inject --jit` when a
//!    jitdump was mapped (else renames), and leaves OUT ready for `perf report`, `perf script`
//!    and `samply import`. OUT appears complete or not at all; OUT.raw is kept on any error.
//!
//! Exit status: CMD's when it failed (128 + the signal when a signal ended it), 128 + the signal
//! when perfclock itself was interrupted, 1 when perfclock or perf failed, else 0.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use perfclock_cli::RecordArgs;
use perfclock_perfdata::check_output_path;

use crate::error::RecordError;
use crate::output::{chain, errln};
use crate::{agent_path, children, inject, jvms, signals};

const NAME: &str = "perfclock record";

/// How a perf option takes its value (`perf record -h` shows which).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Value {
    /// None: `-g`, `--overwrite`.
    Flag,
    /// Always: from the rest of a short option's bundle (`-F999`), after `=` (`--freq=999`),
    /// else the next argument (`-F 999`, `--freq 999`).
    Required,
    /// Only from the rest of the bundle (`-z3`) or after `=` (`--compression-level=3`): never
    /// the next argument.
    Optional,
}

/// One of `perf record`'s options.
struct PerfOption {
    short: Option<char>,
    long: Option<&'static str>,
    value: Value,
}

impl PerfOption {
    const fn new(short: Option<char>, long: &'static str, value: Value) -> Self {
        Self {
            short,
            long: Some(long),
            value,
        }
    }

    /// `-k/--clockid`, as perf's usage names it.
    fn name(&self) -> String {
        match (self.short, self.long) {
            (Some(short), Some(long)) => format!("-{short}/--{long}"),
            (Some(short), None) => format!("-{short}"),
            (None, Some(long)) => format!("--{long}"),
            (None, None) => String::new(),
        }
    }
}

/// perf 6.1's `perf record` options (Debian's linux-perf 6.1.187): the long names and their
/// order as `perf record --list-opts` prints them (hidden ones included), the short names and
/// how each takes its value as `perf record -h` shows them (`<n>`: required, `[=<n>]`:
/// optional), and `-g`, which has no long name. Whether a prefix of a long name is unambiguous
/// depends on this list: perf resolves `--clo` to `--clockid` because no other name starts with
/// `clo`, and reports `--cl` as ambiguous because `--clang-path` and `--clang-opt` do.
const PERF_RECORD_OPTIONS: &[PerfOption] = &[
    PerfOption::new(Some('e'), "event", Value::Required),
    PerfOption::new(None, "filter", Value::Required),
    PerfOption::new(None, "exclude-perf", Value::Flag),
    PerfOption::new(Some('p'), "pid", Value::Required),
    PerfOption::new(Some('t'), "tid", Value::Required),
    PerfOption::new(Some('r'), "realtime", Value::Required),
    PerfOption::new(None, "no-buffering", Value::Flag),
    PerfOption::new(Some('R'), "raw-samples", Value::Flag),
    PerfOption::new(Some('a'), "all-cpus", Value::Flag),
    PerfOption::new(Some('C'), "cpu", Value::Required),
    PerfOption::new(Some('c'), "count", Value::Required),
    PerfOption::new(Some('o'), "output", Value::Required),
    PerfOption::new(Some('i'), "no-inherit", Value::Flag),
    PerfOption::new(None, "tail-synthesize", Value::Flag),
    PerfOption::new(None, "overwrite", Value::Flag),
    PerfOption::new(None, "no-bpf-event", Value::Flag),
    PerfOption::new(None, "strict-freq", Value::Flag),
    PerfOption::new(Some('F'), "freq", Value::Required),
    PerfOption::new(Some('m'), "mmap-pages", Value::Required),
    PerfOption::new(None, "mmap-flush", Value::Required),
    PerfOption::new(None, "group", Value::Flag),
    PerfOption::new(None, "call-graph", Value::Required),
    PerfOption::new(Some('v'), "verbose", Value::Flag),
    PerfOption::new(Some('q'), "quiet", Value::Flag),
    PerfOption::new(Some('s'), "stat", Value::Flag),
    PerfOption::new(Some('d'), "data", Value::Flag),
    PerfOption::new(None, "phys-data", Value::Flag),
    PerfOption::new(None, "data-page-size", Value::Flag),
    PerfOption::new(None, "code-page-size", Value::Flag),
    PerfOption::new(None, "sample-cpu", Value::Flag),
    PerfOption::new(None, "sample-identifier", Value::Flag),
    PerfOption::new(Some('T'), "timestamp", Value::Flag),
    PerfOption::new(Some('P'), "period", Value::Flag),
    PerfOption::new(Some('n'), "no-samples", Value::Flag),
    PerfOption::new(Some('N'), "no-buildid-cache", Value::Flag),
    PerfOption::new(Some('B'), "no-buildid", Value::Flag),
    PerfOption::new(Some('G'), "cgroup", Value::Required),
    PerfOption::new(Some('D'), "delay", Value::Required),
    PerfOption::new(None, "kcore", Value::Flag),
    PerfOption::new(Some('u'), "uid", Value::Required),
    PerfOption::new(Some('b'), "branch-any", Value::Flag),
    PerfOption::new(Some('j'), "branch-filter", Value::Required),
    PerfOption::new(Some('W'), "weight", Value::Flag),
    PerfOption::new(None, "transaction", Value::Flag),
    PerfOption::new(None, "per-thread", Value::Flag),
    PerfOption::new(Some('I'), "intr-regs", Value::Optional),
    PerfOption::new(None, "user-regs", Value::Optional),
    PerfOption::new(None, "running-time", Value::Flag),
    PerfOption::new(Some('k'), "clockid", Value::Required),
    PerfOption::new(Some('S'), "snapshot", Value::Optional),
    PerfOption::new(None, "aux-sample", Value::Optional),
    PerfOption::new(None, "proc-map-timeout", Value::Required),
    PerfOption::new(None, "namespaces", Value::Flag),
    PerfOption::new(None, "all-cgroups", Value::Flag),
    PerfOption::new(None, "switch-events", Value::Flag),
    PerfOption::new(None, "all-kernel", Value::Flag),
    PerfOption::new(None, "all-user", Value::Flag),
    PerfOption::new(None, "kernel-callchains", Value::Flag),
    PerfOption::new(None, "user-callchains", Value::Flag),
    PerfOption::new(None, "clang-path", Value::Required),
    PerfOption::new(None, "clang-opt", Value::Required),
    PerfOption::new(None, "vmlinux", Value::Required),
    PerfOption::new(None, "buildid-all", Value::Flag),
    PerfOption::new(None, "buildid-mmap", Value::Flag),
    PerfOption::new(None, "timestamp-filename", Value::Flag),
    PerfOption::new(None, "timestamp-boundary", Value::Flag),
    PerfOption::new(None, "switch-output", Value::Optional),
    PerfOption::new(None, "switch-output-event", Value::Required),
    PerfOption::new(None, "switch-max-files", Value::Required),
    PerfOption::new(None, "dry-run", Value::Flag),
    PerfOption::new(None, "aio", Value::Optional),
    PerfOption::new(None, "affinity", Value::Required),
    PerfOption::new(Some('z'), "compression-level", Value::Optional),
    PerfOption::new(None, "max-size", Value::Required),
    PerfOption::new(None, "num-thread-synthesize", Value::Required),
    PerfOption::new(None, "control", Value::Required),
    PerfOption::new(None, "synth", Value::Required),
    PerfOption::new(None, "debuginfod", Value::Optional),
    PerfOption::new(None, "threads", Value::Optional),
    PerfOption::new(None, "off-cpu", Value::Flag),
    PerfOption {
        short: Some('g'),
        long: None,
        value: Value::Flag,
    },
];

/// Why `record` refuses a perf option that perf reads an argument as setting.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// perfclock record cannot work with it.
    Harmful(&'static str),
    /// `-o`, `-p`, `-a`: perfclock record's own options, which perfclock passes to perf itself.
    Own,
}

/// The perf options `record` refuses, by long name, and why.
const REFUSED: [(&str, Refusal); 5] = [
    (
        "clockid",
        Refusal::Harmful(
            "it makes perf stamp its samples with another clock than the perf clock the \
             jitdumps' timestamps are converted to, so perf inject --jit would place JIT code \
             at the wrong times",
        ),
    ),
    (
        "compression-level",
        Refusal::Harmful(
            "perf inject --jit (perf 6.1 at least) does not look inside compressed records \
             and then silently injects no JIT code",
        ),
    ),
    ("output", Refusal::Own),
    ("pid", Refusal::Own),
    ("all-cpus", Refusal::Own),
];

fn refusal(option: &PerfOption) -> Option<&'static Refusal> {
    REFUSED
        .iter()
        .find(|(long, _)| option.long == Some(*long))
        .map(|(_, refusal)| refusal)
}

/// What perf's parser (tools/lib/subcmd/parse-options.c, `parse_long_opt`) makes of
/// `--ARG`: `arg` is ARG, without the dashes.
#[derive(Debug, PartialEq, Eq)]
enum LongOption {
    /// One option (an index into [`PERF_RECORD_OPTIONS`]): set, or negated (`unset`); its
    /// value given after `=` or not.
    Resolved {
        index: usize,
        unset: bool,
        inline_value: bool,
    },
    /// Prefix of several names: perf stops with "Ambiguous option". The candidates, each
    /// with whether it would be negated.
    Ambiguous(Vec<(usize, bool)>),
    /// No option: perf stops with "unknown option".
    Unknown,
}

/// `parse_long_opt` over `options` ([`PERF_RECORD_OPTIONS`]), step by step: a name given
/// whole (`clockid`, `clockid=1`) wins at once; a name `no-X` is also matched by `X`
/// (negated); otherwise the part before `=` may be a prefix of a name (`clo=1`), `no-`
/// followed by a prefix of a name negates it, and `n`, `no` and `no-` are prefixes of every
/// negation. One prefix match resolves; more than one is ambiguous.
fn parse_long(options: &[PerfOption], arg: &str) -> LongOption {
    let name_end = arg.find('=').unwrap_or(arg.len());
    let name = &arg[..name_end];
    let has_value = name_end < arg.len();
    // `rest` is what follows a whole name: nothing, or `=value`.
    let whole = |index: usize, unset: bool, rest: &str| {
        (rest.is_empty() || rest.starts_with('=')).then_some(LongOption::Resolved {
            index,
            unset,
            inline_value: !rest.is_empty(),
        })
    };
    let mut prefixes = Vec::new();
    for (index, option) in options.iter().enumerate() {
        let Some(long) = option.long else { continue };
        if let Some(rest) = arg.strip_prefix(long) {
            match whole(index, false, rest) {
                Some(resolved) => return resolved,
                None => continue,
            }
        }
        if let Some(positive) = long.strip_prefix("no-") {
            if let Some(rest) = arg.strip_prefix(positive) {
                match whole(index, true, rest) {
                    Some(resolved) => return resolved,
                    None => continue,
                }
            }
            // The whole argument, `=` and all, as perf compares it here.
            if positive.starts_with(arg) {
                prefixes.push((index, true));
                continue;
            }
        }
        if long.starts_with(name) {
            prefixes.push((index, false));
            continue;
        }
        if "no-".starts_with(arg) {
            prefixes.push((index, true));
            continue;
        }
        let Some(negated) = arg.strip_prefix("no-") else {
            continue;
        };
        if let Some(rest) = negated.strip_prefix(long) {
            match whole(index, true, rest) {
                Some(resolved) => return resolved,
                None => continue,
            }
        }
        if long.starts_with(negated) {
            prefixes.push((index, true));
        }
    }
    match prefixes[..] {
        [] => LongOption::Unknown,
        [(index, unset)] => LongOption::Resolved {
            index,
            unset,
            inline_value: has_value && !unset,
        },
        _ => LongOption::Ambiguous(prefixes),
    }
}

/// The first argument among `perf_args` that perf reads as setting an option `record` refuses,
/// perf's options being `options` ([`PERF_RECORD_OPTIONS`]): `(the argument as given, the
/// option, why)`.
///
/// perf's rules (parse-options.c): an argument `--` ends the options (what follows is the
/// command's); `--ARG` is read by [`parse_long`]; `-XYZ` is a bundle of short options read
/// left to right, where a letter that takes a value takes the rest of the bundle as it
/// (`-ozfile`: output `zfile`; `-zg`: compression level `g`, read as the default) or, if
/// nothing is left and the value is required, the next argument (`-gk 1`). A negation
/// (`--no-clockid`, `--no-comp`) is not refused: perf's callbacks turn the option off
/// (`use_clockid = 0`, `comp_level = 0`), which is perf's default, and never take the next
/// argument as a value. A prefix perf reports as ambiguous is refused only when every
/// candidate is a refused option (perf fails on it anyway; this keeps the refusal from
/// depending on which of the candidates perf would have picked).
/// Unlike perf, this does not stop at an unknown option or at the first argument that is no
/// option (perf would run it as the command): it looks further, so a refused option there is
/// refused too. Only refusals `which` accepts count.
fn refused_setting<'o>(
    options: &'o [PerfOption],
    perf_args: &[OsString],
    which: fn(&Refusal) -> bool,
) -> Option<(String, &'o PerfOption, &'static Refusal)> {
    let refused = |option: &PerfOption| refusal(option).filter(|why| which(why));
    let mut args = perf_args.iter().map(|arg| arg.to_string_lossy());
    while let Some(text) = args.next() {
        if text == "--" {
            return None;
        }
        let found = |index: usize| {
            let option = &options[index];
            refused(option).map(|why| (text.clone().into_owned(), option, why))
        };
        if let Some(arg) = text.strip_prefix("--") {
            match parse_long(options, arg) {
                LongOption::Resolved {
                    index,
                    unset: false,
                    inline_value,
                } => {
                    if let Some(refused) = found(index) {
                        return Some(refused);
                    }
                    if options[index].value == Value::Required && !inline_value {
                        args.next();
                    }
                }
                LongOption::Ambiguous(candidates) => {
                    let all_refused = candidates
                        .iter()
                        .all(|&(index, _)| refusal(&options[index]).is_some());
                    let sets = candidates
                        .iter()
                        .find(|&&(index, unset)| !unset && found(index).is_some());
                    if let (true, Some(&(index, _))) = (all_refused, sets) {
                        return found(index);
                    }
                }
                LongOption::Resolved { unset: true, .. } | LongOption::Unknown => {}
            }
            continue;
        }
        let Some(bundle) = text.strip_prefix('-') else {
            continue;
        };
        for (at, letter) in bundle.char_indices() {
            // A letter perf does not know makes perf fail; the rest is looked at all the same.
            let Some(index) = options
                .iter()
                .position(|option| option.short == Some(letter))
            else {
                continue;
            };
            if let Some(refused) = found(index) {
                return Some(refused);
            }
            let rest_empty = at + letter.len_utf8() == bundle.len();
            match options[index].value {
                Value::Flag => continue,
                Value::Required if rest_empty => {
                    args.next();
                }
                Value::Required | Value::Optional => {}
            }
            break;
        }
    }
    None
}

/// The first argument among `perf_args` that perf reads as setting `-k/--clockid` or
/// `-z/--compression-level`, as `(the argument, the reason)`.
fn refused_option(perf_args: &[OsString]) -> Option<(String, &'static str)> {
    let harmful = |why: &Refusal| matches!(why, Refusal::Harmful(_));
    refused_setting(PERF_RECORD_OPTIONS, perf_args, harmful).and_then(
        |(arg, option, why)| match why {
            Refusal::Harmful(why) => Some((format!("{arg} (perf's {})", option.name()), *why)),
            Refusal::Own => None,
        },
    )
}

/// The first argument among `perf_args` that is one of perfclock record's own options: perf's
/// `-o`, `-p` or `-a` in any spelling perf reads ([`refused_setting`]), or one perf does not
/// know (`--agent`, `--duration`, ...).
fn own_option(perf_args: &[OsString]) -> Option<String> {
    let own = |why: &Refusal| *why == Refusal::Own;
    if let Some((arg, option, _)) = refused_setting(PERF_RECORD_OPTIONS, perf_args, own) {
        return Some(format!("{arg} (perf's {})", option.name()));
    }
    let perfclock_only = [
        "--agent",
        "--no-java-agent",
        "--duration",
        "--allow-unattached",
    ];
    perf_args
        .iter()
        .map(|arg| arg.to_string_lossy())
        .take_while(|arg| arg != "--")
        .find(|arg| {
            perfclock_only.iter().any(|own| {
                arg.strip_prefix(own)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
            })
        })
        .map(|arg| arg.into_owned())
}

/// The directory `path` is in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// OUT's file name, for the names of what is created beside it.
fn file_name(output: &Path) -> String {
    output.file_name().map_or_else(
        || "perf.data".into(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// The private (0700, mkdtemp) directory beside OUT that holds perf's raw recording and the
/// intermediate files: nobody else can plant or read anything in it, and a final rename from
/// it into OUT stays on one file system. Removed when dropped, unless kept.
struct WorkDir {
    dir: tempfile::TempDir,
    /// perf record's output, created here exclusively before perf opens it.
    raw: PathBuf,
}

impl WorkDir {
    fn create(output: &Path) -> Result<Self, RecordError> {
        let parent = parent_dir(output);
        let dir = tempfile::Builder::new()
            .prefix(&format!(".{}.perfclock-", file_name(output)))
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(parent)
            .map_err(|source| RecordError::WorkDir {
                dir: parent.to_owned(),
                source,
            })?;
        let raw = dir.path().join(format!("{}.raw", file_name(output)));
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&raw)
            .map_err(|source| RecordError::CreateRaw {
                path: raw.clone(),
                source,
            })?;
        Ok(Self { dir, raw })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Keeps the directory and the raw recording in it (after an error), removing the rest.
    fn keep_raw(self) {
        if let Ok(entries) = fs::read_dir(self.dir.path()) {
            for entry in entries.flatten() {
                if entry.path() != self.raw {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        let _ = self.dir.keep();
    }
}

/// `OUT.jit-XXXXXX` (mkdtemp), mode 0711: the JVMs' jitdump directories are made inside it,
/// where no other user can create or list anything. Kept: the output's `jitted-*.so` are
/// written there by `perf inject --jit` and perf report reads them there.
fn make_dump_root(output: &Path) -> Result<PathBuf, RecordError> {
    let dir = parent_dir(output)
        .canonicalize()
        .map_err(|source| RecordError::ResolveDir {
            output: output.to_owned(),
            source,
        })?;
    let created = tempfile::Builder::new()
        .prefix(&format!("{}.jit-", file_name(output)))
        .permissions(fs::Permissions::from_mode(0o711))
        .tempdir_in(&dir)
        .map_err(|source| RecordError::DumpDir { dir, source })?;
    Ok(created.keep())
}

/// The launched command's jitdump directory: a random name (128 bits) in the dump root, mode
/// 1777. The command may switch users (`setpriv`, `sudo -u`, a service's own drop of root), so
/// every user the command runs as must be able to create its dump there; a user outside the
/// command cannot, for want of the name: the root (0711) cannot be listed, and the name is given
/// only to the command (its environment). The sticky bit keeps one user's files from another's
/// renames and removals, and lets the kernel refuse to follow a link another user plants there
/// (protected_symlinks) when perf inject writes into it.
fn make_command_dump_dir(root: &Path) -> Result<PathBuf, RecordError> {
    let created = tempfile::Builder::new()
        .prefix("")
        .rand_bytes(22)
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir_in(root)
        .map_err(|source| RecordError::DumpDir {
            dir: root.to_owned(),
            source,
        })?;
    let path = created.keep();
    // After creation: mkdir's mode goes through the umask.
    match fs::set_permissions(&path, fs::Permissions::from_mode(0o1777)) {
        Ok(()) => Ok(path),
        Err(source) => Err(RecordError::OpenDumpDir { path, source }),
    }
}

/// `JAVA_TOOL_OPTIONS` with the agent appended to the user's value.
fn java_tool_options(
    current: Option<OsString>,
    agent: &Path,
    dump_dir: &Path,
) -> Result<OsString, RecordError> {
    // HotSpot ends -agentpath's path at the first `=` (the options follow it).
    if agent.as_os_str().as_bytes().contains(&b'=') {
        return Err(RecordError::AgentPathEquals {
            agent: agent.to_owned(),
        });
    }
    // The JVM splits JAVA_TOOL_OPTIONS at white space, and the agent its options at commas.
    for (what, path) in [("agent", agent), ("jitdump directory", dump_dir)] {
        let text = path.to_string_lossy();
        if text.contains(|c: char| c.is_whitespace() || c == ',' || c == '"' || c == '\'') {
            return Err(RecordError::ToolOptionsPath {
                what,
                path: path.to_owned(),
            });
        }
    }
    let mut value = current.unwrap_or_default();
    if !value.is_empty() {
        value.push(" ");
    }
    value.push("-agentpath:");
    value.push(agent.as_os_str());
    value.push("=jitdump=");
    value.push(dump_dir.as_os_str());
    Ok(value)
}

/// Whether `path` is a perf.data that perf finished writing: its header names a data section
/// with records (perf writes the final header when it stops).
fn recording_complete(path: &Path) -> bool {
    let mut header = [0u8; 56];
    let read = fs::File::open(path).and_then(|mut file| file.read_exact(&mut header));
    if read.is_err() || &header[..8] != b"PERFILE2" {
        return false;
    }
    // perf_file_header: magic, size, attr_size, attrs {offset, size}, data {offset, size}.
    let data_size = u64::from_le_bytes(header[48..56].try_into().unwrap_or([0; 8]));
    data_size > 0
}

/// What [`add_time_conv`] did.
enum TimeConvStep {
    /// The recording maps no jitdump: nothing for `perf inject --jit` to do, and nothing
    /// written.
    NoJitdump,
    /// The recording maps no jitdump: `out_tmp` is the recording with its HEADER_CLOCK_DATA.
    ClockDataOnly,
    /// Written to `out_tmp`, with the TIME_CONV the recording had or one perfclock added (and
    /// HEADER_CLOCK_DATA, given a snapshot), for `perf inject --jit`.
    Written(String),
}

/// The `inject-time-conv` step, in-process: `raw` to `out_tmp` with a TIME_CONV record where
/// it lacks one, from the sidecars next to the dumps (the one call site for that code).
fn add_time_conv(
    raw: &Path,
    out_tmp: &Path,
    output: &Path,
    anchors: &ClockAnchors,
    all_jit_code: bool,
    cleanup: &signals::TempCleanup,
) -> Result<TimeConvStep, RecordError> {
    // The sidecars are looked for next to each dump the recording names: every JVM has a
    // directory of its own (pid namespaces may give two JVMs one pid).
    let options = inject::InjectOptions {
        input: raw.to_path_buf(),
        output: out_tmp.to_path_buf(),
        dump_dirs: Vec::new(),
        clock_data: match anchors.start {
            Some(snapshot) => inject::ClockDataSource::Recorded(snapshot),
            None => inject::ClockDataSource::None,
        },
        pairings: anchors.pairings.clone(),
        copies_beside: output.to_path_buf(),
        all_jit_code,
    };
    match inject::run(&options, cleanup) {
        Ok((outcome, _)) => {
            for line in outcome.foreign_lines() {
                errln!("{NAME}: {line}");
            }
            if outcome.maps_jitdumps() {
                Ok(TimeConvStep::Written(outcome.time_conv_line()))
            } else {
                Ok(TimeConvStep::ClockDataOnly)
            }
        }
        Err(crate::error::InjectError::NoJitMarker) => Ok(TimeConvStep::NoJitdump),
        Err(error) => Err(RecordError::TimeConv(error)),
    }
}

/// The clock snapshots taken at the start and at the end of the recording: the anchors of
/// HEADER_CLOCK_DATA, which the perf.data library adds to OUT.
struct ClockAnchors {
    start: Option<perfclock::ClockSnapshot>,
    end: Option<perfclock::ClockSnapshot>,
    /// Every snapshot, start and end included, one about every [`PAIRING_INTERVAL`]: the
    /// `CLOCK_MONOTONIC` pairings of other writers' jitdumps (`foreign`).
    pairings: Vec<perfclock::ClockSnapshot>,
}

/// How often `record` pairs `CLOCK_MONOTONIC` with the perf clock while perf records (each
/// pairing a few microseconds of clock reads): between two, a converted stamp is off by at most
/// twice `foreign::MAX_RATE_PPM` over half the interval, and in practice by the rate's change
/// over it (docs/measurements.md).
const PAIRING_INTERVAL: Duration = Duration::from_secs(1);

fn take_snapshot(when: &str) -> Option<perfclock::ClockSnapshot> {
    match perfclock::snapshot() {
        Ok(snapshot) => Some(snapshot),
        Err(error) => {
            errln!(
                "{NAME}: warning: no clock snapshot at the {when}: {}",
                chain(&error)
            );
            None
        }
    }
}

impl ClockAnchors {
    /// Says how wall-clock time relates to the samples' timestamps, and whether it moved.
    fn report(&self) {
        let (Some(start), Some(end)) = (&self.start, &self.end) else {
            return;
        };
        let moved = end.realtime.offset_ns - start.realtime.offset_ns;
        let allowed = start.realtime.uncertainty_ns + end.realtime.uncertainty_ns;
        errln!(
            "{NAME}: wall clock = sample time + {} ns (± {} ns) at the start, + {} ns (± {} ns) \
             at the end: moved {moved} ns",
            start.realtime.offset_ns,
            start.realtime.uncertainty_ns,
            end.realtime.offset_ns,
            end.realtime.uncertainty_ns
        );
        // NTP slews by at most 500 ppm; more than that plus the uncertainty is a step.
        let elapsed = end.perf_ns.saturating_sub(start.perf_ns);
        if moved.unsigned_abs() > allowed + elapsed / 2000 {
            errln!(
                "{NAME}: warning: CLOCK_REALTIME was stepped during the recording (moved \
                 {moved} ns against the perf clock): wall-clock times of the samples are off by \
                 up to that much"
            );
        }
    }
}

/// Why the run ended badly: the message, and the exit code.
struct Failure(String, u8);

/// The exit code that reports `status` the way a shell does.
fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

/// Runs `perfclock record`.
pub(crate) fn run(options: RecordArgs) -> ExitCode {
    match record(&options) {
        Ok(code) => ExitCode::from(code),
        Err(Failure(message, code)) => {
            errln!("{NAME}: error: {message}");
            ExitCode::from(code)
        }
    }
}

fn usage(message: String) -> Failure {
    Failure(message, 2)
}

fn fail(message: String) -> Failure {
    Failure(message, 1)
}

/// `error` and its causes, as the command's failure.
fn failed(error: RecordError) -> Failure {
    fail(chain(&error))
}

/// What is recorded: a command, running processes, or the whole machine.
enum Target<'a> {
    Command(&'a [OsString]),
    Pids(&'a [u32]),
    SystemWide,
}

/// The usage errors, before anything is created or started.
fn check_arguments(options: &RecordArgs) -> Result<Target<'_>, Failure> {
    if let Some((arg, why)) = refused_option(&options.perf_args) {
        return Err(usage(format!(
            "refusing perf option {arg}: {why}; record without it"
        )));
    }
    if let Some(arg) = own_option(&options.perf_args) {
        return Err(usage(format!(
            "{arg} after a perf option: perfclock record's own options (-o, -p, -a, --duration, \
             --agent, --no-java-agent, --allow-unattached) go before the perf options"
        )));
    }
    let target =
        match (&options.pids[..], options.system_wide, &options.command[..]) {
            ([], false, []) => return Err(usage(
                "nothing to record: perfclock record [OPTIONS] [PERF-OPTIONS]... -- CMD [ARGS], \
                 or -p PID[,PID...], or -a"
                    .into(),
            )),
            ([], false, command) => Target::Command(command),
            (pids, false, []) => Target::Pids(pids),
            ([], true, []) => Target::SystemWide,
            _ => return Err(usage(
                "-p, -a and a command exclude each other: pass one (--duration bounds -p and -a)"
                    .into(),
            )),
        };
    if options.allow_unattached && options.pids.is_empty() {
        return Err(usage("--allow-unattached goes with -p".into()));
    }
    Ok(target)
}

/// The agent to use, unless `--no-java-agent`.
fn agent(options: &RecordArgs) -> Result<Option<PathBuf>, Failure> {
    if options.no_java_agent {
        return Ok(None);
    }
    let agent = match &options.agent {
        Some(path) => path
            .canonicalize()
            .map_err(|e| fail(format!("--agent {}: {e}", path.display())))?,
        None => agent_path::find()
            .map_err(|e| fail(format!("{e}; or pass --agent PATH, or --no-java-agent")))?,
    };
    Ok(Some(agent))
}

/// The jitdump directories and the JVMs attached so far.
/// The dump directories and agent sessions a recording started. Released ([`Dumps::release`])
/// once, on every way out of [`record`]: explicitly after the recording, or on drop when an
/// error or a signal returns early (an attach failure, SIGINT while attaching), so no JVM keeps
/// writing and no directory stays writable by the JVMs' users.
struct Dumps {
    root: Option<PathBuf>,
    dirs: Vec<PathBuf>,
    /// The JVMs `-p`/`-a` attached, whose sessions end with the recording.
    attached: Vec<u32>,
    /// The agent that started their sessions, which the `stop` request goes to.
    agent: Option<PathBuf>,
}

impl Drop for Dumps {
    fn drop(&mut self) {
        self.release();
    }
}

impl Dumps {
    /// Reports `outcome` ([`report`]); whether it is a failure to attach.
    fn add(&mut self, outcome: &jvms::Outcome) -> bool {
        self.keep(outcome);
        report(outcome)
    }

    /// Keeps an attached JVM's directory and pid.
    fn keep(&mut self, outcome: &jvms::Outcome) {
        if let jvms::Outcome::Attached { pid, dir } = outcome {
            self.dirs.push(dir.clone());
            self.attached.push(*pid);
        }
    }

    /// Ends the agent's session in every JVM attached for this recording (their dumps are
    /// closed and their directories stop growing), then takes the directories back: the JVMs'
    /// users can no longer write into them, and empty ones go. What it released is forgotten,
    /// so a second call does nothing.
    fn release(&mut self) {
        let attached = std::mem::take(&mut self.attached);
        if let Some(agent) = &self.agent {
            for pid in attached {
                if let Err(error) = jvms::stop_session(pid, agent) {
                    errln!(
                        "{NAME}: warning: cannot end the agent's session in JVM {pid}: {}",
                        chain(&error)
                    );
                }
            }
        }
        for dir in std::mem::take(&mut self.dirs) {
            if let Err(error) = jvms::lock_down(&dir) {
                errln!(
                    "{NAME}: warning: cannot take back {}: {error}",
                    dir.display()
                );
            }
            let _ = fs::remove_dir(&dir);
        }
        if let Some(root) = self.root.take() {
            let _ = fs::remove_dir(root);
        }
    }
}

/// `perf record` for `target`, writing `raw`.
fn perf_record(options: &RecordArgs, target: &Target<'_>, raw: &Path) -> Command {
    let mut perf = Command::new("perf");
    perf.arg("record").arg("-g").args(&options.perf_args);
    match target {
        Target::Pids(pids) => {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            perf.arg("-p").arg(list.join(","));
        }
        Target::SystemWide => {
            perf.arg("-a");
        }
        Target::Command(_) => {}
    }
    perf.arg("-o").arg(raw);
    if let Target::Command(command) = target {
        perf.arg("--").args(*command);
    }
    // perf writes its file on SIGINT, and stops the command it runs.
    children::die_with_parent(&mut perf, libc::SIGINT);
    perf
}

/// Waits for perf, sending it SIGINT once `duration` has passed or a signal was received (the
/// signal thread forwards it too; this retries, as a send fails while an attach runs as the
/// JVM's user).
fn wait_for_perf(
    perf: &mut std::process::Child,
    signals: &signals::TempCleanup,
    duration: Option<Duration>,
    pairings: &mut Vec<perfclock::ClockSnapshot>,
) -> io::Result<ExitStatus> {
    let start = Instant::now();
    let mut stopped = false;
    let mut paired = Instant::now();
    loop {
        if let Some(status) = perf.try_wait()? {
            return Ok(status);
        }
        if paired.elapsed() >= PAIRING_INTERVAL {
            paired = Instant::now();
            pairings.extend(perfclock::snapshot().ok());
        }
        let due = duration.is_some_and(|d| start.elapsed() >= d) || signals.received().is_some();
        if due && !stopped {
            stopped = children::kill(perf.id(), libc::SIGINT).is_ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The attaches of `-p`, before recording: an error unless `--allow-unattached`.
fn attach_pids(
    pids: &[u32],
    agent: &Path,
    dumps: &mut Dumps,
    allow_unattached: bool,
) -> Result<(), Failure> {
    let root = dumps.root.clone().unwrap_or_default();
    let mut failed = Vec::new();
    for &pid in pids {
        if dumps.add(&jvms::attach(pid, agent, &root)) {
            failed.push(pid.to_string());
        }
    }
    if failed.is_empty() || allow_unattached {
        return Ok(());
    }
    Err(fail(format!(
        "could not attach JVM(s) {} (see above): nothing recorded; pass --allow-unattached to \
         record them without their JIT code's names",
        failed.join(", ")
    )))
}

fn record(options: &RecordArgs) -> Result<u8, Failure> {
    let target = check_arguments(options)?;
    let output = &options.output;
    // Before anything starts: a device, FIFO, socket, directory or symlink is never replaced.
    check_output_path(output).map_err(|e| fail(e.to_string()))?;
    let agent = agent(options)?;
    let work = WorkDir::create(output).map_err(failed)?;
    let mut dumps = Dumps {
        root: None,
        dirs: Vec::new(),
        attached: Vec::new(),
        agent: agent.clone(),
    };
    let mut env_options = None;
    if let Some(agent) = &agent {
        let root = make_dump_root(output).map_err(failed)?;
        dumps.root = Some(root.clone());
        if let Target::Command(_) = target {
            let dir = make_command_dump_dir(&root).map_err(failed)?;
            let value = java_tool_options(std::env::var_os("JAVA_TOOL_OPTIONS"), agent, &dir);
            dumps.dirs.push(dir.clone());
            env_options = Some(value.map_err(failed)?);
            errln!(
                "{NAME}: JVMs in the command write their jitdumps into {} (keep it: the \
                 output's JIT symbols are read from there)",
                dir.display()
            );
        }
    }
    let signals = signals::TempCleanup::install()
        .map_err(|e| fail(format!("cannot handle SIGINT/SIGTERM/SIGHUP/SIGQUIT: {e}")))?;
    signals.forward_to(0);
    if let (Target::Pids(pids), Some(agent)) = (&target, &agent) {
        attach_pids(pids, agent, &mut dumps, options.allow_unattached)?;
    }
    if let Some(signal) = signals.received() {
        return Err(Failure(
            format!("interrupted (signal {signal}) before recording"),
            u8::try_from(128 + signal).unwrap_or(1),
        ));
    }
    let recorded = run_perf_record(
        options,
        &target,
        &work,
        env_options,
        &signals,
        agent.clone(),
        &mut dumps,
    );
    dumps.release();
    let (status, anchors) = match recorded {
        Ok(recorded) => recorded,
        Err(failure) => {
            drop(work);
            return Err(failure);
        }
    };
    finish(&target, work, status, &anchors, &signals, options)
}

/// Starts `perf record` (and, for `-a`, the watcher that attaches JVMs), waits for it, and
/// stops what it left of the command if it died.
fn run_perf_record(
    options: &RecordArgs,
    target: &Target<'_>,
    work: &WorkDir,
    env_options: Option<OsString>,
    signals: &signals::TempCleanup,
    agent: Option<PathBuf>,
    dumps: &mut Dumps,
) -> Result<(ExitStatus, ClockAnchors), Failure> {
    if let Target::Command(_) = target {
        // If perf dies without stopping the command (SIGKILL), the command becomes ours.
        if let Err(error) = children::become_subreaper() {
            errln!("{NAME}: warning: cannot adopt what perf leaves running: {error}");
        }
    }
    let start = take_snapshot("start");
    let mut perf = perf_record(options, target, &work.raw);
    if let Some(value) = &env_options {
        perf.env("JAVA_TOOL_OPTIONS", value);
    }
    let mut child = perf.spawn().map_err(|error| {
        fail(if error.kind() == io::ErrorKind::NotFound {
            "no `perf` on PATH: install it (Debian: linux-perf; Fedora: perf) or add its \
             directory to PATH"
                .into()
        } else {
            format!("cannot run perf: {error}")
        })
    })?;
    signals.forward_to(child.id());
    errln!(
        "{NAME}: recording to {} (perf record -g)",
        work.raw.display()
    );
    let watcher = match (target, agent, &dumps.root) {
        (Target::SystemWide, Some(agent), Some(root)) => {
            let skip = vec![std::process::id(), child.id()];
            match jvms::Watcher::start(agent, root.clone(), skip, report) {
                Ok(watcher) => Some(watcher),
                Err(error) => {
                    errln!("{NAME}: warning: cannot watch for JVMs: {error}");
                    None
                }
            }
        }
        _ => None,
    };
    let mut pairings: Vec<perfclock::ClockSnapshot> = start.iter().copied().collect();
    let waited = wait_for_perf(&mut child, signals, options.duration, &mut pairings);
    if let Some(watcher) = watcher {
        let outcomes = watcher.finish();
        list_unattached(&outcomes);
        for outcome in &outcomes {
            dumps.keep(outcome);
        }
    }
    let status = waited.map_err(|e| fail(format!("waiting for perf: {e}")))?;
    if let (Target::Command(_), Some(signal)) = (target, status.signal()) {
        let stopped = children::stop_adopted(Duration::from_secs(2));
        errln!(
            "{NAME}: perf record was killed by signal {signal}; stopped the {} process(es) of \
             the command it left running",
            stopped.len()
        );
    }
    let end = take_snapshot("end");
    pairings.extend(end);
    let anchors = ClockAnchors {
        start,
        end,
        pairings,
    };
    Ok((status, anchors))
}

/// Says what happened to one process `-p` or `-a` looked at; whether it could not be attached.
fn report(outcome: &jvms::Outcome) -> bool {
    match outcome {
        jvms::Outcome::Attached { pid, dir } => {
            errln!(
                "{NAME}: attached JVM {pid}: its jitdump goes to {}",
                dir.display()
            );
            false
        }
        jvms::Outcome::NotJvm { pid, name } => {
            errln!("{NAME}: {pid} ({name}) is not a HotSpot JVM: recorded without an agent");
            false
        }
        jvms::Outcome::Failed { pid, error } => {
            errln!("{NAME}: cannot attach JVM {pid}: {}", chain(error));
            true
        }
    }
}

/// `-a`'s list, at the end, of the JVMs recorded without their JIT code's names.
fn list_unattached(outcomes: &[jvms::Outcome]) {
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            jvms::Outcome::Failed { pid, error } => Some(format!("  {pid}: {}", chain(error))),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        errln!(
            "{NAME}: {} JVM(s) could not be attached; their JIT code is not named:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
}

/// After perf record: the exit code, the messages, and OUT.
fn finish(
    target: &Target<'_>,
    work: WorkDir,
    status: ExitStatus,
    anchors: &ClockAnchors,
    signals: &signals::TempCleanup,
    options: &RecordArgs,
) -> Result<u8, Failure> {
    let output = &options.output;
    if !recording_complete(&work.raw) {
        return Err(fail(match status.signal() {
            Some(signal) => format!(
                "perf record was killed by signal {signal} before it finished its file: nothing \
                 recorded"
            ),
            None => format!(
                "perf record ended with {status} and left no complete recording (see perf's \
                 message above: a missing event, or perf_event_open refused, which \
                 /proc/sys/kernel/perf_event_paranoid or CAP_PERFMON decides; or the command \
                 could not start)"
            ),
        }));
    }
    let interrupted = signals.received();
    let code = match (target, interrupted) {
        (_, Some(signal)) if signal != libc::SIGINT || matches!(target, Target::Command(_)) => {
            errln!("{NAME}: interrupted (signal {signal}); perf stopped recording");
            u8::try_from(128 + signal).unwrap_or(1)
        }
        (Target::Command(_), None) => {
            if !status.success() {
                errln!("{NAME}: the command failed ({status}); post-processing what was recorded");
            }
            // perf record exits with the workload's status (and dies by the workload's signal).
            status_code(status)
        }
        _ => 0,
    };
    anchors.report();
    if let Err(error) = post_process(&work, output, anchors, options.all_jit_code, signals) {
        let raw = work.raw.display().to_string();
        work.keep_raw();
        return Err(fail(format!(
            "{}; the recording is kept in {raw}",
            chain(&error)
        )));
    }
    drop(work);
    let out = output.display();
    errln!(
        "{NAME}: wrote {out}; next:\n  perf report -i {out}\n  perf script -i {out}\n  samply \
         import {out}"
    );
    Ok(code)
}

/// Renames `from` over `output` (checked again first), with signals held off.
fn commit(from: &Path, output: &Path, signals: &signals::TempCleanup) -> Result<(), RecordError> {
    signals.commit(from, || {
        check_output_path(output).map_err(RecordError::Output)?;
        fs::rename(from, output).map_err(|source| RecordError::Rename {
            output: output.to_owned(),
            source,
        })
    })
}

/// The raw recording to `output`: TIME_CONV where missing, then `perf inject --jit` when a
/// jitdump was mapped. `output` appears only complete; a signal meanwhile removes the
/// intermediate files, keeps the raw recording and says so.
fn post_process(
    work: &WorkDir,
    output: &Path,
    anchors: &ClockAnchors,
    all_jit_code: bool,
    signals: &signals::TempCleanup,
) -> Result<(), RecordError> {
    let message = format!(
        "{NAME}: interrupted (signal {{signal}}) while writing {}: it was not written; the \
         recording is kept in {}",
        output.display(),
        work.raw.display()
    );
    signals.fatal(None, Some(message.clone()));
    let converted = work.path("conv.data");
    signals.register(&converted);
    match add_time_conv(
        &work.raw,
        &converted,
        output,
        anchors,
        all_jit_code,
        signals,
    )? {
        TimeConvStep::ClockDataOnly => {
            errln!("{NAME}: no jitdump was mapped: no JIT code to inject");
            commit(&converted, output, signals)?;
        }
        TimeConvStep::NoJitdump => {
            errln!("{NAME}: no jitdump was mapped: no JIT code to inject");
            commit(&work.raw, output, signals)?;
        }
        TimeConvStep::Written(what) => {
            errln!("{NAME}: {what}; perf inject --jit");
            let injected = work.path("jit.data");
            signals.register(&injected);
            let mut inject = Command::new("perf");
            inject
                .args(["inject", "--jit", "-i"])
                .arg(&converted)
                .arg("-o")
                .arg(&injected);
            children::die_with_parent(&mut inject, libc::SIGTERM);
            let mut child = inject.spawn().map_err(RecordError::RunInject)?;
            signals.fatal(Some(child.id()), Some(message.clone()));
            let result = child.wait();
            signals.fatal(None, Some(message));
            let result = result.map_err(RecordError::WaitInject)?;
            if !result.success() {
                return Err(RecordError::InjectFailed(result));
            }
            commit(&injected, output, signals)?;
        }
    }
    // OUT is complete: a signal now only ends the process.
    signals.fatal(None, None);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    include!("record_spellings.rs");

    #[test]
    fn refuses_every_spelling_of_clockid_and_compression() {
        // System-wide: not run against the real perf, which needs privileges for it.
        let system_wide: &[&[&str]] = &[&["-ak1"], &["-az1"]];
        for spelling in REFUSED_SPELLINGS.iter().chain(system_wide) {
            assert!(
                refused_option(&args(spelling)).is_some(),
                "{spelling:?} not refused"
            );
        }
        // perf_args never holds `--` (the command line's first one ends them), but perf would
        // read what follows one as the command.
        let after_the_end: &[&[&str]] = &[&["--", "-z", "--clock=1"], &["-F", "99", "--", "-k1"]];
        for fine in HARMLESS_SPELLINGS.iter().chain(after_the_end) {
            assert_eq!(refused_option(&args(fine)), None, "{fine:?} refused");
        }
    }

    #[test]
    fn the_refusal_names_the_argument_and_what_perf_reads_it_as() {
        let (arg, why) = refused_option(&args(&["-F", "99", "--clock=1"])).unwrap();
        assert_eq!(arg, "--clock=1 (perf's -k/--clockid)");
        assert!(why.contains("another clock"), "{why}");
        let (arg, why) = refused_option(&args(&["-gz"])).unwrap();
        assert_eq!(arg, "-gz (perf's -z/--compression-level)");
        assert!(why.contains("compressed records"), "{why}");
        // After one of perfclock's own options: still named.
        let (arg, _) = refused_option(&args(&["-o", "x", "--comp"])).unwrap();
        assert_eq!(arg, "--comp (perf's -z/--compression-level)");
    }

    /// perf's parse_long_opt, case by case, over perf 6.1's option names.
    #[test]
    fn long_options_resolve_as_perfs_parser_resolves_them() {
        let index = |long: &str| {
            PERF_RECORD_OPTIONS
                .iter()
                .position(|option| option.long == Some(long))
                .unwrap()
        };
        let resolved = |long: &str, unset: bool, inline_value: bool| LongOption::Resolved {
            index: index(long),
            unset,
            inline_value,
        };
        for (arg, expected) in [
            ("clockid", resolved("clockid", false, false)),
            ("clockid=1", resolved("clockid", false, true)),
            ("clo", resolved("clockid", false, false)),
            ("clo=1", resolved("clockid", false, true)),
            ("com", resolved("compression-level", false, false)),
            ("no-clockid", resolved("clockid", true, false)),
            ("no-clo", resolved("clockid", true, false)),
            ("no-comp", resolved("compression-level", true, false)),
            // A name given whole wins over the longer names it is a prefix of.
            ("data", resolved("data", false, false)),
            ("switch-output", resolved("switch-output", false, false)),
            // `no-buildid` negated without `no-no-`, whole or abbreviated.
            ("buildid", resolved("no-buildid", true, false)),
            ("no-no-buildid", resolved("no-buildid", true, false)),
            ("inherit", resolved("no-inherit", true, false)),
            ("inh", resolved("no-inherit", true, false)),
            ("clockidx", LongOption::Unknown),
            ("no-clo=1", LongOption::Unknown),
        ] {
            assert_eq!(parse_long(PERF_RECORD_OPTIONS, arg), expected, "--{arg}");
        }
        for arg in ["c", "cl", "cl=1", "co", "all", "all-c", "no", "switch-o"] {
            assert!(
                matches!(
                    parse_long(PERF_RECORD_OPTIONS, arg),
                    LongOption::Ambiguous(_)
                ),
                "--{arg}: {:?}",
                parse_long(PERF_RECORD_OPTIONS, arg)
            );
        }
    }

    /// Which prefixes are refused depends on the option list: without perf 6.1's
    /// `--clang-path` and `--clang-opt`, perf would read `--cl` as `--clockid`; and a prefix
    /// shared only by refused options is refused though perf reports it as ambiguous.
    #[test]
    fn prefixes_are_refused_as_the_option_list_resolves_them() {
        let options = [
            PerfOption::new(Some('k'), "clockid", Value::Required),
            PerfOption::new(Some('z'), "compression-level", Value::Optional),
            PerfOption::new(Some('F'), "freq", Value::Required),
        ];
        let harmful = |why: &Refusal| matches!(why, Refusal::Harmful(_));
        let refused = |list: &[&str]| {
            refused_setting(&options, &args(list), harmful)
                .map(|(arg, option, _)| (arg, option.long.unwrap_or_default()))
        };
        assert_eq!(refused(&["--cl=1"]), Some(("--cl=1".to_owned(), "clockid")));
        assert!(matches!(
            parse_long(&options, "c"),
            LongOption::Ambiguous(_)
        ));
        assert_eq!(refused(&["--c"]), Some(("--c".to_owned(), "clockid")));
        assert_eq!(refused(&["--no-c"]), None);
        assert_eq!(refused(&["--f", "-k"]), None);
        // In perf 6.1's list `c` also starts `--count`, `--cpu`, ...: perf's ambiguity, not a
        // refusal.
        assert_eq!(refused_option(&args(&["--c"])), None);
    }

    fn check(perf_args: &[&str]) -> Result<(), String> {
        let options = RecordArgs {
            output: "perf.data".into(),
            agent: None,
            no_java_agent: true,
            pids: Vec::new(),
            system_wide: false,
            duration: None,
            allow_unattached: false,
            all_jit_code: false,
            perf_args: args(perf_args),
            command: args(&["true"]),
        };
        check_arguments(&options)
            .map(|_| ())
            .map_err(|Failure(message, code)| {
                assert_eq!(code, 2, "{message}");
                message
            })
    }

    #[test]
    fn refuses_perfclocks_own_options_in_every_spelling_perf_reads() {
        for spelling in [
            &["-o", "x"][..],
            &["-ozfile"],
            &["--output=x"],
            &["--out", "x"],
            &["--outp=x"],
            &["-F", "99", "-go", "x"],
            &["-p", "1"],
            &["-p1"],
            &["--pi=1"],
            &["-gp1"],
            &["-a"],
            &["-ga"],
            &["--all-cpus"],
            &["--all-cp"],
            &["--agent=x"],
            &["--agent", "x"],
            &["--no-java-agent"],
            &["--duration", "1"],
            &["--allow-unattached"],
        ] {
            let message = check(spelling).expect_err(&format!("{spelling:?} not refused"));
            assert!(message.contains("after a perf option"), "{message}");
        }
        for fine in [
            &["-F", "99"][..],
            &["-e", "-o"],
            &["--all-c"],
            &["--no-output"],
            &["--clang-path=-a"],
        ] {
            assert_eq!(check(fine), Ok(()), "{fine:?}");
        }
        // A refused perf option is named before a misplaced own option.
        let message = check(&["-o", "x", "-k1"]).unwrap_err();
        assert!(
            message.starts_with("refusing perf option -k1 (perf's -k/--clockid): "),
            "{message}"
        );
    }

    #[test]
    fn appends_the_agent_to_the_users_java_tool_options() {
        let value = java_tool_options(
            Some("-Xmx1g".into()),
            Path::new("/a/libperfclock_agent.so"),
            Path::new("/d/perf.data.jit-x"),
        )
        .unwrap();
        assert_eq!(
            value,
            "-Xmx1g -agentpath:/a/libperfclock_agent.so=jitdump=/d/perf.data.jit-x"
        );
        let error =
            java_tool_options(None, Path::new("/a b/agent.so"), Path::new("/d")).unwrap_err();
        assert!(error.to_string().contains("--no-java-agent"), "{error}");
    }
}
