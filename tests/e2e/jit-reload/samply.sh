#!/usr/bin/env bash
# The jitdump and marker clocks in samply, the tool that needs them: jit_reload.c
# loads a different function at the same address every PERIOD_MS and writes a marker per
# function ("phase jit_fn_<k>"); check_samply.py requires the samples samply places inside each
# phase marker to be named by that phase's function, on samply's own time axis.
#   1. samply record, jitdump and markers in CLOCK_MONOTONIC: at least 95%.
#   2. default perf record + samply import (no perf inject), both in the perf clock: at least 95%.
# Negative controls that must fail:
#   3. samply record with an arch (raw counter) jitdump: samply names none of the functions;
#   4. default perf record + samply import with an arch jitdump: none (the arch counter is not samply's time axis);
#   5. samply record with the markers 2 ms late: under 95% (the check resolves 2 ms).
#
# Usage: samply.sh [WORKDIR]   (default: a new temporary directory, kept for inspection)
# Needs root (samply record wants perf_event_paranoid <= 1 even as root: lowered for the run and
# restored on exit), samply, perf, cc, python3, cargo; x86_64.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
if [ $# -ge 1 ]; then
    mkdir -p "$1"
    work=$(cd "$1" && pwd)
else
    work=$(mktemp -d -t jit_samply.XXXXXX)
fi
reloads=30
period_ms=20
min_samples=200

fail() { echo "samply.sh: FAIL: $*" >&2; exit 1; }

[ "$(uname -m)" = x86_64 ] || fail "jit_reload.c hand-assembles x86-64 code; this is $(uname -m)"
[ "$(id -u)" = 0 ] || fail "run as root (perf_event_paranoid must be lowered for samply record)"
command -v samply >/dev/null || fail "samply not found (.ci/provision installs it)"
command -v perf >/dev/null || fail "perf not found (Debian: apt-get install linux-perf)"

paranoid_file=/proc/sys/kernel/perf_event_paranoid
saved_paranoid=$(cat "$paranoid_file")
trap 'echo "$saved_paranoid" > "$paranoid_file"' EXIT
echo 1 > "$paranoid_file"

target=${CARGO_TARGET_DIR:-$repo/target}
(cd "$repo" && cargo build --release -q -p perfclock-ffi)
cd "$work"
echo "samply.sh: working in $work"
cc -std=c11 -O1 -Wall -Wextra -Werror -I "$repo/crates/perfclock-ffi/include" \
    "$here/jit_reload.c" "$target/release/libperfclock_ffi.a" \
    -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc -o jit_reload

# run LABEL JITDUMP_CLOCK MARKERS_CLOCK SHIFT_NS RECORDER -> the profile path on stdout
run() {
    local label=$1 jit_clock=$2 marker_clock=$3 shift_ns=$4 recorder=$5
    rm -rf "${work:?}/$label" && mkdir -p "$work/$label"
    local env=(PERFCLOCK_JITDUMP_CLOCK="$jit_clock" PERFCLOCK_MARKERS_CLOCK="$marker_clock"
        JIT_RELOAD_MARKERS=1 JIT_RELOAD_MARKER_SHIFT_NS="$shift_ns")
    case $recorder in
    samply-record)
        env "${env[@]}" samply record -s -r 4000 -o "$label/profile.json.gz" -- \
            ./jit_reload "$work/$label" "$reloads" "$period_ms" > "$label/log.txt" 2> "$label/err.txt"
        ;;
    perf-record)
        env "${env[@]}" perf record -q -F 4000 -e cpu-clock -o "$label/perf.data" -- \
            ./jit_reload "$work/$label" "$reloads" "$period_ms" > "$label/log.txt" 2> "$label/err.txt"
        samply import -s -o "$label/profile.json.gz" "$label/perf.data" 2>> "$label/err.txt"
        ;;
    esac
    grep -q '^not ok' "$label/log.txt" && fail "$label: jit_reload's checks failed ($label/log.txt)"
    grep -q '^ok - markers close' "$label/log.txt" || fail "$label: jit_reload did not finish"
    grep -q "^clock=$jit_clock\$" "$label"/jit-*.dump.timeconv ||
        fail "$label: the sidecar does not say clock=$jit_clock"
    echo "$label/profile.json.gz"
}

check() { # LABEL PROFILE [check_samply.py options]
    local label=$1 profile=$2
    shift 2
    python3 "$here/check_samply.py" "$profile" --label "$label" --min-samples "$min_samples" "$@"
}

profile=$(run monotonic-samply-record monotonic monotonic 0 samply-record)
check monotonic-samply-record "$profile" || fail "monotonic under samply record"

profile=$(run perf-samply-import perf perf 0 perf-record)
check perf-samply-import "$profile" || fail "perf clock under perf record + samply import"

profile=$(run control-arch-samply-record arch monotonic 0 samply-record)
check control-arch-samply-record "$profile" --expect-none ||
    fail "control: samply record named functions of an arch jitdump: the check cannot tell"
echo "control-arch-samply-record: samply names none, as it must"

profile=$(run control-arch-samply-import arch perf 0 perf-record)
check control-arch-samply-import "$profile" --expect-none ||
    fail "control: samply import named functions of an arch jitdump: the check cannot tell"
echo "control-arch-samply-import: samply names none, as it must"

profile=$(run control-markers-2ms-late monotonic monotonic 2000000 samply-record)
if check control-markers-2ms-late "$profile"; then
    fail "control with the markers 2 ms late passed: the check cannot resolve 2 ms"
fi
echo "control-markers-2ms-late: FAILED as it must"

echo "samply.sh: PASS"
