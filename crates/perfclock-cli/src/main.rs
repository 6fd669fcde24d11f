//! The `perfclock` command: `doctor`, `inject-time-conv`, `attach`, `agent-path`, `record`, `serve`.
//!
//! No unsafe code: the system calls are `perfclock_os`'s, the signal handlers
//! signal-hook's.
#![forbid(unsafe_code)]

pub(crate) mod agent;
pub(crate) mod agent_path;
pub(crate) mod attach;
pub(crate) mod children;
pub(crate) mod clock_data;
pub(crate) mod doctor;
pub(crate) mod error;
pub(crate) mod foreign;
pub(crate) mod inject;
pub(crate) mod jvms;
pub(crate) mod output;
pub(crate) mod record;
pub(crate) mod report;
pub(crate) mod serve;
pub(crate) mod signals;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use perfclock_cli::{Cli, Command, SplitBy};

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
        } => inject_time_conv(inject::InjectOptions {
            input,
            copies_beside: output.clone(),
            output,
            dump_dirs,
            clock_data: if clock_data_now {
                inject::ClockDataSource::Now
            } else {
                inject::ClockDataSource::None
            },
            pairings: Vec::new(),
            all_jit_code,
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
        Command::Report {
            input,
            flamegraph,
            pprof,
            split,
        } => {
            let split = match split {
                None => perfclock_report::flamegraph::Split::None,
                Some(SplitBy::Process) => perfclock_report::flamegraph::Split::Process,
                Some(SplitBy::Thread) => perfclock_report::flamegraph::Split::Thread,
            };
            report::run(&report::ReportOptions {
                input,
                flamegraph,
                pprof,
                split,
            })
        }
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
        Ok(outcome) => {
            errln!("{NAME}: {}", outcome.time_conv_line());
            for line in outcome.foreign_lines() {
                errln!("{NAME}: {line}");
            }
            if outcome.maps_jitdumps() {
                errln!("{NAME}: wrote {}", options.output.display());
            } else {
                errln!(
                    "{NAME}: wrote {} with the clock data only",
                    options.output.display()
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            errln!("{NAME}: error: {}", output::chain(&error));
            ExitCode::FAILURE
        }
    }
}
