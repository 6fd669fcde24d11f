//! The shared page's trust and validity checks, one refused page per reason: each refusal is
//! the specific one (not merely "refused"), after a control page built the same way passes
//! every check of the file (and lacks only the server that hands out the live page).
//! Pages are built with the core's writer, as `perfclock serve` builds them.
#![cfg(target_os = "linux")]
#![allow(unsafe_code)]

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::ptr::NonNull;

use perfclock::shared_page::{candidates, probe, probe_published_offset, socket_path, SYSTEM_PATH};
use perfclock::Refusal;
use perfclock_core::counter;
use perfclock_core::published_offset::{OffsetOrigin, PublishedOffset};
use perfclock_core::shared_page::{
    SharedBound, SharedPageWriter, FILE_BYTES, HEADER_OFFSET, STALE_AFTER_NS,
};
use perfclock_core::{BootId, PageDefect, TimeConversion};
use perfclock_serve::publisher::LivePage;
use perfclock_testutil::{skip, Need};

/// 0.4 ns per tick (a 2.5 GHz counter), shift 31.
const MULT: u32 = 858_993_459;

#[repr(C, align(4096))]
struct Page([u8; FILE_BYTES]);

fn boot_id() -> BootId {
    let text = fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    BootId::parse(&text).expect("a boot id")
}

