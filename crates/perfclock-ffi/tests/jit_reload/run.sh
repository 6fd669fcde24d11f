#!/usr/bin/env bash
# The sharp jitdump test: a C JIT (jit_reload.c) loads a different function at the same address
# every 200 ms under a default-clock `perf record`; after `perfclock inject-time-conv` and
# `perf inject --jit`, every sample in the region must name the function loaded at its time
# (check.py, from the program's own log). Three negative controls must fail:
#   1. `perf inject --jit` without the TIME_CONV record (perf refuses the arch timestamps);
#   2. a TIME_CONV whose time_zero is 200 ms late (samples go to the previous function);
#   3. the same 1 ms late (only the samples in the first ms after each reload go wrong).
#
# Usage: run.sh [WORKDIR]    (default: a new temporary directory, kept for inspection)
# Needs root or kernel.perf_event_paranoid <= 1, perf, cc, python3, cargo; x86_64.
# Exits non-zero on any failure, including a control that does not fail.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
if [ $# -ge 1 ]; then
    mkdir -p "$1"
    work=$(cd "$1" && pwd)
else
    work=$(mktemp -d -t jit_reload.XXXXXX)
fi
reloads=12
period_ms=200
min_samples=1000

fail() { echo "run.sh: FAIL: $*" >&2; exit 1; }

[ "$(uname -m)" = x86_64 ] || fail "jit_reload.c hand-assembles x86-64 code; this is $(uname -m)"
paranoid=$(cat /proc/sys/kernel/perf_event_paranoid)
if [ "$(id -u)" != 0 ] && [ "$paranoid" -gt 1 ]; then
    fail "perf_event_paranoid is $paranoid: run as root or set kernel.perf_event_paranoid=1"
fi
command -v perf >/dev/null || fail "perf not found (Debian: apt-get install linux-perf)"

target=${CARGO_TARGET_DIR:-$repo/target}
user_home=$HOME
(cd "$repo" && cargo build --release -q -p perfclock-ffi -p perfclock-cli)
# cargo (and rustup) keep the user's HOME.
perfclock() {
    HOME="$user_home" cargo run --manifest-path "$repo/Cargo.toml" --release -q \
        -p perfclock-cli -- "$@"
}

# perf inject --jit writes the build-id cache under $HOME/.debug: keep it out of the user's.
export HOME="$work/home"
mkdir -p "$HOME" "$work/dump"
cd "$work"
echo "run.sh: working in $work"

cc -std=c11 -O1 -Wall -Wextra -Werror -I "$repo/crates/perfclock-ffi/include" \
    "$here/jit_reload.c" "$target/release/libperfclock_ffi.a" \
    -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc -o jit_reload

# Default clock (no -k): the recording's timestamps are the perf clock.
perf record -q -F 4000 -e cpu-clock -o perf.data -- \
    ./jit_reload "$work/dump" "$reloads" "$period_ms" > log.txt
# perf record's own status does not tell whether the program succeeded: its log does.
grep -q '^not ok' log.txt && fail "jit_reload's C ABI checks failed (log.txt)"
grep -q '^ok - close' log.txt || fail "jit_reload did not finish (log.txt)"
echo "run.sh: $(grep -c '^load ' log.txt) functions loaded at $(awk '/^region/ {print $2}' log.txt)"

perfclock inject-time-conv perf.data -o with-conv.data
perf inject --jit -i with-conv.data -o jitted.data
perf script -i jitted.data -F time,ip,sym --ns > jitted.txt 2> jitted.err
python3 "$here/check.py" --label attribution --log log.txt --script jitted.txt \
    --min-samples "$min_samples" || fail "samples misattributed (see above)"

# Control 1: without the TIME_CONV record perf must refuse the dump.
if perf inject --jit -i perf.data -o no-conv.data 2> no-conv.err; then
    perf script -i no-conv.data -F time,ip,sym --ns > no-conv.txt 2>/dev/null
    if python3 "$here/check.py" --label control-no-time-conv --log log.txt \
        --script no-conv.txt --min-samples "$min_samples"; then
        fail "control without TIME_CONV passed: the check cannot tell"
    fi
else
    echo "control-no-time-conv: perf inject refused ($(tr -d '\n' < no-conv.err)): FAILED as it must"
fi

# Shifted conversions: the recording's TIME_CONV with time_zero moved by SHIFT_NS, from a copy
# of the timeconv record (the dump and the recording stay as they are).
shifted() { # LABEL SHIFT_NS -> check.py's exit status
    local label=$1 shift_ns=$2
    rm -rf "${work:?}/$label" && mkdir -p "$work/$label"
    python3 - "$work/dump" "$work/$label" "$shift_ns" <<'EOF'
import pathlib, sys
src, dst, shift = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
for sidecar in src.glob("jit-*.dump.timeconv"):
    lines = sidecar.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("time_zero="):
            lines[i] = f"time_zero={(int(line.split('=', 1)[1]) + shift) % 2**64}"
    (dst / sidecar.name).write_text("\n".join(lines) + "\n")
EOF
    perfclock inject-time-conv perf.data -o "$label-conv.data" --dump-dir "$work/$label" > /dev/null
    perf inject --jit -i "$label-conv.data" -o "$label.data"
    perf script -i "$label.data" -F time,ip,sym --ns > "$label.txt" 2>/dev/null
    python3 "$here/check.py" --label "$label" --log log.txt --script "$label.txt" \
        --min-samples "$min_samples"
}

# Control 2: time_zero 200 ms late: samples go to the previous function. Must fail.
if shifted control-time-zero+200ms 200000000; then
    fail "control with time_zero 200 ms late passed: the check cannot tell"
fi
echo "control-time-zero+200ms: FAILED as it must"

# Control 3: 1 ms late: the samples in the first ms after each reload (about 4 at 4000 Hz) go
# to the previous function, so the check resolves errors far below the period. Must fail.
if shifted control-time-zero+1ms 1000000; then
    fail "control with time_zero 1 ms late passed: the check cannot resolve 1 ms"
fi
echo "control-time-zero+1ms: FAILED as it must"

echo "run.sh: PASS"
