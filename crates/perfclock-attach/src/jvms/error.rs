//! Why the registry could not attach a JVM ([`JvmError`]): the process's files, its dump
//! directory, a container's private directory, or the attach itself.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::agent_failure;
use crate::{AttachError, Remedy};

/// Why [`attach`](super::attach) could not attach a HotSpot JVM: it is recorded without its JIT
/// names.
#[derive(Debug)]
#[non_exhaustive]
pub enum JvmError {
    /// A file of the process in `/proc` could not be read (it exited, or is not ours to read).
    Proc {
        /// `/proc/PID/status` or `/proc/PID/maps`.
        path: String,
        /// The read's error.
        source: io::Error,
    },
    /// An OpenJ9 JVM, whose attach protocol is not HotSpot's.
    OpenJ9,
    /// The JVM's dump directory could not be created.
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// mkdir's (or stat's) error.
        source: io::Error,
    },
    /// The dump directory could not be given to the JVM's user.
    GiveDir {
        /// The directory.
        dir: PathBuf,
        /// The JVM's effective uid.
        uid: u32,
        /// chown's error.
        source: io::Error,
    },
    /// The JVM sees something else at the dump directory's path (another mount namespace).
    NotVisible {
        /// The directory, as perfclock sees it.
        dir: PathBuf,
    },
    /// The private directory in a containerised JVM's `/tmp` could not be made or filled.
    ContainerDir {
        /// The JVM's pid.
        pid: u32,
        /// The error creating, filling or giving the directory.
        source: io::Error,
    },
    /// The attach or the agent failed.
    Attach(AttachError),
}

impl fmt::Display for JvmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Proc { path, .. } => write!(f, "cannot read {path}"),
            Self::OpenJ9 => write!(f, "an OpenJ9 JVM: only HotSpot can be attached"),
            Self::CreateDir { dir, .. } => write!(f, "cannot create {}", dir.display()),
            Self::GiveDir { dir, uid, .. } => {
                write!(f, "cannot give {} to uid {uid}", dir.display())
            }
            Self::NotVisible { dir } => write!(
                f,
                "the jitdump directory {} is not visible at that path in the JVM's mount \
                 namespace (a container): write OUT (-o) in a directory the container mounts \
                 at the same path",
                dir.display()
            ),
            Self::ContainerDir { pid, .. } => write!(
                f,
                "cannot put the agent and a dump directory into JVM {pid}'s /tmp (it runs in \
                 another mount namespace: a container)"
            ),
            Self::Attach(error) => {
                write!(f, "{error}")?;
                if let Some(failure) = agent_failure(error) {
                    write!(
                        f,
                        " (perfclock's agent returns {} when {}: {})",
                        failure.code(),
                        failure.meaning(),
                        failure.fix()
                    )?;
                }
                Ok(())
            }
        }
    }
}

impl JvmError {
    /// The input to change, where changing one can help (the attach's own, see
    /// [`AttachError::remedy`]).
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            Self::Attach(error) => error.remedy(),
            _ => None,
        }
    }
}

impl std::error::Error for JvmError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Proc { source, .. }
            | Self::CreateDir { source, .. }
            | Self::GiveDir { source, .. }
            | Self::ContainerDir { source, .. } => Some(source),
            // Display shows the attach error's own message; its cause follows it.
            Self::Attach(error) => std::error::Error::source(error),
            Self::OpenJ9 | Self::NotVisible { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AnswerError;

    #[test]
    fn an_attach_the_agent_could_not_serve_names_another_agent_as_its_remedy() {
        let not_loaded = JvmError::Attach(
            AnswerError::NotLoaded {
                message: "Agent library was not loaded".to_owned(),
            }
            .into(),
        );
        assert_eq!(not_loaded.remedy(), Some(Remedy::AnotherAgent));
        assert_eq!(JvmError::OpenJ9.remedy(), None);
    }
}
