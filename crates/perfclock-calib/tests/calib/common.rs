//! What the calibration's tests share: a skip where perf events are refused, brackets of every
//! kind, and the one line through them (perfclock-testutil's `bracket_line`, over this crate's
//! `Bracket`s).

use perfclock_calib::{Bracket, CalibError, GroundTruth, RecordKind};
use perfclock_os::ErrorKind;
use perfclock_testutil::bracket_line::{self, Line, Stamp};
use perfclock_testutil::{skip, Need};

/// Whether `error` is this environment refusing perf events (paranoid level, seccomp, no
/// CONFIG_PERF_EVENTS) and the test may skip: then says so (perfclock-testutil's `skip`) and
/// returns true. With PERFCLOCK_REQUIRE_PERF=1 (CI on the project's machines) it fails instead.
pub(crate) fn skip_perf_refused(test: &str, error: &CalibError) -> bool {
    let CalibError::Open(e) = error else {
        return false;
    };
    let refused = matches!(
        e.kind(),
        ErrorKind::PermissionDenied | ErrorKind::NoPerfSupport
    );
    if refused {
        skip(test, Need::Perf, e);
    }
    refused
}

/// Brackets of all kinds, interleaved in rounds of 50 on this thread.
pub(crate) fn interleaved(gt: &mut GroundTruth, per_kind: usize) -> Vec<Bracket> {
    let mut out = Vec::new();
    for _ in 0..per_kind / 50 {
        for k in RecordKind::ALL {
            gt.collect(k, 50, &mut out).expect("collect");
        }
    }
    out
}

/// The line with the most slack through `bs` ([`bracket_line::best_line`]).
pub(crate) fn best_line(bs: &[Bracket]) -> Line {
    let stamps: Vec<Stamp> = bs
        .iter()
        .map(|b| Stamp {
            before: b.before,
            after: b.after,
            kernel_ns: b.kernel_ns,
        })
        .collect();
    bracket_line::best_line(&stamps)
}
