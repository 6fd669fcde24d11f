//! `perf record`'s options as perf's own parser reads them, and which of them `record` refuses
//! among the PERF-OPTIONS: the ones that break the recording (`-k/--clockid`,
//! `-z/--compression-level`) and the ones perfclock passes to perf itself (`-o`, `-p`, `-a`), in
//! every spelling perf accepts (prefixes, negations, bundles of short options).

use std::ffi::OsString;

/// How a perf option takes its value (`perf record -h` shows which).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Value {
    /// None: `-g`, `--overwrite`.
    Flag,
    /// Always: from the rest of a short option's bundle (`-F999`), after `=` (`--freq=999`),
    /// else the next argument (`-F 999`, `--freq 999`).
    Required,
    /// Only from the rest of the bundle (`-z3`) or after `=` (`--compression-level=3`): never
    /// the next argument.
    Optional,
}

/// One of `perf record`'s options.
struct PerfOption {
    short: Option<char>,
    long: Option<&'static str>,
    value: Value,
}

impl PerfOption {
    const fn new(short: Option<char>, long: &'static str, value: Value) -> Self {
        Self {
            short,
            long: Some(long),
            value,
        }
    }

    /// `-k/--clockid`, as perf's usage names it.
    fn name(&self) -> String {
        match (self.short, self.long) {
            (Some(short), Some(long)) => format!("-{short}/--{long}"),
            (Some(short), None) => format!("-{short}"),
            (None, Some(long)) => format!("--{long}"),
            (None, None) => String::new(),
        }
    }
}

