//! Console lines for `tests/e2e/testbed/run.sh`, and the totals behind the summary line.

use std::fmt;

/// An error and its causes on one line: the facade's [`perfclock::error_chain`].
pub(crate) use perfclock::error_chain as chain;

/// A minimum for a details line: `-` while it is still `u64::MAX` (nothing was measured).
pub(crate) fn min_or_dash(v: u64) -> String {
    if v == u64::MAX {
        "-".to_owned()
    } else {
        v.to_string()
    }
}

/// What one group of judged brackets adds to the run's totals.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Judged {
    pub events: u64,
    /// Kernel stamps outside the readings by more than the tolerance.
    pub violations: u64,
    /// Outside by at most the tolerance.
    pub slips: u64,
    /// Narrowest bracket, ns (`u64::MAX` with no events).
    pub tightest_ns: u64,
}

/// What the run found so far. Printing and counting go together so that the summary can only
/// count what a printed line reported.
#[derive(Debug)]
pub(crate) struct Report {
    failures: u32,
    passes: u32,
    events: u64,
    violations: u64,
    slips_1ns: u64,
    tightest_ns: Option<u64>,
    /// Records bracketed through the facade's `now_ns()`, per CPU index (0 and 1).
    facade_events: [u64; 2],
    /// Counter rate implied by the page's conversion.
    counter_hz: Option<u128>,
}

impl Report {
    pub(crate) fn new() -> Report {
        Report {
            failures: 0,
            passes: 0,
            events: 0,
            violations: 0,
            slips_1ns: 0,
            tightest_ns: None,
            facade_events: [0; 2],
            counter_hz: None,
        }
    }

    pub(crate) fn set_counter_hz(&mut self, hz: u128) {
        self.counter_hz = Some(hz);
    }

    pub(crate) fn info(&mut self, args: fmt::Arguments<'_>) {
        println!("TESTBED INFO {args}");
    }

    pub(crate) fn pass(&mut self, check: &str, args: fmt::Arguments<'_>) {
        self.passes += 1;
        println!("TESTBED PASS {check} {args}");
    }

    pub(crate) fn fail(&mut self, check: &str, args: fmt::Arguments<'_>) {
        self.failures += 1;
        println!("TESTBED FAIL {check} {args}");
    }

    /// PASS or FAIL with the same details.
    pub(crate) fn check(&mut self, ok: bool, check: &str, args: fmt::Arguments<'_>) {
        if ok {
            self.pass(check, args);
        } else {
            self.fail(check, args);
        }
    }

    /// Adds judged brackets to the totals; `facade_cpu` when they were read through the facade.
    pub(crate) fn add_events(&mut self, stats: Judged, facade_cpu: Option<usize>) {
        self.events += stats.events;
        self.violations += stats.violations;
        self.slips_1ns += stats.slips;
        if stats.events > 0 {
            let t = stats.tightest_ns;
            self.tightest_ns = Some(self.tightest_ns.map_or(t, |old| old.min(t)));
        }
        if let Some(slot) = facade_cpu.and_then(|cpu| self.facade_events.get_mut(cpu)) {
            *slot += stats.events;
        }
    }

    /// Prints the summary line, failing the run when it holds fewer records than required.
    pub(crate) fn summary(&mut self, min_events: u64, min_facade_per_cpu: u64) {
        let (events, [cpu0, cpu1]) = (self.events, self.facade_events);
        self.check(
            events >= min_events,
            "event-count",
            format_args!("events={events} required={min_events}"),
        );
        self.check(
            cpu0 >= min_facade_per_cpu && cpu1 >= min_facade_per_cpu,
            "facade-event-count",
            format_args!("cpu0={cpu0} cpu1={cpu1} required_per_cpu={min_facade_per_cpu}"),
        );
        println!(
            "TESTBED SUMMARY arch={} kernel={} counter_hz={} events={} violations={} slips_1ns={} \
             tightest_ns={} checks_passed={} checks_failed={}",
            std::env::consts::ARCH,
            kernel_release(),
            self.counter_hz.map_or("-".to_owned(), |hz| hz.to_string()),
            self.events,
            self.violations,
            self.slips_1ns,
            self.tightest_ns.map_or("-".to_owned(), |t| t.to_string()),
            self.passes,
            self.failures,
        );
    }

    /// True when at least one check passed and none failed.
    pub(crate) fn passed(&self) -> bool {
        self.failures == 0 && self.passes > 0
    }
}

fn utsname() -> Option<libc::utsname> {
    // SAFETY: utsname is plain C chars, valid all-zero; uname fills it and NUL-terminates.
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a valid, writable utsname.
    (unsafe { libc::uname(&mut name) } == 0).then_some(name)
}

fn field(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        // c_char is i8 on x86_64 and u8 on aarch64: the cast is a no-op on one of them.
        .map(|&c| {
            #[allow(clippy::unnecessary_cast)]
            let byte = c as u8;
            byte
        })
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `uname -r`, e.g. `6.1.0-57-amd64`.
pub(crate) fn kernel_release() -> String {
    utsname().map_or("unknown".to_owned(), |u| field(&u.release))
}

/// `uname -v`, e.g. `#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (...)`.
pub(crate) fn kernel_version() -> String {
    utsname().map_or("unknown".to_owned(), |u| field(&u.version))
}
