//! One directory reached by two names (a symlink, a bind mount): dumps created through either
//! name are one dump, and every load written through either handle stays in it.
//!
//! Needs the perfclock clock (perf events), and the bind-mount case `mount` (root in a namespace
//! that allows it); without them the tests skip (perfclock-testutil) unless
//! `PERFCLOCK_REQUIRE_PERF=1` / `PERFCLOCK_REQUIRE_MOUNT=1` (CI) make that a failure.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;

use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord};
use perfclock_jitdump::JitDump;
use perfclock_testutil::{ok_or_skip, skip, Need};

fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pcj-alias-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The names of the loads in the dump at `path`, and whether it ends with a close record.
fn loads(path: &Path) -> (Vec<String>, bool) {
    let bytes = std::fs::read(path).unwrap();
    let mut reader = JitDumpReader::new(Cursor::new(bytes)).unwrap();
    let mut names = Vec::new();
    let mut closed = false;
    while let Some(raw) = reader.next_record().unwrap() {
        match raw.parse().unwrap() {
            JitDumpRecord::CodeLoad(load) => {
                names.push(String::from_utf8(load.function_name.as_slice().to_vec()).unwrap())
            }
            JitDumpRecord::CodeClose => closed = true,
            _ => {}
        }
    }
    (names, closed)
}

/// A dump created in `first`, a load; a dump created in `second` (the same directory by
/// another name), a load; a load through the first again: all three in one dump.
fn every_load_kept(first: &Path, second: &Path) {
    let code = [0xc3u8];
    let a = JitDump::create(first).unwrap();
    a.code_load(b"through the first name", 0x1000, &code)
        .unwrap();
    let b = JitDump::create(second).unwrap();
    b.code_load(b"through the second name", 0x2000, &code)
        .unwrap();
    a.code_load(b"first name again", 0x3000, &code).unwrap();
    let paths = (a.path().to_owned(), b.path().to_owned());
    a.close().unwrap();
    b.close().unwrap();
    let name = format!("jit-{}.dump", std::process::id());
    let (names, closed) = loads(&first.join(name));
    assert_eq!(
        names,
        [
            "through the first name",
            "through the second name",
            "first name again"
        ]
    );
    assert!(closed, "the last handle's close record is missing");
    assert_eq!(paths.0, paths.1, "two paths for one dump");
}

#[test]
fn symlinked_directory_shares_the_dump() {
    let test = "symlinked_directory_shares_the_dump";
    if ok_or_skip(test, Need::Perf, perfclock::init()).is_none() {
        return;
    }
    let dir = fresh_dir("symlink");
    let real = dir.join("real");
    let link = dir.join("link");
    std::fs::create_dir(&real).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    every_load_kept(&real, &link);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `mount --bind` of a directory onto another, unmounted on drop.
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
fn bind_mounted_directory_shares_the_dump() {
    let test = "bind_mounted_directory_shares_the_dump";
    if ok_or_skip(test, Need::Perf, perfclock::init()).is_none() {
        return;
    }
    let dir = fresh_dir("bind");
    let real = dir.join("real");
    let bound = dir.join("bound");
    std::fs::create_dir(&real).unwrap();
    std::fs::create_dir(&bound).unwrap();
    let mount = match BindMount::mount(&real, &bound) {
        Ok(mount) => mount,
        Err(why) => {
            skip(test, Need::Mount, why);
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
    every_load_kept(&real, &bound);
    drop(mount);
    std::fs::remove_dir_all(&dir).unwrap();
}
