//! Why a subcommand failed: `record`'s steps around perf ([`RecordError`]) and `serve`
//! ([`ServeError`]); each message says what to do. Post-processing's errors are
//! `perfclock_inject`'s, and why `record -p`/`-a` could not attach a JVM is
//! `perfclock_attach::jvms::JvmError`.
//!
//! The CLI is a binary, so these are not public API and the workspace's `#[non_exhaustive]`
//! policy for public error enums does not apply; they implement `Display` and
//! `std::error::Error` like every error of the workspace.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

/// Why a step of `perfclock record` around perf itself failed.
#[derive(Debug)]
pub(crate) enum RecordError {
    /// The private directory beside OUT could not be created.
    WorkDir { dir: PathBuf, source: io::Error },
    /// The file perf records into could not be created in it.
    CreateRaw { path: PathBuf, source: io::Error },
    /// OUT's directory could not be resolved.
    ResolveDir { output: PathBuf, source: io::Error },
    /// A jitdump directory could not be created in `dir`.
    DumpDir { dir: PathBuf, source: io::Error },
    /// The command's jitdump directory could not be opened to its users.
    OpenDumpDir { path: PathBuf, source: io::Error },
    /// The agent's path holds a `=`, where `-agentpath` ends the path.
    AgentPathEquals { agent: PathBuf },
    /// A path `JAVA_TOOL_OPTIONS` cannot carry.
    ToolOptionsPath { what: &'static str, path: PathBuf },
    /// Adding the TIME_CONV record failed.
    TimeConv(perfclock_inject::InjectError),
    /// OUT is no longer something that may be replaced (`InputError::Output`).
    Output(perfclock_inject::InputError),
    /// The finished file could not be renamed over OUT.
    Rename { output: PathBuf, source: io::Error },
    /// `perf inject` could not be started.
    RunInject(io::Error),
    /// Waiting for `perf inject` failed.
    WaitInject(io::Error),
    /// `perf inject --jit` failed.
    InjectFailed(ExitStatus),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WorkDir { dir, .. } => {
                write!(f, "cannot create a private directory in {}", dir.display())
            }
            Self::CreateRaw { path, .. } => write!(f, "cannot create {}", path.display()),
            Self::ResolveDir { output, .. } => {
                write!(f, "cannot resolve the directory of {}", output.display())
            }
            Self::DumpDir { dir, .. } => {
                write!(f, "cannot create a jitdump directory in {}", dir.display())
            }
            Self::OpenDumpDir { path, .. } => {
                write!(f, "cannot open {} to the command's users", path.display())
            }
            Self::AgentPathEquals { agent } => write!(
                f,
                "the agent path {} holds a `=`, where HotSpot's -agentpath ends the path and \
                 starts the agent's options, so every JVM would fail to start: install the agent \
                 (or pass --agent) in a path without one",
                agent.display()
            ),
            Self::ToolOptionsPath { what, path } => write!(
                f,
                "the {what} path {} holds white space, a comma or a quote, which \
                 JAVA_TOOL_OPTIONS cannot carry: write OUT (-o) and keep the agent (--agent) in \
                 paths without them, or pass --no-java-agent",
                path.display()
            ),
            Self::TimeConv(error) => write!(f, "post-processing: {error}"),
            Self::Output(error) => write!(f, "{error}"),
            Self::Rename { output, .. } => write!(f, "writing {}", output.display()),
            Self::RunInject(_) => write!(f, "cannot run perf inject"),
            Self::WaitInject(_) => write!(f, "waiting for perf inject"),
            Self::InjectFailed(status) => write!(
                f,
                "perf inject --jit failed ({status}; see its message above)"
            ),
        }
    }
}

impl std::error::Error for RecordError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::WorkDir { source, .. }
            | Self::CreateRaw { source, .. }
            | Self::ResolveDir { source, .. }
            | Self::DumpDir { source, .. }
            | Self::OpenDumpDir { source, .. }
            | Self::Rename { source, .. }
            | Self::RunInject(source)
            | Self::WaitInject(source) => Some(source),
            // Display shows the inner error's message; its cause follows.
            Self::TimeConv(error) => std::error::Error::source(error),
            // Display gives the library's message in this command's names; its cause follows.
            Self::Output(error) => std::error::Error::source(error),
            Self::AgentPathEquals { .. } | Self::ToolOptionsPath { .. } | Self::InjectFailed(_) => {
                None
            }
        }
    }
}

/// Why `perfclock serve` failed: `Display` says what failed, the cause is its `source()`
/// (printed once, by [`chain`](crate::output::chain)).
#[derive(Debug)]
pub(crate) enum ServeError {
    /// The SIGINT/SIGTERM handlers could not be installed.
    Signals(io::Error),
    /// The server failed: its error says which step.
    Server(perfclock_serve::ServeError),
}

impl From<perfclock_serve::ServeError> for ServeError {
    fn from(error: perfclock_serve::ServeError) -> Self {
        ServeError::Server(error)
    }
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Signals(_) => f.write_str("cannot install the SIGINT/SIGTERM handlers"),
            ServeError::Server(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Signals(error) => Some(error),
            // Transparent: the server's own message is this one's.
            ServeError::Server(error) => error.source(),
        }
    }
}
