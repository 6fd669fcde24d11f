//! Minimal private COMM-bracket collector, used by the calibrator until the crate's general
//! ground-truth module lands (then this file goes away).
//!
//! One bracket: ordered counter read, `prctl(PR_SET_NAME, <the thread's current name>)`, ordered
//! counter read; the kernel emits a `PERF_RECORD_COMM` for the thread with its `sample_id_all`
//! timestamp (`local_clock()`, the perf clock). Re-setting the *same* name keeps the thread's
//! name unchanged, so a profiler recording the process sees extra COMM records for the
//! calibration thread but no renaming.
//!
//! # Safety
//! Calls `perf_event_open`, `mmap`, `munmap`, `prctl`, `close`. The ring mapping is owned by the
//! [`CommProbe`] and unmapped on drop; the kernel writes it concurrently, so the header is read
//! through atomics and record bytes only between the tail we own and the head we loaded.
#![allow(unsafe_code)]

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys as sys;
use perfclock_core::counter;

use crate::fit::Constraint;

/// Data pages in the ring (power of two).
const DATA_PAGES: usize = 16;

/// Why the probe could not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeError {
    /// `perf_event_open` failed with this errno.
    Open(i32),
    /// `mmap` of the ring failed with this errno.
    Mmap(i32),
    /// The counter cannot be read on this architecture.
    CounterUnsupported,
    /// The ring is corrupt (record size 0 or past the head).
    Ring,
}

impl core::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Open(e) => write!(f, "perf_event_open failed: errno {e}"),
            Self::Mmap(e) => write!(f, "mmap of the perf ring failed: errno {e}"),
            Self::CounterUnsupported => {
                f.write_str("no user-readable counter on this architecture")
            }
            Self::Ring => f.write_str("perf ring buffer holds a malformed record"),
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A dummy event on the calling thread with COMM records and `sample_id_all` TID|TIME|CPU.
#[derive(Debug)]
pub struct CommProbe {
    fd: i32,
    base: NonNull<u8>,
    len: usize,
    page_size: usize,
    name: [u8; 16],
    tid: u32,
}

// SAFETY: the probe owns its fd and mapping; nothing in it is tied to the opening thread except
// which thread's COMM records arrive, which the calibrator accounts for by using it on one thread.
unsafe impl Send for CommProbe {}

