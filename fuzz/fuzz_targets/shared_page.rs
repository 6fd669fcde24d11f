//! The shared clock page (`perfclock serve`'s file) from arbitrary bytes: bytes no perfclock
//! wrote, as a client finds them in a file it did not create. `parse` must return (never panic)
//! and, when it accepts, hand out a conversion the reader accepts too; the freshness check and
//! the bound must not panic whatever the counter and boot id; and reading the same bytes as a
//! mapped page (`SharedPageReader`) must give the same verdict as parsing them.
#![no_main]

use core::ptr::NonNull;

use libfuzzer_sys::fuzz_target;
use perfclock_core::shared_page::{parse, PageDefect, SharedPageReader, FILE_BYTES};

#[repr(C, align(4096))]
struct File([u8; FILE_BYTES]);

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    for (i, byte) in word.iter_mut().enumerate() {
        *byte = bytes.get(offset + i).copied().unwrap_or(0);
    }
    u64::from_ne_bytes(word)
}

fuzz_target!(|data: &[u8]| {
    let parsed = parse(data);
    // The last 24 bytes past the page (if any) drive the freshness check.
    let now = u64_at(data, FILE_BYTES);
    let boot = [u64_at(data, FILE_BYTES + 8), u64_at(data, FILE_BYTES + 16)];
    if let Ok(snapshot) = parsed {
        assert!(snapshot.server_pid != 0);
        let slope = f64::from(snapshot.conversion.mult()) / (1u64 << snapshot.conversion.shift()) as f64;
        assert!((0.05..=1000.0).contains(&slope));
        let _ = snapshot.check_fresh(boot, now);
        let _ = snapshot.check_fresh(snapshot.boot_id, now);
        let _ = snapshot.heartbeat_age_ns(now);
        let _ = snapshot.bound.at(now);
        let _ = snapshot.conversion.cycles_to_ns(now);
    }
    if data.len() >= FILE_BYTES {
        let mut file = Box::new(File([0; FILE_BYTES]));
        file.0.copy_from_slice(&data[..FILE_BYTES]);
        let base = NonNull::from(&mut file.0).cast::<u8>();
        // SAFETY: an aligned FILE_BYTES buffer that outlives the reader and that nothing writes
        // while it reads.
        let reader = unsafe { SharedPageReader::new(base) };
        match reader.snapshot() {
            Ok(copy) => assert_eq!(parse(&copy), parsed),
            // A well-formed header whose lock is odd: nobody will ever finish that write.
            Err(error) => {
                assert_eq!(error, PageDefect::Busy);
                assert_eq!(parsed, Err(PageDefect::Busy));
            }
        }
        let _ = reader.bound_and_heartbeat();
        let _ = reader.page_reader().raw();
    }
});
