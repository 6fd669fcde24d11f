//! C ABI of the jitdump writer (`perfclock_jitdump_*` in `perfclock.h`).
//!
//! A `perfclock_jitdump *` is a boxed [`JitDump`]; `perfclock_jitdump_close` takes the box back.
//! Loads from many threads share it by `&`, which [`JitDump`] supports.
//!
//! # Safety
//! Every function here is `#[no_mangle] extern "C"` under a `perfclock_jitdump_` name of the
//! header. The unsafe code dereferences the caller's pointers after checking them for NULL: a
//! directory and a name as NUL-terminated strings, a code range of the given size, an out-pointer
//! written once, and a handle that is a live box from `perfclock_jitdump_open` (shared by `&`,
//! which [`JitDump`] allows from any thread; taken back only by `perfclock_jitdump_close`). The
//! header states these as the callers' obligations.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::AssertUnwindSafe;

use ::perfclock_jitdump::{ClockName, JitClock, JitDump, JitDumpError};

use super::{
    error_code, guard, perfclock_init, PERFCLOCK_E_FORK_CHILD, PERFCLOCK_E_INTERNAL,
    PERFCLOCK_E_INVALID_ARGUMENT, PERFCLOCK_E_IO, PERFCLOCK_E_NAME_TAKEN, PERFCLOCK_E_NULL_POINTER,
    PERFCLOCK_E_READ, PERFCLOCK_OK,
};

/// The clock of a C constant.
fn jit_clock(clock: c_int) -> Option<JitClock> {
    usize::try_from(clock)
        .ok()
        .and_then(|i| JitClock::ALL.get(i).copied())
}

/// Opaque handle (`perfclock_jitdump` in C).
#[allow(non_camel_case_types)]
pub type perfclock_jitdump = JitDump;

fn code(error: &JitDumpError) -> c_int {
    match error {
        JitDumpError::Clock(error) => error_code(error),
        JitDumpError::ClockRead(_) => PERFCLOCK_E_READ,
        JitDumpError::NameContainsNul { .. }
        | JitDumpError::EmptyCode
        | JitDumpError::RecordTooLarge { .. } => PERFCLOCK_E_INVALID_ARGUMENT,
        JitDumpError::NameTaken(_) | JitDumpError::NameLive(_) => PERFCLOCK_E_NAME_TAKEN,
        JitDumpError::ForkChild(_) => PERFCLOCK_E_FORK_CHILD,
        JitDumpError::ClockMismatch(_) => PERFCLOCK_E_INVALID_ARGUMENT,
        // Io, Torn, and kinds added later: all are about the file.
        _ => PERFCLOCK_E_IO,
    }
}

/// Creates `dir/jit-<pid>.dump` in the clock `PERFCLOCK_JITDUMP_CLOCK` names (`arch` when unset
/// or empty). See `perfclock.h`.
///
/// # Safety
/// `dir` must be NULL or a NUL-terminated string; `out` must be NULL or valid for writing one
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn perfclock_jitdump_open(
    dir: *const c_char,
    out: *mut *mut perfclock_jitdump,
) -> c_int {
    // A name that is no clock's is an error: a silent default would put every timestamp in
    // the wrong clock.
    let Ok(clock) = JitClock::from_env() else {
        return PERFCLOCK_E_INVALID_ARGUMENT;
    };
    // SAFETY: the caller's promises, passed on.
    unsafe { open(dir, clock, out) }
}

/// Creates `dir/jit-<pid>.dump` in `clock` (`PERFCLOCK_CLOCK_*`). See `perfclock.h`.
///
/// # Safety
/// As [`perfclock_jitdump_open`].
#[no_mangle]
pub unsafe extern "C" fn perfclock_jitdump_open_with_clock(
    dir: *const c_char,
    clock: c_int,
    out: *mut *mut perfclock_jitdump,
) -> c_int {
    let Some(clock) = jit_clock(clock) else {
        return PERFCLOCK_E_INVALID_ARGUMENT;
    };
    // SAFETY: the caller's promises, passed on.
    unsafe { open(dir, clock, out) }
}

