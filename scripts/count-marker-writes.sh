#!/usr/bin/env bash
# How many system calls the markers writer makes (the figure in docs/measurements.md): the
# `phases` example, run as tests/e2e/markers/run.sh records it, under `strace -f -c`; prints
# strace's summary of the write calls and the pwrite64 count against the marker file's lines.
#
#   scripts/count-marker-writes.sh [ROUNDS]      (default 150, as e2e-markers.sh)
#
# Needs strace (Debian: apt-get install strace); CARGO_TARGET_DIR as cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/skip.sh
. scripts/lib/skip.sh
perfclock_need_tools count-marker-writes.sh strace
rounds=${1:-150}

cargo build --release -q -p perfclock-markers --example phases
binary=${CARGO_TARGET_DIR:-target}/release/examples/phases
work=$(mktemp -d "${TMPDIR:-/tmp}/perfclock-marker-writes.XXXXXX")
trap 'rm -rf "$work"' EXIT

strace -f -c -e trace=write,pwrite64,writev,pwritev,pwritev2 -o "$work/strace.txt" \
    "$binary" --dir "$work" --rounds "$rounds" --phase-ms 3 --late-control-ns 2000000 >/dev/null
marker_files=("$work"/marker-*.txt)
[ "${#marker_files[@]}" = 1 ] && [ -f "${marker_files[0]}" ] || {
    echo "count-marker-writes: expected one marker file in $work" >&2
    exit 1
}
cat "$work/strace.txt"
lines=$(wc -l <"${marker_files[0]}")
# strace -c columns: % time, seconds, usecs/call, calls, [errors,] syscall.
calls=$(awk '$NF == "pwrite64" { print $4 }' "$work/strace.txt")
echo "count-marker-writes: ${calls:-0} pwrite64 calls for $lines marker lines ($rounds rounds)"
