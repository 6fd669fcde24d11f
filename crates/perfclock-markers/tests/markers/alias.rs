//! One directory reached by two names (a symlink, a bind mount): writers opened through either
//! name share one marker file, and every marker written through either handle stays in it.
//!
//! The bind-mount case needs `mount` (root in a namespace that allows it); where it is refused
//! it skips (perfclock-testutil), unless PERFCLOCK_REQUIRE_MOUNT=1 makes it fail.

use std::path::{Path, PathBuf};
use std::process::Command;

use perfclock_markers::Markers;
use perfclock_testutil::{skip, Need};

fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pcm-alias-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

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
    let dir = fresh_dir("symlink");
    let real = dir.join("real");
    let link = dir.join("link");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    both_markers_kept(&real, &link);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `mount --bind` of a directory onto another, unmounted (lazily: the writer keeps its file
/// mapped until exit) on drop.
struct BindMount(PathBuf);

impl BindMount {
    fn mount(source: &Path, target: &Path) -> Result<BindMount, String> {
        let output = Command::new("mount")
            .arg("--bind")
            .arg(source)
            .arg(target)
            .output()
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(BindMount(target.to_owned()))
        } else {
            Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
        }
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn bind_mounted_directory_shares_the_file() {
    let dir = fresh_dir("bind");
    let real = dir.join("real");
    let bound = dir.join("bound");
    std::fs::create_dir(&real).unwrap();
    std::fs::create_dir(&bound).unwrap();
    let mount = match BindMount::mount(&real, &bound) {
        Ok(mount) => mount,
        Err(why) => {
            skip("bind_mounted_directory_shares_the_file", Need::Mount, why);
            return;
        }
    };
    // The setup ran: the same directory under both names.
    std::fs::write(real.join("probe"), b"x").unwrap();
    assert!(
        bound.join("probe").exists(),
        "the bind mount is not in place"
    );
    std::fs::remove_file(real.join("probe")).unwrap();
    both_markers_kept(&real, &bound);
    drop(mount);
    std::fs::remove_dir_all(&dir).unwrap();
}
