//! Loads a JVMTI agent into a running HotSpot JVM through HotSpot's dynamic attach mechanism:
//! what `jcmd PID JVMTI.agent_load` and jattach do, with no JDK on the machine.
//!
//! ```no_run
//! let attached = perfclock_attach::attach(
//!     4242,
//!     "/opt/perfclock/libperfclock_agent.so".as_ref(),
//!     "jitdump=/tmp".as_ref(),
//!     perfclock_attach::DEFAULT_TIMEOUT,
//! )?;
//! println!("Agent_OnAttach ran in {} (already loaded: {})", attached.pid, attached.already_loaded);
//! # Ok::<(), perfclock_attach::AttachError>(())
//! ```
//!
//! # Design
//! The steps, each a function of its own:
//! 1. **Resolve the agent**: its absolute path and identity (device, inode) here.
//! 2. **Check the target**, with perfclock's credentials: a pidfd first (while it shows the
//!    process alive, `/proc/PID` is that process, and signals sent through it reach that
//!    process or none, never a later one that reuses the pid); `/proc/PID/status` for the
//!    JVM's effective uid/gid, its pid in its own pid namespace (`NStgid`); `/proc/PID/maps`
//!    (read line by line) for HotSpot (`libjvm.so`) and whether the agent is loaded; the
//!    command line and environment; its working and root directories opened as paths. A process
//!    that is not a running HotSpot JVM is never signalled (SIGQUIT would kill it).
//! 3. **Become the JVM's user**: as root, the thread doing the rest takes the JVM's uid and gid
//!    and drops root's supplementary groups and capabilities (HotSpot checks the peer's
//!    credentials on the socket and trusts only trigger files of its own user or root; and
//!    nothing the JVM can point at, through its working directory or its option files, is
//!    created, removed or read with more rights than the JVM's user has).
//! 4. **Check the options**: `-XX:+DisableAttachMechanism` or `-Xrs` on the command line, in
//!    `@argfile`s (read as the launcher reads them, within one budget) and the environment.
//! 5. **Connect or trigger**: connect to `/tmp/.java_pid<nspid>` in the JVM's mount namespace;
//!    if no JVM listens there: create `.attach_pid<nspid>` in its working directory (or its
//!    /tmp), wait for its SIGQUIT handler, send SIGQUIT, wait for the socket, remove the file.
//!    The JVM's files are reached through its directories' descriptors (`/proc/self/fd/N`):
//!    that works across mount and pid namespaces (containers) without `setns`.
//! 6. **Load**: send `load` (protocol version 1, [`protocol`]) with the agent's absolute path
//!    and read the JVM's answer to EOF.
//!
//! One deadline covers every step: connects never block (a full listen queue is retried until
//! the deadline), every read and write is given what is left of it, every wait ends early
//! when the JVM exits, and the steps run on a thread of their own that [`attach`] stops waiting
//! for at the deadline (a read that blocks in the kernel, on a stopped FUSE server say, cannot
//! hold it). Every failure is an [`AttachError`] naming its cause; text from the JVM is printed
//! escaped and bounded ([`perfclock_core::untrusted::Untrusted`]).
//!
//! # Caveats
//! - The JVM opens the agent at the given path in its own mount namespace: for a JVM in a
//!   container the file must be visible there at the same path (checked, [`StepError::AgentNotVisible`]).
//! - `-XX:+DisableAttachMechanism` or `-Xrs` is seen on the command line, in `@argfile`s,
//!   `-XX:VMOptionsFile=` and the `JAVA_TOOL_OPTIONS`/`JDK_JAVA_OPTIONS`/`_JAVA_OPTIONS`
//!   variables, but not in a `-XX:Flags=` file or `.hotspotrc`, nor past the option-file budget
//!   ([`procfs::OPTION_FILES_MAX_COUNT`] files, [`procfs::OPTION_FILES_MAX_BYTES`] bytes in all):
//!   the JVM then prints a thread dump on SIGQUIT and the attach times out.
//! - Signals go through a pidfd: Linux 5.3 or later ([`ProcessError::ProcessHandle`] before).
//! - A step blocked in the kernel past the deadline ([`ProcessError::Stalled`]) leaves its thread
//!   behind until the kernel lets it go; it then ends without touching the JVM. A FUSE server
//!   that has taken a request and never answers holds that thread in an uninterruptible wait:
//!   the caller has its error at the deadline, but the process cannot exit before the server
//!   answers, dies or is aborted (`/sys/fs/fuse/connections/N/abort`).
//! - OpenJ9's attach mechanism is not supported.
//!
//! # perfclock's agent
//! [`jvms`] is the JVM registry `perfclock record -p`/`-a` attaches perfclock's own agent
//! through: which processes are HotSpot JVMs, each one's private dump directory, the JVMs that
//! start during a recording, and the end of each agent's session.
#![deny(unsafe_code)]

