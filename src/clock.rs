//! [`Clock`]: one perf-domain clock, in kernel mode or calibrated mode, behind one read path.
//!
//! The public types are declared here once, for every platform; the platform's module (`os`:
//! `linux.rs`, or `unsupported.rs` elsewhere, where every constructor fails with
//! [`Error::Unsupported`]) opens a clock and keeps its page alive.

#[cfg(all(feature = "calibrated", target_os = "linux"))]
use perfclock_calib::{CalibratedClock, CalibrationOptions};
use perfclock_core::pvclock::{PvclockParams, PvclockReader};
use perfclock_core::{counter, PageReader, ReadError, TimeConversion};

use crate::diagnosis::Withheld;
use crate::error::Error;
#[cfg(target_os = "linux")]
use crate::paravirt::ParavirtClock;
#[cfg(target_os = "linux")]
use crate::shared_page::SharedPageInfo;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as os;
#[cfg(not(target_os = "linux"))]
mod unsupported;
#[cfg(not(target_os = "linux"))]
use unsupported as os;

/// Where a clock's parameters come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The kernel publishes them (`cap_user_time_zero = 1`): readings equal the kernel's
    /// timestamps exactly (x86_64), or to within 1 ns (arm64, see the crate docs).
    Kernel,
    /// A KVM guest's paravirtual sched_clock, read as the kernel reads it: the vDSO's pvclock
    /// entry (the kernel's arithmetic, bit for bit) plus the boot's constant offset `C`, from the
    /// kernel log or a root-published page (bound 0) or from kernel-stamped brackets alone
    /// (bound: half their intersection). No thread, no perf event after opening.
    Paravirt,
    /// Fitted by perfclock against timestamps the kernel stamped, with a measured error bound.
    Calibrated,
    /// Fitted by a `perfclock serve` of this machine and read from its shared page (see
    /// [`Options::shared_page`]): calibrated, with the server's bound, and no thread, perf event
    /// or ring in this process.
    Shared,
}

/// How to open a [`Clock`]. The default: kernel mode where the kernel publishes the parameters,
/// else paravirt mode where the kernel's paravirtual clock can be read, else a `perfclock serve`
/// page, else calibrated mode with background refinement (without the `calibrated` feature:
/// kernel mode, or paravirt mode with a root-published offset).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    kernel_only: bool,
    /// Whether to skip paravirt mode.
    no_paravirt: bool,
    /// Whether to read a `perfclock serve` page before calibrating in-process.
    no_shared_page: bool,
    /// Set by [`Options::refine`]; wins over `calibration`'s own setting, whichever came first.
    #[cfg(all(feature = "calibrated", target_os = "linux"))]
    refine: Option<bool>,
    #[cfg(all(feature = "calibrated", target_os = "linux"))]
    calibration: CalibrationOptions,
}

impl Options {
    /// Refuse the calibrated fallback: [`Options::open`] fails with
    /// [`Error::KernelWithholdsTime`] where the kernel withholds the parameters.
    pub fn kernel_only(mut self, kernel_only: bool) -> Self {
        self.kernel_only = kernel_only;
        self
    }

    /// Read the kernel's paravirtual clock where the kernel withholds the parameters (the
    /// default); `false` skips paravirt mode, as `PERFCLOCK_PARAVIRT=off` in the environment
    /// does, so calibrated (or shared) mode can be had on a KVM guest.
    pub fn paravirt(mut self, paravirt: bool) -> Self {
        self.no_paravirt = !paravirt;
        self
    }

    /// Read the conversion a `perfclock serve` publishes (the default), where the kernel
    /// withholds it and a valid shared page is found (`PERFCLOCK_SHARED_PAGE` names it or,
    /// set to `off`, disables it); `false` calibrates in this process whatever is served.
    pub fn shared_page(mut self, shared_page: bool) -> Self {
        self.no_shared_page = !shared_page;
        self
    }

    /// Keep refining a calibrated clock in a background thread (the default), or calibrate
    /// once: the bound then grows with the time since calibration.
    #[cfg(all(feature = "calibrated", target_os = "linux"))]
    pub fn refine(mut self, refine: bool) -> Self {
        self.refine = Some(refine);
        self
    }

    /// Every calibration setting (see `perfclock_calib::CalibrationOptions`). A choice made
    /// with [`Options::refine`] stands, before or after this call.
    #[cfg(all(feature = "calibrated", target_os = "linux"))]
    pub fn calibration(mut self, calibration: CalibrationOptions) -> Self {
        self.calibration = calibration;
        self
    }

