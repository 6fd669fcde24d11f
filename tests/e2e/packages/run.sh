#!/usr/bin/env bash
# Checks the packages scripts/package.sh built, as a user without Rust would use them:
#
#   scripts/package.sh x86_64 && scripts/package.sh aarch64 && tests/e2e/packages/run.sh
#
# x86_64, each artifact (the tarball unpacked into a fresh directory; the .deb installed with
# `dpkg --root` into a throwaway root and removed again, and its files laid over /usr in a
# private mount namespace): with the checkout, ~/.cargo, ~/.rustup and the target directory
# hidden under empty tmpfs mounts (`unshare -m`), it runs `perfclock --version`, `agent-path`,
# `doctor`, `perfclock record` of a small Java program whose `perf report` must name its two hot
# methods, `perfclock attach` into a running JVM under `perf record -p` (named again after
# inject), and a C program built with `pkg-config --cflags --libs perfclock` alone that opens the
# clock and writes a jitdump. aarch64: the artifacts exist and hold aarch64 ELF files (running
# them is tests/e2e/testbed/run.sh's, with PERFCLOCK_TESTBED_PACKAGE).
# Needs root (mount namespace, perf), perf, java and javac, cc, pkg-config, dpkg. Exits non-zero
# on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
case $target_dir in /*) ;; *) target_dir=$root/$target_dir ;; esac
out=$target_dir/package-out

fail() { echo "PACKAGES FAIL: $*" >&2; exit 1; }
say() { echo "ci-packages: $*" >&2; }
[ "$(id -u)" = 0 ] || fail "run as root (unshare -m, perf record -p)"
for tool in perf java javac cc pkg-config dpkg dpkg-deb unshare readelf python3; do
    command -v "$tool" >/dev/null || fail "missing '$tool'"
done
version=$(cd "$root" && cargo pkgid -p perfclock-cli | sed 's/.*[#@]//')
# The commit the binaries name: as crates/perfclock-cli/build.rs finds it.
commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo "${PERFCLOCK_GIT_COMMIT:-unknown}")

work=$(mktemp -d /var/tmp/perfclock-packages.XXXXXX)
trap 'rm -rf "$work"' EXIT

# --- aarch64: built, and aarch64 ELF files ------------------------------------------------------
elf_machine() { readelf -h "$1" | sed -n 's/^ *Machine: *//p'; }
check_arch() { # $1 = tree root (bin/, lib/), $2 = expected readelf Machine
    local f m
    for f in bin/perfclock lib/perfclock/libperfclock_agent.so "lib/libperfclock.so.$version"; do
        [ -f "$1/$f" ] || fail "$1 has no $f"
        m=$(elf_machine "$1/$f")
        [ "$m" = "$2" ] || fail "$f is a '$m' ELF file, expected $2"
    done
}
# The glibc the ELF files under $1 need is no newer than the .deb $2's Depends: libc6 (>= X).
check_glibc() {
    local needed declared
    needed=$(find "$1" -type f \( -path '*/bin/perfclock' -o -name '*.so*' \) -exec readelf -W --dyn-syms {} + |
        grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
    declared=$(dpkg-deb -f "$2" Depends | sed -n 's/.*libc6 (>= \([0-9.]*\)).*/\1/p')
    [ -n "$needed" ] && [ -n "$declared" ] || fail "cannot compare glibc needed '$needed' with Depends '$declared' of $2"
    dpkg --compare-versions "$needed" le "$declared" ||
        fail "$2's files need glibc $needed, its Depends says libc6 (>= $declared)"
}
a64_tar=$out/perfclock-$version-linux-aarch64.tar.gz
a64_deb=$out/perfclock_${version}-1_arm64.deb
[ -f "$a64_tar" ] && [ -f "$a64_deb" ] || fail "no aarch64 packages in $out: run scripts/package.sh aarch64"
mkdir -p "$work/a64-tar" "$work/a64-deb"
tar -xzf "$a64_tar" -C "$work/a64-tar"
check_arch "$work/a64-tar/perfclock-$version-linux-aarch64" AArch64
dpkg-deb -x "$a64_deb" "$work/a64-deb"
check_arch "$work/a64-deb/usr" AArch64
[ "$(dpkg-deb -f "$a64_deb" Architecture)" = arm64 ] || fail "$a64_deb is not Architecture: arm64"
check_glibc "$work/a64-deb/usr" "$a64_deb"
say "aarch64: tarball and .deb hold AArch64 ELF files ($(file -b "$work/a64-tar/perfclock-$version-linux-aarch64/bin/perfclock" | cut -d, -f1-2))"

# --- x86_64: the artifacts, unpacked and installed ----------------------------------------------
x64_tar=$out/perfclock-$version-linux-x86_64.tar.gz
x64_deb=$out/perfclock_${version}-1_amd64.deb
[ -f "$x64_tar" ] && [ -f "$x64_deb" ] || fail "no x86_64 packages in $out: run scripts/package.sh x86_64"
mkdir -p "$work/tar"
tar -xzf "$x64_tar" -C "$work/tar"
prefix=$work/tar/perfclock-$version-linux-x86_64
check_arch "$prefix" "Advanced Micro Devices X86-64"
# The third-party notice: inferno's CDDL-1.0 with where its source is, and the license's text.
notice=$prefix/THIRD-PARTY-LICENSES
grep -qE '^inferno [0-9.]+: CDDL-1\.0 \(source: https://' "$notice" ||
    fail "$notice does not name inferno's CDDL-1.0 license and source"
grep -q 'COMMON DEVELOPMENT AND DISTRIBUTION LICENSE' "$notice" ||
    fail "$notice lacks the CDDL's text"
check_glibc "$prefix" "$x64_deb"

# dpkg -i into a throwaway root (its own dpkg database; the host's is never touched), then -r.
dpkg_root=$work/dpkg-root
mkdir -p "$dpkg_root/var/lib/dpkg/info" "$dpkg_root/var/lib/dpkg/updates"
touch "$dpkg_root/var/lib/dpkg/status"
# --force-depends: the throwaway database knows no libc6; --force-not-root is not needed (root).
dpkg --root="$dpkg_root" --force-depends -i "$x64_deb" >"$work/dpkg-i.log" 2>&1 ||
    { cat "$work/dpkg-i.log" >&2; fail "dpkg -i $x64_deb failed"; }
dpkg --root="$dpkg_root" -s perfclock | grep -qx "Version: $version-1" ||
    fail "dpkg --root says perfclock is not installed at version $version-1"
listed=$(dpkg-deb -c "$x64_deb" | awk '$1 !~ /^d/ { print $6 }' | sed 's|^\./||' | sort)
for f in $listed; do
    [ -e "$dpkg_root/$f" ] || [ -L "$dpkg_root/$f" ] || fail "the .deb lists $f but dpkg -i did not install it"
done
for f in usr/bin/perfclock usr/lib/perfclock/libperfclock_agent.so usr/lib/libperfclock.so.0 \
    usr/lib/libperfclock.so usr/lib/libperfclock.a usr/include/perfclock.h \
    usr/lib/pkgconfig/perfclock.pc usr/share/man/man1/perfclock.1 \
    usr/share/bash-completion/completions/perfclock usr/share/doc/perfclock/THIRD-PARTY-LICENSES; do
    grep -qx "$f" <<<"$listed" || fail "the .deb holds no $f"
done
compgen -G "$dpkg_root/usr/lib/systemd/system/*.service" >/dev/null || fail "the .deb installs no systemd unit"
[ ! -e "$dpkg_root/etc/systemd/system/multi-user.target.wants" ] || fail "the .deb enables a unit"
mkdir -p "$work/deb-usr"
cp -a "$dpkg_root/usr/." "$work/deb-usr/"
dpkg --root="$dpkg_root" -r perfclock >"$work/dpkg-r.log" 2>&1 ||
    { cat "$work/dpkg-r.log" >&2; fail "dpkg -r perfclock failed"; }
# Everything but dpkg's own database must be gone.
left=$(find "$dpkg_root" -path "$dpkg_root/var/lib/dpkg" -prune -o \( -type f -o -type l \) -print | head -n 5)
[ -z "$left" ] || fail "dpkg -r left files behind: $left"
say "x86_64 .deb: dpkg -i into $dpkg_root installed $(wc -l <<<"$listed") files, dpkg -r removed them"

# The Java program is compiled here, with the host's JDK; the checks run it with java alone.
mkdir -p "$work/java"
javac -d "$work/java" "$root/tests/e2e/packages/HotMethods.java"
cp "$root/tests/e2e/packages/jitdump_pkgconfig.c" "$root/tests/e2e/packages/run-installed.sh" "$work/"

# --- the checks, run in a mount namespace with the build world hidden ---------------------------
hidden=("$root" "${CARGO_HOME:-$HOME/.cargo}" "${RUSTUP_HOME:-$HOME/.rustup}" "$target_dir")
# shellcheck disable=SC2016 # expanded by the inner shell
unshare -m bash -c '
    set -euo pipefail
    work=$1 prefix=$2 version=$3 commit=$4 check=$5
    shift 5
    mount --make-rprivate /
    # The .deb as installed: its usr/ laid over /usr (read-only overlay).
    mount -t overlay perfclock-deb -o "lowerdir=$work/deb-usr:/usr" /usr
    for dir in "$@"; do
        [ -d "$dir" ] || continue
        mount -t tmpfs perfclock-hidden "$dir"
    done
    for dir in "$@"; do
        [ ! -d "$dir" ] || [ -z "$(ls -A "$dir")" ] || { echo "PACKAGES FAIL: $dir is not hidden" >&2; exit 1; }
    done
    export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    ! command -v cargo >/dev/null && ! command -v rustc >/dev/null ||
        { echo "PACKAGES FAIL: cargo or rustc is still reachable" >&2; exit 1; }
    bash "$check" "$work" tarball "$prefix" "$version" "$commit"
    bash "$check" "$work" deb /usr "$version" "$commit"
' _ "$work" "$prefix" "$version" "$commit" "$work/run-installed.sh" "${hidden[@]}"
