//! C ABI for perfclock: the functions declared in `include/perfclock.h`.
//!
//! # Design
//! The process-wide clock is the facade's: [`perfclock_init`] calls [`perfclock::init`], and
//! every other function reads through [`perfclock::global`], which never initialises, allocates
//! or makes a syscall; that is what makes them async-signal-safe.
//!
//! # Panics
//! No panic unwinds into C: each `extern "C"` function runs its body under
//! [`std::panic::catch_unwind`] and returns its documented "no clock" value (or
//! [`PERFCLOCK_E_INTERNAL`]) if the body panicked. A panic is a bug in perfclock.
//!
//! # Safety
//! Unsafe code is denied here and allowed only in the modules of entry points, each with its
//! own `# Safety` section: `clock_abi` (the clock's functions), `jitdump` and `markers` (the
//! writers'). `#[no_mangle]` counts as unsafe code: an exported symbol can clash with another
//! library's.
//!
//! # Error codes
//! The `PERFCLOCK_E_*` constants mirror the header's `#define`s; a test checks both agree.
#![deny(unsafe_code)]

use std::ffi::c_int;
use std::panic::{catch_unwind, UnwindSafe};

use perfclock::{Clock, Error};
use perfclock_os::ErrorKind;

mod clock_abi;
mod jitdump;
mod markers;

// The clock's entry points.
pub use clock_abi::{
    perfclock_cycles_to_ns, perfclock_error_bound_ns, perfclock_init, perfclock_mode,
    perfclock_now_ns, perfclock_now_ns_ordered, perfclock_ns_to_cycles, perfclock_read_counter,
    perfclock_strerror, perfclock_try_now_ns,
};
// The writers' entry points, also callable from Rust (the tests run them in child processes).
pub use jitdump::{
    perfclock_jitdump, perfclock_jitdump_close, perfclock_jitdump_code_load,
    perfclock_jitdump_open, perfclock_jitdump_open_with_clock,
};
pub use markers::{
    perfclock_marker, perfclock_markers, perfclock_markers_close, perfclock_markers_flush,
    perfclock_markers_open, perfclock_markers_open_with_clock,
};

/// Success.
pub const PERFCLOCK_OK: c_int = 0;
/// `perf_event_open(2)` refused (paranoid level, capabilities, seccomp).
pub const PERFCLOCK_E_PERMISSION_DENIED: c_int = -1;
/// No perf events in this kernel or sandbox.
pub const PERFCLOCK_E_NO_PERF_SUPPORT: c_int = -2;
/// Out of file descriptors.
pub const PERFCLOCK_E_FD_EXHAUSTED: c_int = -3;
/// Any other `perf_event_open(2)` or `mmap(2)` failure.
pub const PERFCLOCK_E_PERF_EVENT: c_int = -4;
/// The kernel withholds the time conversion and kernel mode was required.
pub const PERFCLOCK_E_KERNEL_WITHHOLDS_TIME: c_int = -5;
/// The kernel's perf page is unusable.
pub const PERFCLOCK_E_PAGE: c_int = -6;
/// No usable user-space counter: an unsupported platform, or (x86_64) a thread that may not
/// read the TSC (`prctl(PR_SET_TSC, PR_TSC_SIGSEGV)`).
pub const PERFCLOCK_E_UNSUPPORTED: c_int = -7;
/// Too many kernel-mode clocks open.
pub const PERFCLOCK_E_TOO_MANY_CLOCKS: c_int = -8;
/// The kernel withholds the conversion and calibration failed.
pub const PERFCLOCK_E_CALIBRATION: c_int = -9;
/// A reading call was made before `perfclock_init` succeeded.
pub const PERFCLOCK_E_NOT_INITIALIZED: c_int = -10;
/// A read failed after initialisation (transient).
pub const PERFCLOCK_E_READ: c_int = -11;
/// A required pointer argument was NULL.
pub const PERFCLOCK_E_NULL_POINTER: c_int = -12;
/// A panic was caught at the boundary (a bug in perfclock).
pub const PERFCLOCK_E_INTERNAL: c_int = -13;
/// An initialisation error without a specific code in this version of the ABI.
pub const PERFCLOCK_E_OTHER: c_int = -14;
/// A file could not be created, written or mapped (permissions, missing directory, full disk).
pub const PERFCLOCK_E_IO: c_int = -15;
/// An argument is out of its documented range.
pub const PERFCLOCK_E_INVALID_ARGUMENT: c_int = -16;
/// Something else is at a writer's file name (a link, a FIFO, another user's file), or another
/// live writer's file (the same pid number in another pid namespace).
pub const PERFCLOCK_E_NAME_TAKEN: c_int = -17;
/// A writer's handle was used in a fork child of the process that opened it.
pub const PERFCLOCK_E_FORK_CHILD: c_int = -18;
/// A marker from a signal handler that interrupted the marker writer on its thread.
pub const PERFCLOCK_E_BUSY: c_int = -19;

