//! Every function the docs call async-signal-safe (the C header's and the Rust API's), called
//! from a signal handler in every mode this machine has: kernel, paravirt, calibrated, shared,
//! and shared with a stopped and with a dead server.
//!
//! One list ([`SIGNAL_SAFE`]) holds every such function, and [`documented_functions`] reads the
//! header and the Rust sources for the functions they document as "Async-signal-safe": the two
//! must be the same set, so a function cannot be documented signal-safe without joining this
//! test.
//!
//! Each mode runs in a child process (this binary again, `PERFCLOCK_SIGSAFE_ROLE=<mode>`), which
//! opens the clock from ordinary code, then installs a seccomp filter on its main thread that
//! traps every system call but `rt_sigreturn`, `exit`, `exit_group` and `write` to stdout, and
//! a counting allocator. A timer set before the filter raises SIGALRM; its handler calls every
//! function of the list once. The child reports, per function, the allocations it made and the
//! system calls it tried (the SIGSYS handler records each, and the call fails with ENOSYS), and
//! whether the result made sense in that mode; any allocation or system call fails the test.
//! The calibrator's thread is not filtered (seccomp filters are per thread): it blocks every
//! signal, so the handler can only run on the filtered main thread, which the report checks.
//!
//! x86_64 Linux only (the filter checks the audit architecture, and the test reads the
//! syscall number from `siginfo_t`'s x86_64 layout).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::c_int;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use perfclock_ffi as c;
use perfclock_testutil::{skip, Need};

const BIN: &str = env!("CARGO_BIN_EXE_perfclock");
const ROLE_ENV: &str = "PERFCLOCK_SIGSAFE_ROLE";
const TEST: &str = "signal_safety";

// ---- the allocator and the per-thread "in the handler" flag ----

thread_local! {
    /// Set while this thread runs the handler's calls: allocations then count.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
    /// Set on the thread that installed the seccomp filter.
    static FILTERED: Cell<bool> = const { Cell::new(false) };
}

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

struct CountingAllocator;

impl CountingAllocator {
    fn count() {
        if IN_HANDLER.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting touches only an
// atomic and a const-initialised thread-local without a destructor (no allocation).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::count();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::count();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::count();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        Self::count();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

// ---- the list ----

/// What a call returned, judged in the mode at hand.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Sane,
    Wrong,
    /// The function's receiver does not exist in this mode (a paravirt clock in shared mode).
    NotInMode,
}

/// What the handler knows of the mode.
struct Expect {
    mode: c_int,
    /// The bound is `u64::MAX` (a stale shared page).
    bound_unknown: bool,
}

fn sane(ok: bool) -> Verdict {
    if ok {
        Verdict::Sane
    } else {
        Verdict::Wrong
    }
}

fn bound_sane(bound: u64, expect: &Expect) -> Verdict {
    sane((bound == u64::MAX) == expect.bound_unknown)
}

fn clock() -> &'static perfclock::Clock {
    perfclock::global().expect("opened before the filter")
}

static MARKERS: AtomicUsize = AtomicUsize::new(0);

type Call = fn(&Expect) -> Verdict;

