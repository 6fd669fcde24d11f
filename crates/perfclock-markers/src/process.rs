//! The process-wide hooks of the writers: the pid cached for the fork check
//! (`perfclock_os::process::current_pid`, forgotten in a fork child), and a flush when
//! the process exits.

use std::sync::Once;

pub(crate) use perfclock_os::process::current_pid;

static HOOKS: Once = Once::new();

/// Registers, on the first call in the process, `at_exit` to run at `exit(3)`.
pub(crate) fn register_hooks(at_exit: extern "C" fn()) {
    HOOKS.call_once(|| {
        // A failed registration only loses the exit-time flush, which close and drop still do.
        let _ = perfclock_os::process::at_exit(at_exit);
    });
}