/// Clocks of `perfclock_jitdump_open_with_clock` and `perfclock_markers_open_with_clock`: the
/// raw counter with perf's ARCH_TIMESTAMP flag (jitdump only).
pub const PERFCLOCK_CLOCK_ARCH: c_int = 0;
/// perf-clock ns.
pub const PERFCLOCK_CLOCK_PERF: c_int = 1;
/// `CLOCK_MONOTONIC` ns.
pub const PERFCLOCK_CLOCK_MONOTONIC: c_int = 2;

/// `perfclock_mode()` values.
pub const PERFCLOCK_MODE_NONE: c_int = 0;
/// Kernel-published conversion.
pub const PERFCLOCK_MODE_KERNEL: c_int = 1;
/// Calibrated perf-domain clock.
pub const PERFCLOCK_MODE_CALIBRATED: c_int = 2;
/// Calibrated by a `perfclock serve`, read from its shared page.
pub const PERFCLOCK_MODE_SHARED: c_int = 3;
/// The kernel's paravirtual clock (a KVM guest's pvclock entry plus the boot's offset).
pub const PERFCLOCK_MODE_PARAVIRT: c_int = 4;

/// Every code `perfclock_strerror` knows, with its description (NUL-terminated, static).
const DESCRIPTIONS: [(c_int, &str); 20] = [
    (PERFCLOCK_OK, "success\0"),
    (
        PERFCLOCK_E_PERMISSION_DENIED,
        "perf_event_open refused: check /proc/sys/kernel/perf_event_paranoid, CAP_PERFMON or seccomp\0",
    ),
    (PERFCLOCK_E_NO_PERF_SUPPORT, "no perf events in this kernel or sandbox (ENOSYS)\0"),
    (PERFCLOCK_E_FD_EXHAUSTED, "out of file descriptors opening the perf event\0"),
    (PERFCLOCK_E_PERF_EVENT, "perf_event_open or mmap of the perf event page failed\0"),
    (
        PERFCLOCK_E_KERNEL_WITHHOLDS_TIME,
        "kernel withholds the perf time conversion (cap_user_time_zero=0) and kernel mode was required\0",
    ),
    (PERFCLOCK_E_PAGE, "the kernel's perf page is unreadable or publishes invalid parameters\0"),
    (
        PERFCLOCK_E_UNSUPPORTED,
        "no usable user-space counter: an unsupported platform, or on x86_64 this thread may not read the TSC (prctl PR_SET_TSC; set PR_TSC_ENABLE)\0",
    ),
    (PERFCLOCK_E_TOO_MANY_CLOCKS, "too many kernel-mode clocks are open in this process\0"),
    (
        PERFCLOCK_E_CALIBRATION,
        "kernel withholds the perf time conversion and calibrating a perf-domain clock failed\0",
    ),
    (PERFCLOCK_E_NOT_INITIALIZED, "perfclock_init has not succeeded\0"),
    (PERFCLOCK_E_READ, "reading the clock failed (seqlock contended or parameters withdrawn)\0"),
    (PERFCLOCK_E_NULL_POINTER, "a required pointer argument was NULL\0"),
    (PERFCLOCK_E_INTERNAL, "internal error in perfclock (panic caught at the C boundary)\0"),
    (PERFCLOCK_E_OTHER, "perfclock initialisation failed (no specific code)\0"),
    (
        PERFCLOCK_E_IO,
        "a file could not be created, written or mapped (check the directory's permissions and free space)\0",
    ),
    (PERFCLOCK_E_INVALID_ARGUMENT, "an argument is out of its documented range\0"),
    (
        PERFCLOCK_E_NAME_TAKEN,
        "a link, a FIFO or another user's file is at the writer's file name; it was left alone (remove it if stale, or use a directory only you can write)\0",
    ),
    (
        PERFCLOCK_E_FORK_CHILD,
        "this handle belongs to the parent process (this is a fork child): nothing was written; open a new one in the child\0",
    ),
    (
        PERFCLOCK_E_BUSY,
        "marker refused: a signal handler interrupted the marker writer on this thread (counted as lost)\0",
    ),
];

