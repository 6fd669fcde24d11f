//! The JVMs `perfclock record -p`/`-a` profiles: each HotSpot JVM gets perfclock's agent through
//! HotSpot's dynamic attach (`perfclock-attach`), writing its jitdump into a directory of its own
//! under the recording's dump root; `-a` finds JVMs that start during the recording by polling
//! `/proc` ([`Watcher`]).
//!
//! The dump root is `OUT.jit-XXXXXX`, mode 0711 and perfclock's: nobody else can create or list
//! anything in it. Each JVM's directory `pid-<PID>` in it is created there and, as root, given
//! to the JVM's effective user (mode 0700), so the agent can write, and no other user can plant
//! files in it. After the recording [`lock_down`] takes it back.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use perfclock_attach::procfs::{self, ProcStatus, Vm};
use perfclock_attach::{Agent, AttachError};
use perfclock_os::private_dir::PrivateDir;
use perfclock_os::untrusted_file::Root;

use crate::agent::attach_when_live;
use crate::attach::DEFAULT_TIMEOUT_SECS;
use crate::children;
use crate::error::JvmError;

/// How often `-a` looks for new processes: a JVM is attached within this (plus the attach,
/// which waits until the JVM catches SIGQUIT) after it maps libjvm.so.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A process whose executable has not changed for this long without mapping libjvm.so is not
/// a JVM (the java launcher maps it within milliseconds of its exec).
const UNDECIDED_FOR: Duration = Duration::from_secs(3);

/// One attach's bound.
const ATTACH_TIMEOUT: Duration = Duration::from_millis((DEFAULT_TIMEOUT_SECS * 1000.0) as u64);

/// What happened to one process.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The agent writes its jitdump into `dir` (the JVM's path: a private directory in its own
    /// `/tmp` for a JVM in another mount namespace, `private`); its session ends with a `stop`
    /// to `agent`.
    Attached {
        pid: u32,
        dir: PathBuf,
        agent: Agent,
        private: Option<PrivateDir>,
    },
    /// Not a HotSpot JVM: recorded without an agent.
    NotJvm { pid: u32, name: String },
    /// A HotSpot JVM that could not be attached: recorded without its JIT names.
    Failed { pid: u32, error: JvmError },
}

fn proc_status(pid: u32) -> io::Result<ProcStatus> {
    let text = fs::read_to_string(format!("/proc/{pid}/status"))?;
    ProcStatus::parse(&text).ok_or_else(|| io::Error::other("unreadable /proc/PID/status"))
}

fn proc_vm(pid: u32) -> io::Result<Vm> {
    let maps = fs::read(format!("/proc/{pid}/maps"))?;
    Ok(procfs::vm_of_maps(&String::from_utf8_lossy(&maps)))
}

/// Directories tried for one pid: `pid-<pid>`, then `pid-<pid>-2`, ... for JVMs that reuse
/// the pid of an earlier JVM of the same recording (the root is perfclock's alone, so a name
/// there is taken only by such a JVM).
const NAMES_PER_PID: u32 = 1000;

/// Creates `root/pid-<pid>` (or, if an earlier JVM with this pid has it, the first free
/// `pid-<pid>-<n>`) for the JVM's effective user (0700, theirs when perfclock is root) and
/// checks the JVM sees the same directory at that path (a JVM in a container opens it in its
/// own mount namespace).
fn jvm_dir(root: &Path, pid: u32, status: &ProcStatus) -> Result<PathBuf, JvmError> {
    let mut dir = root.join(format!("pid-{pid}"));
    let mut taken = 1;
    loop {
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => break,
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && taken < NAMES_PER_PID => {
                taken += 1;
                dir = root.join(format!("pid-{pid}-{taken}"));
            }
            Err(source) => return Err(JvmError::CreateDir { dir, source }),
        }
    }
    match give_and_check(&dir, pid, status) {
        Ok(()) => Ok(dir),
        Err(error) => {
            let _ = fs::remove_dir(&dir);
            Err(error)
        }
    }
}

/// [`jvm_dir`]'s steps once `dir` exists: the JVM's user gets it, and the JVM sees it.
fn give_and_check(dir: &Path, pid: u32, status: &ProcStatus) -> Result<(), JvmError> {
    if is_root() {
        std::os::unix::fs::chown(dir, Some(status.euid), Some(status.egid)).map_err(|source| {
            JvmError::GiveDir {
                dir: dir.to_owned(),
                uid: status.euid,
                source,
            }
        })?;
    }
    let ours = fs::metadata(dir).map_err(|source| JvmError::CreateDir {
        dir: dir.to_owned(),
        source,
    })?;
    let in_jvm = Path::new(&format!("/proc/{pid}/root")).join(dir.strip_prefix("/").unwrap_or(dir));
    match fs::metadata(in_jvm) {
        Ok(theirs) if theirs.dev() == ours.dev() && theirs.ino() == ours.ino() => Ok(()),
        _ => Err(JvmError::NotVisible {
            dir: dir.to_owned(),
        }),
    }
}

