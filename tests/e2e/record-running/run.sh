#!/usr/bin/env bash
# End-to-end test of `perfclock record -p` and `-a` against running JVMs, with the real perf:
#
#   1. a JVM (tests/e2e/jvm-attribution/Workload.java: three threads, each hot in one nested
#      class) runs without an agent; `perfclock record -p PID --duration 5` must name the hot
#      classes in `perf script` and in `samply import`, and its dump must end with the agent's
#      close record and stop growing once the recording ended (the session is stopped);
#   2. a second `record -p` of the same JVM gets a dump of its own, named again, while the first
#      dump stays as it was;
#   3. `perfclock record -a --duration 12` with that JVM running and a second JVM started
#      mid-recording: both JVMs get a dump, and both JVMs' samples are named.
#
# Usage: tests/e2e/record-running/run.sh     Needs root (perf -p/-a, attach), perf, a JDK, python3.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target="$root/$target" ;; esac
fail() { echo "RECORD-RUNNING E2E FAIL: $*" >&2; exit 1; }
say() { echo "record-running e2e: $*" >&2; }
[ "$(id -u)" = 0 ] || fail "run as root (perf record -p/-a, attach)"
for tool in perf java javac python3 samply nm; do
    command -v "$tool" >/dev/null || fail "missing '$tool'"
done

(cd "$root" && cargo build --release -q -p perfclock-cli -p perfclock-jvmti)
perfclock=$target/release/perfclock
work=$(mktemp -d /var/tmp/perfclock-e2e-record.XXXXXX)
pids=()
cleanup() {
    touch "$work/stop1" "$work/stop2"
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
javac -d "$work" "$root/tests/e2e/jvm-attribution/Workload.java"

start_jvm() { # $1: stop file, $2: log; prints the pid once the code is hot
    java -cp "$work" Workload --until "$1" >"$2" 2>&1 &
    local pid=$! i
    for i in $(seq 300); do
        grep -q ready "$2" && { echo "$pid"; return; }
        sleep 0.1
    done
    fail "the JVM did not get ready: $(cat "$2")"
}

# Samples per pid in OUT whose symbol is one of the workload's hot classes.
named_by_pid() { # $1: OUT
    perf script -i "$1" -F pid,ip,sym --hide-call-graph 2>/dev/null | python3 -c '
import collections, sys
named = collections.Counter()
for line in sys.stdin:
    if "Workload$Phase" in line:
        named[line.split()[0]] += 1
for pid, n in sorted(named.items()):
    print(pid, n)'
}

dump_of() { # $1: OUT, $2: pid -> the JVM's jitdump in OUT's dump directory
    compgen -G "$1.jit-*/pid-$2/jit-$2.dump" | head -n 1
}

size() { stat -c %s "$1"; }

# Samples whose leaf frame samply import puts in a jitted-*.so holding one of the hot classes'
# methods (samply symbolizes in its server; `nm` reads the symbol it would show).
samply_named() { # $1: OUT
    (cd "$(dirname "$1")" && HOME=$work samply import -s -n -o "$1.profile.json" "$1" >/dev/null 2>&1) ||
        fail "samply import $1 failed"
    python3 - "$1.profile.json" <<'PY'
import json, subprocess, sys
p = json.load(open(sys.argv[1]))
libs, named, hot = p["libs"], 0, {}
for t in p["threads"]:
    st, ft, fn, rt = t["stackTable"], t["frameTable"], t["funcTable"], t["resourceTable"]
    for s in t["samples"]["stack"]:
        if s is None:
            continue
        r = fn["resource"][ft["func"][st["frame"][s]]]
        if r is None or r < 0 or rt["lib"][r] is None:
            continue
        path = libs[rt["lib"][r]]["path"]
        if "/jitted-" not in path:
            continue
        if path not in hot:
            symbols = subprocess.run(["nm", path], capture_output=True, text=True).stdout
            hot[path] = "Workload$Phase" in symbols
        named += hot[path]
print(named)
PY
}

# The id of a jitdump's last record (3: JIT_CODE_CLOSE, which the agent writes when its session
# ends: the recording's `stop` request reached it).
last_record() {
    python3 - "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
offset = struct.unpack_from("<I", data, 8)[0]   # header: magic, version, total_size
last = None
while offset + 16 <= len(data):
    rid, size = struct.unpack_from("<II", data, offset)
    if size < 16:
        break
    last = rid
    offset += size
print(last)
PY
}

jvm1=$(start_jvm "$work/stop1" "$work/jvm1.log")
pids+=("$jvm1")
say "JVM 1 is $jvm1"

for n in 1 2; do
    out=$work/out$n.data
    "$perfclock" record -p "$jvm1" --duration 5 -o "$out" 2>"$work/record$n.log" ||
        fail "record -p #$n failed: $(cat "$work/record$n.log")"
    dump=$(dump_of "$out" "$jvm1")
    [ -n "$dump" ] || fail "record -p #$n: no dump for $jvm1 under $out.jit-*: $(cat "$work/record$n.log")"
    before=$(size "$dump")
    sleep 3
    after=$(size "$dump")
    [ "$before" = "$after" ] || fail "record -p #$n: the dump grew from $before to $after bytes after the recording"
    [ "$(last_record "$dump")" = 3 ] || fail "record -p #$n: the dump does not end with the session's close record (last: $(last_record "$dump"))"
    named=$(named_by_pid "$out" | awk -v p="$jvm1" '$1 == p { print $2 }')
    [ "${named:-0}" -ge 100 ] || fail "record -p #$n: ${named:-0} samples of JVM $jvm1 named after its hot classes"
    in_samply=$(samply_named "$out")
    [ "$in_samply" -ge 100 ] || fail "record -p #$n: samply import names $in_samply samples after the hot classes"
    say "record -p #$n: $named samples named in perf script, $in_samply in samply import; dump $dump stays at $after bytes"
    [ "$n" = 1 ] && first_size=$after
done
first=$(dump_of "$work/out1.data" "$jvm1")
[ "$first" != "$(dump_of "$work/out2.data" "$jvm1")" ] || fail "the second recording reused the first dump"
[ "$(size "$first")" = "$first_size" ] || fail "the first dump changed during the second recording"

out=$work/out3.data
"$perfclock" record -a --duration 12 -o "$out" 2>"$work/record3.log" &
recorder=$!
sleep 4
jvm2=$(start_jvm "$work/stop2" "$work/jvm2.log")
pids+=("$jvm2")
say "JVM 2 ($jvm2) started mid-recording"
wait "$recorder" || fail "record -a failed: $(cat "$work/record3.log")"
for jvm in "$jvm1" "$jvm2"; do
    [ -n "$(dump_of "$out" "$jvm")" ] || fail "record -a: no dump for JVM $jvm: $(cat "$work/record3.log")"
    named=$(named_by_pid "$out" | awk -v p="$jvm" '$1 == p { print $2 }')
    [ "${named:-0}" -ge 100 ] || fail "record -a: ${named:-0} samples of JVM $jvm named after its hot classes"
    say "record -a: JVM $jvm: $named samples named"
done
echo "RECORD-RUNNING E2E PASS"
