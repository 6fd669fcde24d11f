//! The JVM registry of `perfclock record -p`/`-a`: which processes of a scope are HotSpot JVMs,
//! and perfclock's agent attached to each through HotSpot's dynamic attach ([`attach`]), writing
//! its jitdump into a directory of its own under the recording's dump root; [`Watcher`] finds
//! JVMs that start during the recording by polling `/proc`.
//!
//! The rest of the crate loads any agent the way jattach does; this module is perfclock's
//! agent's side: its options (`jitdump=`, `stop`) and its return codes ([`agent_failure`],
//! [`attach_when_live`]) are `perfclock_agent_codes`'s. What happened to each process is
//! returned ([`Outcome`]); printing it is the caller's.
//!
//! The dump root is `OUT.jit-XXXXXX`, mode 0711 and perfclock's: nobody else can create or list
//! anything in it. Each JVM's directory `pid-<PID>` in it is created there and, as root, given
//! to the JVM's effective user (mode 0700), so the agent can write, and no other user can plant
//! files in it. After the recording [`lock_down`] takes it back.

mod error;
mod when_live;

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

use perfclock_os::peer::effective_uid;
use perfclock_os::private_dir::PrivateDir;
use perfclock_os::untrusted_file::Root;

pub use error::JvmError;
pub use when_live::{agent_failure, attach_when_live};

use crate::procfs::{self, ProcStatus, Vm};
use crate::{Agent, AttachError};

/// How often `-a` looks for new processes: a JVM is attached within this (plus the attach,
/// which waits until the JVM catches SIGQUIT) after it maps libjvm.so.
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A process whose executable has not changed for this long without mapping libjvm.so is not
/// a JVM (the java launcher maps it within milliseconds of its exec).
const UNDECIDED_FOR: Duration = Duration::from_secs(3);

/// What happened to one process.
#[derive(Debug)]
pub enum Outcome {
    /// The agent writes its jitdump into `dir` (the JVM's path: a private directory in its own
    /// `/tmp` for a JVM in another mount namespace, `private`); its session ends with a `stop`
    /// to `agent`.
    Attached {
        /// The JVM's pid.
        pid: u32,
        /// Where the agent writes its jitdump, as perfclock sees it.
        dir: PathBuf,
        /// The agent as the JVM opened it, which the session's `stop` goes to.
        agent: Agent,
        /// The private directory in a containerised JVM's `/tmp`, to remove once the session
        /// ended.
        private: Option<PrivateDir>,
    },
    /// Not a HotSpot JVM: recorded without an agent.
    NotJvm {
        /// The process's pid.
        pid: u32,
        /// Its name (`/proc/PID/status`'s `Name`).
        name: String,
    },
    /// A HotSpot JVM that could not be attached: recorded without its JIT names.
    Failed {
        /// The JVM's pid.
        pid: u32,
        /// Why.
        error: JvmError,
    },
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
    effective_uid() == 0
}

