//! The marker writer's integration tests, one module per concern, in one binary: each binary
//! links the facade, and on a 2-core machine the links cost more than the tests take to run.
//! (`layer_clock` stays a binary of its own: it needs a process where no other test has opened
//! the clock.)
//!
//! - `clocks`: a `monotonic` file's times, one clock per file;
//! - `alias`: one directory reached by two names is one file;
//! - `hostile`: many threads, unwritable and noexec directories, a full disk, a writer killed
//!   mid-write, pid namespaces;
//! - `hostile_shared_dir`: the writer where others can write too, fork children, signal
//!   handlers.
//!
//! What changes the process (a fork, another user, a pid namespace, a kill, a signal storm)
//! runs in a child: this binary re-executed filtered to one test by its path
//! (`module::function`).

mod alias;
mod clocks;
mod hostile;
mod hostile_shared_dir;
