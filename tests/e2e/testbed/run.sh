#!/usr/bin/env bash
# Real-kernel test bed.
#
# Boots Debian's current amd64 and arm64 kernels under qemu's software emulation (TCG), with
# the perfclock-testbed binary as the guest's /init, and checks what it reports on the serial
# console. Our own machines are KVM guests whose kernel withholds cap_user_time_zero; these
# kernels publish it, so this is where the kernel-exact path is really tested.
#
#   tests/e2e/testbed/run.sh                 # both architectures
#   tests/e2e/testbed/run.sh aarch64         # one
#
# Environment: PERFCLOCK_CACHE (kernel cache, default ~/.cache/perfclock-testbed),
# CARGO_TARGET_DIR, PERFCLOCK_TESTBED_TIMEOUT (seconds per guest, default 300),
# PERFCLOCK_TESTBED_ARM64_CNTFRQ (arm64 generic-timer Hz, default 24000000; empty: qemu's own),
# PERFCLOCK_TESTBED_APPEND (extra kernel command line, e.g. TESTBED_CORE_OPS=2000),
# PERFCLOCK_TESTBED_ALLOW_SKIP=1 (exit 0 even if a piece was skipped; failures still fail),
# PERFCLOCK_TESTBED_PACKAGE=DIR (scripts/package.sh's output: each guest also runs the `perfclock
# doctor` of DIR/perfclock-*-linux-ARCH.tar.gz, which must pass in kernel mode).
#
# Exit status: 0 all guests passed; 1 a check failed or a result is missing; 2 something was
# skipped (printed as `SKIPPED <what>: <why>`), never counted as passed.
set -uo pipefail

root=$(cd "$(dirname "$0")/../../.." && pwd)
cache=${PERFCLOCK_CACHE:-$HOME/.cache/perfclock-testbed}
target_dir=${CARGO_TARGET_DIR:-$root/target}
guest_timeout=${PERFCLOCK_TESTBED_TIMEOUT:-300}
# 24 MHz, a common real arm64 timer rate: 41.67 ns per tick, so time_mult/time_shift are
# inexact and the kernel's floored time_zero is really exercised. (qemu 10's default for -cpu
# max is 1 GHz, where the conversion is exactly 1 ns per tick.)
arm64_cntfrq=${PERFCLOCK_TESTBED_ARM64_CNTFRQ-24000000}
append=${PERFCLOCK_TESTBED_APPEND:-}
package_dir=${PERFCLOCK_TESTBED_PACKAGE:-}
declare -A package_append # arch -> kernel command line naming the packaged doctor
archs=("$@")
[ ${#archs[@]} -gt 0 ] || archs=(x86_64 aarch64)
work=$(mktemp -d "${TMPDIR:-/tmp}/perfclock-testbed.XXXXXX")
trap 'rm -rf "$work"' EXIT

say() { echo "testbed: $*" >&2; }
skipped=0
skip() { echo "SKIPPED $1: $2"; skipped=1; }
declare -A broken # arch -> why it cannot run

debarch() { case $1 in x86_64) echo amd64 ;; aarch64) echo arm64 ;; *) return 1 ;; esac; }
for a in "${archs[@]}"; do
    debarch "$a" >/dev/null || { echo "testbed: unknown architecture '$a' (x86_64 or aarch64)" >&2; exit 1; }
done

