#!/usr/bin/env bash
# Checks the systemd units in packaging/systemd/ without systemd running (offline):
# - `systemd-analyze security --offline=true`: each unit's exposure must not exceed
#   MAX_EXPOSURE (tenths, as --threshold takes it: 13 is the 1.3 the hardened units reach, see
#   docs/serve.md); a directive dropped or weakened raises it and fails here;
# - `systemd-analyze verify`: every directive parses (verify only warns on a bad value, so any
#   output fails), in a scratch root holding the machine's own units (sysinit.target and the
#   others the units' default dependencies name) and a stand-in /usr/bin/perfclock, since the
#   units' ExecStart names the installed binary. A unit with a bad value must draw a warning
#   there, or the verify step proves nothing and fails.
# Installs nothing: needs systemd-analyze (Debian package systemd, .ci/provision). Exits
# non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_EXPOSURE=13

command -v systemd-analyze >/dev/null \
    || { echo "check-units: systemd-analyze not found (Debian package systemd)" >&2; exit 1; }
units=(packaging/systemd/*.service)
[ -e "${units[0]}" ] || { echo "check-units: no unit in packaging/systemd/" >&2; exit 1; }
echo "check-units: $(systemd-analyze --version | head -n 1)"

failed=0
for unit in "${units[@]}"; do
    status=0
    report=$(systemd-analyze security --offline=true --threshold="$MAX_EXPOSURE" --no-pager \
        "$unit" 2>&1) || status=$?
    overall=$(grep -F 'Overall exposure level' <<<"$report" || true)
    if [ -z "$overall" ]; then
        printf '%s\n' "$report" >&2
        echo "check-units: FAILED $unit: systemd-analyze security printed no exposure level" >&2
        failed=1
    elif [ "$status" -ne 0 ]; then
        grep -F '✗' <<<"$report" >&2 || true
        echo "check-units: FAILED $unit: ${overall#→ }, above $MAX_EXPOSURE tenths" >&2
        failed=1
    else
        echo "check-units: $unit: ${overall#→ } (at most $MAX_EXPOSURE tenths allowed)"
    fi
done

root=$(mktemp -d "${TMPDIR:-/tmp}/perfclock-units.XXXXXX")
trap 'rm -rf "$root"' EXIT
system_units=/usr/lib/systemd/system
[ -d "$system_units" ] || system_units=/lib/systemd/system
mkdir -p "$root/usr/lib/systemd" "$root/usr/bin" "$root/etc/systemd/system"
cp -a "$system_units" "$root/usr/lib/systemd/"
printf '#!/bin/sh\nexit 0\n' >"$root/usr/bin/perfclock"
chmod 755 "$root/usr/bin/perfclock"
cp "${units[@]}" "$root/etc/systemd/system/"

verify() {
    systemd-analyze verify --root="$root" --man=no --no-pager "$1" 2>&1
}

for unit in "${units[@]}"; do
    name=$(basename "$unit")
    if output=$(verify "$name") && [ -z "$output" ]; then
        echo "check-units: $unit: systemd-analyze verify: no warning"
    else
        printf '%s\n' "$output" >&2
        echo "check-units: FAILED $unit: systemd-analyze verify" >&2
        failed=1
    fi
done

# The control: a bad value in a copy of the first unit must be reported.
sed 's/^ProtectSystem=.*/ProtectSystem=not-a-value/' "${units[0]}" \
    >"$root/etc/systemd/system/perfclock-control.service"
control=$(verify perfclock-control.service || true)
if ! grep -q '^ProtectSystem=not-a-value' "$root/etc/systemd/system/perfclock-control.service" \
    || ! grep -q 'not-a-value' <<<"$control"; then
    echo "check-units: FAILED: systemd-analyze verify did not report a bad ProtectSystem= value" >&2
    failed=1
fi

[ "$failed" -eq 0 ] || exit 1
echo "check-units: ok"
