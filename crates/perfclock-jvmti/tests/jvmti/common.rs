//! What the agent's tests share: the agent library they load.

use std::path::{Path, PathBuf};
use std::process::Command;

/// This crate's `libperfclock_agent.so`, brought up to date by cargo (the test binary lives in
/// `<target>/<profile>/deps/`, the library in `<target>/<profile>/`).
pub(crate) fn agent() -> PathBuf {
    let status = Command::new(env!("CARGO"))
        .args(["build", "-p", "perfclock-jvmti"])
        .status()
        .expect("run cargo");
    assert!(status.success(), "cargo build -p perfclock-jvmti failed");
    let exe = std::env::current_exe().unwrap();
    let agent = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("libperfclock_agent.so");
    assert!(agent.is_file(), "{} was not built", agent.display());
    agent
}
