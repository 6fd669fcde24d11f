//! Owned mappings: [`Mapping`], the one owner of an `mmap` in the workspace, the perf event
//! mappings built on it (the time page, and the page followed by a ring), the
//! [`ExecMarkerMapping`] through which `perf record` learns of a jitdump or marker file, and the
//! [`page_size`].
//!
//! Written over `libc` rather than taken from memmap2: the mappings here are read by the kernel's
//! or another process's concurrent writes, so only raw pointers may be handed out (memmap2's
//! `Mmap` derefs to a slice); they include a private executable mapping of a file (memmap2 maps
//! executable files shared) and `MADV_DONTNEED` on memory that is only read through raw
//! pointers (memmap2 marks that advice unsafe for its slice-backed types).
//!
//! # Safety
//! Each mapping is owned by exactly one [`Mapping`] that unmaps it on drop; pointers into it
//! are only handed out as raw pointers, because other writers change that memory concurrently,
//! so no Rust reference into it can be invalidated by the replacement or discard operations.
//! [`ExecMarkerMapping`] never hands out a pointer into it (nothing in this process reads it, so
//! neither the file's size nor its concurrent appends can be observed by Rust code). `sysconf`
//! (the page size) has no preconditions.
#![allow(unsafe_code)]

use core::ptr::NonNull;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use perfclock_core::page::PerfEventMmapPage;

/// What a [`Mapping`]'s pages may be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `PROT_READ`.
    Read,
    /// `PROT_READ | PROT_WRITE`.
    ReadWrite,
    /// `PROT_READ | PROT_EXEC`: how `perf record` is told of a file (it logs executable
    /// mappings by default).
    ReadExec,
}

impl Access {
    #[inline(always)]
    fn prot(self) -> libc::c_int {
        match self {
            Access::Read => libc::PROT_READ,
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
            Access::ReadExec => libc::PROT_READ | libc::PROT_EXEC,
        }
    }
}

/// How a file mapping relates to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// `MAP_SHARED`: the file's pages, seen by every process that maps them.
    Shared,
    /// `MAP_PRIVATE`: copy on write.
    Private,
}

impl Sharing {
    fn flag(self) -> libc::c_int {
        match self {
            Sharing::Shared => libc::MAP_SHARED,
            Sharing::Private => libc::MAP_PRIVATE,
        }
    }
}

/// One `mmap` at an address the kernel picked, owned by this value and unmapped on drop.
///
/// [`Mapping::anonymous`] and [`Mapping::touch`] are always inlined, also in unoptimised
/// builds: they are the actions of the calibration's brackets, timed between two counter reads,
/// where every call adds to the bound.
///
/// Hands out its start only as a raw pointer: what is mapped may be written by the kernel or by
/// another process while this process reads it (read it with atomic or volatile loads, e.g.
/// through `perfclock_core`'s readers, which take such a pointer with an `unsafe` constructor
/// whose contract this type's lifetime meets).
#[derive(Debug)]
pub struct Mapping {
    /// Invariant: the start of a mapping of `len` bytes that this value owns.
    ptr: NonNull<u8>,
    len: usize,
    /// Anonymous memory: every byte of it can be read without a fault the kernel cannot
    /// satisfy (a file mapping past the file's end raises SIGBUS).
    anonymous: bool,
}

