//! One error type for every system call of this crate: which call, and the errno.

use core::fmt;

/// The system call that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// `perf_event_open(2)`.
    PerfEventOpen,
    /// `mmap(2)` of a perf event.
    Mmap,
}

impl Op {
    /// The call's name, as in its man page.
    pub fn name(self) -> &'static str {
        match self {
            Op::PerfEventOpen => "perf_event_open",
            Op::Mmap => "mmap",
        }
    }
}

/// What a failure means for the user, and so which knob fixes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `EACCES`/`EPERM` from `perf_event_open`: perf_event_paranoid, missing CAP_PERFMON, or a
    /// seccomp filter (containers' default profiles refuse `perf_event_open` with `EPERM`).
    PermissionDenied,
    /// `ENOSYS`: a kernel without `CONFIG_PERF_EVENTS`, or a sandbox that hides the call.
    NoPerfSupport,
    /// `EMFILE`/`ENFILE`: out of file descriptors.
    FdExhausted,
    /// `ENOENT`/`EINVAL`/`EOPNOTSUPP`/`E2BIG` from `perf_event_open`: this kernel does not
    /// support the event or an attribute.
    EventUnsupported,
    /// `ENOMEM`/`EPERM` from `mmap`: `EPERM` when the user's perf rings exceed the per-user
    /// budget (`perf_event_mlock_kb` per online CPU, shared by all of the user's processes) and
    /// the excess exceeds the process's `RLIMIT_MEMLOCK`; `ENOMEM` when memory is short.
    MmapLimit,
    /// Anything else.
    Other,
}

/// A failed system call: `op` and `errno`, classified by [`SysError::kind`]. `Display` says what
/// to change. Small and `Copy`, like rustix's `Errno`.
///
/// ```
/// use perfclock_event::{ErrorKind, Op, SysError};
///
/// let error = SysError::new(Op::PerfEventOpen, libc::EMFILE);
/// assert_eq!(error.kind(), ErrorKind::FdExhausted);
/// assert!(error.to_string().contains("RLIMIT_NOFILE"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysError {
    op: Op,
    errno: i32,
    /// `perf_event_paranoid` when a `perf_event_open` was refused: it decides the advice.
    paranoid: Option<i32>,
}

impl SysError {
    /// `op` failed with `errno`.
    pub fn new(op: Op, errno: i32) -> Self {
        Self {
            op,
            errno,
            paranoid: None,
        }
    }

    /// `op` failed with the calling thread's `errno`; a refused `perf_event_open` also records
    /// the current `perf_event_paranoid`, which decides the advice in the message.
    pub fn last(op: Op) -> Self {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        let error = Self::new(op, errno);
        if error.kind() == ErrorKind::PermissionDenied {
            error.with_paranoid(read_paranoid())
        } else {
            error
        }
    }

    /// The same error, with the `perf_event_paranoid` level observed when it happened.
    pub fn with_paranoid(mut self, paranoid: Option<i32>) -> Self {
        self.paranoid = paranoid;
        self
    }

    /// The call that failed.
    pub fn op(&self) -> Op {
        self.op
    }

    /// The errno it failed with.
    pub fn errno(&self) -> i32 {
        self.errno
    }

    /// `perf_event_paranoid` at the time of a refused `perf_event_open`, if it was read.
    pub fn paranoid(&self) -> Option<i32> {
        self.paranoid
    }

    /// What the failure means.
    pub fn kind(&self) -> ErrorKind {
        match (self.op, self.errno) {
            (Op::PerfEventOpen, libc::EACCES | libc::EPERM) => ErrorKind::PermissionDenied,
            (Op::PerfEventOpen, libc::ENOSYS) => ErrorKind::NoPerfSupport,
            (_, libc::EMFILE | libc::ENFILE) => ErrorKind::FdExhausted,
            (Op::PerfEventOpen, libc::ENOENT | libc::EINVAL | libc::EOPNOTSUPP | libc::E2BIG) => {
                ErrorKind::EventUnsupported
            }
            (Op::Mmap, libc::ENOMEM | libc::EPERM) => ErrorKind::MmapLimit,
            _ => ErrorKind::Other,
        }
    }
}

