#!/usr/bin/env bash
# End-to-end test of `perfclock attach` with perfclock's JVMTI agent, against the real perf tool,
# on every JDK under /usr/lib/jvm: for each, a JVM started without any agent, and the same in
# its own mount + pid namespace with a private /tmp (`unshare`, as a container has).
#
# Each run: the agent tests' workload (tests/e2e/jvm-attribution/Workload.java --until STOP)
# starts (no agent; its code gets hot); `perf record -g -e cpu-clock -F 2000 -p PID` (perf's
# default clock) starts, and once it has enabled its events (perf's --control ack) and sampled
# the hot code for a while, `perfclock attach PID jitdump=DIR` loads the agent (a second attach
# must succeed and say the agent was already loaded). Then
# `perfclock inject-time-conv` and `perf inject --jit`, while the JVM still runs, and check.py:
# >= 90% of the hot samples taken after the attach are named after the right Java class; the
# control: the same code's samples before the attach are (almost) never named.
#
# Why perf inject runs while the JVM lives: for a JVM in a pid namespace the agent writes
# jit-<its namespace pid>.dump, and perf inject (Debian's 6.1) accepts that name only if it can
# read the namespace pid from /proc/PID at inject time (tools/perf/util/jitdump.c jit_detect;
# upstream accepts it without since "perf jitdump: Accept jitdump mmaps emitted from inside
# containers", 2024). Profiling a long-running JVM, that is the usual order anyway.
#
# Usage: run.sh [AGENT]   AGENT: libperfclock_agent.so (default: `perfclock agent-path`, or
#                         libperfclock_agent.so next to the perfclock binary)
# Needs: perf, a JDK under /usr/lib/jvm (java, javac), python3, cargo, unshare; root (the
# namespace run, perf -p). Exits non-zero on any failure.
# Environment: CARGO_TARGET_DIR (default <repo>/target), PERFCLOCK_E2E_DIR (work directory,
# default a fresh /var/tmp/perfclock-e2e-attach.*: not under /tmp, which the namespace run
# hides; the agent is copied into it, so the JVM in the namespace sees the same file),
# PERFCLOCK_E2E_SECONDS (sampling before the attach is 1.5 s; after it, default 4).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target="$root/$target" ;; esac
mkdir -p "$target"
# Outside /tmp (the namespace run mounts its own) and outside the checkout (which may itself
# lie under /tmp, or under a home directory nobody else can enter): mktemp's fresh directory.
out=${PERFCLOCK_E2E_DIR:-$(mktemp -d /var/tmp/perfclock-e2e-attach.XXXXXX)}
seconds=${PERFCLOCK_E2E_SECONDS:-4}
mkdir -p "$out"
out=$(cd "$out" && pwd)
case $out in /tmp/*) echo "attach e2e: PERFCLOCK_E2E_DIR must not be under /tmp (the namespace run hides it)" >&2; exit 1 ;; esac

fail() {
    echo "ATTACH E2E FAIL: $*" >&2
    exit 1
}

for tool in perf python3 cargo unshare; do
    command -v "$tool" >/dev/null || fail "missing '$tool' (Debian: apt-get install -y linux-perf python3 util-linux)"
done
[ "$(id -u)" = 0 ] || fail "run as root (unshare --mount --pid, perf record -p)"

# shellcheck source=scripts/lib/jdks.sh
. "$root/scripts/lib/jdks.sh"
mapfile -t jdks < <(perfclock_jdks)
[ "${#jdks[@]}" -gt 0 ] || fail "no JDK (bin/java and bin/javac) under /usr/lib/jvm (Debian: apt-get install -y openjdk-17-jdk-headless)"

echo "attach e2e: cargo build --release -p perfclock-cli -p perfclock-jvmti"
(cd "$root" && cargo build --release -p perfclock-cli -p perfclock-jvmti)
perfclock="$target/release/perfclock"
[ -x "$perfclock" ] || fail "$perfclock was not built"
if [ $# -gt 0 ]; then
    agent=$(readlink -f "$1")
elif "$perfclock" agent-path >/dev/null 2>&1; then
    agent=$("$perfclock" agent-path)
else
    agent="$target/release/libperfclock_agent.so"
fi
[ -f "$agent" ] || fail "no agent at $agent: pass its path (cargo build --release -p perfclock-jvmti builds it)"
# The JVM in its own mount namespace must see the agent at the same path: the checkout (and so
# the agent) may lie under /tmp, which that namespace hides.
cp "$agent" "$out/libperfclock_agent.so"
agent="$out/libperfclock_agent.so"
echo "attach e2e: agent $agent; work dir $out; $(perf --version)"

# Starts the workload in the background (plain or in a namespace), waits for "ready" and
# prints the JVM's pid here.
start_jvm() {
    local jdk=$1 mode=$2 dir=$3 launcher
    case $mode in
        plain) launcher=() ;;
        namespace) launcher=(unshare --mount --pid --fork --kill-child --mount-proc
            sh -c 'mount -t tmpfs tmpfs /tmp && exec "$0" "$@"') ;;
    esac
    (cd "$dir" && exec "${launcher[@]}" "$jdk/bin/java" -cp "$dir/../classes" Workload --until "$dir/stop" \
        >"$dir/java.out" 2>"$dir/java.err") &
    local launched=$! waited=0
    until grep -q '^ready ' "$dir/java.out" 2>/dev/null; do
        sleep 0.1
        waited=$((waited + 1))
        [ "$waited" -lt 600 ] || fail "$mode JVM did not start: $(tail -3 "$dir/java.err")"
    done
    if [ "$mode" = namespace ]; then
        cat "/proc/$launched/task/$launched/children" | tr -d ' '
    else
        echo "$launched"
    fi
}

# A failed run leaves no JVM behind: each ends once its stop file exists.
trap 'for d in "$out"/*/*/; do touch "$d/stop" 2>/dev/null || true; done' EXIT

