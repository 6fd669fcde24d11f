//! This crate's errors shared by its modules: [`SysError`] for every failed system call (which
//! call, the errno, what to change), [`RingError`] for a ring or record that cannot be parsed.
//! [`shared_file`](crate::shared_file)'s own errors are beside its code.
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors").

use core::fmt;
use std::io;

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

/// A failed system call: `op` and `errno`, classified by [`SysError::kind`]. `Display` gives the
/// system's text for the errno (that of [`std::io::Error`]) and says what to change; it converts
/// into an [`std::io::Error`]. Small and `Copy`, like rustix's `Errno`.
///
/// ```
/// use perfclock_os::{ErrorKind, Op, SysError};
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
        let errno = io::Error::last_os_error().raw_os_error().unwrap_or(0);
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

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The system's own text for the errno ("Permission denied (os error 13)").
        let os = io::Error::from_raw_os_error(self.errno);
        match self.kind() {
            ErrorKind::PermissionDenied => {
                write!(f, "perf_event_open refused: {os}; ")?;
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
                "perf_event_open is not available: {os}; the kernel lacks CONFIG_PERF_EVENTS, \
                 or a sandbox/seccomp filter hides the system call"
            ),
            ErrorKind::FdExhausted => write!(
                f,
                "out of file descriptors in {} of a perf event: {os}; raise `ulimit -n` \
                 (RLIMIT_NOFILE) or fs.file-max, or close descriptors",
                self.op.name()
            ),
            ErrorKind::EventUnsupported => write!(
                f,
                "this kernel does not support the requested software perf event or one of its \
                 attributes: {os}; a kernel of 4.x or newer is needed"
            ),
            ErrorKind::MmapLimit if self.errno == libc::ENOMEM => write!(
                f,
                "mapping the perf ring failed: {os}; the kernel is short of memory for it"
            ),
            // The kernel charges each ring to the user (all of the user's processes together)
            // up to perf_event_mlock_kb per online CPU, and any excess to the process's
            // RLIMIT_MEMLOCK; EPERM when both are exhausted.
            ErrorKind::MmapLimit => write!(
                f,
                "mapping the perf ring failed: {os}; locked memory is exhausted. Perf rings \
                 count against a budget per user, shared by every process of that user \
                 (kernel.perf_event_mlock_kb per online CPU), and beyond it against this \
                 process's locked-memory limit (`ulimit -l`, RLIMIT_MEMLOCK; Docker's default is \
                 64 KiB). Raise `ulimit -l` (`docker run --ulimit memlock=...`) or \
                 kernel.perf_event_mlock_kb, grant CAP_IPC_LOCK, or close other perf users of \
                 this user (each calibrated perfclock clock holds rings)"
            ),
            ErrorKind::Other => match self.op {
                Op::Mmap => write!(f, "mapping the perf event failed: {os}"),
                Op::PerfEventOpen => write!(f, "perf_event_open failed: {os}"),
            },
        }
    }
}

impl std::error::Error for SysError {}

/// An [`io::Error`] of the errno's kind ([`io::ErrorKind::PermissionDenied`] for `EACCES`, ...),
/// whose message is the [`SysError`]'s (the call, the system's text, what to change) and whose
/// [`get_ref`](io::Error::get_ref) downcasts back to the [`SysError`]; its
/// [`raw_os_error`](io::Error::raw_os_error) is `None`: the errno is [`SysError::errno`].
impl From<SysError> for io::Error {
    fn from(error: SysError) -> Self {
        io::Error::new(io::Error::from_raw_os_error(error.errno).kind(), error)
    }
}

/// The ring's contents could not be parsed. The reader then skips everything up to the current
/// `data_head`, so one bad record costs the records around it, never a mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RingError {
    /// A header whose size is below 8 bytes, not a multiple of 8, or beyond `data_head`.
    BadRecordSize {
        /// The size field.
        size: u16,
        /// Bytes available between tail and head.
        available: u64,
    },
    /// `data_head - data_tail` exceeds the data area (the kernel never does this).
    HeadOutOfRange {
        /// data_head.
        head: u64,
        /// our tail.
        tail: u64,
    },
    /// A record too short for the fields its type and `sample_type` imply.
    Truncated {
        /// Record type.
        record_type: u32,
        /// Record size in bytes.
        size: usize,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RingError::BadRecordSize { size, available } => write!(
                f,
                "malformed perf record: header size {size} with {available} bytes in the ring"
            ),
            RingError::HeadOutOfRange { head, tail } => write!(
                f,
                "perf ring data_head {head} is more than the data area ahead of tail {tail}"
            ),
            RingError::Truncated { record_type, size } => write!(
                f,
                "perf record of type {record_type} is too short ({size} bytes) for its fields"
            ),
        }
    }
}

impl std::error::Error for RingError {}

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

    /// The errno's text is the system's, for every kind; the conversion keeps kind and message.
    #[test]
    fn text_comes_from_the_system_and_converts_to_io_error() {
        let cases = [
            (Op::PerfEventOpen, libc::EACCES),
            (Op::PerfEventOpen, libc::ENOSYS),
            (Op::PerfEventOpen, libc::EMFILE),
            (Op::PerfEventOpen, libc::EINVAL),
            (Op::PerfEventOpen, libc::EBUSY),
            (Op::Mmap, libc::ENOMEM),
            (Op::Mmap, libc::EPERM),
            (Op::Mmap, libc::EINVAL),
        ];
        for (op, errno) in cases {
            let error = SysError::new(op, errno);
            let os = io::Error::from_raw_os_error(errno);
            let message = error.to_string();
            assert!(
                message.contains(&os.to_string()),
                "{op:?} {errno}: {message}"
            );
            let converted = io::Error::from(error);
            assert_eq!(converted.kind(), os.kind(), "{op:?} {errno}");
            assert_eq!(converted.to_string(), message);
            let inner = converted
                .get_ref()
                .and_then(|e| e.downcast_ref::<SysError>());
            assert_eq!(inner, Some(&error));
        }
        assert_eq!(
            io::Error::from(SysError::new(Op::PerfEventOpen, libc::EACCES)).kind(),
            io::ErrorKind::PermissionDenied
        );
    }
}

/// A project variable that takes a switch (`PERFCLOCK_PARAVIRT`, `PERFCLOCK_SHARED_PAGE`) set
/// to something that is none of the spellings [`crate::env::env_switch`] accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSwitch {
    /// The variable.
    pub variable: &'static str,
    /// Its value, lossily as text.
    pub value: String,
}

impl fmt::Display for BadSwitch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={:?} is not a switch: set it to off (or 0, false, no) or on (or 1, true, yes), \
             in any case, or unset it",
            self.variable, self.value
        )
    }
}

impl std::error::Error for BadSwitch {}
