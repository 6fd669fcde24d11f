//! Every function perfclock documents async-signal-safe (the C header's and the Rust API's),
//! called from a signal handler with no system call and no allocation: the proof that the
//! signal-safety test (`crates/perfclock-cli/tests/signal_safety.rs`) runs in every mode the
//! machine has, and the real-kernel test bed (`crates/perfclock-testbed`) runs in kernel mode.
//!
//! One list holds every such function ([`listed`]); the signal-safety test checks it against
//! what the sources document.
//!
//! The proof runs in a child process (the calling binary again, [`ROLE_ENV`] naming its
//! [`Role`]; the binary calls [`child_if_asked`] first thing in `main` and installs
//! [`CountingAllocator`] as its global allocator). The child opens the clock from ordinary code,
//! says `READY` and waits for the parent's `GO`. Then its main thread installs a seccomp filter
//! on itself that traps every system call but `rt_sigreturn` (a trapped call raises SIGSYS,
//! whose handler records it, and fails with ENOSYS), and a reporting thread, which has no
//! filter, sends SIGALRM to the filtered thread alone. The SIGALRM handler calls every function
//! of the list once, counting per function the allocations it made, the system calls it tried,
//! and whether its result made sense in the mode; then a control, one system call and one
//! allocation, which the counts must see. The reporting thread prints the counts and ends the
//! process; the parent ([`start`], [`Running::judge`]) fails on any allocation, system call or
//! wrong result, and on a control that went uncounted. The other threads (the reporting one, the calibrator's) have no
//! filter (seccomp filters are per thread); the signal is sent to the filtered thread alone, and
//! the report says whether the handler ran there.
//!
//! x86_64 and aarch64 Linux (the filter's architecture check and the SIGSYS `siginfo_t` layout).
#![deny(unsafe_code)]

mod allocator;
mod child;
mod list;
mod parent;

pub use allocator::CountingAllocator;
pub use child::child_if_asked;
pub use parent::{start, Judgement, Running, Started};

use std::ffi::c_int;
use std::fmt;

use perfclock_ffi as c;

/// The environment variable that makes a binary the proof's child, naming its [`Role`].
pub const ROLE_ENV: &str = "PERFCLOCK_SIGSAFE_ROLE";
/// The environment variable naming the directory of the child's marker file.
pub const DIR_ENV: &str = "PERFCLOCK_SIGSAFE_DIR";

/// The mode a child's clock must open in, and what it expects of its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Kernel mode: the kernel publishes `cap_user_time_zero`.
    Kernel,
    /// Paravirt mode: a KVM guest's pvclock.
    Paravirt,
    /// Calibrated mode.
    Calibrated,
    /// Shared mode with a live server.
    Shared,
    /// Shared mode whose server was stopped: the bound is unknown.
    SharedStopped,
    /// Shared mode whose server is dead: the bound is unknown.
    SharedDead,
}

impl Role {
    const ALL: [Role; 6] = [
        Role::Kernel,
        Role::Paravirt,
        Role::Calibrated,
        Role::Shared,
        Role::SharedStopped,
        Role::SharedDead,
    ];

    /// The role's name in [`ROLE_ENV`] and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Role::Kernel => "kernel",
            Role::Paravirt => "paravirt",
            Role::Calibrated => "calibrated",
            Role::Shared => "shared",
            Role::SharedStopped => "shared-stopped",
            Role::SharedDead => "shared-dead",
        }
    }

    fn from_name(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.name() == name)
    }

    /// The C ABI's number of the mode.
    fn mode(self) -> c_int {
        match self {
            Role::Kernel => c::PERFCLOCK_MODE_KERNEL,
            Role::Paravirt => c::PERFCLOCK_MODE_PARAVIRT,
            Role::Calibrated => c::PERFCLOCK_MODE_CALIBRATED,
            Role::Shared | Role::SharedStopped | Role::SharedDead => c::PERFCLOCK_MODE_SHARED,
        }
    }

    /// The bound is `u64::MAX` (a stale shared page).
    fn bound_unknown(self) -> bool {
        matches!(self, Role::SharedStopped | Role::SharedDead)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The names of the functions the handler calls, as the docs name them (`perfclock_now_ns`,
/// `perfclock::try_now_ns`, `Clock::now_ns`, ...).
pub fn listed() -> impl Iterator<Item = &'static str> {
    list::SIGNAL_SAFE.iter().map(|(name, _)| *name)
}

/// Whether this target can run the proof: the filter checks the syscall ABI and the SIGSYS
/// handler reads `siginfo_t` as the 64-bit Linux architectures below lay it out.
///
/// # Errors
/// Why not, on any other target.
pub fn supported() -> Result<(), &'static str> {
    if cfg!(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )) {
        Ok(())
    } else {
        Err("the seccomp filter and the SIGSYS siginfo layout are written for x86_64 and aarch64 Linux")
    }
}
