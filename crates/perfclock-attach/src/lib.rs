//! Loads a JVMTI agent into a running HotSpot JVM through HotSpot's dynamic attach mechanism:
//! what `jcmd PID JVMTI.agent_load` and jattach do, with no JDK on the machine.
//!
//! ```no_run
//! use std::time::Duration;
//! let attached = perfclock_attach::attach(
//!     4242,
//!     "/opt/perfclock/libperfclock_agent.so".as_ref(),
//!     "jitdump=/tmp".as_ref(),
//!     Duration::from_secs(8),
//! )?;
//! println!("Agent_OnAttach ran in {} (already loaded: {})", attached.pid, attached.already_loaded);
//! # Ok::<(), perfclock_attach::AttachError>(())
//! ```
//!
//! # Design
//! 1. `/proc/PID/status` gives the JVM's effective uid/gid, its pid in its own pid namespace
//!    (`NStgid`) and whether it catches SIGQUIT yet; `/proc/PID/maps` whether it is HotSpot
//!    (`libjvm.so`); its command line and environment whether attach is disabled. A process
//!    that is not a running HotSpot JVM is never signalled (SIGQUIT would kill it).
//! 2. As root perfclock switches its effective uid/gid to the JVM's (HotSpot checks the peer's
//!    credentials on the socket, and trusts only trigger files of its own user or root).
//! 3. The JVM's files are reached through `/proc/PID/cwd` and `/proc/PID/root/tmp`, named with
//!    its namespace pid: that works across mount and pid namespaces (containers) without
//!    `setns`, and a pathname UNIX socket is reachable from any network namespace.
//! 4. If `/tmp/.java_pid<nspid>` is not a live socket: create `.attach_pid<nspid>` in the JVM's
//!    working directory (or its /tmp), send SIGQUIT, wait for the socket, remove the file.
//! 5. Send `load` (protocol version 1, [`protocol`]) with the agent's absolute path and read the
//!    JVM's answer to EOF.
//!
//! Everything happens within one timeout; every failure is an [`AttachError`] naming its cause.
//!
//! # Caveats
//! - The JVM opens the agent at the given path in its own mount namespace: for a JVM in a
//!   container the file must be visible there at the same path (checked, [`AttachError::AgentNotVisible`]).
//! - `-XX:+DisableAttachMechanism` or `-Xrs` is seen on the command line, in `@argfile`s,
//!   `-XX:VMOptionsFile=` and the `JAVA_TOOL_OPTIONS`/`JDK_JAVA_OPTIONS`/`_JAVA_OPTIONS`
//!   variables, but not in a `-XX:Flags=` file or `.hotspotrc`: the JVM then prints a thread
//!   dump on SIGQUIT and the attach times out.
//! - OpenJ9's attach mechanism is not supported.
#![deny(unsafe_code)]

mod error;
mod os;
pub mod procfs;
pub mod protocol;

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

pub use error::{AttachError, MalformedResponse, RequestError};
use procfs::{ProcStatus, Vm};
use protocol::LoadResponse;

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
    /// Any text the JVM printed besides the return code (usually empty).
    pub message: String,
}

/// An `@argfile` or `-XX:VMOptionsFile=` is read up to this size for options that disable
/// attaching.
const OPTION_FILE_MAX_BYTES: u64 = 1 << 20;

