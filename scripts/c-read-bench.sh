#!/usr/bin/env bash
# The C ABI's reads against their floors (benches/c/read.c), as a C program linked with the
# static library pays them, in the mode this machine gives and in every other mode it can be
# forced into (calibrated with PERFCLOCK_PARAVIRT=off on a KVM guest):
#
#   scripts/c-read-bench.sh [ROUNDS]      (default 41 rounds of 100,000 calls per read)
#
# Prints each read's median ns per call and the paired ratios (taken within a round) the
# targets are stated in: perfclock_now_ns / floor, / rdtsc, and perfclock_now_ns_ordered /
# lfence;rdtsc. x86_64; needs cc and cargo.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ "$(uname -m)" = x86_64 ] || { echo "c-read-bench.sh: x86_64 only (rdtsc)" >&2; exit 1; }
(cd "$root" && cargo build --release -q --locked -p perfclock-ffi)
cc -O2 -std=c11 -Wall -Wextra -Werror -I "$root/crates/perfclock-ffi/include" \
    "$root/benches/c/read.c" "$target/release/libperfclock_ffi.a" \
    -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc -o "$work/read"
echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
"$work/read" "${1:-41}"
echo
PERFCLOCK_PARAVIRT=off "$work/read" "${1:-41}"
