//! [`CalibStats`]: what the calibration thread has done, published through relaxed atomics
//! (figures for diagnostics, never used to decide anything).

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};

use crate::kind::KindSet;

/// Counters describing the calibrator's work so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CalibStats {
    /// Calibrations from scratch (1 + jumps + failed refits).
    pub calibrations: u64,
    /// Refinements published.
    pub refinements: u64,
    /// Clock jumps detected (a batch mostly outside the published bound).
    pub jumps: u64,
    /// Fresh brackets that fell outside the published bound when checked (jumps included).
    pub stray_brackets: u64,
    /// Size of the last jump: median of `kernel_ns - published(bracket middle)` over the batch
    /// that revealed it, ns (0 before any jump).
    pub last_jump_ns: i64,
    /// Times the history window was halved because the brackets no longer fitted one line.
    pub window_shrinks: u64,
    /// Counter span of the last fit, in perf ns.
    pub last_fit_span_ns: u64,
    /// Brackets the last fit used.
    pub last_fit_brackets: u64,
    /// Wall time of the first calibration, ns (from spawn to first publish).
    pub first_calibration_ns: u64,
    /// CPU time the thread has used, ns (`CLOCK_THREAD_CPUTIME_ID`, updated each round).
    pub thread_cpu_ns: u64,
    /// Kernel thread id of the calibration thread (for `/proc/self/task/<tid>/stat`).
    pub thread_tid: u64,
    /// Record kinds the calibrator can still bracket.
    pub kinds_working: KindSet,
    /// Record kinds that could not be opened, or were dropped because their action or records
    /// failed for good (a refused system call, records that never arrive); calibration goes on
    /// with the others.
    pub kinds_failed: KindSet,
}

/// [`CalibStats`] as the thread updates them.
#[derive(Debug, Default)]
pub(crate) struct AtomicStats {
    pub(crate) calibrations: AtomicU64,
    pub(crate) refinements: AtomicU64,
    pub(crate) jumps: AtomicU64,
    pub(crate) stray_brackets: AtomicU64,
    pub(crate) last_jump_ns: AtomicI64,
    pub(crate) window_shrinks: AtomicU64,
    pub(crate) last_fit_span_ns: AtomicU64,
    pub(crate) last_fit_brackets: AtomicU64,
    pub(crate) first_calibration_ns: AtomicU64,
    pub(crate) thread_cpu_ns: AtomicU64,
    pub(crate) thread_tid: AtomicU64,
    pub(crate) kinds_working: AtomicU8,
    pub(crate) kinds_failed: AtomicU8,
}

impl AtomicStats {
    pub(crate) fn snapshot(&self) -> CalibStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CalibStats {
            calibrations: r(&self.calibrations),
            refinements: r(&self.refinements),
            jumps: r(&self.jumps),
            stray_brackets: r(&self.stray_brackets),
            last_jump_ns: self.last_jump_ns.load(Ordering::Relaxed),
            window_shrinks: r(&self.window_shrinks),
            last_fit_span_ns: r(&self.last_fit_span_ns),
            last_fit_brackets: r(&self.last_fit_brackets),
            first_calibration_ns: r(&self.first_calibration_ns),
            thread_cpu_ns: r(&self.thread_cpu_ns),
            thread_tid: r(&self.thread_tid),
            kinds_working: KindSet::from_bits(self.kinds_working.load(Ordering::Relaxed)),
            kinds_failed: KindSet::from_bits(self.kinds_failed.load(Ordering::Relaxed)),
        }
    }
}
