//! The shared clock page (`perfclock serve`'s file) from arbitrary bytes: bytes no perfclock
//! wrote, as a client finds them in a file it did not create. `parse` must return (never panic)
//! and, when it accepts, hand out a conversion the reader accepts too; the freshness check and
//! the bound must not panic whatever the counter and boot id; and reading the same bytes as a
//! mapped page (`SharedPageReader`) must give the same verdict as parsing them.
#![no_main]

use core::ptr::NonNull;

use libfuzzer_sys::fuzz_target;
use perfclock_core::shared_page::{
    parse, SharedBound, SharedPageReader, SharedPageWriter, FILE_BYTES, LAYOUT_BYTES,
};
use perfclock_core::{BootId, PageDefect, TimeConversion};

#[repr(C, align(4096))]
struct File([u8; FILE_BYTES]);

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    for (i, byte) in word.iter_mut().enumerate() {
        *byte = bytes.get(offset + i).copied().unwrap_or(0);
    }
    u64::from_ne_bytes(word)
}

/// A valid page, as a server writes it.
fn template() -> Box<File> {
    let mut file = Box::new(File([0; FILE_BYTES]));
    let base = NonNull::from(&mut file.0).cast::<u8>();
    // SAFETY: an aligned FILE_BYTES buffer written by this one writer, read by no one meanwhile.
    let writer = unsafe { SharedPageWriter::new(base) };
    writer.claim(BootId::from_words([7, 9]), 1234, 1_000_000);
    writer.publish(&TimeConversion::new(858_993_459, 31, 1_000).unwrap());
    writer.store_bound(
        &SharedBound {
            base_ns: 500,
            growth_q48: 1 << 30,
            counter_ref: 1_000_000,
        },
        1_000_000,
    );
    file
}

fuzz_target!(|data: &[u8]| {
    judge(data);
    let mut edited = template();
    assert!(parse(&edited.0).is_ok(), "the template is valid");
    for edit in data.chunks_exact(3) {
        let offset = usize::from(u16::from_ne_bytes([edit[0], edit[1]])) % LAYOUT_BYTES;
        edited.0[offset] = edit[2];
    }
    judge(&edited.0);
});

fn judge(data: &[u8]) {
    let parsed = parse(data);
    // The last 24 bytes past the page (if any) drive the freshness check.
    let now = u64_at(data, FILE_BYTES);
    let boot = BootId::from_words([u64_at(data, FILE_BYTES + 8), u64_at(data, FILE_BYTES + 16)]);
    if let Ok(snapshot) = parsed {
        assert!(snapshot.server_pid != 0);
        let slope =
            f64::from(snapshot.conversion.mult()) / (1u64 << snapshot.conversion.shift()) as f64;
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
}
