//! The marker writer where others can write too, and where its callers are hostile:
//! a link, a FIFO or another user's file at `marker-<pid>.txt` is refused with a typed error and
//! left as it was (as root, and as `nobody`); a stale file of our own is replaced; a fork child
//! gets `MarkerError::ForkChild` from every call on an inherited handle and the parent's file
//! stays intact; a marker from a signal handler never hangs (10,000 signals, each delivered while
//! the interrupted thread writes markers, under a watchdog).
//!
//! The planted cases need root (`SKIPPED` on stderr otherwise, fatal under
//! `PERFCLOCK_REQUIRE_ROOT=1`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use perfclock_markers::{ForkChild, MarkerError, Markers};
use perfclock_testutil::hostile;
use perfclock_testutil::samply;
use perfclock_testutil::shared_dir;

use shared_dir::{Plant, NOBODY};

/// The markers of `path` as samply parses them; every line must parse.
fn read_markers(path: &Path) -> Vec<(u64, u64, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "a partial last line"
    );
    text.lines()
        .map(|line| {
            let (s, e, n) = samply::parse_like_samply(line)
                .unwrap_or_else(|| panic!("samply would stop at {line:?}"));
            (s, e, n.to_owned())
        })
        .collect()
}

fn marker_name(pid: u32) -> String {
    format!("marker-{pid}.txt")
}

fn expect_refused(dir: &Path, planted: &shared_dir::Planted) {
    match Markers::open(dir) {
        Err(error @ MarkerError::NameTaken(_)) => {
            planted.assert_refused_untouched(&error.to_string());
            println!("refused {:?}: {error}", planted.plant);
        }
        Err(other) => panic!("{:?}: not NameTaken: {other:?}", planted.plant),
        Ok(_) => panic!("{:?}: opened over it", planted.plant),
    }
}