/// # Safety
/// As [`perfclock_jitdump_open`].
unsafe fn open(dir: *const c_char, clock: JitClock, out: *mut *mut perfclock_jitdump) -> c_int {
    // AssertUnwindSafe: nothing the closure touches outlives a panic in a torn state (the
    // handle is written only on success).
    guard(
        PERFCLOCK_E_INTERNAL,
        AssertUnwindSafe(|| {
            if dir.is_null() || out.is_null() {
                return PERFCLOCK_E_NULL_POINTER;
            }
            // The writer opens the clock anyway; through `perfclock_init` the C reading calls
            // (`perfclock_now_ns`, ...) work from here on too, and a failure has its usual code.
            let init = perfclock_init();
            if init != PERFCLOCK_OK {
                return init;
            }
            // SAFETY: non-null, and the caller promises a NUL-terminated string.
            let dir = OsStr::from_bytes(unsafe { CStr::from_ptr(dir) }.to_bytes());
            match JitDump::create_with_clock(dir, clock) {
                Ok(dump) => {
                    // SAFETY: non-null, and the caller promises it is valid for a write.
                    unsafe { out.write(Box::into_raw(Box::new(dump))) };
                    PERFCLOCK_OK
                }
                Err(error) => code(&error),
            }
        }),
    )
}

/// Records a code load. See `perfclock.h`.
///
/// # Safety
/// `jd` must be NULL or a handle from `perfclock_jitdump_open` not yet closed; `name` NULL or a
/// NUL-terminated string; `code` NULL or valid for reading `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn perfclock_jitdump_code_load(
    jd: *mut perfclock_jitdump,
    name: *const c_char,
    addr: u64,
    code: *const c_void,
    size: u64,
) -> c_int {
    // AssertUnwindSafe: a panic leaves the writer usable (see `JitDump`'s lock), and the
    // caller's buffers are only read.
    guard(
        PERFCLOCK_E_INTERNAL,
        AssertUnwindSafe(|| {
            if jd.is_null() || name.is_null() || code.is_null() {
                return PERFCLOCK_E_NULL_POINTER;
            }
            // A jitdump record's size is 32 bits; checking first also keeps the slice below
            // within `isize::MAX`, whatever `size` the caller passes.
            let Ok(size) = u32::try_from(size) else {
                return PERFCLOCK_E_INVALID_ARGUMENT;
            };
            let size = size as usize;
            // SAFETY: the caller promises a live handle; it is only shared (`&`), which
            // `JitDump` allows from many threads.
            let dump = unsafe { &*jd };
            // SAFETY: non-null, and the caller promises a NUL-terminated string.
            let name = unsafe { CStr::from_ptr(name) }.to_bytes();
            // SAFETY: non-null, and the caller promises `size` readable bytes.
            let code = unsafe { std::slice::from_raw_parts(code.cast::<u8>(), size) };
            match dump.code_load(name, addr, code) {
                Ok(_) => PERFCLOCK_OK,
                Err(error) => self::code(&error),
            }
        }),
    )
}

