//! Opening perf events for the calling thread and mapping their pages.
//!
//! A small safe layer over `perf_event_open(2)` and `mmap(2)` with exactly what perfclock needs:
//! software events (`PERF_COUNT_SW_DUMMY` for side-band records and the time page,
//! `PERF_COUNT_SW_PAGE_FAULTS` for samples), always `pid = 0, cpu = -1` (the calling thread, on
//! whichever CPU it runs), `exclude_kernel`, `exclude_hv`, `PERF_FLAG_FD_CLOEXEC`. Failures come
//! back as an [`OpenError`] that says which knob to change.
//!
//! # Safety
//! This module calls `perf_event_open`, `mmap` and `munmap`. Each mapping is owned by exactly
//! one [`PageMapping`] or [`RingMapping`] that unmaps it on drop, and pointers into it are only
//! handed out as raw pointers (the kernel writes that memory concurrently).

use core::fmt;
use core::ptr::NonNull;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use perf_event_open_sys::bindings as sys;

use perfclock_core::page::PerfEventMmapPage;

/// `PERF_SAMPLE_*` bits this crate parses. Others may be set, but the ring parser in
/// [`crate::ring`] understands only these.
pub mod sample {
    /// `PERF_SAMPLE_TID`: `u32 pid, u32 tid`.
    pub const TID: u64 = super::sys::PERF_SAMPLE_TID as u64;
    /// `PERF_SAMPLE_TIME`: `u64 time` (the event's clock: `local_clock()` unless `use_clockid`).
    pub const TIME: u64 = super::sys::PERF_SAMPLE_TIME as u64;
    /// `PERF_SAMPLE_ADDR`: `u64 addr` (for page faults: the faulting address).
    pub const ADDR: u64 = super::sys::PERF_SAMPLE_ADDR as u64;
    /// `PERF_SAMPLE_CPU`: `u32 cpu, u32 res`.
    pub const CPU: u64 = super::sys::PERF_SAMPLE_CPU as u64;
}

/// A `perf_event_attr` under construction. Starts as a software event of the calling thread,
/// user space only, enabled at open, counting (no samples) until [`EventAttr::sample_period`].
#[derive(Clone, Copy)]
pub struct EventAttr {
    raw: sys::perf_event_attr,
}

impl fmt::Debug for EventAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventAttr")
            .field("type", &self.raw.type_)
            .field("config", &self.raw.config)
            .field("sample_type", &self.raw.sample_type)
            .field("sample_id_all", &self.raw.sample_id_all())
            .field("comm", &self.raw.comm())
            .field("mmap2", &self.raw.mmap2())
            .finish_non_exhaustive()
    }
}

impl EventAttr {
    /// A software event (`PERF_TYPE_SOFTWARE`) with the given `PERF_COUNT_SW_*` config.
    pub fn software(config: u64) -> Self {
        // SAFETY: perf_event_attr is a plain C struct of integers and unions of integers, for
        // which all-zero is a valid (and the documented default) value.
        let mut raw: sys::perf_event_attr = unsafe { core::mem::zeroed() };
        raw.type_ = sys::PERF_TYPE_SOFTWARE;
        raw.size = core::mem::size_of::<sys::perf_event_attr>() as u32;
        raw.config = config;
        raw.set_disabled(0);
        raw.set_exclude_kernel(1);
        raw.set_exclude_hv(1);
        Self { raw }
    }

    /// `PERF_COUNT_SW_DUMMY`: counts nothing, carries side-band records and the time page.
    pub fn dummy() -> Self {
        Self::software(u64::from(sys::PERF_COUNT_SW_DUMMY))
    }

    /// `PERF_COUNT_SW_PAGE_FAULTS`, one sample per fault.
    pub fn page_faults() -> Self {
        Self::software(u64::from(sys::PERF_COUNT_SW_PAGE_FAULTS)).sample_period(1)
    }

    /// Emit a sample every `period` events (0: count only).
    pub fn sample_period(mut self, period: u64) -> Self {
        self.raw.__bindgen_anon_1.sample_period = period;
        self.raw.set_freq(0);
        self
    }

    /// `PERF_SAMPLE_*` bits (see [`sample`]).
    pub fn sample_type(mut self, bits: u64) -> Self {
        self.raw.sample_type = bits;
        self
    }

