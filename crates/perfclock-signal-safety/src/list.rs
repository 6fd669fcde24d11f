//! The list: every function documented async-signal-safe, with what its result must be.
//!
//! # Safety
//! The C ABI's functions that take pointers are called with live out-pointers, NUL-terminated
//! names and the marker handle the child opened.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use perfclock_ffi as c;

/// What a call returned, judged in the mode at hand.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Sane = 0,
    Wrong = 1,
    /// The function's receiver does not exist in this mode (a paravirt clock in shared mode).
    NotInMode = 2,
}

/// What the handler knows of the mode.
pub(crate) struct Expect {
    pub(crate) mode: std::ffi::c_int,
    /// The bound is `u64::MAX` (a stale shared page).
    pub(crate) bound_unknown: bool,
}

fn sane(ok: bool) -> Verdict {
    if ok {
        Verdict::Sane
    } else {
        Verdict::Wrong
    }
}

fn bound_sane(bound: u64, expect: &Expect) -> Verdict {
    sane((bound == u64::MAX) == expect.bound_unknown)
}

/// `judge` of the process clock (opened before the filter), or wrong without one.
fn with_clock(judge: impl FnOnce(&perfclock::Clock) -> Verdict) -> Verdict {
    perfclock::global().map_or(Verdict::Wrong, judge)
}

/// The child's marker handle (a `*mut perfclock_markers`), opened before the filter.
pub(crate) static MARKERS: AtomicUsize = AtomicUsize::new(0);

type Call = fn(&Expect) -> Verdict;

/// Every function documented async-signal-safe, by the name the docs give it.
pub(crate) const SIGNAL_SAFE: &[(&str, Call)] = &[
    ("perfclock_now_ns", |_| sane(c::perfclock_now_ns() != 0)),
    ("perfclock_now_ns_ordered", |_| {
        sane(c::perfclock_now_ns_ordered() != 0)
    }),
    ("perfclock_try_now_ns", |_| {
        let mut out = 0u64;
        // SAFETY: a live out-pointer.
        let rc = unsafe { c::perfclock_try_now_ns(&mut out) };
        sane(rc == c::PERFCLOCK_OK && out != 0)
    }),
    ("perfclock_mode", |e| sane(c::perfclock_mode() == e.mode)),
    ("perfclock_error_bound_ns", |e| {
        bound_sane(c::perfclock_error_bound_ns(), e)
    }),
    ("perfclock_read_counter", |_| {
        sane(c::perfclock_read_counter() != 0)
    }),
    ("perfclock_cycles_to_ns", |_| {
        sane(c::perfclock_cycles_to_ns(c::perfclock_read_counter()) != 0)
    }),
    ("perfclock_ns_to_cycles", |_| {
        sane(c::perfclock_ns_to_cycles(c::perfclock_now_ns()) != 0)
    }),
    ("perfclock_strerror", |_| {
        sane(!c::perfclock_strerror(c::PERFCLOCK_OK).is_null())
    }),
    ("perfclock_marker", |_| {
        let markers = MARKERS.load(Ordering::Relaxed) as *mut c::perfclock_markers;
        let now = c::perfclock_now_ns();
        // SAFETY: a live handle opened before the filter, a NUL-terminated name.
        let rc = unsafe { c::perfclock_marker(markers, c"in a handler".as_ptr(), now, now) };
        sane(rc == c::PERFCLOCK_OK)
    }),
    ("perfclock::try_now_ns", |_| {
        sane(perfclock::try_now_ns().is_some())
    }),
    ("perfclock::try_now_ns_ordered", |_| {
        sane(perfclock::try_now_ns_ordered().is_some())
    }),
    ("perfclock::mode", |_| sane(perfclock::mode().is_some())),
    ("perfclock::error_bound_ns", |e| {
        bound_sane(perfclock::error_bound_ns(), e)
    }),
    ("perfclock::global", |_| sane(perfclock::global().is_some())),
    ("CounterStamp::now", |_| {
        sane(perfclock::CounterStamp::now().cycles() != 0)
    }),
    ("CounterStamp::ns", |_| {
        sane(perfclock::CounterStamp::now().ns().is_some())
    }),
    ("Clock::now_ns", |_| {
        with_clock(|clock| sane(clock.now_ns().is_ok()))
    }),
    ("Clock::now_ns_ordered", |_| {
        with_clock(|clock| sane(clock.now_ns_ordered().is_ok()))
    }),
    ("Clock::cycles_to_ns", |_| {
        with_clock(|clock| sane(clock.cycles_to_ns(c::perfclock_read_counter()).is_ok()))
    }),
    ("Clock::ns_to_cycles", |_| {
        with_clock(|clock| sane(clock.ns_to_cycles(c::perfclock_now_ns()).is_ok()))
    }),
    ("Clock::read_counter", |_| {
        with_clock(|clock| sane(clock.read_counter().is_some()))
    }),
    ("Clock::mode", |_| {
        with_clock(|clock| {
            let _ = clock.mode();
            Verdict::Sane
        })
    }),
    ("Clock::error_bound_ns", |e| {
        with_clock(|clock| bound_sane(clock.error_bound_ns(), e))
    }),
    ("ParavirtClock::error_bound_ns", |e| {
        with_clock(|clock| match clock.paravirt() {
            Some(paravirt) => bound_sane(paravirt.error_bound_ns(), e),
            None => Verdict::NotInMode,
        })
    }),
    ("CalibratedClock::error_bound_ns", |e| {
        with_clock(|clock| match clock.calibrated() {
            Some(calibrated) => bound_sane(calibrated.error_bound_ns(), e),
            None => Verdict::NotInMode,
        })
    }),
    ("fork_gate::generation", |_| {
        let _ = perfclock_calib::fork_gate::generation();
        Verdict::Sane
    }),
];
