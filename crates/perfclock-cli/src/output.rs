//! What the commands print. `println!` and `eprintln!` panic when their reader has gone; these
//! do not:
//!
//! - standard output (doctor, agent-path: the report is the result): a reader that goes away
//!   (`perfclock doctor | head`) ends the process the way a C tool's ends, by SIGPIPE, quietly,
//!   with the status shells and `pipefail` expect;
//! - standard error (progress, warnings, errors): a failed write is ignored, so a server whose
//!   log reader died keeps serving, and a command that is writing OUT finishes it (or removes
//!   its temporary file) instead of unwinding from a panic.

use std::fmt;
use std::io::{self, Write};
use std::process;

use signal_hook::consts::SIGPIPE;

/// `print!` to standard output; see the module docs for a reader that has gone.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write(format_args!($($arg)*)) };
}

/// `println!` to standard output; see the module docs for a reader that has gone.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that ignores a failed write; see the module docs.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::output::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {errln, out, outln};

/// Writes `args`; a write that fails ends the process (by SIGPIPE when the reader has gone).
pub(crate) fn write(args: fmt::Arguments<'_>) {
    let Err(error) = io::stdout().lock().write_fmt(args) else {
        return;
    };
    if error.kind() == io::ErrorKind::BrokenPipe {
        // Rust starts with SIGPIPE ignored; this restores its default action and raises it.
        let _ = signal_hook::low_level::emulate_default_handler(SIGPIPE);
    }
    // Any other failure (a full disk under `> file`), or a SIGPIPE that did not end us: the
    // report cannot be delivered, so stop rather than run checks nobody will read.
    let _ = writeln!(
        io::stderr(),
        "perfclock: cannot write to standard output: {error}"
    );
    process::exit(1);
}

/// Writes `args` to standard error, ignoring failure: nothing better can be done with it.
pub(crate) fn write_err(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// An error and its causes on one line: the facade's [`perfclock::error_chain`].
pub(crate) use perfclock::error_chain as chain;
