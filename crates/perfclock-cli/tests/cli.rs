//! The `perfclock` binary on synthetic perf.data files: what it writes, what it refuses, and
//! that a refusal leaves no OUT and no temporary file behind, never a panic.

use std::fs;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use perfclock_perfdata::synth::{self, Synth};
use perfclock_perfdata::{Feature, RecordType};
use perfclock_testutil::{is_root, skip, Need};

const TIME_CONV_SIZE: usize = 56;
const SIGTERM: i32 = 15;

fn perfclock(args: &[&std::ffi::OsStr]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_perfclock"))
        .args(args)
        .output()
        .expect("run perfclock");
    println!(
        "perfclock {args:?}: {:?}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn inject(input: &Path, output: &Path, dump_dirs: &[&Path]) -> Output {
    let mut args = vec![
        "inject-time-conv".as_ref(),
        input.as_os_str(),
        "-o".as_ref(),
        output.as_os_str(),
    ];
    for dir in dump_dirs {
        args.push("--dump-dir".as_ref());
        args.push(dir.as_os_str());
    }
    perfclock(&args)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A failure: exit code 1, an error naming `expected`, no panic, no OUT, no temporary file.
fn assert_refused(output: &Output, out: &Path, expected: &str) {
    let message = stderr(output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(message.contains("error: "), "{message}");
    assert!(
        message.contains(expected),
        "expected {expected:?} in {message}"
    );
    assert!(!message.contains("panicked"), "{message}");
    assert!(!out.exists(), "OUT was written");
    assert_no_temporary(out.parent().unwrap());
}

fn assert_no_temporary(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries {
            let name = entry.unwrap().file_name();
            assert!(
                !name.to_string_lossy().starts_with(".perfclock-"),
                "temporary file left: {name:?}"
            );
        }
    }
}

/// The boot the synthetic records name: not this one, so their made-up conversions are judged
/// against each other, as for a recording analysed after a reboot. (A record of this boot is
/// judged against this machine's clock where it is exact: `a_record_of_this_boot_...`.)
const OTHER_BOOT: &str = "00000000-1111-2222-3333-444444444444";

/// A timeconv record by the shared contract's text, for `pid`, of [`OTHER_BOOT`].
fn sidecar_text(pid: u32, mode: &str, mult: u32, zero: u64, bound: u64, written: u64) -> String {
    format!(
        "perfclock-timeconv 1\npid={pid}\nboot_id={OTHER_BOOT}\nmode={mode}\ncounter=tsc\n\
         time_mult={mult}\ntime_shift=31\ntime_zero={zero}\ntime_cycles=0\n\
         time_mask=18446744073709551615\ncap_user_time_short=0\nerror_bound_ns={bound}\n\
         written_counter={written}\n"
    )
}

/// A success (exit 0) whose stderr warns that `dump` was not injected, for `why`.
fn assert_left_out(output: &Output, dump: &Path, why: &str) {
    let message = stderr(output);
    assert_eq!(output.status.code(), Some(0), "{message}");
    let line = message
        .lines()
        .find(|line| line.contains(&format!("warning: {}: not injected", dump.display())))
        .unwrap_or_else(|| panic!("no warning for {}: {message}", dump.display()));
    assert!(line.contains(why), "expected {why:?} in {line}");
}

/// Writes the timeconv record `text` (see [`sidecar_text`]) at `path`.
fn write_sidecar(path: &Path, text: String) {
    write(path, text.as_bytes());
}

/// A success (exit 0) whose stderr says `expected`.
fn assert_success_saying(output: &Output, expected: &str) {
    let message = stderr(output);
    assert!(output.status.success(), "{message}");
    assert!(message.contains(expected), "{message}");
}

/// A failure with exit code 1 whose stderr says `expected`.
fn assert_status_1_saying(output: &Output, expected: &str) {
    let message = stderr(output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(message.contains(expected), "{message}");
}

/// `dir/perf.data`: a recording that mapped `dir/jit-<pid>.dump` for each pid; its path and
/// built layout.
fn recording_at(dir: &Path, pids: &[u32]) -> (PathBuf, synth::Built) {
    let built = recording_with_dumps(dir, pids);
    let input = dir.join("perf.data");
    write(&input, &built.bytes);
    (input, built)
}

/// A recording that mapped `dir/jit-<pid>.dump` for each pid, with its built layout.
fn recording_with_dumps(dir: &Path, pids: &[u32]) -> synth::Built {
    let mut records = vec![synth::comm(pids[0], "java")];
    for pid in pids {
        let dump = dir.join(format!("jit-{pid}.dump"));
        records.push(synth::mmap2(*pid, dump.to_str().unwrap()));
    }
    Synth {
        records,
        features: vec![(Feature::HOSTNAME, b"\x08\0\0\0host\0\0\0\0".to_vec())],
        attrs_after_data: false,
    }
    .build()
}

fn write(path: &Path, bytes: &[u8]) {
    fs::write(path, bytes).unwrap();
}

/// The record inserted at the data section's start: (mult, zero, cap_user_time_zero).
fn inserted(out: &[u8], built: &synth::Built) -> (u64, u64, u8) {
    let at = built.data.0;
    let record = &out[at..at + TIME_CONV_SIZE];
    assert_eq!(u32::from_le_bytes(record[0..4].try_into().unwrap()), 79);
    assert_eq!(u16::from_le_bytes(record[6..8].try_into().unwrap()), 56);
    assert_eq!(synth::u64_at(record, 8), 31, "time_shift");
    assert_eq!(synth::u64_at(record, 40), u64::MAX, "time_mask");
    assert_eq!(record[49], 0, "cap_user_time_short");
    assert_eq!(&record[50..56], &[0; 6]);
    (
        synth::u64_at(record, 16),
        synth::u64_at(record, 24),
        record[48],
    )
}

#[test]
fn help_lists_both_subcommands() {
    let output = perfclock(&["--help".as_ref()]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        help.contains("doctor") && help.contains("inject-time-conv"),
        "{help}"
    );
    let output = perfclock(&["inject-time-conv".as_ref(), "--help".as_ref()]);
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("--dump-dir") && help.contains("-o"), "{help}");
}

/// `perfclock doctor | head`: a reader that goes away ends the doctor by SIGPIPE, as it ends a C
/// tool, never by `println!`'s panic. The reading end is closed before the doctor starts (a
/// connected socket pair, which fails a write with EPIPE and SIGPIPE as a pipe does).
#[test]
fn doctor_dies_of_sigpipe_when_its_reader_goes_away() {
    const SIGPIPE: i32 = 13;
    let (reader, writer) = UnixStream::pair().expect("a socket pair");
    drop(reader);
    let output = Command::new(env!("CARGO_BIN_EXE_perfclock"))
        .arg("doctor")
        .stdout(OwnedFd::from(writer))
        .output()
        .expect("run perfclock doctor");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        output.status.signal(),
        Some(SIGPIPE),
        "{:?}: {stderr}",
        output.status
    );
}

/// A command whose stderr reader has gone still ends as it would have: a refused input is exit
/// status 1 with no OUT, not `eprintln!`'s panic (status 101).
#[test]
fn a_refusal_with_stderr_gone_is_still_status_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.data");
    let (reader, writer) = UnixStream::pair().expect("a socket pair");
    drop(reader);
    let status = Command::new(env!("CARGO_BIN_EXE_perfclock"))
        .arg("inject-time-conv")
        .arg(dir.path().join("no-such-input.data"))
        .arg("-o")
        .arg(&out)
        .stderr(OwnedFd::from(writer))
        .status()
        .expect("run perfclock inject-time-conv");
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert!(!out.exists());
}

