//! The small operating-system calls the perfclock crates share, written once: the page size, the
//! thread id, the boot id, `clock_gettime`, the environment as a privileged process may read it, a lock that survives a panicking holder, and the executable
//! marker mapping through which `perf record` learns of a jitdump or marker file.
//!
//! Written by hand over `libc` (which this crate already binds for `perf_event_open` and its
//! mappings) rather than taken from rustix: rustix's default backend reads the page size from the
//! aux vector with `prctl(PR_GET_AUXV)` or `/proc/self/auxv` and panics when both are refused (a
//! seccomp policy, a PID 1 without `/proc`), and its `clock_gettime(ClockId)` panics when the
//! call fails; here `sysconf` makes no system call and a refused `clock_gettime` is an error.
//! `perfclock-core` keeps its own counter and page code: it depends on nothing.
//!
//! # Safety
//! Unsafe code here is confined to single libc calls: `sysconf`, `gettid`, `getauxval`,
//! `flock` on a descriptor the caller's `File` owns, and `clock_gettime` into a local
//! `timespec` (no preconditions beyond a valid out-pointer).
//! [`ExecMarkerMapping`] is a [`Mapping`] that never hands out a pointer into it (nothing in
//! this process reads it, so neither the file's size nor its concurrent appends can be observed
//! by Rust code).
#![allow(unsafe_code)]

pub mod affinity;
pub mod children;
pub mod process;
pub mod thread;

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

use crate::mapping::{Access, Mapping, Sharing};

/// The system page size (`sysconf(_SC_PAGESIZE)`; 4096 should the call fail, which it does not
/// on Linux).
pub fn page_size() -> usize {
    // SAFETY: sysconf takes no pointers and has no preconditions; glibc answers from the aux
    // vector it saved at start, without a system call.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| *s > 0)
        .unwrap_or(4096)
}

/// The calling thread's kernel id (`gettid`), as perf records it in `tid` fields.
pub fn gettid() -> u32 {
    // SAFETY: gettid takes no arguments, has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    // A thread id is a positive pid_t.
    tid.unsigned_abs()
}

/// A clock [`clock_gettime_ns`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClockId {
    /// `CLOCK_MONOTONIC`.
    Monotonic,
    /// `CLOCK_BOOTTIME`.
    Boottime,
    /// `CLOCK_REALTIME`.
    Realtime,
    /// `CLOCK_THREAD_CPUTIME_ID`: CPU time of the calling thread.
    ThreadCpuTime,
}

impl ClockId {
    fn raw(self) -> libc::clockid_t {
        match self {
            ClockId::Monotonic => libc::CLOCK_MONOTONIC,
            ClockId::Boottime => libc::CLOCK_BOOTTIME,
            ClockId::Realtime => libc::CLOCK_REALTIME,
            ClockId::ThreadCpuTime => libc::CLOCK_THREAD_CPUTIME_ID,
        }
    }
}

/// `clock_gettime(clock)` in ns since the clock's epoch (negative for a `CLOCK_REALTIME` before
/// 1970). Served by the vDSO where the kernel offers it; inlined so a timing loop measures that
/// call, not a call to this function.
///
/// # Errors
/// The call's errno (a seccomp policy can refuse it).
#[inline]
pub fn clock_gettime_ns(clock: ClockId) -> io::Result<i128> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only it.
    let rc = unsafe { libc::clock_gettime(clock.raw(), &mut ts) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec))
}

/// `CLOCK_MONOTONIC` in ns; 0 if the call failed (Linux does not fail it, but a seccomp policy
/// can refuse the system call behind it where there is no vDSO).
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_gettime_ns(ClockId::Monotonic)
        .ok()
        .and_then(|ns| u64::try_from(ns).ok())
        .unwrap_or(0)
}