/// perf 6.1's `perf record` options (Debian's linux-perf 6.1.187): the long names and their
/// order as `perf record --list-opts` prints them (hidden ones included), the short names and
/// how each takes its value as `perf record -h` shows them (`<n>`: required, `[=<n>]`:
/// optional), and `-g`, which has no long name. Whether a prefix of a long name is unambiguous
/// depends on this list: perf resolves `--clo` to `--clockid` because no other name starts with
/// `clo`, and reports `--cl` as ambiguous because `--clang-path` and `--clang-opt` do.
const PERF_RECORD_OPTIONS: &[PerfOption] = &[
    PerfOption::new(Some('e'), "event", Value::Required),
    PerfOption::new(None, "filter", Value::Required),
    PerfOption::new(None, "exclude-perf", Value::Flag),
    PerfOption::new(Some('p'), "pid", Value::Required),
    PerfOption::new(Some('t'), "tid", Value::Required),
    PerfOption::new(Some('r'), "realtime", Value::Required),
    PerfOption::new(None, "no-buffering", Value::Flag),
    PerfOption::new(Some('R'), "raw-samples", Value::Flag),
    PerfOption::new(Some('a'), "all-cpus", Value::Flag),
    PerfOption::new(Some('C'), "cpu", Value::Required),
    PerfOption::new(Some('c'), "count", Value::Required),
    PerfOption::new(Some('o'), "output", Value::Required),
    PerfOption::new(Some('i'), "no-inherit", Value::Flag),
    PerfOption::new(None, "tail-synthesize", Value::Flag),
    PerfOption::new(None, "overwrite", Value::Flag),
    PerfOption::new(None, "no-bpf-event", Value::Flag),
    PerfOption::new(None, "strict-freq", Value::Flag),
    PerfOption::new(Some('F'), "freq", Value::Required),
    PerfOption::new(Some('m'), "mmap-pages", Value::Required),
    PerfOption::new(None, "mmap-flush", Value::Required),
    PerfOption::new(None, "group", Value::Flag),
    PerfOption::new(None, "call-graph", Value::Required),
    PerfOption::new(Some('v'), "verbose", Value::Flag),
    PerfOption::new(Some('q'), "quiet", Value::Flag),
    PerfOption::new(Some('s'), "stat", Value::Flag),
    PerfOption::new(Some('d'), "data", Value::Flag),
    PerfOption::new(None, "phys-data", Value::Flag),
    PerfOption::new(None, "data-page-size", Value::Flag),
    PerfOption::new(None, "code-page-size", Value::Flag),
    PerfOption::new(None, "sample-cpu", Value::Flag),
    PerfOption::new(None, "sample-identifier", Value::Flag),
    PerfOption::new(Some('T'), "timestamp", Value::Flag),
    PerfOption::new(Some('P'), "period", Value::Flag),
    PerfOption::new(Some('n'), "no-samples", Value::Flag),
    PerfOption::new(Some('N'), "no-buildid-cache", Value::Flag),
    PerfOption::new(Some('B'), "no-buildid", Value::Flag),
    PerfOption::new(Some('G'), "cgroup", Value::Required),
    PerfOption::new(Some('D'), "delay", Value::Required),
    PerfOption::new(None, "kcore", Value::Flag),
    PerfOption::new(Some('u'), "uid", Value::Required),
    PerfOption::new(Some('b'), "branch-any", Value::Flag),
    PerfOption::new(Some('j'), "branch-filter", Value::Required),
    PerfOption::new(Some('W'), "weight", Value::Flag),
    PerfOption::new(None, "transaction", Value::Flag),
    PerfOption::new(None, "per-thread", Value::Flag),
    PerfOption::new(Some('I'), "intr-regs", Value::Optional),
    PerfOption::new(None, "user-regs", Value::Optional),
    PerfOption::new(None, "running-time", Value::Flag),
    PerfOption::new(Some('k'), "clockid", Value::Required),
    PerfOption::new(Some('S'), "snapshot", Value::Optional),
    PerfOption::new(None, "aux-sample", Value::Optional),
    PerfOption::new(None, "proc-map-timeout", Value::Required),
    PerfOption::new(None, "namespaces", Value::Flag),
    PerfOption::new(None, "all-cgroups", Value::Flag),
    PerfOption::new(None, "switch-events", Value::Flag),
    PerfOption::new(None, "all-kernel", Value::Flag),
    PerfOption::new(None, "all-user", Value::Flag),
    PerfOption::new(None, "kernel-callchains", Value::Flag),
    PerfOption::new(None, "user-callchains", Value::Flag),
    PerfOption::new(None, "clang-path", Value::Required),
    PerfOption::new(None, "clang-opt", Value::Required),
    PerfOption::new(None, "vmlinux", Value::Required),
    PerfOption::new(None, "buildid-all", Value::Flag),
    PerfOption::new(None, "buildid-mmap", Value::Flag),
    PerfOption::new(None, "timestamp-filename", Value::Flag),
    PerfOption::new(None, "timestamp-boundary", Value::Flag),
    PerfOption::new(None, "switch-output", Value::Optional),
    PerfOption::new(None, "switch-output-event", Value::Required),
    PerfOption::new(None, "switch-max-files", Value::Required),
    PerfOption::new(None, "dry-run", Value::Flag),
    PerfOption::new(None, "aio", Value::Optional),
    PerfOption::new(None, "affinity", Value::Required),
    PerfOption::new(Some('z'), "compression-level", Value::Optional),
    PerfOption::new(None, "max-size", Value::Required),
    PerfOption::new(None, "num-thread-synthesize", Value::Required),
    PerfOption::new(None, "control", Value::Required),
    PerfOption::new(None, "synth", Value::Required),
    PerfOption::new(None, "debuginfod", Value::Optional),
    PerfOption::new(None, "threads", Value::Optional),
    PerfOption::new(None, "off-cpu", Value::Flag),
    PerfOption {
        short: Some('g'),
        long: None,
        value: Value::Flag,
    },
];

/// Why `record` refuses a perf option that perf reads an argument as setting.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// perfclock record cannot work with it.
    Harmful(&'static str),
    /// `-o`, `-p`, `-a`: perfclock record's own options, which perfclock passes to perf itself.
    Own,
}

/// The perf options `record` refuses, by long name, and why.
const REFUSED: [(&str, Refusal); 5] = [
    (
        "clockid",
        Refusal::Harmful(
            "it makes perf stamp its samples with another clock than the perf clock the \
             jitdumps' timestamps are converted to, so perf inject --jit would place JIT code \
             at the wrong times",
        ),
    ),
    (
        "compression-level",
        Refusal::Harmful(
            "perf inject --jit (perf 6.1 at least) does not look inside compressed records \
             and then silently injects no JIT code",
        ),
    ),
    ("output", Refusal::Own),
    ("pid", Refusal::Own),
    ("all-cpus", Refusal::Own),
];

fn refusal(option: &PerfOption) -> Option<&'static Refusal> {
    REFUSED
        .iter()
        .find(|(long, _)| option.long == Some(*long))
        .map(|(_, refusal)| refusal)
}

