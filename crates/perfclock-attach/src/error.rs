//! Why an attach failed ([`AttachError`]): the process ([`ProcessError`]), a step of the attach
//! ([`StepError`]) or the JVM's answer ([`AnswerError`]), one variant per cause, each message
//! naming what fixes it. Why a `load` request could not be built or its answer read is
//! [`crate::protocol`]'s, beside the request and the parser.
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors").

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::procfs::AttachBlocker;
use crate::protocol::{MalformedResponse, RequestError};
use perfclock_core::untrusted::Untrusted;

/// Why [`attach`](crate::attach) did not load the agent: the process, a step of the attach, or
/// the JVM's answer. Each kind is an enum of its own whose `Display` matches every one of its
/// variants, so a new cause cannot compile without a message.
#[derive(Debug)]
#[non_exhaustive]
pub enum AttachError {
    /// The process: gone, out of reach, not ours, not HotSpot, or attach disabled.
    Process(ProcessError),
    /// A step of the attach itself: the agent, the request, the trigger, the signal, the socket.
    Step(StepError),
    /// The JVM answered, and did not keep the agent.
    Answer(AnswerError),
}

/// Why the process could not be attached: gone, out of reach, not ours, not HotSpot, or attach
/// disabled.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProcessError {
    /// No process has this pid (or it has exited and is a zombie).
    NoSuchProcess {
        /// The pid given.
        pid: u32,
    },
    /// No pidfd could be opened for the process (`pidfd_open`, Linux 5.3 and later): perfclock
    /// signals only through one, so that a pid reused meanwhile never gets the signal.
    ProcessHandle {
        /// The pid given.
        pid: u32,
        /// pidfd_open's error.
        source: io::Error,
    },
    /// The process exited while perfclock was attaching.
    Exited {
        /// The pid given.
        pid: u32,
        /// What perfclock was doing: "waited for its attach socket", ...
        during: &'static str,
    },
    /// A step did not return within the timeout: a read of the process's `/proc` files or of a
    /// file in its file system blocked (a stopped FUSE server, a hung network file system).
    Stalled {
        /// The pid given.
        pid: u32,
        /// The step: "reading /proc/PID", "connecting", ...
        step: &'static str,
        /// The whole attach's timeout.
        timeout: Duration,
    },
    /// The thread the attach's steps run on could not be started.
    Thread {
        /// The spawn's error.
        source: io::Error,
    },
    /// Reading `/proc/PID/<what>` failed for another reason than the process being gone.
    Proc {
        /// The pid given.
        pid: u32,
        /// The `/proc/PID` entry.
        what: &'static str,
        /// The error (`InvalidData` if it could not be parsed).
        source: io::Error,
    },
    /// HotSpot accepts an attach only from its own effective user and group, or from root.
    Permission {
        /// The pid given.
        pid: u32,
        /// The JVM's effective uid and gid.
        jvm: (u32, u32),
        /// perfclock's effective uid and gid.
        ours: (u32, u32),
    },
    /// As root, switching to the JVM's effective uid/gid was refused (no CAP_SETUID/CAP_SETGID,
    /// e.g. in a restricted container).
    SwitchCredentials {
        /// The JVM's effective uid and gid.
        jvm: (u32, u32),
        /// setegid's or seteuid's error.
        source: io::Error,
    },
    /// The process maps no `libjvm.so`: not a HotSpot JVM (it is never signalled).
    NotHotSpot {
        /// The pid given.
        pid: u32,
        /// Its command name.
        name: String,
    },
    /// An OpenJ9 JVM: its attach mechanism is another one.
    OpenJ9 {
        /// The pid given.
        pid: u32,
    },
    /// The JVM runs with an option that disables attaching.
    AttachDisabled {
        /// The pid given.
        pid: u32,
        /// The option and where it was found.
        blocker: AttachBlocker,
    },
    /// The JVM never installed its SIGQUIT handler within the timeout: it is still starting, or
    /// runs with `-Xrs` given where perfclock cannot see it.
    NoQuitHandler {
        /// The pid given.
        pid: u32,
        /// How long perfclock waited.
        waited: Duration,
    },
}

