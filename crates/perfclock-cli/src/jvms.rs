//! `record -p`/`-a`'s JVMs through the registry `perfclock_attach::jvms`, each attach and each
//! session's `stop` held to `perfclock attach`'s default timeout.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use perfclock_attach::jvms::{lock_down, Outcome, Watcher};
use perfclock_attach::{jvms, Agent, AttachError};

use crate::attach::DEFAULT_TIMEOUT_SECS;

/// One attach's bound.
const ATTACH_TIMEOUT: Duration = Duration::from_millis((DEFAULT_TIMEOUT_SECS * 1000.0) as u64);

/// [`jvms::attach`]: the agent into `pid` if it is a HotSpot JVM, its dump under `root`.
pub(crate) fn attach(pid: u32, agent: &Path, root: &Path) -> Outcome {
    jvms::attach(pid, agent, root, ATTACH_TIMEOUT)
}

/// [`jvms::stop_session`]: the agent's session in `pid` ends.
pub(crate) fn stop_session(pid: u32, agent: &Agent) -> Result<(), AttachError> {
    jvms::stop_session(pid, agent, ATTACH_TIMEOUT)
}

/// [`Watcher::start`]: `-a`'s thread, attaching every JVM but `skip`'s and reporting each
/// outcome through `report`.
pub(crate) fn watch(
    agent: PathBuf,
    root: PathBuf,
    skip: Vec<u32>,
    report: fn(&Outcome) -> bool,
) -> io::Result<Watcher> {
    Watcher::start(agent, root, skip, report, ATTACH_TIMEOUT)
}
