//! C ABI of the process-wide clock (`perfclock_init`, the reads, `perfclock_strerror` in
//! `perfclock.h`).
//!
//! # Safety
//! Every function here is `#[no_mangle] extern "C"`: its symbol name is the header's, unique to
//! perfclock (`perfclock_` prefix). The one unsafe block writes through the caller's
//! out-pointer of `perfclock_try_now_ns` after checking it is not NULL; the caller promises it
//! is valid for a write, as the header documents.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::sync::{Mutex, PoisonError};

use perfclock::{Clock, Mode};

use crate::{
    clock, error_code, guard, DESCRIPTIONS, PERFCLOCK_E_INTERNAL, PERFCLOCK_E_NOT_INITIALIZED,
    PERFCLOCK_E_NULL_POINTER, PERFCLOCK_E_READ, PERFCLOCK_MODE_CALIBRATED, PERFCLOCK_MODE_KERNEL,
    PERFCLOCK_MODE_NONE, PERFCLOCK_MODE_PARAVIRT, PERFCLOCK_MODE_SHARED, PERFCLOCK_OK,
    UNKNOWN_CODE,
};

/// Serialises the C ABI's opens, so concurrent first calls open (and calibrate) one clock.
static INIT_LOCK: Mutex<()> = Mutex::new(());

/// Opens the process-wide clock. See `perfclock.h`.
///
/// Unlike [`perfclock::init`], a failure is not remembered: each call after one tries again
/// (the fd or thread limit may have been raised since), and a success becomes the process-wide
/// clock through [`perfclock::set_global`]. Not async-signal-safe; thread-safe; once it has
/// succeeded, later calls return at once, except the first in a fork child, which starts the
/// calibrated clock's refiner again ([`Clock::resume_after_fork`]), and one in shared mode whose
/// server stopped, which follows a server started since ([`Clock::reattach_shared_page`]).
#[no_mangle]
pub extern "C" fn perfclock_init() -> c_int {
    guard(PERFCLOCK_E_INTERNAL, || {
        if let Some(clock) = clock() {
            // In a fork child, start the calibrated clock's refiner again (a no-op elsewhere);
            // a failure leaves the clock readable, its bound saying how far to trust it.
            #[cfg(target_os = "linux")]
            let _ = clock.resume_after_fork();
            clock.reattach_shared_page();
            return PERFCLOCK_OK;
        }
        // A poisoned lock guards nothing (it protects no data): go on.
        let _serial = INIT_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        if clock().is_some() {
            return PERFCLOCK_OK;
        }
        match Clock::open() {
            Ok(opened) => {
                if perfclock::set_global(opened) {
                    return PERFCLOCK_OK;
                }
                // Rust code of this process called `perfclock::init()` first: its result is
                // the process-wide one (the Rust API remembers a failure).
                match perfclock::init() {
                    Ok(_) => PERFCLOCK_OK,
                    Err(error) => error_code(&error),
                }
            }
            Err(error) => error_code(&error),
        }
    })
}

/// The perf clock now in ns, or 0 without a clock or on a failed read. Unordered (see
/// `perfclock.h`). Async-signal-safe.
#[no_mangle]
pub extern "C" fn perfclock_now_ns() -> u64 {
    guard(0, || perfclock::try_now_ns().unwrap_or(0))
}

/// As `perfclock_now_ns`, never below a reading observed through a happens-before edge.
/// Async-signal-safe.
#[no_mangle]
pub extern "C" fn perfclock_now_ns_ordered() -> u64 {
    guard(0, || perfclock::try_now_ns_ordered().unwrap_or(0))
}

/// Stores the perf clock now in `*out` and returns 0, or returns a negative code leaving
/// `*out` unchanged. Async-signal-safe.
///
/// # Safety
/// `out` must be NULL or valid for writing one `u64`.
#[no_mangle]
pub unsafe extern "C" fn perfclock_try_now_ns(out: *mut u64) -> c_int {
    guard(PERFCLOCK_E_INTERNAL, || {
        if out.is_null() {
            return PERFCLOCK_E_NULL_POINTER;
        }
        match perfclock::try_now_ns() {
            Some(ns) => {
                // SAFETY: `out` is non-null and the caller promises it is valid for a write.
                unsafe { out.write(ns) };
                PERFCLOCK_OK
            }
            None if clock().is_none() => PERFCLOCK_E_NOT_INITIALIZED,
            None => PERFCLOCK_E_READ,
        }
    })
}

/// 0 (none), 1 (kernel), 2 (calibrated), 3 (shared) or 4 (paravirt). Async-signal-safe.
#[no_mangle]
pub extern "C" fn perfclock_mode() -> c_int {
    guard(PERFCLOCK_MODE_NONE, || match clock().map(Clock::mode) {
        None => PERFCLOCK_MODE_NONE,
        Some(Mode::Kernel) => PERFCLOCK_MODE_KERNEL,
        Some(Mode::Calibrated) => PERFCLOCK_MODE_CALIBRATED,
        Some(Mode::Shared) => PERFCLOCK_MODE_SHARED,
        Some(Mode::Paravirt) => PERFCLOCK_MODE_PARAVIRT,
    })
}

/// Error bound of readings in ns; `u64::MAX` without a clock. Async-signal-safe.
#[no_mangle]
pub extern "C" fn perfclock_error_bound_ns() -> u64 {
    guard(u64::MAX, || clock().map_or(u64::MAX, Clock::error_bound_ns))
}

/// The raw counter (TSC / CNTVCT_EL0), or 0 if unsupported: the deferred stamp, one counter
/// read and nothing else. Needs no init. Async-signal-safe.
#[no_mangle]
pub extern "C" fn perfclock_read_counter() -> u64 {
    perfclock::CounterStamp::now().cycles()
}

/// Counter value to perf-clock ns; 0 without a clock. Async-signal-safe.
#[no_mangle]
pub extern "C" fn perfclock_cycles_to_ns(cycles: u64) -> u64 {
    guard(0, || {
        clock()
            .and_then(|c| c.cycles_to_ns(cycles).ok())
            .unwrap_or(0)
    })
}

/// Perf-clock ns to counter value (floor); 0 without a clock. Async-signal-safe.
#[no_mangle]
pub extern "C" fn perfclock_ns_to_cycles(ns: u64) -> u64 {
    guard(0, || {
        clock().and_then(|c| c.ns_to_cycles(ns).ok()).unwrap_or(0)
    })
}

/// Static description of a code; never NULL. Async-signal-safe.
#[no_mangle]
pub extern "C" fn perfclock_strerror(code: c_int) -> *const c_char {
    guard(UNKNOWN_CODE.as_ptr().cast(), || {
        DESCRIPTIONS
            .iter()
            .find(|(known, _)| *known == code)
            .map_or(UNKNOWN_CODE, |(_, text)| *text)
            .as_ptr()
            .cast()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn strerror_is_static_and_total() {
        for code in [
            -1000,
            -20,
            -19,
            -16,
            -15,
            -14,
            -1,
            0,
            1,
            c_int::MIN,
            c_int::MAX,
        ] {
            // SAFETY: `perfclock_strerror` returns a pointer into a static NUL-terminated str.
            let text = unsafe { CStr::from_ptr(perfclock_strerror(code)) };
            assert!(!text.to_bytes().is_empty());
        }
        // SAFETY: as above.
        let unknown = unsafe { CStr::from_ptr(perfclock_strerror(1)) };
        assert_eq!(unknown.to_bytes(), b"unknown perfclock error code");
    }
}
