#!/usr/bin/env bash
# Builds the perfclock JVMTI agent: libperfclock_ffi.a (cargo build --release -p perfclock-ffi),
# then libperfclock_agent.so from perfclock_agent.c against the JDK's jvmti.h, with the Rust
# library linked in statically (nothing to install next to the agent).
# The LAST line of output is the agent's absolute path; everything else goes to stderr.
#
# Needs: cargo, cc, a JDK with include/jvmti.h (Debian: openjdk-17-jdk-headless).
# Environment: CARGO_TARGET_DIR (default <repo>/target; the agent goes to its release/ directory),
# JAVA_HOME (default: the JDK of `javac` on PATH).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
target=$(cd "$root" && mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)

fail() {
    echo "build.sh: $*" >&2
    exit 1
}

command -v cc >/dev/null || fail "no C compiler 'cc' (Debian: apt-get install -y gcc libc6-dev)"
command -v cargo >/dev/null || fail "no cargo on PATH"
if [ -n "${JAVA_HOME:-}" ]; then
    java_home=$JAVA_HOME
else
    command -v javac >/dev/null || fail "no javac on PATH: set JAVA_HOME to a JDK (Debian: openjdk-17-jdk-headless)"
    java_home=$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")
fi
[ -f "$java_home/include/jvmti.h" ] || fail "no $java_home/include/jvmti.h: set JAVA_HOME to a JDK, not a JRE"

echo "build.sh: cargo build --release -p perfclock-ffi (target $target)" >&2
(cd "$root" && CARGO_TARGET_DIR=$target cargo build --release -p perfclock-ffi >&2)
lib="$target/release/libperfclock_ffi.a"
[ -f "$lib" ] || fail "cargo did not produce $lib"

agent="$target/release/libperfclock_agent.so"
echo "build.sh: cc perfclock_agent.c -> $agent" >&2
# -Wl,--exclude-libs,ALL keeps the archive's Rust symbols out of the agent's exports; the -l list
# is what `cargo rustc --crate-type staticlib -- --print native-static-libs` names for Linux.
cc -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC \
    -I "$java_home/include" -I "$java_home/include/linux" -I "$root/crates/perfclock-ffi/include" \
    "$here/perfclock_agent.c" "$lib" -Wl,--exclude-libs,ALL -Wl,--no-undefined \
    -lpthread -ldl -lm -lrt -lgcc_s -lc -o "$agent.tmp" >&2
mv -f "$agent.tmp" "$agent"
echo "$agent"