// SAFETY: the mapping is process-wide memory; nothing here is tied to the mapping thread, and
// all access to its bytes goes through raw pointers.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out the raw pointer and the length.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `len` bytes of private anonymous memory, zero-filled.
    ///
    /// # Errors
    /// `mmap`'s errno (`ENOMEM`; `EINVAL` for a length of 0).
    #[inline(always)]
    pub fn anonymous(len: usize, access: Access) -> io::Result<Mapping> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // SAFETY: a null hint makes the kernel pick a fresh range, aliasing no Rust object; no
        // descriptor is involved.
        let ptr = unsafe { libc::mmap(core::ptr::null_mut(), len, access.prot(), flags, -1, 0) };
        Self::from_result(ptr, len, true)
    }

    /// `len` bytes of the file or object behind `fd` from its start.
    ///
    /// # Errors
    /// `mmap`'s errno: `EACCES` for an access the descriptor does not allow, `EPERM` for an
    /// executable mapping on a `noexec` mount, `ENODEV` for a descriptor that cannot be mapped.
    pub fn file(
        fd: BorrowedFd<'_>,
        len: usize,
        access: Access,
        sharing: Sharing,
    ) -> io::Result<Mapping> {
        let raw = fd.as_raw_fd();
        // SAFETY: a null hint makes the kernel pick a fresh range, aliasing no Rust object; `fd`
        // is open for the call (the mapping keeps its own reference to the file). Bytes past the
        // file's end fault when touched, which only raw-pointer readers could do, and they are
        // told the length.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                access.prot(),
                sharing.flag(),
                raw,
                0,
            )
        };
        Self::from_result(ptr, len, false)
    }

    #[inline(always)]
    fn from_result(ptr: *mut libc::c_void, len: usize, anonymous: bool) -> io::Result<Mapping> {
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(Mapping {
            ptr,
            len,
            anonymous,
        })
    }

    /// Puts the first `len` bytes of the file or object behind `fd` in place of this mapping's
    /// pages, at the same address, shared and with `access` (`MAP_FIXED`): a reader sees the old
    /// pages or the new ones, never a hole.
    ///
    /// # Errors
    /// `mmap`'s errno; the old pages then stay mapped.
    pub fn replace_with_file(&self, fd: BorrowedFd<'_>, access: Access) -> io::Result<()> {
        let flags = libc::MAP_SHARED | libc::MAP_FIXED;
        // SAFETY: the range is exactly this value's own mapping, replaced whole in one call; it
        // stays mapped throughout and owned by `self` afterwards (unmapped by its drop). Only raw
        // pointers into it exist, so no reference sees its bytes change.
        let ptr = unsafe {
            libc::mmap(
                self.ptr.as_ptr().cast(),
                self.len,
                access.prot(),
                flags,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Drops the pages' contents (`MADV_DONTNEED`): a private anonymous mapping reads as zeros
    /// again, each page faulting on its next touch.
    ///
    /// # Errors
    /// `madvise`'s errno.
    pub fn discard(&self) -> io::Result<()> {
        self.advise(libc::MADV_DONTNEED)
    }

    /// Asks for small pages only (`MADV_NOHUGEPAGE`), so that each page faults on its own.
    ///
    /// # Errors
    /// `madvise`'s errno (`EINVAL` on a kernel without transparent huge pages).
    pub fn no_huge_pages(&self) -> io::Result<()> {
        self.advise(libc::MADV_NOHUGEPAGE)
    }

    fn advise(&self, advice: libc::c_int) -> io::Result<()> {
        // SAFETY: the range is this value's own mapping. Discarding contents invalidates no Rust
        // reference: only raw pointers into it are handed out.
        let rc = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, advice) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads the byte at `offset` of an anonymous mapping (a volatile read, never elided): the
    /// page faults in if it is not present. Whether it read (`false` past the end, or for a file
    /// mapping, whose pages past the file's end would raise SIGBUS).
    #[inline(always)]
    pub fn touch(&self, offset: usize) -> bool {
        if !self.anonymous || offset >= self.len {
            return false;
        }
        // SAFETY: `offset` is inside this value's own anonymous mapping, which is readable in
        // every `Access` and backed by memory the kernel supplies on demand; a volatile read of
        // a byte through a raw pointer races with nothing Rust considers a reference.
        unsafe { self.ptr.as_ptr().add(offset).read_volatile() };
        true
    }

    /// The start of the mapping, valid for [`Mapping::len`] bytes while `self` lives.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping has no bytes (never: `mmap` refuses a length of 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned and we own the mapping; no
        // reference into it outlives `self` (only raw pointers were handed out, documented as
        // valid for the life of `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// A mapping whose first page is a `perf_event_mmap_page`. Unmapped on drop.
///
/// The page stays valid after the event's descriptor is closed (the mapping holds a reference
/// to the event), and is not inherited by a fork child (the kernel marks it do-not-copy).
#[derive(Debug)]
pub struct PageMapping {
    /// Invariant: at least one page long, its first page a perf event's time page.
    mapping: Mapping,
}

impl PageMapping {
    /// A perf event's mapping, whose first page is the time page.
    pub(crate) fn new(mapping: Mapping) -> Self {
        Self { mapping }
    }

    /// The page. The kernel writes it concurrently: read it only with atomic/volatile loads
    /// (e.g. `perfclock_core::PageReader`), never through a `&PerfEventMmapPage`.
    /// Valid for as long as `self` lives.
    pub fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.mapping.as_ptr().cast()
    }
}

/// The time page followed by the data ring (see [`crate::RingReader`]).
#[derive(Debug)]
pub struct RingMapping {
    /// Invariant: one page followed by `data_len` bytes, writable.
    page: PageMapping,
    data_len: usize,
}

impl RingMapping {
    /// `mapping` must be one page followed by `data_len` (a power of two) writable bytes.
    pub(crate) fn new(mapping: Mapping, data_len: usize) -> Self {
        debug_assert_eq!(mapping.len(), page_size() + data_len);
        Self {
            page: PageMapping::new(mapping),
            data_len,
        }
    }

    /// The control page (time fields, `data_head`, `data_tail`).
    pub fn page(&self) -> NonNull<PerfEventMmapPage> {
        self.page.page()
    }

    /// Start of the data area (one page after the control page).
    pub fn data(&self) -> NonNull<u8> {
        // SAFETY: the mapping is `page_size() + data_len` bytes long, so one page in is still
        // inside it (and non-null).
        unsafe { NonNull::new_unchecked(self.page.mapping.as_ptr().as_ptr().add(page_size())) }
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
        let data_len = page_size() << data_pages_log2;
        let mapping = Mapping::anonymous(page_size() + data_len, Access::ReadWrite).unwrap();
        RingMapping::new(mapping, data_len)
    }
}

/// The system page size (`sysconf(_SC_PAGESIZE)`; 4096 should the call fail, which it does not
/// on Linux).
pub fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers and has no preconditions; glibc answers from the aux
    // vector it saved at start, without a system call.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| *s > 0)
        .unwrap_or(4096)
}

/// A private, read-only, executable mapping of the first page of a file, held so that
/// `perf record` logs an `MMAP2` record naming the file: that is how `perf inject --jit` finds a
/// `jit-<pid>.dump` and samply a `marker-<pid>.txt`. A default `perf record` logs only executable
/// mappings (data mappings need `--data`), and one that attaches later (`perf record -p`) reads
/// the mapping from `/proc/<pid>/maps`. Unmapped on drop.
///
/// Mapped like perf's own JVMTI agent maps its dump (`PROT_READ | PROT_EXEC`, `MAP_PRIVATE`):
/// memmap2 maps executable files `MAP_SHARED` only. Nothing reads the mapping: it exposes no
/// pointer or bytes, so the file may be empty (a page past its end would fault if read) or grow
/// while it is mapped.
#[derive(Debug)]
pub struct ExecMarkerMapping {
    /// Never read through (see above).
    mapping: Mapping,
}

impl ExecMarkerMapping {
    /// Maps the first page of `file` (opened for reading) executable.
    ///
    /// # Errors
    /// `mmap`'s errno: `EPERM` on a `noexec` mount, `EACCES` if `file` is not readable.
    pub fn new(file: &File) -> io::Result<ExecMarkerMapping> {
        let mapping = Mapping::file(
            file.as_fd(),
            page_size(),
            Access::ReadExec,
            Sharing::Private,
        )?;
        Ok(ExecMarkerMapping { mapping })
    }

    /// Where the file is mapped: the start of the range `perf record`'s `MMAP2` record and
    /// `/proc/<pid>/maps` name.
    pub fn address(&self) -> usize {
        self.mapping.as_ptr().as_ptr() as usize
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileExt;

    use super::*;
    use std::fs::File;

    /// The mapping's line in `/proc/self/maps`, if it is there.
    fn maps_line(mapping: &ExecMarkerMapping) -> Option<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let start = format!("{:x}-", mapping.address());
        maps.lines()
            .find(|line| line.starts_with(&start))
            .map(str::to_owned)
    }

    #[test]
    fn page_size_is_a_power_of_two() {
        assert!(page_size().is_power_of_two());
    }

    #[test]
    fn marker_mapping_is_private_executable_and_unmapped_on_drop() {
        let dir = std::env::temp_dir().join(format!("perfclock-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("marker-test.txt");
        let file = File::create_new(&path)
            .and_then(|_| File::open(&path))
            .unwrap();
        let mapping = ExecMarkerMapping::new(&file).unwrap();
        let line = maps_line(&mapping).expect("the mapping is in /proc/self/maps");
        assert!(line.contains(" r-xp "), "{line}");
        assert!(line.ends_with(path.to_str().unwrap()), "{line}");
        drop(mapping);
        // Judged by the file, not the address: a test on another thread may map anything at the
        // address just freed.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(
            !maps
                .lines()
                .any(|line| line.ends_with(path.to_str().unwrap())),
            "still mapped after drop"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn marker_mapping_of_a_write_only_file_is_an_error() {
        let file = File::options().write(true).open("/dev/null").unwrap();
        let error = ExecMarkerMapping::new(&file).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EACCES), "{error}");
    }

    #[test]
    fn discarded_anonymous_pages_read_as_zero_again() {
        let mapping = Mapping::anonymous(page_size(), Access::ReadWrite).unwrap();
        let byte = mapping.as_ptr().as_ptr();
        // SAFETY: the first byte of a live, writable mapping this test owns.
        unsafe { byte.write_volatile(7) };
        // SAFETY: as above.
        assert_eq!(unsafe { byte.read_volatile() }, 7);
        mapping.discard().unwrap();
        // SAFETY: as above; a discarded private anonymous page faults in zero-filled.
        assert_eq!(unsafe { byte.read_volatile() }, 0);
    }

    #[test]
    fn only_anonymous_bytes_inside_the_mapping_are_touched() {
        let mapping = Mapping::anonymous(page_size(), Access::Read).unwrap();
        assert!(mapping.touch(0));
        assert!(mapping.touch(page_size() - 1));
        assert!(!mapping.touch(page_size()));
        let short = file_holding(b"x");
        let file = Mapping::file(
            short.as_fd(),
            2 * page_size(),
            Access::Read,
            Sharing::Shared,
        )
        .unwrap();
        // The second page lies past the file's end: reading it would raise SIGBUS.
        assert!(!file.touch(page_size()));
    }

    #[test]
    fn replacing_keeps_the_address_and_shows_the_new_file() {
        let (old, new) = (file_holding(b"old!"), file_holding(b"new!"));
        let mapping =
            Mapping::file(old.as_fd(), page_size(), Access::Read, Sharing::Shared).unwrap();
        let at = mapping.as_ptr();
        // SAFETY: four bytes inside a live mapping of a four-byte file (the rest of the page
        // reads as zeros).
        let read = || unsafe { core::slice::from_raw_parts(at.as_ptr(), 4).to_vec() };
        assert_eq!(read(), b"old!");
        mapping
            .replace_with_file(new.as_fd(), Access::Read)
            .unwrap();
        assert_eq!(mapping.as_ptr(), at);
        assert_eq!(read(), b"new!");
    }

    /// A memfd holding `bytes`.
    fn file_holding(bytes: &[u8]) -> std::fs::File {
        let file = crate::memfd::create_memfd(c"perfclock-mapping-test", 0).unwrap();
        file.write_all_at(bytes, 0).unwrap();
        file
    }
}