/// The poll interval while waiting for the JVM; the first waits are short because the JVM
/// usually answers within milliseconds.
fn poll_interval(attempt: u32) -> Duration {
    Duration::from_millis(u64::from(attempt.min(10)) * 10 + 5)
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
    // A timeout beyond what Instant can add is as good as none (136 years).
    let now = Instant::now();
    let deadline = now
        .checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(u64::from(u32::MAX)));
    let status = read_status(pid)?;
    let jvm_ids = (status.euid, status.egid);
    let ours = (os::effective_uid(), os::effective_gid());
    // Held to the end: the trigger file and the socket are the JVM user's.
    let _switched = if ours.0 == 0 {
        if jvm_ids == ours || jvm_ids.0 == 0 {
            None
        } else {
            Some(
                os::EffectiveIds::switch_to(jvm_ids.0, jvm_ids.1).map_err(|source| {
                    AttachError::SwitchCredentials {
                        jvm: jvm_ids,
                        source,
                    }
                })?,
            )
        }
    } else if jvm_ids != ours {
        return Err(AttachError::Permission {
            pid,
            jvm: jvm_ids,
            ours,
        });
    } else {
        None
    };

    let maps = String::from_utf8_lossy(&read_proc(pid, "maps")?).into_owned();
    match procfs::vm_of_maps(&maps) {
        Vm::HotSpot => {}
        Vm::OpenJ9 => return Err(AttachError::OpenJ9 { pid }),
        Vm::NotJava => {
            return Err(AttachError::NotHotSpot {
                pid,
                name: status.name,
            })
        }
    }
    let cmdline = read_proc(pid, "cmdline")?;
    // A JVM whose environment cannot be read is judged by its command line alone.
    let environ = read_proc(pid, "environ").unwrap_or_default();
    // The JVM's option files, as it opened them: relative to its working directory.
    let read_option_file = |name: &str| {
        let path = Path::new(name);
        let base = if path.is_absolute() { "root" } else { "cwd" };
        let in_jvm =
            Path::new(&format!("/proc/{pid}/{base}")).join(path.strip_prefix("/").unwrap_or(path));
        // Non-blocking: a FIFO named like an option file must not hang the attach.
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(in_jvm)
            .ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        let mut bytes = Vec::new();
        file.take(OPTION_FILE_MAX_BYTES)
            .read_to_end(&mut bytes)
            .ok()?;
        Some(bytes)
    };
    if let Some(blocker) = procfs::attach_blocker(&cmdline, &environ, &read_option_file) {
        return Err(AttachError::AttachDisabled { pid, blocker });
    }

    let agent_error = |source| AttachError::Agent {
        path: agent.to_owned(),
        source,
    };
    let agent = fs::canonicalize(agent).map_err(agent_error)?;
    let ours_meta = fs::metadata(&agent).map_err(agent_error)?;
    if !ours_meta.is_file() {
        return Err(agent_error(io::Error::other("not a regular file")));
    }
    let in_jvm =
        Path::new(&format!("/proc/{pid}/root")).join(agent.strip_prefix("/").unwrap_or(&agent));
    match fs::metadata(&in_jvm) {
        Ok(meta) if meta.dev() == ours_meta.dev() && meta.ino() == ours_meta.ino() => {}
        _ => return Err(AttachError::AgentNotVisible { pid, path: agent }),
    }
    let already_loaded = procfs::maps_file(
        &maps,
        libc::major(ours_meta.dev()),
        libc::minor(ours_meta.dev()),
        ours_meta.ino(),
    );
    let request = protocol::load_request(agent.as_os_str().as_bytes(), options.as_bytes())
        .map_err(AttachError::Request)?;

    let ns_pid = status.ns_tgid.unwrap_or(status.tgid);
    let tmp = PathBuf::from(format!("/proc/{pid}/root/tmp"));
    let socket = tmp.join(format!(".java_pid{ns_pid}"));
    let mut stream = match connect_existing(&socket, jvm_ids.0)? {
        Ok(stream) => stream,
        Err(stale) => {
            let trigger = start_listener(&status, ns_pid, &tmp, deadline)?;
            let appeared = wait_for_socket(&socket, stale, jvm_ids.0, deadline)?;
            drop(trigger);
            match appeared {
                true => UnixStream::connect(&socket).map_err(|source| AttachError::Socket {
                    socket: socket.clone(),
                    action: "connect to",
                    source,
                })?,
                false => {
                    return Err(AttachError::SocketTimeout {
                        pid,
                        socket,
                        waited: timeout,
                    })
                }
            }
        }
    };

    let answer = exchange(&mut stream, &request, deadline).map_err(|error| match error {
        Exchange::Timeout => AttachError::ResponseTimeout { timeout },
        Exchange::Io(action, source) => AttachError::Socket {
            socket: socket.clone(),
            action,
            source,
        },
    })?;
    match protocol::parse_load_response(&answer).map_err(AttachError::Malformed)? {
        LoadResponse::Loaded { message } => Ok(Attached {
            pid,
            ns_pid,
            agent,
            already_loaded,
            message,
        }),
        LoadResponse::AgentFailed {
            return_code,
            message,
        } => Err(AttachError::AgentFailed {
            return_code,
            message,
        }),
        LoadResponse::NotLoaded { message } => Err(AttachError::NotLoaded { message }),
        LoadResponse::Refused { code, message } => Err(AttachError::Refused { code, message }),
    }
}

