//! The JVM-side steps, done with the JVM user's credentials: connect to the JVM's attach
//! listener, or start it (trigger file and SIGQUIT) and wait for its socket; then send the
//! request and read the answer. Every wait ends at the deadline or when the JVM exits.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

use perfclock_os::peer;

use crate::protocol::MAX_RESPONSE_BYTES;
use crate::target::{JvmPath, Target};
use crate::{AttachError, Deadline, ProcessError, StepError};

/// The poll interval while waiting for the JVM; the first waits are short because the JVM
/// usually answers within milliseconds.
fn poll_interval(attempt: u32) -> Duration {
    Duration::from_millis(u64::from(attempt.min(10)) * 10 + 5)
}

/// A socket's (device, inode).
type Identity = (u64, u64);

/// What listens at the JVM's attach socket.
enum Listener {
    /// The JVM's listener, connected.
    Connected(UnixStream),
    /// Nothing: the listener must be started. `stale` is a leftover socket nobody listens on
    /// (a JVM killed before it removed it), which the JVM will replace.
    NotListening { stale: Option<Identity> },
}

/// Why a connect did not succeed.
enum ConnectFailure {
    /// The connect's own error (`ENOENT`, `ECONNREFUSED`...).
    Refused(io::Error),
    /// The deadline passed, or the JVM exited, while its listen queue was full.
    Attach(AttachError),
}

/// Connects to the JVM's attach listener, starting it first if it does not run.
pub(crate) fn connect_or_trigger(
    target: &Target,
    deadline: Deadline,
) -> Result<UnixStream, AttachError> {
    let socket = target.in_root(&format!("tmp/.java_pid{}", target.ns_pid));
    let stale = match connect_existing(target, &socket, deadline)? {
        Listener::Connected(stream) => return Ok(stream),
        Listener::NotListening { stale } => stale,
    };
    let trigger = start_listener(target, deadline)?;
    wait_for_socket(target, &socket, stale, deadline)?;
    drop(trigger);
    connect(target, &socket, deadline).map_err(|failure| match failure {
        ConnectFailure::Refused(source) => socket_error(&socket, "connect to", source),
        ConnectFailure::Attach(error) => error,
    })
}

fn socket_error(socket: &JvmPath, action: &'static str, source: io::Error) -> AttachError {
    StepError::Socket {
        socket: socket.shown.clone(),
        action,
        source,
    }
    .into()
}

/// Between two polls of the JVM: `timed_out(timeout)` once the deadline has passed, else waits
/// the poll interval of the `attempt`th pause (never past the deadline) and counts it; an error
/// if the JVM exits meanwhile.
fn pause(
    target: &Target,
    attempt: &mut u32,
    deadline: Deadline,
    during: &'static str,
    timed_out: impl FnOnce(Duration) -> AttachError,
) -> Result<(), AttachError> {
    if deadline.remaining().is_none() {
        return Err(timed_out(deadline.timeout()));
    }
    let interval = poll_interval(*attempt).min(deadline.remaining().unwrap_or_default());
    *attempt += 1;
    match target.pidfd.wait_exit(interval) {
        Ok(true) => Err(ProcessError::Exited {
            pid: target.pid,
            during,
        }
        .into()),
        Ok(false) => Ok(()),
        Err(_) => {
            thread::sleep(interval);
            Ok(())
        }
    }
}

/// Connects without ever blocking: while the listen queue is full, retries until the deadline.
fn connect(
    target: &Target,
    socket: &JvmPath,
    deadline: Deadline,
) -> Result<UnixStream, ConnectFailure> {
    let mut attempt = 0;
    loop {
        match peer::connect_unix_nonblocking(&socket.access) {
            Ok(stream) => return Ok(stream),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(ConnectFailure::Refused(error)),
        }
        pause(
            target,
            &mut attempt,
            deadline,
            "connected to its attach socket",
            |waited| {
                StepError::ConnectTimeout {
                    socket: socket.shown.clone(),
                    waited,
                }
                .into()
            },
        )
        .map_err(ConnectFailure::Attach)?;
    }
}

/// The attach socket's identity, if it is a socket of the JVM's user (anything else in a
/// world-writable /tmp is not trusted).
fn socket_identity(socket: &JvmPath, jvm_uid: u32) -> Result<Option<Identity>, AttachError> {
    match fs::symlink_metadata(&socket.access) {
        Ok(meta) if meta.file_type().is_socket() && meta.uid() == jvm_uid => {
            Ok(Some((meta.dev(), meta.ino())))
        }
        Ok(meta) => Err(socket_error(
            socket,
            "trust",
            io::Error::other(format!(
                "it is not a socket of the JVM's uid {jvm_uid} (uid {}, mode {:o}): remove it",
                meta.uid(),
                meta.mode()
            )),
        )),
        Err(_) => Ok(None),
    }
}

/// Connects to a listener the JVM already runs.
fn connect_existing(
    target: &Target,
    socket: &JvmPath,
    deadline: Deadline,
) -> Result<Listener, AttachError> {
    let Some(identity) = socket_identity(socket, target.ids.0)? else {
        return Ok(Listener::NotListening { stale: None });
    };
    match connect(target, socket, deadline) {
        Ok(stream) => Ok(Listener::Connected(stream)),
        Err(ConnectFailure::Refused(error)) => match error.raw_os_error() {
            Some(libc::ECONNREFUSED) => Ok(Listener::NotListening {
                stale: Some(identity),
            }),
            Some(libc::ENOENT) => Ok(Listener::NotListening { stale: None }),
            _ => Err(socket_error(socket, "connect to", error)),
        },
        Err(ConnectFailure::Attach(error)) => Err(error),
    }
}