impl CommProbe {
    /// Open the event for the calling thread and map its ring.
    pub fn open() -> Result<Self, ProbeError> {
        if counter::read_counter_ordered().is_none() {
            return Err(ProbeError::CounterUnsupported);
        }
        // SAFETY: perf_event_attr is plain integers; all-zero is its documented default.
        let mut attr: sys::bindings::perf_event_attr = unsafe { core::mem::zeroed() };
        attr.type_ = sys::bindings::PERF_TYPE_SOFTWARE;
        attr.size = core::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
        attr.config = u64::from(sys::bindings::PERF_COUNT_SW_DUMMY);
        attr.sample_type = u64::from(
            sys::bindings::PERF_SAMPLE_TID
                | sys::bindings::PERF_SAMPLE_TIME
                | sys::bindings::PERF_SAMPLE_CPU,
        );
        attr.set_comm(1);
        attr.set_sample_id_all(1);
        attr.set_exclude_kernel(1);
        attr.set_exclude_hv(1);
        // SAFETY: attr is a valid, fully initialised perf_event_attr that outlives the call.
        let fd = unsafe {
            sys::perf_event_open(
                &mut attr,
                0,
                -1,
                -1,
                sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
            )
        };
        if fd < 0 {
            return Err(ProbeError::Open(errno()));
        }
        // SAFETY: sysconf has no memory effects.
        let page_size = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .unwrap_or(4096)
            .max(4096);
        let len = page_size * (1 + DATA_PAGES);
        // SAFETY: a fresh shared mapping of our own perf fd; the result is checked below.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = errno();
            // SAFETY: fd is ours and open.
            unsafe { libc::close(fd) };
            return Err(ProbeError::Mmap(e));
        }
        let Some(base) = NonNull::new(ptr.cast::<u8>()) else {
            // SAFETY: fd is ours and open.
            unsafe { libc::close(fd) };
            return Err(ProbeError::Mmap(0));
        };
        let mut name = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes into the buffer we pass.
        unsafe {
            libc::prctl(
                libc::PR_GET_NAME,
                name.as_mut_ptr() as libc::c_ulong,
                0,
                0,
                0,
            )
        };
        // SAFETY: gettid has no memory effects.
        let tid = unsafe { libc::gettid() } as u32;
        Ok(Self {
            fd,
            base,
            len,
            page_size,
            name,
            tid,
        })
    }

    fn header_word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: offset is data_head (1024) or data_tail (1032) inside the first page, 8-aligned;
        // the kernel and we access these words only atomically.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn data_byte(&self, pos: u64) -> u8 {
        let size = (self.page_size * DATA_PAGES) as u64;
        let off = self.page_size + (pos % size) as usize;
        // SAFETY: off is inside the data area of our mapping; the byte lies between the tail we
        // own and the head loaded with Acquire, so the kernel has finished writing it.
        unsafe { self.base.as_ptr().add(off).read_volatile() }
    }

    fn read_u64(&self, pos: u64) -> u64 {
        let mut b = [0u8; 8];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = self.data_byte(pos + i as u64);
        }
        u64::from_ne_bytes(b)
    }

    /// Consume all pending records; return the timestamps of our thread's COMM records.
    fn drain(&self, times: &mut Vec<u64>) -> Result<(), ProbeError> {
        const DATA_HEAD: usize = 1024;
        const DATA_TAIL: usize = 1032;
        // ATOMICS: Acquire pairs with the kernel's store of data_head after writing records.
        let head = self.header_word(DATA_HEAD).load(Ordering::Acquire);
        let mut tail = self.header_word(DATA_TAIL).load(Ordering::Relaxed);
        while tail < head {
            let hdr = self.read_u64(tail);
            let rtype = (hdr & 0xffff_ffff) as u32;
            let size = hdr >> 48;
            if size < 8 || tail + size > head {
                return Err(ProbeError::Ring);
            }
            if rtype == sys::bindings::PERF_RECORD_COMM && size >= 8 + 8 + 24 {
                // Body: pid, tid, comm (8-padded); sample_id: pid, tid, time, cpu, res.
                let tid = (self.read_u64(tail + 8) >> 32) as u32;
                let time = self.read_u64(tail + size - 16);
                if tid == self.tid {
                    times.push(time);
                }
            }
            tail += size;
        }
        // ATOMICS: Release orders our reads of the records before handing the space back.
        self.header_word(DATA_TAIL).store(tail, Ordering::Release);
        Ok(())
    }

    /// Take up to `n` brackets, appending those that got exactly one COMM record.
    pub fn collect(&mut self, n: usize, out: &mut Vec<Constraint>) -> Result<(), ProbeError> {
        let mut times = Vec::with_capacity(4);
        self.drain(&mut times)?;
        for _ in 0..n {
            times.clear();
            let before = counter::read_counter_ordered().ok_or(ProbeError::CounterUnsupported)?;
            // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes; name is
            // 16 bytes and was filled by PR_GET_NAME, which NUL-terminates.
            unsafe {
                libc::prctl(
                    libc::PR_SET_NAME,
                    self.name.as_ptr() as libc::c_ulong,
                    0,
                    0,
                    0,
                )
            };
            let after = counter::read_counter_ordered().ok_or(ProbeError::CounterUnsupported)?;
            self.drain(&mut times)?;
            if let [kernel_ns] = times[..] {
                out.push(Constraint {
                    before,
                    after,
                    kernel_ns,
                });
            }
        }
        Ok(())
    }
}

impl Drop for CommProbe {
    fn drop(&mut self) {
        // SAFETY: base/len are our mapping; fd is ours. Nothing borrows them past this point.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
            libc::close(self.fd);
        }
    }
}
