//! `perfclock serve` end to end: a real server, client processes that map its page, refused
//! pages fed to real clients (the doctor), the server killed (clients' bound turns unknown, new
//! clients calibrate on their own) and restarted (the conversion continues: no reading goes
//! back, kernel stamps stay inside the bound), and readings handed between processes.
//!
//! Clients are this test binary run again with `ROLE` set (each test dispatches on it first).
//! Where the kernel publishes the conversion itself (kernel mode) the server has nothing to
//! serve: the test says so on stderr and checks only that the server says so too.
#![allow(unsafe_code)]

use std::fs;
use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use perfclock::shared_page::probe;
use perfclock_core::counter;
use perfclock_core::shared_page::{FILE_BYTES, HEADER_OFFSET, STALE_AFTER_NS};
use perfclock_testutil::handoff::{HandoffCell, Reading, Verdict, HANDOFF_CELL_BYTES};
use perfclock_testutil::{is_root, skip, Need};

const BIN: &str = env!("CARGO_BIN_EXE_perfclock");
const ROLE: &str = "PERFCLOCK_SERVE_TEST_ROLE";
/// The directory a client role coordinates in (stop file, handoff file).
const DIR: &str = "PERFCLOCK_SERVE_TEST_DIR";
/// Readings handed from one process to another that must not go back.
const HANDOFFS: u64 = 1_000_000;
/// Kernel stamps per kind checked right after the restart (3 kinds: about 10^5 in all).
const VERIFY_PER_KIND: usize = 33_334;
/// How long a spinning role sleeps after each batch of 10,000 reads.
const PAUSE: Duration = Duration::from_micros(300);
/// A role that loops gives up after this long (the parent's assertions then fail).
const ROLE_DEADLINE: Duration = Duration::from_secs(600);

fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

fn dir_of_role() -> PathBuf {
    PathBuf::from(std::env::var_os(DIR).expect("role directory"))
}

