#!/usr/bin/env bash
# The facade without its default feature builds and has no calibration in its dependency tree
# (perfclock-calib). The tree is taken first, so a failing `cargo tree` fails here instead of
# reading as a tree without perfclock-calib in it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p perfclock --no-default-features
tree=$(cargo tree -p perfclock --no-default-features -e normal)
grep -q '^perfclock v' <<<"$tree" || { echo "cargo tree printed no tree for perfclock" >&2; exit 1; }
if grep -q perfclock-calib <<<"$tree"; then
    echo "perfclock --no-default-features depends on perfclock-calib" >&2
    exit 1
fi
echo "perfclock --no-default-features: no perfclock-calib in its tree"
