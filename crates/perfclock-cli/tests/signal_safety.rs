//! Every function the docs call async-signal-safe (the C header's and the Rust API's), called
//! from a signal handler in every mode this machine has: kernel, paravirt, calibrated, shared,
//! and shared with a stopped and with a dead server.
//!
//! The proof is `perfclock-signal-safety`'s (its crate docs say how: a child process per mode,
//! a seccomp filter that traps every system call on the thread the handler runs on, a counting
//! allocator); the real-kernel test bed runs the same proof in kernel mode, which our machines
//! do not have. Here, its list of functions ([`perfclock_signal_safety::listed`]) and the
//! functions the header and the Rust sources document as "Async-signal-safe"
//! ([`documented_functions`]) must be the same set, so a function cannot be documented
//! signal-safe without joining the proof.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use perfclock_signal_safety::{start, CountingAllocator, Role, Running, Started};
use perfclock_testutil::{skip, Need};

const BIN: &str = env!("CARGO_BIN_EXE_perfclock");
const TEST: &str = "signal_safety";

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

// ---- what the docs call async-signal-safe ----

/// The label a function's documentation carries when it is async-signal-safe.
const LABEL: &str = "Async-signal-safe";

fn workspace_file(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The C header's functions whose comment carries [`LABEL`].
fn documented_in_header(header: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut comment = String::new();
    let mut in_comment = false;
    for line in header.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("/*") {
            comment.clear();
            in_comment = true;
        }
        if in_comment {
            comment.push_str(trimmed);
            comment.push(' ');
            in_comment = !trimmed.ends_with("*/");
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let name = trimmed
            .split('(')
            .next()
            .and_then(|head| head.split([' ', '*']).next_back())
            .filter(|name| name.starts_with("perfclock_") && trimmed.contains('('));
        if let Some(name) = name {
            if comment.contains(LABEL) {
                found.push(name.to_owned());
            }
        }
        comment.clear();
    }
    found
}

/// The Rust functions (`pub fn`, by `Type::name` or `module::name`) whose doc comment carries
/// [`LABEL`].
fn documented_in_rust(source: &str, module: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut doc = String::new();
    let mut owner: Option<String> = None;
    for line in source.lines() {
        if let Some(rest) = line.strip_prefix("impl") {
            // `impl Clock {`, `impl<'a> PageReader<'a> {`; not `impl Trait for Type`.
            let rest = rest.trim_start_matches(|c: char| c != ' ').trim();
            owner = (!rest.contains(" for "))
                .then(|| rest.split(['<', ' ', '{']).next().unwrap_or("").to_owned());
        } else if line.starts_with('}') {
            owner = None;
        }
        let trimmed = line.trim();
        if let Some(text) = trimmed.strip_prefix("///") {
            doc.push_str(text);
            doc.push(' ');
            continue;
        }
        if trimmed.starts_with("#[") {
            continue;
        }
        let signature = trimmed
            .strip_prefix("pub fn ")
            .or_else(|| trimmed.strip_prefix("pub const fn "))
            .or_else(|| trimmed.strip_prefix("pub extern \"C\" fn "));
        if let Some(signature) = signature {
            if doc.contains(LABEL) {
                let name = signature.split(['(', '<']).next().unwrap_or("");
                let prefix = if line.starts_with("    ") {
                    owner.clone().unwrap_or_default()
                } else {
                    module.to_owned()
                };
                found.push(format!("{prefix}::{name}"));
            }
        }
        doc.clear();
    }
    found
}

fn documented_functions() -> Vec<String> {
    let mut names =
        documented_in_header(&workspace_file("crates/perfclock-ffi/include/perfclock.h"));
    for (file, module) in [
        ("src/lib.rs", "perfclock"),
        ("src/clock.rs", "clock"),
        ("src/paravirt.rs", "paravirt"),
        ("src/shared_page.rs", "shared_page"),
        ("crates/perfclock-calib/src/clock.rs", "calib::clock"),
        ("crates/perfclock-calib/src/fork_gate.rs", "fork_gate"),
    ] {
        names.extend(documented_in_rust(&workspace_file(file), module));
    }
    names.sort();
    names
}

// ---- the parent ----

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too, without letting it refresh its heartbeat first.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server(path: &Path) -> Server {
    let server = Server(
        Command::new(BIN)
            .args(["serve", "--path"])
            .arg(path)
            .env("PERFCLOCK_PARAVIRT", "off")
            .stderr(Stdio::null())
            .spawn()
            .expect("run perfclock serve"),
    );
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if perfclock::shared_page::probe(path).is_ok_and(|info| info.server_pid == server.0.id()) {
            return server;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "the server's page never became valid: {:?}",
        perfclock::shared_page::probe(path)
    );
}

/// Starts the child of `role` from this test binary.
fn spawn(role: Role, env: &[(&str, &std::ffi::OsStr)], dir: &Path) -> Started {
    let exe = std::env::current_exe().expect("this test binary's path");
    start(&exe, role, env, dir).unwrap_or_else(|error| panic!("{error}"))
}

/// Lets the child's handler run; the failures its report shows (empty: none).
fn judge(running: Running) -> Vec<String> {
    let judgement = running.judge();
    println!("{}: {judgement}", judgement.role);
    judgement.failures
}

fn run_mode(role: Role, env: &[(&str, &std::ffi::OsStr)], need: Need, dir: &Path) -> Vec<String> {
    match spawn(role, env, dir) {
        Started::Ready(running) => judge(running),
        Started::OtherMode(line) => {
            skip(
                &format!("{TEST} ({role})"),
                need,
                format!("the clock opened as {line}"),
            );
            Vec::new()
        }
    }
}

fn parent() {
    let documented = documented_functions();
    let mut listed: Vec<String> = perfclock_signal_safety::listed()
        .map(str::to_owned)
        .collect();
    listed.sort();
    assert_eq!(
        listed, documented,
        "the functions documented \"{LABEL}\" (right) and the list the proof calls (left) differ"
    );
    println!(
        "{} functions documented async-signal-safe, all listed",
        listed.len()
    );

    if let Err(why) = perfclock_signal_safety::supported() {
        skip(TEST, Need::X86_64, why);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let off = std::ffi::OsStr::new("off");
    let mut failures = Vec::new();
    failures.extend(run_mode(Role::Kernel, &[], Need::KernelMode, dir.path()));
    failures.extend(run_mode(
        Role::Paravirt,
        &[],
        Need::ParavirtMode,
        dir.path(),
    ));
    failures.extend(run_mode(
        Role::Calibrated,
        &[("PERFCLOCK_PARAVIRT", off), ("PERFCLOCK_SHARED_PAGE", off)],
        Need::CalibratedMode,
        dir.path(),
    ));
    failures.extend(shared_modes(dir.path()));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("1 passed, 0 failed");
}

/// Shared mode with a live server, then with the server stopped (SIGSTOP) and dead (SIGKILL),
/// each past the stale time; the clients opened while it was live.
fn shared_modes(dir: &Path) -> Vec<String> {
    let page: PathBuf = dir.join("clock");
    let server = start_server(&page);
    let env = [
        ("PERFCLOCK_PARAVIRT", std::ffi::OsStr::new("off")),
        ("PERFCLOCK_SHARED_PAGE", page.as_os_str()),
    ];
    let opened = |role: Role| match spawn(role, &env, dir) {
        Started::Ready(running) => running,
        Started::OtherMode(line) => {
            panic!("{role}: the clock opened as {line}, not in shared mode")
        }
    };
    let (live, stopped, dead) = (
        opened(Role::Shared),
        opened(Role::SharedStopped),
        opened(Role::SharedDead),
    );
    let mut failures = judge(live);
    let stale = Duration::from_nanos(perfclock_core::shared_page::STALE_AFTER_NS)
        + Duration::from_millis(700);
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGSTOP) };
    std::thread::sleep(stale);
    failures.extend(judge(stopped));
    drop(server);
    failures.extend(judge(dead));
    failures
}

fn main() {
    perfclock_signal_safety::child_if_asked();
    parent();
}
