//! Getting perfclock's JVMTI agent into the recorded JVMs and their jitdumps somewhere safe:
//! which agent, the dump directories and their modes, `JAVA_TOOL_OPTIONS` for a launched
//! command, the attaches of `-p` (and the messages of `-a`'s watcher), and ending the agents'
//! sessions and taking the directories back once the recording is over.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use perfclock_cli::RecordArgs;

use super::target::Target;
use super::work_dir::{file_name, parent_dir};
use super::{fail, Failure, NAME};
use crate::agent_path;
use crate::error::RecordError;
use crate::output::{chain, errln};
use perfclock_attach::{jvms, Agent, Remedy, DEFAULT_TIMEOUT};
use perfclock_os::private_dir::PrivateDir;

/// `OUT.jit-XXXXXX` (mkdtemp), mode 0711: the JVMs' jitdump directories are made inside it,
/// where no other user can create or list anything. Kept: the output's `jitted-*.so` are
/// written there by `perf inject --jit` and perf report reads them there.
pub(super) fn make_dump_root(output: &Path) -> Result<PathBuf, RecordError> {
    let dir = parent_dir(output)
        .canonicalize()
        .map_err(|source| RecordError::ResolveDir {
            output: output.to_owned(),
            source,
        })?;
    let created = tempfile::Builder::new()
        .prefix(&format!("{}.jit-", file_name(output)))
        .permissions(fs::Permissions::from_mode(0o711))
        .tempdir_in(&dir)
        .map_err(|source| RecordError::DumpDir { dir, source })?;
    Ok(created.keep())
}

/// The launched command's jitdump directory: a random name (128 bits) in the dump root, mode
/// 1777. The command may switch users (`setpriv`, `sudo -u`, a service's own drop of root), so
/// every user the command runs as must be able to create its dump there; a user outside the
/// command cannot, for want of the name: the root (0711) cannot be listed, and the name is given
/// only to the command (its environment). The sticky bit keeps one user's files from another's
/// renames and removals, and lets the kernel refuse to follow a link another user plants there
/// (protected_symlinks) when perf inject writes into it.
pub(super) fn make_command_dump_dir(root: &Path) -> Result<PathBuf, RecordError> {
    let created = tempfile::Builder::new()
        .prefix("")
        .rand_bytes(22)
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir_in(root)
        .map_err(|source| RecordError::DumpDir {
            dir: root.to_owned(),
            source,
        })?;
    let path = created.keep();
    // After creation: mkdir's mode goes through the umask.
    match fs::set_permissions(&path, fs::Permissions::from_mode(0o1777)) {
        Ok(()) => Ok(path),
        Err(source) => Err(RecordError::OpenDumpDir { path, source }),
    }
}

/// `JAVA_TOOL_OPTIONS` with the agent appended to the user's value.
pub(super) fn java_tool_options(
    current: Option<OsString>,
    agent: &Path,
    dump_dir: &Path,
) -> Result<OsString, RecordError> {
    // HotSpot ends -agentpath's path at the first `=` (the options follow it).
    if agent.as_os_str().as_bytes().contains(&b'=') {
        return Err(RecordError::AgentPathEquals {
            agent: agent.to_owned(),
        });
    }
    // The JVM splits JAVA_TOOL_OPTIONS at white space, and the agent its options at commas.
    for (what, path) in [("agent", agent), ("jitdump directory", dump_dir)] {
        let text = path.to_string_lossy();
        if text.contains(|c: char| c.is_whitespace() || c == ',' || c == '"' || c == '\'') {
            return Err(RecordError::ToolOptionsPath {
                what,
                path: path.to_owned(),
            });
        }
    }
    let mut value = current.unwrap_or_default();
    if !value.is_empty() {
        value.push(" ");
    }
    value.push("-agentpath:");
    value.push(agent.as_os_str());
    value.push(format!("={}=", perfclock_agent_codes::options::JITDUMP));
    value.push(dump_dir.as_os_str());
    Ok(value)
}

/// The agent to use, unless `--no-java-agent`. Where none is installed beside perfclock (and
/// none is named), a command is recorded without it (`Err`: why, for a warning if a JVM
/// starts); `-p` and `-a`, which are for JVMs among others, need it.
pub(super) fn agent(
    options: &RecordArgs,
    target: &Target<'_>,
) -> Result<Result<Option<PathBuf>, String>, Failure> {
    if options.no_java_agent {
        return Ok(Ok(None));
    }
    match &options.agent {
        Some(path) => {
            let agent = path
                .canonicalize()
                .map_err(|e| fail(format!("--agent {}: {e}", path.display())))?;
            Ok(Ok(Some(agent)))
        }
        None => match (agent_path::find(), target) {
            (Ok(agent), _) => Ok(Ok(Some(agent))),
            (Err(why), Target::Command(_)) => Ok(Err(why)),
            (Err(why), _) => Err(fail(format!(
                "{why}; or pass --agent PATH, or --no-java-agent"
            ))),
        },
    }
}

