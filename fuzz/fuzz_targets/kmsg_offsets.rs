//! The kernel log's parser (`perfclock::paravirt::kmsg`) and the pvclock page's parsers
//! (`perfclock::paravirt::page`) on arbitrary bytes: they never panic, and an offset is
//! only ever what the two records say.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfclock::paravirt::kmsg::{parse_record, SchedOffsets};
use perfclock::paravirt::page::{candidates, parse_cpu_list, validate_copy, VvarLayout};

fuzz_target!(|data: &[u8]| {
    // Records as `read` returns them, one per NUL-separated chunk.
    let mut offsets = SchedOffsets::default();
    for record in data.split(|&b| b == 0) {
        if let Some(parsed) = parse_record(record) {
            assert!(parsed.message.len() <= record.len());
        }
        offsets.feed(record);
    }
    if let Ok(offset) = offsets.offset() {
        let [a, b, c, d] = offsets
            .marking_stable
            .expect("an offset needs Marking stable");
        assert_eq!(a.checked_add(b).and_then(|s| s.checked_sub(c)), Some(d));
        let kvm = offsets
            .kvm_sched_offset_ns
            .expect("an offset needs the kvm-clock line");
        assert_eq!(i128::from(offset), i128::from(d) - i128::from(kvm));
    }
    let text = String::from_utf8_lossy(data);
    assert!(candidates(&text).len() <= text.lines().count());
    if let Some(cpus) = parse_cpu_list(&text) {
        assert!(!cpus.is_empty());
    }
    if data.len() >= 4096 {
        let page: &[u8; 4096] = data[..4096].try_into().unwrap();
        let vcpus: Vec<usize> = data[4096..].iter().map(|&b| usize::from(b)).collect();
        let _ = validate_copy(page, &vcpus, VvarLayout::VvarVclock);
    }
});
