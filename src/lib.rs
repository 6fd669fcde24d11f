//! perfclock: the clock Linux perf stamps into its samples (`PERF_SAMPLE_TIME`, the kernel's
//! `local_clock()`), read in user space at the cost of a counter read.
//!
//! ```no_run
//! let start = perfclock::now_ns();
//! // ... work whose perf samples you want to line up with `start` ...
//! println!("mode {:?}, +- {} ns", perfclock::mode(), perfclock::error_bound_ns());
//! # let _ = start;
//! ```
//!
//! # Design
//! A [`Clock`] is in one of four [`Mode`]s (or there is none, with the reason as an [`Error`]):
//! - **kernel**: it opens a `PERF_COUNT_SW_DUMMY` event of this process and maps its first
//!   page, where the kernel publishes the counter-to-perf-time conversion under a seqlock; each
//!   read is a seqlock read of that page plus a counter read (see `perfclock-core`);
//! - **paravirt**: where the kernel withholds the parameters (`cap_user_time_zero = 0`) on a
//!   KVM guest whose sched_clock is kvm-clock, the vDSO's pvclock entry read with the kernel's
//!   own arithmetic plus the boot's constant offset ([`paravirt`]);
//! - **shared**: a `perfclock serve` of the machine publishes its calibration in a page every
//!   process maps read-only ([`shared_page`]);
//! - **calibrated**: otherwise, calibrated in this process against timestamps the kernel
//!   stamped, and published in a page of our own memory read by the same reader.
//!
//! # Caveats
//! - arm64: the kernel floors `time_zero`, so a reading can be 1 ns above the kernel's stamp.
//! - The kernel refreshes the page only when the event is scheduled in, and the event belongs
//!   to the thread that opened the clock. A clock change the kernel does not push (x86's TSC
//!   calibration refined about a second after boot, suspend, TSC marked unstable) reaches the
//!   readers when that thread next runs: open the process clock from a long-lived thread.
//! - A fork child gets a freshly mapped page at the same address (see [`Clock`]); raw `clone`
//!   system calls that bypass `pthread_atfork` handlers do not.
//!
//! # Reading the clock: unordered, ordered, deferred
//! - [`now_ns`] is the fastest read, about one counter read (x86_64 `rdtsc`): like the kernel's
//!   own `sched_clock` and quanta, the counter read may execute before earlier loads complete,
//!   so a reading taken right after receiving another thread's reading can be below it, by as
//!   long as that load waited (hundreds of nanoseconds when threads contend for its cache
//!   line).
//! - [`now_ns_ordered`] waits for every earlier instruction before reading the counter
//!   (x86_64 `lfence; rdtsc`), so it never goes back across a happens-before edge (a lock, an
//!   Acquire load, a channel): use it when readings of different threads are compared.
//! - [`CounterStamp::now`] only reads the raw counter, for the hottest paths (signal handlers,
//!   per-event tracing); [`CounterStamp::ns`] converts it later with the conversion current
//!   then (see its trade-off).
//!
//! # Platform support and features
//! Linux on x86_64 and aarch64. Elsewhere the same API compiles and every [`Clock`] constructor
//! returns [`Error::Unsupported`], so cross-platform programs can depend on it unconditionally.
//! The default feature `calibrated` adds calibrated mode (and the `perfclock-calib` crate);
//! without it, a kernel that withholds the parameters gives [`Error::KernelWithholdsTime`].
//!
//! # Safety
//! Unsafe code is denied at the root and allowed only in the modules that map the kernel's page
//! and handle `fork`; each says why at its top.
#![deny(unsafe_code)]

mod clock;
mod diagnosis;
mod error;
#[cfg(target_os = "linux")]
mod fork;
#[cfg(target_os = "linux")]
mod kernel;
#[cfg(target_os = "linux")]
pub mod paravirt;
#[cfg(target_os = "linux")]
pub mod shared_page;
// CLOCK_BOOTTIME and the libc bindings it reads are Linux's.
#[cfg(target_os = "linux")]
mod snapshot;

use std::sync::OnceLock;

use perfclock_core::counter;

pub use clock::{Clock, Mode, Options};
pub use diagnosis::Withheld;
pub use error::{error_chain, Error};
#[cfg(target_os = "linux")]
pub use error::{Refusal, SnapshotError};
pub use perfclock_core::{ReadError, TimeConversion};
#[cfg(target_os = "linux")]
pub use snapshot::{snapshot, ClockSnapshot, PairedClock, SNAPSHOT_TRIES};

