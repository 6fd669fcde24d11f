#!/usr/bin/env bash
# The agent's own CPU on a JIT-heavy run: javac compiling Names.java under -Xcomp, which makes
# HotSpot compile every method it runs (about 200,000 loads, nine in ten of them inlined
# ranges, in some 25 s on 2 vCPUs), recorded with `perf record -e cpu-clock -F 999`. Prints the
# share of samples in libperfclock_agent.so (the agent's own code, the jitdump writer linked
# into it included) and in the JVM's Service thread, which posts CompiledMethodLoad and so runs
# all of the agent's work (its JVMTI calls, writes and allocations; near 0% without an agent).
#
# Usage: overhead.sh [JAVA_HOME] (default: the java on PATH). Needs perf, a JDK, cargo; root or
# perf_event_paranoid <= 1. A measurement, not a test: it fails only if a step fails.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
java=${1:+$1/bin/java}
java=${java:-java}
work=$(mktemp -d /tmp/perfclock-overhead.XXXXXX)
(cd "$root" && cargo build --release -p perfclock-jvmti -p perfclock-cli)
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target="$root/$target" ;; esac
agent=$("$target/release/perfclock" agent-path)
mkdir -p "$work/dump" "$work/out"
perf record -q -e cpu-clock -F 999 -o "$work/perf.data" -- "$java" -Xcomp \
    "-agentpath:$agent=jitdump=$work/dump" -m jdk.compiler/com.sun.tools.javac.Main \
    -d "$work/out" "$here/Names.java"
loads=$(python3 - "$work"/dump/jit-*.dump <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
pos, loads = struct.unpack_from("<I", data, 8)[0], 0
while pos + 16 <= len(data):
    rec_id, size = struct.unpack_from("<II", data, pos)
    loads += rec_id == 0
    pos += size
print(loads)
PY
)
agent_share=$(perf report -i "$work/perf.data" --stdio --sort dso 2>/dev/null \
    | awk '/libperfclock_agent.so/ {print $1}')
service_share=$(perf report -i "$work/perf.data" --stdio --sort comm 2>/dev/null \
    | awk '/Service Thread/ {print $1}')
echo "overhead: $loads loads; samples in libperfclock_agent.so: ${agent_share:-0%}; in the Service thread: ${service_share:-0%} ($(date -u +%FT%TZ), $("$java" -version 2>&1 | head -1))"
rm -rf "$work"
