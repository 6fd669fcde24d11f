//! Writes the man pages and shell completions of `perfclock` from its own clap definitions
//! (`src/args.rs`, the package's library `perfclock_cli`), for the packages
//! (`scripts/package.sh`):
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
use perfclock_cli::Cli;

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
    let mut command = Cli::command();
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
