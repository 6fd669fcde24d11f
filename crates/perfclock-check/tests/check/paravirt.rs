//! Paravirt mode against this machine's kernel: with `C` from the kernel log (root), every one of
//! at least 100,000 kernel stamps lies inside its bracket with bound 0, and the readings equal
//! an independent computation from the entry and the logged constants, bit for bit; moved by
//! 2 us, the same clock fails; as `nobody` (no kernel log), brackets alone give a bound of at
//! most 600 ns in a release build, 0 violations and no thread.
//!
//! The tests take turns (`perfclock_testutil::one_at_a_time`): a bracket is as narrow as the
//! CPU left undisturbed, and a kernel-stamp run beside the brackets-alone case widened its bound
//! past 600 ns (731 ns in one debug run of the workspace's tests).

use std::process::Command;

use perfclock::paravirt::OffsetSource;
use perfclock::{Clock, Mode, Options, ReadError};
use perfclock_check::{verify, PerfTimeSource};
use perfclock_testutil::{child_skipped, ok_or_skip, skip, skip_child, Need};

/// The bound brackets alone must reach: 600 ns in a release build (what the docs promise, and
/// CI's release run of this file checks); 1,000 ns unoptimized, where the code between a
/// bracket's counter reads is slower and widens every bracket (676 and 731 ns seen in debug
/// runs of the workspace's tests).
const BRACKETS_ALONE_LIMIT_NS: u64 = if cfg!(debug_assertions) { 1_000 } else { 600 };

/// Stamps per record kind, split between the CPU turns: 3 kinds x 34,000 = 102,000 stamps.
const PER_KIND: usize = 34_000;
/// How far the control moves `C`.
const CONTROL_SHIFT_NS: u64 = 2_000;
const ROLE: &str = "PERFCLOCK_PARAVIRT_TEST_ROLE";

/// A paravirt clock of this process, or `None` after a skip naming why not.
fn paravirt_clock(test: &str) -> Option<Clock> {
    let clock = ok_or_skip(test, Need::Perf, Options::default().open())?;
    if clock.mode() != Mode::Paravirt {
        skip(
            test,
            Need::ParavirtMode,
            format_args!("the clock opened in {:?} mode", clock.mode()),
        );
        return None;
    }
    Some(clock)
}

fn needs_the_log(test: &str, clock: &Clock) -> bool {
    let paravirt = clock.paravirt().expect("paravirt mode's state");
    if paravirt.offset().source == OffsetSource::KernelLog {
        return true;
    }
    let why: Vec<String> = paravirt
        .refused()
        .iter()
        .map(|r| format!("{r}: {:?}", r))
        .collect();
    skip(
        test,
        Need::Root,
        format_args!(
            "C came from {}: {}",
            paravirt.offset().source,
            why.join("; ")
        ),
    );
    false
}

#[test]
fn logged_offset_holds_against_100_000_kernel_stamps() {
    let _turn = perfclock_testutil::one_at_a_time();
    let test = "logged_offset_holds_against_100_000_kernel_stamps";
    let Some(clock) = paravirt_clock(test) else {
        return;
    };
    if !needs_the_log(test, &clock) {
        return;
    }
    assert_eq!(clock.error_bound_ns(), 0);
    let report = verify(&clock, PER_KIND).expect("kernel stamps");
    print!("{report}");
    assert!(report.events() >= 100_000, "{} stamps", report.events());
    assert_eq!(report.violations(), 0, "{report}");
    assert!(report.cpus_seen().len() >= 2 || num_cpus() == 1, "{report}");
}

/// The clock moved by [`CONTROL_SHIFT_NS`]: the same check must find stamps outside it.
struct Moved<'a>(&'a Clock);

impl PerfTimeSource for Moved<'_> {
    fn now_ns(&self) -> Result<u64, ReadError> {
        Ok(self.0.now_ns()? + CONTROL_SHIFT_NS)
    }
    fn error_bound_ns(&self) -> u64 {
        self.0.error_bound_ns()
    }
    fn read_counter(&self) -> Option<u64> {
        self.0.read_counter()
    }
    fn cycles_to_ns(&self, cycles: u64) -> Result<u64, ReadError> {
        Ok(self.0.cycles_to_ns(cycles)? + CONTROL_SHIFT_NS)
    }
}