fn is_root() -> bool {
    children::effective_uid() == 0
}

/// Attaches the agent to `pid` if it is a HotSpot JVM, its dump going under `root`; a JVM in
/// another mount namespace (a container) gets the agent and its dump directory in a private
/// directory of its own `/tmp` instead ([`in_container`]), so nothing of the host need be
/// visible to it.
pub(crate) fn attach(pid: u32, agent: &Path, root: &Path) -> Outcome {
    let failed = |error: JvmError| Outcome::Failed { pid, error };
    let proc_error = |file: &'static str| {
        move |source| JvmError::Proc {
            path: format!("/proc/{pid}/{file}"),
            source,
        }
    };
    let status = match proc_status(pid) {
        Ok(status) => status,
        Err(error) => return failed(proc_error("status")(error)),
    };
    match proc_vm(pid) {
        Ok(Vm::HotSpot) => {}
        Ok(Vm::NotJava) => {
            return Outcome::NotJvm {
                pid,
                name: status.name,
            }
        }
        Ok(Vm::OpenJ9) => return failed(JvmError::OpenJ9),
        Err(error) => return failed(proc_error("maps")(error)),
    }
    let placed = if Root::of_process(pid) == Root::Here {
        jvm_dir(root, pid, &status).and_then(|dir| {
            let agent = Agent::here(agent).map_err(JvmError::Attach);
            agent.map(|agent| (dir, agent, None))
        })
    } else {
        in_container(pid, agent, &status)
    };
    let (dir, agent, private) = match placed {
        Ok(placed) => placed,
        Err(error) => return failed(error),
    };
    let mut options = OsString::from(format!("{}=", perfclock_agent_codes::options::JITDUMP));
    options.push(&dir);
    match attach_when_live(pid, &agent, &options, ATTACH_TIMEOUT) {
        Ok(_) => Outcome::Attached {
            pid,
            dir,
            agent,
            private,
        },
        Err(error) => {
            match private {
                Some(private) => {
                    let _ = private.remove();
                }
                None => {
                    let _ = fs::remove_dir(&dir);
                }
            }
            failed(JvmError::Attach(error))
        }
    }
}

/// For a JVM in another mount namespace: a private directory in its `/tmp`
/// (`perfclock_os::private_dir`) holding a copy of the agent, given to the JVM's user so the
/// agent can write its dump there. The dump watch holds the dump while the JVM lives; the
/// directory goes when the session ends.
fn in_container(
    pid: u32,
    agent: &Path,
    status: &ProcStatus,
) -> Result<(PathBuf, Agent, Option<PrivateDir>), JvmError> {
    let private = PrivateDir::create(Root::Process(pid), Path::new("/tmp"), ".perfclock-")
        .map_err(|source| JvmError::ContainerDir { pid, source })?;
    let placed = (|| {
        let mut library = fs::File::open(agent)?;
        let id = private.write_copy(AGENT_FILE, &mut library, 0o644)?;
        if is_root() {
            private.give_to(status.euid, status.egid)?;
        }
        Ok(id)
    })();
    match placed {
        Ok(id) => {
            let agent = Agent::in_jvm(private.path().join(AGENT_FILE), id);
            Ok((private.path().to_owned(), agent, Some(private)))
        }
        Err(source) => {
            let _ = private.remove();
            Err(JvmError::ContainerDir { pid, source })
        }
    }
}

/// The agent's copy's name in a container's private directory.
const AGENT_FILE: &str = "libperfclock_agent.so";

/// Ends the agent's session in `pid` (the attach request `stop`): its jitdump is finished and
/// closed and the JVM stops posting compiled-code events to the agent, so nothing writes into
/// the recording's directory after the recording. A JVM that has exited needs nothing.
pub(crate) fn stop_session(pid: u32, agent: &Agent) -> Result<(), AttachError> {
    let stop = std::ffi::OsStr::new(perfclock_agent_codes::options::STOP);
    match perfclock_attach::attach_agent(pid, agent.clone(), stop, ATTACH_TIMEOUT) {
        Ok(_) => Ok(()),
        Err(_) if !Path::new(&format!("/proc/{pid}")).exists() => Ok(()),
        Err(error) => Err(error),
    }
}

