//! `perfclock --version`: the crate's version and the git commit the binary was built from.
//!
//! The commit is `git rev-parse HEAD` of the checkout this crate sits in, when `git` runs and
//! the crate's `Cargo.toml` is tracked there; else `PERFCLOCK_GIT_COMMIT` if set (a build from
//! a source archive whose packager knows the commit); else `unknown` (a build from the
//! published crate, or without git). Edits not committed are not marked: the commit is the one
//! `HEAD` named when the build ran.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PERFCLOCK_GIT_COMMIT");
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let commit = checkout_commit(Path::new(&manifest_dir))
        .or_else(|| std::env::var("PERFCLOCK_GIT_COMMIT").ok())
        .filter(|commit| !commit.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rustc-env=PERFCLOCK_VERSION={version} (commit {commit})");
}

/// `HEAD`'s commit (12 hex digits) of the repository that tracks this crate, and the files whose
/// change means a new commit (so cargo re-runs this script then, and only then).
fn checkout_commit(manifest_dir: &Path) -> Option<String> {
    git(manifest_dir, &["ls-files", "--error-unmatch", "Cargo.toml"])?;
    let head_ref = git(manifest_dir, &["rev-parse", "--symbolic-full-name", "HEAD"]);
    let watched = ["HEAD", "packed-refs"]
        .into_iter()
        .map(str::to_owned)
        .chain(head_ref.filter(|name| name.starts_with("refs/")));
    for name in watched {
        if let Some(path) = git(manifest_dir, &["rev-parse", "--git-path", &name]) {
            let path = manifest_dir.join(path);
            // A path that does not exist would make cargo re-run this script on every build.
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    git(manifest_dir, &["rev-parse", "--short=12", "HEAD"])
}

/// `git ARGS` in `dir`: its first line of output, or `None` if it cannot run or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let line = text.lines().next()?.trim().to_owned();
    (!line.is_empty()).then_some(line)
}