/// This test binary, running `test` as client `role` against the page at `page`.
fn client(test: &str, role: &str, page: &Path, dir: &Path) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([test, "--exact", "--nocapture", "--include-ignored"])
        .args(["--test-threads", "1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .env("PERFCLOCK_SHARED_PAGE", page)
        // Shared mode is under test: not the paravirt mode a KVM guest picks first.
        .env("PERFCLOCK_PARAVIRT", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// The value after `key` on the line of `output` starting with `line`.
fn field(output: &str, line: &str, key: &str) -> String {
    // The harness may print "test NAME ... " before a role's first line.
    let found = output
        .lines()
        .find_map(|l| l.find(line).map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no {line} line in {output:?}"));
    let mut words = found.split_whitespace();
    words.find(|w| *w == key);
    words
        .next()
        .unwrap_or_else(|| panic!("no {key} in {found:?}"))
        .to_owned()
}

fn number(output: &str, line: &str, key: &str) -> u64 {
    field(output, line, key).parse().unwrap()
}

struct Server {
    child: Child,
}

impl Server {
    /// Starts a server on `path` and waits until a client would accept its page.
    fn start(path: &Path) -> Server {
        let child = Command::new(BIN)
            .args(["serve", "--path"])
            .arg(path)
            // The calibrated page is under test, not the offset a KVM guest publishes instead.
            .env("PERFCLOCK_PARAVIRT", "off")
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run perfclock serve");
        let server = Server { child };
        let start = Instant::now();
        loop {
            match probe(path) {
                Ok(info) if info.server_pid == server.child.id() => return server,
                _ if start.elapsed() > Duration::from_secs(30) => {
                    panic!("the server's page never became valid: {:?}", probe(path))
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether this kernel withholds the conversion (else there is nothing to serve).
fn calibrated_machine() -> bool {
    match perfclock::Clock::open_kernel_only() {
        Ok(_) => false,
        Err(perfclock::Error::KernelWithholdsTime(_)) => true,
        Err(other) => panic!("no perf clock: {other}"),
    }
}

fn count_dir(path: &str) -> usize {
    fs::read_dir(path).unwrap().count()
}

/// Mappings of the server's page (a memfd the server names `perfclock-clock`).
fn page_maps() -> usize {
    fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|line| line.contains("/memfd:perfclock-clock"))
        .count()
}

/// Client: what `init()` costs and leaves behind.
fn role_init() {
    let (threads, fds, maps) = (
        count_dir("/proc/self/task"),
        count_dir("/proc/self/fd"),
        page_maps(),
    );
    let start = Instant::now();
    let clock = match perfclock::init() {
        Ok(clock) => clock,
        Err(error) => {
            println!("INIT error {error:?}");
            return;
        }
    };
    let init_ns = start.elapsed().as_nanos();
    let after = (
        count_dir("/proc/self/task"),
        count_dir("/proc/self/fd"),
        page_maps(),
    );
    let pid = clock.shared_page().map_or(0, |info| info.server_pid);
    println!(
        "INIT mode {:?} init_ns {init_ns} threads {threads} {} fds {fds} {} maps {maps} {} \
         server {pid} bound {}",
        clock.mode(),
        after.0,
        after.1,
        after.2,
        clock.error_bound_ns()
    );
}

/// Client: reads the clock (ordered) until the stop file appears, counting readings that went
/// back, and reporting the bound every 100 ms; then checks kernel stamps against the bound.
fn role_watch() {
    let dir = dir_of_role();
    let clock = perfclock::init().expect("a clock");
    println!("WATCH mode {:?}", clock.mode());
    let (mut last, mut backs, mut reads) = (0u64, 0u64, 0u64);
    let mut report = Instant::now();
    let start = Instant::now();
    while !dir.join("stop").exists() && start.elapsed() < ROLE_DEADLINE {
        for _ in 0..10_000 {
            let now = perfclock::now_ns_ordered();
            if now < last {
                backs += 1;
            }
            last = now;
            reads += 1;
        }
        // Leave the CPUs to the server and the other clients now and then (2 CPUs here).
        std::thread::sleep(PAUSE);
        if report.elapsed() > Duration::from_millis(100) {
            report = Instant::now();
            // The bound alone never reattaches (it is signal-safe): this ordinary-code call
            // follows a restarted server, as `perfclock::init()` does.
            clock.reattach_shared_page();
            println!("BOUND {}", clock.error_bound_ns());
        }
    }
    let verified = perfclock_check::verify(clock, VERIFY_PER_KIND).expect("kernel stamps");
    print!("{verified}");
    println!(
        "DONE backs {backs} reads {reads} events {} violations {} bound {}",
        verified.events(),
        verified.violations(),
        clock.error_bound_ns()
    );
}

/// The handoff file: one [`HandoffCell`] both processes map.
fn handoff_cell(dir: &Path) -> &'static HandoffCell {
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("handoff"))
        .unwrap();
    // SAFETY: maps HANDOFF_CELL_BYTES of a file at least that long, shared; never unmapped (the
    // process ends first).
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            HANDOFF_CELL_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    // SAFETY: a page-aligned mapping of a cell of atomics (zeroed: its default), accessed only
    // atomically by both processes, kept for the life of the process.
    unsafe { &*base.cast::<HandoffCell>() }
}

/// An ordered reading with its counter value: `perfclock::now_ns_ordered`'s read (one seqlock
/// section of the clock's page, `lfence; rdtsc` inside it), the counter kept.
fn ordered_reading(clock: &perfclock::Clock) -> Reading {
    let reading = clock
        .reader()
        .expect("shared mode reads a perf-format page")
        .read_with(counter::read_counter_ordered_or_zero)
        .expect("a clock reading");
    Reading {
        cycles: reading.cycles,
        ns: reading.ns(),
    }
}

/// Client: publishes ordered readings into the handoff cell until the consumer is done.
fn role_produce() {
    let dir = dir_of_role();
    let clock = perfclock::init().expect("a clock");
    println!("PRODUCE mode {:?}", clock.mode());
    let cell = handoff_cell(&dir);
    let start = Instant::now();
    while !dir.join("consumed").exists() && start.elapsed() < ROLE_DEADLINE {
        for _ in 0..10_000 {
            cell.publish(ordered_reading(clock));
        }
        std::thread::sleep(PAUSE);
    }
}

/// Client: takes the producer's readings and reads after each, judging each handoff
/// ([`Verdict`]), until it has [`HANDOFFS`] and the stop file appeared; then tells the producer.
fn role_consume() {
    let dir = dir_of_role();
    let clock = perfclock::init().expect("a clock");
    println!("CONSUME mode {:?}", clock.mode());
    let cell = handoff_cell(&dir);
    let (mut verdict, mut seen) = (Verdict::default(), 0u64);
    let start = Instant::now();
    while (verdict.handoffs < HANDOFFS || !dir.join("stop").exists())
        && start.elapsed() < ROLE_DEADLINE
    {
        for _ in 0..10_000 {
            let Some((sequence, theirs)) = cell.take() else {
                continue;
            };
            let ours = ordered_reading(clock);
            if sequence != seen {
                seen = sequence;
                verdict.record(theirs, ours);
            }
        }
        std::thread::sleep(PAUSE);
    }
    fs::write(dir.join("consumed"), b"").unwrap();
    println!("{}", verdict.line("HANDOFF"));
}

/// Client: opens the clock and sleeps (an idle process that embeds perfclock).
fn role_idle() {
    let clock = perfclock::init().expect("a clock");
    println!("IDLE mode {:?}", clock.mode());
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(3600));
}

/// Client: reads the clock (ordered, and its bound) until the stop file appears, counting
/// readings that went back.
fn role_survive() {
    let dir = dir_of_role();
    let clock = perfclock::init().expect("a clock");
    println!("SURVIVE mode {:?}", clock.mode());
    std::io::stdout().flush().unwrap();
    let (mut last, mut backs) = (0u64, 0u64);
    let start = Instant::now();
    while !dir.join("stop").exists() && start.elapsed() < ROLE_DEADLINE {
        for _ in 0..1_000 {
            let now = perfclock::now_ns_ordered();
            backs += u64::from(now < last);
            last = now;
        }
        let _ = clock.error_bound_ns();
        let _ = clock.reattach_shared_page();
        let _ = clock.shared_page();
        std::thread::sleep(PAUSE);
    }
    println!("DONE backs {backs}");
}

fn dispatch(role: &str) {
    match role {
        "init" => role_init(),
        "watch" => role_watch(),
        "produce" => role_produce(),
        "consume" => role_consume(),
        "idle" => role_idle(),
        "survive" => role_survive(),
        other => panic!("unknown role {other}"),
    }
}

/// Reads lines of a client's stdout until one satisfies `done`; the lines seen.
fn read_until(
    out: &mut BufReader<ChildStdout>,
    deadline: Duration,
    done: impl Fn(&str) -> bool,
) -> String {
    let start = Instant::now();
    let mut seen = String::new();
    let mut line = String::new();
    while start.elapsed() < deadline {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            panic!("client ended; it said: {seen}");
        }
        seen.push_str(&line);
        let line = line.trim();
        // The harness may print "test NAME ... " before a role's first line.
        let line = line.rsplit_once(" ... ").map_or(line, |(_, role)| role);
        if done(line) {
            return seen;
        }
    }
    panic!("no expected line within {deadline:?}; seen: {seen}");
}

fn run_init(page: &Path, dir: &Path) -> String {
    let output = client("serve_end_to_end", "init", page, dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// The doctor as a client of `page`: its output, asserting it exits successfully.
fn doctor(page: &Path) -> String {
    let output = Command::new(BIN)
        .args(["doctor", "10"])
        .env("PERFCLOCK_SHARED_PAGE", page)
        .env("PERFCLOCK_PARAVIRT", "off")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}\n{output:?}");
    stdout
}

fn write_page(path: &Path, bytes: &[u8], mode: u32) {
    let _ = fs::remove_file(path);
    fs::write(path, bytes).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Feeds the doctor (a real client) each kind of refused page and checks the reason it names
/// and that it calibrated on its own instead. `copy` is a copy of a live page taken at least
/// the stale time ago.
fn refused_pages_are_named(dir: &Path, live: &[u8], copy: &Path) {
    let mut cases: Vec<(&str, PathBuf)> = Vec::new();
    let bad = |name: &str, bytes: &[u8], mode: u32| {
        let path = dir.join(name);
        write_page(&path, bytes, mode);
        path
    };
    if is_root() {
        let path = bad("owner", live, 0o644);
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        cases.push(("other-owner", path));
    } else {
        skip(
            "refused pages: the other-owner page",
            Need::Root,
            "only root can give a file away",
        );
    }
    cases.push(("writable", bad("mode0666", live, 0o666)));
    cases.push(("truncated", bad("truncated", &live[..1000], 0o644)));
    let random: Vec<u8> = (0..FILE_BYTES as u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
        .collect();
    cases.push(("garbage", bad("random", &random, 0o644)));
    let mut other_boot = live.to_vec();
    other_boot[HEADER_OFFSET + 16] ^= 0xff;
    cases.push(("other-boot", bad("otherboot", &other_boot, 0o644)));
    cases.push(("stale", copy.to_owned()));
    for (reason, path) in cases {
        let out = doctor(&path);
        let expected = format!("shared page {}: refused ({reason})", path.display());
        assert!(out.contains(&expected), "{expected:?} not in:\n{out}");
        assert!(out.contains("mode: calibrated"), "{out}");
        println!(
            "refused page {reason}: {}",
            out.lines().find(|l| l.contains("refused")).unwrap()
        );
    }
}

#[test]
fn serve_end_to_end() {
    if let Some(role) = role() {
        return dispatch(&role);
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("clock");
    if !calibrated_machine() {
        let output = Command::new(BIN)
            .args(["serve", "--path"])
            .arg(&page)
            .output()
            .unwrap();
        assert!(output.status.success());
        assert!(String::from_utf8_lossy(&output.stderr).contains("kernel mode"));
        assert!(!page.exists(), "a kernel-mode server published a page");
        skip("serve_end_to_end", Need::CalibratedMode, "the kernel publishes the conversion (kernel mode): perfclock serve has nothing to serve");
        return;
    }
    fs::write(dir.path().join("handoff"), [0u8; HANDOFF_CELL_BYTES]).unwrap();
    let server = Server::start(&page);
    let first_pid = server.child.id();

    // Clients: the shared clock, no thread or descriptor more, one mapping more.
    let mut init_ns = Vec::new();
    for _ in 0..11 {
        let out = run_init(&page, dir.path());
        assert_eq!(field(&out, "INIT", "mode"), "Shared", "{out}");
        let pairs = ["threads", "fds", "maps"].map(|key| {
            let line = out.lines().find(|l| l.contains("INIT mode")).unwrap();
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = words.iter().position(|w| *w == key).unwrap();
            (
                words[at + 1].parse::<u64>().unwrap(),
                words[at + 2].parse::<u64>().unwrap(),
            )
        });
        assert_eq!(pairs[0].0, pairs[0].1, "threads before/after init: {out}");
        assert_eq!(
            pairs[1].0, pairs[1].1,
            "descriptors before/after init: {out}"
        );
        assert_eq!(
            pairs[2].0 + 1,
            pairs[2].1,
            "one mapping of the page more: {out}"
        );
        assert_eq!(number(&out, "INIT", "server"), u64::from(first_pid));
        assert!(number(&out, "INIT", "bound") < 100_000, "{out}");
        init_ns.push(number(&out, "INIT", "init_ns"));
    }
    init_ns.sort_unstable();
    println!(
        "init() with a live server: median {} ns of {} clients (build profile of this test)",
        init_ns[init_ns.len() / 2],
        init_ns.len()
    );

    // A copy that no server refreshes: stale by the time the refusals are checked.
    let live = fs::read(&page).unwrap();
    let copy = dir.path().join("copy");
    write_page(&copy, &live, 0o644);
    let copied = Instant::now();

    // Long-lived clients across the kill and the restart.
    let mut watcher = client("serve_end_to_end", "watch", &page, dir.path())
        .spawn()
        .unwrap();
    let mut watch_out = BufReader::new(watcher.stdout.take().unwrap());
    let mut producer = client("serve_end_to_end", "produce", &page, dir.path())
        .spawn()
        .unwrap();
    let consumer = client("serve_end_to_end", "consume", &page, dir.path())
        .spawn()
        .unwrap();
    let seen = read_until(&mut watch_out, Duration::from_secs(60), |l| {
        l.starts_with("BOUND")
    });
    assert!(seen.contains("WATCH mode Shared"), "{seen}");
    let bound: u64 = seen.lines().last().unwrap()[6..].parse().unwrap();
    assert!(bound < 100_000, "a live server's bound: {seen}");

    // The server stops: the clients' bound turns unknown within the stale time.
    server.kill();
    let killed = Instant::now();
    let seen = read_until(&mut watch_out, Duration::from_secs(30), |l| {
        l == format!("BOUND {}", u64::MAX)
    });
    let noticed = killed.elapsed();
    println!("a killed server noticed after {noticed:?}");
    assert!(
        noticed <= Duration::from_nanos(STALE_AFTER_NS) + Duration::from_secs(2),
        "{seen}"
    );
    // A new client refuses the stale page and calibrates on its own (which, on a machine as
    // loaded as this test makes it, may fail: then it fails calibrating, not reading the page).
    let out = run_init(&page, dir.path());
    assert!(
        out.contains("INIT mode Calibrated") || out.contains("INIT error Calibration"),
        "{out}"
    );
    let out = Command::new(BIN)
        .args(["doctor", "10"])
        .env("PERFCLOCK_SHARED_PAGE", &page)
        .env("PERFCLOCK_PARAVIRT", "off")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let expected = format!("shared page {}: refused (stale)", page.display());
    assert!(out.contains(&expected), "{out}");

    // Restarted: the same file continued, the bound back, the old clients read it again.
    let server = Server::start(&page);
    let seen = read_until(&mut watch_out, Duration::from_secs(30), |l| {
        l.starts_with("BOUND") && l != format!("BOUND {}", u64::MAX)
    });
    println!(
        "bound back after the restart: {}",
        seen.lines().last().unwrap()
    );
    let out = run_init(&page, dir.path());
    assert_eq!(field(&out, "INIT", "mode"), "Shared", "{out}");
    assert_eq!(number(&out, "INIT", "server"), u64::from(server.child.id()));

    // Right after the restart: kernel stamps in the old client, then the handoffs' verdict.
    fs::write(dir.path().join("stop"), b"").unwrap();
    let seen = read_until(&mut watch_out, Duration::from_secs(600), |l| {
        l.starts_with("DONE")
    });
    println!("{seen}");
    assert_eq!(
        number(&seen, "DONE", "backs"),
        0,
        "a reading went back across the restart"
    );
    assert_eq!(
        number(&seen, "DONE", "violations"),
        0,
        "kernel stamps outside the bound"
    );
    assert!(number(&seen, "DONE", "events") >= 90_000, "{seen}");
    assert!(watcher.wait().unwrap().success());
    assert!(producer.wait().unwrap().success());
    let consumed = consumer.wait_with_output().unwrap();
    assert!(consumed.status.success());
    let consumed = String::from_utf8(consumed.stdout).unwrap();
    println!("{consumed}");
    assert_eq!(field(&consumed, "CONSUME", "mode"), "Shared");
    assert!(number(&consumed, "HANDOFF", "handoffs") >= HANDOFFS);
    // Every client reads the identical conversion, continued across the restart: a reading
    // below the one handed over although its counter was not is the clock's fault. The counter
    // itself can go back between CPUs (see perfclock_testutil::handoff); those are reported,
    // and the conversion must not magnify them (same line: a step back of at most the
    // counter's, converted, plus the floor).
    let handoff = |key| number(&consumed, "HANDOFF", key);
    assert_eq!(
        handoff("clock_backs"),
        0,
        "handed-over readings went back although the counter did not (worst {} ns)",
        handoff("clock_worst_ns")
    );
    if handoff("counter_backs") > 0 {
        eprintln!(
            "the counter itself went back between CPUs in {} of {} handoffs (worst {} ticks, \
             {} ns): the machine's counters, not the clock",
            handoff("counter_backs"),
            handoff("handoffs"),
            handoff("counter_worst_ticks"),
            handoff("counter_worst_ns")
        );
    }
    let slope_bound_ns = handoff("counter_worst_ticks") + 1;
    assert!(
        handoff("counter_worst_ns") <= slope_bound_ns,
        "a counter step back of {} ticks became {} ns",
        handoff("counter_worst_ticks"),
        handoff("counter_worst_ns")
    );

    // Refused pages, each for its reason.
    let wait = Duration::from_nanos(STALE_AFTER_NS) + Duration::from_secs(1);
    std::thread::sleep(wait.saturating_sub(copied.elapsed()));
    refused_pages_are_named(dir.path(), &live, &copy);
    server.kill();
}

/// CPU (utime + stime, clock ticks) of process `pid`.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the comm.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// 100 idle clients of one server: their CPU for clock upkeep over `PERFCLOCK_IDLE_SECS`
/// (default 30) is 0; the server's and one in-process calibrated client's are printed for the
/// measurements. Run by CI (`--ignored`): it takes half a minute.
#[test]
#[ignore = "30 s of idling; CI runs it with --ignored"]
fn idle_clients_spend_no_cpu() {
    if let Some(role) = role() {
        return dispatch(&role);
    }
    if !calibrated_machine() {
        skip("idle_clients_spend_no_cpu", Need::CalibratedMode, "the kernel publishes the conversion (kernel mode): perfclock serve has nothing to serve");
        return;
    }
    let secs: u64 = std::env::var("PERFCLOCK_IDLE_SECS").map_or(30, |s| s.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("clock");
    let server = Server::start(&page);
    let spawn = |page: &Path| {
        let mut child = client("idle_clients_spend_no_cpu", "idle", page, dir.path())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let seen = read_until(&mut out, Duration::from_secs(120), |l| {
            l.starts_with("IDLE")
        });
        (child, seen)
    };
    let mut clients = Vec::new();
    for _ in 0..100 {
        let (child, seen) = spawn(&page);
        assert!(seen.contains("IDLE mode Shared"), "{seen}");
        clients.push(child);
    }
    let (own, seen) = spawn(Path::new("off"));
    assert!(seen.contains("IDLE mode Calibrated"), "{seen}");
    let before: Vec<u64> = clients.iter().map(|c| cpu_ticks(c.id())).collect();
    let (server_before, own_before) = (cpu_ticks(server.child.id()), cpu_ticks(own.id()));
    std::thread::sleep(Duration::from_secs(secs));
    let spent: u64 = clients
        .iter()
        .zip(&before)
        .map(|(c, b)| cpu_ticks(c.id()) - b)
        .sum();
    let server_spent = cpu_ticks(server.child.id()) - server_before;
    let own_spent = cpu_ticks(own.id()) - own_before;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    println!(
        "idle {secs} s: 100 shared clients {spent} ticks; server {:.0} ms; one in-process \
         calibrated client {:.0} ms",
        server_spent as f64 * 1e3 / hz,
        own_spent as f64 * 1e3 / hz
    );
    for mut child in clients.into_iter().chain([own]) {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    assert_eq!(spent, 0, "shared clients spent CPU while idle");
    drop(server);
}

/// `perfclock serve --path P` run to its end (at most `limit`; killed past it): its exit status
/// (`None` if it was still running) and its stderr.
fn serve_until_exit(page: &Path, limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--path"])
        .arg(page)
        .env("PERFCLOCK_PARAVIRT", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

/// SIGINT and SIGTERM stop the server cleanly: exit status 0, its socket removed, the page left
/// for clients (whose bound turns unknown when the heartbeat stops).
#[test]
fn sigint_and_sigterm_stop_the_server_cleanly() {
    if role().is_some() {
        return;
    }
    if !calibrated_machine() {
        skip("sigint_and_sigterm_stop_the_server_cleanly", Need::CalibratedMode, "the kernel publishes the conversion (kernel mode): perfclock serve has nothing to serve");
        return;
    }
    for signal in ["INT", "TERM"] {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("clock");
        let mut server = Server::start(&page);
        let socket = perfclock::shared_page::socket_path(&page);
        assert!(socket.exists(), "the server serves through {socket:?}");
        let sent = Command::new("kill")
            .args(["-s", signal, &server.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -s {signal}");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "SIG{signal} did not stop the server"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "SIG{signal}: {status:?}");
        assert!(!socket.exists(), "SIG{signal}: the socket was left behind");
        assert!(page.exists(), "SIG{signal}: the page is kept for clients");
    }
}

/// A file of the page's size at `--path` that is not a page is left as it is: serve refuses it
/// instead of writing its page into it.
#[test]
fn serve_leaves_a_file_that_is_not_a_page_alone() {
    if role().is_some() {
        return;
    }
    if !calibrated_machine() {
        skip("serve_leaves_a_file_that_is_not_a_page_alone", Need::CalibratedMode, "the kernel publishes the conversion (kernel mode): perfclock serve has nothing to serve");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("clock");
    let notes = vec![b'x'; FILE_BYTES];
    write_page(&page, &notes, 0o644);
    let (status, stderr) = serve_until_exit(&page, Duration::from_secs(20));
    assert_eq!(
        fs::read(&page).unwrap(),
        notes,
        "the file was changed: {stderr}"
    );
    let status = status.unwrap_or_else(|| panic!("serve kept serving into the file: {stderr}"));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not a perfclock page"), "{stderr}");
}

/// Unmounts its mount point on drop.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// `serve` on a full file system: a clear error naming the full disk, an exit (not a SIGBUS),
/// and no temporary file left behind.
#[test]
fn serve_on_a_full_file_system_fails_cleanly() {
    let test = perfclock_testutil::test_name!();
    if role().is_some() {
        return;
    }
    if !calibrated_machine() {
        skip(test, Need::CalibratedMode, "the kernel publishes the conversion (kernel mode): perfclock serve has nothing to serve");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("tiny");
    fs::create_dir(&mount).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k,mode=0755", "perfclock-full"])
        .arg(&mount)
        .output();
    match mounted {
        Ok(output) if output.status.success() => {}
        other => {
            perfclock_testutil::skip(test, perfclock_testutil::Need::Mount, format!("{other:?}"));
            return;
        }
    }
    let _mounted = Mounted(mount.clone());
    let mut filler = fs::File::create(mount.join("filler")).unwrap();
    let chunk = vec![0u8; 4096];
    while filler.write_all(&chunk).is_ok() {}
    let page = mount.join("clock");
    let (status, stderr) = serve_until_exit(&page, Duration::from_secs(60));
    let status = status.unwrap_or_else(|| panic!("serve kept running: {stderr}"));
    assert_eq!(status.code(), Some(1), "{status:?} {stderr}");
    assert!(stderr.contains("the file system is full"), "{stderr}");
    let left: Vec<_> = fs::read_dir(&mount)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .filter(|name| name != "filler")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// On a KVM guest read through paravirt mode, `serve --once` publishes `C` (no page, no
/// resident process) in a file the client's reader accepts, and plain `serve` does the same and
/// exits: there is nothing to refresh.
#[test]
fn serve_once_publishes_the_paravirt_offset() {
    let test = perfclock_testutil::test_name!();
    if role().is_some() {
        return;
    }
    if let Err(refusal) = perfclock::paravirt::measure_offset(50) {
        perfclock_testutil::skip(test, perfclock_testutil::Need::ParavirtMode, refusal);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("clock");
    let offset_path = dir.path().join("pvclock-offset");
    for args in [&["serve", "--once", "--path"][..], &["serve", "--path"][..]] {
        let _ = fs::remove_file(&offset_path);
        let output = Command::new(BIN).args(args).arg(&page).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains("published C = "), "{stderr}");
        let offset = perfclock::shared_page::probe_published_offset(&offset_path)
            .unwrap_or_else(|refusal| panic!("{args:?}: the published offset refused: {refusal}"));
        let (lo, hi) = offset.intersection_ns;
        assert!(lo <= offset.offset_ns && offset.offset_ns <= hi && offset.brackets > 0);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            ["pvclock-offset"],
            "{args:?}: only the offset is published"
        );
    }
    let disabled = Command::new(BIN)
        .args(["serve", "--once", "--path"])
        .arg(&page)
        .env("PERFCLOCK_PARAVIRT", "off")
        .output()
        .unwrap();
    assert_eq!(disabled.status.code(), Some(1), "{disabled:?}");
    assert!(String::from_utf8_lossy(&disabled.stderr).contains("PERFCLOCK_PARAVIRT=off"));
}

/// Whatever is done to the page file and to the socket beside it (emptied as `> file` and
/// `truncate -s 0` do, overwritten as `cp` does, the socket replaced by a file), no client
/// that maps the page and not the server dies: clients map the server's sealed memfd, which
/// cannot shrink, never the file.
#[test]
fn vandalising_the_page_file_kills_no_one() {
    if let Some(role) = role() {
        return dispatch(&role);
    }
    if !calibrated_machine() {
        skip("vandalising_the_page_file_kills_no_one", Need::CalibratedMode, "the kernel publishes the conversion (kernel mode): perfclock serve has nothing to serve");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("clock");
    let mut server = Server::start(&page);
    let mut clients: Vec<_> = (0..3)
        .map(|_| {
            let mut child = client(
                "vandalising_the_page_file_kills_no_one",
                "survive",
                &page,
                dir.path(),
            )
            .spawn()
            .unwrap();
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let seen = read_until(&mut out, Duration::from_secs(60), |l| {
                l.starts_with("SURVIVE")
            });
            assert!(seen.contains("SURVIVE mode Shared"), "{seen}");
            (child, out)
        })
        .collect();
    let pause = || std::thread::sleep(Duration::from_millis(600));
    // `> file`
    fs::File::create(&page).unwrap();
    pause();
    // `cp other file`
    let other = dir.path().join("other");
    fs::write(&other, b"not a page").unwrap();
    fs::copy(&other, &page).unwrap();
    pause();
    // `truncate -s 0`
    fs::File::options()
        .write(true)
        .open(&page)
        .unwrap()
        .set_len(0)
        .unwrap();
    pause();
    // The socket replaced by a file: new clients find no server; the old ones keep their page.
    let socket = perfclock::shared_page::socket_path(&page);
    fs::remove_file(&socket).unwrap();
    fs::write(&socket, b"").unwrap();
    pause();
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server died"
    );
    fs::write(dir.path().join("stop"), b"").unwrap();
    for (mut child, mut out) in clients.drain(..) {
        let status = child.wait().unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        assert!(
            status.success(),
            "a client died: {status:?}; it said: {rest}"
        );
        assert!(rest.contains("DONE backs 0"), "{rest}");
    }
    server.kill();
}

/// The page's directory gets its documented mode, 0755, under a umask that would narrow it
/// (077): clients of other users must reach the published offset and page.
#[test]
fn serve_creates_its_directory_0755_whatever_the_umask() {
    let test = perfclock_testutil::test_name!();
    if role().is_some() {
        return;
    }
    if let Err(refusal) = perfclock::paravirt::measure_offset(50) {
        perfclock_testutil::skip(test, perfclock_testutil::Need::ParavirtMode, refusal);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("pc").join("clock");
    let output = Command::new("sh")
        .args([
            "-c",
            "umask 077 && exec \"$0\" serve --once --path \"$1\"",
            BIN,
        ])
        .arg(&page)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let mode = fs::metadata(dir.path().join("pc"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755, "the directory's mode is {mode:o}");
    let offset = fs::metadata(dir.path().join("pc").join("pvclock-offset")).unwrap();
    assert_eq!(offset.permissions().mode() & 0o7777, 0o644);
}
