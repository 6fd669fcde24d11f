//! `perfclock attach PID [AGENT-OPTIONS]`: loads perfclock's JVMTI agent into a running HotSpot
//! JVM (perfclock-attach does the work; this chooses the agent and reports).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use perfclock_attach::{escape_untrusted, escape_untrusted_bytes};

use crate::agent_path;
use crate::output::chain;
use crate::output::errln;

/// The whole attach's default bound: HotSpot answers within milliseconds, so this is for a
/// loaded machine; errors come within it, well inside 10 s.
pub(crate) const DEFAULT_TIMEOUT_SECS: f64 = 8.0;

const NAME: &str = "perfclock attach";

/// `--timeout`'s value: seconds, positive and finite.
pub(crate) fn parse_timeout(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("not a number of seconds: {text}"))?;
    match Duration::try_from_secs_f64(seconds) {
        Ok(timeout) if !timeout.is_zero() => Ok(timeout),
        _ => Err(format!("the timeout must be positive seconds, not {text}")),
    }
}

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
    match perfclock_attach::attach(pid, &agent, &options, timeout) {
        Ok(attached) => {
            let agent = escape_untrusted_bytes(attached.agent.as_os_str().as_bytes());
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
                    escape_untrusted(&attached.message)
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            errln!("{NAME}: error: {}", chain(&error));
            if let perfclock_attach::AttachError::AgentFailed { return_code, .. } = error {
                if let Some((meaning, fix)) = agent_failure(return_code) {
                    errln!(
                        "{NAME}: perfclock's agent returns {return_code} when {meaning}: {fix} \
                         (its message is on the JVM's stderr)"
                    );
                }
            }
            ExitCode::FAILURE
        }
    }
}

/// What a code `Agent_OnAttach` of perfclock's agent returns means, and what fixes it
/// (`crates/perfclock-jvmti/README.md`'s table).
pub(crate) fn agent_failure(return_code: i32) -> Option<(&'static str, &'static str)> {
    Some(match return_code {
        101 => (
            "the option string has an unknown, repeated or valueless option, or a bad value",
            "fix the option its message names",
        ),
        102 => (
            "the JVM gave no JVMTI 1.2 environment",
            "use a JVM with JVMTI (not a minimal VM)",
        ),
        103 => (
            "the JVM refused a capability the options need (compiled-method or GC events)",
            "another agent may hold them exclusively; drop markers= for the GC ones",
        ),
        104 => (
            "the perf clock cannot be opened",
            "lower perf_event_paranoid, or pass allow_no_clock=1",
        ),
        105 => (
            "PERFCLOCK_JITDUMP_CLOCK or PERFCLOCK_MARKERS_CLOCK (in the JVM's environment) names \
             no clock",
            "unset it, or pass jitdump_clock= / markers_clock=",
        ),
        106 => (
            "the jitdump cannot be written in jitdump=DIR",
            "pass a directory the JVM's user can write, or jitdump=off",
        ),
        107 => (
            "the perf map /tmp/perf-<pid>.map cannot be written",
            "remove what occupies the name, or pass perfmap=0",
        ),
        108 => (
            "the marker file cannot be written in markers=DIR",
            "pass a directory the JVM's user can write, or drop markers=",
        ),
        109 => (
            "SetEventCallbacks or SetEventNotificationMode failed",
            "a JVM bug: its message names the call",
        ),
        110 => (
            "it failed internally (a panic)",
            "report it, with the JVM's stderr",
        ),
        _ => return None,
    })
}