/// Every function documented async-signal-safe, by the name the docs give it.
const SIGNAL_SAFE: &[(&str, Call)] = &[
    ("perfclock_now_ns", |_| sane(c::perfclock_now_ns() != 0)),
    ("perfclock_now_ns_ordered", |_| {
        sane(c::perfclock_now_ns_ordered() != 0)
    }),
    ("perfclock_try_now_ns", |_| {
        let mut out = 0u64;
        // SAFETY: a live out-pointer.
        let rc = unsafe { c::perfclock_try_now_ns(&mut out) };
        sane(rc == c::PERFCLOCK_OK && out != 0)
    }),
    ("perfclock_mode", |e| sane(c::perfclock_mode() == e.mode)),
    ("perfclock_error_bound_ns", |e| {
        bound_sane(c::perfclock_error_bound_ns(), e)
    }),
    ("perfclock_read_counter", |_| {
        sane(c::perfclock_read_counter() != 0)
    }),
    ("perfclock_cycles_to_ns", |_| {
        sane(c::perfclock_cycles_to_ns(c::perfclock_read_counter()) != 0)
    }),
    ("perfclock_ns_to_cycles", |_| {
        sane(c::perfclock_ns_to_cycles(c::perfclock_now_ns()) != 0)
    }),
    ("perfclock_strerror", |_| {
        sane(!c::perfclock_strerror(c::PERFCLOCK_OK).is_null())
    }),
    ("perfclock_marker", |_| {
        let markers = MARKERS.load(Ordering::Relaxed) as *mut c::perfclock_markers;
        let now = c::perfclock_now_ns();
        // SAFETY: a live handle opened before the filter, a NUL-terminated name.
        let rc = unsafe { c::perfclock_marker(markers, c"in a handler".as_ptr(), now, now) };
        sane(rc == c::PERFCLOCK_OK)
    }),
    ("perfclock::try_now_ns", |_| {
        sane(perfclock::try_now_ns().is_some())
    }),
    ("perfclock::try_now_ns_ordered", |_| {
        sane(perfclock::try_now_ns_ordered().is_some())
    }),
    ("perfclock::mode", |_| sane(perfclock::mode().is_some())),
    ("perfclock::error_bound_ns", |e| {
        bound_sane(perfclock::error_bound_ns(), e)
    }),
    ("perfclock::global", |_| sane(perfclock::global().is_some())),
    ("CounterStamp::now", |_| {
        sane(perfclock::CounterStamp::now().cycles() != 0)
    }),
    ("CounterStamp::ns", |_| {
        sane(perfclock::CounterStamp::now().ns().is_some())
    }),
    ("Clock::now_ns", |_| sane(clock().now_ns().is_ok())),
    ("Clock::now_ns_ordered", |_| {
        sane(clock().now_ns_ordered().is_ok())
    }),
    ("Clock::cycles_to_ns", |_| {
        sane(clock().cycles_to_ns(c::perfclock_read_counter()).is_ok())
    }),
    ("Clock::ns_to_cycles", |_| {
        sane(clock().ns_to_cycles(c::perfclock_now_ns()).is_ok())
    }),
    ("Clock::read_counter", |_| {
        sane(clock().read_counter().is_some())
    }),
    ("Clock::mode", |_| {
        let _ = clock().mode();
        Verdict::Sane
    }),
    ("Clock::error_bound_ns", |e| {
        bound_sane(clock().error_bound_ns(), e)
    }),
    ("ParavirtClock::error_bound_ns", |e| {
        match clock().paravirt() {
            Some(paravirt) => bound_sane(paravirt.error_bound_ns(), e),
            None => Verdict::NotInMode,
        }
    }),
    ("CalibratedClock::error_bound_ns", |e| {
        match clock().calibrated() {
            Some(calibrated) => bound_sane(calibrated.error_bound_ns(), e),
            None => Verdict::NotInMode,
        }
    }),
    ("fork_gate::generation", |_| {
        let _ = perfclock_calib::fork_gate::generation();
        Verdict::Sane
    }),
];

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

// ---- the child: the handler under the filter ----

/// Per function of the list: allocations, system calls tried, the verdict.
static ALLOCATED: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
static SYSCALLS: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
static LAST_SYSCALL: [AtomicI32; 64] = [const { AtomicI32::new(-1) }; 64];
static VERDICT: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
/// The function of the list running now (for the SIGSYS handler).
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static EXPECTED_MODE: AtomicI32 = AtomicI32::new(0);
static BOUND_UNKNOWN: AtomicBool = AtomicBool::new(false);
static HANDLER_DONE: AtomicBool = AtomicBool::new(false);
static HANDLER_UNFILTERED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_alarm(_: c_int) {
    if !FILTERED.with(Cell::get) {
        HANDLER_UNFILTERED.store(true, Ordering::Relaxed);
    }
    let expect = Expect {
        mode: EXPECTED_MODE.load(Ordering::Relaxed),
        bound_unknown: BOUND_UNKNOWN.load(Ordering::Relaxed),
    };
    for (index, (_, call)) in SIGNAL_SAFE.iter().enumerate() {
        CURRENT.store(index, Ordering::Relaxed);
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        IN_HANDLER.with(|flag| flag.set(true));
        let verdict = call(&expect);
        IN_HANDLER.with(|flag| flag.set(false));
        ALLOCATED[index].store(
            ALLOCATIONS.load(Ordering::Relaxed) - before,
            Ordering::Relaxed,
        );
        VERDICT[index].store(verdict as u64, Ordering::Relaxed);
    }
    HANDLER_DONE.store(true, Ordering::Release);
}

extern "C" fn on_sigsys(_: c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // `siginfo_t._sigsys` on x86_64: `_call_addr` at 16, `_syscall` (int) at 24.
    // SAFETY: the kernel hands a live siginfo_t of SIGSYS, whose layout this reads.
    let number = unsafe { info.cast::<u8>().add(24).cast::<i32>().read() };
    let index = CURRENT.load(Ordering::Relaxed);
    SYSCALLS[index].fetch_add(1, Ordering::Relaxed);
    LAST_SYSCALL[index].store(number, Ordering::Relaxed);
}