    /// Opens a clock with these options.
    ///
    /// # Errors
    /// See [`Error`]: each variant says what was observed and what to change.
    ///
    /// # Example
    /// ```no_run
    /// use perfclock::{Error, Options};
    ///
    /// match Options::default().kernel_only(true).open() {
    ///     Ok(clock) => println!("exact: {:?}", clock.now_ns()),
    ///     Err(Error::KernelWithholdsTime(why)) => println!("{why}"),
    ///     Err(other) => return Err(other),
    /// }
    /// # Ok::<(), perfclock::Error>(())
    /// ```
    pub fn open(self) -> Result<Clock, Error> {
        os::open(self)
    }
}

/// A perf-domain clock. Reads make no system call, take no lock, allocate nothing and are
/// async-signal-safe; they re-read the published parameters every time, since the kernel (or
/// the calibrator) may rewrite them.
#[derive(Debug)]
pub struct Clock {
    /// Invariant: reads the page (or entry) that `source` keeps alive.
    reader: ClockReader,
    source: os::Source,
}

/// A conversion read once: perf's form, or the pvclock entry and the offset `C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExactConversion {
    Perf(TimeConversion),
    Pvclock(PvclockParams, i64),
}

impl ExactConversion {
    pub(crate) fn cycles_to_ns(&self, cycles: u64) -> u64 {
        match self {
            ExactConversion::Perf(conversion) => conversion.cycles_to_ns(cycles),
            ExactConversion::Pvclock(params, offset_ns) => params.perf_ns(cycles, *offset_ns),
        }
    }
}

/// What a [`Clock`] reads.
#[derive(Debug, Clone, Copy)]
// Off Linux every constructor fails (the stub), so no variant is ever made there.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) enum ClockReader {
    /// A page in perf's format: the kernel's, a server's, or the calibrator's, kept mapped by
    /// the [`Clock`] that holds this reader (`'static` only within it).
    Page(PageReader<'static>),
    /// A pvclock entry (the vDSO's, mapped for the life of the process), and the boot's offset
    /// `C` added to its value.
    Pvclock {
        entry: PvclockReader<'static>,
        offset_ns: i64,
    },
}

impl ClockReader {
    #[inline]
    fn now_ns_via(
        &self,
        page: impl FnOnce(&PageReader<'static>) -> Result<u64, ReadError>,
        read: fn() -> u64,
    ) -> Result<u64, ReadError> {
        match self {
            ClockReader::Page(reader) => page(reader),
            ClockReader::Pvclock { entry, offset_ns } => entry
                .perf_ns_with(read, *offset_ns)
                .map_err(ReadError::Pvclock),
        }
    }
}

impl Clock {
    /// Opens a clock in kernel mode if the kernel publishes the parameters, calibrated otherwise.
    ///
    /// # Errors
    /// See [`Error`].
    ///
    /// # Example
    /// ```no_run
    /// let clock = perfclock::Clock::open()?;
    /// let cycles = clock.read_counter().unwrap_or(0);
    /// println!("{:?}: {:?} ns", clock.mode(), clock.cycles_to_ns(cycles));
    /// # Ok::<(), perfclock::Error>(())
    /// ```
    pub fn open() -> Result<Clock, Error> {
        Options::default().open()
    }

    /// Opens a clock in kernel mode only.
    ///
    /// # Errors
    /// [`Error::KernelWithholdsTime`] where the kernel withholds the parameters; see [`Error`].
    pub fn open_kernel_only() -> Result<Clock, Error> {
        Options::default().kernel_only(true).open()
    }

    /// Perf-domain nanoseconds now: the value the kernel would stamp into a sample.
    ///
    /// # Errors
    /// [`ReadError`] if the page stopped publishing the conversion (the kernel withdrew it, for
    /// example when the TSC was marked unstable) or stayed locked for every retry.
    ///
    /// Async-signal-safe.
    #[inline]
    pub fn now_ns(&self) -> Result<u64, ReadError> {
        self.reader
            .now_ns_via(PageReader::now_ns, counter::read_counter_or_zero)
    }

    /// As [`Clock::now_ns`], with the counter read only after every earlier instruction has
    /// completed (see [`crate::now_ns_ordered`]).
    ///
    /// # Errors
    /// As [`Clock::now_ns`].
    ///
    /// Async-signal-safe.
    #[inline]
    pub fn now_ns_ordered(&self) -> Result<u64, ReadError> {
        self.reader.now_ns_via(
            PageReader::now_ns_ordered,
            counter::read_counter_ordered_or_zero,
        )
    }

