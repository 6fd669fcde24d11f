//! The facade's clock in this process, one module per concern, in one binary: each binary links
//! the facade, and on a 2-core machine the links cost more than the tests take to run. (The
//! hostile places are `tests/hostile/`, each case in a child; `tests/uninitialised.rs` needs a
//! process where nothing has opened the clock.)
//!
//! - `readings`: modes, errors, readings handed between threads, deferred stamps, fork;
//! - `paravirt_fast_path`: the process-wide fast path in paravirt mode.

mod paravirt_fast_path;
mod readings;
