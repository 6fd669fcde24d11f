//! The first step, done with perfclock's own credentials: is the pid a running HotSpot JVM
//! perfclock may attach to, as which user, and the handles the later steps reach it through
//! (a pidfd, its working and root directories).

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use perfclock_os::peer::{self, PidFd};

use crate::procfs::{self, MapsScan, ProcStatus, Vm};
use crate::{Agent, Deadline, ProcessError};

/// `/proc/PID/status` is read up to this size (it is about 1.5 KiB).
const STATUS_MAX_BYTES: u64 = 64 << 10;

/// `/proc/PID/cmdline` and `environ` are read up to this size: more than the kernel lets
/// `execve` pass (6 MiB, three quarters of the 8 MiB stack limit `_STK_LIM`).
const ARGUMENTS_MAX_BYTES: u64 = 8 << 20;

/// The deadline is checked every this many lines of `/proc/PID/maps`.
const MAPS_LINES_PER_CHECK: usize = 1024;

/// A file of the JVM's, with the path this process opens it by (through a descriptor of ours, so
/// it works whatever this thread's credentials) and the path messages show.
#[derive(Debug, Clone)]
pub(crate) struct JvmPath {
    /// `/proc/self/fd/N/...`: the JVM's directory through our descriptor.
    pub(crate) access: PathBuf,
    /// `/proc/PID/cwd/...` or `/proc/PID/root/...`.
    pub(crate) shown: PathBuf,
}

/// A running HotSpot JVM perfclock may attach to.
#[derive(Debug)]
pub(crate) struct Target {
    /// The pid in perfclock's pid namespace.
    pub(crate) pid: u32,
    /// The pid in the JVM's own pid namespace: the one in its file names.
    pub(crate) ns_pid: u32,
    /// The JVM's effective uid and gid.
    pub(crate) ids: (u32, u32),
    /// As root: the JVM's uid and gid, which the JVM-side steps take on (the JVM checks its
    /// peer's credentials and trusts only trigger files of its own user or root).
    pub(crate) switch_to: Option<(u32, u32)>,
    /// The agent's file is mapped in the JVM already.
    pub(crate) agent_loaded: bool,
    /// Signals reach this process or none.
    pub(crate) pidfd: PidFd,
    cmdline: Vec<u8>,
    environ: Vec<u8>,
    /// The JVM's working directory (`O_PATH`).
    cwd: File,
    /// The JVM's root directory (`O_PATH`).
    root: File,
}

impl Target {
    /// Checks `pid` with perfclock's own credentials: a live process, perfclock allowed to
    /// attach, HotSpot (never signalled otherwise), and whether `agent` is mapped in it.
    pub(crate) fn check(pid: u32, agent: &Agent, deadline: Deadline) -> Result<Self, ProcessError> {
        // Opened first: while it shows the process alive, /proc/PID is this process.
        let pidfd = PidFd::open(pid).map_err(|source| match source.raw_os_error() {
            Some(libc::ESRCH) => ProcessError::NoSuchProcess { pid },
            _ => ProcessError::ProcessHandle { pid, source },
        })?;
        let status = read_status(pid)?;
        let ids = (status.euid, status.egid);
        let switch_to = credentials_for(pid, ids)?;
        let (vm, agent_loaded) = scan_maps(pid, agent, deadline)?;
        match vm {
            Vm::HotSpot => {}
            Vm::OpenJ9 => return Err(ProcessError::OpenJ9 { pid }),
            Vm::NotJava => {
                return Err(ProcessError::NotHotSpot {
                    pid,
                    name: status.name,
                })
            }
        }
        let cmdline = read_proc(pid, "cmdline", ARGUMENTS_MAX_BYTES)?;
        // A JVM whose environment cannot be read is judged by its command line alone.
        let environ = read_proc(pid, "environ", ARGUMENTS_MAX_BYTES).unwrap_or_default();
        let cwd = open_directory(pid, "cwd")?;
        let root = open_directory(pid, "root")?;
        if pidfd.wait_exit(Duration::ZERO).unwrap_or(false) {
            return Err(ProcessError::NoSuchProcess { pid });
        }
        Ok(Self {
            pid,
            ns_pid: status.ns_tgid.unwrap_or(status.tgid),
            ids,
            switch_to,
            agent_loaded,
            pidfd,
            cmdline,
            environ,
            cwd,
            root,
        })
    }

    /// `relative` in the JVM's working directory.
    pub(crate) fn in_cwd(&self, relative: &str) -> JvmPath {
        self.jvm_path(&self.cwd, "cwd", relative)
    }

    /// `relative` (to `/`) in the JVM's mount namespace.
    pub(crate) fn in_root(&self, relative: &str) -> JvmPath {
        self.jvm_path(&self.root, "root", relative)
    }