# --- host tools --------------------------------------------------------------------------------
apt_packages=(qemu-system-x86 qemu-system-arm gcc-aarch64-linux-gnu libc6-dev-arm64-cross cpio)
need_cmds=(qemu-system-x86_64 qemu-system-aarch64 aarch64-linux-gnu-gcc cpio dpkg-deb apt-get)
install_host_tools() {
    local c missing=0
    for c in "${need_cmds[@]}"; do command -v "$c" >/dev/null || missing=1; done
    [ $missing = 1 ] || return 0
    say "installing ${apt_packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >"$work/apt.log" 2>&1
    apt-get install -y -q --no-install-recommends "${apt_packages[@]}" >>"$work/apt.log" 2>&1 && return 0
    # These machines ship qemu-utils from bookworm-backports, which breaks bookworm's
    # qemu-system-common. Take qemu from the same place, through a private sources overlay so the
    # host's apt configuration is left as it was.
    # The backports suite is served by the same archive as the host's own base suite: take its
    # address from the host's apt configuration rather than writing one here.
    local codename mirror
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null |
        awk -v suite="$codename" '$2 == suite { print $1; exit }')
    if [ -z "$codename" ] || [ -z "$mirror" ]; then
        say "cannot tell the host's Debian archive (VERSION_CODENAME '$codename', no apt source for it)"
        tail -n 20 "$work/apt.log" >&2
        return 1
    fi
    say "plain install failed; retrying with $codename-backports from $mirror (qemu-utils comes from there)"
    local ov=$cache/apt-backports
    mkdir -p "$ov/parts" "$ov/lists/partial"
    cp /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list "$ov/parts/" 2>/dev/null
    printf '%s\n' 'Types: deb' "URIs: $mirror" "Suites: $codename-backports" \
        'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' >"$ov/parts/backports.sources"
    local o=(-oDir::Etc::SourceParts="$ov/parts" -oDir::State::Lists="$ov/lists")
    apt-get "${o[@]}" update -qq >>"$work/apt.log" 2>&1 &&
        apt-get "${o[@]}" install -y -q --no-install-recommends -t "$codename-backports" "${apt_packages[@]}" >>"$work/apt.log" 2>&1 &&
        return 0
    tail -n 20 "$work/apt.log" >&2
    return 1
}
install_host_tools || say "could not install host packages (see above)"
command -v cpio >/dev/null || { skip "all guests" "cpio is missing"; exit 2; }
for a in "${archs[@]}"; do
    q=qemu-system-$a
    command -v "$q" >/dev/null || broken[$a]="$q is missing"
done
if [[ " ${archs[*]} " == *" aarch64 "* ]]; then
    command -v aarch64-linux-gnu-gcc >/dev/null || broken[aarch64]="aarch64-linux-gnu-gcc is missing"
    if [ -z "${broken[aarch64]:-}" ] && command -v rustup >/dev/null; then
        rustup target add aarch64-unknown-linux-gnu >"$work/rustup.log" 2>&1 ||
            broken[aarch64]="rustup target add aarch64-unknown-linux-gnu failed: $(tail -n 1 "$work/rustup.log")"
    fi
fi

