//! For the writers' hostile tests (jitdump, markers): what an attacker or a careless user leaves
//! at the name a writer is about to create in a directory others can write, and the checks that
//! the writer neither followed it nor reused it.
//!
//! The directories are not sticky, so `fs.protected_symlinks` (which only guards sticky
//! world-writable directories) plays no part: the writer alone must refuse the link.
//!
//! Cases that need root (chown to another user, dropping to `nobody`) skip when not root
//! ([`skip`](fn@crate::skip)), and fail instead when `PERFCLOCK_REQUIRE_ROOT` is set (CI).
//!
//! # Safety
//! `geteuid`, `lchown`, `mkfifo` and friends on C strings this module builds and keeps alive
//! for the call; each block's `SAFETY:` comment says what the call reads.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The uid and gid of `nobody` on Debian (no passwd entry is needed for chown or setresuid).
pub const NOBODY: u32 = 65534;

/// Whether this process is root; says why a case is skipped otherwise (fatal under
/// `PERFCLOCK_REQUIRE_ROOT`).
pub fn root_or_skip(test: &str) -> bool {
    if crate::is_root() {
        return true;
    }
    crate::skip(
        test,
        crate::Need::Root,
        "the case chowns to another user or calls setresuid",
    );
    false
}

/// What is found at the writer's name before it creates its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// A symlink to a victim file (mode 0600, owned by the writer's user).
    Symlink,
    /// A symlink to a name that does not exist yet: following it would create the target.
    DanglingSymlink,
    /// A FIFO (opening it read-write succeeds on Linux, so a plain open would write into it).
    Fifo,
    /// A regular file, mode 0666, of another user (uid [`NOBODY`], or root when the writer runs
    /// as `nobody`): reusing it would let its owner rewrite what the writer wrote.
    ForeignFile,
    /// A regular file of the writer's own user left by an earlier process with this pid: the
    /// one thing a writer may replace.
    OwnStaleFile,
}

impl Plant {
    /// Every case that must be refused.
    pub const REFUSED: [Plant; 4] = [
        Plant::Symlink,
        Plant::DanglingSymlink,
        Plant::Fifo,
        Plant::ForeignFile,
    ];
}

const VICTIM_TEXT: &[u8] = b"the victim's own bytes\n";
const PLANTED_TEXT: &[u8] = b"planted by another user\n";

/// A plant at `dir/name`, and what to check afterwards.
#[derive(Debug)]
pub struct Planted {
    /// What was planted.
    pub plant: Plant,
    /// Where: the name the writer is about to create.
    pub path: PathBuf,
    victim: PathBuf,
    /// Owner of what was planted (the uid the error must name).
    pub owner: u32,
}

fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn chown(path: &Path, uid: u32) {
    let c = cstring(path);
    // SAFETY: a valid C string; lchown changes the link itself, never its target.
    let rc = unsafe { libc::lchown(c.as_ptr(), uid, uid) };
    assert_eq!(
        rc,
        0,
        "lchown {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Plants `plant` at `dir/name`. The victim lives in `dir` too, owned by `writer_uid` (the user
/// the writer will run as); `foreign_uid` owns the planted file or link.
pub fn plant(dir: &Path, name: &str, plant: Plant, writer_uid: u32, foreign_uid: u32) -> Planted {
    let path = dir.join(name);
    let victim = dir.join(format!("victim-of-{name}"));
    let mut owner = foreign_uid;
    match plant {
        Plant::Symlink => {
            std::fs::write(&victim, VICTIM_TEXT).unwrap();
            std::fs::set_permissions(&victim, PermissionsExt::from_mode(0o600)).unwrap();
            chown(&victim, writer_uid);
            std::os::unix::fs::symlink(&victim, &path).unwrap();
            chown(&path, foreign_uid);
        }
        Plant::DanglingSymlink => {
            std::os::unix::fs::symlink(&victim, &path).unwrap();
            chown(&path, foreign_uid);
        }
        Plant::Fifo => {
            let c = cstring(&path);
            // SAFETY: a valid C string.
            let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o666) };
            assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
            chown(&path, foreign_uid);
        }
        Plant::ForeignFile => {
            std::fs::write(&path, PLANTED_TEXT).unwrap();
            std::fs::set_permissions(&path, PermissionsExt::from_mode(0o666)).unwrap();
            chown(&path, foreign_uid);
        }
        Plant::OwnStaleFile => {
            std::fs::write(&path, PLANTED_TEXT).unwrap();
            chown(&path, writer_uid);
            owner = writer_uid;
        }
    }
    Planted {
        plant,
        path,
        victim,
        owner,
    }
}