/// Closes and frees the handle. See `perfclock.h`.
///
/// # Safety
/// `jd` must be NULL or a handle from `perfclock_jitdump_open`, closed at most once, with no
/// `perfclock_jitdump_code_load` on it running or following.
#[no_mangle]
pub unsafe extern "C" fn perfclock_jitdump_close(jd: *mut perfclock_jitdump) -> c_int {
    guard(
        PERFCLOCK_E_INTERNAL,
        AssertUnwindSafe(|| {
            if jd.is_null() {
                return PERFCLOCK_E_NULL_POINTER;
            }
            // SAFETY: the caller hands back the box `perfclock_jitdump_open` made, once, with
            // no other use outstanding.
            let dump = unsafe { Box::from_raw(jd) };
            match dump.close() {
                Ok(()) => PERFCLOCK_OK,
                Err(error) => code(&error),
            }
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn null_pointers_are_refused() {
        let mut out: *mut perfclock_jitdump = std::ptr::null_mut();
        let dir = CString::new("/tmp").unwrap();
        // SAFETY: NULL arguments are part of the contract; the others are valid.
        unsafe {
            assert_eq!(
                perfclock_jitdump_open(std::ptr::null(), &mut out),
                PERFCLOCK_E_NULL_POINTER
            );
            assert_eq!(
                perfclock_jitdump_open(dir.as_ptr(), std::ptr::null_mut()),
                PERFCLOCK_E_NULL_POINTER
            );
            assert_eq!(
                perfclock_jitdump_code_load(
                    std::ptr::null_mut(),
                    c"f".as_ptr(),
                    0,
                    [0xc3u8].as_ptr().cast(),
                    1
                ),
                PERFCLOCK_E_NULL_POINTER
            );
            assert_eq!(
                perfclock_jitdump_close(std::ptr::null_mut()),
                PERFCLOCK_E_NULL_POINTER
            );
        }
        assert!(out.is_null());
    }

    #[test]
    fn clock_constants_and_bad_clocks() {
        use crate::{PERFCLOCK_CLOCK_ARCH, PERFCLOCK_CLOCK_MONOTONIC, PERFCLOCK_CLOCK_PERF};
        assert_eq!(jit_clock(PERFCLOCK_CLOCK_ARCH), Some(JitClock::Arch));
        assert_eq!(jit_clock(PERFCLOCK_CLOCK_PERF), Some(JitClock::Perf));
        assert_eq!(
            jit_clock(PERFCLOCK_CLOCK_MONOTONIC),
            Some(JitClock::Monotonic)
        );
        assert_eq!(jit_clock(3), None);
        assert_eq!(jit_clock(-1), None);
        let mut out: *mut perfclock_jitdump = std::ptr::null_mut();
        // SAFETY: a valid string and out pointer; the clock is checked first.
        let rc = unsafe { perfclock_jitdump_open_with_clock(c"/tmp".as_ptr(), 7, &mut out) };
        assert_eq!(rc, PERFCLOCK_E_INVALID_ARGUMENT);
        assert!(out.is_null());
    }

    #[test]
    fn codes_of_argument_and_file_errors() {
        assert_eq!(code(&JitDumpError::EmptyCode), PERFCLOCK_E_INVALID_ARGUMENT);
        assert_eq!(
            code(&JitDumpError::NameContainsNul { position: 0 }),
            PERFCLOCK_E_INVALID_ARGUMENT
        );
        let io = JitDumpError::Io {
            op: "create",
            path: "/x".into(),
            source: std::io::Error::other("test"),
        };
        assert_eq!(code(&io), PERFCLOCK_E_IO);
        let child = JitDumpError::ForkChild(::perfclock_jitdump::ForkChild {
            opened_by: 1,
            pid: 2,
        });
        assert_eq!(code(&child), PERFCLOCK_E_FORK_CHILD);
    }

    #[test]
    fn a_file_as_directory_is_an_io_error() {
        if let Err(error) = perfclock::init() {
            let test = "a_file_as_directory_is_an_io_error";
            perfclock_testutil::skip(test, perfclock_testutil::Need::Perf, error);
            return;
        }
        let file = std::env::temp_dir().join(format!("perfclock-ffi-jit-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let dir = CString::new(file.as_os_str().as_bytes()).unwrap();
        let mut out: *mut perfclock_jitdump = std::ptr::null_mut();
        // SAFETY: valid string and out pointer.
        let rc = unsafe { perfclock_jitdump_open(dir.as_ptr(), &mut out) };
        std::fs::remove_file(&file).unwrap();
        assert_eq!(rc, PERFCLOCK_E_IO);
        assert!(out.is_null());
    }
}