/// Attaches the agent to `pid` if it is a HotSpot JVM, its dump going under `root`, the attach
/// held to `timeout`; a JVM in another mount namespace (a container) gets the agent and its dump
/// directory in a private directory of its own `/tmp` instead, so nothing of the host need be
/// visible to it.
pub fn attach(pid: u32, agent: &Path, root: &Path, timeout: Duration) -> Outcome {
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
    match attach_when_live(pid, &agent, &options, timeout) {
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
///
/// # Errors
/// As [`attach_agent`](crate::attach_agent), for a process that is still there.
pub fn stop_session(pid: u32, agent: &Agent, timeout: Duration) -> Result<(), AttachError> {
    let stop = std::ffi::OsStr::new(perfclock_agent_codes::options::STOP);
    match crate::attach_agent(pid, agent.clone(), stop, timeout) {
        Ok(_) => Ok(()),
        Err(_) if !Path::new(&format!("/proc/{pid}")).exists() => Ok(()),
        Err(error) => Err(error),
    }
}

/// After the recording: `dir` becomes perfclock's again (0755), so the JVM's user can no longer
/// create files in it, and any `jitted-*` entry (which only `perf inject --jit`, run as
/// perfclock next, creates) is removed: none is followed or overwritten by perf inject.
///
/// # Errors
/// The first chown, chmod, listing or removal that failed.
pub fn lock_down(dir: &Path) -> io::Result<()> {
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
#[derive(Debug)]
pub struct Watcher {
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

impl Seen {
    fn new(exe: Option<PathBuf>, now: Instant) -> Self {
        Seen {
            exe,
            since: now,
            decided: false,
        }
    }

    /// Looks at the pid again, its executable now `exe`: a new one (a fork that exec'd) is
    /// judged afresh. Whether it is still to be decided.
    fn look(&mut self, exe: Option<PathBuf>, now: Instant) -> bool {
        if self.exe != exe {
            *self = Seen::new(exe, now);
        }
        !self.decided
    }

    /// No libjvm.so mapped (or no maps) at `now`: decided, not a JVM, once its executable has
    /// stayed the same for [`UNDECIDED_FOR`].
    fn not_java(&mut self, now: Instant) {
        self.decided = now.saturating_duration_since(self.since) > UNDECIDED_FOR;
    }
}

/// What the watcher attaches.
struct Scope {
    agent: PathBuf,
    root: PathBuf,
    skip: Vec<u32>,
    timeout: Duration,
}

impl Watcher {
    /// Starts the thread; `skip` are pids never attached (perfclock, perf); `report` is called
    /// with each outcome as it happens; each attach is held to `timeout`.
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn start(
        agent: PathBuf,
        root: PathBuf,
        skip: Vec<u32>,
        report: fn(&Outcome) -> bool,
        timeout: Duration,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let scope = Scope {
            agent,
            root,
            skip,
            timeout,
        };
        let thread = thread::Builder::new()
            .name("perfclock-jvms".to_owned())
            .spawn(move || watch(&scope, &stopping, report))?;
        Ok(Self { stop, thread })
    }

    /// Stops the thread (after the attach under way, if any) and returns what it did.
    pub fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

fn watch(scope: &Scope, stop: &AtomicBool, report: fn(&Outcome) -> bool) -> Vec<Outcome> {
    let mut seen: HashMap<u32, Seen> = HashMap::new();
    let mut outcomes = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let Ok(entries) = fs::read_dir("/proc") else {
            break;
        };
        let pids: HashSet<u32> = entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .filter(|pid| !scope.skip.contains(pid))
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
            let now = Instant::now();
            let entry = seen
                .entry(pid)
                .or_insert_with(|| Seen::new(exe.clone(), now));
            if !entry.look(exe, now) {
                continue;
            }
            match proc_vm(pid) {
                Ok(Vm::HotSpot) | Ok(Vm::OpenJ9) => {
                    entry.decided = true;
                    let outcome = attach(pid, &scope.agent, &scope.root, scope.timeout);
                    report(&outcome);
                    outcomes.push(outcome);
                }
                // Kernel threads and processes that exited have no maps to read.
                Ok(Vm::NotJava) | Err(_) => entry.not_java(Instant::now()),
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

    /// A JVM's directory is 0700 (the JVM's user alone writes its dump), whatever the umask.
    #[test]
    fn a_jvm_directory_is_private_to_its_user() {
        let root = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        let dir = jvm_dir(root.path(), pid, &proc_status(pid).unwrap()).unwrap();
        let meta = fs::metadata(&dir).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o700);
        assert_eq!(meta.uid(), effective_uid());
    }

    /// No directory where the root cannot hold one: the error names the path.
    #[test]
    fn a_missing_root_is_a_create_error() {
        let root = tempfile::tempdir().unwrap();
        let gone = root.path().join("gone");
        let pid = std::process::id();
        let error = jvm_dir(&gone, pid, &proc_status(pid).unwrap()).unwrap_err();
        assert!(matches!(&error, JvmError::CreateDir { dir, .. } if dir.starts_with(&gone)));
        assert_eq!(
            error.to_string(),
            format!(
                "cannot create {}",
                gone.join(format!("pid-{pid}")).display()
            )
        );
    }

    /// After the recording the directory is perfclock's, 0755, and holds no `jitted-*` entry
    /// (file, link or directory) for perf inject to follow; the dumps stay.
    #[test]
    fn lock_down_takes_the_directory_back_and_clears_jitted_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        fs::set_permissions(path, fs::Permissions::from_mode(0o777)).unwrap();
        fs::write(path.join("jit-42.dump"), b"dump").unwrap();
        fs::write(path.join("jitted-42-1.so"), b"planted").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", path.join("jitted-42-2.so")).unwrap();
        fs::create_dir(path.join("jitted-42-3.so")).unwrap();
        fs::write(path.join("jitted-42-3.so/inner"), b"planted").unwrap();
        lock_down(path).unwrap();
        let meta = fs::metadata(path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o755);
        if effective_uid() == 0 {
            assert_eq!((meta.uid(), meta.gid()), (0, 0));
        }
        let mut left: Vec<String> = fs::read_dir(path)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["jit-42.dump"]);
        assert!(Path::new("/etc/passwd").exists());
    }

    /// A directory that is not there cannot be locked down: an error, not a silent success.
    #[test]
    fn lock_down_of_a_missing_directory_fails() {
        let dir = tempfile::tempdir().unwrap();
        let error = lock_down(&dir.path().join("gone")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    /// A process that maps no libjvm.so is judged not a JVM only once its executable has stayed
    /// the same for UNDECIDED_FOR; an exec starts the wait over.
    #[test]
    fn not_a_jvm_only_after_undecided_for() {
        let start = Instant::now();
        let exe = Some(PathBuf::from("/usr/bin/sh"));
        let mut seen = Seen::new(exe.clone(), start);
        seen.not_java(start + UNDECIDED_FOR / 2);
        assert!(seen.look(exe.clone(), start + UNDECIDED_FOR / 2));
        seen.not_java(start + UNDECIDED_FOR);
        assert!(seen.look(exe.clone(), start + UNDECIDED_FOR));
        let later = start + UNDECIDED_FOR + Duration::from_millis(1);
        seen.not_java(later);
        assert!(!seen.look(exe, later));
        // The shell execs java: looked at again, with a wait of its own.
        let java = Some(PathBuf::from("/usr/bin/java"));
        assert!(seen.look(java.clone(), later));
        seen.not_java(later + Duration::from_millis(1));
        assert!(seen.look(java, later + Duration::from_millis(1)));
    }

    /// This test process maps no libjvm.so: not a JVM, named, and never signalled.
    #[test]
    fn a_process_without_libjvm_is_not_a_jvm() {
        let root = tempfile::tempdir().unwrap();
        let pid = std::process::id();
        let outcome = attach(pid, Path::new("/nonexistent"), root.path(), SHORT);
        let name = proc_status(pid).unwrap().name;
        assert!(
            matches!(&outcome, Outcome::NotJvm { pid: p, name: n } if *p == pid && *n == name),
            "{outcome:?}"
        );
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0);
    }

    /// A pid no process has fails at its status file, and nothing is created.
    #[test]
    fn a_missing_process_fails_at_its_status() {
        let root = tempfile::tempdir().unwrap();
        let pid = free_pid();
        let outcome = attach(pid, Path::new("/nonexistent"), root.path(), SHORT);
        let Outcome::Failed { pid: failed, error } = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(failed, pid);
        assert_eq!(error.to_string(), format!("cannot read /proc/{pid}/status"));
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0);
    }

    /// A session in a process that has exited needs no ending; one in a live process that is
    /// not a JVM is an error.
    #[test]
    fn stop_session_is_done_only_for_a_process_that_exited() {
        let agent = Agent::in_jvm(PathBuf::from("/nonexistent"), (0, 0));
        stop_session(free_pid(), &agent, SHORT).unwrap();
        assert!(stop_session(std::process::id(), &agent, SHORT).is_err());
    }

    /// Code 102 of perfclock's agent is read back from the JVM's answer; other failures are not
    /// the agent's.
    #[test]
    fn agent_failure_reads_only_the_agents_codes() {
        let code = perfclock_agent_codes::AgentFailure::NoJvmti.code();
        let failed = AttachError::Answer(crate::AnswerError::AgentFailed {
            return_code: code,
            message: String::new(),
        });
        assert_eq!(
            agent_failure(&failed),
            Some(perfclock_agent_codes::AgentFailure::NoJvmti)
        );
        let other = AttachError::Answer(crate::AnswerError::AgentFailed {
            return_code: 1,
            message: String::new(),
        });
        assert_eq!(agent_failure(&other), None);
        let gone = AttachError::Process(crate::ProcessError::NoSuchProcess { pid: 1 });
        assert_eq!(agent_failure(&gone), None);
    }

    const SHORT: Duration = Duration::from_secs(2);

    /// A pid no process has now: a child that has been reaped.
    fn free_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }
}