    fn jvm_path(&self, dir: &File, name: &str, relative: &str) -> JvmPath {
        let relative = relative.trim_start_matches('/');
        JvmPath {
            access: Path::new(&format!("/proc/self/fd/{}", dir.as_raw_fd())).join(relative),
            shown: Path::new(&format!("/proc/{}/{name}", self.pid)).join(relative),
        }
    }

    /// Fails if the JVM runs with an option that disables attaching, reading its option files
    /// (with this thread's credentials: the JVM user's) as the JVM did.
    pub(crate) fn check_options(&self) -> Result<(), ProcessError> {
        let mut read_option_file = |name: &str, max: usize| {
            let path = if name.starts_with('/') {
                self.in_root(name)
            } else {
                self.in_cwd(name)
            };
            read_regular_file(&path.access, max)
        };
        match procfs::attach_blocker(&self.cmdline, &self.environ, &mut read_option_file) {
            Some(blocker) => Err(ProcessError::AttachDisabled {
                pid: self.pid,
                blocker,
            }),
            None => Ok(()),
        }
    }

    /// The JVM's status now.
    pub(crate) fn status(&self) -> Result<ProcStatus, ProcessError> {
        read_status(self.pid)
    }
}

/// Whose credentials the JVM-side steps need: `Some` when perfclock is root and the JVM runs
/// as another user; an error when perfclock is neither root nor the JVM's user.
fn credentials_for(pid: u32, jvm: (u32, u32)) -> Result<Option<(u32, u32)>, ProcessError> {
    let ours = (peer::effective_uid(), peer::effective_gid());
    if ours.0 == 0 {
        // A JVM of root's accepts root; any other takes its own user.
        Ok((jvm != ours && jvm.0 != 0).then_some(jvm))
    } else if jvm == ours {
        Ok(None)
    } else {
        Err(ProcessError::Permission { pid, jvm, ours })
    }
}

/// The VM `/proc/PID/maps` shows and whether it maps `agent`, read line by line.
fn scan_maps(pid: u32, agent: &Agent, deadline: Deadline) -> Result<(Vm, bool), ProcessError> {
    let error = |source: io::Error| proc_error(pid, "maps", source);
    let file = File::open(format!("/proc/{pid}/maps")).map_err(error)?;
    let mut lines = BufReader::with_capacity(64 << 10, file);
    let mut scan = MapsScan::default();
    let mut line = Vec::new();
    for count in 1.. {
        line.clear();
        // A line is at most a page path long: the kernel bounds it.
        if lines.read_until(b'\n', &mut line).map_err(error)? == 0 {
            break;
        }
        scan.line(&String::from_utf8_lossy(&line), agent.maps_identity());
        if count % MAPS_LINES_PER_CHECK == 0 && deadline.remaining().is_none() {
            return Err(ProcessError::Stalled {
                pid,
                step: "reading /proc/PID/maps",
                timeout: deadline.timeout(),
            });
        }
    }
    Ok((scan.vm(), scan.file_mapped()))
}

fn proc_error(pid: u32, what: &'static str, source: io::Error) -> ProcessError {
    match source.raw_os_error() {
        Some(libc::ENOENT | libc::ESRCH) => ProcessError::NoSuchProcess { pid },
        _ => ProcessError::Proc { pid, what, source },
    }
}

fn read_proc(pid: u32, what: &'static str, max: u64) -> Result<Vec<u8>, ProcessError> {
    let mut bytes = Vec::new();
    File::open(format!("/proc/{pid}/{what}"))
        .and_then(|file| file.take(max).read_to_end(&mut bytes))
        .map_err(|source| proc_error(pid, what, source))?;
    Ok(bytes)
}

fn read_status(pid: u32) -> Result<ProcStatus, ProcessError> {
    let text = read_proc(pid, "status", STATUS_MAX_BYTES)?;
    let status = ProcStatus::parse(&String::from_utf8_lossy(&text)).ok_or(ProcessError::Proc {
        pid,
        what: "status",
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            "a field perfclock needs is missing",
        ),
    })?;
    if matches!(status.state, 'Z' | 'X') {
        return Err(ProcessError::NoSuchProcess { pid });
    }
    Ok(status)
}

/// `/proc/PID/<link>` (`cwd`, `root`) opened as a path only: later steps reach the JVM's files
/// relative to it, with whatever credentials they run under.
fn open_directory(pid: u32, link: &'static str) -> Result<File, ProcessError> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(format!("/proc/{pid}/{link}"))
        .map_err(|source| proc_error(pid, link, source))
}

/// Up to `max` bytes of a regular file; `None` if it cannot be opened or is no regular file.
fn read_regular_file(path: &Path, max: usize) -> Option<Vec<u8>> {
    // Non-blocking: a FIFO named like an option file must not hang the attach.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(u64::try_from(max).unwrap_or(u64::MAX))
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}
