//! What the tests that compile C against this crate share: where cargo put the static and shared
//! libraries of this profile (brought up to date by cargo before use), and what a C link of the
//! static library needs.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The crate's directory (for `include/` and the C sources under `tests/`).
pub(crate) const CRATE_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// What Rust's std needs from the C side when a staticlib is linked by a C compiler
/// (`--print native-static-libs` on linux-gnu).
pub(crate) const NATIVE_LIBS: [&str; 7] = [
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

/// The static and shared library of this crate.
#[derive(Debug)]
pub(crate) struct Libraries {
    /// `libperfclock_ffi.a`.
    pub archive: PathBuf,
    /// `libperfclock_ffi.so`.
    pub shared: PathBuf,
}

/// `target/<profile>/`, the directory holding the test binary's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in <target>/<profile>/deps/")
        .to_path_buf()
}

/// The libraries cargo places next to the test binary's `deps/`, built with `cargo build -p
/// perfclock-ffi` into the same target directory every time: `cargo test` does not update them,
/// and cargo alone knows whether they are stale (an edit to a dependency leaves no trace a test
/// could compare; a no-op build takes a fraction of a second).
pub(crate) fn libraries() -> Libraries {
    let profile = profile_dir();
    let archive = profile.join("libperfclock_ffi.a");
    let shared = profile.join("libperfclock_ffi.so");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .args(["build", "--quiet", "-p", "perfclock-ffi"])
        .env("CARGO_TARGET_DIR", profile.parent().expect("target dir"));
    if profile.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let status = build.status().expect("run cargo build");
    assert!(status.success(), "{build:?}: {status}");
    assert!(archive.is_file(), "{} missing", archive.display());
    assert!(shared.is_file(), "{} missing", shared.display());
    Libraries { archive, shared }
}
