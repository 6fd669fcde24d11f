//! The facade against this machine's kernel: whichever mode it grants, readings must hold
//! against timestamps the kernel stamped.

use perfclock::Mode;
use perfclock_testutil::{ok_or_skip, Need};

#[test]
fn process_clock_holds_against_kernel_stamps() {
    let _turn = perfclock_testutil::one_at_a_time();
    let Some(clock) = ok_or_skip(
        "process_clock_holds_against_kernel_stamps",
        Need::Perf,
        perfclock::init(),
    ) else {
        return;
    };
    println!(
        "mode {:?}, bound {} ns",
        clock.mode(),
        clock.error_bound_ns()
    );
    match clock.mode() {
        Mode::Kernel => assert_eq!(clock.error_bound_ns(), 0),
        Mode::Paravirt => {
            let paravirt = clock.paravirt().expect("paravirt mode's page and offset");
            assert_eq!(clock.error_bound_ns(), paravirt.offset().bound_ns);
            assert!(
                clock.error_bound_ns() <= perfclock::paravirt::MAX_BRACKETS_BOUND_NS,
                "implausible paravirt bound {} ns",
                clock.error_bound_ns()
            );
            assert!(clock.withheld().is_some());
        }
        Mode::Calibrated | Mode::Shared => {
            let bound = clock.error_bound_ns();
            assert!(
                bound > 0 && bound < 100_000,
                "implausible calibrated bound {bound} ns"
            );
            assert!(clock.withheld().is_some());
        }
    }
    let report = perfclock_check::verify(clock, 500).expect("kernel stamps for verification");
    print!("{report}");
    assert!(
        report.events() >= 1_000,
        "too few kernel stamps checked: {}",
        report.events()
    );
    assert!(
        report.passed(),
        "kernel stamps outside the clock's bound:\n{report}"
    );
}
