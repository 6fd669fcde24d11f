//! A JVM started with the agent and a dump directory the agent cannot write runs its program to
//! completion: the agent prints one line saying so and runs without a dump; `strict=1` makes the
//! start fail instead. Cases: a missing directory, and (as root, with `setpriv`) a directory of
//! root's, mode 0700, for a JVM running as nobody, the case `perfclock record` as root of
//! another user's command meets.
//!
//! Needs `java`: skipped on stderr without it, fatal under `PERFCLOCK_REQUIRE_TOOLS=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::agent;
use perfclock_testutil::{skip, Need};

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

fn run(prefix: &[&str], java: &Path, agent: &Path, options: &str) -> Output {
    let (program, args) = match prefix.split_first() {
        Some((first, rest)) => (first.to_string(), rest.to_vec()),
        None => (java.display().to_string(), Vec::new()),
    };
    let mut command = Command::new(program);
    command.args(args);
    if !prefix.is_empty() {
        command.arg(java);
    }
    command
        .arg(format!("-agentpath:{}={options}", agent.display()))
        .arg("-version")
        .output()
        .unwrap()
}

fn assert_runs_without_dump(case: &str, output: &Output) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{case}: the JVM failed:\n{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("perfclock_agent:"))
        .collect();
    assert_eq!(lines.len(), 1, "{case}: not one agent line:\n{stderr}");
    assert!(
        lines[0].contains("cannot write the jitdump") && lines[0].contains("strict=1"),
        "{case}: {}",
        lines[0]
    );
    // `java -version` ran: its banner is on stderr after the agent's line.
    assert!(
        stderr.contains("version"),
        "{case}: no version banner:\n{stderr}"
    );
}

fn assert_refused(case: &str, output: &Output) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "{case}: the JVM started:\n{stderr}"
    );
    assert!(
        stderr.contains("pass jitdump=DIR with an existing writable directory"),
        "{case}: {stderr}"
    );
}

#[test]
fn the_jvm_runs_without_a_dump_unless_strict() {
    let test = "the_jvm_runs_without_a_dump_unless_strict";
    let Some(java) = java() else {
        skip(test, Need::Tool("java"), "no java on PATH (set JAVA_HOME)");
        return;
    };
    let agent = agent();
    let work = tempfile::tempdir().unwrap();
    let missing = work.path().join("missing");
    let options = format!("jitdump={}", missing.display());
    assert_runs_without_dump("missing dir", &run(&[], &java, &agent, &options));
    assert!(!missing.exists(), "the agent created the missing directory");
    let strict = format!("{options},strict=1");
    assert_refused("missing dir, strict=1", &run(&[], &java, &agent, &strict));

    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let setpriv = Path::new("/usr/bin/setpriv").is_file();
    if !root || !setpriv {
        skip(
            test,
            Need::Root,
            "the other-user case needs root and setpriv",
        );
        return;
    }
    let private = work.path().join("root-only");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(
        &private,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    // The agent library and the work dir's parent must be reachable by nobody.
    std::fs::set_permissions(
        work.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let nobody = [
        "/usr/bin/setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let options = format!("jitdump={}", private.display());
    assert_runs_without_dump("root's 0700 dir", &run(&nobody, &java, &agent, &options));
    assert_eq!(std::fs::read_dir(&private).unwrap().count(), 0);
}
