//! Writes a synthetic perf.data, for scaling runs of the scan and patch and for tests that need
//! a large input:
//!
//! ```text
//! cargo run --release -p perfclock-perfdata --example synth_perf_data -- OUT \
//!     [--distinct-dumps N] [--repeats R] [--pad-mib M] [--time-conv]
//! cargo run --release -p perfclock-perfdata --example synth_perf_data -- --scan FILE
//! ```
//!
//! The data section holds N MMAP2 records of distinct `/tmp/perfclock-synth/jit-<i>.dump`
//! names, each mapped R times (default 1), then M MiB of 64 KiB padding records, and a
//! TIME_CONV record first with `--time-conv`. `--scan FILE` instead times `read_layout` +
//! `scan_records` on FILE and prints the process's peak resident memory (`VmHWM`).

use std::fs::{self, File};
use std::process::ExitCode;
use std::time::Instant;

use perfclock_perfdata::synth::{self, Synth, MAX_BODY};
use perfclock_perfdata::{read_layout, scan_records, Feature, RecordType};

struct Args {
    out: String,
    distinct_dumps: u32,
    repeats: u32,
    pad_mib: u64,
    time_conv: bool,
    scan: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut parsed = Args {
        out: String::new(),
        distinct_dumps: 0,
        repeats: 1,
        pad_mib: 0,
        time_conv: false,
        scan: false,
    };
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            args.next()
                .and_then(|value| value.parse().ok())
                .ok_or(format!("{name} takes a number"))
        };
        match arg.as_str() {
            "--distinct-dumps" => parsed.distinct_dumps = number(&arg)? as u32,
            "--repeats" => parsed.repeats = number(&arg)? as u32,
            "--pad-mib" => parsed.pad_mib = number(&arg)?,
            "--time-conv" => parsed.time_conv = true,
            "--scan" => parsed.scan = true,
            _ if parsed.out.is_empty() && !arg.starts_with('-') => parsed.out = arg,
            _ => return Err(format!("unknown argument {arg}")),
        }
    }
    if parsed.out.is_empty() {
        return Err(
            "usage: synth_perf_data OUT [--distinct-dumps N] [--repeats R] \
                    [--pad-mib M] [--time-conv] | --scan FILE"
                .to_owned(),
        );
    }
    Ok(parsed)
}

/// Peak resident set size of this process, from /proc/self/status.
fn peak_rss_kib() -> Option<u64> {
    fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    if args.scan {
        scan(&args.out);
    } else if let Err(error) = generate(&args) {
        eprintln!("cannot write {}: {error}", args.out);
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn generate(args: &Args) -> std::io::Result<()> {
    let mut records = Vec::new();
    if args.time_conv {
        records.push(synth::record(RecordType::TIME_CONV, &[0; 48]));
    }
    records.push(synth::comm(1, "java"));
    for _ in 0..args.repeats {
        for pid in 0..args.distinct_dumps {
            let name = format!("/tmp/perfclock-synth/jit-{pid}.dump");
            records.push(synth::mmap2(pid, &name));
        }
    }
    let pad = synth::record(RecordType::SAMPLE, &[0x5a; MAX_BODY]);
    let pads = (args.pad_mib << 20).div_ceil(pad.len() as u64);
    records.extend((0..pads).map(|_| pad.clone()));
    let built = Synth {
        records,
        features: vec![(Feature::HOSTNAME, b"\x08\0\0\0host\0\0\0\0".to_vec())],
        attrs_after_data: false,
    }
    .build();
    fs::write(&args.out, &built.bytes)
}

fn scan(path: &str) {
    let started = Instant::now();
    let result = File::open(path).map_err(Into::into).and_then(|mut file| {
        let layout = read_layout(&mut file)?;
        scan_records(&mut file, &layout)
    });
    let elapsed = started.elapsed().as_secs_f64();
    let peak = peak_rss_kib().unwrap_or(0);
    match result {
        Ok(scan) => println!(
            "{path}: {} records, {} distinct jitdumps; layout+scan {elapsed:.3} s; peak RSS \
             {peak} KiB",
            scan.records,
            scan.jit_dumps.len(),
        ),
        Err(error) => {
            println!("{path}: refused after {elapsed:.3} s (peak RSS {peak} KiB): {error}")
        }
    }
}