/// A report that cannot be written for another reason (a full disk) is an error naming standard
/// output, exit status 1, not a panic.
#[test]
fn doctor_names_standard_output_when_it_cannot_write() {
    let full = fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("Linux's /dev/full");
    let output = Command::new(env!("CARGO_BIN_EXE_perfclock"))
        .arg("doctor")
        .stdout(full)
        .output()
        .expect("run perfclock doctor");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("perfclock: cannot write to standard output: No space left on device"),
        "{stderr}"
    );
}

#[test]
fn inserts_the_sidecar_conversion_and_replaces_an_existing_out() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (input, built) = recording_at(dir, &[41]);
    write_sidecar(
        &dir.join("jit-41.dump.timeconv"),
        sidecar_text(41, "calibrated", 2_796_202_667, 123_456, 700, 5_000),
    );
    let out = dir.join("out.data");
    write(&out, b"an older OUT");
    let output = inject(&input, &out, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    // The dump itself is gone: it is named, and the rest is written.
    assert_left_out(&output, &dir.join("jit-41.dump"), "No such file");
    let written = fs::read(&out).unwrap();
    assert_eq!(written.len(), built.bytes.len() + TIME_CONV_SIZE);
    assert_eq!(inserted(&written, &built), (2_796_202_667, 123_456, 1));
    assert_eq!(fs::read(&input).unwrap(), built.bytes, "IN modified");
    assert_no_temporary(dir);
    // Its own output holds a TIME_CONV now: a second run copies it unchanged.
    let again = dir.join("again.data");
    let output = inject(&out, &again, &[]);
    assert!(stderr(&output).contains("holds a PERF_RECORD_TIME_CONV already"));
    assert_eq!(fs::read(&again).unwrap(), written);
}