mod error;
pub mod jvms;
mod listener;
pub mod procfs;
pub mod protocol;
mod target;

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

pub use error::{AnswerError, AttachError, ProcessError, Remedy, StepError};
use listener::Exchange;
use protocol::LoadResponse;
use target::Target;

/// What the JVM reported for an agent it loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attached {
    /// The JVM's pid in perfclock's pid namespace.
    pub pid: u32,
    /// The JVM's pid in its own pid namespace (the same outside containers).
    pub ns_pid: u32,
    /// The agent's absolute path, as sent to the JVM.
    pub agent: PathBuf,
    /// The agent's file was mapped in the JVM before this attach: the JVM ran the loaded
    /// library's `Agent_OnAttach` again.
    pub already_loaded: bool,
    /// Any text the JVM printed besides the return code (usually empty). The JVM's text: print
    /// it through [`perfclock_core::untrusted::Untrusted`].
    pub message: String,
}

/// The usual bound of a whole attach (`perfclock attach`'s default, and each attach and
/// session stop of `perfclock record -p`/`-a`): HotSpot answers within milliseconds, so this is
/// for a loaded machine; errors come within it, well inside 10 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(8);

/// How long [`attach`] waits past the deadline for the steps' own report, which names the
/// step that ran out of time, before it reports a stalled step itself.
const STALL_GRACE: Duration = Duration::from_millis(500);

/// The end of the one timeout every step is held to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    end: Instant,
    timeout: Duration,
}

impl Deadline {
    fn after(timeout: Duration) -> Self {
        let now = Instant::now();
        // A timeout beyond what Instant can add is as good as none (136 years).
        let end = now
            .checked_add(timeout)
            .unwrap_or_else(|| now + Duration::from_secs(u64::from(u32::MAX)));
        Self { end, timeout }
    }

    /// What is left; `None` once it has passed.
    pub(crate) fn remaining(&self) -> Option<Duration> {
        self.end
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
    }

    /// The whole timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// The agent library as the JVM opens it: its path in the JVM's mount namespace, and the file
/// it must be there (device and inode), which the attach checks before it sends the path.
#[derive(Debug, Clone)]
pub struct Agent {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Agent {
    /// The agent at `path` in the JVM's mount namespace, which must be the file `(dev, ino)`: a
    /// copy put inside a container's root for its JVM, say.
    pub fn in_jvm(path: PathBuf, (dev, ino): (u64, u64)) -> Self {
        Agent { path, dev, ino }
    }

    /// The agent at `path` here, which the JVM must see at the same path.
    ///
    /// # Errors
    /// [`StepError::Agent`]: not found, or not a regular file.
    pub fn here(path: &Path) -> Result<Self, AttachError> {
        resolve_agent(path)
    }

    /// Its path as the JVM opens it.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// (device major, minor, inode), as `/proc/PID/maps` shows a mapped file.
    pub(crate) fn maps_identity(&self) -> (u32, u32, u64) {
        (libc::major(self.dev), libc::minor(self.dev), self.ino)
    }
}

/// Loads `agent` (a JVMTI library exporting `Agent_OnAttach`) into the HotSpot JVM `pid` with
/// the agent options `options`, all within `timeout`.
///
/// # Errors
/// An [`AttachError`] for each cause: no such process, permission, not HotSpot, attach disabled,
/// timeout, the agent not visible to the JVM, the JVM's own refusal or `Agent_OnAttach`'s error
/// code.
pub fn attach(
    pid: u32,
    agent: &Path,
    options: &OsStr,
    timeout: Duration,
) -> Result<Attached, AttachError> {
    attach_agent(pid, resolve_agent(agent)?, options, timeout)
}

/// [`attach`] of an agent given as the JVM opens it ([`Agent::in_jvm`]).
///
/// # Errors
/// As [`attach`].
pub fn attach_agent(
    pid: u32,
    agent: Agent,
    options: &OsStr,
    timeout: Duration,
) -> Result<Attached, AttachError> {
    let deadline = Deadline::after(timeout);
    let request = protocol::load_request(agent.path.as_os_str().as_bytes(), options.as_bytes())
        .map_err(StepError::Request)?;
    let progress = Arc::new(Mutex::new("reading /proc/PID"));
    let (report, reported) = mpsc::channel();
    let steps_progress = Arc::clone(&progress);
    // A thread of its own: it takes the JVM user's credentials, and a read that blocks in the
    // kernel holds it, not the caller.
    let steps = thread::Builder::new()
        .name("perfclock-attach".into())
        .spawn(move || {
            let result = attach_steps(pid, &agent, &request, deadline, &steps_progress);
            let _ = report.send(result);
        })
        .map_err(|source| ProcessError::Thread { source })?;
    let wait = deadline.remaining().unwrap_or_default() + STALL_GRACE;
    match reported.recv_timeout(wait) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(ProcessError::Stalled {
            pid,
            step: *progress.lock().unwrap_or_else(PoisonError::into_inner),
            timeout,
        }
        .into()),
        // The thread ended without a report: it panicked.
        Err(mpsc::RecvTimeoutError::Disconnected) => match steps.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the steps thread reports before it ends"),
        },
    }
}