    /// Append the `sample_type` id fields (pid/tid, time, cpu) to side-band records too.
    pub fn sample_id_all(mut self, on: bool) -> Self {
        self.raw.set_sample_id_all(on.into());
        self
    }

    /// `PERF_RECORD_COMM` when the thread's name changes (`prctl(PR_SET_NAME)`, exec).
    pub fn comm(mut self, on: bool) -> Self {
        self.raw.set_comm(on.into());
        self
    }

    /// `PERF_RECORD_MMAP2` for executable mappings (sets `mmap` and `mmap2`, as perf does).
    pub fn mmap2(mut self, on: bool) -> Self {
        self.raw.set_mmap(on.into());
        self.raw.set_mmap2(on.into());
        self
    }

    /// `PERF_RECORD_FORK` / `PERF_RECORD_EXIT`.
    pub fn task(mut self, on: bool) -> Self {
        self.raw.set_task(on.into());
        self
    }

    /// The `sample_type` set so far.
    pub fn sample_type_bits(&self) -> u64 {
        self.raw.sample_type
    }

    /// Whether `sample_id_all` is set.
    pub fn has_sample_id_all(&self) -> bool {
        self.raw.sample_id_all() != 0
    }

    /// The raw attribute, for callers that need a field this builder does not cover.
    pub fn as_raw(&self) -> &sys::perf_event_attr {
        &self.raw
    }
}

/// An open perf event of the calling thread (`pid = 0, cpu = -1`). Closed on drop.
///
/// The event follows the thread that opened it across CPUs and observes only that thread.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
    sample_type: u64,
    sample_id_all: bool,
}

