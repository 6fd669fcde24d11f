//! The jitdump writer's timestamps against the kernel's own stamps.
//!
//! `perfclock_jitdump::JitDump` stamps each `JIT_CODE_LOAD` with the raw counter and sets
//! `JITDUMP_FLAGS_ARCH_TIMESTAMP`; `perf inject --jit` converts those values with the
//! recording's `PERF_RECORD_TIME_CONV` (`tools/perf/util/jitdump.c`, `convert_timestamp`, which
//! calls `tsc_to_perf_time` of `tools/perf/util/tsc.c`). Here the kernel publishes the conversion
//! that `perf record` would copy into that record, so the dump can be proven the way perf will
//! read it:
//!
//! - a chain of kernel-stamped COMM records (`prctl`, through `GroundTruth`) with one
//!   `code_load` between each two: `t_A`, load, `t_B`, load, ...;
//! - the dump, read back with `linux-perf-data`'s jitdump reader, must hold every load once,
//!   with the name, code, pid and tid given, and its header must say ARCH_TIMESTAMP and this
//!   architecture's `e_machine`;
//! - each load's timestamp, converted with the kernel page's conversion, must satisfy
//!   `t_A <= ns <= t_B` (arm64: 1 ns above `t_B` is the kernel's floored `time_zero`, counted as
//!   a slip); the conversion is done with `TimeConversion::cycles_to_ns` and, as a cross-check,
//!   with perf's own `u64` arithmetic, which must agree;
//! - the `.timeconv` sidecar must say `mode=kernel` with the page's conversion.
//!
//! With `TESTBED_SELFTEST_SKEW_NS=N` the loads are judged with `time_zero` moved N ns late, so
//! the check must fail.

mod judge;
mod read_back;

use std::path::{Path, PathBuf};

use perfclock_calib::{GroundTruth, RecordKind};
use perfclock_core::{PageReader, TimeConversion};
use perfclock_jitdump::timeconv::TimeConvRecord;
use perfclock_jitdump::JitDump;
use perfclock_os::{EventAttr, PerfEvent};

use crate::brackets::{self, Stats};
use crate::guest_fs::{ensure_proc, DumpDir};
use crate::page::Tolerance;
use crate::report::{chain, Report};
use crate::Budget;
use judge::{judge_loads, skewed, Window, Writer};
use read_back::{header_problems, parse_dump, timeconv_problems, ParsedDump};

/// The code every load registers: one `ret` of the architecture (its bytes are only carried
/// into the dump, never run).
#[cfg(target_arch = "aarch64")]
const CODE: [u8; 4] = [0xc0, 0x03, 0x5f, 0xd6];
/// The code every load registers: one `ret` of the architecture (its bytes are only carried
/// into the dump, never run).
#[cfg(not(target_arch = "aarch64"))]
const CODE: [u8; 1] = [0xc3];

/// Discarded COMM brackets in a row after which the check gives up (as in `brackets`).
const MAX_CONSECUTIVE_DISCARDS: u32 = 64;

/// The name load `index` is registered under.
fn load_name(index: u64) -> String {
    format!("testbed_jit_{index}")
}

/// The kernel's stamp of one COMM record caused by this thread, retrying discarded brackets.
fn kernel_stamp(truth: &mut GroundTruth, discards: &mut u64) -> Result<u64, String> {
    let mut in_a_row = 0;
    loop {
        match truth.bracket_with(RecordKind::Comm, &mut || ()) {
            Ok(stamped) => return Ok(stamped.kernel_ns),
            Err(e) if e.is_transient() => {
                *discards += 1;
                in_a_row += 1;
                if in_a_row >= MAX_CONSECUTIVE_DISCARDS {
                    return Err(format!(
                        "{in_a_row} COMM brackets discarded in a row, last: {}",
                        chain(&e)
                    ));
                }
            }
            Err(e) => return Err(format!("COMM bracket: {}", chain(&e))),
        }
    }
}

/// The conversion of a fresh dummy event's page: what `perf record` would copy into its
/// TIME_CONV record now.
fn page_conversion() -> Result<TimeConversion, String> {
    let mapping = PerfEvent::open(&EventAttr::dummy())
        .and_then(|event| event.map_page_only())
        .map_err(|e| format!("dummy event page: {e}"))?;
    // SAFETY: the mapping is a live read-only perf page written only by the kernel, and outlives
    // the reader (both end with this function).
    let reader = unsafe { PageReader::new(mapping.page().cast()) };
    reader
        .conversion()
        .map_err(|e| format!("page conversion: {}", chain(&e)))
}

/// What the writing phase produced.
#[derive(Debug)]
struct Written {
    windows: Vec<Window>,
    /// The stamp before the first load and after the last one.
    first_stamp: u64,
    last_stamp: u64,
    discards: u64,
    dump_path: PathBuf,
    timeconv_path: PathBuf,
}

