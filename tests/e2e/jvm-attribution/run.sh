#!/usr/bin/env bash
# End-to-end test of the perfclock JVMTI agent's jitdump against the real perf tool.
#
# 1. cargo builds the agent (crate perfclock-jvmti, libperfclock_agent.so, no JDK headers) and the
#    perfclock command, which names the agent (`perfclock agent-path`). The JVM must refuse to
#    start with an unknown or valueless agent option or a missing jitdump DIR.
# 2. `perf record -g -e cpu-clock -F 4000` (perf's default clock, no -k) of Workload.java run as
#    a jar under the agent with jitdump=DUMP: three threads run three classes whose compiled code
#    HotSpot throws away and recompiles several times a second (class redefinition), in a small
#    code cache, so addresses are reused by different methods.
# 3. `perfclock inject-time-conv` adds the PERF_RECORD_TIME_CONV the agent's .timeconv record
#    describes; `perf inject --jit` then writes jitted-<pid>-<n>.so next to the dump and their
#    mmaps into jitted.data; `perf script` on it names each sample's leaf.
# 4. check_attribution.py: >= 95% of the phase threads' samples in JIT-compiled code are named with that
#    thread's class. Negative controls that must fail: `perf inject --jit` without TIME_CONV must
#    refuse, and a TIME_CONV whose time_zero is 200 ms late must score measurably worse.
#
# Needs: perf (Debian: linux-perf), a JDK with javac and jar (openjdk-17-jdk-headless), python3,
# cargo; root or perf_event_paranoid <= 1. Exits non-zero on any failure.
# Environment: CARGO_TARGET_DIR (default <repo>/target), PERFCLOCK_E2E_DIR (work directory,
# default a fresh /tmp/perfclock-e2e.*), PERFCLOCK_E2E_SECONDS (workload length, default 6).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${PERFCLOCK_E2E_DIR:-$(mktemp -d /tmp/perfclock-e2e.XXXXXX)}
seconds=${PERFCLOCK_E2E_SECONDS:-6}
# One phase class is redefined every PERIOD_MS, so each class's code lives about 3 * 100 ms:
# longer than HotSpot's load-posting delay (ms), shorter than the 200 ms control shift.
period_ms=100
mkdir -p "$out"
out=$(cd "$out" && pwd)

fail() {
    echo "E2E FAIL: $*" >&2
    exit 1
}

# shellcheck source=scripts/lib/skip.sh
. "$root/scripts/lib/skip.sh"
# Debian: apt-get install -y linux-perf openjdk-17-jdk-headless python3.
perfclock_need_tools "jvm-attribution run.sh" perf java javac jar python3 cargo
echo "e2e: work dir $out; $(perf --version)"

echo "e2e: cargo build --release -p perfclock-jvmti -p perfclock-cli"
(cd "$root" && cargo build --release -p perfclock-jvmti -p perfclock-cli)
perfclock="${CARGO_TARGET_DIR:-$root/target}/release/perfclock"
case $perfclock in /*) ;; *) perfclock="$root/$perfclock" ;; esac
[ -x "$perfclock" ] || fail "$perfclock was not built"
agent=$("$perfclock" agent-path) || fail "perfclock agent-path found no agent"
echo "e2e: agent $agent"

# The agent refuses what it cannot honour, before the JVM runs anything.
agent_refuses() {
    local option=$1 expect=$2
    if java "-agentpath:$agent=$option" -version >"$out/refusal.out" 2>&1; then
        fail "the JVM started with agent option '$option'"
    fi
    grep -q "$expect" "$out/refusal.out" || fail "agent option '$option': no '$expect' in: $(head -3 "$out/refusal.out")"
}
agent_refuses bogus=1 "unknown option 'bogus'"
agent_refuses perfmap "option 'perfmap' needs a value"
agent_refuses "strict=1,jitdump=$out/missing-dir" "pass jitdump=DIR with an existing writable directory"
java "-agentpath:$agent=jitdump=$out/missing-dir" -version >"$out/lenient.out" 2>&1 \
    || fail "without strict=1 a missing jitdump directory stopped the JVM: $(head -3 "$out/lenient.out")"
grep -q "the JVM runs on without it" "$out/lenient.out" || fail "no message for the missing jitdump directory: $(head -3 "$out/lenient.out")"
echo "e2e: the agent refuses unknown options, options without a value and (strict=1) a missing jitdump directory; without strict=1 the JVM runs without a dump"

rm -rf "$out/classes" "$out/dump" "$out/dump-shifted" "$out/home" "$out/home-shifted" "$out/home-noconv"
mkdir -p "$out/classes" "$out/dump" "$out/home" "$out/home-shifted" "$out/home-noconv"
javac -d "$out/classes" "$here/Workload.java"
printf 'Main-Class: Workload\nLauncher-Agent-Class: Workload\nCan-Redefine-Classes: true\n' >"$out/manifest.txt"
jar --create --file "$out/workload.jar" --manifest "$out/manifest.txt" -C "$out/classes" .

# A small code cache without segments, swept eagerly, so freed code is reused within seconds.
jvm_flags=(-XX:ReservedCodeCacheSize=4m -XX:-SegmentedCodeCache -XX:SweeperThreshold=0.1)
echo "e2e: perf record -g -e cpu-clock -F 4000 (default perf clock) -- java ${jvm_flags[*]} -agentpath:...=jitdump=$out/dump -jar workload.jar $seconds $period_ms"
(cd "$out" && perf record -q -g -e cpu-clock -F 4000 -o "$out/perf.data" -- \
    java "${jvm_flags[@]}" "-agentpath:$agent=jitdump=$out/dump" \
    -jar "$out/workload.jar" "$seconds" "$period_ms") || fail "perf record or the JVM failed"

shopt -s nullglob
dumps=("$out"/dump/jit-*.dump)
shopt -u nullglob
[ "${#dumps[@]}" -eq 1 ] || fail "expected one jit-<pid>.dump in $out/dump, found ${#dumps[@]}"
dump=${dumps[0]}
pid=${dump##*/jit-}
pid=${pid%.dump}
[ -s "$dump.timeconv" ] || fail "the agent wrote no $dump.timeconv"
echo "e2e: java pid $pid; $(stat -c %s "$dump") bytes of jitdump"