/// Why a step of the attach failed: the agent, the request, the trigger file, the signal or the
/// socket.
#[derive(Debug)]
#[non_exhaustive]
pub enum StepError {
    /// The agent library cannot be read.
    Agent {
        /// The path given.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// The agent's path leads to another file (or none) in the JVM's mount namespace, where the
    /// JVM will open it.
    AgentNotVisible {
        /// The pid given.
        pid: u32,
        /// The agent's absolute path.
        path: PathBuf,
    },
    /// The agent's path or options cannot be sent.
    Request(RequestError),
    /// The `.attach_pid<pid>` trigger file could be created neither in the JVM's working
    /// directory nor in its /tmp.
    TriggerFile {
        /// The paths tried and their errors.
        attempts: Vec<(PathBuf, io::Error)>,
    },
    /// Sending SIGQUIT failed.
    Signal {
        /// The pid given.
        pid: u32,
        /// The error.
        source: io::Error,
    },
    /// The JVM did not open its attach socket within the timeout after SIGQUIT.
    SocketTimeout {
        /// The pid given.
        pid: u32,
        /// The socket perfclock waited for.
        socket: PathBuf,
        /// How long perfclock waited.
        waited: Duration,
    },
    /// The attach socket accepted no connection within the timeout: its listen queue stayed full.
    ConnectTimeout {
        /// The socket.
        socket: PathBuf,
        /// How long perfclock tried.
        waited: Duration,
    },
    /// Connecting to, writing to or reading from the attach socket failed.
    Socket {
        /// The socket.
        socket: PathBuf,
        /// What was being done: "connect to", "write to", "read from".
        action: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The JVM accepted the command but did not answer within the timeout (Agent_OnAttach may
    /// still be running).
    ResponseTimeout {
        /// The whole attach's timeout.
        timeout: Duration,
    },
}

/// How the JVM's answer said the agent was not kept.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnswerError {
    /// The JVM's answer was not HotSpot's format.
    Malformed(MalformedResponse),
    /// The JVM's attach operation failed with this completion code.
    Refused {
        /// The completion code.
        code: i32,
        /// The JVM's message.
        message: String,
    },
    /// The JVM did not run the agent's `Agent_OnAttach` (JDK 21+ reports this with code 0).
    NotLoaded {
        /// The JVM's message.
        message: String,
    },
    /// The agent's `Agent_OnAttach` returned an error; the JVM did not keep the agent.
    AgentFailed {
        /// `Agent_OnAttach`'s return value.
        return_code: i32,
        /// The JVM's message besides the return code.
        message: String,
    },
}

impl From<ProcessError> for AttachError {
    fn from(error: ProcessError) -> Self {
        Self::Process(error)
    }
}

impl From<StepError> for AttachError {
    fn from(error: StepError) -> Self {
        Self::Step(error)
    }
}

impl From<AnswerError> for AttachError {
    fn from(error: AnswerError) -> Self {
        Self::Answer(error)
    }
}

/// Which input of [`attach`](crate::attach) the caller can change to get past an error; a front
/// end names its own knob for it (a command-line flag, a configuration key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Remedy {
    /// A longer `timeout`: the step may only have been slow.
    LongerTimeout,
    /// Another `agent`: this one cannot be read, is not visible to the JVM, or cannot be
    /// loaded by it.
    AnotherAgent,
}

impl AttachError {
    /// The input to change, where changing one can help.
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            Self::Process(ProcessError::Stalled { .. } | ProcessError::NoQuitHandler { .. })
            | Self::Step(
                StepError::SocketTimeout { .. }
                | StepError::ConnectTimeout { .. }
                | StepError::ResponseTimeout { .. },
            ) => Some(Remedy::LongerTimeout),
            Self::Step(StepError::Agent { .. } | StepError::AgentNotVisible { .. }) => {
                Some(Remedy::AnotherAgent)
            }
            Self::Answer(
                AnswerError::Refused { message, .. } | AnswerError::NotLoaded { message },
            ) if message.contains("Agent_OnAttach is not available")
                || message.contains("was not loaded") =>
            {
                Some(Remedy::AnotherAgent)
            }
            _ => None,
        }
    }
}

/// What to do about a JVM message: a hint for the causes perfclock recognises.
fn hint(message: &str) -> &'static str {
    if message.contains("Agent_OnAttach is not available") {
        "; the library exports no Agent_OnAttach, so it can only be loaded at JVM start \
         (-agentpath): load an agent that exports it (perfclock's: `perfclock agent-path`)"
    } else if message.contains("was not loaded") {
        "; the JVM could not dlopen the library (see the reason above): load a library built \
         for this machine's architecture and libc"
    } else if message.contains("Dynamic agent loading is not enabled") {
        "; restart the JVM with -XX:+EnableDynamicAgentLoading"
    } else {
        ""
    }
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Process(error) => fmt::Display::fmt(error, f),
            Self::Step(error) => fmt::Display::fmt(error, f),
            Self::Answer(error) => fmt::Display::fmt(error, f),
        }
    }
}

