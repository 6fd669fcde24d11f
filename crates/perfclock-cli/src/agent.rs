//! perfclock's JVMTI agent as the attaching side sees it: what its `Agent_OnAttach` return codes
//! mean (the table in `crates/perfclock-jvmti/README.md`, the contract both sides follow: the
//! agent is a cdylib, so its own enum cannot be linked here), and an attach that waits out a JVM
//! which is still starting.
//!
//! The waiting is here and not in `perfclock-attach`, which loads any agent the way jattach
//! does: only perfclock's agent gives code 102 its meaning.

use std::ffi::OsStr;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use perfclock_attach::{AttachError, Attached};

/// Why perfclock's agent refused a start or a stop request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgentFailure {
    Options = 101,
    NoJvmti = 102,
    Capabilities = 103,
    NoClock = 104,
    ClockVariable = 105,
    Jitdump = 106,
    PerfMap = 107,
    Markers = 108,
    Events = 109,
    Internal = 110,
}

impl AgentFailure {
    /// `Agent_OnAttach`'s return value for it.
    pub(crate) fn code(self) -> i32 {
        self as i32
    }

    /// The agent's failure behind `Agent_OnAttach`'s `return_code`, if it is one of its codes.
    pub(crate) fn from_return_code(return_code: i32) -> Option<Self> {
        Some(match return_code {
            101 => Self::Options,
            102 => Self::NoJvmti,
            103 => Self::Capabilities,
            104 => Self::NoClock,
            105 => Self::ClockVariable,
            106 => Self::Jitdump,
            107 => Self::PerfMap,
            108 => Self::Markers,
            109 => Self::Events,
            110 => Self::Internal,
            _ => return None,
        })
    }

    /// The agent's failure behind `error`, if the JVM ran the agent and it returned one.
    pub(crate) fn of(error: &AttachError) -> Option<Self> {
        match error {
            AttachError::AgentFailed { return_code, .. } => Self::from_return_code(*return_code),
            _ => None,
        }
    }

    /// What the code means: "perfclock's agent returns N when ...".
    pub(crate) fn meaning(self) -> &'static str {
        match self {
            Self::Options => {
                "the option string has an unknown, repeated or valueless option, or a bad value"
            }
            Self::NoJvmti => {
                "the JVM gave no JVMTI 1.2 environment (a JVM that is still starting gives none \
                 until its live phase; the attach was tried again until its timeout)"
            }
            Self::Capabilities => {
                "the JVM refused a capability the options need (compiled-method or GC events)"
            }
            Self::NoClock => "the perf clock cannot be opened",
            Self::ClockVariable => {
                "PERFCLOCK_JITDUMP_CLOCK or PERFCLOCK_MARKERS_CLOCK (in the JVM's environment) \
                 names no clock"
            }
            Self::Jitdump => "the jitdump cannot be written in jitdump=DIR",
            Self::PerfMap => "the perf map /tmp/perf-<pid>.map cannot be written",
            Self::Markers => "the marker file cannot be written in markers=DIR",
            Self::Events => "SetEventCallbacks or SetEventNotificationMode failed",
            Self::Internal => "it failed internally (a panic)",
        }
    }

    /// What fixes it.
    pub(crate) fn fix(self) -> &'static str {
        match self {
            Self::Options => "fix the option its message names",
            Self::NoJvmti => {
                "use a JVM with JVMTI (not a minimal VM), or a longer --timeout for a JVM that \
                 is still starting"
            }
            Self::Capabilities => {
                "another agent may hold them exclusively; drop markers= for the GC ones"
            }
            Self::NoClock => "lower perf_event_paranoid, or pass allow_no_clock=1",
            Self::ClockVariable => "unset it, or pass jitdump_clock= / markers_clock=",
            Self::Jitdump => "pass a directory the JVM's user can write, or jitdump=off",
            Self::PerfMap => "remove what occupies the name, or pass perfmap=0",
            Self::Markers => "pass a directory the JVM's user can write, or drop markers=",
            Self::Events => "a JVM bug: its message names the call",
            Self::Internal => "report it, with the JVM's stderr",
        }
    }
}

/// How often a JVM that is too young for the agent is tried again.
const RETRY_INTERVAL: Duration = Duration::from_millis(200);

/// Loads perfclock's agent into `pid` with `options`, all within `timeout`. A JVM caught while
/// it starts answers the attach before JVMTI's live phase, and the agent returns
/// [`AgentFailure::NoJvmti`]; such a JVM is tried again every 200 ms until the timeout, which
/// then ends in that error.
pub(crate) fn attach_when_live(
    pid: u32,
    agent: &Path,
    options: &OsStr,
    timeout: Duration,
) -> Result<Attached, AttachError> {
    // None: a timeout past what `Instant` can hold, which waits without end.
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let left = deadline.map_or(timeout, |end| end.saturating_duration_since(Instant::now()));
        let error = match perfclock_attach::attach(pid, agent, options, left.max(RETRY_INTERVAL)) {
            Ok(attached) => return Ok(attached),
            Err(error) => error,
        };
        let starting = AgentFailure::of(&error) == Some(AgentFailure::NoJvmti);
        let time_left = deadline.is_none_or(|end| Instant::now() + RETRY_INTERVAL < end);
        if !starting || !time_left {
            return Err(error);
        }
        thread::sleep(RETRY_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_of_the_agents_table_is_known_and_no_other() {
        let known: Vec<i32> = (-10..300)
            .filter(|code| AgentFailure::from_return_code(*code).is_some())
            .collect();
        assert_eq!(known, (101..=110).collect::<Vec<_>>());
        for code in known {
            assert_eq!(AgentFailure::from_return_code(code).unwrap().code(), code);
        }
    }

    #[test]
    fn the_agents_readme_lists_each_code_with_its_meaning() {
        let readme = include_str!("../../perfclock-jvmti/README.md");
        for code in 101..=110 {
            assert!(
                readme.contains(&format!("| {code} ")),
                "code {code} is missing from the agent's README table"
            );
        }
    }
}