/// What perf's parser (tools/lib/subcmd/parse-options.c, `parse_long_opt`) makes of
/// `--ARG`: `arg` is ARG, without the dashes.
#[derive(Debug, PartialEq, Eq)]
enum LongOption {
    /// One option (an index into [`PERF_RECORD_OPTIONS`]): set, or negated (`unset`); its
    /// value given after `=` or not.
    Resolved {
        index: usize,
        unset: bool,
        inline_value: bool,
    },
    /// Prefix of several names: perf stops with "Ambiguous option". The candidates, each
    /// with whether it would be negated.
    Ambiguous(Vec<(usize, bool)>),
    /// No option: perf stops with "unknown option".
    Unknown,
}

/// `parse_long_opt` over `options` ([`PERF_RECORD_OPTIONS`]), step by step: a name given
/// whole (`clockid`, `clockid=1`) wins at once; a name `no-X` is also matched by `X`
/// (negated); otherwise the part before `=` may be a prefix of a name (`clo=1`), `no-`
/// followed by a prefix of a name negates it, and `n`, `no` and `no-` are prefixes of every
/// negation. One prefix match resolves; more than one is ambiguous.
fn parse_long(options: &[PerfOption], arg: &str) -> LongOption {
    let name_end = arg.find('=').unwrap_or(arg.len());
    let name = &arg[..name_end];
    let has_value = name_end < arg.len();
    // `rest` is what follows a whole name: nothing, or `=value`.
    let whole = |index: usize, unset: bool, rest: &str| {
        (rest.is_empty() || rest.starts_with('=')).then_some(LongOption::Resolved {
            index,
            unset,
            inline_value: !rest.is_empty(),
        })
    };
    let mut prefixes = Vec::new();
    for (index, option) in options.iter().enumerate() {
        let Some(long) = option.long else { continue };
        if let Some(rest) = arg.strip_prefix(long) {
            match whole(index, false, rest) {
                Some(resolved) => return resolved,
                None => continue,
            }
        }
        if let Some(positive) = long.strip_prefix("no-") {
            if let Some(rest) = arg.strip_prefix(positive) {
                match whole(index, true, rest) {
                    Some(resolved) => return resolved,
                    None => continue,
                }
            }
            // The whole argument, `=` and all, as perf compares it here.
            if positive.starts_with(arg) {
                prefixes.push((index, true));
                continue;
            }
        }
        if long.starts_with(name) {
            prefixes.push((index, false));
            continue;
        }
        if "no-".starts_with(arg) {
            prefixes.push((index, true));
            continue;
        }
        let Some(negated) = arg.strip_prefix("no-") else {
            continue;
        };
        if let Some(rest) = negated.strip_prefix(long) {
            match whole(index, true, rest) {
                Some(resolved) => return resolved,
                None => continue,
            }
        }
        if long.starts_with(negated) {
            prefixes.push((index, true));
        }
    }
    match prefixes[..] {
        [] => LongOption::Unknown,
        [(index, unset)] => LongOption::Resolved {
            index,
            unset,
            inline_value: has_value && !unset,
        },
        _ => LongOption::Ambiguous(prefixes),
    }
}

