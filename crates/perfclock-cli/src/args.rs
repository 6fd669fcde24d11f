//! `perfclock`'s command line: the clap definitions the binary parses and the `gen-docs`
//! example turns into man pages and completions. A library target of its own, so that the
//! example builds them without the command's code.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Kernel stamps `doctor` checks per record kind when the command line names no number.
pub const DEFAULT_RECORDS_PER_KIND: usize = 20_000;

/// The clock Linux perf stamps into its samples, from user space.
#[derive(Debug, Parser)]
#[command(name = "perfclock", version = env!("PERFCLOCK_VERSION"), about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands; each field is an option or argument of its own.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Open the perf clock, say which mode it is in and why, and check it against timestamps
    /// the kernel stamps. Exits non-zero if no clock can be had or a stamp falls outside the
    /// clock's bound.
    Doctor {
        /// Kernel stamps to check per record kind (spread over the CPUs in turns).
        #[arg(default_value_t = DEFAULT_RECORDS_PER_KIND)]
        records_per_kind: usize,
    },
    /// Copy a perf.data, adding the PERF_RECORD_TIME_CONV that `perf inject --jit` needs for
    /// jitdumps stamped by perfclock, taken from the `jit-<pid>.dump.timeconv` records next to
    /// the dumps the recording mapped. IN is never modified; OUT appears only complete.
    InjectTimeConv {
        /// The perf.data written by `perf record`.
        #[arg(value_name = "IN")]
        input: PathBuf,
        /// Where to write the perf.data with the record (replaced atomically if it exists).
        #[arg(short, long, value_name = "OUT")]
        output: PathBuf,
        /// Look for `jit-<pid>.dump.timeconv` in DIR instead of next to the dump the recording
        /// names (a dump moved since); may be repeated, searched in order.
        #[arg(long = "dump-dir", value_name = "DIR")]
        dump_dirs: Vec<PathBuf>,
        /// Also add HEADER_CLOCK_DATA, so that `perf script -F+tod` prints wall-clock time,
        /// from a perf-clock/CLOCK_REALTIME snapshot taken now. Only for a recording made on
        /// this boot; refused if CLOCK_REALTIME was stepped back since (see docs/cli.md for how
        /// far off it can be).
        #[arg(long)]
        clock_data_now: bool,
        /// Give perf inject --jit every JIT code load of the dumps, not only those whose code a
        /// sample or a call chain touched (the output then holds an image per compiled
        /// function: many thousands for a JVM).
        #[arg(long)]
        all_jit_code: bool,
    },
    /// Load perfclock's JVMTI agent into a running HotSpot JVM (HotSpot's dynamic attach, as
    /// `jcmd PID JVMTI.agent_load` does; no JDK needed). As root it acts as the JVM's user; a
    /// JVM in a container is reached through /proc/PID. Exits non-zero, naming the cause, if the
    /// agent was not loaded.
    Attach {
        /// The JVM's process id (as seen here, also for a JVM in a container).
        pid: u32,
        /// The agent's options, passed to its Agent_OnAttach as they are (none if omitted).
        #[arg(value_name = "AGENT-OPTIONS")]
        options: Option<OsString>,
        /// The agent library [default: libperfclock_agent.so next to the perfclock executable, or in ../lib/perfclock/].
        #[arg(long, value_name = "PATH")]
        agent: Option<PathBuf>,
        /// Give up after this many seconds (waiting for the JVM's listener and its answer).
        #[arg(long, value_name = "SECONDS", default_value_t = perfclock_attach::DEFAULT_TIMEOUT.as_secs_f64(),
              value_parser = parse_seconds)]
        timeout: f64,
    },
    /// Print the absolute path of the JVMTI agent (libperfclock_agent.so) built with this
    /// perfclock, which sits next to it; exits non-zero, naming the fix, when it is absent.
    AgentPath,
    /// Calibrate once for the whole machine and publish the conversion in a shared page that
    /// every process's perfclock reads instead of calibrating on its own (foreground, logs to
    /// stderr, SIGINT/SIGTERM stops). In kernel mode it says so and publishes nothing.
    Serve {
        /// The page (default /run/perfclock/clock as root, $XDG_RUNTIME_DIR/perfclock/clock
        /// otherwise); its directory must be writable by its owner alone.
        #[arg(long, value_name = "P")]
        path: Option<PathBuf>,
        /// Publish the paravirt offset of this KVM guest (a constant for the boot, beside the
        /// page: /run/perfclock/pvclock-offset as root) and exit: for a oneshot unit at boot.
        #[arg(long)]
        once: bool,
    },
    /// What a recording turns into: an interactive flame graph (one HTML page or SVG that opens
    /// offline in any browser: click to zoom, search, a tooltip with the share) and a gzipped pprof profile
    /// (for `go tool pprof` and the fleet's profilers), from the samples `perf script`
    /// symbolizes (JIT names after `perf inject --jit`; `perfclock record`'s output has them).
    /// With `--diff BASE`, what changed since BASE; with the program's marker spans, what ran
    /// during them.
    Report(ReportArgs),
    /// Profile CMD with `perf record -g` (perf's default clock), every JVM in it writing a
    /// jitdump through perfclock's agent, then add the TIME_CONV record and run `perf inject
    /// --jit`: one OUT for `perf report`, `perf script` and `samply import`. SIGINT/SIGTERM stop
    /// perf and the command as they stop `perf record`. Exits with CMD's status when it failed
    /// (128 + signal when a signal ended it or perfclock), 1 when recording or post-processing
    /// failed (the raw recording OUT.raw is then kept), else 0.
    #[command(override_usage = "perfclock record [OPTIONS] [PERF-OPTIONS]... -- CMD [ARGS]...")]
    Record(RecordArgs),
}