#[test]
fn control_offset_moved_by_2us_shows_violations() {
    let _turn = perfclock_testutil::one_at_a_time();
    let test = "control_offset_moved_by_2us_shows_violations";
    let Some(clock) = paravirt_clock(test) else {
        return;
    };
    if !needs_the_log(test, &clock) {
        return;
    }
    let moved = Moved(&clock);
    // The setup: the moved clock really reads 2 us later, and the real one passes.
    let cycles = clock.read_counter().expect("a counter");
    assert_eq!(
        moved.cycles_to_ns(cycles).unwrap() - clock.cycles_to_ns(cycles).unwrap(),
        CONTROL_SHIFT_NS
    );
    let real = verify(&clock, 200).expect("kernel stamps");
    assert!(real.events() > 0 && real.passed(), "{real}");
    let report = verify(&moved, 200).expect("kernel stamps");
    print!("{report}");
    assert!(report.events() > 0);
    assert!(
        report.violations() > 0,
        "a clock 2 us off passed every stamp:\n{report}"
    );
    assert!(
        report.worst_violation_ns() >= CONTROL_SHIFT_NS / 2,
        "{report}"
    );
}

#[test]
fn readings_equal_the_kernels_formula_from_the_logged_constants_bit_for_bit() {
    let _turn = perfclock_testutil::one_at_a_time();
    let test = "readings_equal_the_kernels_formula_from_the_logged_constants_bit_for_bit";
    let Some(clock) = paravirt_clock(test) else {
        return;
    };
    // A user-space line that looks like the kernel's (root may write any line to /dev/kmsg; the
    // kernel files it under the user facility): the oracle, like the library, must ignore it.
    if let Ok(mut kmsg) = std::fs::OpenOptions::new().write(true).open("/dev/kmsg") {
        use std::io::Write as _;
        kmsg.write_all(b"<6>sched_clock: Marking stable (1, 2)->(3, 4)\n")
            .expect("write a forged line to /dev/kmsg");
    }
    let Some(logged) = logged_offset_from_dmesg() else {
        skip(
            test,
            Need::Root,
            "dmesg shows no kvm-clock / sched_clock offsets",
        );
        return;
    };
    let paravirt = clock.paravirt().unwrap();
    for step in 0..10_000u64 {
        let entry = paravirt.reader().raw().expect("the entry");
        let cycles = entry.tsc_timestamp + step * 1_000_003;
        // __pvclock_read_cycles as C writes it, then + __sched_clock_offset - kvm offset.
        let mut delta = cycles - entry.tsc_timestamp;
        if entry.tsc_shift < 0 {
            delta >>= -i32::from(entry.tsc_shift);
        } else {
            delta <<= entry.tsc_shift;
        }
        let scaled = ((u128::from(delta) * u128::from(entry.tsc_to_system_mul)) >> 32) as u64;
        let expected = entry
            .system_time
            .wrapping_add(scaled)
            .wrapping_add(logged as u64);
        if paravirt.reader().raw().unwrap() != entry {
            continue; // the host rewrote the entry in between
        }
        assert_eq!(clock.cycles_to_ns(cycles), Ok(expected), "cycles {cycles}");
    }
}

/// `d - N` from `dmesg`'s text, parsed here independently of perfclock's parser: the kernel
/// facility's lines only (`--kernel`), as the library reads them.
fn logged_offset_from_dmesg() -> Option<i64> {
    let output = Command::new("dmesg").arg("--kernel").output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let kvm: i64 = text
        .lines()
        .find_map(|l| l.split("using sched offset of ").nth(1))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let stable = text
        .lines()
        .rev()
        .find_map(|l| l.split("Marking stable (").nth(1))?;
    let d: i64 = stable
        .rsplit(", ")
        .next()?
        .trim_end_matches(')')
        .parse()
        .ok()?;
    Some(d - kvm)
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[test]
fn nobody_gets_brackets_alone_within_600_ns_and_no_thread() {
    let _turn = perfclock_testutil::one_at_a_time();
    let test_path = perfclock_testutil::test_path!();
    let test = test_path.as_str();
    if std::env::var_os(ROLE).is_some() {
        return nobody_child(test);
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        skip(test, Need::Root, "setpriv to nobody needs root");
        return;
    }
    let output = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE, "nobody")
        .output()
        .expect("setpriv");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    if child_skipped(output.status, &stderr) {
        return;
    }
    assert!(output.status.success(), "child failed: {stderr}");
    assert!(stdout.contains("PARAVIRT-NOBODY-OK"), "{stdout}");
}