# --- kernels: resolve linux-image-<arch>'s current dependency, cache the vmlinuz --------------
# Private apt lists per architecture, so neither the host's lists nor its architecture set change.
fetch_kernel() { # $1 = Debian arch; prints the cached vmlinuz path
    local da=$1
    local d=$cache/apt-$da
    mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
    local o=(-oAPT::Architecture="$da" -oAPT::Architectures="$da" -oDir::State::Lists="$d/lists" -oDir::Cache="$d/cache")
    apt-get "${o[@]}" update -qq >"$work/apt-$da.log" 2>&1 || say "apt-get update ($da) failed; trying the cache"
    local pkg ver
    pkg=$(apt-cache "${o[@]}" depends "linux-image-$da" 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    ver=$(apt-cache "${o[@]}" show --no-all-versions "$pkg" 2>/dev/null | awk '/^Version:/{print $2; exit}')
    if [ -z "$pkg" ] || [ -z "$ver" ]; then # offline: newest cached kernel, said out loud
        local last
        last=$(printf '%s\n' "$cache/kernels/$da"/*/vmlinuz | grep -v '\*' | sort -V | tail -n 1)
        [ -n "$last" ] && say "could not resolve linux-image-$da; using cached $last" && echo "$last" && return 0
        return 1
    fi
    local k=$cache/kernels/$da/${pkg}_$ver
    if [ ! -s "$k/vmlinuz" ]; then
        say "downloading $pkg $ver ($da)"
        (cd "$work" && apt-get "${o[@]}" download "$pkg" >>"$work/apt-$da.log" 2>&1) || return 1
        mkdir -p "$k.tmp" && dpkg-deb --fsys-tarfile "$work/${pkg}"_*.deb | tar -x -C "$k.tmp" ./boot || return 1
        rm -f "$work/${pkg}"_*.deb
        mv "$k.tmp"/boot/vmlinuz-* "$k.tmp/vmlinuz" && rm -rf "$k.tmp/boot" && rm -rf "$k" && mv "$k.tmp" "$k" || return 1
    fi
    echo "$k/vmlinuz"
}

declare -A kernel
for a in "${archs[@]}"; do
    [ -z "${broken[$a]:-}" ] || continue
    da=$(debarch "$a")
    kernel[$a]=$(fetch_kernel "$da") || broken[$a]="no kernel image for $da (linux-image-$da could not be resolved or downloaded)"
done

# --- static builds of the in-guest program ----------------------------------------------------
build() { # $1 = arch
    local t=$1-unknown-linux-gnu
    local T=${t^^}
    T=${T//-/_}
    local env=(env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS "CARGO_TARGET_${T}_RUSTFLAGS=-C target-feature=+crt-static")
    [ "$1" = aarch64 ] && env+=("CARGO_TARGET_${T}_LINKER=aarch64-linux-gnu-gcc")
    say "building perfclock-testbed for $t"
    "${env[@]}" cargo build -q --release -p perfclock-testbed --target "$t" --target-dir "$target_dir" >&2 || return 1
    local bin=$target_dir/$t/release/perfclock-testbed
    if readelf -l "$bin" | grep -q 'program interpreter'; then say "$bin is not static"; return 1; fi
    mkdir -p "$work/$1/root" && cp "$bin" "$work/$1/root/init" || return 1
    [ -z "$package_dir" ] || add_package "$1" || return 1
    (cd "$work/$1/root" && find . -mindepth 1 | sed 's|^\./||' | cpio -o -H newc --quiet >"../initrd.cpio")
}

# The package's bin/perfclock at /opt/perfclock/bin of the guest, with what this binary
# loads (the interpreter at its own path, the libraries it needs, transitively, in
# /opt/perfclock-libs), taken from this architecture's libc: the cross toolchain's sysroot
# (libc6-arm64-cross) for aarch64, the host's for x86_64.
add_package() { # $1 = arch
    local a=$1 r=$work/$1/root sysroot tarballs interp f lib seen=" "
    case $a in x86_64) sysroot=/lib/x86_64-linux-gnu ;; aarch64) sysroot=/usr/aarch64-linux-gnu/lib ;; esac
    tarballs=("$package_dir"/perfclock-*-linux-"$a".tar.gz)
    [ ${#tarballs[@]} = 1 ] && [ -f "${tarballs[0]}" ] ||
        { say "PERFCLOCK_TESTBED_PACKAGE: no single perfclock-*-linux-$a.tar.gz in $package_dir"; return 1; }
    say "adding ${tarballs[0]} to the $a guest, its libraries from $sysroot"
    mkdir -p "$r/opt/perfclock" "$r/opt/perfclock-libs" &&
        tar -xzf "${tarballs[0]}" -C "$r/opt/perfclock" --strip-components=1 --wildcards '*/bin/perfclock' || return 1
    interp=$(readelf -l "$r/opt/perfclock/bin/perfclock" | sed -n 's/.*program interpreter: \(.*\)\]/\1/p')
    [ -n "$interp" ] && [ -e "$sysroot/$(basename "$interp")" ] ||
        { say "no interpreter '$interp' for the packaged perfclock in $sysroot"; return 1; }
    mkdir -p "$r$(dirname "$interp")" && cp -L "$sysroot/$(basename "$interp")" "$r$interp" || return 1
    local todo=("$r/opt/perfclock/bin/perfclock")
    while [ ${#todo[@]} -gt 0 ]; do
        f=${todo[0]}
        todo=("${todo[@]:1}")
        for lib in $(readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
            [[ $seen == *" $lib "* ]] && continue
            seen+="$lib "
            [ -e "$sysroot/$lib" ] || { say "$lib (needed by $(basename "$f")) is not in $sysroot"; return 1; }
            cp -L "$sysroot/$lib" "$r/opt/perfclock-libs/$lib" || return 1
            todo+=("$r/opt/perfclock-libs/$lib")
        done
    done
    package_append[$a]="TESTBED_PACKAGE_DOCTOR=/opt/perfclock/bin/perfclock TESTBED_PACKAGE_LIBS=/opt/perfclock-libs"
}
for a in "${archs[@]}"; do
    [ -z "${broken[$a]:-}" ] || continue
    build "$a" || broken[$a]="static build of perfclock-testbed for $a-unknown-linux-gnu failed"
done

# --- boot both guests at once; a hung guest is killed by timeout ------------------------------
boot() { # $1 = arch; console goes to $work/$1/console.log
    local a=$1 q
    case $a in
    x86_64) q=(qemu-system-x86_64 -cpu max -append "console=ttyS0 quiet no-kvmclock tsc=reliable rdinit=/init panic=-1 $append ${package_append[$a]:-}") ;;
    aarch64) q=(qemu-system-aarch64 -M virt -cpu "max${arm64_cntfrq:+,cntfrq=$arm64_cntfrq}" -append "console=ttyAMA0 quiet rdinit=/init panic=-1 $append ${package_append[$a]:-}") ;;
    esac
    local start=$SECONDS
    timeout -k 10 "$guest_timeout" "${q[@]}" -accel tcg,thread=multi -m 1024 -smp 2 \
        -display none -monitor none -serial "file:$work/$a/console.log" -no-reboot \
        -kernel "${kernel[$a]}" -initrd "$work/$a/initrd.cpio" </dev/null >"$work/$a/qemu.log" 2>&1
    echo "$? $((SECONDS - start))" >"$work/$a/exit"
}
pids=()
for a in "${archs[@]}"; do
    [ -z "${broken[$a]:-}" ] || continue
    say "booting $a guest ($(basename "$(dirname "${kernel[$a]}")"), timeout ${guest_timeout}s)"
    boot "$a" &
    pids+=($!)
done
[ ${#pids[@]} -eq 0 ] || wait "${pids[@]}"

# --- results -----------------------------------------------------------------------------------
# signal-safety: the signal-safety proof in kernel mode, which our own machines do not have.
required_checks=(signal-safety)
failed=0
rows=()
for a in "${archs[@]}"; do
    if [ -n "${broken[$a]:-}" ]; then
        skip "$a guest" "${broken[$a]}"
        rows+=("$a|-|-|-|-|-|-|-|SKIPPED")
        continue
    fi
    read -r rc secs <"$work/$a/exit"
    tr -d '\r' <"$work/$a/console.log" >"$work/$a/console.txt"
    grep -E '^(TESTBED|SKIPPED)' "$work/$a/console.txt" | sed "s/^/[$a] /"
    verdict=pass
    grep -qx 'TESTBED-DONE pass' "$work/$a/console.txt" || verdict=fail
    grep -q '^TESTBED FAIL' "$work/$a/console.txt" && verdict=fail
    grep -q '^SKIPPED' "$work/$a/console.txt" && skipped=1
    # Checks every guest must report as passed: their absence is a failure, not a pass.
    for check in "${required_checks[@]}"; do
        if ! grep -q "^TESTBED PASS $check " "$work/$a/console.txt"; then
            say "$a guest: no 'TESTBED PASS $check' line"
            verdict=fail
        fi
    done
    if [ -n "${package_append[$a]:-}" ] && ! grep -q '^TESTBED PASS package-doctor' "$work/$a/console.txt"; then
        say "$a guest: the packaged perfclock doctor did not pass"
        verdict=fail
    fi
    summary=$(grep -m1 '^TESTBED SUMMARY' "$work/$a/console.txt")
    [ -n "$summary" ] || verdict=fail
    field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$summary"; }
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then say "$a guest timed out after ${guest_timeout}s"; verdict=fail; fi
    if [ $verdict = fail ]; then
        failed=1
        say "$a guest failed (qemu exit $rc); last console lines:"
        tail -n 40 "$work/$a/console.txt" >&2
        tail -n 5 "$work/$a/qemu.log" >&2
    fi
    hz=$(field counter_hz)
    [[ $hz =~ ^[0-9]+$ ]] && hz=$(awk -v h="$hz" 'BEGIN { printf "%.1f", h / 1e6 }')
    rows+=("$a|$(field kernel)|$hz|$(field events)|$(field violations)|$(field slips_1ns)|$(field tightest_ns)|$secs|$verdict")
done

echo
row() { printf '%-8s %-16s %11s %8s %10s %9s %11s %6s %s\n' "$@"; }
row arch kernel counter_MHz events violations 1ns-slips tightest_ns time_s result
for r in "${rows[@]}"; do
    IFS='|' read -r a k hz e v s t secs res <<<"$r"
    row "$a" "${k:--}" "${hz:--}" "${e:--}" "${v:--}" "${s:--}" "${t:--}" "$secs" "$res"
done

if [ $failed = 1 ]; then echo "testbed: FAILED"; exit 1; fi
if [ $skipped = 1 ]; then
    echo "testbed: incomplete (something was SKIPPED)"
    [ "${PERFCLOCK_TESTBED_ALLOW_SKIP:-0}" = 1 ] && exit 0
    exit 2
fi
echo "testbed: all guests passed"
