//! Each runtime's own jitdump writer, turned on for a launched command as the JVM agent is, so
//! a user need not know each runtime's flag: Node gets `--perf-prof` in `NODE_OPTIONS` (which
//! Node takes there), CPython 3.13+ `PYTHON_PERF_JIT_SUPPORT=1`, .NET
//! `DOTNET_PerfMapEnabled=2` (jitdump only). A runtime whose writer the user turned on already
//! (in its variable, or on the command line) is left as the user set it, and so are all of them
//! with `--no-runtime-flags`.
//!
//! What a runtime writes because perfclock turned it on is perfclock's to remove once the
//! recording is post-processed: Node's `jit-<pid>.dump` and `isolate-*-<pid>-v8.log` in its
//! working directory, CPython's and .NET's `/tmp/jit-<pid>.dump` ([`remove_caused`]).

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use perfclock_os::untrusted_file::Root;

use perfclock_inject::{DumpOutcome, DumpReport};

/// A runtime whose writer `record` turns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Runtime {
    Node,
    CPython,
    DotNet,
}

impl Runtime {
    /// Whether a process of command name `command` (`/proc/PID/comm`) runs this runtime.
    fn runs(self, command: &str) -> bool {
        match self {
            Runtime::Node => command == "node" || command == "nodejs",
            Runtime::CPython => command.starts_with("python"),
            Runtime::DotNet => command == "dotnet",
        }
    }
}