#[test]
fn planted_names_are_refused_and_left_alone() {
    let test = "planted_names_are_refused_and_left_alone";
    if !shared_dir::root_or_skip(test) {
        return;
    }
    for plant in Plant::REFUSED {
        let dir = shared_dir::open_dir("markers-plant");
        let planted = shared_dir::plant(&dir, &marker_name(std::process::id()), plant, 0, NOBODY);
        expect_refused(&dir, &planted);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn an_own_stale_file_is_replaced() {
    let test = "an_own_stale_file_is_replaced";
    if !shared_dir::root_or_skip(test) {
        return;
    }
    let dir = shared_dir::open_dir("markers-stale");
    let planted = shared_dir::plant(
        &dir,
        &marker_name(std::process::id()),
        Plant::OwnStaleFile,
        0,
        0,
    );
    let markers = Markers::open(&dir).unwrap();
    markers.span("fresh", 1, 2).unwrap();
    markers.close().unwrap();
    planted.assert_replaced(0);
    assert_eq!(read_markers(&planted.path), [(1, 2, "fresh".to_owned())]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn as_nobody_case() {
    hostile::watchdog(60);
    let pid = std::process::id();
    let root_dir = shared_dir::open_dir("markers-nobody");
    let mut cases = Vec::new();
    for plant in Plant::REFUSED.into_iter().chain([Plant::OwnStaleFile]) {
        let dir = shared_dir::open_subdir(&root_dir, &format!("{plant:?}"));
        let planted = shared_dir::plant(&dir, &marker_name(pid), plant, NOBODY, 0);
        cases.push((dir, planted));
    }
    shared_dir::become_nobody();
    for (dir, planted) in &cases {
        if planted.plant == Plant::OwnStaleFile {
            let markers = Markers::open(dir).unwrap();
            markers.span("fresh", 1, 2).unwrap();
            markers.close().unwrap();
            planted.assert_replaced(NOBODY);
        } else {
            expect_refused(dir, planted);
        }
    }
    println!("AS_NOBODY_OK {} cases", cases.len());
}

#[test]
fn as_nobody_planted_names_are_refused() {
    let test = perfclock_testutil::test_path!();
    shared_dir::as_nobody_test(
        &test,
        "markers-nobody",
        "AS_NOBODY_OK 5 cases",
        || true,
        as_nobody_case,
    );
}

/// What a fork child does after marking on the inherited handle.
#[derive(Debug, Clone, Copy)]
enum ChildDoes {
    Closes,
    Exits,
    ExitsWithoutFlushing,
}

fn fork_case(dir: &Path) {
    hostile::watchdog(60);
    let markers = Markers::open(dir).unwrap();
    let parent = std::process::id();
    for i in 0..100 {
        markers.span(&format!("parent_{i}"), i, i + 1).unwrap();
    }
    for does in [
        ChildDoes::Closes,
        ChildDoes::Exits,
        ChildDoes::ExitsWithoutFlushing,
    ] {
        // SAFETY: the child only uses the writer and leaves with exit/_exit.
        let pid = unsafe { hostile::fork() };
        if pid == 0 {
            let mut code = 0;
            let mut expect_fork_child = |what: &str, result: Result<(), MarkerError>| match result {
                Err(MarkerError::ForkChild(ForkChild { opened_by, pid }))
                    if opened_by == parent && pid != parent => {}
                other => {
                    hostile::raw_print(&format!("{does:?} {what}: {other:?}\n"));
                    code = 2;
                }
            };
            for i in 0..500u64 {
                let result =
                    markers.span(&format!("child_{does:?}_{i}"), 1_000_000 + i, 1_000_000 + i);
                expect_fork_child("span", result);
            }
            match does {
                ChildDoes::Closes => {
                    expect_fork_child("flush", markers.flush());
                    expect_fork_child("close", markers.clone().close());
                    // SAFETY: exit(3) runs the atexit flush, which must not write either.
                    unsafe { libc::exit(code) };
                }
                // SAFETY: as above.
                ChildDoes::Exits => unsafe { libc::exit(code) },
                // SAFETY: ends the child at once.
                ChildDoes::ExitsWithoutFlushing => unsafe { libc::_exit(code) },
            }
        }
        hostile::assert_exited_zero(pid, format_args!("{does:?}"));
    }
    for i in 100..200 {
        markers.span(&format!("parent_{i}"), i, i + 1).unwrap();
    }
    let path = markers.path().to_owned();
    assert_eq!(markers.lost(), 0);
    markers.close().unwrap();
    let got = read_markers(&path);
    let expected: Vec<_> = (0..200)
        .map(|i| (i, i + 1, format!("parent_{i}")))
        .collect();
    assert_eq!(got, expected, "the parent's file holds something else");
    let files = std::fs::read_dir(dir).unwrap().count();
    assert_eq!(files, 1, "only the parent's marker file");
    println!("FORK_OK 200 parent markers, children refused");
}

#[test]
fn fork_children_never_write_into_the_parent_file() {
    let test_path = perfclock_testutil::test_path!();
    let test = test_path.as_str();
    if hostile::child_case().as_deref() == Some(test) {
        return fork_case(&hostile::child_dir());
    }
    let dir = fresh_dir("fork");
    let run = hostile::run_child_in(test, test, Duration::from_secs(90), &dir);
    run.expect_success("FORK_OK");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pcm-shared-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const SIGNALS: u64 = 10_000;
static HANDLER_MARKERS: OnceLock<Markers> = OnceLock::new();
static DELIVERED: AtomicU64 = AtomicU64::new(0);
static WRITTEN: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static OTHER_ERRORS: AtomicU64 = AtomicU64::new(0);

extern "C" fn mark_from_handler(_: libc::c_int) {
    if let Some(markers) = HANDLER_MARKERS.get() {
        let at = 10_000_000 + DELIVERED.load(Ordering::Relaxed);
        match markers.instant("from the handler", at) {
            Ok(()) => WRITTEN.fetch_add(1, Ordering::Relaxed),
            Err(MarkerError::Busy) => REFUSED.fetch_add(1, Ordering::Relaxed),
            Err(_) => OTHER_ERRORS.fetch_add(1, Ordering::Relaxed),
        };
    }
    DELIVERED.fetch_add(1, Ordering::Release);
}

fn signal_case(dir: &Path) {
    hostile::watchdog(100);
    let markers = Markers::open(dir).unwrap();
    HANDLER_MARKERS.set(markers.clone()).unwrap();
    // SAFETY: installs a handler that only touches atomics and the marker writer, whose
    // signal-safety is what is under test; SA_RESTART so the writer's pwrite resumes.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = mark_from_handler as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0
        );
    }
    // SAFETY: gettid/getpid have no preconditions.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    let sender = std::thread::spawn(move || {
        for sent in 0..SIGNALS {
            // SAFETY: signals our own process's main thread.
            let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR1) };
            assert_eq!(rc, 0);
            // One signal at a time, so none merges with a pending one: each is handled before
            // the next is sent (a handler that hangs stops this loop; the watchdog ends it).
            let waiting = Instant::now();
            while DELIVERED.load(Ordering::Acquire) <= sent {
                assert!(
                    waiting.elapsed() < Duration::from_secs(60),
                    "signal {sent} not handled"
                );
                std::hint::spin_loop();
            }
        }
    });
    let mut main_markers = 0u64;
    while !sender.is_finished() {
        // Long names fill the buffer often, so many signals land in its write-out.
        markers
            .span(
                &format!("main_{main_markers}_{}", "x".repeat(200)),
                main_markers,
                main_markers,
            )
            .unwrap();
        main_markers += 1;
        if main_markers % 3000 == 0 {
            markers.flush().unwrap();
        }
    }
    sender.join().unwrap();
    let (written, refused, other) = (
        WRITTEN.load(Ordering::Relaxed),
        REFUSED.load(Ordering::Relaxed),
        OTHER_ERRORS.load(Ordering::Relaxed),
    );
    assert_eq!(DELIVERED.load(Ordering::Relaxed), SIGNALS);
    assert_eq!(other, 0, "handler markers failed otherwise");
    assert_eq!(written + refused, SIGNALS);
    assert_eq!(
        markers.lost(),
        refused,
        "refused markers are counted as lost"
    );
    let path = markers.path().to_owned();
    markers.flush().unwrap();
    let got = read_markers(&path);
    let from_handler = got
        .iter()
        .filter(|(_, _, n)| n == "from the handler")
        .count() as u64;
    assert_eq!(
        from_handler, written,
        "every accepted handler marker is in the file"
    );
    assert_eq!(got.len() as u64 - from_handler, main_markers);
    println!(
        "SIGNALS_OK {SIGNALS} signals: {written} handler markers written, {refused} refused \
         (interrupted a marker call), {main_markers} markers from the interrupted thread"
    );
}

#[test]
fn markers_from_a_signal_handler_never_hang() {
    let test_path = perfclock_testutil::test_path!();
    let test = test_path.as_str();
    if hostile::child_case().as_deref() == Some(test) {
        return signal_case(&hostile::child_dir());
    }
    let dir = fresh_dir("signals");
    let run = hostile::run_child_in(test, test, Duration::from_secs(120), &dir);
    run.expect_success("SIGNALS_OK");
    std::fs::remove_dir_all(&dir).unwrap();
}
