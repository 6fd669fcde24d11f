//! Why a clock cannot be had: the facts a user needs to act on it (why the kernel withholds the
//! time parameters; whether this thread may read the counter at all).
//!
//! # Safety
//! Unsafe code is allowed only on `counter_readable`: one `prctl(PR_GET_TSC)` that writes one
//! `int` through a pointer to a local.

use std::fmt;

use perfclock_core::page::caps;

/// What was observed on a kernel whose page lacks `cap_user_time_zero`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    /// The page's capability word.
    pub capabilities: u64,
    /// `/sys/devices/system/clocksource/clocksource0/current_clocksource`.
    pub clocksource: Option<String>,
    /// The clocksources the kernel offers (`available_clocksource`).
    pub available_clocksources: Option<String>,
    /// The CPU reports running under a hypervisor (`hypervisor` in `/proc/cpuinfo` flags).
    pub hypervisor: bool,
}

impl Withheld {
    /// Reads the system's facts for a page with capability word `capabilities`.
    pub fn observe(capabilities: u64) -> Self {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .map(|s| s.trim().to_owned())
        };
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Withheld {
            capabilities,
            clocksource: read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
            available_clocksources: read(
                "/sys/devices/system/clocksource/clocksource0/available_clocksource",
            ),
            hypervisor: cpuinfo
                .lines()
                .filter(|line| line.starts_with("flags"))
                .any(|line| line.split_whitespace().any(|flag| flag == "hypervisor")),
        }
    }

    /// A paravirtual clock is on offer, so sched_clock is very likely paravirtual too.
    pub fn paravirtual_clock(&self) -> Option<&'static str> {
        let offered = self.available_clocksources.as_deref().unwrap_or_default();
        [
            "kvm-clock",
            "xen",
            "hyperv_clocksource_tsc_page",
            "vmware-tsc",
        ]
        .into_iter()
        .find(|name| {
            offered
                .split_whitespace()
                .any(|offer| offer.starts_with(name))
        })
    }

    /// A human summary of the capability bits.
    pub fn capability_bits(&self) -> String {
        let bit = |mask: u64| u8::from(self.capabilities & mask != 0);
        format!(
            "cap_user_time={} cap_user_time_zero={} cap_user_time_short={}",
            bit(caps::USER_TIME),
            bit(caps::USER_TIME_ZERO),
            bit(caps::USER_TIME_SHORT)
        )
    }
}

impl Withheld {
    /// What was observed and why the kernel withholds the parameters, without advice.
    fn fmt_facts(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the kernel does not publish the perf clock's parameters ({}",
            self.capability_bits()
        )?;
        if let Some(clocksource) = &self.clocksource {
            write!(f, ", clocksource {clocksource}")?;
        }
        f.write_str("). ")?;
        match (self.hypervisor, self.paravirtual_clock()) {
            (true, Some(clock)) => write!(
                f,
                "This is a virtual machine whose sched_clock is paravirtual ({clock} is on offer): \
                 the kernel publishes the parameters only when sched_clock is the native, stable \
                 TSC, even if the clocksource is tsc."
            ),
            (true, None) => f.write_str(
                "This is a virtual machine; its sched_clock is likely paravirtual, and the kernel \
                 publishes the parameters only for a native, stable sched_clock.",
            ),
            (false, _) => f.write_str(
                "The kernel publishes them only when sched_clock is the native, stable cycle \
                 counter (x86: a stable TSC; arm64: the arch timer); here it is not.",
            ),
        }
    }

    /// The remedies that do not involve perfclock's calibrated mode.
    fn fmt_kernel_remedies(f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "on a KVM guest, paravirt mode (the default on x86_64) reads kvm-clock exactly \
             where the vDSO maps its pvclock page (`perfclock doctor` says why it did not); \
             without that page and with a reliable TSC, boot with `no-kvmclock tsc=reliable` \
             so sched_clock is the TSC; or record with `perf record -k CLOCK_MONOTONIC` and \
             stamp your events with CLOCK_MONOTONIC instead.",
        )
    }

    /// The facts and only the remedies that do not use calibrated mode: for a message about a
    /// calibration that already failed, where "use the calibrated mode" would be no help.
    #[cfg(all(feature = "calibrated", target_os = "linux"))]
    pub(crate) fn without_calibration_advice(&self) -> impl fmt::Display + '_ {
        struct Facts<'a>(&'a Withheld);
        impl fmt::Display for Facts<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt_facts(f)?;
                f.write_str(" For kernel mode: ")?;
                Withheld::fmt_kernel_remedies(f)
            }
        }
        Facts(self)
    }
}

impl fmt::Display for Withheld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_facts(f)?;
        #[cfg(feature = "calibrated")]
        f.write_str(
            " What you can do: use the calibrated mode (`Clock::open`, the default), which fits \
             the counter to timestamps the kernel stamps and reports its error bound; or, ",
        )?;
        // Built without calibration: that mode is not on offer, so it is not advised.
        #[cfg(not(feature = "calibrated"))]
        f.write_str(
            " What you can do: build perfclock with its default feature `calibrated`, which fits \
             the counter to timestamps the kernel stamps and reports its error bound; or, ",
        )?;
        Self::fmt_kernel_remedies(f)
    }
}

/// Whether this thread may read the cycle counter, asked without reading it: on x86 a thread
/// (or the thread that created it) that called `prctl(PR_SET_TSC, PR_TSC_SIGSEGV)` gets SIGSEGV
/// from `rdtsc`, so every read, the calibration's brackets included, would kill the process.
/// Threads spawned later inherit the setting, so checking the opening thread covers the
/// calibration thread too. Elsewhere the counter cannot be disabled this way: always readable.
///
/// # Errors
/// [`crate::Error::Unsupported`] when `PR_GET_TSC` reports `PR_TSC_SIGSEGV`.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) fn counter_readable() -> Result<(), crate::Error> {
    if perfclock_os::process::counter_faults() {
        return Err(crate::Error::Unsupported);
    }
    Ok(())
}

/// See the x86_64 version: other architectures cannot disable the counter per thread.
#[cfg(all(target_os = "linux", not(target_arch = "x86_64")))]
pub(crate) fn counter_readable() -> Result<(), crate::Error> {
    Ok(())
}
