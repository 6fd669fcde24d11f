#!/usr/bin/env bash
# A container's processes get the machine's shared clock when the server's directory is
# bind-mounted read-only at /run/perfclock inside: a new mount namespace (`unshare -m`) stands
# for the container. Inside it, with no PERFCLOCK_SHARED_PAGE and no XDG_RUNTIME_DIR (the
# defaults a containerised process has), the doctor must read the shared page and find its
# kernel stamps within the bound; the page must not be writable there; and, as a control, the
# same namespace without the bind mount must calibrate on its own. On a KVM guest read through
# paravirt mode, `serve --once` first publishes the paravirt offset in the same directory, and
# the container must find it there, read-only, and run in paravirt mode. The shared page's part
# runs with PERFCLOCK_PARAVIRT=off (a KVM guest would otherwise pick paravirt mode first).
# Needs root (mount namespaces, mounts). Kernel mode: nothing is served; says so and exits 0.
# Exits non-zero on any failure.
#
# Environment: CARGO_TARGET_DIR (default target/).
set -euo pipefail
cd "$(dirname "$0")/../../.."
repo=$(pwd)

if [ "$(id -u)" != 0 ]; then
    echo "e2e-serve-container: needs root for unshare -m and mount" >&2
    exit 1
fi
command -v unshare >/dev/null || { echo "e2e-serve-container: unshare not found (util-linux)" >&2; exit 1; }

cargo build --release -p perfclock-cli
target_dir=${CARGO_TARGET_DIR:-$repo/target}
perfclock=$(realpath "$target_dir/release/perfclock")

work=$(mktemp -d)
server=
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -m 0755 "$work/host-run-perfclock"

paravirt=
if "$perfclock" serve --once --path "$work/host-run-perfclock/clock" 2>"$work/once.log"; then
    cat "$work/once.log"
    paravirt=yes
else
    cat "$work/once.log"
    echo "e2e-serve-container: no paravirt offset published here (not a KVM guest read through paravirt mode): its part is skipped" >&2
fi

PERFCLOCK_PARAVIRT=off "$perfclock" serve --path "$work/host-run-perfclock/clock" 2>"$work/serve.log" &
server=$!
for _ in $(seq 300); do
    [ -e "$work/host-run-perfclock/clock" ] && break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
done
if ! [ -e "$work/host-run-perfclock/clock" ]; then
    cat "$work/serve.log"
    if grep -q "kernel mode" "$work/serve.log"; then
        echo "SKIPPED container check: kernel mode, nothing to serve" >&2
        exit 0
    fi
    echo "e2e-serve-container: the server published no page" >&2
    exit 1
fi

# The "container": private mounts, a fresh /run, the server's directory read-only at
# /run/perfclock. $1: bind the directory or not.
in_container() {
    unshare -m --propagation private env -u PERFCLOCK_SHARED_PAGE -u XDG_RUNTIME_DIR \
        -u PERFCLOCK_PUBLISHED_OFFSET PERFCLOCK_PARAVIRT="$paravirt_setting" \
        sh -c '
            set -e
            mount -t tmpfs tmpfs /run
            mkdir /run/perfclock
            if [ "$1" = bind ]; then
                mount --bind -o ro "$2" /run/perfclock
                if touch /run/perfclock/clock 2>/dev/null; then
                    echo "PAGE WRITABLE INSIDE"
                fi
                if [ -e /run/perfclock/pvclock-offset ]; then
                    echo "OFFSET PUBLISHED INSIDE"
                fi
            fi
            "$3" doctor 2000
        ' container "$1" "$work/host-run-perfclock" "$perfclock"
}

paravirt_setting=off
in_container bind >"$work/inside.txt"
cat "$work/inside.txt"
grep -q "^shared page /run/perfclock/clock: valid, server pid $server," "$work/inside.txt"
grep -q "^mode: shared" "$work/inside.txt"
grep -q "^result: every kernel stamp lies within the clock's bound" "$work/inside.txt"
if grep -q "PAGE WRITABLE INSIDE" "$work/inside.txt"; then
    echo "e2e-serve-container: the read-only bind mount let the container write the page" >&2
    exit 1
fi

in_container none >"$work/control.txt"
grep -q "^shared page /run/perfclock/clock: none" "$work/control.txt"
grep -q "^mode: calibrated" "$work/control.txt"
if [ -n "$paravirt" ]; then
    paravirt_setting=
    in_container bind >"$work/paravirt.txt"
    cat "$work/paravirt.txt"
    grep -q "^OFFSET PUBLISHED INSIDE" "$work/paravirt.txt"
    grep -q "^mode: paravirt" "$work/paravirt.txt"
    grep -q "^offset C: .*, from a root-published offset page" "$work/paravirt.txt"
    grep -q "^result: every kernel stamp lies within the clock's bound" "$work/paravirt.txt"
fi
echo "e2e-serve-container: a container with the directory bind-mounted read-only reads the shared clock (server pid $server)${paravirt:+ and the published paravirt offset}; without it, it calibrates on its own"
