//! `perfclock agent-path`: where the JVMTI agent that belongs to this `perfclock` is.
//!
//! The agent is installed next to the binary: `cargo build --release --workspace` puts
//! `libperfclock_agent.so` (crate `perfclock-jvmti`) beside `perfclock` in `target/release/`,
//! and an install copies both into one directory. Not embedded: the agent is a cdylib of its
//! own crate, and cargo cannot make one crate's binary depend on another crate's cdylib
//! artifact on stable.

use std::path::{Path, PathBuf};

/// The agent's file name.
pub(crate) const AGENT_FILE: &str = "libperfclock_agent.so";

/// The absolute path of the agent beside the running `perfclock`, or a message naming the fix.
///
/// # Errors
/// The running binary's path cannot be read, or no agent is beside it.
pub(crate) fn find() -> Result<PathBuf, String> {
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| format!("cannot find the running perfclock binary: {e}"))?;
    beside(&exe)
}

fn beside(exe: &Path) -> Result<PathBuf, String> {
    let dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", exe.display()))?;
    let agent = dir.join(AGENT_FILE);
    if agent.is_file() {
        Ok(agent)
    } else {
        Err(format!(
            "no {AGENT_FILE} next to {}: build it with `cargo build --release --workspace` (or \
             `-p perfclock-jvmti`, same profile as perfclock), or copy it into {}",
            exe.display(),
            dir.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_agent_beside_the_binary_or_names_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("perfclock");
        let error = beside(&exe).unwrap_err();
        assert!(
            error.contains("no libperfclock_agent.so next to"),
            "{error}"
        );
        assert!(
            error.contains("cargo build --release --workspace"),
            "{error}"
        );
        std::fs::write(dir.path().join(AGENT_FILE), b"").unwrap();
        assert_eq!(beside(&exe).unwrap(), dir.path().join(AGENT_FILE));
    }
}
