#!/usr/bin/env bash
# End-to-end test of the agent's source lines, inlined methods, GC markers and attach, against
# the real perf tool, on every JDK under /usr/lib/jvm (or the JAVA_HOMEs given as arguments).
#
# For each JDK, three recordings of Lines.java (`perf record -g -e cpu-clock`, perf's default
# clock), each followed by `perfclock inject-time-conv` and `perf inject --jit`:
#   full     -agentpath with the defaults (lines=1 inline=1) and markers=DIR
#   control  -agentpath with lines=0,inline=0: no source line and no inlined name may appear
#   attach   the JVM started without an agent, `perf record -p`, then
#            `jcmd PID JVMTI.agent_load AGENT '"OPTIONS"'` once the code is hot, then a second
#            attach (a new session in the same directory, which continues the dump)
# Every run names code in the JVM form (names=jvm), which check_lines.py reads.
# check_lines.py then reads `perf script -F comm,pid,tid,time,ip,sym,srcline` of each.
#
# Needs: perf, a JDK (java, javac, jcmd), python3, cargo; root or perf_event_paranoid <= 1.
# Environment: CARGO_TARGET_DIR (default <repo>/target), PERFCLOCK_E2E_DIR (work directory,
# default a fresh /tmp/perfclock-lines.*), PERFCLOCK_E2E_SECONDS (workload length, default 4).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${PERFCLOCK_E2E_DIR:-$(mktemp -d /tmp/perfclock-lines.XXXXXX)}
seconds=${PERFCLOCK_E2E_SECONDS:-4}
mkdir -p "$out"
out=$(cd "$out" && pwd)

fail() {
    echo "LINES E2E FAIL: $*" >&2
    exit 1
}

for tool in perf python3 cargo; do
    command -v "$tool" >/dev/null || fail "missing '$tool' (Debian: apt-get install -y linux-perf python3)"
done

if [ $# -gt 0 ]; then
    jdks=("$@")
else
    # shellcheck source=scripts/lib/jdks.sh
    . "$root/scripts/lib/jdks.sh"
    mapfile -t jdks < <(perfclock_jdks)
fi
[ "${#jdks[@]}" -gt 0 ] || fail "no JDK (bin/java and bin/javac) under /usr/lib/jvm (Debian: apt-get install -y openjdk-17-jdk-headless)"

echo "lines e2e: cargo build --release -p perfclock-jvmti -p perfclock-cli"
(cd "$root" && cargo build --release -p perfclock-jvmti -p perfclock-cli)
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target="$root/$target" ;; esac
perfclock="$target/release/perfclock"
[ -x "$perfclock" ] || fail "$perfclock was not built"
agent=$("$perfclock" agent-path) || fail "perfclock agent-path found no agent"
echo "lines e2e: agent $agent; $(perf --version)"

# perf.data -> TIME_CONV -> perf inject --jit -> perf script, in $1's directory.
inject_and_script() {
    local dir=$1
    "$perfclock" inject-time-conv "$dir/perf.data" -o "$dir/conv.data" 2>"$dir/conv.err" \
        || fail "perfclock inject-time-conv in $dir: $(tail -3 "$dir/conv.err")"
    HOME="$dir/home" perf inject --jit -i "$dir/conv.data" -o "$dir/jitted.data" 2>"$dir/inject.err" \
        || fail "perf inject --jit in $dir: $(tail -3 "$dir/inject.err")"
    HOME="$dir/home" perf script -i "$dir/jitted.data" --ns -G -F comm,pid,tid,time,ip,sym,srcline \
        >"$dir/jitted.script" 2>"$dir/script.err" || fail "perf script in $dir: $(tail -3 "$dir/script.err")"
}

status=0
for jdk in "${jdks[@]}"; do
    name=$(basename "$jdk")
    work="$out/$name"
    rm -rf "$work"
    mkdir -p "$work/classes"
    "$jdk/bin/javac" -d "$work/classes" "$here/Lines.java"
    version=$("$jdk/bin/java" -version 2>&1 | head -1)
    echo "lines e2e: === $name ($version)"

    for run in full control; do
        dir="$work/$run"
        mkdir -p "$dir/home" "$dir/dump" "$dir/markers"
        options="jitdump=$dir/dump,markers=$dir/markers,names=jvm"
        [ "$run" = control ] && options="jitdump=$dir/dump,lines=0,inline=0,names=jvm"
        echo "lines e2e: $name $run: perf record -g -- java -agentpath:...=$options Lines $seconds"
        (cd "$dir" && perf record -q -g -e cpu-clock -F 2000 -o "$dir/perf.data" -- \
            "$jdk/bin/java" "-agentpath:$agent=$options" -cp "$work/classes" Lines "$seconds" \
            >"$dir/java.out" 2>"$dir/java.err") || fail "$name $run: perf record or java failed: $(tail -3 "$dir/java.err")"
        inject_and_script "$dir"
    done

    dir="$work/attach"
    mkdir -p "$dir/home" "$dir/dump"
    "$jdk/bin/java" -cp "$work/classes" Lines $((seconds + 3)) >"$dir/java.out" 2>"$dir/java.err" &
    java_pid=$!
    # perf record -p started while the JVM is still creating its first threads can miss them (a
    # thread cloned while perf lists the process's tasks is not traced, nor are its children):
    # attach perf to a running JVM, as one profiles a running JVM.
    sleep 1
    perf record -q -g -e cpu-clock -F 2000 -p "$java_pid" -o "$dir/perf.data" 2>"$dir/record.err" &
    perf_pid=$!
    sleep 1.5 # the code is hot, compiled without the agent
    echo "lines e2e: $name attach: jcmd $java_pid JVMTI.agent_load (twice)"
    # jcmd reads `key=value` as an option of its own: the agent's options go in double quotes.
    "$jdk/bin/jcmd" "$java_pid" JVMTI.agent_load "$agent" "\"jitdump=$dir/dump,names=jvm\"" >"$dir/jcmd1.out" 2>&1 \
        || fail "$name attach: jcmd failed: $(cat "$dir/jcmd1.out")"
    "$jdk/bin/jcmd" "$java_pid" JVMTI.agent_load "$agent" "\"jitdump=$dir/dump,names=jvm\"" >"$dir/jcmd2.out" 2>&1 \
        || fail "$name second attach: jcmd failed: $(cat "$dir/jcmd2.out")"
    wait "$java_pid" || fail "$name attach: the JVM failed: $(tail -3 "$dir/java.err")"
    wait "$perf_pid" || fail "$name attach: perf record -p failed: $(tail -3 "$dir/record.err")"
    grep -q "perfclock_agent: attached: " "$dir/java.err" \
        || fail "$name attach: the JVM's stderr does not say the agent attached: $(head -3 "$dir/java.err")"
    grep -q "perfclock_agent: finishing the previous session" "$dir/java.err" \
        || fail "$name attach: the second attach did not start a new session: $(head -3 "$dir/java.err")"
    inject_and_script "$dir"

    python3 "$here/check_lines.py" --source "$here/Lines.java" --label "$name" \
        --full "$work/full" --control "$work/control" --attach "$work/attach" || status=1
done
echo "lines e2e: artifacts in $out"
exit "$status"