# Negative control 1: without TIME_CONV, perf must refuse the dump's raw-counter timestamps.
set +e
HOME="$out/home-noconv" perf inject --jit -i "$out/perf.data" -o "$out/noconv.data" \
    >"$out/noconv.out" 2>"$out/noconv.err"
noconv_rc=$?
set -e

# perf script's view of each sample's leaf (thread, time, ip, symbol, object), with the HOME (build-id
# cache) its perf inject used.
script() {
    HOME="$out/$2" perf script -i "$out/$1.data" --ns -G -F comm,pid,tid,time,ip,sym,dso >"$out/$1.script" \
        2>"$out/$1.script.err" || fail "perf script -i $1.data failed: $(tail -3 "$out/$1.script.err")"
}
script perf home

# Negative control 2: the same recording with the dump's conversion 200 ms late. It runs before
# the real inject because perf inject --jit writes the jitted-*.so files next to the dump, with
# fresh build ids each time: the files must be the ones of the recording read last.
cp -r "$out/dump" "$out/dump-shifted"
python3 - "$out/dump-shifted/${dump##*/}.timeconv" <<'PY'
import os, sys
path = sys.argv[1]
lines = open(path).read().splitlines()
if not any(line.startswith("time_zero=") for line in lines):
    sys.exit(f"no time_zero in {path}")
for i, line in enumerate(lines):
    if line.startswith("time_zero="):
        # u64 arithmetic, as perf's: time_zero is often "negative" (near 2^64) and wraps.
        lines[i] = f"time_zero={(int(line.split('=', 1)[1]) + 200_000_000) % 2**64}"
    elif line.startswith("pvclock="):
        # Paravirt mode's record: inject-time-conv converts with the pvclock entry and the
        # boot's offset C (perf time = pvclock time + C), the last field: C moves too.
        *entry, offset = line.split("=", 1)[1].split(",")
        lines[i] = "pvclock=" + ",".join(entry + [str(int(offset) + 200_000_000)])
with open(path + ".tmp", "w") as f:
    f.write("\n".join(lines) + "\n")
os.rename(path + ".tmp", path)
PY
"$perfclock" inject-time-conv "$out/perf.data" --dump-dir "$out/dump-shifted" \
    -o "$out/shifted-conv.data" || fail "perfclock inject-time-conv --dump-dir (control) failed"
HOME="$out/home-shifted" perf inject --jit -i "$out/shifted-conv.data" -o "$out/shifted-jitted.data" \
    2>"$out/shifted-inject.err" || fail "perf inject --jit (control) failed: $(tail -3 "$out/shifted-inject.err")"

script shifted-jitted home-shifted

echo "e2e: perfclock inject-time-conv perf.data -o with-conv.data"
"$perfclock" inject-time-conv "$out/perf.data" -o "$out/with-conv.data" \
    || fail "perfclock inject-time-conv failed"
echo "e2e: perf inject --jit -i with-conv.data -o jitted.data"
HOME="$out/home" perf inject --jit -i "$out/with-conv.data" -o "$out/jitted.data" \
    2>"$out/inject.err" || fail "perf inject --jit failed: $(tail -3 "$out/inject.err")"

script jitted home
# For people reading the artifacts: what perf report makes of the injected recording.
HOME="$out/home" perf report -i "$out/jitted.data" --stdio --sort comm,sym --no-children >"$out/jitted.report" 2>/dev/null \
    || fail "perf report -i jitted.data failed"

status=0
python3 "$here/check_attribution.py" --pid "$pid" --dump "$dump" \
    --raw-script "$out/perf.script" --script "$out/jitted.script" \
    --shifted-script "$out/shifted-jitted.script" \
    --noconv-status "$noconv_rc" --noconv-stderr "$out/noconv.err" || status=$?
echo "e2e: artifacts in $out (perf.data, jitted.data, jitted.report, dump/, *.script)"
exit "$status"
