#!/usr/bin/env bash
# Builds every cargo-fuzz target and runs each for RUNS runs (default 1,000,000; perf_script a
# share of them, below), two at a time
# (the project's machines have two cores). Fails if fuzz_targets/ and `cargo fuzz list` disagree,
# if a target CI has always had is gone (a list that comes back short or empty would fuzz
# nothing), or if any target fails: a finding, a crash, a build error. A failing target's panic
# or abort line is printed first (its input's Debug dump can push it out of a tail), then the
# end of its log.
# Usage: scripts/fuzz-all.sh [RUNS]     Needs the nightly toolchain PERFCLOCK_NIGHTLY names
# (.ci/versions) and cargo-fuzz (.ci/provision installs both).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
# shellcheck source=.ci/versions
. ../.ci/versions
runs=${1:-1000000}
export PERFCLOCK_NIGHTLY
# A target whose every input draws flame graphs runs an order of magnitude slower than the rest
# (perf_script: about 800 runs a second against thousands): it runs this share of RUNS, so that
# CI's fuzzing stays within its time (a million of its runs take 20 minutes of one core).
slow_share_percent=30
runs_of() {
    case $1 in
    perf_script) echo $((runs * slow_share_percent / 100)) ;;
    *) echo "$runs" ;;
    esac
}
export -f runs_of
export runs slow_share_percent

cargo "+$PERFCLOCK_NIGHTLY" fuzz build
# The build resolves the workspace's path crates afresh; a lock it had to change is one a commit
# left stale, which CI would otherwise rewrite in every clone it runs in.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && ! git diff --quiet -- Cargo.lock; then
    echo "fuzz/Cargo.lock is stale: commit the lock the fuzz build wrote (git diff fuzz/Cargo.lock)" >&2
    exit 1
fi
files=$(for f in fuzz_targets/*.rs; do basename "$f" .rs; done | sort)
listed=$(cargo "+$PERFCLOCK_NIGHTLY" fuzz list | sort)
if [ "$files" != "$listed" ]; then
    echo "fuzz targets: fuzz_targets/ holds [$(tr "\n" " " <<<"$files")], cargo fuzz list says [$(tr "\n" " " <<<"$listed")]" >&2
    exit 1
fi
for target in page_snapshot conversions records timeconv marker_line perfdata attach_parsers \
    shared_page kmsg_offsets published_offset agent_names foreign_jitdump perf_script build_id \
    marker_file jit_lines; do
    grep -qx "$target" <<<"$listed" || { echo "fuzz target $target is gone" >&2; exit 1; }
done
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# Each target starts from an empty corpus of this run's own (libFuzzer grows the first corpus
# directory it is given): a corpus kept from an earlier run is replayed before the new runs, so
# each run in the same clone would take longer than the one before.
# shellcheck disable=SC2016 # expanded by the inner shell
printf '%s\n' $listed | xargs -P 2 -I{} bash -c '
    mkdir "$2/corpus-$1"
    if cargo "+$PERFCLOCK_NIGHTLY" fuzz run "$1" "$2/corpus-$1" -- -runs="$(runs_of "$1")" >"$2/$1.log" 2>&1; then
        echo "fuzz $1: $(grep -Eo "Done [0-9]+ runs in [0-9]+ second" "$2/$1.log")"
    else
        echo "fuzz $1: FAILED" >&2
        grep -m 1 -A 25 -E "panicked at|memory allocation of|ERROR: libFuzzer|deadly signal" "$2/$1.log" >&2
        tail -n 20 "$2/$1.log" >&2; exit 1
    fi' _ {} "$logs"
# libFuzzer counts the corpus's inputs too, so a target may report more runs than asked for.
ran=$(for log in "$logs"/*.log; do
    done_runs=$(grep -Eo "Done [0-9]+ runs" "$log" | grep -Eo "[0-9]+" || true)
    if [ -n "$done_runs" ] && [ "$done_runs" -ge "$(runs_of "$(basename "$log" .log)")" ]; then
        echo "$log"
    fi
done | wc -l)
[ "$ran" -eq "$(wc -w <<<"$listed")" ] || { echo "fuzzing: only $ran targets completed their runs" >&2; exit 1; }
echo "fuzzing: $ran targets ran $runs runs each (perf_script $(runs_of perf_script)): $(tr "\n" " " <<<"$listed")"