fn read_proc(pid: u32, what: &'static str) -> Result<Vec<u8>, AttachError> {
    fs::read(format!("/proc/{pid}/{what}")).map_err(|source| match source.raw_os_error() {
        Some(libc::ENOENT | libc::ESRCH) => AttachError::NoSuchProcess { pid },
        _ => AttachError::Proc { pid, what, source },
    })
}

fn read_status(pid: u32) -> Result<ProcStatus, AttachError> {
    let text = read_proc(pid, "status")?;
    let status = ProcStatus::parse(&String::from_utf8_lossy(&text)).ok_or(AttachError::Proc {
        pid,
        what: "status",
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            "a field perfclock needs is missing",
        ),
    })?;
    if matches!(status.state, 'Z' | 'X') {
        return Err(AttachError::NoSuchProcess { pid });
    }
    Ok(status)
}

/// The attach socket's identity, if it is a socket of the JVM's user (anything else in a
/// world-writable /tmp is not trusted).
fn socket_identity(socket: &Path, jvm_uid: u32) -> Result<Option<(u64, u64)>, AttachError> {
    match fs::symlink_metadata(socket) {
        Ok(meta) if meta.file_type().is_socket() && meta.uid() == jvm_uid => {
            Ok(Some((meta.dev(), meta.ino())))
        }
        Ok(meta) => Err(AttachError::Socket {
            socket: socket.to_owned(),
            action: "trust",
            source: io::Error::other(format!(
                "it is not a socket of the JVM's uid {jvm_uid} (uid {}, mode {:o}): remove it",
                meta.uid(),
                meta.mode()
            )),
        }),
        Err(_) => Ok(None),
    }
}

/// Connects to a listener the JVM already runs; `Err(stale)` if it must be started, with the
/// identity of a leftover socket nobody listens on (a JVM killed before it removed it).
fn connect_existing(
    socket: &Path,
    jvm_uid: u32,
) -> Result<Result<UnixStream, Option<(u64, u64)>>, AttachError> {
    let Some(identity) = socket_identity(socket, jvm_uid)? else {
        return Ok(Err(None));
    };
    match UnixStream::connect(socket) {
        Ok(stream) => Ok(Ok(stream)),
        Err(error) if error.raw_os_error() == Some(libc::ECONNREFUSED) => Ok(Err(Some(identity))),
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(Err(None)),
        Err(source) => Err(AttachError::Socket {
            socket: socket.to_owned(),
            action: "connect to",
            source,
        }),
    }
}

/// `.attach_pid<nspid>`, removed on drop if perfclock created it.
struct TriggerFile {
    path: PathBuf,
    created: bool,
}

