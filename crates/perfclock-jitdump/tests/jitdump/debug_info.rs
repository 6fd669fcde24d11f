//! `JitDump::code_load_with_debug_info` against an independent reader (`linux-perf-data`): the
//! debug record comes right before its load, with the load's address and stamp.
//!
//! Needs the perfclock clock (perf events). Without it the test prints `SKIPPED` and returns,
//! unless `PERFCLOCK_REQUIRE_PERF=1` (CI), which turns that into a failure.

use std::io::Cursor;
use std::sync::Arc;

use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord};
use perfclock_jitdump::{DebugEntry, JitDump};
use perfclock_testutil::{ok_or_skip, Need};

#[test]
fn debug_record_precedes_its_load_under_concurrent_loads() {
    if ok_or_skip(
        "debug_record_precedes_its_load_under_concurrent_loads",
        Need::Perf,
        perfclock::init(),
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dump = Arc::new(JitDump::create(dir.path()).unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let dump = Arc::clone(&dump);
            std::thread::spawn(move || {
                for i in 0..200u64 {
                    let addr = 0x10_0000 * (t + 1) + i * 0x100;
                    let code = [0x90u8; 32];
                    if i % 2 == 0 {
                        dump.code_load(b"plain", addr, &code).unwrap();
                    } else {
                        let file = format!("T{t}.java");
                        let entries = [
                            DebugEntry {
                                addr,
                                line: i as i32,
                                discriminator: 0,
                                file: file.as_bytes(),
                            },
                            DebugEntry {
                                addr: addr + 16,
                                line: i as i32 + 1,
                                discriminator: 0,
                                file: b"Other.java",
                            },
                        ];
                        dump.code_load_with_debug_info(b"lined", addr, &code, &entries)
                            .unwrap();
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let path = dump.path().to_owned();
    Arc::into_inner(dump).unwrap().close().unwrap();
    let bytes = std::fs::read(path).unwrap();
    let mut reader = JitDumpReader::new(Cursor::new(&bytes[..])).unwrap();
    let mut pending: Option<(u64, u64, Vec<u32>)> = None;
    let (mut lined, mut plain) = (0, 0);
    while let Some(raw) = reader.next_record().unwrap() {
        match raw.parse().unwrap() {
            JitDumpRecord::CodeDebugInfo(info) => {
                assert!(pending.is_none(), "two debug records in a row");
                assert_eq!(info.entries.len(), 2);
                assert_eq!(info.entries[0].code_addr, info.code_addr);
                assert_eq!(info.entries[1].code_addr, info.code_addr + 16);
                assert_eq!(info.entries[1].file_path.as_slice().as_ref(), b"Other.java");
                let lines = info.entries.iter().map(|e| e.line).collect();
                pending = Some((info.code_addr, raw.timestamp, lines));
            }
            JitDumpRecord::CodeLoad(load) => {
                let name = load.function_name.as_slice().into_owned();
                match pending.take() {
                    Some((addr, timestamp, lines)) => {
                        assert_eq!(name, b"lined");
                        assert_eq!(addr, load.code_addr);
                        assert_eq!(timestamp, raw.timestamp);
                        assert_eq!(lines[1], lines[0] + 1);
                        lined += 1;
                    }
                    None => {
                        assert_eq!(name, b"plain");
                        plain += 1;
                    }
                }
            }
            JitDumpRecord::CodeClose => {}
            other => panic!("unexpected record {other:?}"),
        }
    }
    assert!(pending.is_none(), "a debug record without its load");
    assert_eq!((lined, plain), (400, 400));
}
