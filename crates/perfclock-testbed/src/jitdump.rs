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

use std::collections::HashMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use linux_perf_data::jitdump::{JitDumpHeader, JitDumpReader, JitDumpRecord};
use perfclock_calib::{GroundTruth, RecordKind};
use perfclock_core::{PageReader, TimeConversion};
use perfclock_event::{EventAttr, PerfEvent};
use perfclock_jitdump::timeconv::{TimeConvMode, TimeConvRecord};
use perfclock_jitdump::JitDump;

use crate::brackets::{self, Stats};
use crate::guest_fs::{ensure_proc, DumpDir};
use crate::page::Tolerance;
use crate::report::{min_or_dash, Report};
use crate::Budget;

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
/// Problems printed in full.
const EXAMPLES: usize = 3;

/// The name load `index` is registered under.
fn load_name(index: u64) -> String {
    format!("testbed_jit_{index}")
}

/// perf's `tsc_to_perf_time` (`tools/perf/util/tsc.c`), in its own `u64` arithmetic: what
/// `perf inject --jit` computes for each arch timestamp from an extended TIME_CONV record.
fn perf_tsc_to_perf_time(conversion: &TimeConversion, cycles: u64) -> u64 {
    let cycles = if conversion.is_short() {
        conversion
            .cycles()
            .wrapping_add(cycles.wrapping_sub(conversion.cycles()) & conversion.mask())
    } else {
        cycles
    };
    let shift = u32::from(conversion.shift());
    let mult = u64::from(conversion.mult());
    let quot = cycles >> shift;
    let rem = cycles & ((1u64 << shift) - 1);
    conversion
        .zero()
        .wrapping_add(quot.wrapping_mul(mult))
        .wrapping_add(rem.wrapping_mul(mult) >> shift)
}

/// `conversion` with `time_zero` moved `skew_ns` later: the self-test's clock that runs ahead
/// of the kernel's (`TESTBED_SELFTEST_SKEW_NS`), which every load must then be caught by.
fn skewed(conversion: &TimeConversion, skew_ns: u64) -> TimeConversion {
    let zero = conversion.zero().wrapping_add(skew_ns);
    let moved = if conversion.is_short() {
        TimeConversion::new_short(
            conversion.mult(),
            conversion.shift(),
            zero,
            conversion.cycles(),
            conversion.mask(),
        )
    } else {
        TimeConversion::new(conversion.mult(), conversion.shift(), zero)
    };
    // Only time_zero changed, and no value of it is invalid.
    moved.unwrap_or(*conversion)
}

/// One `JIT_CODE_LOAD` as the dump holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DumpLoad {
    timestamp: u64,
    pid: u32,
    tid: u32,
    vma: u64,
    code_addr: u64,
    index: u64,
    name: Vec<u8>,
    code: Vec<u8>,
}

/// What an independent reader finds in a dump.
#[derive(Debug, Clone)]
struct ParsedDump {
    header: JitDumpHeader,
    loads: Vec<DumpLoad>,
    /// Timestamp of the `JIT_CODE_CLOSE` record, if the dump ends with one.
    close_timestamp: Option<u64>,
}

