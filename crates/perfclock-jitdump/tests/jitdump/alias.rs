//! One directory reached by two names (a symlink, a bind mount): dumps created through either
//! name are one dump, and every load written through either handle stays in it.
//!
//! Needs the perfclock clock (perf events), and the bind-mount case `mount` (root in a namespace
//! that allows it); without them the tests skip (perfclock-testutil) unless
//! `PERFCLOCK_REQUIRE_PERF=1` / `PERFCLOCK_REQUIRE_MOUNT=1` (CI) make that a failure.

use std::io::Cursor;
use std::path::Path;

use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord};
use perfclock_jitdump::JitDump;
use perfclock_testutil::aliased_dir::AliasedDir;
use perfclock_testutil::{ok_or_skip, skip, Need};

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
    let dir = AliasedDir::symlinked("pcj-alias");
    every_load_kept(&dir.real, &dir.alias);
    dir.remove();
}

#[test]
fn bind_mounted_directory_shares_the_dump() {
    let test = "bind_mounted_directory_shares_the_dump";
    if ok_or_skip(test, Need::Perf, perfclock::init()).is_none() {
        return;
    }
    let dir = match AliasedDir::bind_mounted("pcj-alias") {
        Ok(dir) => dir,
        Err(why) => {
            skip(test, Need::Mount, why);
            return;
        }
    };
    every_load_kept(&dir.real, &dir.alias);
    dir.remove();
}