impl Planted {
    /// After a refused create: the plant is still there as it was, the victim untouched, and the
    /// error message names the path and the owner.
    pub fn assert_refused_untouched(&self, message: &str) {
        let what = format!("{:?} at {}", self.plant, self.path.display());
        assert!(
            message.contains(&self.path.display().to_string()),
            "{what}: the error does not name the path: {message}"
        );
        assert!(
            message.contains(&format!("uid {}", self.owner)),
            "{what}: the error does not name the owner uid {}: {message}",
            self.owner
        );
        let meta = std::fs::symlink_metadata(&self.path).unwrap();
        assert_eq!(meta.uid(), self.owner, "{what}: the plant changed owner");
        match self.plant {
            Plant::Symlink => {
                assert!(
                    meta.file_type().is_symlink(),
                    "{what}: the link was replaced"
                );
                assert_eq!(
                    std::fs::read(&self.victim).unwrap(),
                    VICTIM_TEXT,
                    "{what}: victim written"
                );
            }
            Plant::DanglingSymlink => {
                assert!(
                    meta.file_type().is_symlink(),
                    "{what}: the link was replaced"
                );
                assert!(
                    std::fs::symlink_metadata(&self.victim).is_err(),
                    "{what}: the link's target was created"
                );
            }
            Plant::Fifo => {
                use std::os::unix::fs::FileTypeExt;
                assert!(meta.file_type().is_fifo(), "{what}: the FIFO was replaced");
            }
            Plant::ForeignFile => {
                assert!(meta.is_file());
                assert_eq!(
                    std::fs::read(&self.path).unwrap(),
                    PLANTED_TEXT,
                    "{what}: reused"
                );
            }
            Plant::OwnStaleFile => {
                panic!("{what}: an own stale file must be replaced, not refused")
            }
        }
    }

    /// After a successful create over an own stale file: a new file of the writer's user, none
    /// of the stale bytes left in it.
    pub fn assert_replaced(&self, writer_uid: u32) {
        assert_eq!(self.plant, Plant::OwnStaleFile);
        let meta = std::fs::symlink_metadata(&self.path).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.uid(), writer_uid);
        let bytes = std::fs::read(&self.path).unwrap();
        assert!(
            !bytes.windows(PLANTED_TEXT.len()).any(|w| w == PLANTED_TEXT),
            "the stale file's bytes are still in {}",
            self.path.display()
        );
    }
}

/// A fresh, non-sticky directory anyone may write (0777): `nobody` can create files in it, and
/// `fs.protected_symlinks` does not apply.
pub fn open_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("perfclock-shared-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o777)).unwrap();
    dir
}

/// A directory anyone may write (0777) at `parent/name`: one case's own directory, for a child
/// that plants as root and then drops to `nobody`.
pub fn open_subdir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o777)).unwrap();
    dir
}

/// The body of a test whose `case` plants as root in [`open_dir`]`(tag)` and drops to `nobody`,
/// in a child process of its own ([`hostile`](crate::hostile)). In that child, runs `case`.
/// Otherwise, where `may_run()` (which skips the test when it says no) and as root, runs the
/// child, expects `ok` in its report, and removes its directories, which `nobody` may not.
pub fn as_nobody_test(
    test: &str,
    tag: &str,
    ok: &str,
    may_run: impl FnOnce() -> bool,
    case: impl FnOnce(),
) {
    if crate::hostile::child_case().as_deref() == Some(test) {
        return case();
    }
    if !may_run() || !root_or_skip(test) {
        return;
    }
    let run = crate::hostile::run_child(test, test, std::time::Duration::from_secs(90));
    run.expect_success(ok);
    remove_open_dirs(tag);
}

/// Removes every [`open_dir`] of `tag`, whichever process made it (a child has another pid).
fn remove_open_dirs(tag: &str) {
    let prefix = format!("perfclock-shared-{tag}-");
    for entry in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap_or_default();
        if name.starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Drops this whole process (every thread: glibc broadcasts set*id) to `nobody`.
pub fn become_nobody() {
    // SAFETY: integer arguments and a null list (no supplementary groups).
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0, "setgroups");
        assert_eq!(libc::setresgid(NOBODY, NOBODY, NOBODY), 0, "setresgid");
        assert_eq!(libc::setresuid(NOBODY, NOBODY, NOBODY), 0, "setresuid");
        assert_eq!(libc::geteuid(), NOBODY);
    }
}
