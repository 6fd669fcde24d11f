//! inject-time-conv against the real perf: a process maps a jitdump stamped with counter values
//! while `perf record` (default clock) runs; without the inserted TIME_CONV `perf inject --jit`
//! refuses it (where the kernel withholds the conversion), with it inject succeeds and
//! `perf report` attributes the jitted function's samples to its name.
//!
//! Also: every spelling of a perf option `perfclock record` refuses is one the real perf applies.
//!
//! Needs perf, python3 and a perf clock. Without them the tests skip (perfclock-testutil),
//! unless PERFCLOCK_REQUIRE_PERF=1 and PERFCLOCK_REQUIRE_TOOLS=1 (CI), where they fail instead.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use perfclock::Mode;
use perfclock_cli::perf_spellings::{HARMLESS_SPELLINGS, REFUSED_SPELLINGS};
use perfclock_core::counter::COUNTER_NAME;
use perfclock_jitdump::timeconv::TimeConvRecord;
use perfclock_testutil::perf_script::tod_ns;
use perfclock_testutil::{skip, Need};

/// Runs a JIT in miniature: copies a spinning loop into executable memory, stamps its code
/// load with the raw counter (read by a jitted `rdtsc`/`mrs cntvct_el0`, as perfclock does),
/// writes `jit-<pid>.dump` with arch timestamps, maps it executable as perf's marker, then runs
/// the loop so samples land in it. The stamp is taken after the code's anonymous mapping, as in
/// a real JIT: perf places the jitted code's mapping over it only if the conversion puts the
/// stamp after the kernel's stamp of that mapping.
const JIT_PY: &str = r#"
import ctypes, mmap, os, platform, struct, sys
out_dir, loops = sys.argv[1], int(sys.argv[2])
pid = os.getpid()
x86 = platform.machine() == "x86_64"
if x86:
    # rdtsc; shl rdx, 32; or rax, rdx; ret
    read_counter = b"\x0f\x31\x48\xc1\xe2\x20\x48\x09\xd0\xc3"
    # mov ecx, loops; 1: dec ecx; jnz 1b; ret
    code, elf_mach = b"\xb9" + struct.pack("<I", loops) + b"\xff\xc9\x75\xfc\xc3", 62
else:
    # mrs x0, cntvct_el0; ret
    read_counter = struct.pack("<II", 0xD53BE040, 0xD65F03C0)
    code, elf_mach = struct.pack("<I", 0xD65F03C0), 183  # ret: mapped, not run here
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(read_counter.ljust(64, b"\0") + code)
base = ctypes.addressof(ctypes.c_char.from_buffer(page))
addr = base + 64
stamp = ctypes.CFUNCTYPE(ctypes.c_uint64)(base)()
name = b"perfclock_jitted_loop\0"
body = struct.pack("<IIQQQQ", pid, pid, addr, addr, len(code), 0) + name + code
JITDUMP_FLAGS_ARCH_TIMESTAMP = 1
header = struct.pack("<IIIIIIQQ", 0x4A695444, 1, 40, elf_mach, 0, pid, stamp,
                     JITDUMP_FLAGS_ARCH_TIMESTAMP)
record = struct.pack("<IIQ", 0, 16 + len(body), stamp) + body
path = os.path.join(out_dir, "jit-%d.dump" % pid)
with open(path, "wb") as f:
    f.write(header + record)
fd = os.open(path, os.O_RDONLY)
marker = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC)
if x86:
    ctypes.CFUNCTYPE(None)(addr)()
"#;

/// Spins of the jitted loop: about half a second here.
const LOOPS: u32 = 1_500_000_000;