/// `perfclock report`'s options and arguments: the one place a flag of `report` is declared,
/// passed whole to the command's code.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The recording.
    #[arg(value_name = "IN", default_value = "perf.data")]
    pub input: PathBuf,
    /// Write the flame graph here: an HTML page where the name ends in `.html` or `.htm`,
    /// else an SVG.
    #[arg(short = 'o', long = "output", value_name = "FLAME.html")]
    pub flamegraph: Option<PathBuf>,
    /// Write the pprof profile (gzipped profile.proto) here.
    #[arg(long, value_name = "PROFILE.pb.gz")]
    pub pprof: Option<PathBuf>,
    /// Split the flame graph by process (`comm-pid` below each stack), by thread, or by the
    /// marker span each sample lies in.
    #[arg(long, value_enum)]
    pub split: Option<SplitBy>,
    /// Keep only the samples that lie in a marker span named NAME (perfclock's marker files
    /// the recording mapped, `marker-<pid>.txt`; repeat for several names).
    #[arg(long, value_name = "NAME")]
    pub during: Vec<String>,
    /// Draw an icicle graph: the root at the top, callees below their callers.
    #[arg(long)]
    pub icicle: bool,
    /// Compare IN with the recording BASE: the flame graph is IN's, each function coloured by
    /// its change in self samples since BASE (red: more, blue: fewer), and `--pprof` and
    /// `--pprof-base` write the pair `go tool pprof -diff_base` reads. JIT names are made
    /// comparable across the two processes (no pids, no addresses).
    #[arg(long, value_name = "BASE")]
    pub diff: Option<PathBuf>,
    /// With `--diff`: write BASE's pprof profile here (IN's goes to `--pprof`).
    #[arg(long, value_name = "BASE.pb.gz", requires = "diff")]
    pub pprof_base: Option<PathBuf>,
    /// With `--diff`: scale BASE's counts to IN's total before comparing (recordings of
    /// different lengths or loads); by default counts compare as they are.
    #[arg(long, requires = "diff")]
    pub normalize: bool,
}

/// `perfclock record`'s options and arguments: the one place a flag of `record` is declared,
/// passed whole to the command's code.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The recording to write (replaced atomically if it exists).
    #[arg(short, long, value_name = "OUT", default_value = "perf.data")]
    pub output: PathBuf,
    /// The JVMTI agent [default: libperfclock_agent.so next to the perfclock executable, or in ../lib/perfclock/].
    #[arg(long, value_name = "PATH")]
    pub agent: Option<PathBuf>,
    /// Leave JAVA_TOOL_OPTIONS alone (and, with -p/-a, attach nothing): no agent, no
    /// jitdump from JVMs.
    #[arg(long)]
    pub no_java_agent: bool,
    /// Leave NODE_OPTIONS, PYTHON_PERF_JIT_SUPPORT and DOTNET_PerfMapEnabled alone: the command's
    /// Node, CPython 3.13+ and .NET write no jitdump unless it asks them to.
    #[arg(long)]
    pub no_runtime_flags: bool,
    /// Record these running processes instead of a command (`perf record -p`), attaching
    /// the agent to each HotSpot JVM among them first; until SIGINT, or --duration.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID[,PID...]",
        value_delimiter = ','
    )]
    pub pids: Vec<u32>,
    /// Record the whole machine (`perf record -a`), attaching the agent to every HotSpot JVM
    /// running and to each that starts during the recording; until SIGINT, or --duration.
    #[arg(short = 'a', long = "all-cpus")]
    pub system_wide: bool,
    /// Stop recording after this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = parse_timeout)]
    pub duration: Option<Duration>,
    /// With -p: a JVM that cannot be attached is a warning (it is recorded without its JIT
    /// code's names) instead of an error before recording.
    #[arg(long)]
    pub allow_unattached: bool,
    /// Give perf inject --jit every JIT code load of the dumps, not only those whose code a
    /// sample or a call chain touched (the output then holds an image per compiled
    /// function: many thousands for a JVM).
    #[arg(long)]
    pub all_jit_code: bool,
    /// Options for `perf record` (after its `-g`), e.g. `-F 999 --call-graph dwarf`;
    /// `-k`/`--clockid` and `-z`/`--compression-level` are refused.
    #[arg(
        value_name = "PERF-OPTIONS",
        allow_hyphen_values = true,
        value_terminator = "--"
    )]
    pub perf_args: Vec<OsString>,
    /// The command to profile, after `--`.
    #[arg(
        value_name = "CMD",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    parse_timeout(text).map(|timeout| timeout.as_secs_f64())
}