/// A dump written in the perf or the monotonic clock has nothing for a TIME_CONV to
/// convert; inject-time-conv leaves it out and says what to do instead.
#[test]
fn dumps_in_another_clock_than_arch_are_left_out_with_what_to_do() {
    for (clock, advice) in [
        ("perf", "samply import"),
        ("monotonic", "perf record -k monotonic"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let (input, _) = recording_at(dir, &[43]);
        let sidecar = sidecar_text(43, "calibrated", 2_796_202_667, 1, 700, 5_000);
        write(
            &dir.join("jit-43.dump.timeconv"),
            format!("{sidecar}clock={clock}\n").as_bytes(),
        );
        let out = dir.join("out.data");
        let output = inject(&input, &out, &[]);
        assert_left_out(&output, &dir.join("jit-43.dump"), advice);
        assert!(
            stderr(&output).contains(&format!("timestamps are {clock}")),
            "{}",
            stderr(&output)
        );
    }
}

#[test]
fn another_boot_is_a_warning_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (input, _) = recording_at(dir, &[41]);
    let text = sidecar_text(41, "calibrated", 2_796_202_667, 1, 700, 5_000);
    let this_boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    write(&dir.join("jit-41.dump.timeconv"), text.as_bytes());
    let out = dir.join("out.data");
    let output = inject(&input, &out, &[]);
    assert!(output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains(&format!(
            "warning: {}",
            dir.join("jit-41.dump.timeconv").display()
        )) && message.contains(&format!("written on boot {OTHER_BOOT}"))
            && message.contains(&format!("this machine is on boot {}", this_boot.trim())),
        "{message}"
    );
    assert!(out.exists());
}

#[test]
fn picks_the_smallest_bound_among_agreeing_records() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (input, built) = recording_at(dir, &[1, 2]);
    // 1 ns of zero apart, bounds 900 and 300 ns: they agree; the second is tighter.
    write_sidecar(
        &dir.join("jit-1.dump.timeconv"),
        sidecar_text(1, "calibrated", 1_000_000_000, 5_000, 900, 10),
    );
    write_sidecar(
        &dir.join("jit-2.dump.timeconv"),
        sidecar_text(2, "calibrated", 1_000_000_000, 5_001, 300, 20),
    );
    let out = dir.join("out.data");
    let output = inject(&input, &out, &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(inserted(&fs::read(&out).unwrap(), &built).1, 5_001);
}

