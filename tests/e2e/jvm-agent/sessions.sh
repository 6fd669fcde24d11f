#!/usr/bin/env bash
# End-to-end test of the agent's sessions and names, against the real perf tool, on every JDK
# under /usr/lib/jvm (or the JAVA_HOMEs given as arguments).
#
# For each JDK: Names.java (one thread per kind of name: a method whose name starts with an
# underscore, a lambda and its hidden class, an inner class, a constructor, a static
# initializer) runs without an agent under `perf record -g -p`; then three attach requests:
#   session 1  jitdump=s1,inline=0
#   session 2  jitdump=s2 (defaults: inline=1): finishes session 1, replays the compiled code
#   stop       finishes session 2
# check_sessions.py then checks the dumps (each ends with its close record and does not grow
# after its session ended; session 2 holds methods compiled before it began, and inlined ranges
# while session 1 holds none) and the names perf report and perf script print for the samples
# after `perfclock inject-time-conv` and `perf inject --jit` (every kind, in the Java form, and
# no frame in the JVM form); the same for the JIT frames of `samply import` of the injected
# recording, and for `samply record` of Names.java under the agent (jitdump_clock=monotonic).
#
# Needs: perf, a JDK (java, javac, jcmd), python3, cargo, samply, nm; root or
# perf_event_paranoid <= 1. Skipped on stderr without a tool (fatal under
# PERFCLOCK_REQUIRE_TOOLS=1).
# Environment: CARGO_TARGET_DIR (default <repo>/target), PERFCLOCK_E2E_DIR (work directory,
# default a fresh /tmp/perfclock-sessions.*).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${PERFCLOCK_E2E_DIR:-$(mktemp -d /tmp/perfclock-sessions.XXXXXX)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

fail() {
    echo "SESSIONS E2E FAIL: $*" >&2
    exit 1
}

# shellcheck source=scripts/lib/skip.sh
. "$root/scripts/lib/skip.sh"
perfclock_need_tools "jvmti sessions.sh" perf java javac jcmd python3 cargo samply nm

# samply record needs perf_event_paranoid <= 1: lowered for the run (as root), restored after.
paranoid_file=/proc/sys/kernel/perf_event_paranoid
paranoid=$(cat "$paranoid_file")
if [ "$paranoid" -gt 1 ]; then
    [ "$(id -u)" = 0 ] || perfclock_skip perf "jvmti sessions.sh" "samply record needs perf_event_paranoid <= 1 (it is $paranoid) or root"
    echo 1 >"$paranoid_file"
    trap 'echo "$paranoid" >"$paranoid_file"' EXIT
fi

if [ $# -gt 0 ]; then
    jdks=("$@")
else
    # shellcheck source=scripts/lib/jdks.sh
    . "$root/scripts/lib/jdks.sh"
    mapfile -t jdks < <(perfclock_jdks)
fi
[ "${#jdks[@]}" -gt 0 ] || fail "no JDK (bin/java and bin/javac) under /usr/lib/jvm"

(cd "$root" && cargo build --release -p perfclock-jvmti -p perfclock-cli)
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target="$root/$target" ;; esac
perfclock="$target/release/perfclock"
agent=$("$perfclock" agent-path) || fail "perfclock agent-path found no agent"

# One attach request; its return code is checked.
request() {
    local jdk=$1 pid=$2 options=$3 log=$4
    "$jdk/bin/jcmd" "$pid" JVMTI.agent_load "$agent" "\"$options\"" >"$log" 2>&1 \
        || fail "jcmd ... '$options' failed: $(cat "$log")"
    grep -q "return code: 0" "$log" || fail "attach '$options': $(cat "$log")"
}

size() { stat -c %s "$1"; }

status=0
for jdk in "${jdks[@]}"; do
    name=$(basename "$jdk")
    work="$out/$name"
    rm -rf "$work"
    mkdir -p "$work/classes" "$work/s1" "$work/s2" "$work/home"
    "$jdk/bin/javac" -d "$work/classes" "$here/Names.java"
    echo "sessions e2e: === $name"
    "$jdk/bin/java" -XX:+EnableDynamicAgentLoading -XX:CompileCommand=quiet \
        '-XX:CompileCommand=dontinline,Names*::*' -cp "$work/classes" Names 16 \
        >"$work/java.out" 2>"$work/java.err" &
    java_pid=$!
    sleep 1
    perf record -q -g -e cpu-clock -F 999 -p "$java_pid" -o "$work/perf.data" 2>"$work/record.err" &
    perf_pid=$!
    sleep 1
    request "$jdk" "$java_pid" "jitdump=$work/s1,inline=0" "$work/attach1.log"
    sleep 2
    request "$jdk" "$java_pid" "jitdump=$work/s2" "$work/attach2.log"
    dump1="$work/s1/jit-$java_pid.dump"
    dump2="$work/s2/jit-$java_pid.dump"
    size1=$(size "$dump1")
    sleep 3
    [ "$(size "$dump1")" = "$size1" ] || fail "$name: session 1's dump grew after session 2 began"
    request "$jdk" "$java_pid" stop "$work/stop.log"
    size2=$(size "$dump2")
    sleep 3
    [ "$(size "$dump2")" = "$size2" ] || fail "$name: session 2's dump grew after the stop"
    kill -0 "$java_pid" 2>/dev/null || fail "$name: the JVM ended before the checks (too slow a machine?)"
    wait "$java_pid" || fail "$name: the JVM failed: $(tail -3 "$work/java.err")"
    wait "$perf_pid" || fail "$name: perf record -p failed: $(tail -3 "$work/record.err")"
    [ "$(size "$dump2")" = "$size2" ] || fail "$name: session 2's dump grew at the JVM's exit"

    "$perfclock" inject-time-conv "$work/perf.data" -o "$work/conv.data" 2>"$work/conv.err" \
        || fail "$name: inject-time-conv: $(tail -3 "$work/conv.err")"
    HOME="$work/home" perf inject --jit -i "$work/conv.data" -o "$work/jitted.data" 2>"$work/inject.err" \
        || fail "$name: perf inject --jit: $(tail -3 "$work/inject.err")"
    HOME="$work/home" perf script -i "$work/jitted.data" -F comm,ip,sym >"$work/script.txt" 2>/dev/null
    HOME="$work/home" perf report -i "$work/jitted.data" --stdio --no-children --sort sym \
        -g none >"$work/report.txt" 2>/dev/null
    (cd "$work" && HOME="$work/home" samply import -s -n -o samply.json jitted.data >samply.log 2>&1) \
        || fail "$name: samply import: $(tail -3 "$work/samply.log")"
    # samply record reads the dump itself: its clock must be samply's, CLOCK_MONOTONIC.
    mkdir -p "$work/samply-dump"
    (cd "$work" && samply record -s -o samply-record.json -- "$jdk/bin/java" -XX:CompileCommand=quiet \
        '-XX:CompileCommand=dontinline,Names*::*' \
        "-agentpath:$agent=jitdump=$work/samply-dump,jitdump_clock=monotonic" \
        -cp "$work/classes" Names 4 >samply-record.log 2>&1) \
        || fail "$name: samply record: $(tail -3 "$work/samply-record.log")"
    python3 "$here/check_sessions.py" --label "$name" --work "$work" --pid "$java_pid" || status=1
done
echo "sessions e2e: artifacts in $out"
exit "$status"