/// The dump directories and agent sessions a recording started. Released ([`Dumps::release`])
/// once, on every way out of [`record`](super::record): explicitly after the recording, or on
/// drop when an error or a signal returns early (an attach failure, SIGINT while attaching), so
/// no JVM keeps writing and no directory stays writable by the JVMs' users.
pub(super) struct Dumps {
    pub(super) root: Option<PathBuf>,
    pub(super) dirs: Vec<PathBuf>,
    /// The JVMs `-p`/`-a` attached, whose sessions end with the recording, each with the agent
    /// its `stop` request goes to.
    pub(super) attached: Vec<(u32, Agent)>,
    /// The private directories put into containerised JVMs' `/tmp`, removed once their
    /// sessions ended.
    pub(super) private: Vec<PrivateDir>,
}

impl Drop for Dumps {
    fn drop(&mut self) {
        self.release();
    }
}

impl Dumps {
    /// Reports `outcome` ([`report`]) and keeps it; whether it is a failure to attach.
    fn add(&mut self, outcome: jvms::Outcome) -> bool {
        let failed = report(&outcome);
        self.keep(outcome);
        failed
    }

    /// Keeps an attached JVM's directory, pid and agent.
    pub(super) fn keep(&mut self, outcome: jvms::Outcome) {
        if let jvms::Outcome::Attached {
            pid,
            dir,
            agent,
            private,
        } = outcome
        {
            match private {
                Some(private) => self.private.push(private),
                None => self.dirs.push(dir),
            }
            self.attached.push((pid, agent));
        }
    }

    /// Ends the agent's session in every JVM attached for this recording (their dumps are
    /// closed and their directories stop growing), then takes the directories back: the JVMs'
    /// users can no longer write into them, and empty ones go. What it released is forgotten,
    /// so a second call does nothing.
    pub(super) fn release(&mut self) {
        for (pid, agent) in std::mem::take(&mut self.attached) {
            if let Err(error) = jvms::stop_session(pid, &agent, DEFAULT_TIMEOUT) {
                errln!(
                    "{NAME}: warning: cannot end the agent's session in JVM {pid}: {}",
                    chain(&error)
                );
            }
        }
        for private in std::mem::take(&mut self.private) {
            let path = private.path().to_owned();
            if let Err(error) = private.remove() {
                errln!(
                    "{NAME}: warning: cannot remove {} from a container's /tmp: {error}",
                    path.display()
                );
            }
        }
        for dir in std::mem::take(&mut self.dirs) {
            if let Err(error) = jvms::lock_down(&dir) {
                errln!(
                    "{NAME}: warning: cannot take back {}: {error}",
                    dir.display()
                );
            }
            let _ = fs::remove_dir(&dir);
        }
        if let Some(root) = self.root.take() {
            let _ = fs::remove_dir(root);
        }
    }
}

/// The attaches of `-p`, before recording: an error unless `--allow-unattached`.
pub(super) fn attach_pids(
    pids: &[u32],
    agent: &Path,
    dumps: &mut Dumps,
    allow_unattached: bool,
) -> Result<(), Failure> {
    let root = dumps.root.clone().unwrap_or_default();
    let mut failed = Vec::new();
    for &pid in pids {
        if dumps.add(jvms::attach(pid, agent, &root, DEFAULT_TIMEOUT)) {
            failed.push(pid.to_string());
        }
    }
    if failed.is_empty() || allow_unattached {
        return Ok(());
    }
    Err(fail(format!(
        "could not attach JVM(s) {} (see above): nothing recorded; pass --allow-unattached to \
         record them without their JIT code's names",
        failed.join(", ")
    )))
}

/// Says what happened to one process `-p` or `-a` looked at; whether it could not be attached.
pub(super) fn report(outcome: &jvms::Outcome) -> bool {
    match outcome {
        jvms::Outcome::Attached { pid, dir, .. } => {
            errln!(
                "{NAME}: attached JVM {pid}: its jitdump goes to {}",
                dir.display()
            );
            false
        }
        jvms::Outcome::NotJvm { pid, name } => {
            errln!("{NAME}: {pid} ({name}) is not a HotSpot JVM: recorded without an agent");
            false
        }
        jvms::Outcome::Failed { pid, error } => {
            errln!("{NAME}: cannot attach JVM {pid}: {}", failure_line(error));
            true
        }
    }
}

/// Why a JVM was not attached, with the flag to change where another agent would help.
fn failure_line(error: &jvms::JvmError) -> String {
    match error.remedy() {
        Some(Remedy::AnotherAgent) => format!("{} (the agent is --agent PATH)", chain(error)),
        _ => chain(error),
    }
}

/// `-a`'s list, at the end, of the JVMs recorded without their JIT code's names.
pub(super) fn list_unattached(outcomes: &[jvms::Outcome]) {
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            jvms::Outcome::Failed { pid, error } => {
                Some(format!("  {pid}: {}", failure_line(error)))
            }
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        errln!(
            "{NAME}: {} JVM(s) could not be attached; their JIT code is not named:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_the_agent_to_the_users_java_tool_options() {
        let value = java_tool_options(
            Some("-Xmx1g".into()),
            Path::new("/a/libperfclock_agent.so"),
            Path::new("/d/perf.data.jit-x"),
        )
        .unwrap();
        assert_eq!(
            value,
            "-Xmx1g -agentpath:/a/libperfclock_agent.so=jitdump=/d/perf.data.jit-x"
        );
        let error =
            java_tool_options(None, Path::new("/a b/agent.so"), Path::new("/d")).unwrap_err();
        assert!(error.to_string().contains("--no-java-agent"), "{error}");
    }
}
