//! `perf_event_attr` as perfclock builds it.

use core::fmt;

use perf_event_open_sys::bindings as sys;

/// `PERF_SAMPLE_*` bits the [`crate::perf_event::record`] parser understands. Others may be set; their
/// fields are skipped where the layout allows and ignored otherwise.
pub mod sample {
    use perf_event_open_sys::bindings as sys;

    /// `PERF_SAMPLE_TID`: `u32 pid, u32 tid`.
    pub const TID: u64 = sys::PERF_SAMPLE_TID as u64;
    /// `PERF_SAMPLE_TIME`: `u64 time` (the event's clock: `local_clock()` unless `use_clockid`).
    pub const TIME: u64 = sys::PERF_SAMPLE_TIME as u64;
    /// `PERF_SAMPLE_ADDR`: `u64 addr` (for page faults: the faulting address).
    pub const ADDR: u64 = sys::PERF_SAMPLE_ADDR as u64;
    /// `PERF_SAMPLE_CPU`: `u32 cpu, u32 res`.
    pub const CPU: u64 = sys::PERF_SAMPLE_CPU as u64;
}

/// A `perf_event_attr` under construction. Starts as a software event of the calling thread,
/// user space only, enabled at open, counting (no samples) until [`EventAttr::sample_period`].
///
/// ```
/// use perfclock_os::{sample, EventAttr};
///
/// let attr = EventAttr::dummy().sample_type(sample::TID | sample::TIME).sample_id_all(true);
/// assert!(attr.has_sample_id_all());
/// assert_eq!(attr.sample_type_bits(), sample::TID | sample::TIME);
/// ```
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
        // All-zero is the documented default of every field (the bindings' Default).
        let mut raw = sys::perf_event_attr {
            type_: sys::PERF_TYPE_SOFTWARE,
            size: core::mem::size_of::<sys::perf_event_attr>() as u32,
            config,
            ..Default::default()
        };
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

    /// The `sample_type` set so far.
    pub fn sample_type_bits(&self) -> u64 {
        self.raw.sample_type
    }

    /// Whether `sample_id_all` is set.
    pub fn has_sample_id_all(&self) -> bool {
        self.raw.sample_id_all() != 0
    }

    /// The raw attribute, for callers that make the system call themselves (a fork child's
    /// handler, which may not allocate).
    pub fn as_raw(&self) -> &sys::perf_event_attr {
        &self.raw
    }
}
