//! C ABI of the marker writer (`perfclock_marker*` in `perfclock.h`) and of the clock snapshot
//! (`perfclock_snapshot`).
//!
//! # Safety
//! Every function here is `#[no_mangle] extern "C"` under a `perfclock_marker`/`perfclock_snapshot`
//! name of the header. The unsafe code dereferences the caller's pointers after checking them
//! for NULL: a directory and a name as NUL-terminated strings, an out-pointer written once, and a
//! handle that is a live box from `perfclock_markers_open` (shared by `&`, which [`Markers`]
//! allows from any thread; taken back only by `perfclock_markers_close`). The header states these
//! as the callers' obligations.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;

use ::perfclock_markers::{ClockName, MarkerClock, MarkerError, Markers};
use perfclock::{ClockSnapshot, SnapshotError};

use crate::{
    clock, guard, PERFCLOCK_CLOCK_MONOTONIC, PERFCLOCK_CLOCK_PERF, PERFCLOCK_E_BUSY,
    PERFCLOCK_E_FORK_CHILD, PERFCLOCK_E_INTERNAL, PERFCLOCK_E_INVALID_ARGUMENT, PERFCLOCK_E_IO,
    PERFCLOCK_E_NAME_TAKEN, PERFCLOCK_E_NOT_INITIALIZED, PERFCLOCK_E_NULL_POINTER,
    PERFCLOCK_E_READ, PERFCLOCK_E_UNSUPPORTED, PERFCLOCK_OK,
};

/// The opaque `perfclock_markers` of the header: a boxed writer.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct perfclock_markers {
    markers: Markers,
}

fn marker_error_code(error: &MarkerError) -> c_int {
    match error {
        MarkerError::EndBeforeStart { .. } | MarkerError::EmptyName => PERFCLOCK_E_INVALID_ARGUMENT,
        MarkerError::Clock(_) => PERFCLOCK_E_NOT_INITIALIZED,
        MarkerError::NameTaken(_) | MarkerError::NameLive(_) => PERFCLOCK_E_NAME_TAKEN,
        MarkerError::ForkChild(_) => PERFCLOCK_E_FORK_CHILD,
        MarkerError::Busy => PERFCLOCK_E_BUSY,
        MarkerError::NoPairing => PERFCLOCK_E_READ,
        MarkerError::ClockMismatch(_) => PERFCLOCK_E_INVALID_ARGUMENT,
        _ => PERFCLOCK_E_IO,
    }
}

/// Opens the marker file `dir/marker-<pid>.txt` in the clock `PERFCLOCK_MARKERS_CLOCK` names
/// (`perf` when unset or empty). See `perfclock.h`.
///
/// # Safety
/// `dir` must be NULL or a NUL-terminated string; `out` NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn perfclock_markers_open(
    dir: *const c_char,
    out: *mut *mut perfclock_markers,
) -> c_int {
    // A name that is no clock's is an error: a silent default would put every timestamp in
    // the wrong clock.
    let Ok(clock) = MarkerClock::from_env() else {
        return PERFCLOCK_E_INVALID_ARGUMENT;
    };
    // SAFETY: the caller's promises, passed on.
    unsafe { open(dir, clock, out) }
}

/// Opens the marker file in `clock` (`PERFCLOCK_CLOCK_PERF` or `_MONOTONIC`). See `perfclock.h`.
///
/// # Safety
/// As [`perfclock_markers_open`].
#[no_mangle]
pub unsafe extern "C" fn perfclock_markers_open_with_clock(
    dir: *const c_char,
    clock: c_int,
    out: *mut *mut perfclock_markers,
) -> c_int {
    let clock = match clock {
        PERFCLOCK_CLOCK_PERF => MarkerClock::Perf,
        PERFCLOCK_CLOCK_MONOTONIC => MarkerClock::Monotonic,
        // PERFCLOCK_CLOCK_ARCH too: samply reads marker times as ns, never as counter values.
        _ => return PERFCLOCK_E_INVALID_ARGUMENT,
    };
    // SAFETY: the caller's promises, passed on.
    unsafe { open(dir, clock, out) }
}

/// # Safety
/// As [`perfclock_markers_open`].
unsafe fn open(dir: *const c_char, clock: MarkerClock, out: *mut *mut perfclock_markers) -> c_int {
    guard(PERFCLOCK_E_INTERNAL, || {
        if dir.is_null() || out.is_null() {
            return PERFCLOCK_E_NULL_POINTER;
        }
        // SAFETY: `dir` is non-null and the caller promises a NUL-terminated string.
        let dir = OsStr::from_bytes(unsafe { CStr::from_ptr(dir) }.to_bytes());
        match Markers::open_with_clock(dir, clock) {
            Ok(markers) => {
                let handle = Box::into_raw(Box::new(perfclock_markers { markers }));
                // SAFETY: `out` is non-null and the caller promises it is valid for a write.
                unsafe { out.write(handle) };
                PERFCLOCK_OK
            }
            Err(e) => marker_error_code(&e),
        }
    })
}