fn nobody_child(test: &str) {
    let threads_before = std::fs::read_dir("/proc/self/task").unwrap().count();
    let clock = match Options::default().open() {
        Ok(clock) => clock,
        Err(error) => skip_child(test, Need::Perf, error),
    };
    if clock.mode() != Mode::Paravirt {
        skip_child(
            test,
            Need::ParavirtMode,
            format_args!("nobody's clock opened in {:?} mode", clock.mode()),
        );
    }
    let threads = std::fs::read_dir("/proc/self/task").unwrap().count();
    let paravirt = clock.paravirt().unwrap();
    if paravirt.offset().source != OffsetSource::Brackets {
        skip_child(
            test,
            Need::ParavirtMode,
            format_args!(
                "C came from {} (is kernel.dmesg_restrict 0?)",
                paravirt.offset().source
            ),
        );
    }
    let bound = clock.error_bound_ns();
    println!(
        "nobody: C {} ns +- {bound} ns, {:?}, threads {threads}",
        paravirt.offset().offset_ns,
        paravirt.offset().intersection.map(|i| i.to_string())
    );
    assert_eq!(threads, threads_before, "opening left a thread behind");
    assert!(bound <= BRACKETS_ALONE_LIMIT_NS, "bound {bound} ns");
    let report = verify(&clock, 5_000).expect("kernel stamps");
    print!("{report}");
    assert_eq!(report.violations(), 0, "{report}");
    println!("PARAVIRT-NOBODY-OK bound {bound}");
}

const PUBLISHED_ROLE: &str = "PERFCLOCK_PARAVIRT_TEST_PUBLISHED";

/// A published offset (written here as `perfclock serve --once` writes it, from the kernel log
/// cross-checked against brackets) is what a fresh process opens with: bound 0, no kernel log
/// read, its readings hold against kernel stamps, and it needs no `perf_event_open` (the
/// kernel page is not mapped when a published offset is accepted).
#[test]
fn published_offset_opens_with_bound_0_and_holds() {
    let _turn = perfclock_testutil::one_at_a_time();
    use perfclock_core::published_offset::{OffsetOrigin, PublishedOffset};
    use perfclock_core::BootId;
    let test_path = perfclock_testutil::test_path!();
    let test = test_path.as_str();
    if std::env::var_os(PUBLISHED_ROLE).is_some() {
        return published_child(test);
    }
    let measured = match perfclock::paravirt::measure_offset(100) {
        Ok(measured) => measured,
        Err(refusal) => {
            skip(test, Need::ParavirtMode, refusal);
            return;
        }
    };
    let intersection = measured
        .intersection
        .expect("the log's C was cross-checked");
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let published = PublishedOffset {
        boot_id: BootId::parse(&boot_id).expect("a boot id"),
        offset_ns: measured.offset_ns,
        origin: OffsetOrigin::KernelLog,
        intersection_ns: (intersection.lo(), intersection.hi()),
        brackets: intersection.brackets(),
        writer_pid: std::process::id(),
    };
    let mut text = String::new();
    published.encode(&mut text).unwrap();
    let dir = tempfile_dir();
    let path = dir.path().join("pvclock-offset");
    std::fs::write(&path, text).unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env(PUBLISHED_ROLE, "1")
        .env("PERFCLOCK_PUBLISHED_OFFSET", &path)
        .output()
        .expect("child");
    drop(dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    print!("{stdout}");
    if child_skipped(output.status, &stderr) {
        return;
    }
    assert!(output.status.success(), "child failed: {stderr}");
    assert!(
        stdout.contains(&format!("PUBLISHED-OK C {}", measured.offset_ns)),
        "{stdout}"
    );
}

/// A new directory only this user can write (the published file's trust checks want one),
/// removed when dropped.
fn tempfile_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("perfclock-published-")
        .tempdir()
        .unwrap()
}

