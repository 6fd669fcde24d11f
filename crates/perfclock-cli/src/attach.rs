//! `perfclock attach PID [AGENT-OPTIONS]`: loads perfclock's JVMTI agent into a running HotSpot
//! JVM (perfclock-attach does the work; this chooses the agent and reports).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use perfclock_attach::jvms::{agent_failure, attach_when_live};
use perfclock_attach::Remedy;
use perfclock_core::untrusted::Untrusted;

use crate::agent_path;
use crate::output::chain;
use crate::output::errln;

const NAME: &str = "perfclock attach";

pub(crate) fn run(
    pid: u32,
    options: OsString,
    agent: Option<PathBuf>,
    timeout: Duration,
) -> ExitCode {
    let default_agent =
        || agent_path::find().map_err(|message| format!("{message}; or pass --agent PATH"));
    let agent = match agent.map_or_else(default_agent, Ok) {
        Ok(agent) => agent,
        Err(message) => {
            errln!("{NAME}: error: {message}");
            return ExitCode::FAILURE;
        }
    };
    let attached = perfclock_attach::Agent::here(&agent)
        .and_then(|agent| attach_when_live(pid, &agent, &options, timeout));
    match attached {
        Ok(attached) => {
            let agent = Untrusted(attached.agent.as_os_str().as_bytes());
            let namespace = if attached.ns_pid == attached.pid {
                String::new()
            } else {
                format!(" (pid {} in its namespace)", attached.ns_pid)
            };
            if attached.already_loaded {
                errln!(
                    "{NAME}: {} was already loaded in JVM {}{namespace}; the JVM ran its \
                     Agent_OnAttach again with options {:?}, which returned 0 (the agent's own \
                     message, if any, is on the JVM's stderr)",
                    agent,
                    attached.pid,
                    options
                );
            } else {
                errln!(
                    "{NAME}: loaded {} into JVM {}{namespace} with options {:?}: Agent_OnAttach \
                     returned 0",
                    agent,
                    attached.pid,
                    options
                );
            }
            if !attached.message.is_empty() {
                errln!(
                    "{NAME}: the JVM said: {}",
                    Untrusted::str(&attached.message)
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            errln!("{NAME}: error: {}", chain(&error));
            match error.remedy() {
                Some(Remedy::LongerTimeout) => errln!(
                    "{NAME}: the timeout is --timeout SECONDS ({:.1} s now)",
                    timeout.as_secs_f64()
                ),
                Some(Remedy::AnotherAgent) => errln!("{NAME}: the agent is --agent PATH"),
                _ => {}
            }
            if let Some(failure) = agent_failure(&error) {
                errln!(
                    "{NAME}: perfclock's agent returns {} when {}: {} (its message is on the \
                     JVM's stderr)",
                    failure.code(),
                    failure.meaning(),
                    failure.fix()
                );
            }
            ExitCode::FAILURE
        }
    }
}