static GLOBAL: OnceLock<Result<Clock, Error>> = OnceLock::new();

/// Opens the process-wide clock on first call; later calls return the same result. Thread-safe;
/// a failure is remembered (open a [`Clock`] yourself to retry). In a fork child, the first call
/// starts the calibrated clock's refiner again ([`Clock::resume_after_fork`]).
///
/// # Errors
/// See [`Error`].
pub fn init() -> Result<&'static Clock, Error> {
    init_with(Options::default())
}

/// As [`init`], with `options` used if this call is the one that opens the clock.
///
/// # Errors
/// See [`Error`].
pub fn init_with(options: Options) -> Result<&'static Clock, Error> {
    let clock = GLOBAL
        .get_or_init(|| options.open())
        .as_ref()
        .map_err(Clone::clone)?;
    fast::publish(clock);
    // In a fork child, start the calibrated clock's refiner again, and in shared mode follow a
    // restarted server (each a no-op elsewhere). A failure leaves the clock readable, its bound
    // saying how far it can be trusted.
    let _ = clock.resume_after_fork();
    clock.reattach_shared_page();
    Ok(clock)
}

/// Perf-domain nanoseconds now, from the process-wide clock, opening it on first use (which
/// may block while another thread opens it). Returns 0 if no clock can be had: check [`init`]
/// for the reason. Not for signal handlers before [`init`] has returned: use [`try_now_ns`].
///
/// Unordered (see the crate docs): compare readings of different threads with
/// [`now_ns_ordered`].
#[inline]
pub fn now_ns() -> u64 {
    match fast::now_ns_once(counter::read_counter_or_zero) {
        Some(ns) => ns,
        None => now_ns_slow(),
    }
}

/// Perf-domain nanoseconds now, the counter read only after every earlier instruction has
/// completed: never below a reading this thread has observed through a happens-before edge
/// (an Acquire load of another thread's reading, a lock, a channel). Costs about
/// `lfence; rdtsc` on x86_64. Opens the process-wide clock on first use, as [`now_ns`].
#[inline]
pub fn now_ns_ordered() -> u64 {
    match fast::now_ns_once(counter::read_counter_ordered_or_zero) {
        Some(ns) => ns,
        None => now_ns_ordered_slow(),
    }
}

/// Perf-domain nanoseconds now, or `None` if [`init`] has not succeeded or the read failed.
/// Never initialises, never blocks, never makes a system call. Async-signal-safe.
/// Unordered, as [`now_ns`].
#[inline]
pub fn try_now_ns() -> Option<u64> {
    match fast::now_ns_once(counter::read_counter_or_zero) {
        Some(ns) => Some(ns),
        None => try_now_ns_slow(),
    }
}

/// As [`try_now_ns`], ordered as [`now_ns_ordered`]. Async-signal-safe.
#[inline]
pub fn try_now_ns_ordered() -> Option<u64> {
    match fast::now_ns_once(counter::read_counter_ordered_or_zero) {
        Some(ns) => Some(ns),
        None => try_now_ns_ordered_slow(),
    }
}

// The slow paths: the clock not yet published to the fast path, or the one attempt failed (a
// page being written, a withdrawn conversion). Out of line so the fast path stays small; they
// go through the clock's full reader (retries, the mirror page, typed errors).

#[cold]
#[inline(never)]
fn now_ns_slow() -> u64 {
    opened_or_init()
        .and_then(|clock| clock.now_ns().ok())
        .unwrap_or(0)
}

#[cold]
#[inline(never)]
fn now_ns_ordered_slow() -> u64 {
    opened_or_init()
        .and_then(|clock| clock.now_ns_ordered().ok())
        .unwrap_or(0)
}

/// The process-wide clock, opened by this call if no earlier one did. Once a clock is open it
/// is only loaded (the maintenance [`init`] does on every call stays out of the read path,
/// which a signal handler may take).
fn opened_or_init() -> Option<&'static Clock> {
    global().or_else(|| init().ok())
}

#[cold]
#[inline(never)]
fn try_now_ns_slow() -> Option<u64> {
    global()?.now_ns().ok()
}

#[cold]
#[inline(never)]
fn try_now_ns_ordered_slow() -> Option<u64> {
    global()?.now_ns_ordered().ok()
}

