//! Opening a perf event of the calling thread.
//!
//! # Safety
//! This module makes the `perf_event_open(2)` calls, and the fixed `mmap(2)` a fork child's
//! handler makes over the hole its parent's time page left. A descriptor it gets is owned by
//! exactly one [`PerfEvent`]; its mappings are [`Mapping`]s.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use perf_event_open_sys::bindings as sys;

use super::attr::EventAttr;
use crate::error::{Op, SysError};
use crate::mapping::page_size;
use crate::mapping::{Access, Mapping, PageMapping, RingMapping, Sharing};

/// The largest ring [`PerfEvent::map_ring`] maps: 2^16 data pages.
const MAX_RING_PAGES_LOG2: u32 = 16;

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
    /// A [`SysError`] of [`Op::PerfEventOpen`]; its [`SysError::kind`] says what to change
    /// (perf_event_paranoid, seccomp, the descriptor limit, the kernel's perf support).
    ///
    /// # Example
    /// ```no_run
    /// use perfclock_os::{EventAttr, PerfEvent};
    ///
    /// let event = PerfEvent::open(&EventAttr::dummy())?;
    /// assert_eq!(event.sample_type(), 0);
    /// # Ok::<(), perfclock_os::SysError>(())
    /// ```
    pub fn open(attr: &EventAttr) -> Result<Self, SysError> {
        let mut raw = *attr.as_raw();
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
            return Err(SysError::last(Op::PerfEventOpen));
        }
        Ok(Self {
            // SAFETY: perf_event_open returned a fresh descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            sample_type: attr.sample_type_bits(),
            sample_id_all: attr.has_sample_id_all(),
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
    /// A [`SysError`] of [`Op::Mmap`].
    pub fn map_page_only(&self) -> Result<PageMapping, SysError> {
        let mapping = self.map(page_size(), Access::Read)?;
        Ok(PageMapping::new(mapping))
    }

    /// Maps the time page plus a ring of `2^data_pages_log2` pages, read-write so that the
    /// reader can publish `data_tail` (the kernel then never overwrites unread records).
    ///
    /// # Errors
    /// A [`SysError`] of [`Op::Mmap`]: kind [`crate::ErrorKind::MmapLimit`] when
    /// `perf_event_mlock_kb` is exceeded; `EINVAL` for `data_pages_log2` over 16.
    pub fn map_ring(&self, data_pages_log2: u32) -> Result<RingMapping, SysError> {
        if data_pages_log2 > MAX_RING_PAGES_LOG2 {
            return Err(SysError::new(Op::Mmap, libc::EINVAL));
        }
        let page = page_size();
        let data_len = page << data_pages_log2;
        let len = page + data_len;
        let mapping = self.map(len, Access::ReadWrite)?;
        Ok(RingMapping::new(mapping, data_len))
    }

    fn map(&self, len: usize, access: Access) -> Result<Mapping, SysError> {
        Mapping::file(self.fd.as_fd(), len, access, Sharing::Shared)
            .map_err(|error| SysError::new(Op::Mmap, error.raw_os_error().unwrap_or(libc::EINVAL)))
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

/// Maps the time page of a fresh dummy event of the calling process over `address`
/// (`MAP_FIXED`), or an anonymous zero page if that fails (readers report a zero page as
/// "time unavailable", never a fault). For a fork child, whose copy of a perf mapping is gone
/// (the kernel marks it do-not-copy): makes system calls only, no allocation, no locks, so a
/// `pthread_atfork` child handler may call it.
///
/// # Safety
/// `address` must be page-aligned and `address..address + page_size()` a range nothing in this
/// process uses (the hole a do-not-copy perf mapping left in a fork child).
pub unsafe fn remap_page_after_fork(address: core::ptr::NonNull<u8>) {
    let address = address.as_ptr().cast::<libc::c_void>();
    let length = page_size();
    let mut attr = *EventAttr::dummy().as_raw();
    // SAFETY: a valid attr for a user-space-only software event of this thread.
    let fd = unsafe {
        perf_event_open_sys::perf_event_open(
            &mut attr,
            0,
            -1,
            -1,
            sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    let fixed = libc::MAP_SHARED | libc::MAP_FIXED;
    if fd >= 0 {
        // SAFETY: maps the new event's page over the hole, per the caller's contract.
        let mapped = unsafe { libc::mmap(address, length, libc::PROT_READ, fixed, fd, 0) };
        // SAFETY: `fd` is ours; the mapping (if any) keeps the event alive.
        unsafe { libc::close(fd) };
        if mapped != libc::MAP_FAILED {
            return;
        }
    }
    let anonymous = libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_ANONYMOUS;
    // SAFETY: as above; a zero page reads as "no capabilities", a typed error for readers.
    unsafe { libc::mmap(address, length, libc::PROT_READ, anonymous, -1, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn fd_exhaustion_is_classified_from_a_real_open() {
        // Runs itself again in a child process that lowers RLIMIT_NOFILE below the next free
        // descriptor, so a real perf_event_open fails with EMFILE without touching this process.
        const CHILD: &str = "PERFCLOCK_EVENT_EMFILE_CHILD";
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
                    Err(e) if e.kind() == ErrorKind::FdExhausted && e.errno() == libc::EMFILE
                ),
                "{result:?}"
            );
            return;
        }
        let exe = std::env::current_exe().expect("current_exe");
        // libtest names a test by its module path without the crate's name.
        let (_crate, module) = module_path!().split_once("::").expect("a module path");
        let name = format!("{module}::fd_exhaustion_is_classified_from_a_real_open");
        let out = std::process::Command::new(exe)
            .args(["--exact", &name, "--test-threads=1"])
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
            Some(SysError::new(Op::Mmap, libc::EINVAL))
        );
        let event = PerfEvent::open(&EventAttr::dummy()).expect("open dummy");
        let ring = event.map_ring(1);
        assert!(ring.is_ok(), "{ring:?}");
        assert_eq!(ring.unwrap().data_len(), 2 * page_size());
    }
}