impl PerfEvent {
    /// Opens `attr` for the calling thread on any CPU, with `PERF_FLAG_FD_CLOEXEC`.
    ///
    /// # Errors
    /// [`OpenError`] classified from `errno` (see [`classify_open_errno`]).
    pub fn open(attr: &EventAttr) -> Result<Self, OpenError> {
        let mut raw = attr.raw;
        // SAFETY: `raw` is a fully initialised perf_event_attr whose `size` matches the struct
        // we pass; it asks for a user-space-only software event of this thread, which has no
        // effect on memory safety. The kernel may write `size` back into our local copy.
        let fd = unsafe {
            perf_event_open_sys::perf_event_open(
                &mut raw,
                0,
                -1,
                -1,
                sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            let errno = last_errno();
            return Err(classify_open_errno(errno, read_paranoid()));
        }
        Ok(Self {
            // SAFETY: perf_event_open returned a fresh descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            sample_type: attr.raw.sample_type,
            sample_id_all: attr.raw.sample_id_all() != 0,
        })
    }

    /// The `sample_type` the event was opened with.
    pub fn sample_type(&self) -> u64 {
        self.sample_type
    }

    /// Whether the event was opened with `sample_id_all`.
    pub fn sample_id_all(&self) -> bool {
        self.sample_id_all
    }

    /// Maps only the event's first page (the time page), read-only.
    ///
    /// # Errors
    /// [`OpenError::MmapLimit`] / [`OpenError::Mmap`] classified from `errno`.
    pub fn map_page_only(&self) -> Result<PageMapping, OpenError> {
        let len = page_size();
        let ptr = mmap_fd(self.fd.as_raw_fd(), len, libc::PROT_READ)?;
        Ok(PageMapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// Maps the time page plus a ring of `2^data_pages_log2` pages, read-write so that the
    /// reader can publish `data_tail` (the kernel then never overwrites unread records).
    ///
    /// # Errors
    /// [`OpenError::MmapLimit`] when `perf_event_mlock_kb` is exceeded, [`OpenError::Mmap`] else.
    pub fn map_ring(&self, data_pages_log2: u32) -> Result<RingMapping, OpenError> {
        if data_pages_log2 > 16 {
            return Err(OpenError::Mmap {
                errno: libc::EINVAL,
            });
        }
        let page = page_size();
        let data_len = page << data_pages_log2;
        let len = page + data_len;
        let ptr = mmap_fd(self.fd.as_raw_fd(), len, libc::PROT_READ | libc::PROT_WRITE)?;
        Ok(RingMapping {
            page: PageMapping {
                ptr: ptr.cast(),
                len,
            },
            data_len,
        })
    }
}

impl AsFd for PerfEvent {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for PerfEvent {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A mapping whose first page is a `perf_event_mmap_page`. Unmapped on drop.
///
/// The page stays valid after the event's descriptor is closed (the mapping holds a reference
/// to the event), and is not inherited by a fork child (the kernel marks it do-not-copy).
#[derive(Debug)]
pub struct PageMapping {
    ptr: NonNull<PerfEventMmapPage>,
    len: usize,
}

// SAFETY: the mapping is process-wide memory; nothing here is tied to the mapping thread, and
// all access to the kernel-written page goes through raw pointers (atomic loads by readers).
unsafe impl Send for PageMapping {}
// SAFETY: as above; `&PageMapping` only hands out the raw pointer.
unsafe impl Sync for PageMapping {}

impl PageMapping {
    /// The page. The kernel writes it concurrently: read it only with atomic/volatile loads
    /// (e.g. `perfclock_core::PageReader`), never through a `&PerfEventMmapPage`.
    /// Valid for as long as `self` lives.
    pub fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.ptr
    }

    /// Length of the whole mapping in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty (at least one page); here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Gives up ownership: the mapping is never unmapped. For a process-wide clock that keeps
    /// its page for the life of the process.
    pub fn leak(self) -> NonNull<PerfEventMmapPage> {
        let ptr = self.ptr;
        core::mem::forget(self);
        ptr
    }
}

impl Drop for PageMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned and we own the mapping; no
        // reference into it outlives `self` (only raw pointers were handed out, documented as
        // valid for the life of `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// The time page followed by the data ring (see [`crate::ring::RingReader`]).
#[derive(Debug)]
pub struct RingMapping {
    page: PageMapping,
    data_len: usize,
}

impl RingMapping {
    /// The control page (time fields, `data_head`, `data_tail`).
    pub fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.page.page()
    }

    /// Start of the data area (one page after the control page).
    pub fn data(&self) -> NonNull<u8> {
        // SAFETY: the mapping is `page_size() + data_len` bytes long, so one page in is still
        // inside it (and non-null).
        unsafe { NonNull::new_unchecked(self.page.ptr.as_ptr().cast::<u8>().add(page_size())) }
    }

    /// Size of the data area in bytes (a power of two).
    pub fn data_len(&self) -> usize {
        self.data_len
    }
}

#[cfg(test)]
impl RingMapping {
    /// A ring in ordinary anonymous memory, laid out like a perf mapping, so that tests can
    /// play the kernel's part.
    pub(crate) fn anonymous_for_test(data_pages_log2: u32) -> Self {
        let page = page_size();
        let data_len = page << data_pages_log2;
        let len = page + data_len;
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        RingMapping {
            page: PageMapping {
                ptr: NonNull::new(ptr.cast()).unwrap(),
                len,
            },
            data_len,
        }
    }
}

fn mmap_fd(fd: RawFd, len: usize, prot: libc::c_int) -> Result<NonNull<u8>, OpenError> {
    // SAFETY: a fresh shared mapping of a perf event fd at an address the kernel picks; it does
    // not alias any existing Rust object.
    let ptr = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
    if ptr == libc::MAP_FAILED {
        return Err(classify_mmap_errno(last_errno()));
    }
    NonNull::new(ptr.cast()).ok_or(OpenError::Mmap {
        errno: libc::EINVAL,
    })
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| *s > 0)
        .unwrap_or(4096)
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `/proc/sys/kernel/perf_event_paranoid`, if readable.
pub fn read_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Why a perf event could not be opened or mapped. Each variant's `Display` says what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenError {
    /// `EACCES`/`EPERM` from `perf_event_open`: perf_event_paranoid, missing CAP_PERFMON, or a
    /// seccomp filter (containers' default profiles refuse `perf_event_open` with `EPERM`).
    PermissionDenied {
        /// The errno.
        errno: i32,
        /// `/proc/sys/kernel/perf_event_paranoid` at the time, if readable.
        paranoid: Option<i32>,
    },
    /// `ENOSYS`: a kernel without `CONFIG_PERF_EVENTS`, or a sandbox that hides the syscall.
    NoPerfSupport {
        /// The errno.
        errno: i32,
    },
    /// `EMFILE`/`ENFILE`: out of file descriptors.
    FdExhausted {
        /// The errno.
        errno: i32,
    },
    /// `ENOENT`/`EINVAL`/`EOPNOTSUPP`: this kernel does not support the event or an attribute.
    EventUnsupported {
        /// The errno.
        errno: i32,
    },
    /// `ENOMEM`/`EPERM` from `mmap`: the ring exceeds `perf_event_mlock_kb` (or memory is short).
    MmapLimit {
        /// The errno.
        errno: i32,
    },
    /// Any other `mmap` failure.
    Mmap {
        /// The errno.
        errno: i32,
    },
    /// Any other `perf_event_open` failure.
    Other {
        /// The errno.
        errno: i32,
    },
}

impl OpenError {
    /// The underlying errno.
    pub fn errno(&self) -> i32 {
        match *self {
            OpenError::PermissionDenied { errno, .. }
            | OpenError::NoPerfSupport { errno }
            | OpenError::FdExhausted { errno }
            | OpenError::EventUnsupported { errno }
            | OpenError::MmapLimit { errno }
            | OpenError::Mmap { errno }
            | OpenError::Other { errno } => errno,
        }
    }
}

/// Classifies an errno from `perf_event_open`. `paranoid` is the current
/// `perf_event_paranoid` (see [`read_paranoid`]); it only refines the message.
pub fn classify_open_errno(errno: i32, paranoid: Option<i32>) -> OpenError {
    match errno {
        libc::EACCES | libc::EPERM => OpenError::PermissionDenied { errno, paranoid },
        libc::ENOSYS => OpenError::NoPerfSupport { errno },
        libc::EMFILE | libc::ENFILE => OpenError::FdExhausted { errno },
        libc::ENOENT | libc::EINVAL | libc::EOPNOTSUPP | libc::E2BIG => {
            OpenError::EventUnsupported { errno }
        }
        _ => OpenError::Other { errno },
    }
}

/// Classifies an errno from `mmap` of a perf event.
pub fn classify_mmap_errno(errno: i32) -> OpenError {
    match errno {
        libc::ENOMEM | libc::EPERM => OpenError::MmapLimit { errno },
        _ => OpenError::Mmap { errno },
    }
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

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let errno = self.errno();
        let name = errno_name(errno);
        match *self {
            OpenError::PermissionDenied { paranoid, .. } => {
                write!(f, "perf_event_open refused ({name}, {errno}): ")?;
                match paranoid {
                    Some(level) if level > 2 => write!(
                        f,
                        "kernel.perf_event_paranoid is {level} (above 2 forbids all unprivileged \
                         perf use): lower it with `sysctl kernel.perf_event_paranoid=2`, or grant \
                         CAP_PERFMON"
                    )?,
                    Some(level) => write!(
                        f,
                        "kernel.perf_event_paranoid is {level}, which allows a user-space-only \
                         event of one's own thread, so the likely cause is a seccomp filter (a \
                         container's default profile refuses perf_event_open: run with a \
                         profile that allows it, e.g. `--security-opt seccomp=...`) or a missing \
                         CAP_PERFMON under an LSM"
                    )?,
                    None => write!(
                        f,
                        "check kernel.perf_event_paranoid (<= 2 allows this event), CAP_PERFMON, \
                         and any seccomp filter (containers refuse perf_event_open by default)"
                    )?,
                }
                Ok(())
            }
            OpenError::NoPerfSupport { .. } => write!(
                f,
                "perf_event_open is not available ({name}, {errno}): the kernel lacks \
                 CONFIG_PERF_EVENTS, or a sandbox/seccomp filter hides the system call"
            ),
            OpenError::FdExhausted { .. } => write!(
                f,
                "out of file descriptors opening a perf event ({name}, {errno}): raise \
                 `ulimit -n` (RLIMIT_NOFILE) or fs.file-max, or close descriptors"
            ),
            OpenError::EventUnsupported { .. } => write!(
                f,
                "this kernel does not support the requested software perf event or one of its \
                 attributes ({name}, {errno}): a kernel of 4.x or newer is needed"
            ),
            OpenError::MmapLimit { .. } => write!(
                f,
                "mapping the perf ring failed ({name}, {errno}): it exceeds \
                 kernel.perf_event_mlock_kb (raise it, or grant CAP_IPC_LOCK), or memory is short"
            ),
            OpenError::Mmap { .. } => {
                write!(f, "mapping the perf event failed ({name}, {errno})")
            }
            OpenError::Other { .. } => write!(f, "perf_event_open failed ({name}, {errno})"),
        }
    }
}

impl std::error::Error for OpenError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_open_errnos() {
        for errno in [libc::EACCES, libc::EPERM] {
            assert_eq!(
                classify_open_errno(errno, Some(2)),
                OpenError::PermissionDenied {
                    errno,
                    paranoid: Some(2)
                }
            );
        }
        assert_eq!(
            classify_open_errno(libc::ENOSYS, None),
            OpenError::NoPerfSupport {
                errno: libc::ENOSYS
            }
        );
        for errno in [libc::EMFILE, libc::ENFILE] {
            assert_eq!(
                classify_open_errno(errno, None),
                OpenError::FdExhausted { errno }
            );
        }
        for errno in [libc::ENOENT, libc::EINVAL, libc::EOPNOTSUPP] {
            assert_eq!(
                classify_open_errno(errno, None),
                OpenError::EventUnsupported { errno }
            );
        }
        assert_eq!(
            classify_open_errno(libc::EBUSY, None),
            OpenError::Other { errno: libc::EBUSY }
        );
    }