fn scratch_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("perfclock-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A page as a server would write it, with `boot` and a heartbeat `age_ns` old.
fn page(boot: BootId, age_ns: u64) -> Box<Page> {
    let mut page = Box::new(Page([0; FILE_BYTES]));
    let base = NonNull::from(&mut page.0).cast::<u8>();
    // SAFETY: an aligned FILE_BYTES buffer, written by this one writer and read by no one until
    // it is copied out below.
    let writer = unsafe { SharedPageWriter::new(base) };
    let now = counter::read_counter().expect("a counter");
    let beat = now - (u128::from(age_ns) * (1 << 31) / u128::from(MULT)) as u64;
    writer.claim(boot, 4242, beat);
    writer.publish(&TimeConversion::new(MULT, 31, 1_000).unwrap());
    writer.store_bound(
        &SharedBound {
            base_ns: 500,
            growth_q48: 0,
            counter_ref: beat,
        },
        beat,
    );
    page
}

fn write(path: &Path, bytes: &[u8], mode: u32) {
    let _ = fs::remove_file(path);
    fs::write(path, bytes).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn each_refused_page_names_its_reason() {
    if !counter::SUPPORTED {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED shared page refusals: no supported counter on this architecture"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("perfclock-refusals-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir(&dir).unwrap();
    let path = dir.join("clock");
    let good = page(boot_id(), 0);

    write(&path, &good.0, 0o644);
    // The control passes every check of the file and lacks only its server (the socket beside
    // it), which hands out the live page: served from this process, it is accepted.
    assert_eq!(
        probe(&path).map_err(|r| r.reason()),
        Err("no-server"),
        "the control page is valid"
    );
    let live = LivePage::new(Some(&good.0)).unwrap();
    live.seal().unwrap();
    live.serve(&socket_path(&path)).unwrap();
    let info = probe(&path).expect("the control page, served, is accepted");
    assert_eq!(info.server_pid, 4242);
    assert!(info.error_bound_ns >= 500 && info.error_bound_ns < u64::MAX);
    // With its server there, what is in the file does not matter: the page is the server's.
    write(&path, &good.0[..100], 0o644);
    assert_eq!(probe(&path).map(|info| info.server_pid), Ok(4242));
    // Without it, the file's own bytes name what is wrong with them.
    fs::remove_file(socket_path(&path)).unwrap();

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        write(&path, &good.0, 0o644);
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        assert_eq!(probe(&path), Err(Refusal::OtherOwner { uid: 65534 }));
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED the other-owner case: only root can give a file away"
        );
    }

    write(&path, &good.0, 0o666);
    assert_eq!(probe(&path), Err(Refusal::Writable { mode: 0o100666 }));
    write(&path, &good.0, 0o664);
    assert_eq!(probe(&path).map_err(|r| r.reason()), Err("writable"));

    write(&path, &good.0[..100], 0o644);
    assert_eq!(
        probe(&path),
        Err(Refusal::Defect(PageDefect::Truncated {
            len: 100,
            needed: FILE_BYTES,
        }))
    );

    let mut random = vec![0u8; FILE_BYTES];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for byte in &mut random {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *byte = state as u8;
    }
    write(&path, &random, 0o644);
    assert!(matches!(
        probe(&path),
        Err(Refusal::Defect(PageDefect::Garbage(_)))
    ));

    let [a, b] = boot_id().words();
    write(&path, &page(BootId::from_words([a ^ 1, b]), 0).0, 0o644);
    assert_eq!(probe(&path), Err(Refusal::Defect(PageDefect::OtherBoot)));

    write(
        &path,
        &page(boot_id(), STALE_AFTER_NS + 2_000_000_000).0,
        0o644,
    );
    assert!(
        matches!(probe(&path), Err(Refusal::Defect(PageDefect::Stale { age_ns, .. })) if age_ns > STALE_AFTER_NS),
        "{:?}",
        probe(&path)
    );

    let mut other_version = good.0;
    other_version[HEADER_OFFSET + 8] = 9;
    write(&path, &other_version, 0o644);
    assert!(matches!(
        probe(&path),
        Err(Refusal::Defect(PageDefect::Version { .. }))
    ));

    let link = dir.join("link");
    write(&path, &good.0, 0o644);
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert_eq!(
        probe(&link).map_err(|r| r.reason()),
        Err("unopenable"),
        "a symlink is not followed"
    );

    let fifo = dir.join("fifo");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
    assert_eq!(probe(&fifo), Err(Refusal::NotRegular));

    assert!(probe(&dir.join("absent")).unwrap_err().is_absent());
    fs::remove_dir_all(&dir).unwrap();
}

fn offset_file(boot: BootId) -> String {
    let mut text = String::new();
    PublishedOffset {
        boot_id: boot,
        offset_ns: -5_000_000,
        origin: OffsetOrigin::KernelLog,
        intersection_ns: (-5_000_400, -4_999_700),
        brackets: 400,
        writer_pid: 4242,
    }
    .encode(&mut text)
    .unwrap();
    text
}

#[test]
fn each_refused_published_offset_names_its_reason() {
    let dir = scratch_dir("offset-refusals");
    let path = dir.join("pvclock-offset");
    let good = offset_file(boot_id());

    write(&path, good.as_bytes(), 0o644);
    let offset = probe_published_offset(&path).expect("the control file is valid");
    assert_eq!((offset.offset_ns, offset.writer_pid), (-5_000_000, 4242));

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        write(&path, good.as_bytes(), 0o644);
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        assert_eq!(
            probe_published_offset(&path),
            Err(Refusal::OtherOwner { uid: 65534 })
        );
    } else {
        skip(
            "each_refused_published_offset_names_its_reason (other owner)",
            Need::Root,
            "only root can give a file away",
        );
    }
    write(&path, good.as_bytes(), 0o664);
    assert_eq!(
        probe_published_offset(&path).map_err(|r| r.reason()),
        Err("writable")
    );
    write(&path, &good.as_bytes()[..good.len() - 3], 0o644);
    assert!(matches!(
        probe_published_offset(&path),
        Err(Refusal::Defect(PageDefect::Garbage(_)))
    ));
    write(&path, good.repeat(3).as_bytes(), 0o644);
    assert!(matches!(
        probe_published_offset(&path),
        Err(Refusal::Defect(PageDefect::Garbage(_)))
    ));
    let [a, b] = boot_id().words();
    write(
        &path,
        offset_file(BootId::from_words([a, b ^ 1])).as_bytes(),
        0o644,
    );
    assert_eq!(
        probe_published_offset(&path),
        Err(Refusal::Defect(PageDefect::OtherBoot))
    );
    let link = dir.join("link");
    write(&path, good.as_bytes(), 0o644);
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert_eq!(
        probe_published_offset(&link).map_err(|r| r.reason()),
        Err("unopenable")
    );
    assert!(probe_published_offset(&dir.join("absent"))
        .unwrap_err()
        .is_absent());
    fs::remove_dir_all(&dir).unwrap();
}

/// Set in the child of [`a_setuid_client_trusts_only_roots_pages`]: the page to judge.
const SECURE_CHILD_PAGE: &str = "PERFCLOCK_TEST_SECURE_CHILD_PAGE";

