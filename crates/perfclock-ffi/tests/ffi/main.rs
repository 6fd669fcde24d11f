//! The C ABI's integration tests, one module per concern, in one binary: each binary links the
//! facade, and on a 2-core machine the links cost more than the tests take to run.
//!
//! - `c_abi`: `tests/c/abi_test.c` against the static and the shared library, and the header
//!   alone as pedantic C99;
//! - `clock_env`: the jitdump's and the marker file's clock from the environment;
//! - `hostile_c_lifecycle`, `hostile_init_retry`, `hostile_preload`: `perfclock_init()` in a
//!   `dlopen`ed constructor, a fork child, after a transient failure, in a preloaded library;
//! - `jit_reload`: the C JIT of `tests/e2e/jit-reload` writes a dump perf can read.
//!
//! What changes the process (an environment variable, a descriptor limit, a fork) runs in a
//! child: a C program, or this binary re-executed filtered to one test by its path
//! (`perfclock_testutil::test_path!`); `common` finds the libraries the C programs link.

mod c_abi;
mod clock_env;
mod common;
mod hostile_c_lifecycle;
mod hostile_init_retry;
mod hostile_preload;
mod jit_reload;
