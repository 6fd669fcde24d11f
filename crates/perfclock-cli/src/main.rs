//! The `perfclock` command: `doctor`, `inject-time-conv`, `attach`, `agent-path`, `record`, `serve`.
//!
//! No unsafe code: the system calls are `perfclock_event::sys`'s, the signal handlers
//! signal-hook's.
#![forbid(unsafe_code)]

pub(crate) mod agent;
pub(crate) mod agent_path;
pub(crate) mod attach;
pub(crate) mod children;
pub(crate) mod clock_data;
pub(crate) mod doctor;
pub(crate) mod error;
pub(crate) mod inject;
pub(crate) mod jvms;
pub(crate) mod output;
pub(crate) mod record;
pub(crate) mod serve;
pub(crate) mod signals;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::output::errln;

/// The clock Linux perf stamps into its samples, from user space.
#[derive(Debug, Parser)]
#[command(name = "perfclock", version = env!("PERFCLOCK_VERSION"), about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Open the perf clock, say which mode it is in and why, and check it against timestamps
    /// the kernel stamps. Exits non-zero if no clock can be had or a stamp falls outside the
    /// clock's bound.
    Doctor {
        /// Kernel stamps to check per record kind and CPU turn.
        #[arg(default_value_t = doctor::DEFAULT_RECORDS_PER_KIND)]
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
        /// The agent library [default: libperfclock_agent.so next to the perfclock executable].
        #[arg(long, value_name = "PATH")]
        agent: Option<PathBuf>,
        /// Give up after this many seconds (waiting for the JVM's listener and its answer).
        #[arg(long, value_name = "SECONDS", default_value_t = attach::DEFAULT_TIMEOUT_SECS,
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
    /// Profile CMD with `perf record -g` (perf's default clock), every JVM in it writing a
    /// jitdump through perfclock's agent, then add the TIME_CONV record and run `perf inject
    /// --jit`: one OUT for `perf report`, `perf script` and `samply import`. SIGINT/SIGTERM stop
    /// perf and the command as they stop `perf record`. Exits with CMD's status when it failed
    /// (128 + signal when a signal ended it or perfclock), 1 when recording or post-processing
    /// failed (the raw recording OUT.raw is then kept), else 0.
    #[command(override_usage = "perfclock record [OPTIONS] [PERF-OPTIONS]... -- CMD [ARGS]...")]
    Record {
        /// The recording to write (replaced atomically if it exists).
        #[arg(short, long, value_name = "OUT", default_value = "perf.data")]
        output: PathBuf,
        /// The JVMTI agent [default: libperfclock_agent.so next to the perfclock executable].
        #[arg(long, value_name = "PATH")]
        agent: Option<PathBuf>,
        /// Leave JAVA_TOOL_OPTIONS alone (and, with -p/-a, attach nothing): no agent, no
        /// jitdump from JVMs.
        #[arg(long)]
        no_java_agent: bool,
        /// Record these running processes instead of a command (`perf record -p`), attaching
        /// the agent to each HotSpot JVM among them first; until SIGINT, or --duration.
        #[arg(
            short = 'p',
            long = "pid",
            value_name = "PID[,PID...]",
            value_delimiter = ','
        )]
        pids: Vec<u32>,
        /// Record the whole machine (`perf record -a`), attaching the agent to every HotSpot JVM
        /// running and to each that starts during the recording; until SIGINT, or --duration.
        #[arg(short = 'a', long = "all-cpus")]
        system_wide: bool,
        /// Stop recording after this many seconds.
        #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
        duration: Option<f64>,
        /// With -p: a JVM that cannot be attached is a warning (it is recorded without its JIT
        /// code's names) instead of an error before recording.
        #[arg(long)]
        allow_unattached: bool,
        /// Options for `perf record` (after its `-g`), e.g. `-F 999 --call-graph dwarf`;
        /// `-k`/`--clockid` and `-z`/`--compression-level` are refused.
        #[arg(
            value_name = "PERF-OPTIONS",
            allow_hyphen_values = true,
            value_terminator = "--"
        )]
        perf_args: Vec<OsString>,
        /// The command to profile, after `--`.
        #[arg(
            value_name = "CMD",
            trailing_var_arg = true,
            allow_hyphen_values = true
        )]
        command: Vec<OsString>,
    },
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    attach::parse_timeout(text).map(|timeout| timeout.as_secs_f64())
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Doctor { records_per_kind } => doctor::run(records_per_kind),
        Command::Serve { path, once } => serve::run(path, once),
        Command::InjectTimeConv {
            input,
            output,
            dump_dirs,
            clock_data_now,
        } => inject_time_conv(inject::InjectOptions {
            input,
            output,
            dump_dirs,
            clock_data: if clock_data_now {
                inject::ClockDataSource::Now
            } else {
                inject::ClockDataSource::None
            },
        }),
        Command::Attach {
            pid,
            options,
            agent,
            timeout,
        } => attach::run(
            pid,
            options.unwrap_or_default(),
            agent,
            Duration::from_secs_f64(timeout),
        ),
        Command::Record {
            output,
            agent,
            no_java_agent,
            pids,
            system_wide,
            duration,
            allow_unattached,
            perf_args,
            command,
        } => record::run(record::RecordOptions {
            output,
            agent,
            no_java_agent,
            pids,
            system_wide,
            duration: duration.map(Duration::from_secs_f64),
            allow_unattached,
            perf_args,
            command,
        }),
        Command::AgentPath => match agent_path::find() {
            Ok(path) => {
                output::outln!("{}", path.display());
                ExitCode::SUCCESS
            }
            Err(message) => {
                errln!("perfclock agent-path: error: {message}");
                ExitCode::FAILURE
            }
        },
    }
}

