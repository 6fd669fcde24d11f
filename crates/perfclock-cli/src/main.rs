//! The `perfclock` command: `doctor`, `inject-time-conv`, `attach`, `agent-path`, `record`, `serve`.
//!
//! No unsafe code: the system calls are `perfclock_os`'s, the signal handlers
//! signal-hook's.
#![forbid(unsafe_code)]

pub(crate) mod agent_path;
pub(crate) mod attach;
pub(crate) mod children;
pub(crate) mod doctor;
pub(crate) mod error;
pub(crate) mod output;
pub(crate) mod record;
pub(crate) mod report;
pub(crate) mod serve;
pub(crate) mod signals;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use perfclock_cli::{Cli, Command};

use perfclock_core::untrusted::Untrusted;

use crate::output::errln;

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Doctor { records_per_kind } => doctor::run(records_per_kind),
        Command::Serve { path, once } => serve::run(path, once),
        Command::InjectTimeConv {
            input,
            output,
            dump_dirs,
            clock_data_now,
            all_jit_code,
        } => inject_time_conv({
            let mut options = perfclock_inject::InjectOptions::new(input, output);
            options.dump_dirs = dump_dirs;
            if clock_data_now {
                options.clock_data = perfclock_inject::ClockDataSource::Now;
            }
            options.all_jit_code = all_jit_code;
            options
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
        Command::Record(options) => record::run(options),
        Command::Report(args) => report::run(&args),
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

fn inject_time_conv(options: perfclock_inject::InjectOptions) -> ExitCode {
    const NAME: &str = "perfclock inject-time-conv";
    let cleanup = match signals::TempCleanup::install() {
        Ok(cleanup) => cleanup,
        Err(error) => {
            errln!("{NAME}: error: cannot install signal handlers: {error}");
            return ExitCode::FAILURE;
        }
    };
    let injected = match perfclock_inject::inject(&options, &cleanup) {
        Ok(injected) => injected,
        Err(error) => {
            errln!("{NAME}: error: {}", output::chain(&error));
            return ExitCode::FAILURE;
        }
    };
    if let Some(clock_data) = &injected.clock_data {
        errln!(
            "{NAME}: added HEADER_CLOCK_DATA: wall clock {} ns at perf clock {} ns (perf script \
             -F+tod prints wall-clock time)",
            clock_data.wall_clock_ns,
            clock_data.clockid_time_ns
        );
    }
    let outcome = &injected.outcome;
    errln!("{NAME}: {}", outcome.time_conv);
    for line in outcome.lines() {
        errln!("{NAME}: {line}");
    }
    let out = Untrusted(options.output.as_os_str().as_encoded_bytes());
    let nothing_added = injected.clock_data.is_none()
        && matches!(
            outcome.time_conv,
            perfclock_inject::time_conv::TimeConvSource::NotNeeded
                | perfclock_inject::time_conv::TimeConvSource::InInput
        );
    if outcome.maps_jitdumps() {
        errln!("{NAME}: wrote {out}");
    } else if nothing_added {
        errln!("{NAME}: wrote {out}, a copy of IN");
    } else {
        errln!("{NAME}: wrote {out} with the clock data only");
    }
    if let Some(copies) = injected.keep_copies(&cleanup) {
        errln!(
            "{NAME}: the jitdumps' copies are in {} (private): perf inject --jit -i {out} reads \
             them and writes its images there",
            Untrusted(copies.as_os_str().as_encoded_bytes())
        );
    }
    ExitCode::SUCCESS
}
