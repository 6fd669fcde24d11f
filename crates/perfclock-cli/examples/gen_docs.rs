//! Writes the man pages and shell completions of `perfclock` from its own clap definitions
//! (`src/main.rs`), for the packages (`scripts/package.sh`):
//!
//! ```sh
//! cargo run -p perfclock-cli --features gen-docs --example gen-docs -- OUT_DIR
//! ```
//!
//! `OUT_DIR/man/` gets `perfclock.1` and one page per subcommand (`perfclock-doctor.1`, ...);
//! `OUT_DIR/completions/` gets `perfclock.bash`, `_perfclock` (zsh) and `perfclock.fish`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

/// The command's own source: the definitions are compiled here exactly as in the binary. Its
/// `main` and everything only `main` reaches are unused in this program.
#[allow(dead_code)]
#[path = "../src/main.rs"]
mod perfclock_main;

// The command's modules name each other from the crate root (`crate::output`), which is this
// file here: each module `src/main.rs` declares `pub(crate)` is found through this import.
#[allow(unused_imports)]
use perfclock_main::*;

fn main() -> ExitCode {
    let Some(out_dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: gen-docs OUT_DIR");
        return ExitCode::from(2);
    };
    match generate(&out_dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err((what, error)) => {
            eprintln!("gen-docs: cannot write {}: {error}", what.display());
            ExitCode::FAILURE
        }
    }
}

fn generate(out_dir: &std::path::Path) -> Result<(), (PathBuf, std::io::Error)> {
    let mut command = perfclock_main::Cli::command();
    let man = out_dir.join("man");
    let completions = out_dir.join("completions");
    for dir in [&man, &completions] {
        std::fs::create_dir_all(dir).map_err(|e| (dir.clone(), e))?;
    }
    clap_mangen::generate_to(command.clone(), &man).map_err(|e| (man.clone(), e))?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut command, "perfclock", &completions)
            .map_err(|e| (completions.clone(), e))?;
    }
    Ok(())
}
