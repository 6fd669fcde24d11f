#!/usr/bin/env bash
# End to end with the real tools: `perf record` (default clock) of the `phases` example (Rust, then
# the same in C through the C ABI), then `samply import`, then tests/e2e/markers/check.py: >= 95% of
# each phase's samples must fall inside that phase's markers, a control stamped 2 ms late must
# score at most 50%, and samply must have read every line of the marker file.
# Installs samply (pinned) when missing. Exits non-zero on any failure.
#
# Environment: SAMPLY_VERSION (default 0.13.1), SAMPLY_ROOT (cargo install --root, default
# ~/.cargo), CARGO_TARGET_DIR (default target/), E2E_DIR (kept for inspection; default a fresh
# temporary directory, removed on success).
set -euo pipefail
cd "$(dirname "$0")/../../.."
repo=$(pwd)

SAMPLY_VERSION=${SAMPLY_VERSION:-0.13.1}
SAMPLY_ROOT=${SAMPLY_ROOT:-$HOME/.cargo}
samply=$SAMPLY_ROOT/bin/samply
if ! "$samply" --version 2>/dev/null | grep -qx "samply $SAMPLY_VERSION"; then
    echo "installing samply $SAMPLY_VERSION into $SAMPLY_ROOT (a few minutes on 2 cores)"
    cargo install samply --version "$SAMPLY_VERSION" --locked --root "$SAMPLY_ROOT"
fi
"$samply" --version

# shellcheck source=scripts/lib/skip.sh
. scripts/lib/skip.sh
# Debian: apt-get install linux-perf binutils.
perfclock_need_tools "markers run.sh" perf nm

cargo build --release -p perfclock-markers --example phases
target_dir=${CARGO_TARGET_DIR:-$repo/target}
binary=$(realpath "$target_dir/release/examples/phases")

work=${E2E_DIR:-$(mktemp -d /tmp/perfclock-e2e-markers.XXXXXX)}
mkdir -p "$work"
work=$(realpath "$work")
echo "e2e-markers: working in $work"

# A plain `perf record`: the default clock, default event, no call graphs.
perf record -o "$work/perf.data" -- \
    "$binary" --dir "$work" --rounds 150 --phase-ms 3 --late-control-ns 2000000
marker_files=("$work"/marker-*.txt)
if [ "${#marker_files[@]}" -ne 1 ] || [ ! -f "${marker_files[0]}" ]; then
    echo "e2e-markers: expected exactly one marker file in $work" >&2
    exit 1
fi
"$samply" import "$work/perf.data" --save-only --no-open -o "$work/profile.json"
python3 tests/e2e/markers/check.py --profile "$work/profile.json" --binary "$binary" \
    --marker-file "${marker_files[0]}"

# The same through the C ABI (perfclock_markers_open / perfclock_marker / _close), with a
# marker whose name holds a newline and invalid UTF-8 that samply must read past.
cargo build --release -p perfclock-ffi
cc -std=c11 -O2 -Wall -Wextra -Werror -I crates/perfclock-ffi/include \
    crates/perfclock-ffi/examples/phases.c "$target_dir/release/libperfclock_ffi.a" \
    -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc -o "$work/phases_c"
mkdir -p "$work/c"
perf record -o "$work/c/perf.data" -- "$work/phases_c" "$work/c" 150 3 2000000
c_marker_files=("$work"/c/marker-*.txt)
if [ "${#c_marker_files[@]}" -ne 1 ] || [ ! -f "${c_marker_files[0]}" ]; then
    echo "e2e-markers: expected exactly one marker file in $work/c" >&2
    exit 1
fi
"$samply" import "$work/c/perf.data" --save-only --no-open -o "$work/c/profile.json"
python3 tests/e2e/markers/check.py --profile "$work/c/profile.json" --binary "$work/phases_c" \
    --marker-file "${c_marker_files[0]}" --symbol-format 'phase_{}'

if [ -z "${E2E_DIR:-}" ]; then
    rm -rf "$work"
fi
echo "e2e-markers: PASS"
