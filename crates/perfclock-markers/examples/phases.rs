//! Named phases of identifiable work, each stamped as a marker for samply.
//!
//! ```text
//! phases [--dir DIR] [--rounds N] [--phase-ms MS] [--late-control-ns NS]
//! ```
//! Each round runs `hash`, `sort` and `write_file` (which creates `DIR/phases-data.bin` and
//! writes it), each for about `--phase-ms` milliseconds, in functions of those names
//! (`phase_hash`, `phase_sort`, `phase_write_file`), and writes one span marker per phase to
//! `DIR/marker-<pid>.txt`. `--late-control-ns` adds, for each phase, a second marker named
//! `late <phase>` stamped that much later: the end-to-end check uses it as a control that must
//! score far lower than the real markers.

use std::fs::File;
use std::hint::black_box;
use std::io::{Seek, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use perfclock_markers::Markers;

struct Args {
    dir: PathBuf,
    rounds: u32,
    phase_ns: u64,
    late_control_ns: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        dir: PathBuf::from("."),
        rounds: 100,
        phase_ns: 4_000_000,
        late_control_ns: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |what: &str| it.next().ok_or(format!("{flag} needs {what}"));
        let number = |text: String| {
            text.parse::<u64>()
                .map_err(|e| format!("{flag} {text:?}: {e}"))
        };
        match flag.as_str() {
            "--dir" => args.dir = PathBuf::from(value("a directory")?),
            "--rounds" => {
                args.rounds = u32::try_from(number(value("a count")?)?)
                    .map_err(|e| format!("--rounds: {e}"))?;
            }
            "--phase-ms" => {
                args.phase_ns = number(value("milliseconds")?)?.saturating_mul(1_000_000)
            }
            "--late-control-ns" => args.late_control_ns = Some(number(value("nanoseconds")?)?),
            "-h" | "--help" => {
                return Err(
                    "usage: phases [--dir DIR] [--rounds N] [--phase-ms MS] [--late-control-ns NS]"
                        .into(),
                )
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

/// Busy until `deadline_ns` (perf clock) hashing a counter: pure user-space work.
#[inline(never)]
fn phase_hash(deadline_ns: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    let mut i = 0u64;
    while perfclock::now_ns() < deadline_ns {
        for _ in 0..256 {
            h = (h ^ i).wrapping_mul(0x0100_0000_01b3);
            i += 1;
        }
    }
    h
}

/// Busy until `deadline_ns` sorting a pseudo-random vector over and over, by insertion in this
/// function's own body (no call to a library sort), so profiler samples land in this function.
#[inline(never)]
fn phase_sort(deadline_ns: u64, values: &mut [u32]) -> u32 {
    let mut seed = 0x2545_f491_u32;
    while perfclock::now_ns() < deadline_ns {
        for v in values.iter_mut() {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            *v = seed;
        }
        for i in 1..values.len() {
            let mut j = i;
            while j > 0 && values[j - 1] > values[j] {
                values.swap(j - 1, j);
                j -= 1;
            }
        }
    }
    values[values.len() / 2]
}

/// The data file is rewound past this size, so long runs do not fill the disk.
const DATA_FILE_MAX_BYTES: u64 = 4 << 20;

/// Until `deadline_ns`, fills a block with a pattern (user-space work) and writes it to `file`.
#[inline(never)]
fn phase_write_file(deadline_ns: u64, file: &mut File, block: &mut [u8]) -> std::io::Result<u64> {
    let mut written = 0u64;
    let mut x = 0x9e37_79b9_u32;
    while perfclock::now_ns() < deadline_ns {
        for b in block.iter_mut() {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            *b = (x >> 24) as u8;
        }
        if file.stream_position()? >= DATA_FILE_MAX_BYTES {
            file.rewind()?;
        }
        file.write_all(block)?;
        written += block.len() as u64;
    }
    Ok(written)
}

fn run(args: &Args) -> Result<(), String> {
    let clock = perfclock::init().map_err(|e| format!("perf clock: {e}"))?;
    let markers = Markers::open(&args.dir).map_err(|e| e.to_string())?;
    let data_path = args.dir.join("phases-data.bin");
    let mut file = File::create(&data_path).map_err(|e| {
        format!(
            "creating {}: {e} (pass a writable --dir)",
            data_path.display()
        )
    })?;
    let mut values = vec![0u32; 256];
    let mut block = vec![0u8; 16 * 1024];
    let mut sink = 0u64;
    let mut written = 0u64;
    let mark = |name: &str, start: u64, end: u64| -> Result<(), String> {
        markers.span(name, start, end).map_err(|e| e.to_string())?;
        if let Some(late) = args.late_control_ns {
            let late_name = format!("late {name}");
            markers
                .span(&late_name, start + late, end + late)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    for _ in 0..args.rounds {
        let start = perfclock::now_ns();
        sink ^= phase_hash(start + args.phase_ns);
        let end = perfclock::now_ns();
        mark("hash", start, end)?;

        let start = perfclock::now_ns();
        sink ^= u64::from(phase_sort(start + args.phase_ns, &mut values));
        let end = perfclock::now_ns();
        mark("sort", start, end)?;

        let start = perfclock::now_ns();
        written += phase_write_file(start + args.phase_ns, &mut file, &mut block)
            .map_err(|e| format!("writing {}: {e}", data_path.display()))?;
        let end = perfclock::now_ns();
        mark("write_file", start, end)?;
    }
    markers
        .instant("done", perfclock::now_ns())
        .map_err(|e| e.to_string())?;
    file.sync_all()
        .map_err(|e| format!("syncing {}: {e}", data_path.display()))?;
    // A wall-clock anchor for this recording (a default-clock perf.data has none).
    let snapshot = perfclock::ClockSnapshot::take(clock).map_err(|e| e.to_string())?;
    let path = markers.path().to_path_buf();
    let lost = markers.lost();
    markers.close().map_err(|e| e.to_string())?;
    black_box(sink);
    println!(
        "phases: {} rounds, {} bytes to {}, markers in {} ({lost} lost), clock {:?} +- {} ns",
        args.rounds,
        written,
        data_path.display(),
        path.display(),
        clock.mode(),
        clock.error_bound_ns()
    );
    println!(
        "phases: snapshot perf_ns {} realtime_ns {} (offset {} +- {} ns) monotonic offset {} +- \
         {} ns",
        snapshot.perf_ns,
        snapshot.realtime.ns,
        snapshot.realtime.offset_ns,
        snapshot.realtime.uncertainty_ns,
        snapshot.monotonic.offset_ns,
        snapshot.monotonic.uncertainty_ns
    );
    Ok(())
}

fn main() -> ExitCode {
    match parse_args().and_then(|args| run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("phases: {e}");
            ExitCode::FAILURE
        }
    }
}
