//! Where the JVMTI agent that belongs to this `perfclock` is (`agent-path`, and the default of
//! `record` and `attach`).
//!
//! Two layouts hold both: a build tree, where `cargo build --release --workspace` puts
//! `libperfclock_agent.so` (crate `perfclock-jvmti`) beside `perfclock` in `target/release/`,
//! and an installed prefix (the package, the tarball), where the binary is `bin/perfclock` and
//! the agent `lib/perfclock/libperfclock_agent.so`, a private directory no dynamic linker
//! searches. Not embedded: the agent is a cdylib of its own crate, and cargo cannot make one
//! crate's binary depend on another crate's cdylib artifact on stable.

use std::path::{Path, PathBuf};

/// The agent's file name.
pub(crate) const AGENT_FILE: &str = "libperfclock_agent.so";

/// The installed agent's place relative to the directory holding the binary.
const INSTALLED_RELATIVE_DIR: &str = "../lib/perfclock";

/// The absolute path of the agent that belongs to the running `perfclock`, or a message naming
/// the fix.
///
/// # Errors
/// The running binary's path cannot be read, or no agent is in either place.
pub(crate) fn find() -> Result<PathBuf, String> {
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| format!("cannot find the running perfclock binary: {e}"))?;
    for_binary(&exe)
}

/// The agent beside `exe` (a build tree), else in `../lib/perfclock/` from its directory (an
/// installed prefix), as an absolute path without `..`.
fn for_binary(exe: &Path) -> Result<PathBuf, String> {
    let dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", exe.display()))?;
    let beside = dir.join(AGENT_FILE);
    if beside.is_file() {
        return Ok(beside);
    }
    let installed = dir.join(INSTALLED_RELATIVE_DIR).join(AGENT_FILE);
    if installed.is_file() {
        return installed
            .canonicalize()
            .map_err(|e| format!("{}: {e}", installed.display()));
    }
    Err(format!(
        "no {AGENT_FILE} next to {} nor in {}: build it with `cargo build --release --workspace` \
         (or `-p perfclock-jvmti`, same profile as perfclock), or install perfclock's package, \
         which puts it in {INSTALLED_RELATIVE_DIR}/ relative to the binary's directory",
        exe.display(),
        dir.join(INSTALLED_RELATIVE_DIR).display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_agent_beside_the_binary_or_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("perfclock");
        let error = for_binary(&exe).unwrap_err();
        assert!(
            error.contains("no libperfclock_agent.so next to"),
            "{error}"
        );
        assert!(
            error.contains("cargo build --release --workspace"),
            "{error}"
        );
        std::fs::write(dir.path().join(AGENT_FILE), b"").unwrap();
        assert_eq!(for_binary(&exe).unwrap(), dir.path().join(AGENT_FILE));
    }

    #[test]
    fn finds_the_installed_agent_in_lib_perfclock_of_the_prefix() {
        let prefix = tempfile::tempdir().unwrap();
        let prefix = prefix.path().canonicalize().unwrap();
        let bin = prefix.join("bin");
        let lib = prefix.join("lib/perfclock");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        let exe = bin.join("perfclock");
        let error = for_binary(&exe).unwrap_err();
        assert!(error.contains("lib/perfclock"), "{error}");
        std::fs::write(lib.join(AGENT_FILE), b"").unwrap();
        assert_eq!(for_binary(&exe).unwrap(), lib.join(AGENT_FILE));
    }

    #[test]
    fn the_agent_beside_the_binary_wins_over_an_installed_one() {
        let prefix = tempfile::tempdir().unwrap();
        let bin = prefix.path().join("bin");
        let lib = prefix.path().join("lib/perfclock");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join(AGENT_FILE), b"").unwrap();
        std::fs::write(bin.join(AGENT_FILE), b"").unwrap();
        assert_eq!(
            for_binary(&bin.join("perfclock")).unwrap(),
            bin.join(AGENT_FILE)
        );
    }
}