    /// The conversion published now, in perf's form (`time_zero`, `time_mult`, `time_shift`:
    /// what `PERF_RECORD_TIME_CONV` carries). In paravirt mode it is the pvclock entry's slope
    /// with `time_zero` anchored at its `tsc_timestamp`, within
    /// `PvclockParams::time_conversion_error_ns` of [`Clock::cycles_to_ns`], which is exact: a
    /// few ns, plus, for TSCs above about 2.1 GHz (whose slope perf's 32-bit `time_mult` must
    /// round), up to 2^-33 ns per cycle since the host last wrote the entry.
    ///
    /// # Errors
    /// As [`Clock::now_ns`].
    pub fn conversion(&self) -> Result<TimeConversion, ReadError> {
        match self.reader {
            ClockReader::Page(reader) => reader.conversion(),
            ClockReader::Pvclock { entry, offset_ns } => entry
                .params()
                .map_err(ReadError::Pvclock)?
                .time_conversion(offset_ns)
                .map_err(ReadError::InvalidParameters),
        }
    }

    /// [`Clock::conversion`] made exact at counter value `anchor` instead: in paravirt mode the
    /// pvclock's slope with `time_zero` put so that the conversion equals
    /// [`Clock::cycles_to_ns`] at `anchor`, so the rounded slope drifts only with the distance
    /// from `anchor` (0.41 ns a second of a 3.5 GHz TSC at worst), whatever the uptime: for a
    /// `PERF_RECORD_TIME_CONV` anchored within the recording it converts. In the other modes,
    /// [`Clock::conversion`].
    ///
    /// # Errors
    /// As [`Clock::now_ns`].
    pub fn conversion_at(&self, anchor: u64) -> Result<TimeConversion, ReadError> {
        match self.reader {
            ClockReader::Page(reader) => reader.conversion(),
            ClockReader::Pvclock { entry, offset_ns } => entry
                .params()
                .map_err(ReadError::Pvclock)?
                .time_conversion_at(offset_ns, anchor)
                .map_err(ReadError::InvalidParameters),
        }
    }

    /// As [`Clock::conversion_error_ns`], for [`Clock::conversion_at`]`(anchor)`.
    pub fn conversion_error_at_ns(&self, cycles: u64, anchor: u64) -> u64 {
        match self.reader {
            ClockReader::Page(_) => 0,
            ClockReader::Pvclock { entry, .. } => entry.params().map_or(u64::MAX, |params| {
                params.time_conversion_error_at_ns(cycles, anchor)
            }),
        }
    }

    /// How far [`Clock::conversion`]'s value at counter value `cycles` can be from
    /// [`Clock::cycles_to_ns`]'s, in ns: 0 where the conversion is the clock's own (kernel,
    /// shared and calibrated modes); in paravirt mode, where it is perf's form of the pvclock,
    /// `PvclockParams::time_conversion_error_ns` (its rounded slope drifts away from the
    /// entry's `tsc_timestamp`); `u64::MAX` if the entry cannot be read. A `TIME_CONV` record
    /// of [`Clock::conversion`] carries this on top of [`Clock::error_bound_ns`].
    pub fn conversion_error_ns(&self, cycles: u64) -> u64 {
        match self.reader {
            ClockReader::Page(_) => 0,
            ClockReader::Pvclock { entry, .. } => entry
                .params()
                .map_or(u64::MAX, |params| params.time_conversion_error_ns(cycles)),
        }
    }

    /// Converts a counter value taken with [`Clock::read_counter`], with the parameters
    /// published now (in paravirt mode the kernel's pvclock arithmetic, exactly).
    ///
    /// # Errors
    /// As [`Clock::now_ns`].
    ///
    /// Async-signal-safe.
    #[inline]
    pub fn cycles_to_ns(&self, cycles: u64) -> Result<u64, ReadError> {
        self.exact_conversion()
            .map(|conversion| conversion.cycles_to_ns(cycles))
    }

    /// The conversion published now, read once and exact in every mode (for conversions of
    /// several counter values that must not straddle a republish).
    pub(crate) fn exact_conversion(&self) -> Result<ExactConversion, ReadError> {
        match self.reader {
            ClockReader::Page(reader) => reader.conversion().map(ExactConversion::Perf),
            ClockReader::Pvclock { entry, offset_ns } => entry
                .params()
                .map(|params| ExactConversion::Pvclock(params, offset_ns))
                .map_err(ReadError::Pvclock),
        }
    }

    /// The counter value at perf time `ns`, rounded down: `cycles_to_ns(c) <= ns <=
    /// cycles_to_ns(c + 1)` (in paravirt mode the exact inverse of the pvclock arithmetic).
    ///
    /// # Errors
    /// As [`Clock::now_ns`].
    ///
    /// Async-signal-safe.
    pub fn ns_to_cycles(&self, ns: u64) -> Result<u64, ReadError> {
        self.exact_conversion().map(|conversion| match conversion {
            ExactConversion::Perf(conversion) => conversion.ns_to_cycles(ns),
            ExactConversion::Pvclock(params, offset_ns) => params.perf_ns_to_cycles(ns, offset_ns),
        })
    }

