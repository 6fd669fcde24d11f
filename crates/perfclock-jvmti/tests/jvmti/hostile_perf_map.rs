//! The JVMTI agent's perf map (`perfmap=1`, `/tmp/perf-<pid>.map`) against what a local user can
//! plant at that predictable name before the JVM starts: a shell plants it with its
//! own pid, then `exec`s java, exactly as an attacker would. Under `strict=1`, a symlink (to a victim file), a FIFO
//! and another user's file must make the JVM refuse to start with a message naming the path and
//! the owner, and be left as they were; a stale regular file of the JVM's own user is replaced.
//!
//! Needs `java` and root (to plant another user's file): skipped on stderr without them, fatal
//! under `PERFCLOCK_REQUIRE_TOOLS=1` / `PERFCLOCK_REQUIRE_ROOT=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::agent;
use perfclock_testutil::{skip, Need};

/// `java` of a JDK or JRE: `JAVA_HOME`'s, else the one on `PATH`.
fn java() -> Option<PathBuf> {
    let java = match std::env::var_os("JAVA_HOME") {
        Some(home) => PathBuf::from(home).join("bin/java"),
        None => {
            let out = Command::new("sh")
                .args(["-c", "command -v java"])
                .output()
                .ok()?;
            PathBuf::from(String::from_utf8(out.stdout).ok()?.trim())
        }
    };
    java.is_file().then_some(java)
}

/// What the shell puts at `/tmp/perf-$$.map` before it becomes the JVM.
struct Case {
    name: &'static str,
    plant: &'static str,
    refused: bool,
}

#[test]
fn planted_perf_maps_are_refused_and_left_alone() {
    let test = "planted_perf_maps_are_refused_and_left_alone";
    let Some(java) = java() else {
        skip(test, Need::Tool("java"), "no java on PATH (set JAVA_HOME)");
        return;
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(test, Need::Root, "planting another user's file takes chown");
        return;
    }
    let work = std::env::temp_dir().join(format!("perfclock-perfmap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir(&work).unwrap();
    let agent = agent();
    let victim = work.join("victim");
    let cases = [
        Case {
            name: "symlink",
            plant: "ln -s \"$VICTIM\" \"$MAP\"",
            refused: true,
        },
        Case {
            name: "dangling symlink",
            plant: "ln -s \"$VICTIM.absent\" \"$MAP\"",
            refused: true,
        },
        Case {
            name: "fifo",
            plant: "mkfifo -m 666 \"$MAP\"",
            refused: true,
        },
        Case {
            name: "another user's file",
            plant: "echo planted > \"$MAP\" && chmod 666 \"$MAP\" && chown 65534:65534 \"$MAP\"",
            refused: true,
        },
        Case {
            name: "own stale file",
            plant: "echo planted > \"$MAP\"",
            refused: false,
        },
    ];
    for case in &cases {
        std::fs::write(&victim, b"the victim's own bytes\n").unwrap();
        let script = format!(
            "MAP=/tmp/perf-$$.map; echo \"$MAP\"; {} || exit 99; \
             exec \"$JAVA\" -Xint -agentpath:\"$AGENT\"=jitdump=off,perfmap=1,allow_no_clock=1,strict=1 \
             -version",
            case.plant
        );
        let output = Command::new("sh")
            .args(["-c", &script])
            .env("VICTIM", &victim)
            .env("AGENT", &agent)
            .env("JAVA", &java)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let map = PathBuf::from(stdout.lines().next().unwrap_or_default());
        let meta = std::fs::symlink_metadata(&map);
        let replaced_text = meta
            .as_ref()
            .is_ok_and(|m| m.is_file())
            .then(|| std::fs::read_to_string(&map).unwrap_or_default());
        let _ = std::fs::remove_file(&map);
        assert_ne!(
            output.status.code(),
            Some(99),
            "{}: planting failed: {stderr}",
            case.name
        );
        assert_eq!(
            std::fs::read(&victim).unwrap(),
            b"the victim's own bytes\n",
            "{}: the victim was written",
            case.name
        );
        assert!(
            !Path::new(&format!("{}.absent", victim.display())).exists(),
            "{}: the dangling link's target was created",
            case.name
        );
        let meta =
            meta.unwrap_or_else(|e| panic!("{}: {} vanished: {e}", case.name, map.display()));
        if case.refused {
            assert!(
                !output.status.success(),
                "{}: the JVM started with the planted map\n{stderr}",
                case.name
            );
            let owner = std::os::unix::fs::MetadataExt::uid(&meta);
            assert!(
                stderr.contains(&map.display().to_string())
                    && stderr.contains(&format!("uid {owner}")),
                "{}: the refusal does not name {} and uid {owner}:\n{stderr}",
                case.name,
                map.display()
            );
            println!(
                "{}: refused: {}",
                case.name,
                stderr.lines().next().unwrap_or_default()
            );
        } else {
            assert!(output.status.success(), "{}: {stderr}", case.name);
            assert!(meta.is_file() && std::os::unix::fs::MetadataExt::uid(&meta) == 0);
            let text = replaced_text.unwrap_or_default();
            assert!(
                !text.contains("planted"),
                "{}: the stale bytes are still there",
                case.name
            );
            println!("{}: replaced", case.name);
        }
    }
    std::fs::remove_dir_all(&work).unwrap();
}