/// The steps after the agent's resolution, on the attach's own thread.
fn attach_steps(
    pid: u32,
    agent: &Agent,
    request: &[u8],
    deadline: Deadline,
    progress: &Mutex<&'static str>,
) -> Result<Attached, AttachError> {
    // Each step starts within the deadline: after it, the caller has given up (it reports
    // the step that stalled), and nothing more may reach the JVM.
    let step = |name| {
        *progress.lock().unwrap_or_else(PoisonError::into_inner) = name;
        match deadline.remaining() {
            Some(_) => Ok(()),
            None => Err(ProcessError::Stalled {
                pid,
                step: name,
                timeout: deadline.timeout(),
            }),
        }
    };
    let target = Target::check(pid, agent, deadline)?;
    if let Some(jvm) = target.switch_to {
        perfclock_os::peer::become_user_on_this_thread(jvm.0, jvm.1)
            .map_err(|source| ProcessError::SwitchCredentials { jvm, source })?;
    }
    step("reading the JVM's option files")?;
    target.check_options()?;
    step("looking for the agent in the JVM's mount namespace")?;
    check_agent_visible(&target, agent)?;
    step("connecting to the JVM's attach listener")?;
    let mut stream = listener::connect_or_trigger(&target, deadline)?;
    step("waiting for the JVM's answer")?;
    load(&target, agent, &mut stream, request, deadline)
}

/// The agent's absolute path and identity here.
fn resolve_agent(agent: &Path) -> Result<Agent, AttachError> {
    let agent_error = |source| StepError::Agent {
        path: agent.to_owned(),
        source,
    };
    let path = fs::canonicalize(agent).map_err(agent_error)?;
    let meta = fs::metadata(&path).map_err(agent_error)?;
    if !meta.is_file() {
        return Err(agent_error(io::Error::other("not a regular file")).into());
    }
    Ok(Agent {
        path,
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// The agent's path leads to the same file in the JVM's mount namespace, where the JVM opens
/// it (looked up with the JVM user's credentials).
fn check_agent_visible(target: &Target, agent: &Agent) -> Result<(), AttachError> {
    let in_jvm = target.in_root(&agent.path.to_string_lossy());
    match fs::metadata(&in_jvm.access) {
        Ok(meta) if meta.dev() == agent.dev && meta.ino() == agent.ino => Ok(()),
        _ => Err(StepError::AgentNotVisible {
            pid: target.pid,
            path: agent.path.clone(),
        }
        .into()),
    }
}

/// Sends `load` and turns the JVM's answer into the result.
fn load(
    target: &Target,
    agent: &Agent,
    stream: &mut std::os::unix::net::UnixStream,
    request: &[u8],
    deadline: Deadline,
) -> Result<Attached, AttachError> {
    let socket = target
        .in_root(&format!("tmp/.java_pid{}", target.ns_pid))
        .shown;
    let answer = listener::exchange(stream, request, deadline).map_err(|error| match error {
        Exchange::Timeout => StepError::ResponseTimeout {
            timeout: deadline.timeout(),
        },
        Exchange::Io(action, source) => StepError::Socket {
            socket,
            action,
            source,
        },
    })?;
    match protocol::parse_load_response(&answer).map_err(AnswerError::Malformed)? {
        LoadResponse::Loaded { message } => Ok(Attached {
            pid: target.pid,
            ns_pid: target.ns_pid,
            agent: agent.path.clone(),
            already_loaded: target.agent_loaded,
            message,
        }),
        LoadResponse::AgentFailed {
            return_code,
            message,
        } => Err(AnswerError::AgentFailed {
            return_code,
            message,
        }
        .into()),
        LoadResponse::NotLoaded { message } => Err(AnswerError::NotLoaded { message }.into()),
        LoadResponse::Refused { code, message } => {
            Err(AnswerError::Refused { code, message }.into())
        }
    }
}