/// The first argument among `perf_args` that perf reads as setting an option `record` refuses,
/// perf's options being `options` ([`PERF_RECORD_OPTIONS`]): `(the argument as given, the
/// option, why)`.
///
/// perf's rules (parse-options.c): an argument `--` ends the options (what follows is the
/// command's); `--ARG` is read by [`parse_long`]; `-XYZ` is a bundle of short options read
/// left to right, where a letter that takes a value takes the rest of the bundle as it
/// (`-ozfile`: output `zfile`; `-zg`: compression level `g`, read as the default) or, if
/// nothing is left and the value is required, the next argument (`-gk 1`). A negation
/// (`--no-clockid`, `--no-comp`) is not refused: perf's callbacks turn the option off
/// (`use_clockid = 0`, `comp_level = 0`), which is perf's default, and never take the next
/// argument as a value. A prefix perf reports as ambiguous is refused only when every
/// candidate is a refused option (perf fails on it anyway; this keeps the refusal from
/// depending on which of the candidates perf would have picked).
/// Unlike perf, this does not stop at an unknown option or at the first argument that is no
/// option (perf would run it as the command): it looks further, so a refused option there is
/// refused too. Only refusals `which` accepts count.
fn refused_setting<'o>(
    options: &'o [PerfOption],
    perf_args: &[OsString],
    which: fn(&Refusal) -> bool,
) -> Option<(String, &'o PerfOption, &'static Refusal)> {
    let refused = |option: &PerfOption| refusal(option).filter(|why| which(why));
    let mut args = perf_args.iter().map(|arg| arg.to_string_lossy());
    while let Some(text) = args.next() {
        if text == "--" {
            return None;
        }
        let found = |index: usize| {
            let option = &options[index];
            refused(option).map(|why| (text.clone().into_owned(), option, why))
        };
        if let Some(arg) = text.strip_prefix("--") {
            match parse_long(options, arg) {
                LongOption::Resolved {
                    index,
                    unset: false,
                    inline_value,
                } => {
                    if let Some(refused) = found(index) {
                        return Some(refused);
                    }
                    if options[index].value == Value::Required && !inline_value {
                        args.next();
                    }
                }
                LongOption::Ambiguous(candidates) => {
                    let all_refused = candidates
                        .iter()
                        .all(|&(index, _)| refusal(&options[index]).is_some());
                    let sets = candidates
                        .iter()
                        .find(|&&(index, unset)| !unset && found(index).is_some());
                    if let (true, Some(&(index, _))) = (all_refused, sets) {
                        return found(index);
                    }
                }
                LongOption::Resolved { unset: true, .. } | LongOption::Unknown => {}
            }
            continue;
        }
        let Some(bundle) = text.strip_prefix('-') else {
            continue;
        };
        for (at, letter) in bundle.char_indices() {
            // A letter perf does not know makes perf fail; the rest is looked at all the same.
            let Some(index) = options
                .iter()
                .position(|option| option.short == Some(letter))
            else {
                continue;
            };
            if let Some(refused) = found(index) {
                return Some(refused);
            }
            let rest_empty = at + letter.len_utf8() == bundle.len();
            match options[index].value {
                Value::Flag => continue,
                Value::Required if rest_empty => {
                    args.next();
                }
                Value::Required | Value::Optional => {}
            }
            break;
        }
    }
    None
}

/// The first argument among `perf_args` that perf reads as setting `-k/--clockid` or
/// `-z/--compression-level`, as `(the argument, the reason)`.
pub(super) fn refused_option(perf_args: &[OsString]) -> Option<(String, &'static str)> {
    let harmful = |why: &Refusal| matches!(why, Refusal::Harmful(_));
    refused_setting(PERF_RECORD_OPTIONS, perf_args, harmful).and_then(
        |(arg, option, why)| match why {
            Refusal::Harmful(why) => Some((format!("{arg} (perf's {})", option.name()), *why)),
            Refusal::Own => None,
        },
    )
}

