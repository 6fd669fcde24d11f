//! The jitdump writer's integration tests, one module per concern, in one binary: each binary
//! links the facade, and on a 2-core machine the links cost more than the tests take to run.
//!
//! - `writer`: the writer against an independent reader and perf's tolerance rules;
//! - `debug_info`: a debug record right before its load;
//! - `clocks`: `perf` and `monotonic` dumps, one clock per dump;
//! - `alias`: one directory reached by two names is one dump;
//! - `hostile_writer`: the writer where others can write too, fork children, a second open.
//!
//! What changes the process (a fork, another user, a pid namespace, a kill) runs in a child:
//! this binary re-executed filtered to one test by its path (`module::function`).

mod alias;
mod clocks;
mod debug_info;
mod hostile_writer;
mod writer;
