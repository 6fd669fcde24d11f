#!/usr/bin/env bash
# End-to-end test of the perfclock JVMTI agent against the real perf tool.
#
# Builds libperfclock_ffi.a (release), the agent (C, against the JDK's jvmti.h, static link) and
# a Java workload; runs the workload under the agent while `perf record -e cpu-clock -g` samples
# it with perf's default clock; then check_e2e.py checks the samples against the agent's stamps
# (GC-thread samples inside GC windows, JIT samples after their code's load) and runs the same
# checks with the agent's CLOCK_MONOTONIC stamps as a negative control, which must fail.
#
# Needs: perf (Debian: linux-perf), a JDK with include/jvmti.h (openjdk-17-jdk-headless), cc,
# python3, cargo; root or perf_event_paranoid <= 1. Exits non-zero on any failure.
# Environment: CARGO_TARGET_DIR (default <repo>/target), PERFCLOCK_E2E_DIR (work directory,
# default a fresh /tmp/perfclock-e2e.*), PERFCLOCK_E2E_SECONDS (workload length, default 6),
# JAVA_HOME (default: the JDK of `javac` on PATH).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
out=${PERFCLOCK_E2E_DIR:-$(mktemp -d /tmp/perfclock-e2e.XXXXXX)}
seconds=${PERFCLOCK_E2E_SECONDS:-6}
mkdir -p "$out"

fail() {
    echo "E2E FAIL: $*" >&2
    exit 1
}

for tool in perf java javac cc python3 cargo; do
    command -v "$tool" >/dev/null || fail "missing '$tool' (Debian: apt-get install -y linux-perf openjdk-17-jdk-headless gcc python3)"
done
java_home=${JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")}
[ -f "$java_home/include/jvmti.h" ] || fail "no $java_home/include/jvmti.h (install openjdk-17-jdk-headless or set JAVA_HOME)"
echo "e2e: work dir $out; $(perf --version); JDK $java_home"

echo "e2e: cargo build --release -p perfclock-ffi"
(cd "$root" && cargo build --release -p perfclock-ffi)
lib="$target/release/libperfclock_ffi.a"
[ -f "$lib" ] || fail "$lib was not built"

echo "e2e: building the agent"
cc -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC \
    -I "$java_home/include" -I "$java_home/include/linux" -I "$root/crates/perfclock-ffi/include" \
    "$here/perfclock_agent.c" "$lib" -Wl,--exclude-libs,ALL -Wl,--no-undefined \
    -lpthread -ldl -lm -lrt -lgcc_s -lc -o "$out/libperfclock_agent.so"
javac -d "$out" "$here/Workload.java"

echo "e2e: perf record -e cpu-clock -g -F 4000 (default perf clock) -- java -agentpath:... Workload $seconds"
perf record -q -g -e cpu-clock -F 4000 -o "$out/perf.data" -- \
    java -XX:+UseParallelGC -XX:ParallelGCThreads=2 -Xms128m -Xmx128m -Xmn32m \
    "-agentpath:$out/libperfclock_agent.so=log=$out/agent.log" -cp "$out" Workload "$seconds" \
    || fail "perf record or the JVM failed"

pid=$(sed -n 's/^# perfclock-jvmti v1 pid=\([0-9]*\) .*/\1/p' "$out/agent.log")
[ -n "$pid" ] || fail "no agent log header in $out/agent.log"
map="/tmp/perf-$pid.map"
[ -s "$map" ] || fail "the agent wrote no code map at $map"
perf script -i "$out/perf.data" --ns -F comm,pid,tid,time,ip,sym >"$out/samples.txt" 2>"$out/perf-script.err" \
    || fail "perf script failed: $(tail -3 "$out/perf-script.err")"
resolved=$(grep -c 'Workload::' "$out/samples.txt" || true)
echo "e2e: $(wc -l <"$map") entries in $map; frames perf resolved to Workload:: methods through it: $resolved"
[ "$resolved" -gt 0 ] || fail "perf resolved no frame through the agent's code map"

status=0
python3 "$here/check_e2e.py" "$out/agent.log" "$out/samples.txt" "$pid" || status=$?
rm -f "$map"
echo "e2e: artifacts in $out (perf.data, samples.txt, agent.log)"
exit "$status"
