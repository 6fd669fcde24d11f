//! What following a perf map costs and how late its lines are stamped: a thread of this process
//! appends `START SIZE name` lines to `/tmp/perf-<pid>.map` at a steady rate, as a runtime
//! does, reading the counter right before each `write(2)`; the dump watch
//! (`perfclock_inject::Watch`, this process its scope) follows the map. Printed: the lines, the
//! watch thread's CPU time (`/proc/self/task/TID/schedstat`) as a share of one CPU over the
//! run, and each line's stamp minus its write's counter in ns (the window in which a sample
//! still gets the code there before), as percentiles.
//!
//! `cargo bench -p perfclock-inject --bench perfmap_watch -- [LINES_PER_SECOND] [SECONDS]`
//! (defaults 1000 and 10; `--test`, 0.2 s). Run it on an otherwise idle machine, and again
//! beside a load to see what a busy machine does to the window.

use std::fs;
use std::io::Write;
use std::time::{Duration, Instant};

use perfclock_inject::{Scope, Watch};

fn main() {
    // `--test` (cargo bench -- --test, as CI runs every bench): a short run, to show it works.
    let test = std::env::args().any(|arg| arg == "--test");
    let args: Vec<f64> = std::env::args()
        .skip(1)
        .filter_map(|arg| arg.parse().ok())
        .collect();
    let rate = args.first().copied().unwrap_or(1000.0);
    let seconds = args
        .get(1)
        .copied()
        .unwrap_or(if test { 0.2 } else { 10.0 });
    let clock = match perfclock::init() {
        Ok(clock) => clock,
        Err(error) => {
            eprintln!("perfmap_watch: no perf clock here ({error}); nothing measured");
            return;
        }
    };
    let me = std::process::id();
    let path = format!("/tmp/perf-{me}.map");
    let _ = fs::remove_file(&path);
    let mut map = fs::File::create(&path).expect("the map");

    let watch = Watch::start(Scope::Trees(vec![me]), Vec::new()).expect("the watch");
    // Let the watch see this process (and so find the map) before the first line.
    std::thread::sleep(Duration::from_millis(300));
    let watcher = watch_thread().expect("the watch's thread");
    let cpu_before = cpu_ns(watcher);

    let period = Duration::from_secs_f64(1.0 / rate);
    let lines = (rate * seconds) as usize;
    let mut written = Vec::with_capacity(lines);
    let start = Instant::now();
    for index in 0..lines {
        let due = start + period * index as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let line = format!(
            "{:x} 40 bench_fn_{index}\n",
            0x7f00_0000_0000u64 + index as u64 * 64
        );
        written.push(clock.read_counter().expect("the counter"));
        map.write_all(line.as_bytes()).expect("a line");
    }
    let elapsed = start.elapsed();
    // The last lines' wake-ups.
    std::thread::sleep(Duration::from_millis(50));
    let cpu = cpu_ns(watcher).saturating_sub(cpu_before);
    let held = watch.finish();
    let _ = fs::remove_file(&path);

    let maps = held.take_maps();
    let Some(followed) = maps.iter().find(|map| map.process == me) else {
        eprintln!("perfmap_watch: the watch did not follow the map");
        std::process::exit(1);
    };
    let mut late_ns: Vec<i64> = followed
        .lines
        .iter()
        .zip(&written)
        .map(|(line, &at)| {
            let stamp = clock.cycles_to_ns(line.counter).unwrap_or(0);
            let write = clock.cycles_to_ns(at).unwrap_or(0);
            stamp as i64 - write as i64
        })
        .collect();
    late_ns.sort_unstable();
    let percentile = |p: f64| late_ns[((late_ns.len() - 1) as f64 * p) as usize];
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_default();
    println!("cpu: {model}");
    println!(
        "lines: {} written at {rate} per second over {:.2} s, {} followed, {} warning(s)",
        lines,
        elapsed.as_secs_f64(),
        followed.lines.len(),
        followed.warnings.len()
    );
    println!(
        "watch thread CPU: {:.3} ms, {:.3}% of one CPU",
        cpu as f64 / 1e6,
        cpu as f64 / elapsed.as_nanos() as f64 * 100.0
    );
    println!(
        "stamp - write, ns: min {} p50 {} p90 {} p99 {} p99.9 {} max {}",
        late_ns[0],
        percentile(0.5),
        percentile(0.9),
        percentile(0.99),
        percentile(0.999),
        late_ns[late_ns.len() - 1]
    );
}

/// The watch's thread (`perfclock-dumps`) in this process.
fn watch_thread() -> Option<u32> {
    fs::read_dir("/proc/self/task")
        .ok()?
        .flatten()
        .find(|task| {
            fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end() == "perfclock-dumps")
        })
        .and_then(|task| task.file_name().to_str()?.parse().ok())
}

/// A thread's CPU time so far, ns (`schedstat`'s first field).
fn cpu_ns(tid: u32) -> u64 {
    fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|stat| stat.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
