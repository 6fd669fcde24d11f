//! One directory reached by two names (a symlink, a bind mount): writers opened through either
//! name share one marker file, and every marker written through either handle stays in it.
//!
//! The bind-mount case needs `mount` (root in a namespace that allows it); where it is refused
//! it skips (perfclock-testutil), unless PERFCLOCK_REQUIRE_MOUNT=1 makes it fail.

use std::path::Path;

use perfclock_markers::Markers;
use perfclock_testutil::aliased_dir::AliasedDir;
use perfclock_testutil::{skip, Need};

/// Opens a writer on `first`, marks, flushes; then one on `second` (the same directory by
/// another name), marks, flushes: both markers must be in the one file.
fn both_markers_kept(first: &Path, second: &Path) {
    let a = Markers::open(first).unwrap();
    a.span("through the first name", 100, 200).unwrap();
    a.flush().unwrap();
    let b = Markers::open(second).unwrap();
    b.span("through the second name", 300, 400).unwrap();
    b.flush().unwrap();
    a.span("first name again", 500, 600).unwrap();
    let paths = (a.path().to_owned(), b.path().to_owned());
    a.close().unwrap();
    b.close().unwrap();
    let name = format!("marker-{}.txt", std::process::id());
    let text = std::fs::read_to_string(first.join(&name)).unwrap();
    assert_eq!(
        text.lines().map(str::trim_end).collect::<Vec<_>>(),
        [
            "100 200 through the first name",
            "300 400 through the second name",
            "500 600 first name again",
        ],
        "{text:?}"
    );
    assert_eq!(paths.0, paths.1, "two paths for one file");
}

#[test]
fn symlinked_directory_shares_the_file() {
    let dir = AliasedDir::symlinked("pcm-alias");
    both_markers_kept(&dir.real, &dir.alias);
    dir.remove();
}

#[test]
fn bind_mounted_directory_shares_the_file() {
    let dir = match AliasedDir::bind_mounted("pcm-alias") {
        Ok(dir) => dir,
        Err(why) => {
            skip("bind_mounted_directory_shares_the_file", Need::Mount, why);
            return;
        }
    };
    both_markers_kept(&dir.real, &dir.alias);
    dir.remove();
}