impl fmt::Display for ProcessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchProcess { pid } => write!(
                f,
                "no such process: {pid} (exited, or not a pid in perfclock's pid namespace: \
                 pass the JVM's pid as `ps`/`pgrep -a java` here shows it)"
            ),
            Self::ProcessHandle { pid, .. } => write!(
                f,
                "cannot open a pidfd for process {pid}; perfclock signals a JVM only \
                 through a pidfd, which needs Linux 5.3 or later"
            ),
            Self::Exited { pid, during } => write!(
                f,
                "JVM {pid} exited while perfclock {during} (see its output: it may have crashed, \
                 or been stopped by its owner)"
            ),
            Self::Stalled { pid, step, timeout } => write!(
                f,
                "timeout: {step} for process {pid} did not finish within {:.1} s (a file system \
                 it uses, such as a FUSE or network mount, or the process itself blocked it); \
                 raise the timeout if the machine is only slow",
                timeout.as_secs_f64()
            ),
            Self::Thread { .. } => write!(
                f,
                "cannot start the attach's thread: raise the process or thread limit"
            ),
            Self::Proc { pid, what, .. } => {
                write!(f, "cannot read /proc/{pid}/{what}")
            }
            Self::Permission { pid, jvm, ours } => write!(
                f,
                "permission: JVM {pid} runs as uid {} gid {} and perfclock as uid {} gid {}; \
                 HotSpot accepts an attach only from its own user and group or from root: run \
                 the attach as root (sudo) or as the JVM's user (sudo -u '#{}' -g '#{}')",
                jvm.0, jvm.1, ours.0, ours.1, jvm.0, jvm.1
            ),
            Self::SwitchCredentials { jvm, .. } => write!(
                f,
                "permission: cannot switch to the JVM's uid {} gid {} without root's groups \
                 (setgroups/setresgid/setresuid refused); attach with CAP_SETUID and \
                 CAP_SETGID, or as the JVM's user",
                jvm.0, jvm.1
            ),
            Self::NotHotSpot { pid, name } => write!(
                f,
                "not a HotSpot JVM: process {pid} ({}) maps no libjvm.so (not signalled); \
                 pass the pid of a java process (pgrep -a java)",
                Untrusted::str(name)
            ),
            Self::OpenJ9 { pid } => write!(
                f,
                "not a HotSpot JVM: process {pid} is an OpenJ9 JVM, whose attach mechanism \
                 perfclock does not speak; start it with -agentpath instead"
            ),
            Self::AttachDisabled { pid, blocker } => {
                let fix = if blocker.option == "-Xrs" {
                    "-Xrs stops the JVM handling the SIGQUIT that starts its attach listener; \
                     restart it without -Xrs, or with -XX:+StartAttachListener"
                } else {
                    "restart it without that option (or with -XX:-DisableAttachMechanism after \
                     it), or load the agent at start with -agentpath"
                };
                write!(
                    f,
                    "attach disabled: JVM {pid} runs with {} (from its {}), not signalled; {fix}",
                    blocker.option, blocker.source
                )
            }
            Self::NoQuitHandler { pid, waited } => write!(
                f,
                "timeout: JVM {pid} installed no SIGQUIT handler within {:.1} s (still starting, \
                 or run with -Xrs from a file perfclock cannot see); not signalled, since \
                 SIGQUIT would end it: retry once it runs, or raise the timeout",
                waited.as_secs_f64()
            ),
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Agent { path, .. } => write!(
                f,
                "cannot use the agent {}: give the path of an agent library this user can read",
                shown(path)
            ),
            Self::AgentNotVisible { pid, path } => write!(
                f,
                "agent {} is not the same file inside JVM {pid}'s mount namespace (/proc/{pid}/root{}), \
                 where the JVM opens it: make it visible to the JVM at the same path (bind-mount \
                 or copy it into the container) and give that path",
                shown(path),
                shown(path)
            ),
            Self::Request(error) => fmt::Display::fmt(error, f),
            Self::TriggerFile { attempts } => {
                write!(f, "cannot create the attach trigger file")?;
                for (path, error) in attempts {
                    write!(f, "; {}: {error}", shown(path))?;
                }
                write!(
                    f,
                    "; the JVM's user must be able to create it in the JVM's working directory \
                     or /tmp"
                )
            }
            Self::Signal { pid, .. } => write!(f, "cannot send SIGQUIT to {pid}"),
            Self::SocketTimeout {
                pid,
                socket,
                waited,
            } => write!(
                f,
                "timeout: JVM {pid} did not open its attach socket {} within {:.1} s of SIGQUIT: \
                 attach disabled (-XX:+DisableAttachMechanism, e.g. from a -XX:Flags= file perfclock \
                 cannot see), or the JVM is stopped or overloaded; restart it without that \
                 option, or raise the timeout",
                shown(socket),
                waited.as_secs_f64()
            ),
            Self::ConnectTimeout { socket, waited } => write!(
                f,
                "timeout: the attach socket {} accepted no connection within {:.1} s (its listen \
                 queue stayed full: the JVM is overloaded, or what listens there is no JVM); \
                 raise the timeout",
                shown(socket),
                waited.as_secs_f64()
            ),
            Self::Socket { socket, action, .. } => write!(f, "cannot {action} the attach socket {}", shown(socket)),
            Self::ResponseTimeout { timeout } => write!(
                f,
                "timeout: the JVM accepted the load command but did not answer within {:.1} s \
                 (Agent_OnAttach may still be running, and the agent may yet be loaded): raise \
                 the timeout",
                timeout.as_secs_f64()
            ),
        }
    }
}