/// Skips (or fails under PERFCLOCK_REQUIRE_TOOLS=1) when `tool` does not run.
fn tool_or_skip(test: &str, tool: &'static str) -> bool {
    match Command::new(tool).arg("--version").output() {
        Ok(output) if output.status.success() => true,
        other => {
            skip(test, Need::Tool(tool), format_args!("{other:?}"));
            false
        }
    }
}

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    println!(
        "$ {command:?}\n{}{}",
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .take(40)
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn succeed(command: &mut Command) -> String {
    let output = run(command);
    assert!(output.status.success(), "{command:?} failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `perf` with HOME in the test's directory, so inject's build-id cache lands there.
fn perf(dir: &Path) -> Command {
    let mut command = Command::new("perf");
    command.env("HOME", dir);
    command
}

fn perfclock() -> Command {
    Command::new(env!("CARGO_BIN_EXE_perfclock"))
}

/// `perfclock inject-time-conv INPUT -o OUTPUT`.
fn inject_time_conv(input: &Path, output: &Path) -> Output {
    run(perfclock()
        .arg("inject-time-conv")
        .arg(input)
        .arg("-o")
        .arg(output))
}

/// `perf record OPTIONS -o OUT -- ARGS...`, or None (SKIPPED) where perf events are refused.
fn record(test: &str, dir: &Path, options: &[&str], out: &Path, args: &[&str]) -> Option<()> {
    let output = run(perf(dir)
        .args(["record", "-e", "cpu-clock"])
        .args(options)
        .arg("-o")
        .arg(out)
        .arg("--")
        .args(args));
    if output.status.success() {
        return Some(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    skip(
        test,
        Need::Perf,
        format_args!("perf record failed: {}", stderr.trim()),
    );
    None
}

/// The header lines of `perf report --header-only` that do not depend on the data's size.
/// `perf report -D`: every record perf reads, one line each.
fn raw_dump(dir: &Path, data: &Path) -> String {
    succeed(perf(dir).args(["report", "-D", "-i"]).arg(data))
}

fn header_lines(dir: &Path, data: &Path) -> Vec<String> {
    succeed(perf(dir).args(["report", "--header-only", "-i"]).arg(data))
        .lines()
        .filter(|line| {
            // The capture time is the file's mtime; sizes and offsets move by design.
            !["captured on", "data size", "feat offset"]
                .iter()
                .any(|moved| line.contains(moved))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn perf_inject_jit_accepts_the_recording_once_time_conv_is_inserted() {
    jit_end_to_end(
        "perf_inject_jit_accepts_the_recording_once_time_conv_is_inserted",
        &[],
    );
}

/// `perf record -z`: the jitdump's MMAP2 is inside compressed records. inject-time-conv finds
/// it and inserts the record, with a warning: perf 6.1's `inject --jit` does not look inside
/// compressed records (it succeeds and injects nothing), so attribution is not checked.
#[test]
fn compressed_recordings_get_the_record_and_a_warning() {
    jit_end_to_end(
        "compressed_recordings_get_the_record_and_a_warning",
        &["-z"],
    );
}

fn jit_end_to_end(test: &str, record_options: &[&str]) {
    let compressed = record_options.contains(&"-z");
    if !tool_or_skip(test, "perf") || !tool_or_skip(test, "python3") {
        return;
    }
    let clock = match perfclock::init() {
        Ok(clock) => clock,
        Err(error) => {
            skip(test, Need::Perf, error);
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let script = dir.join("jit.py");
    fs::write(&script, JIT_PY).unwrap();
    let recorded = dir.join("perf.data");
    let dir_arg = dir.to_str().unwrap();
    let loops = LOOPS.to_string();
    let python = ["python3", script.to_str().unwrap(), dir_arg, &loops];
    if record(test, dir, record_options, &recorded, &python).is_none() {
        return;
    }

    // The sidecar perfclock's jitdump writer leaves next to the dump.
    let dump: PathBuf = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "dump"))
        .expect("the JIT wrote its dump");
    let pid: u32 = dump.file_stem().unwrap().to_str().unwrap()["jit-".len()..]
        .parse()
        .unwrap();
    // As perfclock's writer bounds a record without the exact paravirt form: the clock's bound
    // plus what perf's rounded slope drifts by at the counter it was written at.
    let written = clock.read_counter().unwrap();
    let sidecar = TimeConvRecord::new(
        pid,
        perfclock_core::BootId::parse(
            &fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap(),
        )
        .expect("a boot id"),
        clock.mode().into(),
        COUNTER_NAME,
        clock.conversion().unwrap(),
        clock.error_bound_ns() + clock.conversion_error_ns(written),
        written,
    )
    .with_clock(perfclock_jitdump::JitClock::Arch);
    let mut sidecar_path = dump.clone().into_os_string();
    sidecar_path.push(".timeconv");
    sidecar.write_atomic(Path::new(&sidecar_path)).unwrap();

    if clock.mode() != Mode::Kernel && !compressed {
        // What this tool is for: perf wrote no TIME_CONV, inject refuses counter timestamps.
        let refused = run(perf(dir)
            .args(["inject", "--jit", "-i"])
            .arg(&recorded)
            .arg("-o")
            .arg(dir.join("refused.data")));
        assert!(!refused.status.success());
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("no timestamp conversion"),
            "perf inject refused for another reason"
        );
    }

    let before = fs::read(&recorded).unwrap();
    let with_conv = dir.join("with-time-conv.data");
    let output = inject_time_conv(&recorded, &with_conv);
    assert!(output.status.success());
    let warned = String::from_utf8_lossy(&output.stderr).contains("inside compressed records");
    assert_eq!(warned, compressed && clock.mode() != Mode::Kernel);
    assert_eq!(fs::read(&recorded).unwrap(), before, "IN was modified");
    // One TIME_CONV (perf record's own in kernel mode), and the only dump perf inject reads (a
    // map of a file named jit-<pid>.dump) is perfclock's copy, never the file the JIT left.
    let (recorded_dump, written_dump) = (raw_dump(dir, &recorded), raw_dump(dir, &with_conv));
    let time_convs = |raw: &str| raw.matches("PERF_RECORD_TIME_CONV").count();
    assert_eq!(
        time_convs(&recorded_dump),
        usize::from(clock.mode() == Mode::Kernel)
    );
    assert_eq!(time_convs(&written_dump), 1);
    let dump_maps = |raw: &str| -> Vec<String> {
        raw.lines()
            .filter(|line| line.contains("PERF_RECORD_MMAP") && line.contains("/jit-"))
            .filter_map(|line| line.rsplit_once(' ').map(|(_, path)| path.to_owned()))
            .collect()
    };
    assert_eq!(dump_maps(&recorded_dump), [dump.to_str().unwrap()]);
    let copies = format!("{}.jitted-", with_conv.display());
    let redirected = dump_maps(&written_dump);
    assert!(!redirected.is_empty());
    if compressed {
        // Records inside compressed ones are passed through as they are (the warning says so).
        assert_eq!(redirected, dump_maps(&recorded_dump));
    } else {
        assert!(redirected.iter().all(|path| path.starts_with(&copies)));
    }
    assert_eq!(header_lines(dir, &recorded), header_lines(dir, &with_conv));
    succeed(
        perf(dir)
            .args(["script", "--header-only", "-i"])
            .arg(&with_conv),
    );

    let jitted = dir.join("jitted.data");
    succeed(
        perf(dir)
            .args(["inject", "--jit", "-i"])
            .arg(&with_conv)
            .arg("-o")
            .arg(&jitted),
    );
    let script_out = succeed(perf(dir).args(["script", "-i"]).arg(&jitted));
    assert!(!script_out.is_empty());
    let report = succeed(
        perf(dir)
            .args(["report", "--stdio", "--sort", "sym", "-i"])
            .arg(&jitted),
    );
    if compressed {
        println!("{test}: perf inject --jit and compressed records: attribution not checked");
    } else if cfg!(target_arch = "x86_64") {
        assert!(
            report.contains("perfclock_jitted_loop"),
            "the jitted loop's samples are not attributed to it"
        );
    } else {
        skip(
            &format!("{test} attribution"),
            Need::X86_64,
            "the jitted loop is x86-64 code",
        );
    }
}

#[test]
fn a_recording_with_another_clock_is_refused() {
    let test = perfclock_testutil::test_name!();
    if !tool_or_skip(test, "perf") || !tool_or_skip(test, "python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let script = dir.join("jit.py");
    fs::write(&script, JIT_PY).unwrap();
    let recorded = dir.join("perf.data");
    let python = [
        "python3",
        script.to_str().unwrap(),
        dir.to_str().unwrap(),
        "1000",
    ];
    if record(test, dir, &["-k", "1"], &recorded, &python).is_none() {
        return;
    }
    let out = dir.join("out.data");
    let output = inject_time_conv(&recorded, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr.contains("recorded with clock 1 (perf record -k"),
        "{stderr}"
    );
    assert!(!out.exists());
}

#[test]
fn a_real_recording_without_a_jitdump_is_refused_with_a_hint() {
    let test = perfclock_testutil::test_name!();
    if !tool_or_skip(test, "perf") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let recorded = dir.join("perf.data");
    if record(test, dir, &[], &recorded, &["true"]).is_none() {
        return;
    }
    let out = dir.join("out.data");
    let output = inject_time_conv(&recorded, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("holds a PERF_RECORD_TIME_CONV already") {
        // Kernel mode: perf wrote the record, so the copy is the answer.
        assert!(output.status.success());
        assert_eq!(fs::read(&out).unwrap(), fs::read(&recorded).unwrap());
        return;
    }
    assert_eq!(output.status.code(), Some(1));
    assert!(stderr.contains("no MMAP2 of a jit-<pid>.dump"), "{stderr}");
    assert!(!out.exists());
    let left: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .filter(|name| name.to_string_lossy().starts_with(".perfclock-inject-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// Spins 300 ms, sleeps 300 ms, spins 300 ms, and prints CLOCK_REALTIME at the four edges.
const GAP_PY: &str = r#"
import time
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
a = time.time_ns(); spin(0.3); b = time.time_ns()
time.sleep(0.3)
c = time.time_ns(); spin(0.3); d = time.time_ns()
print(a, b, c, d)
"#;

/// The python3 samples' wall-clock times as `perf script -F+tod` prints them (in UTC).
fn sample_wall_times(dir: &Path, data: &Path) -> Vec<u64> {
    succeed(
        perf(dir)
            .env("TZ", "UTC")
            .args(["script", "-F", "comm,tod", "-i"])
            .arg(data),
    )
    .lines()
    .filter_map(|line| line.trim().strip_prefix("python3"))
    .filter_map(|tod| tod_ns(tod.trim()))
    .collect()
}

/// `--clock-data-now` gives a default recording the HEADER_CLOCK_DATA perf
/// needs for `-F+tod`, and the wall times perf prints put the samples inside the program's
/// own CLOCK_REALTIME stamps: in its two spins, none in its sleep between them. Control: the
/// same file with the wall clock moved 150 ms puts samples in the sleep.
#[test]
fn perf_script_tod_prints_wall_times_within_the_programs_own_stamps() {
    let test = perfclock_testutil::test_name!();
    /// The tod field's resolution (1 us), the snapshot's uncertainty and slew since.
    const TOLERANCE_NS: u64 = 2_000_000;
    if !tool_or_skip(test, "perf") || !tool_or_skip(test, "python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let script = dir.join("gap.py");
    fs::write(&script, GAP_PY).unwrap();
    let recorded = dir.join("perf.data");
    let output = run(perf(dir)
        .args(["record", "-e", "cpu-clock", "-o"])
        .arg(&recorded)
        .args(["--", "python3"])
        .arg(&script));
    if !output.status.success() {
        skip(
            test,
            Need::Perf,
            format_args!(
                "perf record refused: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        );
        return;
    }
    let stamps: Vec<u64> = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(|stamp| stamp.parse().unwrap())
        .collect();
    let [a, b, c, d] = stamps[..] else {
        panic!("the program printed {stamps:?}");
    };
    let refused = run(perf(dir).args(["script", "-F+tod", "-i"]).arg(&recorded));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("missing clock data"),
        "perf accepted -F+tod without clock data"
    );
    let with_tod = dir.join("tod.data");
    let output = run(perfclock()
        .arg("inject-time-conv")
        .arg(&recorded)
        .arg("-o")
        .arg(&with_tod)
        .arg("--clock-data-now"));
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("added HEADER_CLOCK_DATA"));

    let count = |times: &[u64], from: u64, to: u64| {
        times.iter().filter(|t| (from..=to).contains(*t)).count()
    };
    let times = sample_wall_times(dir, &with_tod);
    let (first, gap, second) = (
        count(&times, a, b),
        count(&times, b + TOLERANCE_NS, c - TOLERANCE_NS),
        count(&times, c, d),
    );
    println!(
        "{test}: {} samples; first spin {first}, sleep {gap}, second spin {second}",
        times.len()
    );
    // 300 ms at perf's default 4000 Hz is at most 1,200 samples; far fewer where the machine's
    // other CPU is busy (96 in the second spin, seen with a build running beside it).
    assert!(first > 50 && second > 50, "samples missing from the spins");
    assert_eq!(gap, 0, "samples placed in the program's sleep");

    // Control: the wall clock 150 ms early puts the second spin's samples into the sleep.
    let mut bytes = fs::read(&with_tod).unwrap();
    let layout = perfclock_perfdata::read_layout(&mut std::io::Cursor::new(&bytes)).unwrap();
    let section = layout
        .feature_section(perfclock_perfdata::Feature::CLOCK_DATA)
        .unwrap();
    let at = section.offset as usize + 8;
    let wall = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    bytes[at..at + 8].copy_from_slice(&(wall - 150_000_000).to_le_bytes());
    let shifted = dir.join("shifted.data");
    fs::write(&shifted, &bytes).unwrap();
    let times = sample_wall_times(dir, &shifted);
    let gap = count(&times, b + TOLERANCE_NS, c - TOLERANCE_NS);
    println!("{test}: control 150 ms early: {gap} samples in the sleep");
    // Half of the second spin's 300 ms moves into the sleep; a quarter of its samples is the
    // margin for a busy machine's uneven sampling (a fixed 100 failed at 95 of 222 in CI).
    assert!(
        gap >= second / 4,
        "the control moved {gap} of the second spin's {second} samples into the sleep"
    );
}

/// What `perf report --header-only` says `data` was recorded with: (another clock than the
/// perf clock, compressed records).
fn clock_and_compression(dir: &Path, data: &Path) -> (bool, bool) {
    let header = succeed(perf(dir).args(["report", "--header-only", "-i"]).arg(data));
    (
        header.contains("use_clockid = 1"),
        header.lines().any(|line| line.starts_with("# compressed")),
    )
}

/// The refusals of `perfclock record` are perf's own reading of its options, no stricter by
/// guesswork: every spelling it refuses (the list its unit test checks), given to the real
/// `perf record` as perfclock would give it (after `-g`, before `-o`), records with the option
/// perfclock names in its refusal (the event's `use_clockid = 1`, or compressed records); every
/// spelling it lets through records with neither, or perf refuses it (an ambiguous prefix, an
/// unknown option, a bad value). And what follows `--` is the command's, even a `-z`.
#[test]
fn perf_reads_every_refused_spelling_as_the_option_named() {
    let test = perfclock_testutil::test_name!();
    if !tool_or_skip(test, "perf") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let plain = dir.join("plain.data");
    if record(test, dir, &[], &plain, &["true"]).is_none() {
        return;
    }
    assert_eq!(clock_and_compression(dir, &plain), (false, false));
    // `perf record ... -- true` takes a second here, mostly waiting: eight at a time.
    let perf_record_all = |spellings: &[&[&str]], name: &str| -> Vec<(PathBuf, Output)> {
        let jobs: Vec<(PathBuf, &[&str])> = spellings
            .iter()
            .enumerate()
            .map(|(n, spelling)| (dir.join(format!("{name}-{n}.data")), *spelling))
            .collect();
        jobs.chunks(8)
            .flat_map(|chunk| {
                std::thread::scope(|scope| {
                    let running: Vec<_> = chunk
                        .iter()
                        .map(|(data, spelling)| {
                            scope.spawn(move || {
                                let output = run(perf(dir)
                                    .args(["record", "-e", "cpu-clock", "-g"])
                                    .args(*spelling)
                                    .arg("-o")
                                    .arg(data)
                                    .args(["--", "true"]));
                                (data.clone(), output)
                            })
                        })
                        .collect();
                    running
                        .into_iter()
                        .map(|thread| thread.join().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect()
    };
    let refused_runs = perf_record_all(REFUSED_SPELLINGS, "refused");
    let harmless_runs = perf_record_all(HARMLESS_SPELLINGS, "harmless");

    for (spelling, (data, output)) in REFUSED_SPELLINGS.iter().zip(&refused_runs) {
        let refusal = run(perfclock()
            .args(["record", "--no-java-agent", "-o"])
            .arg(dir.join("never.data"))
            .args(*spelling)
            .args(["--", "true"]));
        let stderr = String::from_utf8_lossy(&refusal.stderr);
        assert_eq!(refusal.status.code(), Some(2), "{spelling:?}: {stderr}");
        assert!(
            spelling
                .iter()
                .any(|arg| stderr.contains(&format!("refusing perf option {arg} (perf's "))),
            "{spelling:?}: {stderr}"
        );
        let expected = (
            stderr.contains("(perf's -k/--clockid)"),
            stderr.contains("(perf's -z/--compression-level)"),
        );
        assert_ne!(expected.0, expected.1, "{spelling:?}: {stderr}");

        assert!(
            output.status.success(),
            "perf record rejected {spelling:?}, which perfclock record refuses: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            clock_and_compression(dir, data),
            expected,
            "{spelling:?}: perf did not apply the option perfclock named (clock, compression)"
        );
    }
    assert!(!dir.join("never.data").exists());

    for (spelling, (data, output)) in HARMLESS_SPELLINGS.iter().zip(&harmless_runs) {
        if output.status.success() {
            assert_eq!(
                clock_and_compression(dir, data),
                (false, false),
                "{spelling:?}: perf applied -k or -z, which perfclock record lets through"
            );
        } else {
            println!("{test}: perf refused {spelling:?} itself");
        }
    }

    // After `--`: the command's arguments (true ignores them), not perf's.
    let out = dir.join("out.data");
    let output = run(perfclock()
        .args(["record", "--no-java-agent", "-o"])
        .arg(&out)
        .args(["-F", "999", "--", "true", "-z", "--clock=1", "-k1"]));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(clock_and_compression(dir, &out), (false, false));
}