const UNKNOWN_CODE: &str = "unknown perfclock error code\0";

/// The initialised clock, if any. Lock-free, no syscall: async-signal-safe.
fn clock() -> Option<&'static Clock> {
    perfclock::global()
}

/// Runs `body`, turning a panic into `fallback`. Always inlined: the exported reads are then
/// the read itself, not a call to an outlined copy of this wrapper around it.
#[inline(always)]
fn guard<T, F: FnOnce() -> T + UnwindSafe>(fallback: T, body: F) -> T {
    catch_unwind(body).unwrap_or(fallback)
}

/// The one map from an initialisation error to its stable C code. A failed system call maps by
/// its kind, whether the clock's own or the one that made calibration fail: that is what to fix.
pub fn error_code(error: &Error) -> c_int {
    if let Some(sys) = error.sys_error() {
        return match sys.kind() {
            ErrorKind::PermissionDenied => PERFCLOCK_E_PERMISSION_DENIED,
            ErrorKind::NoPerfSupport => PERFCLOCK_E_NO_PERF_SUPPORT,
            ErrorKind::FdExhausted => PERFCLOCK_E_FD_EXHAUSTED,
            _ => PERFCLOCK_E_PERF_EVENT,
        };
    }
    match error {
        Error::PerfEvent(_) => PERFCLOCK_E_PERF_EVENT,
        Error::KernelWithholdsTime(_) => PERFCLOCK_E_KERNEL_WITHHOLDS_TIME,
        Error::Page(_) => PERFCLOCK_E_PAGE,
        Error::Unsupported => PERFCLOCK_E_UNSUPPORTED,
        Error::TooManyClocks => PERFCLOCK_E_TOO_MANY_CLOCKS,
        Error::Calibration { .. } => PERFCLOCK_E_CALIBRATION,
        _ => PERFCLOCK_E_OTHER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_are_nul_terminated_and_distinct() {
        for (i, (code, text)) in DESCRIPTIONS.iter().enumerate() {
            assert!(
                text.ends_with('\0') && !text[..text.len() - 1].contains('\0'),
                "{code}"
            );
            for (other, other_text) in &DESCRIPTIONS[i + 1..] {
                assert_ne!(code, other);
                assert_ne!(text, other_text);
            }
        }
        assert!(UNKNOWN_CODE.ends_with('\0'));
    }

    /// Every variant of [`Error`], each failed system call of every kind, directly and as the
    /// cause of a failed calibration: the numbers the header promises.
    #[test]
    fn every_error_has_its_code() {
        use perfclock_calib::CalibError;
        use perfclock_os::{Op, SysError};

        let withheld = || Box::new(perfclock::Withheld::observe(0));
        let open = |errno| SysError::new(Op::PerfEventOpen, errno);
        let calibration = |sys| Error::Calibration {
            withheld: withheld(),
            reason: CalibError::Open(sys),
        };
        let cases = [
            (open(libc::EACCES), PERFCLOCK_E_PERMISSION_DENIED),
            (open(libc::EPERM), PERFCLOCK_E_PERMISSION_DENIED),
            (open(libc::ENOSYS), PERFCLOCK_E_NO_PERF_SUPPORT),
            (open(libc::EMFILE), PERFCLOCK_E_FD_EXHAUSTED),
            (open(libc::ENFILE), PERFCLOCK_E_FD_EXHAUSTED),
            (
                SysError::new(Op::Mmap, libc::EMFILE),
                PERFCLOCK_E_FD_EXHAUSTED,
            ),
            (open(libc::EINVAL), PERFCLOCK_E_PERF_EVENT),
            (open(libc::EBUSY), PERFCLOCK_E_PERF_EVENT),
            (
                SysError::new(Op::Mmap, libc::ENOMEM),
                PERFCLOCK_E_PERF_EVENT,
            ),
            (
                SysError::new(Op::Mmap, libc::EINVAL),
                PERFCLOCK_E_PERF_EVENT,
            ),
        ];
        for (sys, code) in cases {
            assert_eq!(error_code(&Error::PerfEvent(sys)), code, "{sys:?}");
            assert_eq!(error_code(&calibration(sys)), code, "calibration: {sys:?}");
        }
        let others = [
            (
                Error::KernelWithholdsTime(*withheld()),
                PERFCLOCK_E_KERNEL_WITHHOLDS_TIME,
            ),
            (
                Error::Page(perfclock::ReadError::Contended),
                PERFCLOCK_E_PAGE,
            ),
            (Error::Unsupported, PERFCLOCK_E_UNSUPPORTED),
            (Error::TooManyClocks, PERFCLOCK_E_TOO_MANY_CLOCKS),
            (
                Error::Calibration {
                    withheld: withheld(),
                    reason: CalibError::Timeout,
                },
                PERFCLOCK_E_CALIBRATION,
            ),
            (
                Error::Calibration {
                    withheld: withheld(),
                    // A step's own reason (here: a slope no conversion can express).
                    reason: perfclock_calib::published::quantise_slope(0.0)
                        .expect_err("a zero slope cannot be published"),
                },
                PERFCLOCK_E_CALIBRATION,
            ),
        ];
        for (error, code) in &others {
            assert_eq!(error_code(error), *code, "{error:?}");
        }
        for code in cases
            .iter()
            .map(|(_, c)| c)
            .chain(others.iter().map(|(_, c)| c))
        {
            assert!(DESCRIPTIONS.iter().any(|(c, _)| c == code), "{code}");
        }
    }

    /// The reading calls after `perfclock_init` (other tests in this process open the clock
    /// too, so the uninitialised values are the C test's to check, in a process of its own).
    #[test]
    fn reading_calls_after_init() {
        assert_ne!(perfclock_read_counter(), 0, "the counter needs no clock");
        let code = perfclock_init();
        if code != PERFCLOCK_OK {
            let why = format!("perfclock_init returned {code}");
            perfclock_testutil::skip(
                "reading calls after init",
                perfclock_testutil::Need::Perf,
                why,
            );
            return;
        }
        let before = perfclock_now_ns_ordered();
        let stamp = perfclock_read_counter();
        let after = perfclock_now_ns_ordered();
        let unordered = perfclock_now_ns();
        assert!(before != 0 && before <= after, "{before} then {after}");
        assert!(unordered != 0);
        // The stamp's conversion lies between the ordered readings around it, give or take an
        // early counter read and a refit's move within the bound.
        let slack = 1_000 + perfclock_error_bound_ns();
        let converted = perfclock_cycles_to_ns(stamp);
        assert!(
            before.saturating_sub(slack) <= converted && converted <= after + slack,
            "{before} <= {converted} <= {after} (slack {slack} ns)"
        );
    }

    #[test]
    fn header_defines_match_rust_constants() {
        let header = include_str!("../include/perfclock.h");
        let expected = [
            ("PERFCLOCK_OK", PERFCLOCK_OK),
            (
                "PERFCLOCK_E_PERMISSION_DENIED",
                PERFCLOCK_E_PERMISSION_DENIED,
            ),
            ("PERFCLOCK_E_NO_PERF_SUPPORT", PERFCLOCK_E_NO_PERF_SUPPORT),
            ("PERFCLOCK_E_FD_EXHAUSTED", PERFCLOCK_E_FD_EXHAUSTED),
            ("PERFCLOCK_E_PERF_EVENT", PERFCLOCK_E_PERF_EVENT),
            (
                "PERFCLOCK_E_KERNEL_WITHHOLDS_TIME",
                PERFCLOCK_E_KERNEL_WITHHOLDS_TIME,
            ),
            ("PERFCLOCK_E_PAGE", PERFCLOCK_E_PAGE),
            ("PERFCLOCK_E_UNSUPPORTED", PERFCLOCK_E_UNSUPPORTED),
            ("PERFCLOCK_E_TOO_MANY_CLOCKS", PERFCLOCK_E_TOO_MANY_CLOCKS),
            ("PERFCLOCK_E_CALIBRATION", PERFCLOCK_E_CALIBRATION),
            ("PERFCLOCK_E_NOT_INITIALIZED", PERFCLOCK_E_NOT_INITIALIZED),
            ("PERFCLOCK_E_READ", PERFCLOCK_E_READ),
            ("PERFCLOCK_E_NULL_POINTER", PERFCLOCK_E_NULL_POINTER),
            ("PERFCLOCK_E_INTERNAL", PERFCLOCK_E_INTERNAL),
            ("PERFCLOCK_E_OTHER", PERFCLOCK_E_OTHER),
            ("PERFCLOCK_E_IO", PERFCLOCK_E_IO),
            ("PERFCLOCK_E_INVALID_ARGUMENT", PERFCLOCK_E_INVALID_ARGUMENT),
            ("PERFCLOCK_E_NAME_TAKEN", PERFCLOCK_E_NAME_TAKEN),
            ("PERFCLOCK_E_FORK_CHILD", PERFCLOCK_E_FORK_CHILD),
            ("PERFCLOCK_E_BUSY", PERFCLOCK_E_BUSY),
            ("PERFCLOCK_CLOCK_ARCH", PERFCLOCK_CLOCK_ARCH),
            ("PERFCLOCK_CLOCK_PERF", PERFCLOCK_CLOCK_PERF),
            ("PERFCLOCK_CLOCK_MONOTONIC", PERFCLOCK_CLOCK_MONOTONIC),
            ("PERFCLOCK_MODE_NONE", PERFCLOCK_MODE_NONE),
            ("PERFCLOCK_MODE_KERNEL", PERFCLOCK_MODE_KERNEL),
            ("PERFCLOCK_MODE_CALIBRATED", PERFCLOCK_MODE_CALIBRATED),
            ("PERFCLOCK_MODE_SHARED", PERFCLOCK_MODE_SHARED),
            ("PERFCLOCK_MODE_PARAVIRT", PERFCLOCK_MODE_PARAVIRT),
        ];
        let mut defines = 0;
        for line in header.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some("#define") {
                continue;
            }
            let (Some(name), Some(value)) = (words.next(), words.next()) else {
                continue;
            };
            if name == "PERFCLOCK_H" {
                continue;
            }
            defines += 1;
            let value: c_int = value
                .trim_matches(|c| c == '(' || c == ')')
                .parse()
                .unwrap();
            let rust = expected.iter().find(|(n, _)| *n == name);
            assert_eq!(rust.map(|(_, v)| *v), Some(value), "{name}");
        }
        assert_eq!(defines, expected.len());
        // Every error code in the header has a description.
        for (name, value) in &expected[..20] {
            assert!(DESCRIPTIONS.iter().any(|(c, _)| c == value), "{name}");
        }
    }
}
