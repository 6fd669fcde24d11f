//! perfclock's agent as the attaching side sees it: which of its return codes an attach ended
//! in (the table is `perfclock_agent_codes::AgentFailure`, the one the agent returns them
//! from), and an attach that waits out a JVM which is still starting.

use std::ffi::OsStr;
use std::thread;
use std::time::{Duration, Instant};

use perfclock_agent_codes::AgentFailure;

use crate::{Agent, AnswerError, AttachError, Attached};

/// The agent's failure behind `error`, if the JVM ran the agent and it returned one of
/// perfclock's agent's codes.
pub fn agent_failure(error: &AttachError) -> Option<AgentFailure> {
    match error {
        AttachError::Answer(AnswerError::AgentFailed { return_code, .. }) => {
            AgentFailure::from_return_code(*return_code)
        }
        _ => None,
    }
}

/// How often a JVM that is too young for the agent is tried again.
const RETRY_INTERVAL: Duration = Duration::from_millis(200);

/// Loads perfclock's agent into `pid` with `options`, all within `timeout`. A JVM caught while
/// it starts answers the attach before JVMTI's live phase, and the agent returns
/// [`AgentFailure::NoJvmti`]; such a JVM is tried again every 200 ms until the timeout, which
/// then ends in that error.
///
/// # Errors
/// As [`attach_agent`](crate::attach_agent), the last attempt's.
pub fn attach_when_live(
    pid: u32,
    agent: &Agent,
    options: &OsStr,
    timeout: Duration,
) -> Result<Attached, AttachError> {
    // None: a timeout past what `Instant` can hold, which waits without end.
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let left = deadline.map_or(timeout, |end| end.saturating_duration_since(Instant::now()));
        let attempt = crate::attach_agent(pid, agent.clone(), options, left.max(RETRY_INTERVAL));
        let error = match attempt {
            Ok(attached) => return Ok(attached),
            Err(error) => error,
        };
        let starting = agent_failure(&error) == Some(AgentFailure::NoJvmti);
        let time_left = deadline.is_none_or(|end| Instant::now() + RETRY_INTERVAL < end);
        if !starting || !time_left {
            return Err(error);
        }
        thread::sleep(RETRY_INTERVAL);
    }
}