/// A raw counter value taken now, to be converted to perf-domain nanoseconds later: the
/// cheapest stamp there is (one unordered counter read, no page read), for signal handlers and
/// per-event tracing.
///
/// # Trade-off
/// The stamp is converted with the conversion current when [`CounterStamp::ns`] runs, not the
/// one current when it was taken. In kernel mode the kernel rewrites the conversion rarely (the
/// conversion of an earlier counter value stays right unless the clock itself changed, e.g. the
/// TSC was marked unstable); in calibrated mode each refit moves it a little, so convert within
/// seconds to stay within [`error_bound_ns`]. Stamps are only meaningful in the boot (and, on
/// machines without an invariant counter, the CPU) they were taken on, and they are unordered
/// like [`now_ns`].
///
/// ```no_run
/// let stamp = perfclock::CounterStamp::now(); // in the hot path
/// // ... later, outside it:
/// println!("{:?} ns", stamp.ns());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CounterStamp {
    cycles: u64,
}

impl CounterStamp {
    /// Reads the counter now. Async-signal-safe; needs no initialised clock.
    #[inline(always)]
    pub fn now() -> Self {
        CounterStamp {
            cycles: counter::read_counter_or_zero(),
        }
    }

    /// A stamp of a counter value read elsewhere (the C ABI's `perfclock_read_counter`, a
    /// jitdump record).
    pub const fn from_cycles(cycles: u64) -> Self {
        CounterStamp { cycles }
    }

    /// The raw counter value (TSC on x86_64, `CNTVCT_EL0` on aarch64).
    pub const fn cycles(self) -> u64 {
        self.cycles
    }

    /// Perf-domain nanoseconds of the stamp, with the process-wide clock's conversion current
    /// now; `None` if [`init`] has not succeeded or the conversion cannot be read. Never
    /// initialises. Async-signal-safe.
    pub fn ns(self) -> Option<u64> {
        self.ns_with(global()?).ok()
    }

    /// As [`CounterStamp::ns`], with `clock`'s conversion.
    ///
    /// # Errors
    /// [`ReadError::CounterUnsupported`] where this architecture has no counter (the stamp is
    /// meaningless), else as [`Clock::cycles_to_ns`].
    pub fn ns_with(self, clock: &Clock) -> Result<u64, ReadError> {
        if !counter::SUPPORTED {
            return Err(ReadError::CounterUnsupported);
        }
        clock.cycles_to_ns(self.cycles)
    }
}

/// The process-wide clock's mode, or `None` if it is not (successfully) initialised.
/// Async-signal-safe.
pub fn mode() -> Option<Mode> {
    global().map(Clock::mode)
}

/// The process-wide clock's error bound in nanoseconds (0 in kernel mode, and in paravirt mode
/// with the offset from the kernel log or a published page), or `u64::MAX` if it is not
/// (successfully) initialised. Async-signal-safe (see [`Clock::error_bound_ns`]).
pub fn error_bound_ns() -> u64 {
    global().map_or(u64::MAX, Clock::error_bound_ns)
}

/// The process-wide clock if [`init`] has succeeded, else `None`. Never initialises, never
/// blocks, never makes a system call (the C ABI reads through it). Async-signal-safe.
#[inline]
pub fn global() -> Option<&'static Clock> {
    GLOBAL.get()?.as_ref().ok()
}

/// The process-wide clock's page, reachable with one load: the reads' fast path does not go
/// through the `OnceLock`'s state and the stored `Result`, nor test for a missing clock (before
/// `init` the pointer is to a page that publishes nothing, which the read declines anyway). In
/// paravirt mode the pointer is to the pvclock entry, tagged in its low bit, and the offset `C`
/// is loaded only on that branch: kernel mode's read stays one load and one bit test away.
///
/// # Safety
/// The unsafe calls turn the published pointer back into a reader; the pointer is only ever the
/// never-written `EMPTY` page, the page of the clock stored in `GLOBAL` (never dropped), or that
/// clock's pvclock entry (a vDSO page, mapped for the life of the process) with bit 0 set.
mod fast {
    #![allow(unsafe_code)]

    use std::cell::UnsafeCell;
    use std::ptr::NonNull;
    use std::sync::atomic::{AtomicI64, AtomicPtr, Ordering};

    use perfclock_core::page::PerfEventMmapPage;
    use perfclock_core::pvclock::{PvclockReader, PvclockVcpuTimeInfo};
    use perfclock_core::PageReader;

    use crate::clock::ClockReader;
    use crate::Clock;

    /// A page with no capabilities, in writable memory (an `UnsafeCell`, so atomic loads through
    /// a `*mut` are allowed); nothing ever writes it.
    struct EmptyPage(UnsafeCell<PerfEventMmapPage>);