    #[test]
    fn classifies_mmap_errnos() {
        for errno in [libc::ENOMEM, libc::EPERM] {
            assert_eq!(classify_mmap_errno(errno), OpenError::MmapLimit { errno });
        }
        assert_eq!(
            classify_mmap_errno(libc::EINVAL),
            OpenError::Mmap {
                errno: libc::EINVAL
            }
        );
    }

    #[test]
    fn messages_name_the_knob() {
        let high = classify_open_errno(libc::EACCES, Some(3)).to_string();
        assert!(high.contains("perf_event_paranoid is 3"), "{high}");
        assert!(high.contains("CAP_PERFMON"), "{high}");
        let seccomp = classify_open_errno(libc::EPERM, Some(2)).to_string();
        assert!(seccomp.contains("seccomp"), "{seccomp}");
        assert!(classify_open_errno(libc::EMFILE, None)
            .to_string()
            .contains("RLIMIT_NOFILE"));
        assert!(classify_mmap_errno(libc::EPERM)
            .to_string()
            .contains("perf_event_mlock_kb"));
        assert!(classify_open_errno(libc::ENOSYS, None)
            .to_string()
            .contains("CONFIG_PERF_EVENTS"));
    }

    #[test]
    fn fd_exhaustion_is_classified_from_a_real_open() {
        // Runs itself again in a child process that lowers RLIMIT_NOFILE below the next free
        // descriptor, so a real perf_event_open fails with EMFILE without touching this process.
        const CHILD: &str = "PERFCLOCK_CALIB_EMFILE_CHILD";
        if std::env::var_os(CHILD).is_some() {
            let lim = libc::rlimit {
                rlim_cur: 3,
                rlim_max: 3,
            };
            // SAFETY: setrlimit with a valid, initialised struct.
            let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
            assert_eq!(rc, 0, "setrlimit failed");
            let result = PerfEvent::open(&EventAttr::dummy());
            assert!(
                matches!(
                    result,
                    Err(OpenError::FdExhausted {
                        errno: libc::EMFILE
                    })
                ),
                "{result:?}"
            );
            return;
        }
        let exe = std::env::current_exe().expect("current_exe");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "event::tests::fd_exhaustion_is_classified_from_a_real_open",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .expect("spawn child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn opens_and_maps_a_dummy_event() {
        let event = PerfEvent::open(&EventAttr::dummy()).expect("open dummy");
        let page = event.map_page_only().expect("map page");
        // SAFETY: the page is mapped for the life of `page`; `size` and `capabilities` are
        // read with volatile loads because the kernel may write the page.
        let (size, caps) = unsafe {
            let p = page.page().as_ptr();
            (
                core::ptr::addr_of!((*p).size).read_volatile(),
                core::ptr::addr_of!((*p).capabilities).read_volatile(),
            )
        };
        // perf_event_init_userpage sets `size` and cap_bit0_is_deprecated.
        assert!(size >= 64, "page size field {size}");
        assert_ne!(
            caps & perfclock_core::page::caps::BIT0_IS_DEPRECATED,
            0,
            "caps {caps:#x}"
        );
        // A second mapping of one event must have the same size: the kernel refuses others.
        assert_eq!(
            event.map_ring(1).err(),
            Some(OpenError::Mmap {
                errno: libc::EINVAL
            })
        );
        let event = PerfEvent::open(&EventAttr::dummy()).expect("open dummy");
        let ring = event.map_ring(1);
        assert!(ring.is_ok(), "{ring:?}");
        assert_eq!(ring.unwrap().data_len(), 2 * page_size());
    }
}