/// What inject-time-conv makes of a recording whose second record is at fault.
enum Verdict {
    /// The whole recording is refused, naming this.
    Refused(&'static str),
    /// The second record's dump is left out, for this.
    LeftOut(&'static str),
}

#[test]
fn refuses_records_that_disagree_or_do_not_belong() {
    use Verdict::{LeftOut, Refused};
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (input, _) = recording_at(dir, &[1, 2]);
    let out = dir.join("out.data");
    let first = dir.join("jit-1.dump.timeconv");
    let second = dir.join("jit-2.dump.timeconv");
    let jit2 = dir.join("jit-2.dump");
    let kernel_2 = sidecar_text(2, "kernel", 1_000_000_000, 5_000, 0, 20);
    // Each step writes the first record (where it has one) and the second, then injects.
    let steps: Vec<(Option<String>, Vec<u8>, Verdict)> = vec![
        // 2 us apart with bounds summing to 1.2 us.
        (
            Some(sidecar_text(1, "calibrated", 1_000_000_000, 5_000, 900, 10)),
            sidecar_text(2, "calibrated", 1_000_000_000, 7_000, 300, 20).into_bytes(),
            Refused("disagree by 2000 ns"),
        ),
        // Two kernel-mode records must be identical: 1 ns apart is refused.
        (
            Some(sidecar_text(1, "kernel", 1_000_000_000, 5_000, 0, 10)),
            sidecar_text(2, "kernel", 1_000_000_000, 5_001, 0, 20).into_bytes(),
            Refused("disagree"),
        ),
        // A record that does not belong to its dump leaves that dump out, not the recording.
        (
            None,
            sidecar_text(9, "kernel", 1_000_000_000, 5_000, 0, 20).into_bytes(),
            LeftOut("says pid=9"),
        ),
        (
            None,
            kernel_2
                .replace("counter=tsc", "counter=cntvct_el0")
                .into_bytes(),
            Refused("different counters"),
        ),
        (
            None,
            kernel_2
                .replace(OTHER_BOOT, "00000000-1111-2222-3333-555555555555")
                .into_bytes(),
            Refused("different boot_ids"),
        ),
        (
            None,
            kernel_2.replace("boot_id=", "boot_id=x").into_bytes(),
            LeftOut("the value of boot_id does not parse"),
        ),
        (
            None,
            b"perfclock-timeconv 1\npid=2\n".to_vec(),
            LeftOut("lacks the key"),
        ),
        (None, vec![0xff; 64], LeftOut("is not text")),
    ];
    for (first_text, second_bytes, verdict) in steps {
        if let Some(text) = first_text {
            write_sidecar(&first, text);
        }
        write(&second, &second_bytes);
        match verdict {
            Refused(expected) => {
                // A step that left a dump out wrote OUT; a refusal must leave none.
                let _ = fs::remove_file(&out);
                assert_refused(&inject(&input, &out, &[]), &out, expected);
            }
            LeftOut(why) => assert_left_out(&inject(&input, &out, &[]), &jit2, why),
        }
    }
    // A record's content is never quoted: a forged first line stays in the file.
    write(&second, b"\x1b]52;c;SECRET\x07 not a record\n");
    let output = inject(&input, &out, &[]);
    assert_left_out(&output, &jit2, "not a perfclock time conversion record");
    assert!(!stderr(&output).contains("SECRET"), "{}", stderr(&output));
}

#[test]
fn finds_moved_sidecars_with_dump_dir_and_names_the_fix_when_missing() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let recorded_in = dir.join("gone");
    let built = recording_with_dumps(&recorded_in, &[77]);
    let input = dir.join("perf.data");
    write(&input, &built.bytes);
    let out = dir.join("out.data");
    let gone = recorded_in.join("jit-77.dump");
    assert_left_out(&inject(&input, &out, &[]), &gone, "pass --dump-dir");
    let moved = dir.join("moved");
    let empty = dir.join("empty");
    fs::create_dir(&moved).unwrap();
    fs::create_dir(&empty).unwrap();
    assert_left_out(&inject(&input, &out, &[&empty]), &gone, "pass --dump-dir");
    write_sidecar(
        &moved.join("jit-77.dump.timeconv"),
        sidecar_text(77, "calibrated", 3_000_000_000, 42, 500, 1),
    );
    let output = inject(&input, &out, &[&empty, &moved]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        inserted(&fs::read(&out).unwrap(), &built),
        (3_000_000_000, 42, 1)
    );
}

#[test]
fn a_recording_without_a_jitdump_marker_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let built = Synth {
        records: vec![
            synth::comm(5, "java"),
            synth::mmap2(5, "/usr/lib/libjvm.so"),
            synth::mmap(5, "/tmp/jit-5.dump.old"),
        ],
        ..Synth::default()
    }
    .build();
    let input = dir.join("perf.data");
    write(&input, &built.bytes);
    let out = dir.join("out.data");
    assert_refused(
        &inject(&input, &out, &[]),
        &out,
        "no MMAP2 of a jit-<pid>.dump in IN",
    );
}