/// After the recording: `dir` becomes perfclock's again (0755), so the JVM's user can no longer
/// create files in it, and any `jitted-*` entry (which only `perf inject --jit`, run as
/// perfclock next, creates) is removed: none is followed or overwritten by perf inject.
pub(crate) fn lock_down(dir: &Path) -> io::Result<()> {
    if is_root() {
        std::os::unix::fs::chown(dir, Some(0), Some(0))?;
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    for entry in fs::read_dir(dir)?.flatten() {
        if entry.file_name().to_string_lossy().starts_with("jitted-") {
            let path = entry.path();
            match fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => fs::remove_dir_all(&path)?,
                _ => fs::remove_file(&path)?,
            }
        }
    }
    Ok(())
}

/// `-a`: attaches every HotSpot JVM on the machine, and each that starts, until stopped.
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<Vec<Outcome>>,
}

/// What the watcher knows of a pid.
struct Seen {
    /// `/proc/PID/exe` when last looked at (a fork that execs java changes it).
    exe: Option<PathBuf>,
    /// When the executable was first seen.
    since: Instant,
    /// Attached, failed, or judged not a JVM: never looked at again.
    decided: bool,
}

impl Watcher {
    /// Starts the thread; `skip` are pids never attached (perfclock, perf); `report` is called
    /// with each outcome as it happens.
    pub(crate) fn start(
        agent: PathBuf,
        root: PathBuf,
        skip: Vec<u32>,
        report: fn(&Outcome) -> bool,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = thread::Builder::new()
            .name("perfclock-jvms".to_owned())
            .spawn(move || watch(&agent, &root, &skip, &stopping, report))?;
        Ok(Self { stop, thread })
    }

    /// Stops the thread (after the attach under way, if any) and returns what it did.
    pub(crate) fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

fn watch(
    agent: &Path,
    root: &Path,
    skip: &[u32],
    stop: &AtomicBool,
    report: fn(&Outcome) -> bool,
) -> Vec<Outcome> {
    let mut seen: HashMap<u32, Seen> = HashMap::new();
    let mut outcomes = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let Ok(entries) = fs::read_dir("/proc") else {
            break;
        };
        let pids: HashSet<u32> = entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .filter(|pid| !skip.contains(pid))
            .collect();
        seen.retain(|pid, _| pids.contains(pid));
        let mut pids: Vec<u32> = pids.into_iter().collect();
        // Oldest first: the JVMs running at the start before those that start later.
        pids.sort_unstable();
        for pid in pids {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let exe = fs::read_link(format!("/proc/{pid}/exe")).ok();
            let entry = seen.entry(pid).or_insert_with(|| Seen {
                exe: exe.clone(),
                since: Instant::now(),
                decided: false,
            });
            if entry.exe != exe {
                *entry = Seen {
                    exe,
                    since: Instant::now(),
                    decided: false,
                };
            }
            if entry.decided {
                continue;
            }
            match proc_vm(pid) {
                Ok(Vm::HotSpot) | Ok(Vm::OpenJ9) => {
                    entry.decided = true;
                    let outcome = attach(pid, agent, root);
                    report(&outcome);
                    outcomes.push(outcome);
                }
                // Kernel threads and processes that exited have no maps to read.
                Ok(Vm::NotJava) | Err(_) => entry.decided = entry.since.elapsed() > UNDECIDED_FOR,
            }
        }
        thread::sleep(POLL_INTERVAL);
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JVM that reuses an earlier JVM's pid during one recording gets a directory of its own
    /// (the earlier one's keeps its dump).
    #[test]
    fn a_reused_pid_gets_a_directory_of_its_own() {
        let root = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        let status = proc_status(pid).unwrap();
        let first = jvm_dir(root.path(), pid, &status).unwrap();
        fs::write(first.join("jit-1.dump"), b"the first JVM's").unwrap();
        let second = jvm_dir(root.path(), pid, &status).unwrap();
        let third = jvm_dir(root.path(), pid, &status).unwrap();
        assert_eq!(first, root.path().join(format!("pid-{pid}")));
        assert_eq!(second, root.path().join(format!("pid-{pid}-2")));
        assert_eq!(third, root.path().join(format!("pid-{pid}-3")));
        assert_eq!(
            fs::read(first.join("jit-1.dump")).unwrap(),
            b"the first JVM's"
        );
    }
}