/// `/proc/sys/kernel/perf_event_paranoid`, if readable.
pub fn read_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::ENOENT => "ENOENT",
        libc::EINVAL => "EINVAL",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::E2BIG => "E2BIG",
        libc::ENOMEM => "ENOMEM",
        libc::EBUSY => "EBUSY",
        _ => "errno",
    }
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let errno = self.errno;
        let name = errno_name(errno);
        match self.kind() {
            ErrorKind::PermissionDenied => {
                write!(f, "perf_event_open refused ({name}, {errno}): ")?;
                match self.paranoid {
                    // Level 3 refuses only on kernels with Debian's (and Android's) patch;
                    // mainline treats every level above 1 like 2.
                    Some(level) if level > 2 => write!(
                        f,
                        "kernel.perf_event_paranoid is {level}: kernels carrying Debian's or \
                         Android's patch refuse all unprivileged perf use above 2, so lower it \
                         with `sysctl kernel.perf_event_paranoid=2` or grant CAP_PERFMON; a \
                         mainline kernel treats {level} like 2, and there the likely cause is a \
                         seccomp filter (containers' default profiles) or an LSM policy"
                    ),
                    Some(level) => write!(
                        f,
                        "kernel.perf_event_paranoid is {level}, which allows a user-space-only \
                         event of one's own thread, so the likely cause is a seccomp filter (a \
                         container's default profile refuses perf_event_open: run with a \
                         profile that allows it, e.g. `--security-opt seccomp=...`) or a missing \
                         CAP_PERFMON under an LSM"
                    ),
                    None => write!(
                        f,
                        "check kernel.perf_event_paranoid (<= 2 allows this event), CAP_PERFMON, \
                         and any seccomp filter (containers refuse perf_event_open by default)"
                    ),
                }
            }
            ErrorKind::NoPerfSupport => write!(
                f,
                "perf_event_open is not available ({name}, {errno}): the kernel lacks \
                 CONFIG_PERF_EVENTS, or a sandbox/seccomp filter hides the system call"
            ),
            ErrorKind::FdExhausted => write!(
                f,
                "out of file descriptors in {} of a perf event ({name}, {errno}): raise \
                 `ulimit -n` (RLIMIT_NOFILE) or fs.file-max, or close descriptors",
                self.op.name()
            ),
            ErrorKind::EventUnsupported => write!(
                f,
                "this kernel does not support the requested software perf event or one of its \
                 attributes ({name}, {errno}): a kernel of 4.x or newer is needed"
            ),
            ErrorKind::MmapLimit if errno == libc::ENOMEM => write!(
                f,
                "mapping the perf ring failed ({name}, {errno}): the kernel is short of memory \
                 for it"
            ),
            // The kernel charges each ring to the user (all of the user's processes together)
            // up to perf_event_mlock_kb per online CPU, and any excess to the process's
            // RLIMIT_MEMLOCK; EPERM when both are exhausted.
            ErrorKind::MmapLimit => write!(
                f,
                "mapping the perf ring failed ({name}, {errno}): locked memory is exhausted. \
                 Perf rings count against a budget per user, shared by every process of that \
                 user (kernel.perf_event_mlock_kb per online CPU), and beyond it against this \
                 process's locked-memory limit (`ulimit -l`, RLIMIT_MEMLOCK; Docker's default is \
                 64 KiB). Raise `ulimit -l` (`docker run --ulimit memlock=...`) or \
                 kernel.perf_event_mlock_kb, grant CAP_IPC_LOCK, or close other perf users of \
                 this user (each calibrated perfclock clock holds rings)"
            ),
            ErrorKind::Other => match self.op {
                Op::Mmap => write!(f, "mapping the perf event failed ({name}, {errno})"),
                Op::PerfEventOpen => write!(f, "perf_event_open failed ({name}, {errno})"),
            },
        }
    }
}

impl std::error::Error for SysError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(errno: i32) -> ErrorKind {
        SysError::new(Op::PerfEventOpen, errno).kind()
    }

    #[test]
    fn classifies_open_errnos() {
        for errno in [libc::EACCES, libc::EPERM] {
            assert_eq!(open(errno), ErrorKind::PermissionDenied);
        }
        assert_eq!(open(libc::ENOSYS), ErrorKind::NoPerfSupport);
        for errno in [libc::EMFILE, libc::ENFILE] {
            assert_eq!(open(errno), ErrorKind::FdExhausted);
        }
        for errno in [libc::ENOENT, libc::EINVAL, libc::EOPNOTSUPP] {
            assert_eq!(open(errno), ErrorKind::EventUnsupported);
        }
        assert_eq!(open(libc::EBUSY), ErrorKind::Other);
    }

    #[test]
    fn classifies_mmap_errnos() {
        for errno in [libc::ENOMEM, libc::EPERM] {
            assert_eq!(SysError::new(Op::Mmap, errno).kind(), ErrorKind::MmapLimit);
        }
        assert_eq!(
            SysError::new(Op::Mmap, libc::EINVAL).kind(),
            ErrorKind::Other
        );
    }

    #[test]
    fn messages_name_the_knob() {
        let refused = |errno, paranoid| {
            SysError::new(Op::PerfEventOpen, errno)
                .with_paranoid(paranoid)
                .to_string()
        };
        let high = refused(libc::EACCES, Some(3));
        assert!(high.contains("perf_event_paranoid is 3"), "{high}");
        assert!(high.contains("CAP_PERFMON"), "{high}");
        let seccomp = refused(libc::EPERM, Some(2));
        assert!(seccomp.contains("seccomp"), "{seccomp}");
        assert!(SysError::new(Op::PerfEventOpen, libc::EMFILE)
            .to_string()
            .contains("RLIMIT_NOFILE"));
        let mlock = SysError::new(Op::Mmap, libc::EPERM).to_string();
        for knob in [
            "perf_event_mlock_kb",
            "RLIMIT_MEMLOCK",
            "ulimit -l",
            "per user",
        ] {
            assert!(mlock.contains(knob), "{knob} missing: {mlock}");
        }
        let short = SysError::new(Op::Mmap, libc::ENOMEM).to_string();
        assert!(short.contains("short of memory"), "{short}");
        // Level 3 refuses only with Debian's patch: the message must say both.
        assert!(
            high.contains("Debian") && high.contains("mainline"),
            "{high}"
        );
        assert!(SysError::new(Op::PerfEventOpen, libc::ENOSYS)
            .to_string()
            .contains("CONFIG_PERF_EVENTS"));
    }
}
