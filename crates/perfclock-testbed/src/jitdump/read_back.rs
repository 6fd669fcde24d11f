//! The dump and its sidecar read back independently of the writer: the dump with
//! `linux-perf-data`'s jitdump reader, the header and the `.timeconv` record checked against
//! values written out from perf's `jitdump.h` and the kernel's page.

use std::io::Cursor;

use linux_perf_data::jitdump::{JitDumpHeader, JitDumpReader, JitDumpRecord};
use perfclock_core::TimeConversion;
use perfclock_jitdump::timeconv::{TimeConvMode, TimeConvRecord};

/// `JITDUMP_FLAGS_ARCH_TIMESTAMP` (perf's `jitdump.h`: bit 0). Written out here rather than
/// taken from the writer, so the check does not agree with the writer by construction.
const FLAGS_ARCH_TIMESTAMP: u64 = 1;
/// `JITHEADER_VERSION`.
const JITDUMP_VERSION: u32 = 1;
/// Size of the jitdump file header.
const JITDUMP_HEADER_SIZE: u32 = 40;

/// The ELF `e_machine` perf writes into the images it generates from the dump: `EM_X86_64`.
#[cfg(target_arch = "x86_64")]
const EXPECTED_ELF_MACH: u32 = 62;
/// The ELF `e_machine` perf writes into the images it generates from the dump: `EM_AARCH64`.
#[cfg(target_arch = "aarch64")]
const EXPECTED_ELF_MACH: u32 = 183;
/// No counter on other architectures: the check never gets this far there (the page check
/// fails first), and `EM_NONE` matches no dump.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const EXPECTED_ELF_MACH: u32 = 0;

/// One `JIT_CODE_LOAD` as the dump holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DumpLoad {
    pub(super) timestamp: u64,
    pub(super) pid: u32,
    pub(super) tid: u32,
    pub(super) vma: u64,
    pub(super) code_addr: u64,
    pub(super) index: u64,
    pub(super) name: Vec<u8>,
    pub(super) code: Vec<u8>,
}

/// What an independent reader finds in a dump.
#[derive(Debug, Clone)]
pub(super) struct ParsedDump {
    pub(super) header: JitDumpHeader,
    pub(super) loads: Vec<DumpLoad>,
    /// Timestamp of the `JIT_CODE_CLOSE` record, if the dump ends with one.
    pub(super) close_timestamp: Option<u64>,
}

/// Reads a whole dump with `linux-perf-data`. Anything but loads followed by one close record
/// is an error.
pub(super) fn parse_dump(bytes: &[u8]) -> Result<ParsedDump, String> {
    let mut reader = JitDumpReader::new(Cursor::new(bytes)).map_err(|e| format!("header: {e}"))?;
    let header = reader.header().clone();
    let mut loads = Vec::new();
    let mut close_timestamp = None;
    while let Some(raw) = reader
        .next_record()
        .map_err(|e| format!("record after {} loads: {e}", loads.len()))?
    {
        if close_timestamp.is_some() {
            return Err(format!(
                "a record of type {} follows the close record",
                raw.record_type.0
            ));
        }
        match raw
            .parse()
            .map_err(|e| format!("record at offset {}: {e}", raw.start_offset))?
        {
            JitDumpRecord::CodeLoad(load) => loads.push(DumpLoad {
                timestamp: raw.timestamp,
                pid: load.pid,
                tid: load.tid,
                vma: load.vma,
                code_addr: load.code_addr,
                index: load.code_index,
                name: load.function_name.as_slice().into_owned(),
                code: load.code_bytes.as_slice().into_owned(),
            }),
            JitDumpRecord::CodeClose => close_timestamp = Some(raw.timestamp),
            _ => {
                return Err(format!(
                    "unexpected record type {} at offset {}",
                    raw.record_type.0, raw.start_offset
                ))
            }
        }
    }
    Ok(ParsedDump {
        header,
        loads,
        close_timestamp,
    })
}

/// What is wrong with the dump's header for a dump perf must convert with TIME_CONV.
pub(super) fn header_problems(header: &JitDumpHeader, pid: u32) -> Vec<String> {
    let mut problems = Vec::new();
    let mut expect = |what: &str, found: u64, wanted: u64| {
        if found != wanted {
            problems.push(format!("{what}={found} expected={wanted}"));
        }
    };
    expect("version", header.version.into(), JITDUMP_VERSION.into());
    expect(
        "total_size",
        header.total_size.into(),
        JITDUMP_HEADER_SIZE.into(),
    );
    expect(
        "elf_mach",
        header.elf_machine_arch.into(),
        EXPECTED_ELF_MACH.into(),
    );
    expect("pid", header.pid.into(), pid.into());
    // Exactly the one flag: perf refuses a dump with reserved flag bits set.
    expect("flags", header.flags, FLAGS_ARCH_TIMESTAMP);
    problems
}

