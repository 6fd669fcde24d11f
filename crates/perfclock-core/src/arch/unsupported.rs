//! Architectures without a supported counter: everything compiles, nothing reads a counter.

pub const COUNTER_NAME: &str = "none";
pub const SUPPORTED: bool = false;

#[inline(always)]
pub fn read() -> Option<u64> {
    None
}

#[inline(always)]
pub fn read_ordered() -> Option<u64> {
    None
}