fn published_child(test: &str) {
    let clock = match Options::default().open() {
        Ok(clock) => clock,
        Err(error) => skip_child(test, Need::Perf, error),
    };
    let paravirt = clock.paravirt().expect("paravirt mode");
    assert_eq!(
        paravirt.offset().source,
        OffsetSource::Published,
        "{paravirt:?}"
    );
    assert!(paravirt.published().is_some());
    assert_eq!(clock.error_bound_ns(), 0);
    let report = verify(&clock, 600).expect("kernel stamps");
    print!("{report}");
    assert_eq!(report.violations(), 0, "{report}");
    // The published file alone opens the clock: with `perf_event_open` refused on this thread,
    // the kernel page cannot be mapped, and the clock still opens in paravirt mode from it.
    perfclock_testutil::hostile::install_filter(&perfclock_testutil::hostile::fail_with_errno(
        libc::SYS_perf_event_open,
        libc::EACCES,
    ));
    let without_perf = Options::default()
        .open()
        .expect("a published offset opens the clock without perf_event_open");
    assert_eq!(without_perf.mode(), Mode::Paravirt);
    assert_eq!(
        without_perf.paravirt().map(|p| p.offset().source),
        Some(OffsetSource::Published)
    );
    println!("PUBLISHED-OK C {}", paravirt.offset().offset_ns);
}

const USER_FILE_ROLE: &str = "PERFCLOCK_PARAVIRT_TEST_USER_FILE";

/// An offset file of the reader's own (nobody's), not root's, is only a claim: right, it is
/// kept with the brackets' whole width as its bound and named as the user's file; 10 us off, it
/// is refused as outside the brackets (and the clock opens from brackets alone); neither is
/// labelled root-published with bound 0, and the kernel's stamps hold against both clocks.
#[test]
fn a_users_own_offset_file_is_a_claim_checked_against_brackets() {
    let _turn = perfclock_testutil::one_at_a_time();
    use perfclock_core::published_offset::{OffsetOrigin, PublishedOffset};
    use perfclock_core::BootId;
    use std::os::unix::fs::PermissionsExt as _;
    let test_path = perfclock_testutil::test_path!();
    let test = test_path.as_str();
    if let Some(expect) = std::env::var_os(USER_FILE_ROLE) {
        return user_file_child(test, expect.to_str() == Some("kept"));
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        skip(test, Need::Root, "setpriv to nobody needs root");
        return;
    }
    let measured = match perfclock::paravirt::measure_offset(100) {
        Ok(measured) => measured,
        Err(refusal) => {
            skip(test, Need::ParavirtMode, refusal);
            return;
        }
    };
    let intersection = measured.intersection.expect("cross-checked");
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let dir = tempfile_dir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The wrong file is consistent in itself: its claimed intersection moved with its `C`.
    for (expect, shift_ns) in [("kept", 0), ("refused", 10_000)] {
        let published = PublishedOffset {
            boot_id: BootId::parse(&boot_id).expect("a boot id"),
            offset_ns: measured.offset_ns + shift_ns,
            origin: OffsetOrigin::KernelLog,
            intersection_ns: (intersection.lo() + shift_ns, intersection.hi() + shift_ns),
            brackets: intersection.brackets(),
            writer_pid: std::process::id(),
        };
        let mut text = String::new();
        published.encode(&mut text).unwrap();
        let path = dir.path().join(format!("offset-{expect}"));
        std::fs::write(&path, text).unwrap();
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        let output = Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads", "1"])
            .env(USER_FILE_ROLE, expect)
            .env("PERFCLOCK_PUBLISHED_OFFSET", &path)
            .output()
            .expect("setpriv");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        print!("{stdout}");
        if child_skipped(output.status, &stderr) {
            continue;
        }
        assert!(output.status.success(), "{expect}: child failed: {stderr}");
        assert!(stdout.contains("USER-FILE-OK"), "{expect}: {stdout}");
    }
    drop(dir);
}

fn user_file_child(test: &str, kept: bool) {
    let clock = match Options::default().open() {
        Ok(clock) => clock,
        Err(error) => skip_child(test, Need::Perf, error),
    };
    let Some(paravirt) = clock.paravirt() else {
        skip_child(
            test,
            Need::ParavirtMode,
            "nobody's clock is not in paravirt mode",
        );
    };
    let source = paravirt.offset().source;
    let bound = clock.error_bound_ns();
    println!("source: {source}; bound {bound} ns");
    assert_ne!(
        source,
        OffsetSource::Published,
        "a user's file labelled root's"
    );
    assert!(bound > 0, "a user's claim trusted with bound 0");
    if kept {
        assert_eq!(source, OffsetSource::UserFile { uid: 65534 });
    } else {
        assert!(
            paravirt
                .refused()
                .iter()
                .any(|r| r.to_string().contains("offset file of uid 65534")),
            "{:?}",
            paravirt.refused()
        );
    }
    let report = verify(&clock, 2_000).expect("kernel stamps");
    print!("{report}");
    assert_eq!(report.violations(), 0, "{report}");
    println!("USER-FILE-OK");
}
