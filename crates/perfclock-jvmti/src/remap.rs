//! A second executable mapping of the jitdump (and marker file) after an attach.
//!
//! perf and samply find a jitdump or marker file through the recording's MMAP2 record of it,
//! which the kernel writes only for a thread perf traces. `perf record -p PID` traces the
//! threads that existed when it started and not the ones created later, and the JVM creates its
//! Attach Listener thread on the first attach: the mapping the writer makes in `Agent_OnAttach`
//! (on that thread) is then invisible to a recording started before the attach. The agent
//! therefore maps the first page of each file once more from the first event callback that runs
//! on another, older JVM thread (the Service thread posting compiled methods, the VM thread
//! running a GC), which perf does trace. `perf inject --jit` reads the dump once per mapping it
//! sees, so a dump seen twice gives each load twice (same code and name): harmless.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Maps the first page of `path` executable and private, for the rest of the process's life.
///
/// # Errors
/// The file cannot be opened or mapped.
pub fn map_again(path: &Path) -> std::io::Result<()> {
    let file = File::open(path)?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    // SAFETY: a fresh private read-only mapping chosen by the kernel (null hint) of an open
    // descriptor; nothing reads through it (it exists for perf's MMAP2 record), and it is never
    // unmapped, so no reference to it can dangle.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's id.
pub fn thread_id() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}
