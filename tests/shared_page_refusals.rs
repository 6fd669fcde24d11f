//! The shared page's trust and validity checks, one refused page per reason: each refusal is
//! the specific one (not merely "refused"), after a control page built the same way passes.
//! Pages are built with the core's writer, as `perfclock serve` builds them.
#![cfg(target_os = "linux")]
#![allow(unsafe_code)]

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::ptr::NonNull;

use perfclock::shared_page::probe;
use perfclock::Refusal;
use perfclock_core::counter;
use perfclock_core::shared_page::{
    SharedBound, SharedPageWriter, FILE_BYTES, HEADER_OFFSET, STALE_AFTER_NS,
};
use perfclock_core::{PageDefect, TimeConversion};

/// 0.4 ns per tick (a 2.5 GHz counter), shift 31.
const MULT: u32 = 858_993_459;

#[repr(C, align(4096))]
struct Page([u8; FILE_BYTES]);

fn boot_id() -> [u64; 2] {
    let text = fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    let hex: String = text.trim().chars().filter(|c| *c != '-').collect();
    [
        u64::from_str_radix(&hex[..16], 16).unwrap(),
        u64::from_str_radix(&hex[16..], 16).unwrap(),
    ]
}

/// A page as a server would write it, with `boot` and a heartbeat `age_ns` old.
fn page(boot: [u64; 2], age_ns: u64) -> Box<Page> {
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
    let info = probe(&path).expect("the control page is valid");
    assert_eq!(info.server_pid, 4242);
    assert!(info.error_bound_ns >= 500 && info.error_bound_ns < u64::MAX);

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
        Err(Refusal::Defect(PageDefect::Truncated { len: 100 }))
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

    let [a, b] = boot_id();
    write(&path, &page([a ^ 1, b], 0).0, 0o644);
    assert_eq!(probe(&path), Err(Refusal::Defect(PageDefect::OtherBoot)));

    write(
        &path,
        &page(boot_id(), STALE_AFTER_NS + 2_000_000_000).0,
        0o644,
    );
    assert!(
        matches!(probe(&path), Err(Refusal::Defect(PageDefect::Stale { age_ns })) if age_ns > STALE_AFTER_NS),
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
