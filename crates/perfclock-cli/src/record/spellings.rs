//! The spellings of perf options that `perfclock record` refuses, and of some it does not: a
//! module of the unit tests of `perf_options` (the refusal) and of tests/real_perf.rs (what the
//! real perf makes of each), so both test the same list.

/// Spellings perf 6.1's `perf record` reads as setting `-k`/`--clockid` or
/// `-z`/`--compression-level` (long names, unambiguous prefixes, `=` or a separate value,
/// short options alone or in a bundle, after options that take their value): each refused.
/// `tests/real_perf.rs` has the real perf apply every one of them (none is system-wide: `-a`
/// needs privileges there).
pub(crate) const REFUSED_SPELLINGS: &[&[&str]] = &[
    &["-k", "1"],
    &["-k1"],
    &["-kmono"],
    &["--clockid", "1"],
    &["--clockid=monotonic"],
    &["--clocki=1"],
    &["--clock=1"],
    &["--clock", "1"],
    &["--cloc=1"],
    &["--clo=1"],
    &["-F", "99", "-gk", "1"],
    &["-gk1"],
    &["-gTk", "1"],
    &["-vvk1"],
    &["--call-graph", "dwarf", "-k1"],
    &["-z"],
    &["-z3"],
    &["-gz"],
    &["-zg"],
    &["-gTz"],
    &["--compression-level"],
    &["--compression-level=1"],
    &["--compression=1"],
    &["--comp=1"],
    &["--comp"],
    &["--com"],
    &["-e", "cpu-clock", "-z"],
    &["-F999", "--comp=3"],
];

/// Spellings that set neither option as perf 6.1 reads them: a `k` or `z` that is another
/// option's value, negations (which turn the option off: its default), prefixes perf
/// reports as ambiguous, and names that merely start like a refused one.
pub(crate) const HARMLESS_SPELLINGS: &[&[&str]] = &[
    &["-F", "999"],
    &["-F999"],
    &["-g"],
    &["--call-graph", "dwarf"],
    &["--call-graph=dwarf"],
    &["-e", "cycles"],
    &["-eblock:block_rq_issue"],
    &["-ozfile"],
    &["-Cz"],
    &["-Sz"],
    &["-Ik"],
    &["-D", "-1"],
    &["--clang-opt", "-z"],
    &["--clang-path=/usr/bin/clang"],
    &["--code-page-size"],
    &["--count=1000"],
    &["--cl=1"],
    &["--co=1"],
    &["--c", "1"],
    &["--no-clockid"],
    &["--no-clock"],
    &["--no-clo"],
    &["--no-compression-level"],
    &["--no-comp"],
    &["--clockidx=1"],
    &["--compression-levels=1"],
];