impl fmt::Display for AnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(malformed) => fmt::Display::fmt(malformed, f),
            Self::Refused { code, message } => write!(
                f,
                "the JVM refused the load command with code {code}: {}{}",
                jvm_text(message),
                hint(message)
            ),
            Self::NotLoaded { message } => write!(
                f,
                "the JVM did not load the agent: {}{}",
                jvm_text(message),
                hint(message)
            ),
            Self::AgentFailed {
                return_code,
                message,
            } => {
                write!(
                    f,
                    "agent load failed: Agent_OnAttach returned {return_code}, so the JVM did not \
                     keep the agent"
                )?;
                if !message.is_empty() {
                    write!(f, " ({})", jvm_text(message))?;
                }
                write!(
                    f,
                    "; the agent's reason is on the JVM's stderr: check the options"
                )
            }
        }
    }
}

/// A multi-line JVM message on one line, escaped and bounded.
fn jvm_text(message: &str) -> String {
    if message.is_empty() {
        "(no message)".to_owned()
    } else {
        Untrusted::str(&message.lines().collect::<Vec<_>>().join(" / ")).to_string()
    }
}

/// A path for a message: escaped and bounded (it can name the JVM's files, or be long).
fn shown(path: &std::path::Path) -> String {
    Untrusted(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())).to_string()
}

// The outer error is the inner one under another type: it shows the inner's message, so its
// cause is the inner's cause, not the inner error (which would repeat the message).
impl std::error::Error for AttachError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Process(error) => error.source(),
            Self::Step(error) => error.source(),
            Self::Answer(error) => error.source(),
        }
    }
}

impl std::error::Error for ProcessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Proc { source, .. }
            | Self::ProcessHandle { source, .. }
            | Self::Thread { source }
            | Self::SwitchCredentials { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl std::error::Error for StepError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Agent { source, .. }
            | Self::Signal { source, .. }
            | Self::Socket { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl std::error::Error for AnswerError {}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn the_outer_error_shows_the_inner_one_and_its_cause() {
        let inner = || ProcessError::Proc {
            pid: 7,
            what: "status",
            source: io::Error::other("unreadable"),
        };
        let error = AttachError::from(inner());
        assert_eq!(error.to_string(), inner().to_string());
        assert_eq!(
            error.source().map(ToString::to_string).as_deref(),
            Some("unreadable")
        );
    }

    #[test]
    fn remedies_follow_the_inner_error() {
        let timeout = AttachError::from(StepError::ResponseTimeout {
            timeout: Duration::from_secs(1),
        });
        assert_eq!(timeout.remedy(), Some(Remedy::LongerTimeout));
        let not_loaded = AttachError::from(AnswerError::NotLoaded {
            message: "Agent library was not loaded".to_owned(),
        });
        assert_eq!(not_loaded.remedy(), Some(Remedy::AnotherAgent));
        let openj9 = AttachError::from(ProcessError::OpenJ9 { pid: 1 });
        assert_eq!(openj9.remedy(), None);
    }
}
