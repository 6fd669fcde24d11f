//! What `record` records (a command, running processes or the whole machine) and the usage
//! errors found before anything is created or started: refused perf options, perfclock's own
//! options misplaced among perf's, and targets that exclude each other.

use std::ffi::OsString;

use perfclock_cli::RecordArgs;

use super::perf_options::{own_option, refused_option};
use super::{usage, Failure};

/// What is recorded: a command, running processes, or the whole machine.
pub(super) enum Target<'a> {
    Command(&'a [OsString]),
    Pids(&'a [u32]),
    SystemWide,
}

/// The usage errors, before anything is created or started.
pub(super) fn check_arguments(options: &RecordArgs) -> Result<Target<'_>, Failure> {
    if let Some((arg, why)) = refused_option(&options.perf_args) {
        return Err(usage(format!(
            "refusing perf option {arg}: {why}; record without it"
        )));
    }
    if let Some(arg) = own_option(&options.perf_args) {
        return Err(usage(format!(
            "{arg} after a perf option: perfclock record's own options (-o, -p, -a, --duration, \
             --agent, --no-java-agent, --allow-unattached) go before the perf options"
        )));
    }
    let target =
        match (&options.pids[..], options.system_wide, &options.command[..]) {
            ([], false, []) => return Err(usage(
                "nothing to record: perfclock record [OPTIONS] [PERF-OPTIONS]... -- CMD [ARGS], \
                 or -p PID[,PID...], or -a"
                    .into(),
            )),
            ([], false, command) => Target::Command(command),
            (pids, false, []) => Target::Pids(pids),
            ([], true, []) => Target::SystemWide,
            _ => return Err(usage(
                "-p, -a and a command exclude each other: pass one (--duration bounds -p and -a)"
                    .into(),
            )),
        };
    if options.allow_unattached && options.pids.is_empty() {
        return Err(usage("--allow-unattached goes with -p".into()));
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::args;

    fn check(perf_args: &[&str]) -> Result<(), String> {
        let options = RecordArgs {
            output: "perf.data".into(),
            agent: None,
            no_java_agent: true,
            no_runtime_flags: true,
            pids: Vec::new(),
            system_wide: false,
            duration: None,
            allow_unattached: false,
            all_jit_code: false,
            perf_args: args(perf_args),
            command: args(&["true"]),
        };
        check_arguments(&options)
            .map(|_| ())
            .map_err(|Failure(message, code)| {
                assert_eq!(code, 2, "{message}");
                message
            })
    }

    #[test]
    fn refuses_perfclocks_own_options_in_every_spelling_perf_reads() {
        for spelling in [
            &["-o", "x"][..],
            &["-ozfile"],
            &["--output=x"],
            &["--out", "x"],
            &["--outp=x"],
            &["-F", "99", "-go", "x"],
            &["-p", "1"],
            &["-p1"],
            &["--pi=1"],
            &["-gp1"],
            &["-a"],
            &["-ga"],
            &["--all-cpus"],
            &["--all-cp"],
            &["--agent=x"],
            &["--agent", "x"],
            &["--no-java-agent"],
            &["--duration", "1"],
            &["--allow-unattached"],
        ] {
            let message = check(spelling).expect_err(&format!("{spelling:?} not refused"));
            assert!(message.contains("after a perf option"), "{message}");
        }
        for fine in [
            &["-F", "99"][..],
            &["-e", "-o"],
            &["--all-c"],
            &["--no-output"],
            &["--clang-path=-a"],
        ] {
            assert_eq!(check(fine), Ok(()), "{fine:?}");
        }
        // A refused perf option is named before a misplaced own option.
        let message = check(&["-o", "x", "-k1"]).unwrap_err();
        assert!(
            message.starts_with("refusing perf option -k1 (perf's -k/--clockid): "),
            "{message}"
        );
    }
}
