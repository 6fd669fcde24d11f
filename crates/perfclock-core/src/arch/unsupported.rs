//! Architectures without a supported counter: everything compiles, nothing reads a counter.

/// The counter's name, for diagnostics.
pub const COUNTER_NAME: &str = "none";
/// Whether this architecture has a supported counter.
pub const SUPPORTED: bool = false;

/// See `counter::read_counter`.
#[inline(always)]
pub(super) fn read() -> Option<u64> {
    None
}

/// See `counter::read_counter_ordered`.
#[inline(always)]
pub(super) fn read_ordered() -> Option<u64> {
    None
}
