#!/usr/bin/env bash
# The sidecar consistency check of `perfclock inject-time-conv` grows linearly with the number of
# jitdump names a recording maps (any process of a system-wide recording can add such names):
# builds a synthetic recording with N distinct dump names and N agreeing sidecars, for a small and
# a 4x larger N, times the whole command on each and fails if the larger takes more than
# MAX_RATIO times as long (linear work gives at most 4 plus noise; a check of every pair gives 16).
#
#   tests/e2e/scaling/sidecar-check.sh [SMALL_N]      # default 15000 (and 4x that)
#   PERFCLOCK_BIN=/path/to/perfclock tests/e2e/scaling/sidecar-check.sh   # another build
set -euo pipefail
cd "$(dirname "$0")/../../.."
small=${1:-15000}
large=$((small * 4))
max_ratio=${MAX_RATIO:-8}
cargo build --release -q -p perfclock-perfdata --features synth --example synth_perf_data
[ -n "${PERFCLOCK_BIN:-}" ] || cargo build --release -q -p perfclock-cli
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
synth="$target/release/examples/synth_perf_data"
perfclock="${PERFCLOCK_BIN:-$target/release/perfclock}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
boot_id=$(cat /proc/sys/kernel/random/boot_id)

# Prints the seconds one inject-time-conv of N names takes.
run() {
    local n=$1 dir="$work/dumps-$1"
    mkdir "$dir"
    "$synth" "$work/in-$n.data" --distinct-dumps "$n" >/dev/null
    # Calibrated records that all agree: the same conversion, 1 us bounds, distinct pids.
    python3 - "$dir" "$n" "$boot_id" <<'PY'
import sys
d, n, boot = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for pid in range(n):
    with open(f"{d}/jit-{pid}.dump.timeconv", "w") as f:
        f.write(f"perfclock-timeconv 1\npid={pid}\nboot_id={boot}\nmode=calibrated\ncounter=tsc\n"
                "time_mult=1000000000\ntime_shift=31\ntime_zero=5000\ntime_cycles=0\n"
                "time_mask=18446744073709551615\ncap_user_time_short=0\nerror_bound_ns=1000\n"
                f"written_counter={1000 + pid}\n")
PY
    local start end
    start=$(date +%s.%N)
    "$perfclock" inject-time-conv "$work/in-$n.data" -o "$work/out-$n.data" --dump-dir "$dir" \
        2>"$work/err-$n" || { cat "$work/err-$n" >&2; exit 1; }
    end=$(date +%s.%N)
    grep -q "$n record(s) agreed" "$work/err-$n" || { cat "$work/err-$n" >&2; exit 1; }
    python3 -c "print(f'{$end - $start:.3f}')"
}

t_small=$(run "$small")
t_large=$(run "$large")
ratio=$(python3 -c "print(f'{$t_large / max($t_small, 0.001):.2f}')")
echo "inject-time-conv: $small names ${t_small} s, $large names ${t_large} s: ratio $ratio (linear: <= 4, limit $max_ratio)"
python3 -c "import sys; sys.exit(0 if $ratio <= $max_ratio else 1)" ||
    { echo "sidecar check not linear: ratio $ratio > $max_ratio" >&2; exit 1; }
