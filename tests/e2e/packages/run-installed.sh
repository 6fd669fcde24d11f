#!/usr/bin/env bash
# One installed perfclock, checked as a user would use it (tests/e2e/packages/run.sh runs this in a
# mount namespace where the checkout, cargo and the target directory are hidden):
#
#   run-installed.sh WORK NAME PREFIX VERSION COMMIT
#
# PREFIX holds bin/perfclock, lib/, include/ (the unpacked tarball, or /usr with the .deb laid
# over it). WORK holds HotMethods.class (java/) and jitdump_pkgconfig.c.
set -euo pipefail
work=$1 name=$2 prefix=$3 version=$4 commit=$5
perfclock=$prefix/bin/perfclock
dir=$work/run-$name
mkdir -p "$dir"
fail() { echo "PACKAGES FAIL ($name): $*" >&2; exit 1; }
say() { echo "ci-packages ($name): $*" >&2; }

# --version: the workspace version and the commit the package was built from.
got=$("$perfclock" --version)
[ "$got" = "perfclock $version (commit $commit)" ] ||
    fail "perfclock --version says '$got', expected 'perfclock $version (commit $commit)'"

# agent-path: the installed agent, found with no flag.
agent=$("$perfclock" agent-path) || fail "perfclock agent-path found no agent"
[ "$agent" = "$(readlink -f "$prefix/lib/perfclock/libperfclock_agent.so")" ] ||
    fail "perfclock agent-path says $agent"

# doctor.
"$perfclock" doctor >"$dir/doctor.txt" 2>&1 || { cat "$dir/doctor.txt" >&2; fail "perfclock doctor failed"; }
say "doctor: $(grep -m1 -i 'mode' "$dir/doctor.txt")"

# names_hot_methods PERF_DATA: perf report names both hot methods of HotMethods.java.
names_hot_methods() {
    perf report -i "$1" --stdio --no-children --sort sym 2>/dev/null >"$1.report"
    local m
    for m in spinPrimes spinHarmonic; do
        grep -Eq "HotMethods(\.|;)$m" "$1.report" || {
            head -n 30 "$1.report" >&2
            fail "perf report of $1 does not name HotMethods.$m"
        }
    done
}

# record: the agent from the installed layout, perf record, TIME_CONV, perf inject --jit.
(cd "$dir" && "$perfclock" record -o "$dir/record.data" -- java -cp "$work/java" HotMethods 3) \
    >"$dir/record.log" 2>&1 || { tail -n 30 "$dir/record.log" >&2; fail "perfclock record failed"; }
names_hot_methods "$dir/record.data"
say "record: perf report names HotMethods.spinPrimes and HotMethods.spinHarmonic"
# The control: without the agent the same program's report names neither method, so the names
# above come from the agent's jitdump.
(cd "$dir" && "$perfclock" record --no-java-agent -o "$dir/control.data" -- \
    java -cp "$work/java" HotMethods 2) >"$dir/control.log" 2>&1 ||
    { tail -n 30 "$dir/control.log" >&2; fail "perfclock record --no-java-agent failed"; }
perf report -i "$dir/control.data" --stdio --no-children --sort sym 2>/dev/null >"$dir/control.report"
[ -s "$dir/control.report" ] || fail "perf report of the control recording printed nothing"
! grep -Eq 'HotMethods(\.|;)spin' "$dir/control.report" ||
    fail "the control recording without the agent names HotMethods' methods: the check proves nothing"

# attach: a JVM started without the agent, under perf record -p; the agent loaded from the
# installed layout, then inject-time-conv and perf inject --jit name the methods again.
mkdir -p "$dir/attach-dumps"
java -cp "$work/java" HotMethods 12 >"$dir/jvm.log" 2>&1 &
jvm=$!
for _ in $(seq 100); do grep -q ready "$dir/jvm.log" && break; sleep 0.1; done
grep -q ready "$dir/jvm.log" || fail "the JVM did not start: $(cat "$dir/jvm.log")"
perf record -q -g -p "$jvm" -o "$dir/attach.data" 2>"$dir/perf-attach.log" &
perf_pid=$!
sleep 1
"$perfclock" attach "$jvm" "jitdump=$dir/attach-dumps" >"$dir/attach.log" 2>&1 ||
    { cat "$dir/attach.log" >&2; kill "$jvm" "$perf_pid" 2>/dev/null; fail "perfclock attach failed"; }
sleep 4
kill -INT "$perf_pid"
wait "$perf_pid" || true
kill "$jvm" 2>/dev/null || true
wait "$jvm" 2>/dev/null || true
"$perfclock" inject-time-conv "$dir/attach.data" -o "$dir/attach-conv.data" >"$dir/inject.log" 2>&1 ||
    { cat "$dir/inject.log" >&2; fail "perfclock inject-time-conv failed"; }
perf inject --jit -i "$dir/attach-conv.data" -o "$dir/attach-jitted.data" 2>>"$dir/inject.log" ||
    { cat "$dir/inject.log" >&2; fail "perf inject --jit failed"; }
names_hot_methods "$dir/attach-jitted.data"
say "attach: $(head -n 1 "$dir/attach.log"); perf report names both methods"

# C: built with pkg-config alone, run against the installed shared library.
if [ "$prefix" = /usr ]; then pc=(pkg-config); else pc=(env "PKG_CONFIG_PATH=$prefix/lib/pkgconfig" pkg-config); fi
# shellcheck disable=SC2046 # pkg-config's words are separate arguments
cc -o "$dir/jitdump_c" "$work/jitdump_pkgconfig.c" $("${pc[@]}" --cflags --libs perfclock) ||
    fail "cc with pkg-config --cflags --libs perfclock failed"
needed=$(readelf -d "$dir/jitdump_c" | sed -n 's/.*Shared library: \[\(libperfclock[^]]*\)\]/\1/p')
[ "$needed" = libperfclock.so.0 ] || fail "the C program needs '$needed', expected libperfclock.so.0"
mkdir -p "$dir/c-dump"
"$dir/jitdump_c" "$dir/c-dump" >"$dir/c.log" 2>&1 || { cat "$dir/c.log" >&2; fail "the C program failed"; }
dump=$(ls "$dir/c-dump"/jit-*.dump)
[ "$(head -c 4 "$dump" | od -An -tx1 | tr -d ' ')" = 4454694a ] || fail "$dump does not start with the jitdump magic"
[ -f "$dump.timeconv" ] || fail "no $dump.timeconv"
say "C (pkg-config): $(cat "$dir/c.log"); wrote $(basename "$dump") ($(stat -c %s "$dump") bytes)"
