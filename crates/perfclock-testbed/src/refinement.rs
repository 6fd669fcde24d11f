//! The kernel's conversion after boot, and the page of a thread that slept through a change.
//!
//! x86's kernel refines its TSC calibration about a second after it sets the TSC clocksource up
//! (`tsc_refine_calibration_work`): it then rewrites every CPU's sched_clock conversion
//! (`set_cyc2ns_scale`) and switches the clocksource from `tsc-early` to `tsc`. It pushes the
//! change into no perf page: a page is rewritten only when its event's thread is scheduled in.
//! The guest's `/init` starts within that second, so [`wait_for_final_clock`] holds the
//! kernel-exact checks until the clocksource is `tsc`; before that a clock opened by a thread
//! that then sleeps would keep the old conversion and drift by the refinement's difference in
//! rate (docs/measurements.md). [`Sleeper`] shows that limitation on the real kernel:
//! a page mapped by a thread that sleeps across the change keeps the old conversion until the
//! thread runs again.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use perfclock_core::{counter, PageReader, TimeConversion};
use perfclock_os::{EventAttr, PageMapping, PerfEvent};

use crate::report::{chain, Report};

/// The clocksource the kernel ends on once its TSC calibration is final.
const CLOCKSOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
/// Guest time allowed for the refinement: one second of kernel work, stretched by emulation.
const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// Waits until the kernel's TSC conversion is final (x86_64; arm64's counter frequency is fixed,
/// nothing is refined). A FAIL when it is not final within [`WAIT_LIMIT`]: the kernel-exact
/// checks after it could not be trusted.
pub(crate) fn wait_for_final_clock(report: &mut Report, pid1: bool) {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    if let Err(error) = crate::guest_fs::ensure_sysfs(pid1) {
        report.fail("clock-final", format_args!("{error}"));
        return;
    }
    let start = Instant::now();
    loop {
        let current = match std::fs::read_to_string(CLOCKSOURCE) {
            Ok(name) => name.trim().to_owned(),
            Err(error) => {
                report.fail("clock-final", format_args!("read {CLOCKSOURCE}: {error}"));
                return;
            }
        };
        let waited = start.elapsed();
        if current == "tsc" {
            report.pass(
                "clock-final",
                format_args!("clocksource=tsc waited_ms={}", waited.as_millis()),
            );
            return;
        }
        if waited > WAIT_LIMIT {
            report.fail(
                "clock-final",
                format_args!(
                    "clocksource={current} after {} s: the kernel has not finished calibrating \
                     its TSC, so its conversion may still change under the checks",
                    waited.as_secs()
                ),
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A dummy event's page mapped by a thread that then sleeps until [`Sleeper::report`] wakes it.
#[derive(Debug)]
pub(crate) struct Sleeper {
    mapping: PageMapping,
    wake: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Sleeper {
    /// Starts the thread; `Err` when it could not map its page.
    pub(crate) fn start() -> Result<Sleeper, String> {
        let (mapped_tx, mapped_rx) = mpsc::channel();
        let (wake, wake_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mapped = PerfEvent::open(&EventAttr::dummy()).and_then(|e| e.map_page_only());
            let ok = mapped.is_ok();
            let _ = mapped_tx.send(mapped.map_err(|e| format!("dummy event page: {e}")));
            if ok {
                // Blocked in the kernel: the event is not scheduled in, its page not rewritten.
                let _ = wake_rx.recv();
            }
        });
        let mapping = mapped_rx
            .recv()
            .map_err(|_| "the sleeper thread ended before mapping its page".to_owned())??;
        Ok(Sleeper {
            mapping,
            wake,
            thread,
        })
    }

    /// Compares the sleeper's page with a fresh one, wakes the thread, and checks that its page
    /// then carries the fresh conversion.
    pub(crate) fn report(self, report: &mut Report) {
        let fresh = match fresh_conversion() {
            Ok(c) => c,
            Err(error) => {
                report.fail("page-refresh", format_args!("fresh page: {error}"));
                return;
            }
        };
        // SAFETY: a live read-only perf page written only by the kernel; the mapping outlives
        // the reader (both end with this function).
        let reader = unsafe { PageReader::new(self.mapping.page().cast()) };
        let asleep = match reader.conversion() {
            Ok(c) => c,
            Err(error) => {
                report.fail("page-refresh", format_args!("sleeper's page: {error}"));
                return;
            }
        };
        let _ = self.wake.send(());
        let joined = self.thread.join().is_ok();
        if asleep == fresh {
            report.info(format_args!(
                "page-refresh: the kernel's conversion did not change while the sleeper slept \
                 (mult={}): nothing to show",
                fresh.mult()
            ));
            return;
        }
        let now = counter::read_counter().unwrap_or(0);
        let off_ns = i128::from(asleep.cycles_to_ns(now)) - i128::from(fresh.cycles_to_ns(now));
        let ppm = (f64::from(asleep.mult()) / f64::from(fresh.mult()) - 1.0) * 1e6;
        report.info(format_args!(
            "page-refresh: a page whose thread slept through the kernel's change kept \
             mult={} (fresh {}, {ppm:+.2} ppm): a reading through it is {off_ns:+} ns off now",
            asleep.mult(),
            fresh.mult()
        ));
        // The thread ran once (woken, then exited): its event was scheduled in.
        let after = reader.conversion().ok();
        report.check(
            joined && after == Some(fresh),
            "page-refresh",
            format_args!(
                "after its thread ran: same_conversion_as_fresh={} joined={joined}",
                after == Some(fresh)
            ),
        );
    }
}

/// The conversion on a page mapped now.
fn fresh_conversion() -> Result<TimeConversion, String> {
    let mapping = PerfEvent::open(&EventAttr::dummy())
        .and_then(|e| e.map_page_only())
        .map_err(|e| e.to_string())?;
    // SAFETY: as in `Sleeper::report`; the mapping lives until the end of this function.
    let reader = unsafe { PageReader::new(mapping.page().cast()) };
    reader.conversion().map_err(|e| chain(&e))
}
