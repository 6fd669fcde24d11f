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
# Needs root or kernel.perf_event_paranoid <= 1, perf, cc, python3, cargo; x86_64. Without them
# it skips (scripts/lib/skip.sh: exit status 77, or 1 under PERFCLOCK_REQUIRE_<NEED>).
# Exits non-zero on any failure, including a control that does not fail in the way it is about.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
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
# shellcheck source=scripts/lib/skip.sh
. "$repo/scripts/lib/skip.sh"

[ "$(uname -m)" = x86_64 ] ||
    perfclock_skip x86_64 "jit_reload run.sh" "jit_reload.c hand-assembles x86-64 code; this is $(uname -m)"
paranoid=$(cat /proc/sys/kernel/perf_event_paranoid)
if [ "$(id -u)" != 0 ] && [ "$paranoid" -gt 1 ]; then
    perfclock_skip perf "jit_reload run.sh" \
        "perf_event_paranoid is $paranoid: run as root or set kernel.perf_event_paranoid=1"
fi
# Debian: apt-get install linux-perf gcc python3 (and golang-go for the report's pprof check).
perfclock_need_tools "jit_reload run.sh" perf cc python3 cargo

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

# What the recording turns into: the flame graph and pprof give each function loaded at the one
# address perf script's count (check_report.py), read back by the real pprof tool. Without go
# only that part is skipped (in a subshell: the skip helper exits).
perfclock report jitted.data -o flame.html --pprof profile.pb.gz 2> report.err ||
    fail "perfclock report failed: $(tr '\n' ' ' < report.err)"
report_status=0
(
    perfclock_need_tools "jit_reload run.sh: the report's pprof" go
    GOTOOLCHAIN=local go tool pprof -top -sample_index=samples -symbolize=none \
        -nodecount=100000 -nodefraction=0 profile.pb.gz > pprof-top.txt 2> pprof-top.err ||
        fail "go tool pprof -top failed: $(tr '\n' ' ' < pprof-top.err)"
    python3 "$here/check_report.py" --script jitted.txt --flame flame.html --top pprof-top.txt ||
        fail "the flame graph or pprof disagrees with perf script (see above)"
) || report_status=$?
[ "$report_status" = 0 ] || [ "$report_status" = 77 ] || exit "$report_status"

# Control 1: without the TIME_CONV record perf must refuse the dump, for that reason: a non-zero
# status and its message about the missing conversion (tools/perf/util/jitdump.c). Any other
# failure, or an accepted dump, fails the control.
no_conv_status=0
perf inject --jit -i perf.data -o no-conv.data 2> no-conv.err || no_conv_status=$?
no_conv_message="no timestamp conversion"
if [ "$no_conv_status" = 0 ] || ! grep -qF "$no_conv_message" no-conv.err; then
    fail "control-no-time-conv: perf inject exited $no_conv_status without '$no_conv_message': $(tr '\n' ' ' < no-conv.err)"
fi
echo "control-no-time-conv: perf inject refused (exit $no_conv_status, '$no_conv_message'): FAILED as it must"

# Shifted conversions: the recording's TIME_CONV with time_zero (and the pvclock offset) moved
# by SHIFT_NS, from a copy of the timeconv record (the dump and the recording stay as they are).
# Every step must succeed (the control's setup); then check.py must fail with misattributed
# samples, nothing else.
shifted() { # LABEL SHIFT_NS
    local label=$1 shift_ns=$2 status=0 misattributed
    rm -rf "${work:?}/$label" && mkdir -p "$work/$label"
    python3 - "$work/dump" "$work/$label" "$shift_ns" <<'EOF' || fail "$label: shifting time_zero failed"
import pathlib, sys
src, dst, shift = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
sidecars = list(src.glob("jit-*.dump.timeconv"))
if len(sidecars) != 1:
    sys.exit(f"{src}: {len(sidecars)} timeconv records, expected 1")
for sidecar in sidecars:
    lines = sidecar.read_text().splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("time_zero=")]
    if len(at) != 1:
        sys.exit(f"{sidecar}: {len(at)} time_zero lines, expected 1")
    lines[at[0]] = f"time_zero={(int(lines[at[0]].split('=', 1)[1]) + shift) % 2**64}"
    # Paravirt mode's record also carries the pvclock entry and the boot's offset C (perf time
    # = pvclock time + C), from which inject-time-conv derives the conversion: C moves too.
    for i, line in enumerate(lines):
        if line.startswith("pvclock="):
            *entry, offset = line.split("=", 1)[1].split(",")
            lines[i] = "pvclock=" + ",".join(entry + [str(int(offset) + shift)])
    (dst / sidecar.name).write_text("\n".join(lines) + "\n")
EOF
    perfclock inject-time-conv perf.data -o "$label-conv.data" --dump-dir "$work/$label" > /dev/null ||
        fail "$label: perfclock inject-time-conv failed"
    perf inject --jit -i "$label-conv.data" -o "$label.data" 2> "$label-inject.err" ||
        fail "$label: perf inject --jit failed: $(tr '\n' ' ' < "$label-inject.err")"
    perf script -i "$label.data" -F time,ip,sym --ns > "$label.txt" 2> "$label-script.err" ||
        fail "$label: perf script failed: $(tr '\n' ' ' < "$label-script.err")"
    python3 "$here/check.py" --label "$label" --log log.txt --script "$label.txt" \
        --min-samples "$min_samples" > "$label-check.txt" || status=$?
    cat "$label-check.txt"
    # check.py prints `LABEL: FAIL: N samples misattributed` only with enough samples in the region.
    misattributed=$(sed -n "s/^$label: FAIL: \([0-9]*\) samples misattributed\$/\1/p" "$label-check.txt")
    if [ "$status" != 1 ] || [ "${misattributed:-0}" -eq 0 ]; then
        fail "$label: check.py exited $status without misattributed samples: the check cannot tell"
    fi
    echo "$label: $misattributed samples misattributed: FAILED as it must"
}

# Control 2: time_zero 200 ms late: samples go to the previous function.
shifted control-time-zero+200ms 200000000

# Control 4: the report's check against the 200 ms-late recording's perf script (each function's
# samples moved to its neighbour) must name a function whose counts disagree (when go ran).
if [ -s pprof-top.txt ]; then
    report_status=0
    python3 "$here/check_report.py" --script control-time-zero+200ms.txt --flame flame.html \
        --top pprof-top.txt > control-report.txt || report_status=$?
    cat control-report.txt
    if [ "$report_status" != 1 ] || ! grep -q '^report: FAIL: jit_fn_[0-9]*: ' control-report.txt; then
        fail "control-report: check_report.py exited $report_status without a disagreeing function"
    fi
    echo "control-report: FAILED as it must"
fi

# Control 3: 1 ms late: the samples in the first ms after each reload (about 4 at 4000 Hz) go
# to the previous function, so the check resolves errors far below the period.
shifted control-time-zero+1ms 1000000

echo "run.sh: PASS"