#[test]
fn hostile_inputs_are_refused_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let out = dir.join("out.data");
    let input = dir.join("in.data");
    let built = recording_with_dumps(dir, &[3]);
    write_sidecar(
        &dir.join("jit-3.dump.timeconv"),
        sidecar_text(3, "calibrated", 1_000_000_000, 1, 1, 1),
    );

    let mut garbage = vec![0u8; 4096];
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for byte in garbage.iter_mut() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *byte = state as u8;
    }
    let mut pipe = b"PERFILE2".to_vec();
    pipe.extend_from_slice(&16u64.to_le_bytes());
    let mut swapped = built.bytes.clone();
    swapped[..8].copy_from_slice(b"2ELIFREP");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "IN: the file is empty"),
        ("garbage", garbage, "not a perf.data"),
        ("pipe mode", pipe, "pipe-mode"),
        ("byte-swapped", swapped, "other byte order"),
    ];
    for (what, bytes, expected) in cases {
        println!("case: {what}");
        write(&input, &bytes);
        assert_refused(&inject(&input, &out, &[]), &out, expected);
    }
    // Truncated anywhere: in the header, the attributes, the records, the feature table.
    let (data_at, data_len) = built.data;
    for len in [7, 8, 50, 103, 104, 200, data_at + 3, data_at + data_len / 2] {
        println!("case: truncated to {len}");
        write(&input, &built.bytes[..len]);
        assert_refused(&inject(&input, &out, &[]), &out, "");
    }
    for len in [data_at + data_len + 5, built.bytes.len() - 1] {
        write(&input, &built.bytes[..len]);
        assert_refused(&inject(&input, &out, &[]), &out, "past the end of the file");
    }
    // A directory (perf record --threads writes one), and a missing file.
    assert_refused(
        &inject(dir, &out, &[]),
        &out,
        "is a directory, not a perf.data file",
    );
    assert_refused(
        &inject(Path::new("/dev/null"), &out, &[]),
        &out,
        "not a regular file",
    );
    let missing = inject(&dir.join("absent.data"), &out, &[]);
    assert_refused(&missing, &out, "cannot read IN");
    // The cause comes once, after what failed.
    let message = stderr(&missing);
    assert_eq!(
        message.matches("No such file or directory").count(),
        1,
        "{message}"
    );
}

#[test]
fn a_huge_sparse_file_is_refused_without_reading_it_all() {
    const HUGE: u64 = 100 << 30;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = dir.path();
    let input = dir.join("huge.data");
    let out = dir.join("out.data");
    let built = Synth {
        records: vec![synth::comm(1, "x")],
        ..Synth::default()
    }
    .build();
    let mut file = fs::File::create(&input).unwrap();
    if let Err(error) = file.set_len(HUGE) {
        let test = "a_huge_sparse_file_is_refused_without_reading_it_all";
        perfclock_testutil::skip(test, perfclock_testutil::Need::SparseFiles, error);
        return;
    }
    // The header claims everything after it is data: one record, then zeros.
    let mut header = built.bytes[..built.data.0 + built.data.1].to_vec();
    let data_size = HUGE - built.data.0 as u64;
    header[synth::DATA_SIZE_AT..synth::DATA_SIZE_AT + 8].copy_from_slice(&data_size.to_le_bytes());
    file.write_all(&header).unwrap();
    drop(file);
    assert_refused(
        &inject(&input, &out, &[]),
        &out,
        "claims 0 bytes, less than its own header",
    );
}

#[test]
fn out_must_be_another_file_in_a_writable_directory() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (input, built) = accepted_input(dir);
    let same_file = |out: &Path| {
        let output = inject(&input, out, &[]);
        assert_status_1_saying(&output, "OUT is IN");
        assert_eq!(fs::read(&input).unwrap(), built.bytes, "IN modified");
    };
    same_file(&input);
    same_file(&dir.join(".").join("perf.data"));
    let link = dir.join("link.data");
    std::os::unix::fs::symlink(&input, &link).unwrap();
    same_file(&link);
    let hard = dir.join("hard.data");
    fs::hard_link(&input, &hard).unwrap();
    same_file(&hard);
    assert_no_temporary(dir);

    // Root ignores permission bits: unwritable directories are a regular file's "child" and
    // a directory under /proc.
    let file_parent: PathBuf = input.join("out.data");
    let output = inject(&input, &file_parent, &[]);
    assert_status_1_saying(&output, "cannot write OUT");
    let proc_out = Path::new("/proc/self/perfclock-out.data");
    let output = inject(&input, proc_out, &[]);
    assert_status_1_saying(&output, "cannot write OUT");
    assert!(!proc_out.exists());
}

/// A recording inject-time-conv accepts (one dump, its sidecar in `dir`), at `dir/perf.data`.
fn accepted_input(dir: &Path) -> (PathBuf, synth::Built) {
    write_sidecar(
        &dir.join("jit-3.dump.timeconv"),
        sidecar_text(3, "calibrated", 1_000_000_000, 1, 1, 1),
    );
    recording_at(dir, &[3])
}

