//! `perfclock report` end to end: recordings made by perf (a native program's, a JVM's and
//! Node's under `perfclock record`), reported, and the outputs read by their consumers (`go
//! tool pprof`, headless Chromium), against what `perf script` says of the same recordings.

mod common;
mod diff;
mod lines;
mod markers;
mod native;
mod readable;
