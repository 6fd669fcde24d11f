//! Cost of a marker on the calling thread: formatting into the thread's buffer, with the write
//! every 16 KiB amortised in. `perfclock::now_ns` alone is the baseline.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use perfclock_markers::Markers;
use perfclock_testutil::{skip, Need};

fn markers(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("pcm-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    let markers = Markers::open(&dir).expect("marker file");
    match perfclock::init() {
        Ok(_) => {
            c.bench_function("now_ns", |b| b.iter(|| black_box(perfclock::now_ns())));
        }
        Err(error) => skip("now_ns baselines", Need::Perf, error),
    }
    let mut t = 1_000_000_000u64;
    c.bench_function("span (explicit stamps)", |b| {
        b.iter(|| {
            t += 1_000;
            markers
                .span(black_box("phase"), t, t + 500)
                .expect("marker");
        })
    });
    c.bench_function("span with two now_ns reads", |b| {
        b.iter(|| {
            let start = perfclock::now_ns();
            markers
                .span(black_box("phase"), start, perfclock::now_ns().max(start))
                .expect("marker");
        })
    });
    markers.close().expect("flush");
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, markers);
criterion_main!(benches);
