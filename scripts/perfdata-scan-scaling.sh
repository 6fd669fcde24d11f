#!/usr/bin/env bash
# Scaling of the perf.data scan in the number of distinct jit-<pid>.dump names (a
# recording any process can fill with such names): generates synthetic recordings with N distinct names for each N given (default
# 16384 and 100000), then times the library's layout+scan (the synth_perf_data example's --scan,
# which prints its peak RSS) and the whole `perfclock inject-time-conv` (after the scan it
# warns of each dump it cannot read, and writes the clock data only), with /usr/bin/time for
# elapsed time and peak RSS. A measurement, not a check: tests/e2e/scaling/sidecar-check.sh is
# the check CI runs.
# Linear means: the time and the memory above the process's floor grow with N, not N^2.
#
#   scripts/perfdata-scan-scaling.sh [N...]
#   PERFCLOCK_BIN=/path/to/perfclock scripts/perfdata-scan-scaling.sh   # another build
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(16384 100000)
cargo build --release -q -p perfclock-perfdata --features synth --example synth_perf_data
cargo build --release -q -p perfclock-cli
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
synth="$target/release/examples/synth_perf_data"
perfclock="${PERFCLOCK_BIN:-$target/release/perfclock}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for n in "${sizes[@]}"; do
    data="$work/dumps-$n.data"
    "$synth" "$data" --distinct-dumps "$n"
    echo "== $n distinct names, $(stat -c %s "$data") bytes"
    "$synth" --scan "$data"
    /usr/bin/time -f "perfclock inject-time-conv: %e s elapsed, peak RSS %M KiB" \
        "$perfclock" inject-time-conv "$data" -o "$work/out.data" 2>&1 |
        grep -v "no time conversion record" || true
done