impl Drop for TriggerFile {
    fn drop(&mut self) {
        if self.created {
            // Best effort: a leftover file only makes a later SIGQUIT start the listener.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Creates the trigger file where HotSpot looks (its working directory, then its /tmp), never
/// following a symlink nor reusing a file the JVM would not trust.
fn create_trigger(
    pid: u32,
    ns_pid: u32,
    jvm_uid: u32,
    tmp: &Path,
) -> Result<TriggerFile, AttachError> {
    let name = format!(".attach_pid{ns_pid}");
    let mut attempts = Vec::new();
    for dir in [PathBuf::from(format!("/proc/{pid}/cwd")), tmp.to_owned()] {
        let path = dir.join(&name);
        let created = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o660)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path);
        match created.and_then(|file: File| file.metadata()) {
            // Some file systems give new files another owner, which the JVM would not trust.
            Ok(meta) if meta.uid() == os::effective_uid() => {
                return Ok(TriggerFile {
                    path,
                    created: true,
                })
            }
            Ok(meta) => {
                let _ = fs::remove_file(&path);
                attempts.push((
                    path,
                    io::Error::other(format!("created with owner uid {}", meta.uid())),
                ));
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                match fs::symlink_metadata(&path) {
                    // A file the JVM trusts already: it serves this attach too.
                    Ok(meta) if meta.is_file() && (meta.uid() == jvm_uid || meta.uid() == 0) => {
                        return Ok(TriggerFile {
                            path,
                            created: false,
                        })
                    }
                    _ => attempts.push((path, error)),
                }
            }
            Err(error) => attempts.push((path, error)),
        }
    }
    Err(AttachError::TriggerFile { attempts })
}

/// Makes HotSpot start its attach listener: waits for its SIGQUIT handler (a JVM still starting
/// would die of the signal), creates the trigger file and sends SIGQUIT.
fn start_listener(
    status: &ProcStatus,
    ns_pid: u32,
    tmp: &Path,
    deadline: Instant,
) -> Result<TriggerFile, AttachError> {
    let pid = status.tgid;
    let started = Instant::now();
    let mut attempt = 0;
    while !read_status(pid)?.catches(libc::SIGQUIT) {
        if Instant::now() >= deadline {
            return Err(AttachError::NoQuitHandler {
                pid,
                waited: started.elapsed(),
            });
        }
        thread::sleep(poll_interval(attempt));
        attempt += 1;
    }
    let trigger = create_trigger(pid, ns_pid, status.euid, tmp)?;
    os::kill(pid, libc::SIGQUIT).map_err(|source| AttachError::Signal { pid, source })?;
    Ok(trigger)
}

/// Waits until the JVM's user has a socket at `socket` other than `stale`; false on timeout.
fn wait_for_socket(
    socket: &Path,
    stale: Option<(u64, u64)>,
    jvm_uid: u32,
    deadline: Instant,
) -> Result<bool, AttachError> {
    let mut attempt = 0;
    loop {
        // A foreign file may be replaced by the JVM's rename: keep waiting while it is there.
        if let Ok(Some(identity)) = socket_identity(socket, jvm_uid) {
            if Some(identity) != stale {
                return Ok(true);
            }
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        thread::sleep(
            poll_interval(attempt).min(deadline.saturating_duration_since(Instant::now())),
        );
        attempt += 1;
    }
}

enum Exchange {
    Timeout,
    Io(&'static str, io::Error),
}

/// Sends the request and reads the answer to EOF (the JVM closes the connection after it).
fn exchange(
    stream: &mut UnixStream,
    request: &[u8],
    deadline: Instant,
) -> Result<Vec<u8>, Exchange> {
    let remaining = || match deadline.checked_duration_since(Instant::now()) {
        Some(left) if !left.is_zero() => Ok(left),
        _ => Err(Exchange::Timeout),
    };
    let timed_out = |error: &io::Error| {
        matches!(
            error.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        )
    };
    stream
        .set_write_timeout(Some(remaining()?))
        .and_then(|()| stream.write_all(request))
        .map_err(|error| {
            if timed_out(&error) {
                Exchange::Timeout
            } else {
                Exchange::Io("write to", error)
            }
        })?;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = stream
            .set_read_timeout(Some(remaining()?))
            .and_then(|()| stream.read(&mut buffer));
        match read {
            Ok(0) => return Ok(answer),
            Ok(n) => {
                answer.extend_from_slice(&buffer[..n]);
                if answer.len() >= protocol::MAX_RESPONSE_BYTES {
                    return Ok(answer);
                }
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) if timed_out(&error) => return Err(Exchange::Timeout),
            Err(error) => return Err(Exchange::Io("read from", error)),
        }
    }
}
