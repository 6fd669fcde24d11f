//! Errors of the core: small `Copy` types whose `Display` needs no allocation, with
//! `core::error::Error` so that std users get `source()` chains without a `std` feature.
//!
//! They follow the workspace's error policy, stated in docs/design.md ("Errors").

use core::fmt;

/// Time parameters that no kernel would publish; converting with them would give garbage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParamError {
    /// `time_mult` is 0: every counter value would map to `time_zero`.
    ZeroMultiplier,
    /// `time_shift` is over 63: the shift is undefined on 64-bit values.
    ShiftTooLarge(u16),
    /// `cap_user_time_short` with a `time_mask` that is not of the form `2^k - 1`, `k >= 1`.
    InvalidMask(u64),
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::ZeroMultiplier => f.write_str("time_mult is 0"),
            ParamError::ShiftTooLarge(shift) => write!(f, "time_shift {shift} is over 63"),
            ParamError::InvalidMask(mask) => {
                write!(f, "time_mask {mask:#x} is not a run of low bits")
            }
        }
    }
}

/// Why a read of the clock page gave no timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadError {
    /// The writer held the seqlock (or kept changing it) for every allowed retry.
    Contended,
    /// The page does not set `cap_user_time_zero`: the writer does not publish the conversion.
    TimeZeroUnavailable {
        /// The page's capability word as read.
        capabilities: u64,
    },
    /// The page publishes parameters that make no sense; `source()` says which.
    InvalidParameters(ParamError),
    /// This architecture has no supported counter.
    CounterUnsupported,
    /// The paravirtual clock's entry gave no reading; `source()` says why.
    Pvclock(PvclockError),
}

impl From<ParamError> for ReadError {
    fn from(error: ParamError) -> Self {
        ReadError::InvalidParameters(error)
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Contended => f.write_str(
                "the clock page stayed locked by its writer for every retry (a writer that never \
                 finishes, or one preempted mid-update)",
            ),
            ReadError::TimeZeroUnavailable { capabilities } => write!(
                f,
                "the clock page does not publish the time conversion \
                 (cap_user_time_zero = 0, capabilities {capabilities:#x})"
            ),
            ReadError::InvalidParameters(_) => {
                f.write_str("the clock page publishes invalid parameters")
            }
            ReadError::CounterUnsupported => {
                f.write_str("no supported cycle counter on this architecture")
            }
            ReadError::Pvclock(_) => f.write_str("the paravirtual clock's entry gave no reading"),
        }
    }
}

impl core::error::Error for ParamError {}

impl core::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            ReadError::InvalidParameters(error) => Some(error),
            ReadError::Pvclock(error) => Some(error),
            ReadError::Contended
            | ReadError::TimeZeroUnavailable { .. }
            | ReadError::CounterUnsupported => None,
        }
    }
}

/// Why bytes are not a usable shared clock page ([`crate::shared_page`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PageDefect {
    /// Shorter than the layout.
    Truncated {
        /// Bytes there are.
        len: usize,
        /// Bytes the layout needs.
        needed: usize,
    },
    /// Not a page in this format, or one whose contents make no sense.
    Garbage(&'static str),
    /// Another format version.
    Version {
        /// The version found.
        found: u32,
        /// The version this perfclock reads.
        expected: u32,
    },
    /// Written in another boot.
    OtherBoot,
    /// The heartbeat is older than `after_ns`
    /// ([`STALE_AFTER_NS`](crate::shared_page::STALE_AFTER_NS)): no server keeps it up to date.
    Stale {
        /// Heartbeat age, ns.
        age_ns: u64,
        /// The age past which a page is stale, ns.
        after_ns: u64,
    },
    /// The writer held the header lock for every retry.
    Busy,
}

impl fmt::Display for PageDefect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageDefect::Truncated { len, needed } => {
                write!(f, "truncated: {len} bytes, the layout needs {needed}")
            }
            PageDefect::Garbage(what) => write!(f, "garbage: {what}"),
            PageDefect::Version { found, expected } => write!(
                f,
                "format version {found}, this perfclock reads version {expected}"
            ),
            PageDefect::OtherBoot => f.write_str(
                "written in another boot (its boot id is not /proc/sys/kernel/random/boot_id)",
            ),
            PageDefect::Stale { age_ns, after_ns } => write!(
                f,
                "stale: last heartbeat {:.1} s ago (stale after {} s: is `perfclock serve` running?)",
                *age_ns as f64 / 1e9,
                after_ns / 1_000_000_000
            ),
            PageDefect::Busy => f.write_str("its writer held the header lock for every retry"),
        }
    }
}

impl core::error::Error for PageDefect {}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_testutil::error_chain::assert_each_cause_once;

    #[test]
    fn a_read_error_gives_its_parameter_error_once() {
        let printed =
            assert_each_cause_once(&ReadError::InvalidParameters(ParamError::ShiftTooLarge(64)));
        assert!(printed.contains("time_shift 64 is over 63"), "{printed}");
    }
}

/// Why an entry (or what was read at its address) gives no reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PvclockError {
    /// `tsc_to_system_mul` is 0: not a pvclock entry (or one the host never filled).
    ZeroMultiplier,
    /// A slope outside 10 MHz..100 GHz, or a shift no host publishes: not a pvclock entry.
    AbsurdSlope {
        /// `tsc_to_system_mul`.
        mul: u32,
        /// `tsc_shift`.
        shift: i8,
    },
    /// `version` was odd (or changed) on every one of [`MAX_RETRIES`](crate::MAX_RETRIES) attempts.
    VersionNeverSettled,
    /// `PVCLOCK_TSC_STABLE_BIT` is clear: the kernel clamps readings to a global last value,
    /// which user space cannot reproduce.
    NotStable {
        /// The entry's `flags`.
        flags: u8,
    },
    /// This architecture has no supported counter.
    CounterUnsupported,
}

impl fmt::Display for PvclockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PvclockError::ZeroMultiplier => {
                f.write_str("not a pvclock entry: tsc_to_system_mul is 0")
            }
            PvclockError::AbsurdSlope { mul, shift } => write!(
                f,
                "not a pvclock entry: tsc_to_system_mul {mul} with tsc_shift {shift} is no \
                 counter between 10 MHz and 100 GHz"
            ),
            PvclockError::VersionNeverSettled => f.write_str(
                "the pvclock entry's version stayed odd or kept changing for every retry",
            ),
            PvclockError::NotStable { flags } => write!(
                f,
                "the pvclock entry lacks PVCLOCK_TSC_STABLE_BIT (flags {flags:#x}): the kernel \
                 clamps its readings, which user space cannot follow"
            ),
            PvclockError::CounterUnsupported => {
                f.write_str("no supported cycle counter on this architecture")
            }
        }
    }
}

impl core::error::Error for PvclockError {}