/// The child role of [`a_setuid_client_trusts_only_roots_pages`] (does nothing otherwise):
/// prints which pages this process would try and what it makes of the one it was given.
#[test]
fn secure_child_role() {
    let Some(page) = std::env::var_os(SECURE_CHILD_PAGE) else {
        return;
    };
    // SAFETY: getauxval takes a constant and has no preconditions.
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    let verdict = probe(Path::new(&page)).map(|_| ()).map_err(|r| r.reason());
    println!(
        "secure={secure} candidates={:?} verdict={verdict:?}",
        candidates()
    );
}

/// A setuid-root copy of this test program, run as `nobody` with `PERFCLOCK_SHARED_PAGE`
/// naming nobody's page, ignores the variable and refuses the page (its real user is not to set
/// a privileged program's clock) but accepts root's (which then lacks only its server); the same
/// copy without the setuid bit (the control) follows the variable and accepts nobody's page.
#[test]
fn a_setuid_client_trusts_only_roots_pages() {
    let test = perfclock_testutil::test_name!();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip(
            test,
            Need::Root,
            "making a setuid-root program and running it as nobody",
        );
        return;
    }
    if !counter::SUPPORTED {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: no supported counter here"
        );
        return;
    }
    let dir = scratch_dir("secure");
    let program = dir.join("client");
    fs::copy(std::env::current_exe().unwrap(), &program).unwrap();
    let nobodys = dir.join("nobodys-page");
    write(&nobodys, &page(boot_id(), 0).0, 0o644);
    std::os::unix::fs::chown(&nobodys, Some(65534), Some(65534)).unwrap();
    let roots = dir.join("roots-page");
    write(&roots, &page(boot_id(), 0).0, 0o644);
    let run = |mode: u32, page: &Path| {
        fs::set_permissions(&program, fs::Permissions::from_mode(mode)).unwrap();
        let output = std::process::Command::new(&program)
            .args([
                "--exact",
                "secure_child_role",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(SECURE_CHILD_PAGE, page)
            .env("PERFCLOCK_SHARED_PAGE", &nobodys)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // libtest prints the test's name before the line: keep what the child printed.
        stdout
            .lines()
            .find_map(|line| line.find("secure=").map(|at| line[at..].to_owned()))
            .unwrap_or_else(|| panic!("the child printed no verdict: {stdout}"))
    };
    let control = run(0o755, &nobodys);
    assert_eq!(
        control,
        format!("secure=false candidates=Some([{nobodys:?}]) verdict=Err(\"no-server\")"),
        "the control: nobody's own program follows the variable and trusts nobody's page"
    );
    let secure = run(0o4755, &nobodys);
    assert_eq!(
        secure,
        format!(
            "secure=true candidates=Some([{:?}]) verdict=Err(\"other-owner\")",
            Path::new(SYSTEM_PATH)
        )
    );
    let secure_roots = run(0o4755, &roots);
    assert_eq!(
        secure_roots,
        format!(
            "secure=true candidates=Some([{:?}]) verdict=Err(\"no-server\")",
            Path::new(SYSTEM_PATH)
        )
    );
    fs::remove_dir_all(&dir).unwrap();
}

/// A page its file shows stale is refused without a connection to its socket: a stopped
/// server's socket queues connections and never answers, and waiting on it cost every client
/// the whole server timeout. The socket here is a listener that never accepts; it must still
/// have no connection pending after the probe.
#[test]
fn a_stale_page_is_refused_before_any_connection() {
    if !counter::SUPPORTED {
        skip(
            "a_stale_page_is_refused_before_any_connection",
            Need::X86_64,
            "no counter on this architecture",
        );
        return;
    }
    let dir = scratch_dir("stale-first");
    let path = dir.join("clock");
    let listener = std::os::unix::net::UnixListener::bind(socket_path(&path)).unwrap();
    listener.set_nonblocking(true).unwrap();
    write(
        &path,
        &page(boot_id(), STALE_AFTER_NS + 2_000_000_000).0,
        0o644,
    );
    assert!(
        matches!(probe(&path), Err(Refusal::Defect(PageDefect::Stale { .. }))),
        "{:?}",
        probe(&path)
    );
    let pending = listener.accept();
    assert!(
        matches!(&pending, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the client connected to a stale page's socket: {pending:?}"
    );
    fs::remove_dir_all(&dir).unwrap();
}
