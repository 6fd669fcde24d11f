//! The facade's clock snapshot against the doctor's measurement of the same distance: this test
//! lives here, not in the facade's tests, because perfclock-check depends on perfclock (a
//! dev-dependency the other way would be a cycle).

use perfclock::ClockSnapshot;
use perfclock_testutil::{skip, Need};

/// The doctor's measurement (`monotonic_offset`: plain reads, the clock's bound on top) and the
/// snapshot's must agree within their stated uncertainties.
#[test]
fn monotonic_pairing_agrees_with_the_doctors_distance() {
    let _turn = perfclock_testutil::one_at_a_time();
    let clock = match perfclock::init() {
        Ok(clock) => clock,
        Err(e) => {
            // A machine without perf events skips (loudly) unless PERFCLOCK_REQUIRE_PERF=1 (CI).
            skip("snapshot vs monotonic_offset", Need::Perf, e);
            return;
        }
    };
    for _ in 0..20 {
        let snap = ClockSnapshot::take(clock).expect("snapshot");
        let doctor = perfclock_check::monotonic_offset(clock).expect("monotonic_offset");
        let difference = (snap.monotonic.offset_ns - doctor.offset_ns).unsigned_abs();
        let allowed =
            snap.monotonic.uncertainty_ns + doctor.uncertainty_ns + clock.error_bound_ns();
        println!(
            "snapshot {} +- {} ns, doctor {} +- {} ns (+ bound {}): difference {difference} ns",
            snap.monotonic.offset_ns,
            snap.monotonic.uncertainty_ns,
            doctor.offset_ns,
            doctor.uncertainty_ns,
            clock.error_bound_ns()
        );
        assert!(
            difference <= allowed,
            "{difference} > {allowed}: {snap:?} {doctor:?}"
        );
    }
}