    /// A raw counter read (TSC, `CNTVCT_EL0`), for stamping first and converting later.
    /// Async-signal-safe.
    #[inline]
    pub fn read_counter(&self) -> Option<u64> {
        counter::read_counter()
    }

    /// Where the parameters come from. Async-signal-safe.
    pub fn mode(&self) -> Mode {
        self.source.mode()
    }

    /// The most a reading taken now can be off the kernel's perf clock, in nanoseconds: 0 in
    /// kernel mode; in paravirt mode 0 with the offset from the kernel log or a published page,
    /// half the brackets' intersection with brackets alone, and `u64::MAX` once the pvclock
    /// entry has lost `PVCLOCK_TSC_STABLE_BIT` (open a new clock to fall back); in calibrated mode the bound the calibrator derived from the brackets, grown
    /// by the slope's uncertainty over the time since the last fit; `u64::MAX` in a fork child
    /// whose refiner was not started again once the parent's jump-detection latency has passed
    /// (see [`Clock::resume_after_fork`]). Async-signal-safe: in shared mode it never
    /// reattaches to a restarted server ([`Clock::reattach_shared_page`] does).
    pub fn error_bound_ns(&self) -> u64 {
        self.source.error_bound_ns()
    }

    /// In shared mode, once the server's heartbeat is stale (the server stopped), maps the
    /// page of a server started since on the same path, so the bound comes back; returns
    /// whether the shared page's bound is fresh afterwards (`false` in every other mode).
    /// [`crate::init`] does this on every call. [`Clock::error_bound_ns`] never does (it stays
    /// safe in signal handlers): it reports `u64::MAX` until this runs. Opens files and a socket and
    /// allocates: call it from ordinary code, not a signal handler.
    pub fn reattach_shared_page(&self) -> bool {
        self.source.reattach_shared_page()
    }

    /// In a fork child, starts the calibrated clock's refiner again (the child inherits the
    /// published page but not the thread that keeps it up to date); [`crate::init`] does this
    /// on every call. Returns whether a refiner was started: `false` in kernel mode (the child
    /// handler maps the kernel's page again), in the process that opened the clock, where one
    /// was started already, and for a clock opened with `refine(false)`. Until a child does
    /// this, [`Clock::error_bound_ns`] claims a bound only for the parent's jump-detection
    /// latency after the last publication it inherited, then `u64::MAX`. Waits for the first
    /// calibration, like opening does (tens of milliseconds), so call it from ordinary code, not
    /// a signal handler. Relies on the C library allowing threads and `malloc` in a fork child
    /// of a multi-threaded process, as glibc and musl do. One attempt per process.
    ///
    /// # Errors
    /// `Error::Calibration` (a calibrated clock's error) if the refiner could not be started;
    /// the clock stays readable, with the bound described above.
    pub fn resume_after_fork(&self) -> Result<bool, Error> {
        self.source.resume_after_fork()
    }

    /// The calibrator, in calibrated mode (for its statistics and bound model).
    #[cfg(all(feature = "calibrated", target_os = "linux"))]
    pub fn calibrated(&self) -> Option<&CalibratedClock> {
        self.source.calibrated()
    }

    /// In calibrated mode, what the kernel's page showed and why it withholds the parameters.
    pub fn withheld(&self) -> Option<&Withheld> {
        self.source.withheld()
    }

    /// In shared mode, the page read: its path, the server's pid, the heartbeat's age and the
    /// bound now.
    #[cfg(target_os = "linux")]
    pub fn shared_page(&self) -> Option<SharedPageInfo> {
        self.source.shared_page()
    }

    /// In paravirt mode, the pvclock page, the offset `C`, where it came from and the sources
    /// refused before it.
    #[cfg(target_os = "linux")]
    pub fn paravirt(&self) -> Option<&ParavirtClock> {
        self.source.paravirt()
    }

    /// The perf-format page this clock reads, for diagnostics and readers that want the page
    /// itself; `None` in paravirt mode, which reads a pvclock entry (see [`Clock::paravirt`]).
    ///
    /// The reader borrows the clock, which keeps the page mapped: it cannot outlive it.
    /// ```compile_fail,E0716
    /// let reader = perfclock::Clock::open()?.reader().unwrap(); // the clock is dropped here
    /// let _ = reader.now_ns();
    /// # Ok::<(), perfclock::Error>(())
    /// ```
    pub fn reader(&self) -> Option<PageReader<'_>> {
        match self.reader {
            ClockReader::Page(reader) => Some(reader),
            ClockReader::Pvclock { .. } => None,
        }
    }

    /// What the process-wide fast path reads.
    pub(crate) fn clock_reader(&self) -> ClockReader {
        self.reader
    }
}
