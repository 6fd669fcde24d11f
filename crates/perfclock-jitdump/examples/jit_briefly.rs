//! A process that writes a jitdump and runs for a moment: for a `perf record` whose recording
//! holds the dump's MMAP2 (the perf.data fixtures of `perfclock-perfdata` are made with it).
//!
//! Usage: `jit_briefly DIR [MILLISECONDS]` (default 50): creates `DIR/jit-<pid>.dump`, records
//! two code loads, spins for the given time, closes the dump and prints its path.

use std::time::{Duration, Instant};

use perfclock_jitdump::JitDump;

/// Two "functions" (x86 `ret`, arm64 `ret`): their bytes and addresses go into the dump; they
/// are never run.
static CODE: [[u8; 4]; 2] = [[0xc3, 0, 0, 0], [0xc0, 0x03, 0x5f, 0xd6]];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let dir = args.next().ok_or("usage: jit_briefly DIR [MILLISECONDS]")?;
    let millis = match args.next() {
        Some(ms) => ms.to_str().ok_or("MILLISECONDS is not a number")?.parse()?,
        None => 50,
    };
    let dump = JitDump::create(dir)?;
    for (name, code) in [&b"jit_briefly_first"[..], b"jit_briefly_second"]
        .into_iter()
        .zip(&CODE)
    {
        dump.code_load(name, code.as_ptr() as u64, code)?;
    }
    let until = Instant::now() + Duration::from_millis(millis);
    let mut spins = 0u64;
    while Instant::now() < until {
        spins = std::hint::black_box(spins.wrapping_add(1));
    }
    println!("{}", dump.path().display());
    dump.close()?;
    Ok(())
}