/// Buffers one marker. See `perfclock.h`: may run in a signal handler, so nothing on the way
/// allocates (the name is cleaned in place, the panic guard allocates only on a panic).
///
/// # Safety
/// `m` must be NULL or a handle from `perfclock_markers_open` not yet closed; `name` NULL or a
/// NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn perfclock_marker(
    m: *mut perfclock_markers,
    name: *const c_char,
    start_ns: u64,
    end_ns: u64,
) -> c_int {
    guard(PERFCLOCK_E_INTERNAL, || {
        if m.is_null() || name.is_null() {
            return PERFCLOCK_E_NULL_POINTER;
        }
        // SAFETY: `m` is a live handle (the caller's promise); only shared access is taken, and
        // `Markers` is `Sync`, so concurrent calls on one handle are sound.
        let markers = unsafe { &(*m).markers };
        // SAFETY: `name` is non-null and NUL-terminated (the caller's promise).
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        // Bytes, cleaned without allocating: this may run in a signal handler.
        match markers.span_bytes(name, start_ns, end_ns) {
            Ok(()) => PERFCLOCK_OK,
            Err(e) => marker_error_code(&e),
        }
    })
}

/// Writes out every thread's buffered markers. See `perfclock.h`.
///
/// # Safety
/// As [`perfclock_marker`].
#[no_mangle]
pub unsafe extern "C" fn perfclock_markers_flush(m: *mut perfclock_markers) -> c_int {
    guard(PERFCLOCK_E_INTERNAL, || {
        if m.is_null() {
            return PERFCLOCK_E_NULL_POINTER;
        }
        // SAFETY: `m` is a live handle (the caller's promise); shared access only.
        let markers = unsafe { &(*m).markers };
        match markers.flush() {
            Ok(()) => PERFCLOCK_OK,
            Err(e) => marker_error_code(&e),
        }
    })
}

/// Flushes and frees the handle. See `perfclock.h`.
///
/// # Safety
/// `m` must be NULL or a handle from `perfclock_markers_open` not yet closed, with no other call
/// on it running or following.
#[no_mangle]
pub unsafe extern "C" fn perfclock_markers_close(m: *mut perfclock_markers) -> c_int {
    if m.is_null() {
        return PERFCLOCK_E_NULL_POINTER;
    }
    // SAFETY: `m` came from `Box::into_raw` in `perfclock_markers_open` and the caller promises
    // it is not used again; taken outside `guard` so a panic cannot leave it half-freed.
    let handle = unsafe { Box::from_raw(m) };
    guard(PERFCLOCK_E_INTERNAL, move || match handle.markers.close() {
        Ok(()) => PERFCLOCK_OK,
        Err(e) => marker_error_code(&e),
    })
}

/// The C layout of [`ClockSnapshot`]: `perfclock_clock_snapshot` in the header.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct perfclock_clock_snapshot {
    /// The perf clock, ns.
    pub perf_ns: u64,
    /// `CLOCK_MONOTONIC` at `perf_ns`.
    pub monotonic_ns: u64,
    /// Bound on the error of `monotonic_ns`.
    pub monotonic_uncertainty_ns: u64,
    /// `CLOCK_BOOTTIME` at `perf_ns`.
    pub boottime_ns: u64,
    /// Bound on the error of `boottime_ns`.
    pub boottime_uncertainty_ns: u64,
    /// `CLOCK_REALTIME` at `perf_ns`, ns since the Unix epoch.
    pub realtime_ns: u64,
    /// Bound on the error of `realtime_ns`.
    pub realtime_uncertainty_ns: u64,
    /// The perf clock's own error bound, included in each uncertainty.
    pub error_bound_ns: u64,
}

impl From<&ClockSnapshot> for perfclock_clock_snapshot {
    fn from(s: &ClockSnapshot) -> Self {
        perfclock_clock_snapshot {
            perf_ns: s.perf_ns,
            monotonic_ns: s.monotonic.ns,
            monotonic_uncertainty_ns: s.monotonic.uncertainty_ns,
            boottime_ns: s.boottime.ns,
            boottime_uncertainty_ns: s.boottime.uncertainty_ns,
            realtime_ns: s.realtime.ns,
            realtime_uncertainty_ns: s.realtime.uncertainty_ns,
            error_bound_ns: s.error_bound_ns,
        }
    }
}