/// OUT that exists and is no regular file is refused before anything is
/// written, by name and kind, and left as it was.
fn assert_out_kind_refused(input: &Path, out: &Path, kind: &str) {
    let before = fs::symlink_metadata(out).unwrap().file_type();
    let output = inject(input, out, &[]);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{message}");
    assert!(
        message.contains(&format!("OUT {} is {kind}", out.display())),
        "{message}"
    );
    assert!(
        message.contains("pass -o a new path or an existing regular file"),
        "{message}"
    );
    assert_eq!(
        fs::symlink_metadata(out).unwrap().file_type(),
        before,
        "OUT was replaced"
    );
    assert_no_temporary(out.parent().unwrap());
}

#[test]
fn out_as_a_fifo_socket_directory_or_symlink_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (input, _) = accepted_input(dir);
    let fifo = dir.join("out.fifo");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    assert_out_kind_refused(&input, &fifo, "a FIFO");
    let socket_path = dir.join("out.sock");
    let _socket = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
    assert_out_kind_refused(&input, &socket_path, "a socket");
    let existing_dir = dir.join("a-directory");
    fs::create_dir(&existing_dir).unwrap();
    assert_out_kind_refused(&input, &existing_dir, "a directory");
    let link = dir.join("out-link.data");
    std::os::unix::fs::symlink(dir.join("elsewhere.data"), &link).unwrap();
    assert_out_kind_refused(&input, &link, "a symbolic link");
}

/// `mknod` needs root: without it the test says so, and fails where CI requires root.
#[test]
fn out_as_a_device_node_is_refused_and_left_alone() {
    if !is_root() {
        skip(
            "out_as_a_device_node_is_refused_and_left_alone",
            Need::Root,
            "mknod needs root",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (input, _) = accepted_input(dir);
    // The null device's numbers (1, 3), a node of our own: nothing system-wide is at risk.
    let device = dir.join("null");
    let made = Command::new("mknod")
        .arg(&device)
        .args(["c", "1", "3"])
        .status()
        .expect("run mknod");
    assert!(made.success(), "mknod failed as root");
    assert!(fs::symlink_metadata(&device)
        .unwrap()
        .file_type()
        .is_char_device());
    assert_out_kind_refused(&input, &device, "a character device");
}

/// OUT gets IN's permission bits, but never less than read and write for its owner.
#[test]
fn out_is_always_readable_and_writable_by_its_owner() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (input, _) = accepted_input(dir);
    for (in_mode, out_mode) in [
        (0o644, 0o644),
        (0o040, 0o640),
        (0o000, 0o600),
        (0o755, 0o755),
    ] {
        fs::set_permissions(&input, fs::Permissions::from_mode(in_mode)).unwrap();
        let out = dir.join(format!("out-{in_mode:o}.data"));
        let output = inject(&input, &out, &[]);
        assert!(output.status.success(), "{}", stderr(&output));
        let mode = fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, out_mode, "IN {in_mode:o}");
    }
}

/// SIGTERM while OUT's temporary file is being written removes it, and the
/// process dies of the signal; OUT is absent (or, had the rename won the race, complete).
#[test]
fn sigterm_mid_copy_leaves_no_temporary_file() {
    const PAD_RECORDS: usize = 6_000; // about 390 MB: the copy takes a while
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = dir.path();
    let mut records = vec![
        synth::record(RecordType::TIME_CONV, &[1; 48]),
        synth::comm(1, "x"),
    ];
    let pad = synth::record(RecordType::SAMPLE, &[0x5a; synth::MAX_BODY]);
    records.extend(std::iter::repeat_n(pad, PAD_RECORDS));
    let built = Synth {
        records,
        ..Synth::default()
    }
    .build();
    let input = dir.join("perf.data");
    write(&input, &built.bytes);
    drop(built);
    let out = dir.join("out.data");
    let mut interrupted = 0;
    for attempt in 0..5 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_perfclock"))
            .arg("inject-time-conv")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until the temporary file exists and has bytes: the copy is under way.
        let started = Instant::now();
        let temporary = loop {
            let found = fs::read_dir(dir).unwrap().find_map(|entry| {
                let entry = entry.unwrap();
                let name = entry.file_name().to_string_lossy().into_owned();
                let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
                (name.starts_with(".perfclock-") && size > 0).then_some(name)
            });
            if found.is_some() || child.try_wait().unwrap().is_some() {
                break found;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no copy started"
            );
            std::thread::sleep(Duration::from_micros(200));
        };
        // The child is not reaped yet, so its pid is still its own (kill fails if it has
        // exited already: then the run below checks the complete OUT).
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        let status = child.wait().unwrap();
        let mut message = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut message).unwrap();
        println!("attempt {attempt}: temporary {temporary:?}, {status:?}, stderr: {message}");
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        if status.signal() == Some(SIGTERM) && temporary.is_some() {
            interrupted += 1;
            assert_eq!(names, ["perf.data"], "left behind after SIGTERM");
        } else {
            // The copy finished before the signal: OUT complete, nothing else.
            assert!(status.success(), "{status:?}");
            assert_eq!(names, ["out.data", "perf.data"]);
            assert_eq!(fs::read(&out).unwrap(), fs::read(&input).unwrap());
            fs::remove_file(&out).unwrap();
        }
        if interrupted > 0 {
            break;
        }
    }
    assert!(
        interrupted > 0,
        "no run was interrupted mid-copy in 5 attempts"
    );
}