/// The variables a launched command gets, and the runtimes they turn on.
#[derive(Debug, Default)]
pub(super) struct RuntimeFlags {
    pub(super) env: Vec<(&'static str, OsString)>,
    pub(super) turned_on: Vec<Runtime>,
}

/// The flags for `command` given the environment `var` reads.
pub(super) fn runtime_flags(
    command: &[OsString],
    var: impl Fn(&str) -> Option<OsString>,
) -> RuntimeFlags {
    let mut flags = RuntimeFlags::default();
    let said = |word: &str| command.iter().any(|arg| arg == word);
    let node_options = var("NODE_OPTIONS").unwrap_or_default();
    let in_node_options = node_options
        .to_string_lossy()
        .split_whitespace()
        .any(|option| option == "--perf-prof" || option == "--perf-basic-prof");
    if !in_node_options && !said("--perf-prof") && !said("--perf-basic-prof") {
        let mut value = node_options;
        if !value.is_empty() {
            value.push(" ");
        }
        value.push("--perf-prof");
        flags.env.push(("NODE_OPTIONS", value));
        flags.turned_on.push(Runtime::Node);
    }
    let python_set = ["PYTHON_PERF_JIT_SUPPORT", "PYTHONPERFSUPPORT"]
        .iter()
        .any(|name| var(name).is_some());
    let python_said = command
        .windows(2)
        .any(|pair| pair[0] == "-X" && (pair[1] == "perf" || pair[1] == "perf_jit"));
    if !python_set && !python_said {
        flags.env.push(("PYTHON_PERF_JIT_SUPPORT", "1".into()));
        flags.turned_on.push(Runtime::CPython);
    }
    if var("DOTNET_PerfMapEnabled").is_none() && var("COMPlus_PerfMapEnabled").is_none() {
        flags.env.push(("DOTNET_PerfMapEnabled", "2".into()));
        flags.turned_on.push(Runtime::DotNet);
    }
    flags
}

/// Removes what the runtimes perfclock turned on wrote for the dumps of `reports` that were
/// copied: the dump itself (the file read, by device and inode), and Node's isolate logs
/// beside it (its pid in their names, its owner's, written since `started`). A link is removed
/// as a link, never followed; anything else is left. What could not be removed is returned,
/// with why.
pub(super) fn remove_caused(
    turned_on: &[Runtime],
    reports: &[DumpReport],
    started: SystemTime,
) -> Vec<(PathBuf, std::io::Error)> {
    let mut failed = Vec::new();
    for report in reports {
        let (DumpOutcome::Copied { .. }, Some(command), Some((uid, id))) =
            (&report.outcome, &report.command, report.file)
        else {
            continue;
        };
        let Some(runtime) = turned_on.iter().find(|runtime| runtime.runs(command)) else {
            continue;
        };
        // Only a dump of a process here (its path is this mount namespace's).
        if Root::of_process(report.process) != Root::Here {
            continue;
        }
        let mut doomed = Vec::new();
        if file_id(&report.path).is_some_and(|(_, found)| found == id) {
            doomed.push(report.path.clone());
        }
        if *runtime == Runtime::Node {
            doomed.extend(isolate_logs(&report.path, uid, started));
        }
        for path in doomed {
            if let Err(error) = std::fs::remove_file(&path) {
                failed.push((path, error));
            }
        }
    }
    failed
}

/// A regular file's owner and (device, inode), not following a link.
fn file_id(path: &Path) -> Option<(u32, (u64, u64))> {
    let metadata = std::fs::symlink_metadata(path).ok()?;
    metadata
        .is_file()
        .then(|| (metadata.uid(), (metadata.dev(), metadata.ino())))
}

/// Node's `isolate-0x...-<pid>-v8.log` files beside its dump `dump` (`jit-<pid>.dump`): regular,
/// owned by `uid`, written since `started`.
fn isolate_logs(dump: &Path, uid: u32, started: SystemTime) -> Vec<PathBuf> {
    let (Some(dir), Some(pid)) = (dump.parent(), perfclock_perfdata::jitdump_pid(dump)) else {
        return Vec::new();
    };
    let suffix = format!("-{pid}-v8.log");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("isolate-0x") && name.ends_with(&suffix)
        })
        .map(|entry| entry.path())
        .filter(|path| {
            let Ok(metadata) = std::fs::symlink_metadata(path) else {
                return false;
            };
            metadata.is_file()
                && metadata.uid() == uid
                && metadata
                    .modified()
                    .is_ok_and(|modified| modified >= started)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(text: &str) -> OsString {
        OsString::from(text)
    }

    fn flags(command: &[&str], env: &[(&str, &str)]) -> RuntimeFlags {
        let command: Vec<OsString> = command.iter().map(|a| os(a)).collect();
        runtime_flags(&command, |name| {
            env.iter().find(|(n, _)| *n == name).map(|(_, v)| os(v))
        })
    }

    #[test]
    fn every_runtime_is_turned_on_unless_the_user_did() {
        let all = flags(&["node", "app.js"], &[]);
        assert_eq!(
            all.turned_on,
            [Runtime::Node, Runtime::CPython, Runtime::DotNet]
        );
        assert_eq!(all.env[0], ("NODE_OPTIONS", os("--perf-prof")));
        let kept = flags(
            &["node", "app.js"],
            &[("NODE_OPTIONS", "--max-old-space-size=64")],
        );
        assert_eq!(
            kept.env[0],
            ("NODE_OPTIONS", os("--max-old-space-size=64 --perf-prof"))
        );
        for (command, env) in [
            (&["node", "--perf-prof", "a.js"][..], &[][..]),
            (
                &["node", "a.js"],
                &[("NODE_OPTIONS", "--perf-basic-prof")][..],
            ),
        ] {
            assert!(!flags(command, env).turned_on.contains(&Runtime::Node));
        }
        for (command, env) in [
            (&["python3", "-X", "perf", "a.py"][..], &[][..]),
            (&["python3", "a.py"], &[("PYTHONPERFSUPPORT", "1")][..]),
            (
                &["python3", "a.py"],
                &[("PYTHON_PERF_JIT_SUPPORT", "0")][..],
            ),
        ] {
            assert!(!flags(command, env).turned_on.contains(&Runtime::CPython));
        }
        let dotnet = flags(&["dotnet", "a.dll"], &[("COMPlus_PerfMapEnabled", "1")]);
        assert!(!dotnet.turned_on.contains(&Runtime::DotNet));
    }

    #[test]
    fn runtimes_are_told_by_their_command_names() {
        assert!(Runtime::Node.runs("node"));
        assert!(Runtime::CPython.runs("python3.13"));
        assert!(!Runtime::CPython.runs("java"));
        assert!(Runtime::DotNet.runs("dotnet"));
    }
}