    // SAFETY: the page is never written; concurrent atomic loads of it are sound.
    unsafe impl Sync for EmptyPage {}

    static EMPTY: EmptyPage = EmptyPage(UnsafeCell::new(PerfEventMmapPage::zeroed()));

    /// Set in [`PAGE`] when it points to a pvclock entry (both targets are at least 8-aligned,
    /// so bit 0 is free).
    const PVCLOCK_TAG: usize = 1;

    /// `EMPTY` until `init` succeeds, then the primary page of the process-wide clock, or its
    /// pvclock entry tagged with [`PVCLOCK_TAG`].
    static PAGE: AtomicPtr<PerfEventMmapPage> = AtomicPtr::new(EMPTY.0.get());

    /// The paravirt clock's offset `C`, ns; stored before the tagged pointer.
    static PVCLOCK_OFFSET_NS: AtomicI64 = AtomicI64::new(0);

    /// Makes `clock`'s page (or entry) the fast path's. Every caller passes the same clock (the
    /// one in `GLOBAL`), so repeated stores store the same values.
    pub(crate) fn publish(clock: &'static Clock) {
        let pointer = match clock.clock_reader() {
            ClockReader::Page(reader) => reader.page().as_ptr(),
            ClockReader::Pvclock { entry, offset_ns } => {
                PVCLOCK_OFFSET_NS.store(offset_ns, Ordering::Relaxed);
                entry
                    .entry()
                    .as_ptr()
                    .cast::<PerfEventMmapPage>()
                    .map_addr(|address| address | PVCLOCK_TAG)
            }
        };
        // ATOMICS: Release pairs with the Acquire load in `now_ns_once`: a reader that finds
        // the pointer finds the page's initial contents (a calibrated page is ordinary memory
        // written before the clock was stored) and the offset stored above.
        PAGE.store(pointer, Ordering::Release);
    }

    /// One seqlock attempt on the process-wide clock's page (or entry) with `counter`, or
    /// `None` (no clock yet, or the attempt failed: the caller takes the slow path).
    #[inline(always)]
    pub(crate) fn now_ns_once(counter: impl FnOnce() -> u64) -> Option<u64> {
        // ATOMICS: Acquire pairs with the Release store in `publish`.
        let page = PAGE.load(Ordering::Acquire);
        if page.addr() & PVCLOCK_TAG == 0 {
            // SAFETY: `PAGE` holds either `EMPTY` (a static, 8-aligned, never written) or the
            // page of the clock in `GLOBAL` (a static that is never dropped), whose reader was
            // made under `PageReader::new`'s contract and whose page the clock keeps mapped (a
            // fork child's is re-mapped at the same address) for the life of the process.
            // Neither is null.
            let reader = unsafe { PageReader::new(NonNull::new_unchecked(page)) };
            reader.now_ns_once_with(counter)
        } else {
            pvclock_once(page, counter)
        }
    }

    #[inline(always)]
    fn pvclock_once(tagged: *mut PerfEventMmapPage, counter: impl FnOnce() -> u64) -> Option<u64> {
        // ATOMICS: Relaxed: the Acquire load of `PAGE` that found the tag orders this load after
        // the Release store that published it, which followed the offset's store.
        let offset_ns = PVCLOCK_OFFSET_NS.load(Ordering::Relaxed);
        let entry = tagged
            .map_addr(|address| address & !PVCLOCK_TAG)
            .cast::<PvclockVcpuTimeInfo>();
        // SAFETY: a tagged `PAGE` is the pvclock entry of the clock in `GLOBAL` (never dropped),
        // whose reader was made under `PvclockReader::new`'s contract: a vDSO page mapped
        // read-only for the life of the process, at the same address in fork children. Not null.
        let reader = unsafe { PvclockReader::new(NonNull::new_unchecked(entry)) };
        reader.perf_ns_once_with(counter, offset_ns)
    }
}

/// Makes `clock` the process-wide clock that [`global`], [`try_now_ns`] and [`init`] return,
/// unless [`init`] already ran (whether it succeeded or failed): then `clock` is dropped and
/// `false` returned. For callers that retry a failed open themselves, as the C ABI's
/// `perfclock_init` does, so that a transient failure (out of file descriptors, a thread limit)
/// is not remembered for ever.
pub fn set_global(clock: Clock) -> bool {
    // `init` then finds the clock and finishes whatever it does for a clock it opened itself.
    GLOBAL.set(Ok(clock)).is_ok() && init().is_ok()
}