/// A recording with no jitdump whose HEADER_SAMPLE_TIME ends `last_sample_ago_ns` before now,
/// written (mtime) `written_after_ns` after that sample by the current wall clock.
fn recording_ended(dir: &Path, last_sample_ago_ns: u64, written_after_ns: i64) -> PathBuf {
    let snapshot = perfclock::snapshot().expect("a clock snapshot");
    let last = snapshot.perf_ns - last_sample_ago_ns;
    let mut sample_time = (last - 1_000_000).to_le_bytes().to_vec();
    sample_time.extend_from_slice(&last.to_le_bytes());
    let built = Synth {
        records: vec![synth::comm(1, "x")],
        features: vec![
            (Feature::HOSTNAME, b"\x08\0\0\0host\0\0\0\0".to_vec()),
            (Feature::SAMPLE_TIME, sample_time),
        ],
        attrs_after_data: false,
    }
    .build();
    let input = dir.join("perf.data");
    write(&input, &built.bytes);
    let wall_at_last = snapshot.realtime.ns - last_sample_ago_ns;
    let mtime = (wall_at_last as i64 + written_after_ns) as u64;
    let file = fs::File::options().write(true).open(&input).unwrap();
    file.set_modified(std::time::UNIX_EPOCH + Duration::from_nanos(mtime))
        .unwrap();
    input
}

fn inject_clock_data_now(input: &Path, out: &Path) -> Output {
    perfclock(&[
        "inject-time-conv".as_ref(),
        input.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--clock-data-now".as_ref(),
    ])
}

/// `--clock-data-now` on a recording without jitdumps adds only HEADER_CLOCK_DATA, pairing the
/// perf clock with CLOCK_REALTIME as a fresh snapshot does; a CLOCK_REALTIME stepped back since
/// the recording, and a recording from before this boot, are refused.
#[test]
fn clock_data_now_adds_a_fresh_pairing_and_refuses_a_step_back_or_another_boot() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let out = dir.join("out.data");
    // Written 200 ms after its last sample, 1 s ago: consistent.
    let input = recording_ended(dir, 1_000_000_000, 200_000_000);
    let output = inject_clock_data_now(&input, &out);
    assert_success_saying(&output, "with the clock data only");
    let bytes = fs::read(&out).unwrap();
    let layout = perfclock_perfdata::read_layout(&mut std::io::Cursor::new(&bytes)).unwrap();
    let section = layout.feature_section(Feature::CLOCK_DATA).unwrap();
    let at = section.offset as usize;
    let clock_data =
        perfclock_perfdata::ClockData::parse(&bytes[at..at + section.size as usize]).unwrap();
    let now = perfclock::snapshot().unwrap();
    let offset = |wall: u64, perf: u64| wall as i64 - perf as i64;
    let apart = offset(clock_data.wall_clock_ns, clock_data.clockid_time_ns)
        - offset(now.realtime.ns, now.perf_ns);
    assert!(
        apart.abs() < 1_000_000,
        "{apart} ns from a fresh snapshot's pairing"
    );
    fs::remove_file(&out).unwrap();

    // Written "5 s before" its own last sample by today's wall clock: stepped back since.
    let input = recording_ended(dir, 1_000_000_000, -5_000_000_000);
    assert_refused(
        &inject_clock_data_now(&input, &out),
        &out,
        "stepped back since the recording",
    );
    // Written before this boot.
    let file = fs::File::options().write(true).open(&input).unwrap();
    file.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000))
        .unwrap();
    assert_refused(
        &inject_clock_data_now(&input, &out),
        &out,
        "before this boot",
    );
}

