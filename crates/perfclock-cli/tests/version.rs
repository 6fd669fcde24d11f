//! `perfclock --version`: the workspace version and the commit the binary was built from
//! (`build.rs`), or `unknown` where no checkout or `PERFCLOCK_GIT_COMMIT` told it.

use std::process::Command;

#[test]
fn version_names_the_crate_version_and_the_commit() {
    let output = Command::new(env!("CARGO_BIN_EXE_perfclock"))
        .arg("--version")
        .output()
        .expect("run perfclock --version");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let prefix = format!("perfclock {} (commit ", env!("CARGO_PKG_VERSION"));
    let commit = text
        .trim_end()
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{text:?} is not `{prefix}COMMIT)`"));
    let hex = commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit());
    assert!(
        hex || commit == "unknown",
        "commit {commit:?} is neither 12 hex digits nor `unknown`"
    );
}
