//! Standard output for the commands that print to it (doctor, agent-path). When the reader goes
//! away (`perfclock doctor | head`), `println!` would panic; these end the process the way a C
//! tool's ends, by SIGPIPE, quietly, with the status shells and `pipefail` expect.

use std::fmt;
use std::io::{self, Write};
use std::process;

use signal_hook::consts::SIGPIPE;

/// `print!` to standard output; see the module docs for a reader that has gone.
macro_rules! out {
    ($($arg:tt)*) => { $crate::stdout::write(format_args!($($arg)*)) };
}

/// `println!` to standard output; see the module docs for a reader that has gone.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::stdout::write(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {out, outln};

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
