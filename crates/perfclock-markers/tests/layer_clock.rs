//! The tracing layer opens the perf clock when it is built, never inside a tracing callback
//! (the first span would otherwise open and calibrate it: tens of milliseconds and a thread
//! started from span creation). Alone in its test binary, so no other test opens the clock
//! first.
#![cfg(feature = "tracing")]

use perfclock_markers::{MarkerLayer, Markers};
use perfclock_testutil::{ok_or_skip, Need};

#[test]
fn the_layer_is_built_from_an_open_clock() {
    let dir = std::env::temp_dir().join(format!("pcm-layer-clock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A perf-clock writer opens no clock.
    let markers = Markers::open(&dir).unwrap();
    assert!(
        perfclock::global().is_none(),
        "the clock was open before the layer"
    );
    let Some(layer) = ok_or_skip(
        "the_layer_is_built_from_an_open_clock",
        Need::Perf,
        MarkerLayer::new(markers.clone()),
    ) else {
        return;
    };
    assert!(
        perfclock::global().is_some(),
        "the layer was built without opening the clock: its first span would"
    );
    drop(layer);
    markers.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
