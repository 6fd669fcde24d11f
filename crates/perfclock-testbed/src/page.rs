//! The page's capability bits and time parameters, and the facade's view of them.

use perfclock_core::page::caps;
use perfclock_core::PageReader;
use perfclock_os::{EventAttr, PerfEvent};

use crate::report::{chain, Report};

/// How far a user-space reading may miss the kernel's stamp on this architecture.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tolerance {
    /// arm64: the kernel floors `time_zero`, so a reading of the same counter value can be
    /// 1 ns above the kernel's. x86_64: exact.
    pub ns: u64,
    /// The same floor seen through `ns_to_cycles`: one counter tick below the first read.
    pub cycles: u64,
}

const ARM64: bool = cfg!(target_arch = "aarch64");

/// Prints the page of a fresh dummy event and checks that this kernel publishes what the rest
/// needs. `None` when it does not: nothing after this could test anything real.
pub(crate) fn check(report: &mut Report) -> Option<Tolerance> {
    let mapped = PerfEvent::open(&EventAttr::dummy()).and_then(|event| event.map_page_only());
    let mapping = match mapped {
        Ok(mapping) => mapping,
        Err(error) => {
            report.fail("page", format_args!("dummy event: {error}"));
            return None;
        }
    };
    // SAFETY: the mapping is a live read-only perf page written only by the kernel, and outlives
    // the reader (both end with this function).
    let reader = unsafe { PageReader::new(mapping.page().cast()) };
    let raw = match reader.raw() {
        Ok(raw) => raw,
        Err(error) => {
            report.fail("page", format_args!("seqlock read: {}", chain(&error)));
            return None;
        }
    };
    let bit = |b: u64| u8::from(raw.capabilities & b != 0);
    report.info(format_args!(
        "page capabilities={:#x} cap_user_rdpmc={} cap_user_time={} cap_user_time_zero={} \
         cap_user_time_short={} time_mult={} time_shift={} time_zero={} time_cycles={} \
         time_mask={:#x}",
        raw.capabilities,
        bit(caps::USER_RDPMC),
        bit(caps::USER_TIME),
        bit(caps::USER_TIME_ZERO),
        bit(caps::USER_TIME_SHORT),
        raw.time_mult,
        raw.time_shift,
        raw.time_zero,
        raw.time_cycles,
        raw.time_mask,
    ));
    let conversion = match raw.conversion() {
        Ok(conversion) => conversion,
        Err(error) => {
            report.fail(
                "page",
                format_args!(
                    "this kernel does not publish the conversion: {}",
                    chain(&error)
                ),
            );
            return None;
        }
    };
    // The counter's rate implied by the conversion: 2^shift / mult ticks per ns.
    let counter_hz = (1u128 << conversion.shift()) * 1_000_000_000 / u128::from(conversion.mult());
    report.set_counter_hz(counter_hz);
    report.pass(
        "page",
        format_args!(
            "cap_user_time_zero=1 mult={} shift={} counter_hz={counter_hz}",
            conversion.mult(),
            conversion.shift()
        ),
    );
    if ARM64 {
        // The arm64 read path must go through cap_user_time_short (time_cycles/time_mask).
        report.check(
            conversion.is_short(),
            "time-short",
            format_args!(
                "cap_user_time_short={} time_cycles={} time_mask={:#x}",
                bit(caps::USER_TIME_SHORT),
                raw.time_cycles,
                raw.time_mask
            ),
        );
    }
    facade(report, &reader);
    Some(if ARM64 {
        Tolerance { ns: 1, cycles: 1 }
    } else {
        Tolerance { ns: 0, cycles: 0 }
    })
}

/// The process-wide clock must open in kernel mode with the kernel's own parameters: the same
/// conversion as `page`, this thread's other dummy-event page. The run waits for x86's refined
/// TSC calibration first ([`crate::refinement`]); should the kernel still change the conversion
/// between the two reads, it refreshes each page only when the thread is scheduled in, so a
/// mismatch is re-read after a short sleep (which schedules the thread out and back in).
fn facade(report: &mut Report, page: &PageReader) {
    const ATTEMPTS: u32 = 5;
    match perfclock::init() {
        Ok(clock) => {
            let mode = clock.mode();
            let bound = clock.error_bound_ns();
            let mut attempts = 0;
            let same = loop {
                attempts += 1;
                let same = clock.conversion().ok() == page.conversion().ok();
                if same || attempts == ATTEMPTS {
                    break same;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            };
            report.check(
                mode == perfclock::Mode::Kernel && bound == 0 && same,
                "facade-open",
                format_args!(
                    "mode={mode:?} error_bound_ns={bound} same_conversion_as_page={same} \
                     attempts={attempts} now_ns={}",
                    perfclock::now_ns()
                ),
            );
        }
        Err(error) => report.fail(
            "facade-open",
            format_args!("perfclock::init: {}", chain(&error)),
        ),
    }
}
