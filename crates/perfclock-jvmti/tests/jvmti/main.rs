//! The JVMTI agent loaded into a real JVM, one module per concern, in one binary:
//!
//! - `hostile_perf_map`: what a local user plants at `/tmp/perf-<pid>.map`;
//! - `unwritable_dump_dir`: a dump directory the agent cannot write;
//! - `common`: the agent library, brought up to date by cargo.

mod common;
mod hostile_perf_map;
mod unwritable_dump_dir;