fn install(signal: c_int, handler: usize, siginfo: bool) {
    // SAFETY: a zeroed sigaction is valid; the handler is an extern "C" fn of the right shape
    // for the flags; `sigaction` reads it before returning.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = if siginfo { libc::SA_SIGINFO } else { 0 };
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(libc::sigaction(signal, &action, std::ptr::null_mut()), 0);
    }
}

/// Traps every system call of this thread (SIGSYS, the call fails with ENOSYS) except those
/// the handler's return and the report need.
fn install_filter() {
    const ARCH_OFFSET: u32 = 4;
    const ARG0_OFFSET: u32 = 16;
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    let load = |offset| libc::sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: offset,
    };
    let jump_eq = |value: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k: value,
    };
    let ret = |value: u32| libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k: value,
    };
    // Jump offsets count from the next instruction; index 10 traps, index 11 allows.
    let program = [
        load(ARCH_OFFSET),
        jump_eq(AUDIT_ARCH_X86_64, 1, 0),
        ret(libc::SECCOMP_RET_KILL_PROCESS),
        load(0),
        jump_eq(libc::SYS_rt_sigreturn as u32, 6, 0),
        jump_eq(libc::SYS_exit as u32, 5, 0),
        jump_eq(libc::SYS_exit_group as u32, 4, 0),
        jump_eq(libc::SYS_write as u32, 0, 2),
        // write: to stdout only.
        load(ARG0_OFFSET),
        jump_eq(1, 1, 0),
        ret(libc::SECCOMP_RET_TRAP),
        ret(libc::SECCOMP_RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    // SAFETY: prctl and seccomp with a live, well-formed program that the kernel copies.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &fprog as *const libc::sock_fprog
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
    FILTERED.with(|flag| flag.set(true));
}

/// Formats into a fixed buffer: the report is written under the filter, with no allocation.
struct Report {
    bytes: [u8; 8192],
    len: usize,
}

impl std::fmt::Write for Report {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.bytes.len() {
            return Err(std::fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

fn child(role: &str) -> ! {
    let (mode, bound_unknown) = match role {
        "kernel" => (c::PERFCLOCK_MODE_KERNEL, false),
        "paravirt" => (c::PERFCLOCK_MODE_PARAVIRT, false),
        "calibrated" => (c::PERFCLOCK_MODE_CALIBRATED, false),
        "shared" => (c::PERFCLOCK_MODE_SHARED, false),
        "shared-stopped" | "shared-dead" => (c::PERFCLOCK_MODE_SHARED, true),
        other => panic!("unknown role {other}"),
    };
    let rc = c::perfclock_init();
    let got = c::perfclock_mode();
    if rc != c::PERFCLOCK_OK || got != mode {
        println!("MODE {got} rc {rc}");
        std::process::exit(0);
    }
    let dir = std::env::var_os("PERFCLOCK_SIGSAFE_DIR").expect("a directory");
    let dir =
        std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str())).unwrap();
    let mut markers = std::ptr::null_mut();
    // SAFETY: a NUL-terminated directory and a live out-pointer.
    let opened = unsafe { c::perfclock_markers_open(dir.as_ptr(), &mut markers) };
    assert_eq!(opened, c::PERFCLOCK_OK);
    // The thread's first marker allocates its buffer: from ordinary code, as the header says.
    let now = c::perfclock_now_ns();
    // SAFETY: a live handle and a NUL-terminated name.
    let marked = unsafe { c::perfclock_marker(markers, c"ordinary".as_ptr(), now, now) };
    assert_eq!(marked, c::PERFCLOCK_OK);
    MARKERS.store(markers as usize, Ordering::Relaxed);
    EXPECTED_MODE.store(mode, Ordering::Relaxed);
    BOUND_UNKNOWN.store(bound_unknown, Ordering::Relaxed);
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    install(libc::SIGALRM, on_alarm as *const () as usize, false);
    install(libc::SIGSYS, on_sigsys as *const () as usize, true);
    let timer = libc::itimerval {
        it_interval: libc::timeval {
            tv_sec: 0,
            tv_usec: 0,
        },
        it_value: libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        },
    };
    // SAFETY: a live itimerval; the old value is not asked for.
    let armed = unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) };
    assert_eq!(armed, 0);
    install_filter();
    // Wait for the handler without a system call: count counter ticks (about 30 s at most).
    let start = c::perfclock_read_counter();
    while !HANDLER_DONE.load(Ordering::Acquire)
        && c::perfclock_read_counter().wrapping_sub(start) < 100_000_000_000
    {
        std::hint::spin_loop();
    }
    let mut report = Report {
        bytes: [0; 8192],
        len: 0,
    };
    let _ = writeln!(
        report,
        "DONE {} unfiltered {}",
        HANDLER_DONE.load(Ordering::Acquire),
        HANDLER_UNFILTERED.load(Ordering::Relaxed)
    );
    for (index, (name, _)) in SIGNAL_SAFE.iter().enumerate() {
        let _ = writeln!(
            report,
            "FN {name} allocations {} syscalls {} last {} verdict {}",
            ALLOCATED[index].load(Ordering::Relaxed),
            SYSCALLS[index].load(Ordering::Relaxed),
            LAST_SYSCALL[index].load(Ordering::Relaxed),
            VERDICT[index].load(Ordering::Relaxed)
        );
    }
    // SAFETY: a live buffer of `len` bytes; `_exit` runs no exit handler (they may make calls
    // the filter traps).
    unsafe {
        libc::write(1, report.bytes.as_ptr().cast(), report.len);
        libc::_exit(0);
    }
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