/// Reads a whole dump with `linux-perf-data`. Anything but loads followed by one close record
/// is an error.
fn parse_dump(bytes: &[u8]) -> Result<ParsedDump, String> {
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
fn header_problems(header: &JitDumpHeader, pid: u32) -> Vec<String> {
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
fn timeconv_problems(record: &TimeConvRecord, page: &TimeConversion, pid: u32) -> Vec<String> {
    let mut problems = Vec::new();
    if record.mode != TimeConvMode::Kernel {
        problems.push(format!("mode={:?} expected=Kernel", record.mode));
    }
    if record.conversion != *page {
        problems.push(format!("conversion={:?} page={page:?}", record.conversion));
    }
    if record.error_bound_ns != 0 {
        problems.push(format!(
            "error_bound_ns={} expected=0",
            record.error_bound_ns
        ));
    }
    if record.pid != pid {
        problems.push(format!("pid={} expected={pid}", record.pid));
    }
    if record.counter != perfclock_core::counter::COUNTER_NAME {
        problems.push(format!(
            "counter={} expected={}",
            record.counter,
            perfclock_core::counter::COUNTER_NAME
        ));
    }
    problems
}

/// The kernel stamps around one load: `t_a` before the `code_load` call, `t_b` after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    index: u64,
    t_a: u64,
    t_b: u64,
}

/// Whose loads the dump should hold.
#[derive(Debug, Clone, Copy)]
struct Writer {
    pid: u32,
    tid: u32,
    addr: u64,
}

/// The judged loads of one dump.
#[derive(Debug, Clone)]
struct LoadStats {
    loads: u64,
    /// Converted timestamp outside its window by more than the tolerance.
    violations: u64,
    /// Outside by at most the tolerance (arm64's 1 ns).
    slips: u64,
    max_excess_ns: u64,
    /// Smallest distance from a load to the nearer kernel stamp, over loads inside.
    min_margin_ns: u64,
    /// Narrowest `t_b - t_a`.
    tightest_ns: u64,
    /// `cycles_to_ns` and perf's `u64` formula disagreed.
    perf_formula_mismatches: u64,
    /// Loads with an index no window has, a duplicate index, or another name, code, pid, tid
    /// or address than was registered.
    wrong_loads: u64,
    /// Windows whose load the dump lacks.
    missing_loads: u64,
    examples: Vec<String>,
}

impl LoadStats {
    fn new() -> LoadStats {
        LoadStats {
            loads: 0,
            violations: 0,
            slips: 0,
            max_excess_ns: 0,
            min_margin_ns: u64::MAX,
            tightest_ns: u64::MAX,
            perf_formula_mismatches: 0,
            wrong_loads: 0,
            missing_loads: 0,
            examples: Vec::new(),
        }
    }

    fn example(&mut self, text: String) {
        if self.examples.len() < EXAMPLES {
            self.examples.push(text);
        }
    }

    fn ok(&self) -> bool {
        self.loads > 0
            && self.violations == 0
            && self.perf_formula_mismatches == 0
            && self.wrong_loads == 0
            && self.missing_loads == 0
    }

    fn details(&self) -> String {
        let mut s = format!(
            "loads={} violations={} slips_1ns={} max_excess_ns={} min_margin_ns={} \
             tightest_window_ns={} perf_formula_mismatches={} wrong_loads={} missing_loads={}",
            self.loads,
            self.violations,
            self.slips,
            self.max_excess_ns,
            min_or_dash(self.min_margin_ns),
            min_or_dash(self.tightest_ns),
            self.perf_formula_mismatches,
            self.wrong_loads,
            self.missing_loads,
        );
        for e in &self.examples {
            s += &format!(" example=[{e}]");
        }
        s
    }
}

/// Judges every load of the dump against the window of its `code_index`.
fn judge_loads(
    loads: &[DumpLoad],
    windows: &[Window],
    writer: Writer,
    conversion: &TimeConversion,
    tolerance: Tolerance,
) -> LoadStats {
    let mut stats = LoadStats::new();
    let mut unseen: HashMap<u64, Window> = windows.iter().map(|w| (w.index, *w)).collect();
    for load in loads {
        let Some(window) = unseen.remove(&load.index) else {
            stats.wrong_loads += 1;
            stats.example(format!("index={} unknown or repeated", load.index));
            continue;
        };
        let expected_name = load_name(load.index);
        if load.name != expected_name.as_bytes()
            || load.code != CODE
            || load.pid != writer.pid
            || load.tid != writer.tid
            || load.vma != writer.addr
            || load.code_addr != writer.addr
        {
            stats.wrong_loads += 1;
            stats.example(format!(
                "index={} name={:?} pid={} tid={} vma={:#x} code_addr={:#x} code_len={} \
                 expected name={expected_name:?} pid={} tid={} addr={:#x}",
                load.index,
                String::from_utf8_lossy(&load.name),
                load.pid,
                load.tid,
                load.vma,
                load.code_addr,
                load.code.len(),
                writer.pid,
                writer.tid,
                writer.addr,
            ));
        }
        stats.loads += 1;
        let ns = conversion.cycles_to_ns(load.timestamp);
        let perf_ns = perf_tsc_to_perf_time(conversion, load.timestamp);
        if ns != perf_ns {
            stats.perf_formula_mismatches += 1;
            stats.example(format!(
                "index={} counter={} cycles_to_ns={ns} perf_tsc_to_perf_time={perf_ns}",
                load.index, load.timestamp
            ));
        }
        let (t_a, t_b) = (window.t_a, window.t_b);
        stats.tightest_ns = stats.tightest_ns.min(t_b.saturating_sub(t_a));
        let excess = t_a.saturating_sub(ns).max(ns.saturating_sub(t_b));
        if excess > tolerance.ns {
            stats.violations += 1;
            stats.example(format!(
                "index={} t_a={t_a} load_ns={ns} t_b={t_b} counter={} excess_ns={excess}",
                load.index, load.timestamp
            ));
        } else if excess > 0 {
            stats.slips += 1;
        } else {
            stats.min_margin_ns = stats.min_margin_ns.min((ns - t_a).min(t_b - ns));
        }
        stats.max_excess_ns = stats.max_excess_ns.max(excess);
    }
    stats.missing_loads = unseen.len() as u64;
    if let Some(index) = unseen.keys().min() {
        stats.example(format!(
            "{} loads missing from the dump, first index={index}",
            unseen.len()
        ));
    }
    stats
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
                        "{in_a_row} COMM brackets discarded in a row, last: {e}"
                    ));
                }
            }
            Err(e) => return Err(format!("COMM bracket: {e}")),
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
        .map_err(|e| format!("page conversion: {e}"))
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
    let mut truth =
        GroundTruth::open(&[RecordKind::Comm]).map_err(|e| format!("GroundTruth::open: {e}"))?;
    let dump = JitDump::create(dir).map_err(|e| format!("JitDump::create: {e}"))?;
    let (dump_path, timeconv_path) = (dump.path().to_owned(), dump.timeconv_path().to_owned());
    let mut discards = 0;
    let first_stamp = kernel_stamp(&mut truth, &mut discards)?;
    let mut t_a = first_stamp;
    let mut windows = Vec::new();
    for _ in 0..ops {
        let name = load_name(windows.len() as u64);
        let index = dump
            .code_load(name.as_bytes(), addr, &CODE)
            .map_err(|e| format!("code_load: {e}"))?;
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
    dump.close().map_err(|e| format!("close: {e}"))?;
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
pub fn run(report: &mut Report, budget: &Budget, tolerance: Tolerance) {
    let pid1 = std::process::id() == 1;
    if let Err(e) = ensure_proc(pid1) {
        report.fail("jitdump", format_args!("{e}"));
        return;
    }
    let dir = match DumpDir::create(pid1) {
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
    let tid = perfclock_event::sys::gettid();
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
    match std::fs::read_to_string(&written.timeconv_path) {
        Ok(text) => match TimeConvRecord::parse(&text) {
            Ok(record) => {
                let problems = timeconv_problems(&record, &conversion, writer.pid);
                report.check(
                    problems.is_empty(),
                    "jitdump-timeconv",
                    format_args!(
                        "mode={:?} same_conversion_as_page={} problems={problems:?}",
                        record.mode,
                        record.conversion == conversion
                    ),
                );
            }
            Err(e) => report.fail("jitdump-timeconv", format_args!("parse: {e}")),
        },
        Err(e) => report.fail(
            "jitdump-timeconv",
            format_args!("read {}: {e}", written.timeconv_path.display()),
        ),
    }
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
    let judged = skewed(&conversion, brackets::selftest_skew_ns());
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
    report.add_events(&summary, None);
    report.check(
        stats.ok() && header_in_order && close_in_order,
        "jitdump",
        format_args!(
            "{} header_before_first_stamp={header_in_order} close_after_last_stamp={close_in_order} \
             closed={} discards={} tmpfs={}",
            stats.details(),
            close_ns.is_some(),
            written.discards,
            dir.mounted,
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfclock_jitdump::record;

    const EXACT: Tolerance = Tolerance { ns: 0, cycles: 0 };
    const ARM64: Tolerance = Tolerance { ns: 1, cycles: 1 };
    const WRITER: Writer = Writer {
        pid: 7,
        tid: 8,
        addr: 0x1000,
    };

    /// 1 ns per cycle, time_zero 0: a counter value is its own ns.
    fn identity() -> TimeConversion {
        TimeConversion::new(1 << 20, 20, 0).unwrap()
    }

    fn dump_load(index: u64, timestamp: u64) -> DumpLoad {
        DumpLoad {
            timestamp,
            pid: WRITER.pid,
            tid: WRITER.tid,
            vma: WRITER.addr,
            code_addr: WRITER.addr,
            index,
            name: load_name(index).into_bytes(),
            code: CODE.to_vec(),
        }
    }

    fn window(index: u64, t_a: u64, t_b: u64) -> Window {
        Window { index, t_a, t_b }
    }

    #[test]
    fn perf_formula_matches_cycles_to_ns() {
        let conversions = [
            // Debian's x86_64 TCG guest.
            TimeConversion::new(827_183_298, 31, 123_456_789).unwrap(),
            // arm64 at 24 MHz: inexact mult, a floored (wrapped) time_zero, a 56-bit mask.
            TimeConversion::new_short(
                2_796_202_667,
                26,
                0u64.wrapping_sub(5_000),
                1 << 40,
                (1 << 56) - 1,
            )
            .unwrap(),
            // A 12-bit counter that wraps relative to time_cycles.
            TimeConversion::new_short(1 << 10, 10, 77, 4_000, 0xfff).unwrap(),
        ];
        for conversion in &conversions {
            for cycles in [0, 1, 4_095, 4_097, 1 << 40, (1 << 56) - 1, 1 << 62] {
                assert_eq!(
                    perf_tsc_to_perf_time(conversion, cycles),
                    conversion.cycles_to_ns(cycles),
                    "{conversion:?} at {cycles}"
                );
            }
        }
        // The short counter: raw 3 is 99 ticks after time_cycles 4000 modulo 4096.
        assert_eq!(perf_tsc_to_perf_time(&conversions[2], 3), 77 + 4_099);
    }

    #[test]
    fn skew_moves_only_time_zero() {
        let short = TimeConversion::new_short(87_381_333, 21, 5, 100, (1 << 56) - 1).unwrap();
        let late = skewed(&short, 1_000_000);
        assert_eq!(
            late.cycles_to_ns(12_345),
            short.cycles_to_ns(12_345) + 1_000_000
        );
        assert_eq!(
            (
                late.mult(),
                late.shift(),
                late.cycles(),
                late.mask(),
                late.is_short()
            ),
            (87_381_333, 21, 100, (1 << 56) - 1, true)
        );
        assert_eq!(skewed(&identity(), 0), identity());
        assert_eq!(skewed(&identity(), 7).cycles_to_ns(10), 17);
    }

    #[test]
    fn loads_inside_their_windows_pass_and_outside_fail() {
        let windows = [window(0, 100, 200), window(1, 200, 300)];
        let loads = [dump_load(0, 150), dump_load(1, 200)];
        let s = judge_loads(&loads, &windows, WRITER, &identity(), EXACT);
        assert!(s.ok(), "{}", s.details());
        assert_eq!((s.loads, s.min_margin_ns, s.tightest_ns), (2, 0, 100));

        let late = [dump_load(0, 150), dump_load(1, 301)];
        let s = judge_loads(&late, &windows, WRITER, &identity(), EXACT);
        assert!(!s.ok());
        assert_eq!((s.violations, s.max_excess_ns), (1, 1));
        let early = [dump_load(0, 99), dump_load(1, 250)];
        assert_eq!(
            judge_loads(&early, &windows, WRITER, &identity(), EXACT).violations,
            1
        );
    }

    #[test]
    fn arm64_tolerates_one_ns_and_counts_it() {
        let windows = [window(0, 100, 200)];
        let s = judge_loads(&[dump_load(0, 201)], &windows, WRITER, &identity(), ARM64);
        assert!(s.ok(), "{}", s.details());
        assert_eq!((s.violations, s.slips), (0, 1));
        let s = judge_loads(&[dump_load(0, 202)], &windows, WRITER, &identity(), ARM64);
        assert!(!s.ok());
    }

    #[test]
    fn the_conversion_decides_the_verdict() {
        // Counter 1000 at 1 ns per cycle lies in [900, 1100]; with time_zero 1 ms late it does not.
        let windows = [window(0, 900, 1_100)];
        let loads = [dump_load(0, 1_000)];
        assert!(judge_loads(&loads, &windows, WRITER, &identity(), EXACT).ok());
        let late = TimeConversion::new(1 << 20, 20, 1_000_000).unwrap();
        assert_eq!(
            judge_loads(&loads, &windows, WRITER, &late, EXACT).violations,
            1
        );
    }

    #[test]
    fn missing_repeated_and_foreign_loads_fail() {
        let windows = [window(0, 100, 200), window(1, 200, 300)];
        let s = judge_loads(&[dump_load(0, 150)], &windows, WRITER, &identity(), EXACT);
        assert_eq!(s.missing_loads, 1);
        assert!(!s.ok());

        let repeated = [dump_load(0, 150), dump_load(0, 160), dump_load(1, 250)];
        let s = judge_loads(&repeated, &windows, WRITER, &identity(), EXACT);
        assert_eq!((s.wrong_loads, s.missing_loads), (1, 0));

        let mut other_tid = dump_load(1, 250);
        other_tid.tid += 1;
        let mut other_name = dump_load(0, 150);
        other_name.name = load_name(5).into_bytes();
        let s = judge_loads(
            &[other_name, other_tid],
            &windows,
            WRITER,
            &identity(),
            EXACT,
        );
        assert_eq!((s.wrong_loads, s.violations), (2, 0));
        assert!(!s.ok());
        assert!(!judge_loads(&[], &[], WRITER, &identity(), EXACT).ok());
    }

    /// A dump built with the writer's encoder, read back by the independent reader.
    fn encoded_dump(pid: u32, loads: &[DumpLoad], close: Option<u64>) -> Vec<u8> {
        let mut bytes = record::header(pid, 5, record::FLAGS_ARCH_TIMESTAMP).to_vec();
        for l in loads {
            record::code_load(
                &mut bytes,
                &record::CodeLoad {
                    timestamp: l.timestamp,
                    pid: l.pid,
                    tid: l.tid,
                    addr: l.code_addr,
                    code_index: l.index,
                    name: &l.name,
                    code: &l.code,
                },
            )
            .unwrap();
        }
        if let Some(t) = close {
            record::code_close(&mut bytes, t);
        }
        bytes
    }

    #[test]
    fn parses_the_writers_encoding() {
        let loads = [dump_load(0, 10), dump_load(1, 20)];
        let parsed = parse_dump(&encoded_dump(WRITER.pid, &loads, Some(30))).unwrap();
        assert_eq!(parsed.loads, loads);
        assert_eq!(parsed.close_timestamp, Some(30));
        assert_eq!(parsed.header.timestamp, 5);
        assert!(header_problems(&parsed.header, WRITER.pid).is_empty());
        assert_eq!(header_problems(&parsed.header, WRITER.pid + 1).len(), 1);

        let open = parse_dump(&encoded_dump(WRITER.pid, &loads, None)).unwrap();
        assert_eq!(open.close_timestamp, None);
    }

    #[test]
    fn refuses_records_after_close_and_foreign_headers() {
        let mut bytes = encoded_dump(WRITER.pid, &[], Some(30));
        record::code_close(&mut bytes, 40);
        assert!(parse_dump(&bytes)
            .unwrap_err()
            .contains("follows the close"));

        let mut header = parse_dump(&encoded_dump(WRITER.pid, &[], None))
            .unwrap()
            .header;
        header.flags = 0; // CLOCK_MONOTONIC stamps: perf would not convert them
        header.elf_machine_arch = 0;
        let problems = header_problems(&header, WRITER.pid);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(parse_dump(b"not a jitdump at all, forty bytes long..").is_err());
    }

    #[test]
    fn timeconv_must_be_kernel_mode_with_the_pages_conversion() {
        let page = identity();
        let record = TimeConvRecord {
            pid: WRITER.pid,
            boot_id: "b".into(),
            mode: TimeConvMode::Kernel,
            counter: perfclock_core::counter::COUNTER_NAME.into(),
            conversion: page,
            error_bound_ns: 0,
            written_counter: 1,
            clock: perfclock_jitdump::JitClock::Arch,
        };
        assert!(timeconv_problems(&record, &page, WRITER.pid).is_empty());
        let calibrated = TimeConvRecord {
            mode: TimeConvMode::Calibrated,
            error_bound_ns: 300,
            conversion: TimeConversion::new(1 << 20, 20, 1).unwrap(),
            ..record
        };
        assert_eq!(timeconv_problems(&calibrated, &page, WRITER.pid).len(), 3);
    }
}
