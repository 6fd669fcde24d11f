//! Whether the test runs as root: the one check behind every case that needs root (perf `-p`
//! and `-a`, attaching to another user's JVM, chown, setresuid), so that they all ask the same
//! question (the effective uid, which is what the kernel checks).
#![allow(unsafe_code)]

/// Whether this process's effective uid is 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
