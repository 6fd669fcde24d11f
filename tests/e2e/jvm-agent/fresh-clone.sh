#!/usr/bin/env bash
# The JVMTI agent from a fresh clone of this checkout, built by cargo with no JDK reachable (an
# empty tmpfs over /usr/lib/jvm in a private mount namespace, so no jni.h or jvmti.h exists for
# the build), in a target directory of the clone's own: it exports exactly Agent_OnAttach,
# Agent_OnLoad and Agent_OnUnload, a JVM loads it, and run.sh beside this file (lines, inlining,
# GC markers, attach on every JDK under /usr/lib/jvm) passes with the clone's build.
# Fails first if any file of the repository includes a JDK header.
# Usage: tests/e2e/jvm-agent/fresh-clone.sh     Needs root (unshare -m, mount), git, java, nm.
set -euo pipefail
cd "$(dirname "$0")/../../.."

if git grep -nE '#[[:space:]]*include[[:space:]]*[<"](jvmti|jni|jvmticmlr)\.h' -- . ':!target'; then
    echo "a file includes a JDK header: the agent must build without a JDK" >&2
    exit 1
fi
fresh=$(mktemp -d /tmp/perfclock-fresh.XXXXXX)
trap 'rm -rf "$fresh"' EXIT
git clone -q . "$fresh/repo"
unshare -m bash -c 'set -euo pipefail
    mount -t tmpfs perfclock-no-jdk /usr/lib/jvm
    if compgen -G "/usr/lib/jvm/*" >/dev/null; then echo "/usr/lib/jvm is not hidden" >&2; exit 1; fi
    cd "$1" && CARGO_TARGET_DIR="$1/target" cargo build --release --workspace' _ "$fresh/repo"
agent=$("$fresh/repo/target/release/perfclock" agent-path)
exports=$(nm -D --defined-only "$agent" | awk '$2 == "T" { print $3 }' | sort | tr '\n' ' ')
if [ "$exports" != "Agent_OnAttach Agent_OnLoad Agent_OnUnload " ]; then
    echo "the agent exports '$exports', expected Agent_OnAttach Agent_OnLoad Agent_OnUnload" >&2
    exit 1
fi
java "-agentpath:$agent=jitdump=off" -version
(cd "$fresh/repo" && CARGO_TARGET_DIR="$fresh/repo/target" PERFCLOCK_E2E_DIR="$fresh/lines-e2e" \
    bash tests/e2e/jvm-agent/run.sh)