/// Writes `ops` loads, each between two kernel-stamped COMM records, and closes the dump.
fn write_dump(dir: &Path, ops: u64, addr: u64) -> Result<Written, String> {
    let mut truth = GroundTruth::open(&[RecordKind::Comm])
        .map_err(|e| format!("GroundTruth::open: {}", chain(&e)))?;
    let dump = JitDump::create(dir).map_err(|e| format!("JitDump::create: {}", chain(&e)))?;
    let (dump_path, timeconv_path) = (dump.path().to_owned(), dump.timeconv_path().to_owned());
    let mut discards = 0;
    let first_stamp = kernel_stamp(&mut truth, &mut discards)?;
    let mut t_a = first_stamp;
    let mut windows = Vec::new();
    for _ in 0..ops {
        let name = load_name(windows.len() as u64);
        let index = dump
            .code_load(name.as_bytes(), addr, &CODE)
            .map_err(|e| format!("code_load: {}", chain(&e)))?;
        // The writer numbers loads itself; the name must carry the same number.
        if index != windows.len() as u64 {
            return Err(format!(
                "code_load returned index {index} for load {}",
                windows.len()
            ));
        }
        let t_b = kernel_stamp(&mut truth, &mut discards)?;
        windows.push(Window { index, t_a, t_b });
        t_a = t_b;
    }
    dump.close().map_err(|e| format!("close: {}", chain(&e)))?;
    Ok(Written {
        windows,
        first_stamp,
        last_stamp: t_a,
        discards,
        dump_path,
        timeconv_path,
    })
}

/// Runs the check and reports `jitdump-header`, `jitdump-timeconv` and `jitdump`.
pub(crate) fn run(report: &mut Report, budget: &Budget, tolerance: Tolerance) {
    let pid1 = std::process::id() == 1;
    if let Err(e) = ensure_proc(pid1) {
        report.fail("jitdump", format_args!("{e}"));
        return;
    }
    let dir = match DumpDir::create(pid1, "perfclock-testbed-jitdump") {
        Ok(dir) => dir,
        Err(e) => {
            report.fail("jitdump", format_args!("{e}"));
            return;
        }
    };
    check(report, budget, tolerance, &dir);
    dir.remove();
}

fn check(report: &mut Report, budget: &Budget, tolerance: Tolerance, dir: &DumpDir) {
    let addr = CODE.as_ptr() as u64;
    let tid = perfclock_os::thread::gettid();
    let writer = Writer {
        pid: std::process::id(),
        tid,
        addr,
    };
    let written = match write_dump(&dir.path, budget.jitdump_ops, addr) {
        Ok(w) => w,
        Err(e) => {
            report.fail(
                "jitdump",
                format_args!(
                    "dir={} tmpfs={} error={e:?}",
                    dir.path.display(),
                    dir.mounted
                ),
            );
            return;
        }
    };
    let conversion = match page_conversion() {
        Ok(c) => c,
        Err(e) => {
            report.fail("jitdump", format_args!("error={e:?}"));
            return;
        }
    };
    check_timeconv(report, &written.timeconv_path, &conversion, writer.pid);
    let bytes = match std::fs::read(&written.dump_path) {
        Ok(b) => b,
        Err(e) => {
            report.fail(
                "jitdump",
                format_args!("read {}: {e}", written.dump_path.display()),
            );
            return;
        }
    };
    let parsed = match parse_dump(&bytes) {
        Ok(p) => p,
        Err(e) => {
            report.fail("jitdump", format_args!("linux-perf-data reader: {e}"));
            return;
        }
    };
    let problems = header_problems(&parsed.header, writer.pid);
    report.check(
        problems.is_empty(),
        "jitdump-header",
        format_args!(
            "flags={:#x} elf_mach={} version={} problems={problems:?}",
            parsed.header.flags, parsed.header.elf_machine_arch, parsed.header.version
        ),
    );
    check_loads(
        report,
        &parsed,
        &written,
        writer,
        &conversion,
        tolerance,
        dir.mounted,
    );
}

/// The timeconv sidecar at `path` against the page's `conversion` and the writer's `pid`.
fn check_timeconv(report: &mut Report, path: &Path, conversion: &TimeConversion, pid: u32) {
    match std::fs::read_to_string(path) {
        Ok(text) => match TimeConvRecord::parse(&text) {
            Ok(record) => {
                let problems = timeconv_problems(&record, conversion, pid);
                report.check(
                    problems.is_empty(),
                    "jitdump-timeconv",
                    format_args!(
                        "mode={:?} same_conversion_as_page={} problems={problems:?}",
                        record.mode(),
                        record.conversion() == *conversion
                    ),
                );
            }
            Err(e) => report.fail("jitdump-timeconv", format_args!("parse: {e}")),
        },
        Err(e) => report.fail(
            "jitdump-timeconv",
            format_args!("read {}: {e}", path.display()),
        ),
    }
}

/// The dump's code loads, header and close stamps against the windows they were written in.
fn check_loads(
    report: &mut Report,
    parsed: &ParsedDump,
    written: &Written,
    writer: Writer,
    conversion: &TimeConversion,
    tolerance: Tolerance,
    mounted: bool,
) {
    let judged = skewed(conversion, brackets::selftest_skew_ns());
    let stats = judge_loads(&parsed.loads, &written.windows, writer, &judged, tolerance);
    // The header is stamped at create, before the first COMM; the close record after the last.
    let header_ns = judged.cycles_to_ns(parsed.header.timestamp);
    let header_in_order = header_ns <= written.first_stamp.saturating_add(tolerance.ns);
    let close_ns = parsed.close_timestamp.map(|c| judged.cycles_to_ns(c));
    let close_in_order =
        close_ns.is_some_and(|ns| ns.saturating_add(tolerance.ns) >= written.last_stamp);
    let mut summary = Stats::new();
    summary.events = stats.loads;
    summary.violations = stats.violations;
    summary.slips = stats.slips;
    report.add_events(summary.judged(), None);
    report.check(
        stats.ok() && header_in_order && close_in_order,
        "jitdump",
        format_args!(
            "{} header_before_first_stamp={header_in_order} close_after_last_stamp={close_in_order} \
             closed={} discards={} tmpfs={}",
            stats.details(),
            close_ns.is_some(),
            written.discards,
            mounted,
        ),
    );
}
