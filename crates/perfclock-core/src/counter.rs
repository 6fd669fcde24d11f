//! The cycle counter that the perf clock is derived from, one file per architecture.
//!
//! x86_64 reads the TSC, aarch64 the virtual counter `CNTVCT_EL0`; elsewhere the reads return
//! `None` so that callers report [`crate::ReadError::CounterUnsupported`] instead of a timestamp.

#[cfg_attr(target_arch = "x86_64", path = "arch/x86_64.rs")]
#[cfg_attr(target_arch = "aarch64", path = "arch/aarch64.rs")]
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    path = "arch/unsupported.rs"
)]
mod arch;

pub use arch::{COUNTER_NAME, SUPPORTED};

/// A raw counter read, as cheap as the architecture allows. It may be reordered with earlier
/// loads: use [`read_counter_ordered`] when it must not run before preceding instructions finish.
#[inline(always)]
pub fn read_counter() -> Option<u64> {
    arch::read()
}

/// A counter read that waits for every earlier instruction to complete first
/// (x86_64 `lfence; rdtsc`, aarch64 `isb; mrs cntvct_el0`).
#[inline(always)]
pub fn read_counter_ordered() -> Option<u64> {
    arch::read_ordered()
}

/// [`read_counter`], or 0 where this architecture has no counter: for read paths that want a
/// plain `u64` and refuse unsupported architectures themselves (or read a page that declines
/// before the counter is read).
#[inline(always)]
pub fn read_counter_or_zero() -> u64 {
    read_counter().unwrap_or(0)
}

/// [`read_counter_ordered`], or 0 where this architecture has no counter (as
/// [`read_counter_or_zero`]).
#[inline(always)]
pub fn read_counter_ordered_or_zero() -> u64 {
    read_counter_ordered().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    #[cfg_attr(miri, ignore = "Miri cannot execute the counter instruction")]
    fn counter_advances() {
        let first = read_counter().unwrap();
        let mut later = read_counter_ordered().unwrap();
        for _ in 0..1_000_000 {
            if later > first {
                break;
            }
            later = read_counter_ordered().unwrap();
        }
        assert!(
            later > first,
            "{COUNTER_NAME} did not advance: {first} then {later}"
        );
    }
}