/// Takes an exclusive `flock` on `file` without waiting (held until every descriptor of that
/// open file is closed). `std::fs::File::try_lock` does the same from Rust 1.89, past this
/// workspace's minimum version.
///
/// # Errors
/// `EWOULDBLOCK` when another open file description holds a lock on it; `flock`'s other errnos.
pub fn try_lock_exclusive(file: &File) -> io::Result<()> {
    // SAFETY: flock takes integers only; the descriptor is open for the call (borrowed from
    // `file`).
    if unsafe { libc::flock(file.as_fd().as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether this process runs with elevated privileges its user did not grant it: setuid,
/// setgid or file capabilities (`getauxval(AT_SECURE)`, the flag the C library's own
/// `secure_getenv` reads).
pub fn is_secure_execution() -> bool {
    // SAFETY: getauxval takes a constant and reads the auxiliary vector the C library saved at
    // start; it has no preconditions.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The environment variable `name`, or `None` in a setuid, setgid or file-capability process
/// (AT_SECURE), whose environment belongs to the user who started it, not to the privileges it
/// runs with: a library must not let that user redirect which files it trusts or writes.
/// What `secure_getenv(3)` does, over `std::env::var_os`.
pub fn env_var_os(name: &str) -> Option<std::ffi::OsString> {
    if is_secure_execution() {
        None
    } else {
        std::env::var_os(name)
    }
}

/// The switch the project variable `name` sets: `Some(false)` for `off`, `0`, `false`, `no`;
/// `Some(true)` for `on`, `1`, `true`, `yes` (any case, surrounding blanks ignored); `None`
/// unset or empty (and in an AT_SECURE process, as [`env_var_os`]). The one parser of every
/// on/off variable, so each accepts what users type.
///
/// # Errors
/// [`BadSwitch`](crate::BadSwitch) for any other value.
pub fn env_switch(name: &'static str) -> Result<Option<bool>, crate::BadSwitch> {
    env_var_os(name).map_or(Ok(None), |value| parse_switch(name, &value))
}

/// [`env_switch`]'s parse of `value`.
///
/// # Errors
/// As [`env_switch`].
pub fn parse_switch(
    name: &'static str,
    value: &std::ffi::OsStr,
) -> Result<Option<bool>, crate::BadSwitch> {
    let text = value.to_string_lossy();
    match text.trim().to_ascii_lowercase().as_str() {
        "" => Ok(None),
        "off" | "0" | "false" | "no" => Ok(Some(false)),
        "on" | "1" | "true" | "yes" => Ok(Some(true)),
        _ => Err(crate::BadSwitch {
            variable: name,
            value: text.into_owned(),
        }),
    }
}

/// Where the kernel publishes this boot's id.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's id (`/proc/sys/kernel/random/boot_id`) as its 16 bytes, read with one `read()`
/// (`init()` pays for every system call here); its text is
/// `perfclock_core::published_offset::write_boot_id` of them.
///
/// # Errors
/// The open's or read's error, or `InvalidData` if the text is not a boot id.
pub fn boot_id() -> io::Result<[u64; 2]> {
    use std::io::Read as _;
    let mut buffer = [0u8; 64];
    let len = File::open(BOOT_ID_PATH)?.read(&mut buffer)?;
    std::str::from_utf8(&buffer[..len])
        .ok()
        .and_then(perfclock_core::published_offset::parse_boot_id)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a boot id"))
}

/// A private, read-only, executable mapping of the first page of a file, held so that
/// `perf record` logs an `MMAP2` record naming the file: that is how `perf inject --jit` finds a
/// `jit-<pid>.dump` and samply a `marker-<pid>.txt`. A default `perf record` logs only executable
/// mappings (data mappings need `--data`), and one that attaches later (`perf record -p`) reads
/// the mapping from `/proc/<pid>/maps`. Unmapped on drop.
///
/// Mapped like perf's own JVMTI agent maps its dump (`PROT_READ | PROT_EXEC`, `MAP_PRIVATE`):
/// memmap2 maps executable files `MAP_SHARED` only. Nothing reads the mapping: it exposes no
/// pointer or bytes, so the file may be empty (a page past its end would fault if read) or grow
/// while it is mapped.
#[derive(Debug)]
pub struct ExecMarkerMapping {
    /// Never read through (see above).
    mapping: Mapping,
}

impl ExecMarkerMapping {
    /// Maps the first page of `file` (opened for reading) executable.
    ///
    /// # Errors
    /// `mmap`'s errno: `EPERM` on a `noexec` mount, `EACCES` if `file` is not readable.
    pub fn new(file: &File) -> io::Result<ExecMarkerMapping> {
        let mapping = Mapping::file(
            file.as_fd(),
            page_size(),
            Access::ReadExec,
            Sharing::Private,
        )?;
        Ok(ExecMarkerMapping { mapping })
    }

    /// Where the file is mapped: the start of the range `perf record`'s `MMAP2` record and
    /// `/proc/<pid>/maps` name.
    pub fn address(&self) -> usize {
        self.mapping.as_ptr().as_ptr() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mapping's line in `/proc/self/maps`, if it is there.
    fn maps_line(mapping: &ExecMarkerMapping) -> Option<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let start = format!("{:x}-", mapping.address());
        maps.lines()
            .find(|line| line.starts_with(&start))
            .map(str::to_owned)
    }

    #[test]
    fn marker_mapping_is_private_executable_and_unmapped_on_drop() {
        let dir = std::env::temp_dir().join(format!("perfclock-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("marker-test.txt");
        let file = File::create_new(&path)
            .and_then(|_| File::open(&path))
            .unwrap();
        let mapping = ExecMarkerMapping::new(&file).unwrap();
        let line = maps_line(&mapping).expect("the mapping is in /proc/self/maps");
        let addr = mapping.address();
        assert!(line.contains(" r-xp "), "{line}");
        assert!(line.ends_with(path.to_str().unwrap()), "{line}");
        drop(mapping);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(
            !maps.contains(&format!("{addr:x}-")),
            "still mapped after drop"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn marker_mapping_of_a_write_only_file_is_an_error() {
        let file = File::options().write(true).open("/dev/null").unwrap();
        let error = ExecMarkerMapping::new(&file).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EACCES), "{error}");
    }

    #[test]
    fn environment_is_read_outside_secure_execution() {
        // Test binaries are never setuid: the variable must come through.
        assert!(!is_secure_execution());
        assert_eq!(env_var_os("PATH"), std::env::var_os("PATH"));
    }

    #[test]
    fn switches_accept_what_users_type_and_name_the_rest() {
        let parse = |text: &str| parse_switch("PERFCLOCK_X", std::ffi::OsStr::new(text));
        for off in [
            "off", "OFF", "Off", "0", "false", "FALSE", "no", "No", " off ",
        ] {
            assert_eq!(parse(off), Ok(Some(false)), "{off:?}");
        }
        for on in ["on", "ON", "1", "true", "True", "yes", "YES"] {
            assert_eq!(parse(on), Ok(Some(true)), "{on:?}");
        }
        assert_eq!(parse(""), Ok(None));
        let bad = parse("disable").unwrap_err();
        assert_eq!(bad.value, "disable");
        let message = bad.to_string();
        assert!(
            message.starts_with("PERFCLOCK_X=\"disable\" is not a switch"),
            "{message}"
        );
        assert!(message.contains("off (or 0, false, no)"), "{message}");
    }

    #[test]
    fn boot_id_is_the_kernels() {
        let text = std::fs::read_to_string(BOOT_ID_PATH).unwrap();
        let mut spelled = String::new();
        perfclock_core::published_offset::write_boot_id(&mut spelled, boot_id().unwrap()).unwrap();
        assert_eq!(spelled, text.trim());
    }

    #[test]
    fn clocks_read() {
        assert!(monotonic_ns() > 0);
        assert!(clock_gettime_ns(ClockId::Realtime).unwrap() > 0);
        let monotonic = monotonic_ns();
        // Boot time is monotonic time plus time suspended.
        assert!(clock_gettime_ns(ClockId::Boottime).unwrap() >= i128::from(monotonic));
        assert!(clock_gettime_ns(ClockId::ThreadCpuTime).unwrap() > 0);
        assert!(page_size().is_power_of_two());
    }

    #[test]
    fn gettid_is_the_kernels_id_of_the_calling_thread() {
        let here = || {
            let link = std::fs::read_link("/proc/thread-self").unwrap();
            (
                gettid(),
                link.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .parse::<u32>()
                    .unwrap(),
            )
        };
        let (tid, kernel) = here();
        assert_eq!(tid, kernel);
        let (other, other_kernel) = std::thread::spawn(here).join().unwrap();
        assert_eq!(other, other_kernel);
        assert_ne!(other, tid);
    }

    #[test]
    fn a_second_exclusive_lock_is_refused_until_the_first_is_closed() {
        let scratch = std::env::temp_dir().join(format!("perfclock-flock-{}", std::process::id()));
        std::fs::create_dir(&scratch).unwrap();
        let (first, second) = (File::open(&scratch).unwrap(), File::open(&scratch).unwrap());
        try_lock_exclusive(&first).unwrap();
        let refused = try_lock_exclusive(&second).unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::EWOULDBLOCK));
        drop(first);
        try_lock_exclusive(&second).unwrap();
        std::fs::remove_dir(&scratch).unwrap();
    }
}