status=0
for jdk in "${jdks[@]}"; do
    name=$(basename "$jdk")
    rm -rf "${out:?}/$name"
    mkdir -p "$out/$name/classes"
    "$jdk/bin/javac" -d "$out/$name/classes" "$root/tests/e2e/jvm-attribution/Workload.java"
    echo "attach e2e: === $name ($("$jdk/bin/java" -version 2>&1 | head -1))"
    for mode in plain namespace; do
        dir="$out/$name/$mode"
        mkdir -p "$dir/dump" "$dir/home"
        pid=$(start_jvm "$jdk" "$mode" "$dir")
        [ "$(cat "/proc/$pid/comm")" = java ] || fail "$name $mode: pid $pid is not the JVM"
        ns_pid=$(awk '/^NStgid:/ { print $NF }' "/proc/$pid/status")
        echo "attach e2e: $name $mode: JVM $pid (pid $ns_pid in its namespace): perf record -g -p $pid, then perfclock attach"
        mkfifo "$dir/ctl" "$dir/ack"
        # Disabled until told (-D -1): the ack says the events are on, however long perf took to
        # start on a loaded machine.
        perf record -q -g -e cpu-clock -F 2000 -p "$pid" -o "$dir/perf.data" -D -1 \
            --control "fifo:$dir/ctl,$dir/ack" 2>"$dir/record.err" &
        perf_pid=$!
        exec 8<>"$dir/ctl" 9<>"$dir/ack"
        echo enable >&8
        read -r -t 60 ack <&9 || fail "$name $mode: perf record did not acknowledge 'enable': $(tail -3 "$dir/record.err")"
        [ "$ack" = ack ] || fail "$name $mode: perf record answered '$ack' to 'enable'"
        sleep 1.5 # samples of the hot code before the attach: the control
        start=$(date +%s.%N)
        "$perfclock" attach "$pid" "jitdump=$dir/dump" --agent "$agent" 2>"$dir/attach1.err" \
            || fail "$name $mode: perfclock attach failed: $(cat "$dir/attach1.err")"
        echo "attach e2e: $name $mode: attached in $(echo "$(date +%s.%N) - $start" | bc) s: $(cat "$dir/attach1.err")"
        "$perfclock" attach "$pid" "jitdump=$dir/dump" --agent "$agent" 2>"$dir/attach2.err" \
            || fail "$name $mode: the second perfclock attach failed: $(cat "$dir/attach2.err")"
        grep -q "was already loaded in JVM $pid" "$dir/attach2.err" \
            || fail "$name $mode: the second attach did not say the agent was loaded: $(cat "$dir/attach2.err")"
        sleep "$seconds"
        kill -INT "$perf_pid"
        # perf record ends by re-raising the SIGINT it handled: 130 is its normal end here.
        record_status=0
        wait "$perf_pid" || record_status=$?
        [ "$record_status" = 0 ] || [ "$record_status" = 130 ] \
            || fail "$name $mode: perf record -p failed ($record_status): $(tail -3 "$dir/record.err")"
        exec 8>&- 9<&-

        dump="$dir/dump/jit-$ns_pid.dump"
        [ -s "$dump" ] && [ -s "$dump.timeconv" ] || fail "$name $mode: the agent wrote no $dump and .timeconv"
        "$perfclock" inject-time-conv "$dir/perf.data" -o "$dir/conv.data" 2>"$dir/conv.err" \
            || fail "$name $mode: perfclock inject-time-conv: $(tail -3 "$dir/conv.err")"
        HOME="$dir/home" perf inject --jit -i "$dir/conv.data" -o "$dir/jitted.data" 2>"$dir/inject.err" \
            || fail "$name $mode: perf inject --jit: $(tail -3 "$dir/inject.err")"
        HOME="$dir/home" perf script -i "$dir/jitted.data" --ns -G -F comm,pid,tid,time,ip,sym,dso \
            >"$dir/jitted.script" 2>"$dir/script.err" || fail "$name $mode: perf script: $(tail -3 "$dir/script.err")"
        HOME="$dir/home" perf report -i "$dir/jitted.data" --stdio --sort comm,sym --no-children \
            >"$dir/jitted.report" 2>/dev/null || true
        touch "$dir/stop"
        waited=0
        until grep -q "^workload: done" "$dir/java.out"; do
            sleep 0.1
            waited=$((waited + 1))
            [ "$waited" -lt 300 ] || fail "$name $mode: the JVM did not finish: $(tail -3 "$dir/java.err")"
        done
        python3 "$here/check.py" --pid "$pid" --dump "$dump" --script "$dir/jitted.script" \
            --label "$name $mode" || status=1
    done
done
if [ "$status" = 0 ] && [ -z "${PERFCLOCK_E2E_DIR:-}" ]; then
    rm -rf "$out"
else
    echo "attach e2e: artifacts in $out (per JDK and mode: perf.data, jitted.data, jitted.report, dump/, *.script, attach*.err)"
fi
exit "$status"