/// What is wrong with the sidecar for a dump written in kernel mode under `page`.
pub(super) fn timeconv_problems(
    record: &TimeConvRecord,
    page: &TimeConversion,
    pid: u32,
) -> Vec<String> {
    let mut problems = Vec::new();
    if record.mode() != TimeConvMode::Kernel {
        problems.push(format!("mode={:?} expected=Kernel", record.mode()));
    }
    if record.conversion() != *page {
        problems.push(format!(
            "conversion={:?} page={page:?}",
            record.conversion()
        ));
    }
    if record.error_bound_ns() != 0 {
        problems.push(format!(
            "error_bound_ns={} expected=0",
            record.error_bound_ns()
        ));
    }
    if record.pid() != pid {
        problems.push(format!("pid={} expected={pid}", record.pid()));
    }
    if record.counter() != perfclock_core::counter::COUNTER_NAME {
        problems.push(format!(
            "counter={} expected={}",
            record.counter(),
            perfclock_core::counter::COUNTER_NAME
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_core::BootId;
    use perfclock_jitdump::JitDump;
    use perfclock_testutil::{skip, Need};

    use crate::jitdump::{load_name, CODE};

    /// Size of a `JIT_CODE_CLOSE` record: perf's `struct jr_prefix` alone (`id`, `total_size`,
    /// `timestamp`).
    const CLOSE_RECORD_SIZE: usize = 16;
    const LOADS: u64 = 2;

    /// The calling thread's id, from `/proc/thread-self` (`<pid>/task/<tid>`).
    fn thread_id() -> u32 {
        let link = std::fs::read_link("/proc/thread-self").unwrap();
        link.file_name().unwrap().to_str().unwrap().parse().unwrap()
    }

    /// The bytes of a dump the writer wrote: [`LOADS`] loads as the guest check registers them,
    /// then the close record. `None` (said on stderr) where the perfclock clock cannot be had.
    fn written_dump(test: &str) -> Option<(Vec<u8>, u64)> {
        if let Err(error) = perfclock::init() {
            skip(test, Need::Perf, error);
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let dump = JitDump::create(dir.path()).unwrap();
        let addr = CODE.as_ptr() as u64;
        for index in 0..LOADS {
            assert_eq!(
                dump.code_load(load_name(index).as_bytes(), addr, &CODE)
                    .unwrap(),
                index
            );
        }
        let path = dump.path().to_owned();
        dump.close().unwrap();
        Some((std::fs::read(path).unwrap(), addr))
    }

    #[test]
    fn parses_the_writers_encoding() {
        let Some((bytes, addr)) = written_dump("parses_the_writers_encoding") else {
            return;
        };
        let pid = std::process::id();
        let parsed = parse_dump(&bytes).unwrap();
        let expected: Vec<DumpLoad> = (0..LOADS)
            .zip(&parsed.loads)
            .map(|(index, found)| DumpLoad {
                timestamp: found.timestamp,
                pid,
                tid: thread_id(),
                vma: addr,
                code_addr: addr,
                index,
                name: load_name(index).into_bytes(),
                code: CODE.to_vec(),
            })
            .collect();
        assert_eq!(parsed.loads, expected);
        assert_eq!(parsed.loads.len() as u64, LOADS);
        // Stamped in the order written: header, loads, close.
        let close = parsed.close_timestamp.expect("the dump was closed");
        let stamps: Vec<u64> = std::iter::once(parsed.header.timestamp)
            .chain(parsed.loads.iter().map(|load| load.timestamp))
            .chain([close])
            .collect();
        assert!(stamps.is_sorted(), "{stamps:?}");
        assert!(header_problems(&parsed.header, pid).is_empty());
        assert_eq!(header_problems(&parsed.header, pid + 1).len(), 1);

        let open = parse_dump(&bytes[..bytes.len() - CLOSE_RECORD_SIZE]).unwrap();
        assert_eq!(open.loads, parsed.loads);
        assert_eq!(open.close_timestamp, None);
    }

    #[test]
    fn refuses_records_after_close_and_foreign_headers() {
        let Some((mut bytes, _)) = written_dump("refuses_records_after_close_and_foreign_headers")
        else {
            return;
        };
        let mut header = parse_dump(&bytes).unwrap().header;
        // A second close record after the writer's own.
        let close = bytes[bytes.len() - CLOSE_RECORD_SIZE..].to_vec();
        bytes.extend_from_slice(&close);
        assert!(parse_dump(&bytes)
            .unwrap_err()
            .contains("follows the close"));

        header.flags = 0; // CLOCK_MONOTONIC stamps: perf would not convert them
        header.elf_machine_arch = 0;
        let problems = header_problems(&header, std::process::id());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(parse_dump(b"not a jitdump at all, forty bytes long..").is_err());
    }

    #[test]
    fn timeconv_must_be_kernel_mode_with_the_pages_conversion() {
        let page = TimeConversion::new(1 << 20, 20, 0).unwrap();
        let pid = 7;
        let record = TimeConvRecord::new(
            pid,
            BootId::from_words([1, 2]),
            TimeConvMode::Kernel,
            perfclock_core::counter::COUNTER_NAME,
            page,
            0,
            1,
        );
        assert!(timeconv_problems(&record, &page, pid).is_empty());
        let calibrated = TimeConvRecord::new(
            pid,
            BootId::from_words([1, 2]),
            TimeConvMode::Calibrated,
            perfclock_core::counter::COUNTER_NAME,
            TimeConversion::new(1 << 20, 20, 1).unwrap(),
            300,
            1,
        );
        assert_eq!(timeconv_problems(&calibrated, &page, pid).len(), 3);
    }
}