struct Running {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

/// Starts the child of `role`; `None` (after its MODE line) if the machine gave another mode.
fn spawn(role: &str, env: &[(&str, &std::ffi::OsStr)], dir: &Path) -> Result<Running, String> {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .env(ROLE_ENV, role)
        .env("PERFCLOCK_SIGSAFE_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    if line.trim() == "READY" {
        Ok(Running { child, out })
    } else {
        let _ = child.wait();
        Err(line.trim().to_owned())
    }
}

/// Lets the child's handler run; the failures its report shows (empty: none).
fn judge(role: &str, mut running: Running) -> Vec<String> {
    let stdin = running.child.stdin.as_mut().unwrap();
    stdin.write_all(b"GO\n").unwrap();
    let mut report = String::new();
    std::io::Read::read_to_string(&mut running.out, &mut report).unwrap();
    let status = running.child.wait().unwrap();
    let mut failures = Vec::new();
    if !status.success() {
        failures.push(format!(
            "{role}: the child ended with {status}; it said: {report}"
        ));
        return failures;
    }
    if !report.contains("DONE true unfiltered false") {
        failures.push(format!(
            "{role}: the handler did not run on the filtered thread: {report}"
        ));
    }
    let mut seen = 0;
    for line in report.lines().filter(|l| l.starts_with("FN ")) {
        seen += 1;
        let words: Vec<&str> = line.split_whitespace().collect();
        let (name, allocations, syscalls, last, verdict) =
            (words[1], words[3], words[5], words[7], words[9]);
        if allocations != "0" {
            failures.push(format!("{role}: {name} allocated {allocations} times"));
        }
        if syscalls != "0" {
            failures.push(format!(
                "{role}: {name} made {syscalls} system calls (the last: number {last})"
            ));
        }
        if verdict == (Verdict::Wrong as u64).to_string() {
            failures.push(format!("{role}: {name} returned a wrong value"));
        }
    }
    if seen != SIGNAL_SAFE.len() {
        failures.push(format!("{role}: {seen} functions reported: {report}"));
    }
    println!("{role}: {seen} functions called from the handler");
    failures
}

fn run_mode(role: &str, env: &[(&str, &std::ffi::OsStr)], need: Need, dir: &Path) -> Vec<String> {
    match spawn(role, env, dir) {
        Ok(running) => judge(role, running),
        Err(line) => {
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
    let mut listed: Vec<String> = SIGNAL_SAFE.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(
        listed, documented,
        "the functions documented \"{LABEL}\" (right) and the list this test calls (left) differ"
    );
    println!(
        "{} functions documented async-signal-safe, all listed",
        listed.len()
    );

    if !cfg!(target_arch = "x86_64") {
        skip(
            TEST,
            Need::X86_64,
            "the filter reads x86_64's siginfo layout",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let off = std::ffi::OsStr::new("off");
    let mut failures = Vec::new();
    failures.extend(run_mode("kernel", &[], Need::KernelMode, dir.path()));
    failures.extend(run_mode("paravirt", &[], Need::ParavirtMode, dir.path()));
    failures.extend(run_mode(
        "calibrated",
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
    let opened = |role: &str| match spawn(role, &env, dir) {
        Ok(running) => running,
        Err(line) => panic!("{role}: the clock opened as {line}, not in shared mode"),
    };
    let (live, stopped, dead) = (
        opened("shared"),
        opened("shared-stopped"),
        opened("shared-dead"),
    );
    let mut failures = judge("shared", live);
    let stale = Duration::from_nanos(perfclock_core::shared_page::STALE_AFTER_NS)
        + Duration::from_millis(700);
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGSTOP) };
    std::thread::sleep(stale);
    failures.extend(judge("shared-stopped", stopped));
    drop(server);
    failures.extend(judge("shared-dead", dead));
    failures
}

fn main() {
    match std::env::var(ROLE_ENV) {
        Ok(role) => child(&role),
        Err(_) => parent(),
    }
}