/// `--timeout`'s and `--duration`'s value: seconds, positive and finite.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("not a number of seconds: {text}"))?;
    match Duration::try_from_secs_f64(seconds) {
        Ok(timeout) if !timeout.is_zero() => Ok(timeout),
        _ => Err(format!("the timeout must be positive seconds, not {text}")),
    }
}

/// What `perfclock report --split` puts below the flame graph's stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SplitBy {
    /// A root frame per process, `comm-pid`.
    Process,
    /// A root frame per thread, `comm-pid/tid`.
    Thread,
    /// A root frame per marker span name (where spans overlap, the one that started last).
    Marker,
}

/// The spellings of perf options that `perfclock record` refuses among its PERF-OPTIONS
/// ([`RecordArgs::perf_args`](crate::RecordArgs::perf_args)), and of some it does not: the
/// lists the command's refusal is tested against and `tests/real_perf.rs` has the real perf
/// apply, so both test the same list.
pub mod perf_spellings {
    /// Spellings perf 6.1's `perf record` reads as setting `-k`/`--clockid` or
    /// `-z`/`--compression-level` (long names, unambiguous prefixes, `=` or a separate value,
    /// short options alone or in a bundle, after options that take their value): each refused.
    /// `tests/real_perf.rs` has the real perf apply every one of them (none is system-wide: `-a`
    /// needs privileges there).
    pub const REFUSED_SPELLINGS: &[&[&str]] = &[
        &["-k", "1"],
        &["-k1"],
        &["-kmono"],
        &["--clockid", "1"],
        &["--clockid=monotonic"],
        &["--clocki=1"],
        &["--clock=1"],
        &["--clock", "1"],
        &["--cloc=1"],
        &["--clo=1"],
        &["-F", "99", "-gk", "1"],
        &["-gk1"],
        &["-gTk", "1"],
        &["-vvk1"],
        &["--call-graph", "dwarf", "-k1"],
        &["-z"],
        &["-z3"],
        &["-gz"],
        &["-zg"],
        &["-gTz"],
        &["--compression-level"],
        &["--compression-level=1"],
        &["--compression=1"],
        &["--comp=1"],
        &["--comp"],
        &["--com"],
        &["-e", "cpu-clock", "-z"],
        &["-F999", "--comp=3"],
    ];

    /// Spellings that set neither option as perf 6.1 reads them: a `k` or `z` that is another
    /// option's value, negations (which turn the option off: its default), prefixes perf
    /// reports as ambiguous, and names that merely start like a refused one.
    pub const HARMLESS_SPELLINGS: &[&[&str]] = &[
        &["-F", "999"],
        &["-F999"],
        &["-g"],
        &["--call-graph", "dwarf"],
        &["--call-graph=dwarf"],
        &["-e", "cycles"],
        &["-eblock:block_rq_issue"],
        &["-ozfile"],
        &["-Cz"],
        &["-Sz"],
        &["-Ik"],
        &["-D", "-1"],
        &["--clang-opt", "-z"],
        &["--clang-path=/usr/bin/clang"],
        &["--code-page-size"],
        &["--count=1000"],
        &["--cl=1"],
        &["--co=1"],
        &["--c", "1"],
        &["--no-clockid"],
        &["--no-clock"],
        &["--no-clo"],
        &["--no-compression-level"],
        &["--no-comp"],
        &["--clockidx=1"],
        &["--compression-levels=1"],
    ];
}
