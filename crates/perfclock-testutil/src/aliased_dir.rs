//! One directory reached by two names, a symlink or a bind mount, for the writers' tests
//! (jitdump, markers) that a file created through either name is one file.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh scratch directory holding `real` and `alias`, a second name for `real`.
#[derive(Debug)]
pub struct AliasedDir {
    root: PathBuf,
    /// The directory itself.
    pub real: PathBuf,
    /// The same directory by another name.
    pub alias: PathBuf,
    mount: Option<BindMount>,
}

impl AliasedDir {
    /// `alias` is a symlink to `real`, under `$TMPDIR/<prefix>-symlink-<pid>`.
    pub fn symlinked(prefix: &str) -> AliasedDir {
        let root = fresh_dir(prefix, "symlink");
        let real = root.join("real");
        let alias = root.join("link");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, &alias).unwrap();
        AliasedDir {
            root,
            real,
            alias,
            mount: None,
        }
    }

    /// `alias` is `real` bind-mounted, under `$TMPDIR/<prefix>-bind-<pid>`; unmounted lazily
    /// (a writer may keep its file mapped until exit) by [`remove`](AliasedDir::remove) or on
    /// drop. The error is why `mount` refused, for the caller's skip.
    pub fn bind_mounted(prefix: &str) -> Result<AliasedDir, String> {
        let root = fresh_dir(prefix, "bind");
        let real = root.join("real");
        let alias = root.join("bound");
        std::fs::create_dir(&real).unwrap();
        std::fs::create_dir(&alias).unwrap();
        let mount = match BindMount::mount(&real, &alias) {
            Ok(mount) => mount,
            Err(why) => {
                let _ = std::fs::remove_dir_all(&root);
                return Err(why);
            }
        };
        // The setup ran: the same directory under both names.
        std::fs::write(real.join("probe"), b"x").unwrap();
        assert!(
            alias.join("probe").exists(),
            "the bind mount is not in place"
        );
        std::fs::remove_file(real.join("probe")).unwrap();
        Ok(AliasedDir {
            root,
            real,
            alias,
            mount: Some(mount),
        })
    }

    /// Unmounts the alias if it is a bind mount, then removes the scratch directory.
    pub fn remove(mut self) {
        drop(self.mount.take());
        std::fs::remove_dir_all(&self.root).unwrap();
    }
}

fn fresh_dir(prefix: &str, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `mount --bind` of a directory onto another, unmounted (`umount -l`) on drop.
#[derive(Debug)]
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
