//! The marker writer's clock: a `monotonic` file holds `CLOCK_MONOTONIC` times for the
//! perf-clock times given, within the pairing's uncertainty; a second open of the same directory
//! in another clock is refused.
//!
//! Needs the perfclock clock (`SKIPPED` without it, fatal under `PERFCLOCK_REQUIRE_PERF=1`).

use perfclock_markers::{ClockMismatch, MarkerClock, MarkerError, Markers};
use perfclock_testutil::time::monotonic_ns;
use perfclock_testutil::{ok_or_skip, Need};

fn fresh_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pcm-clock-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn monotonic_files_hold_monotonic_times() {
    if ok_or_skip(
        "monotonic_files_hold_monotonic_times",
        Need::Perf,
        perfclock::init(),
    )
    .is_none()
    {
        return;
    }
    let dir = fresh_dir("mono");
    let markers = Markers::open_with_clock(&dir, MarkerClock::Monotonic).unwrap();
    assert_eq!(markers.clock(), MarkerClock::Monotonic);
    let mut brackets = Vec::new();
    for i in 0..200 {
        let before = monotonic_ns();
        let perf = perfclock::now_ns_ordered();
        let after = monotonic_ns();
        markers.instant(&format!("m{i}"), perf).unwrap();
        brackets.push((before, after));
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    let path = markers.path().to_owned();
    markers.close().unwrap();
    // The pairing's own bound, as a fresh snapshot states it, plus 500 ppm of its 10 ms age.
    let snapshot = perfclock::snapshot().unwrap();
    let bound = 2 * snapshot.monotonic.uncertainty_ns + 5_000;
    let text = std::fs::read_to_string(&path).unwrap();
    let times: Vec<u64> = text
        .lines()
        .map(|line| line.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(times.len(), brackets.len());
    let mut worst = 0u64;
    for (t, (before, after)) in times.iter().zip(&brackets) {
        assert!(
            before.saturating_sub(bound) <= *t && *t <= after + bound,
            "{before} <= {t} <= {after} (bound {bound} ns)"
        );
        worst = worst
            .max(before.saturating_sub(*t))
            .max(t.saturating_sub(*after));
    }
    // The perf clock here is not CLOCK_MONOTONIC (milliseconds apart on a KVM guest): a file
    // written in the perf clock would fail the check above.
    println!(
        "monotonic markers: 200 within their CLOCK_MONOTONIC brackets, worst {worst} ns outside \
         (bound {bound} ns); perf - monotonic here: {} ns",
        -snapshot.monotonic.offset_ns
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn one_clock_per_file() {
    if ok_or_skip("one_clock_per_file", Need::Perf, perfclock::init()).is_none() {
        return;
    }
    let dir = fresh_dir("mismatch");
    let perf = Markers::open(&dir).unwrap();
    match Markers::open_with_clock(&dir, MarkerClock::Monotonic) {
        Err(MarkerError::ClockMismatch(ClockMismatch {
            open: MarkerClock::Perf,
            requested: MarkerClock::Monotonic,
            ..
        })) => {}
        other => panic!("{other:?}"),
    }
    perf.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
