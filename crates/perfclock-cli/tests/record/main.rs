//! `perfclock record` against the real perf and real runtimes, one binary with a module per
//! feature: the JVM ([`jvm`]), other runtimes' own dumps ([`foreign`]), every runtime where
//! production runs (its writer turned on without a flag, running and late processes,
//! containers: [`runtimes`]), the refusals before anything starts ([`options`]), signals and
//! failures ([`signals`]), root against other users' dumps ([`hostile_dumps`]), and perf maps
//! named in time ([`perfmaps`]).
//!
//! Needs perf, a JDK (java and javac on PATH) and permission to profile (root, or
//! perf_event_paranoid <= 2 for one's own processes); some modules need more (each says). Without
//! them the tests say `SKIPPED` (fatal under the PERFCLOCK_REQUIRE_* variables CI sets).

mod common;
mod foreign;
mod hostile_dumps;
mod jvm;
mod options;
mod perfmaps;
mod runtimes;
mod signals;