/// Pairs the perf clock with the system clocks. See `perfclock.h`.
///
/// # Safety
/// `out` must be NULL or valid for writing one `perfclock_clock_snapshot`.
#[no_mangle]
pub(crate) unsafe extern "C" fn perfclock_snapshot(out: *mut perfclock_clock_snapshot) -> c_int {
    guard(PERFCLOCK_E_INTERNAL, || {
        if out.is_null() {
            return PERFCLOCK_E_NULL_POINTER;
        }
        let Some(clock) = clock() else {
            return PERFCLOCK_E_NOT_INITIALIZED;
        };
        match ClockSnapshot::take(clock) {
            Ok(snapshot) => {
                // SAFETY: `out` is non-null and the caller promises it is valid for a write.
                unsafe { out.write(perfclock_clock_snapshot::from(&snapshot)) };
                PERFCLOCK_OK
            }
            Err(SnapshotError::NoCounter) => PERFCLOCK_E_UNSUPPORTED,
            Err(_) => PERFCLOCK_E_READ,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::ptr;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("pcm-ffi-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn markers_round_trip_with_hostile_names() {
        let dir = temp_dir("names");
        let c_dir = CString::new(dir.as_os_str().as_bytes()).unwrap();
        let mut m = ptr::null_mut();
        // SAFETY: valid C string and out-pointer.
        assert_eq!(unsafe { perfclock_markers_open(c_dir.as_ptr(), &mut m) }, 0);
        let names: [&[u8]; 4] = [b"plain\0", b"two\nlines\r\0", b"bad \xff\xfe utf8\0", b"\0"];
        let mut codes = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let t = 1_000 * (i as u64 + 1);
            // SAFETY: live handle, NUL-terminated names.
            codes.push(unsafe { perfclock_marker(m, name.as_ptr().cast(), t, t + 10) });
        }
        assert_eq!(codes, [0, 0, 0, PERFCLOCK_E_INVALID_ARGUMENT]);
        // SAFETY: live handle and name.
        let backwards = unsafe { perfclock_marker(m, c"x".as_ptr(), 10, 9) };
        assert_eq!(backwards, PERFCLOCK_E_INVALID_ARGUMENT);
        // SAFETY: null arguments are checked.
        unsafe {
            assert_eq!(
                perfclock_marker(m, ptr::null(), 1, 1),
                PERFCLOCK_E_NULL_POINTER
            );
            assert_eq!(perfclock_marker(ptr::null_mut(), c"x".as_ptr(), 1, 1), -12);
            assert_eq!(
                perfclock_markers_flush(ptr::null_mut()),
                PERFCLOCK_E_NULL_POINTER
            );
            assert_eq!(
                perfclock_markers_close(ptr::null_mut()),
                PERFCLOCK_E_NULL_POINTER
            );
            assert_eq!(perfclock_markers_flush(m), PERFCLOCK_OK);
            assert_eq!(perfclock_markers_close(m), PERFCLOCK_OK);
        }
        let text = std::fs::read_to_string(dir.join(format!("marker-{}.txt", std::process::id())))
            .expect("the file is UTF-8");
        assert_eq!(
            text,
            "1000 1010 plain\n2000 2010 two\u{fffd}lines\u{fffd}\n3000 3010 bad \u{fffd}\u{fffd} utf8\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn arch_and_unknown_marker_clocks_are_refused() {
        let mut m = ptr::null_mut();
        for clock in [crate::PERFCLOCK_CLOCK_ARCH, 3, -1] {
            // SAFETY: a valid C string and out-pointer; the clock is checked first.
            let rc = unsafe { perfclock_markers_open_with_clock(c"/tmp".as_ptr(), clock, &mut m) };
            assert_eq!(rc, PERFCLOCK_E_INVALID_ARGUMENT, "clock {clock}");
            assert!(m.is_null());
        }
    }

    #[test]
    fn open_reports_io_and_null_errors() {
        let mut m = ptr::null_mut();
        // SAFETY: valid C string and out-pointer; null arguments are checked.
        unsafe {
            assert_eq!(
                perfclock_markers_open(c"/nonexistent/perfclock-markers".as_ptr(), &mut m),
                PERFCLOCK_E_IO
            );
            assert!(m.is_null());
            assert_eq!(
                perfclock_markers_open(ptr::null(), &mut m),
                PERFCLOCK_E_NULL_POINTER
            );
            assert_eq!(
                perfclock_markers_open(c"/tmp".as_ptr(), ptr::null_mut()),
                -12
            );
        }
    }

    #[test]
    fn snapshot_needs_init_and_fills_every_field() {
        // SAFETY: null is checked.
        let null_out = unsafe { perfclock_snapshot(ptr::null_mut()) };
        assert_eq!(null_out, PERFCLOCK_E_NULL_POINTER);
        let code = crate::perfclock_init();
        if code != PERFCLOCK_OK {
            let why = format!("perfclock_init returned {code}");
            perfclock_testutil::skip("perfclock_snapshot", perfclock_testutil::Need::Perf, why);
            return;
        }
        let mut s = perfclock_clock_snapshot::default();
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { perfclock_snapshot(&mut s) }, PERFCLOCK_OK);
        // BOOTTIME never runs behind MONOTONIC, but each is paired with the perf clock in its own
        // bracket, so the two estimates may cross by up to their uncertainties.
        let boottime_at_least = s
            .monotonic_ns
            .saturating_sub(s.monotonic_uncertainty_ns + s.boottime_uncertainty_ns);
        assert!(
            s.perf_ns > 0 && s.monotonic_ns > 0 && s.boottime_ns >= boottime_at_least,
            "{s:?}"
        );
        // After 2020 (a sanity bound on the wall clock, not a timing assertion).
        assert!(s.realtime_ns > 1_577_836_800_000_000_000, "{s:?}");
        for u in [
            s.monotonic_uncertainty_ns,
            s.boottime_uncertainty_ns,
            s.realtime_uncertainty_ns,
        ] {
            assert!(u >= s.error_bound_ns, "{s:?}");
        }
    }
}