fn inject_time_conv(options: inject::InjectOptions) -> ExitCode {
    const NAME: &str = "perfclock inject-time-conv";
    let cleanup = match signals::TempCleanup::install() {
        Ok(cleanup) => cleanup,
        Err(error) => {
            errln!("{NAME}: error: cannot install signal handlers: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = inject::run(&options, &cleanup);
    if let Ok((_, Some(clock_data))) = &result {
        errln!(
            "{NAME}: added HEADER_CLOCK_DATA: wall clock {} ns at perf clock {} ns (perf script \
             -F+tod prints wall-clock time)",
            clock_data.wall_clock_ns,
            clock_data.clockid_time_ns
        );
    }
    match result.map(|(outcome, _)| outcome) {
        Ok(inject::Outcome::ClockDataOnly) => {
            errln!(
                "{NAME}: {} maps no jitdump and needs no PERF_RECORD_TIME_CONV; wrote {} with \
                 the clock data only",
                options.input.display(),
                options.output.display()
            );
            ExitCode::SUCCESS
        }
        Ok(inject::Outcome::Copied) => {
            errln!(
                "{NAME}: {} holds a PERF_RECORD_TIME_CONV already (perf record writes one where \
                 the kernel publishes the conversion; or IN is inject-time-conv's output); copied \
                 it unchanged to {}",
                options.input.display(),
                options.output.display()
            );
            ExitCode::SUCCESS
        }
        Ok(inject::Outcome::Inserted {
            sidecar,
            record,
            sidecars,
        }) => {
            let conversion = record.conversion();
            errln!(
                "{NAME}: wrote {} with PERF_RECORD_TIME_CONV from {} ({} mode, error bound {} \
                 ns; time_mult {}, time_shift {}, time_zero {}; {sidecars} record(s) agreed)",
                options.output.display(),
                sidecar.display(),
                match record.mode() {
                    perfclock_jitdump::timeconv::TimeConvMode::Kernel => "kernel",
                    perfclock_jitdump::timeconv::TimeConvMode::Calibrated => "calibrated",
                },
                record.error_bound_ns(),
                conversion.mult(),
                conversion.shift(),
                conversion.zero()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            errln!("{NAME}: error: {}", output::chain(&error));
            ExitCode::FAILURE
        }
    }
}