/// `.attach_pid<nspid>`, removed on drop if perfclock created it.
struct TriggerFile {
    path: JvmPath,
    created: bool,
}

impl Drop for TriggerFile {
    fn drop(&mut self) {
        if self.created {
            // Best effort: a leftover file only makes a later SIGQUIT start the listener.
            let _ = fs::remove_file(&self.path.access);
        }
    }
}

/// Creates the trigger file where HotSpot looks (its working directory, then its /tmp), with
/// this thread's credentials (the JVM user's), never following a symlink nor reusing a file
/// the JVM would not trust.
fn create_trigger(target: &Target) -> Result<TriggerFile, AttachError> {
    let name = format!(".attach_pid{}", target.ns_pid);
    let mut attempts = Vec::new();
    for path in [target.in_cwd(&name), target.in_root(&format!("tmp/{name}"))] {
        let created = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o660)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path.access);
        match created.and_then(|file| file.metadata()) {
            // Some file systems give new files another owner, which the JVM would not trust.
            Ok(meta) if meta.uid() == peer::effective_uid() => {
                return Ok(TriggerFile {
                    path,
                    created: true,
                })
            }
            Ok(meta) => {
                let _ = fs::remove_file(&path.access);
                attempts.push((
                    path.shown,
                    io::Error::other(format!("created with owner uid {}", meta.uid())),
                ));
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                match fs::symlink_metadata(&path.access) {
                    // A file the JVM trusts already: it serves this attach too.
                    Ok(meta)
                        if meta.is_file() && (meta.uid() == target.ids.0 || meta.uid() == 0) =>
                    {
                        return Ok(TriggerFile {
                            path,
                            created: false,
                        })
                    }
                    _ => attempts.push((path.shown, error)),
                }
            }
            Err(error) => attempts.push((path.shown, error)),
        }
    }
    Err(StepError::TriggerFile { attempts }.into())
}

/// Makes HotSpot start its attach listener: waits for its SIGQUIT handler (a JVM still starting
/// would die of the signal), creates the trigger file and sends SIGQUIT through the pidfd.
fn start_listener(target: &Target, deadline: Deadline) -> Result<TriggerFile, AttachError> {
    let pid = target.pid;
    let mut attempt = 0;
    while !target.status()?.catches(libc::SIGQUIT) {
        pause(
            target,
            &mut attempt,
            deadline,
            "waited for its SIGQUIT handler",
            |waited| ProcessError::NoQuitHandler { pid, waited }.into(),
        )?;
    }
    let trigger = create_trigger(target)?;
    // Creating the file may have blocked (a FUSE working directory): no signal once the caller
    // has given up.
    if deadline.remaining().is_none() {
        return Err(ProcessError::Stalled {
            pid,
            step: "creating the attach trigger file",
            timeout: deadline.timeout(),
        }
        .into());
    }
    match target.pidfd.send_signal(libc::SIGQUIT) {
        Ok(()) => Ok(trigger),
        Err(error) if error.raw_os_error() == Some(libc::ESRCH) => Err(ProcessError::Exited {
            pid,
            during: "signalled it",
        }
        .into()),
        Err(source) => Err(StepError::Signal { pid, source }.into()),
    }
}

/// Waits until the JVM's user has a socket at `socket` other than `stale`.
fn wait_for_socket(
    target: &Target,
    socket: &JvmPath,
    stale: Option<Identity>,
    deadline: Deadline,
) -> Result<(), AttachError> {
    let mut attempt = 0;
    loop {
        // A foreign file may be replaced by the JVM's rename: keep waiting while it is there.
        if let Ok(Some(identity)) = socket_identity(socket, target.ids.0) {
            if Some(identity) != stale {
                return Ok(());
            }
        }
        pause(
            target,
            &mut attempt,
            deadline,
            "waited for its attach socket",
            |waited| {
                StepError::SocketTimeout {
                    pid: target.pid,
                    socket: socket.shown.clone(),
                    waited,
                }
                .into()
            },
        )?;
    }
}

/// Why the exchange failed.
pub(crate) enum Exchange {
    /// The deadline passed.
    Timeout,
    /// The socket failed: the action ("write to", "read from") and the error.
    Io(&'static str, io::Error),
}

/// Sends the request and reads the answer to EOF (the JVM closes the connection after it), at
/// most [`MAX_RESPONSE_BYTES`]; each call is given what is left of the deadline.
pub(crate) fn exchange(
    stream: &mut UnixStream,
    request: &[u8],
    deadline: Deadline,
) -> Result<Vec<u8>, Exchange> {
    let remaining = || deadline.remaining().ok_or(Exchange::Timeout);
    let failed = |action, error: io::Error| match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Exchange::Timeout,
        _ => Exchange::Io(action, error),
    };
    let mut unsent = request;
    while !unsent.is_empty() {
        let written = stream
            .set_write_timeout(Some(remaining()?))
            .and_then(|()| stream.write(unsent));
        match written {
            Ok(0) => return Err(Exchange::Io("write to", io::ErrorKind::WriteZero.into())),
            Ok(n) => unsent = &unsent[n..],
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(failed("write to", error)),
        }
    }
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while answer.len() < MAX_RESPONSE_BYTES {
        let read = stream
            .set_read_timeout(Some(remaining()?))
            .and_then(|()| stream.read(&mut buffer));
        match read {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(failed("read from", error)),
        }
    }
    answer.truncate(MAX_RESPONSE_BYTES);
    Ok(answer)
}
