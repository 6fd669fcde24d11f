//! Times `perfclock::init()` in this fresh process and prints the mode, the bound, the threads
//! and perf rings left behind: run it many times to get a median of fresh-process opens.
//!
//! `cargo build --release --example init_cost && for i in $(seq 50); do target/release/examples/init_cost; done`

use std::time::Instant;

use perfclock::error_chain as chain;

fn main() {
    let start = Instant::now();
    let result = perfclock::init();
    let elapsed = start.elapsed();
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count);
    let perf_fds = std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|entry| std::fs::read_link(entry.path()).ok())
                .filter(|target| target.to_string_lossy().contains("perf_event"))
                .count()
        })
        .unwrap_or(0);
    match result {
        Ok(clock) => {
            let source = clock
                .paravirt()
                .map(|paravirt| {
                    format!(
                        " C {} ns from {}",
                        paravirt.offset().offset_ns,
                        paravirt.offset().source
                    )
                })
                .unwrap_or_default();
            println!(
                "init {} us: mode {:?}, bound {} ns, threads {threads}, perf fds {perf_fds}{source}",
                elapsed.as_micros(),
                clock.mode(),
                clock.error_bound_ns()
            );
        }
        Err(error) => println!("init {} us: {}", elapsed.as_micros(), chain(&error)),
    }
}
