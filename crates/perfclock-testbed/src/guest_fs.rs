//! The file systems the checks need when they run as PID 1 of an initramfs guest, where nothing
//! is mounted: `/proc` (the jitdump writer reads the boot id), `/sys` (the kernel's clocksource)
//! and a tmpfs for a dump or a marker file (the marker mapping must be executable).

use std::path::{Path, PathBuf};

/// A directory for a dump or a marker file that can be mapped executable (perf's marker mapping)
/// and is removed again by [`DumpDir::remove`].
#[derive(Debug)]
pub(crate) struct DumpDir {
    pub(crate) path: PathBuf,
    /// A tmpfs was mounted on `path` (the guest's initramfs root is all there is otherwise).
    pub(crate) mounted: bool,
}

impl DumpDir {
    /// `/tmp/NAME` with a tmpfs mounted on it as PID 1; `NAME.PID` in the temporary directory
    /// otherwise.
    pub(crate) fn create(pid1: bool, name: &str) -> Result<DumpDir, String> {
        let path = if pid1 {
            PathBuf::from("/tmp").join(name)
        } else {
            std::env::temp_dir().join(format!("{name}.{}", std::process::id()))
        };
        std::fs::create_dir_all(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
        let mounted = pid1 && mount(c"tmpfs", &path, c"tmpfs").is_ok();
        Ok(DumpDir { path, mounted })
    }

    pub(crate) fn remove(self) {
        if self.mounted {
            if let Ok(target) = std::ffi::CString::new(self.path.as_os_str().as_encoded_bytes()) {
                // SAFETY: `target` is a NUL-terminated path that lives across the call.
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `mount(source, target, fstype)` with no flags or data.
fn mount(source: &std::ffi::CStr, target: &Path, fstype: &std::ffi::CStr) -> Result<(), String> {
    let target_c = std::ffi::CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{} contains NUL", target.display()))?;
    // SAFETY: three NUL-terminated strings that live across the call, no flags, no data.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target_c.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "mount {} on {}: {}",
            fstype.to_string_lossy(),
            target.display(),
            std::io::Error::last_os_error()
        ))
    }
}

/// The writer reads the boot id from `/proc`; as PID 1 of an initramfs nothing mounted it yet.
pub(crate) fn ensure_proc(pid1: bool) -> Result<(), String> {
    ensure_mounted(pid1, c"proc", "/proc", "/proc/sys/kernel/random/boot_id")
}

/// The kernel's current clocksource is read from `/sys` (see [`crate::refinement`]).
pub(crate) fn ensure_sysfs(pid1: bool) -> Result<(), String> {
    ensure_mounted(pid1, c"sysfs", "/sys", "/sys/devices/system")
}

/// Programs the guest starts open `/dev/null` (a spawn with a null stdin); nothing mounted
/// devtmpfs in an initramfs.
pub(crate) fn ensure_devtmpfs(pid1: bool) -> Result<(), String> {
    ensure_mounted(pid1, c"devtmpfs", "/dev", "/dev/null")
}

/// Mounts `fstype` on `dir` as PID 1 unless `probe` exists already.
fn ensure_mounted(
    pid1: bool,
    fstype: &std::ffi::CStr,
    dir: &str,
    probe: &str,
) -> Result<(), String> {
    if !pid1 || Path::new(probe).exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {dir}: {e}"))?;
    mount(fstype, Path::new(dir), fstype)
}
