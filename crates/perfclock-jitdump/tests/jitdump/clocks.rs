//! The jitdump's clock choice: `perf` and `monotonic` dumps carry flags 0 and stamps
//! in that clock, taken between readings of it around each load; the sidecar names the clock; a
//! second open of the same directory in another clock is refused.
//!
//! Needs the perfclock clock (`SKIPPED` without it, fatal under `PERFCLOCK_REQUIRE_PERF=1`).

use std::io::Cursor;

use linux_perf_data::jitdump::{JitDumpReader, JitDumpRecord};
use perfclock_jitdump::timeconv::TimeConvRecord;
use perfclock_jitdump::{ClockMismatch, JitClock, JitDump, JitDumpError};
use perfclock_testutil::time::monotonic_ns;
use perfclock_testutil::{ok_or_skip, Need};

#[test]
fn perf_and_monotonic_dumps_are_stamped_in_their_clock() {
    if ok_or_skip(
        "perf_and_monotonic_dumps_are_stamped_in_their_clock",
        Need::Perf,
        perfclock::init(),
    )
    .is_none()
    {
        return;
    }
    let now = |clock: JitClock| match clock {
        JitClock::Perf => perfclock::now_ns_ordered(),
        JitClock::Monotonic => monotonic_ns(),
        JitClock::Arch => unreachable!(),
    };
    for clock in [JitClock::Perf, JitClock::Monotonic] {
        let dir = tempfile::tempdir().unwrap();
        let dump = JitDump::create_with_clock(dir.path(), clock).unwrap();
        assert_eq!(dump.jit_clock(), clock);
        let mut brackets = Vec::new();
        for i in 0..50u64 {
            let before = now(clock);
            dump.code_load(format!("f{i}").as_bytes(), 0x1000 + i, &[0xc3])
                .unwrap();
            brackets.push((before, now(clock)));
        }
        let path = dump.path().to_owned();
        let sidecar = dump.timeconv_path().to_owned();
        // The bound the perf clock's readings have (0 in kernel mode).
        let slack = 2 * dump.clock().error_bound_ns();
        dump.close().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let mut reader = JitDumpReader::new(Cursor::new(&bytes[..])).unwrap();
        assert_eq!(reader.header().flags, 0, "{clock}: flags");
        let mut stamps = Vec::new();
        while let Some(raw) = reader.next_record().unwrap() {
            if let JitDumpRecord::CodeLoad(_) = raw.parse().unwrap() {
                stamps.push(raw.timestamp);
            }
        }
        assert_eq!(stamps.len(), brackets.len());
        for (stamp, (before, after)) in stamps.iter().zip(&brackets) {
            assert!(
                before.saturating_sub(slack) <= *stamp && *stamp <= after + slack,
                "{clock}: {before} <= {stamp} <= {after} (slack {slack})"
            );
        }
        let record = TimeConvRecord::parse(&std::fs::read_to_string(&sidecar).unwrap()).unwrap();
        assert_eq!(record.clock(), clock);
    }
}

#[test]
fn one_clock_per_dump() {
    if ok_or_skip("one_clock_per_dump", Need::Perf, perfclock::init()).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let arch = JitDump::create(dir.path()).unwrap();
    match JitDump::create_with_clock(dir.path(), JitClock::Monotonic) {
        Err(JitDumpError::ClockMismatch(ClockMismatch {
            open: JitClock::Arch,
            requested: JitClock::Monotonic,
            ..
        })) => {}
        other => panic!("{other:?}"),
    }
    let again = JitDump::create_with_clock(dir.path(), JitClock::Arch).unwrap();
    again.close().unwrap();
    arch.close().unwrap();
}