/// `PERFCLOCK_PARAVIRT` takes the spellings users type (`OFF` forces calibrated mode where
/// paravirt mode is the default) and a value that is none of them is refused with the
/// spellings it takes, never ignored.
#[test]
fn perfclock_paravirt_takes_every_spelling_and_names_a_wrong_one() {
    let doctor = |value: &str| {
        Command::new(env!("CARGO_BIN_EXE_perfclock"))
            .args(["doctor", "10"])
            .env("PERFCLOCK_PARAVIRT", value)
            .env("PERFCLOCK_SHARED_PAGE", "off")
            .output()
            .unwrap()
    };
    let wrong = doctor("disable");
    // The doctor's report (its diagnosis included) is its standard output.
    let said = String::from_utf8_lossy(&wrong.stdout);
    assert!(!wrong.status.success(), "{wrong:?}");
    assert!(
        said.contains("PERFCLOCK_PARAVIRT=\"disable\" is not a switch")
            && said.contains("off (or 0, false, no)"),
        "{said}"
    );
    if perfclock::paravirt::measure_offset(8).is_err() {
        perfclock_testutil::skip(
            "perfclock_paravirt_takes_every_spelling_and_names_a_wrong_one",
            perfclock_testutil::Need::ParavirtMode,
            "no pvclock page here: OFF changes nothing to check",
        );
        return;
    }
    for off in ["OFF", "0", "False", "no"] {
        let output = doctor(off);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.contains("calibrated"),
            "PERFCLOCK_PARAVIRT={off}: {stdout}"
        );
    }
}

/// A paravirt-mode sidecar carries the pvclock entry and `C`; the TIME_CONV inserted is the
/// pvclock anchored at the recording (here, without samples, at the record's written counter),
/// exact there though the entry's `tsc_timestamp` lies 30 days of a 3 GHz TSC before, where the
/// record's own perf-form conversion (anchored at the entry) is hundreds of microseconds off.
#[test]
fn a_paravirt_time_conv_is_anchored_at_the_recording_whatever_the_uptime() {
    use perfclock_core::pvclock::PvclockParams;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let built = recording_with_dumps(dir, &[88]);
    write(&dir.join("jit-88.dump"), b"");
    let (tsc_timestamp, system_time, mul, shift, offset) = (
        1u64 << 40,
        1u64 << 50,
        3_221_225_473u32,
        -1i8,
        -103_409_420i64,
    );
    let params = PvclockParams::new(tsc_timestamp, system_time, mul, shift, 0).unwrap();
    let written = tsc_timestamp + 30 * 86_400 * 3_000_000_000;
    let at_entry = params.time_conversion(offset).unwrap();
    let sidecar = format!(
        "perfclock-timeconv 1\npid=88\nboot_id={OTHER_BOOT}\nmode=paravirt\ncounter=tsc\n\
         time_mult={}\ntime_shift={}\ntime_zero={}\ntime_cycles=0\ntime_mask=0\n\
         cap_user_time_short=0\nerror_bound_ns=0\nwritten_counter={written}\nclock=arch\n\
         pvclock={tsc_timestamp},{system_time},{mul},{shift},{offset}\n",
        at_entry.mult(),
        at_entry.shift(),
        at_entry.zero()
    );
    write(&dir.join("jit-88.dump.timeconv"), sidecar.as_bytes());
    let input = dir.join("perf.data");
    write(&input, &built.bytes);
    let out = dir.join("out.data");
    let output = inject(&input, &out, &[]);
    assert_success_saying(&output, "paravirt mode");
    let written_out = fs::read(&out).unwrap();
    let record = &written_out[built.data.0..built.data.0 + TIME_CONV_SIZE];
    let (shift_out, mult_out, zero_out) = (
        synth::u64_at(record, 8),
        synth::u64_at(record, 16),
        synth::u64_at(record, 24),
    );
    let anchored = params.time_conversion_at(offset, written).unwrap();
    assert_eq!(
        (shift_out, mult_out, zero_out),
        (
            u64::from(anchored.shift()),
            u64::from(anchored.mult()),
            anchored.zero()
        )
    );
    let exact = params.perf_ns(written, offset);
    assert!(anchored.cycles_to_ns(written).abs_diff(exact) <= 1);
    assert!(at_entry.cycles_to_ns(written).abs_diff(exact) > 100_000);
}