/// The first argument among `perf_args` that is one of perfclock record's own options: perf's
/// `-o`, `-p` or `-a` in any spelling perf reads ([`refused_setting`]), or one perf does not
/// know (`--agent`, `--duration`, ...).
pub(super) fn own_option(perf_args: &[OsString]) -> Option<String> {
    let own = |why: &Refusal| *why == Refusal::Own;
    if let Some((arg, option, _)) = refused_setting(PERF_RECORD_OPTIONS, perf_args, own) {
        return Some(format!("{arg} (perf's {})", option.name()));
    }
    let perfclock_only = [
        "--agent",
        "--no-java-agent",
        "--duration",
        "--allow-unattached",
    ];
    perf_args
        .iter()
        .map(|arg| arg.to_string_lossy())
        .take_while(|arg| arg != "--")
        .find(|arg| {
            perfclock_only.iter().any(|own| {
                arg.strip_prefix(own)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
            })
        })
        .map(|arg| arg.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::args;
    use perfclock_cli::perf_spellings::{HARMLESS_SPELLINGS, REFUSED_SPELLINGS};

    #[test]
    fn refuses_every_spelling_of_clockid_and_compression() {
        // System-wide: not run against the real perf, which needs privileges for it.
        let system_wide: &[&[&str]] = &[&["-ak1"], &["-az1"]];
        for spelling in REFUSED_SPELLINGS.iter().chain(system_wide) {
            assert!(
                refused_option(&args(spelling)).is_some(),
                "{spelling:?} not refused"
            );
        }
        // perf_args never holds `--` (the command line's first one ends them), but perf would
        // read what follows one as the command.
        let after_the_end: &[&[&str]] = &[&["--", "-z", "--clock=1"], &["-F", "99", "--", "-k1"]];
        for fine in HARMLESS_SPELLINGS.iter().chain(after_the_end) {
            assert_eq!(refused_option(&args(fine)), None, "{fine:?} refused");
        }
    }

    #[test]
    fn the_refusal_names_the_argument_and_what_perf_reads_it_as() {
        let (arg, why) = refused_option(&args(&["-F", "99", "--clock=1"])).unwrap();
        assert_eq!(arg, "--clock=1 (perf's -k/--clockid)");
        assert!(why.contains("another clock"), "{why}");
        let (arg, why) = refused_option(&args(&["-gz"])).unwrap();
        assert_eq!(arg, "-gz (perf's -z/--compression-level)");
        assert!(why.contains("compressed records"), "{why}");
        // After one of perfclock's own options: still named.
        let (arg, _) = refused_option(&args(&["-o", "x", "--comp"])).unwrap();
        assert_eq!(arg, "--comp (perf's -z/--compression-level)");
    }

    /// perf's parse_long_opt, case by case, over perf 6.1's option names.
    #[test]
    fn long_options_resolve_as_perfs_parser_resolves_them() {
        let index = |long: &str| {
            PERF_RECORD_OPTIONS
                .iter()
                .position(|option| option.long == Some(long))
                .unwrap()
        };
        let resolved = |long: &str, unset: bool, inline_value: bool| LongOption::Resolved {
            index: index(long),
            unset,
            inline_value,
        };
        for (arg, expected) in [
            ("clockid", resolved("clockid", false, false)),
            ("clockid=1", resolved("clockid", false, true)),
            ("clo", resolved("clockid", false, false)),
            ("clo=1", resolved("clockid", false, true)),
            ("com", resolved("compression-level", false, false)),
            ("no-clockid", resolved("clockid", true, false)),
            ("no-clo", resolved("clockid", true, false)),
            ("no-comp", resolved("compression-level", true, false)),
            // A name given whole wins over the longer names it is a prefix of.
            ("data", resolved("data", false, false)),
            ("switch-output", resolved("switch-output", false, false)),
            // `no-buildid` negated without `no-no-`, whole or abbreviated.
            ("buildid", resolved("no-buildid", true, false)),
            ("no-no-buildid", resolved("no-buildid", true, false)),
            ("inherit", resolved("no-inherit", true, false)),
            ("inh", resolved("no-inherit", true, false)),
            ("clockidx", LongOption::Unknown),
            ("no-clo=1", LongOption::Unknown),
        ] {
            assert_eq!(parse_long(PERF_RECORD_OPTIONS, arg), expected, "--{arg}");
        }
        for arg in ["c", "cl", "cl=1", "co", "all", "all-c", "no", "switch-o"] {
            assert!(
                matches!(
                    parse_long(PERF_RECORD_OPTIONS, arg),
                    LongOption::Ambiguous(_)
                ),
                "--{arg}: {:?}",
                parse_long(PERF_RECORD_OPTIONS, arg)
            );
        }
    }

    /// Which prefixes are refused depends on the option list: without perf 6.1's
    /// `--clang-path` and `--clang-opt`, perf would read `--cl` as `--clockid`; and a prefix
    /// shared only by refused options is refused though perf reports it as ambiguous.
    #[test]
    fn prefixes_are_refused_as_the_option_list_resolves_them() {
        let options = [
            PerfOption::new(Some('k'), "clockid", Value::Required),
            PerfOption::new(Some('z'), "compression-level", Value::Optional),
            PerfOption::new(Some('F'), "freq", Value::Required),
        ];
        let harmful = |why: &Refusal| matches!(why, Refusal::Harmful(_));
        let refused = |list: &[&str]| {
            refused_setting(&options, &args(list), harmful)
                .map(|(arg, option, _)| (arg, option.long.unwrap_or_default()))
        };
        assert_eq!(refused(&["--cl=1"]), Some(("--cl=1".to_owned(), "clockid")));
        assert!(matches!(
            parse_long(&options, "c"),
            LongOption::Ambiguous(_)
        ));
        assert_eq!(refused(&["--c"]), Some(("--c".to_owned(), "clockid")));
        assert_eq!(refused(&["--no-c"]), None);
        assert_eq!(refused(&["--f", "-k"]), None);
        // In perf 6.1's list `c` also starts `--count`, `--cpu`, ...: perf's ambiguity, not a
        // refusal.
        assert_eq!(refused_option(&args(&["--c"])), None);
    }
}
