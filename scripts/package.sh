#!/usr/bin/env bash
# Builds perfclock's packages from this checkout, for one architecture:
#
#   scripts/package.sh [x86_64|aarch64]        # default: this machine's architecture
#
# Writes into ${CARGO_TARGET_DIR:-target}/package-out/:
#   perfclock-VERSION-linux-ARCH.tar.gz   a relocatable tree: bin/, lib/, include/, share/, README
#   perfclock_VERSION-1_DEBARCH.deb       the same files under /usr (cargo deb)
# VERSION is the workspace version. Layout and contents: packaging/README.md.
#
# aarch64 is cross-built with the distribution's cross compiler (gcc-aarch64-linux-gnu,
# installed with apt-get when missing and run as root) and rustup's aarch64-unknown-linux-gnu
# target. cargo-deb is installed at the version pinned in packaging/versions when missing.
# Each artifact appears complete or not at all (written beside, then renamed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=packaging/versions
. packaging/versions

die() { echo "package.sh: $*" >&2; exit 1; }
say() { echo "package.sh: $*" >&2; }

arch=${1:-$(uname -m)}
case $arch in
x86_64) debarch=amd64 ;;
aarch64) debarch=arm64 ;;
*) die "unknown architecture '$arch' (x86_64 or aarch64)" ;;
esac
target_dir=${CARGO_TARGET_DIR:-$root/target}
out=$target_dir/package-out
triple=$arch-unknown-linux-gnu
cargo_target=()
build_dir=$target_dir/release
if [ "$arch" != "$(uname -m)" ]; then
    cargo_target=(--target "$triple")
    build_dir=$target_dir/$triple/release
fi

# --- tools -------------------------------------------------------------------------------------
if ! cargo deb --version 2>/dev/null | grep -qF "$CARGO_DEB_VERSION"; then
    say "installing cargo-deb $CARGO_DEB_VERSION"
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
fi
if [ "$arch" = aarch64 ] && [ "$(uname -m)" != aarch64 ]; then
    if ! command -v aarch64-linux-gnu-gcc >/dev/null; then
        [ "$(id -u)" = 0 ] || die "aarch64-linux-gnu-gcc is missing: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
        say "installing the cross compiler (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            gcc-aarch64-linux-gnu libc6-dev-arm64-cross >&2 ||
            die "apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross failed"
    fi
    rustup target add "$triple" >&2 || die "rustup target add $triple failed"
    # The linker, and the C compiler of the crates that build C (zstd-sys).
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
        CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
        AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
fi

version=$(cargo pkgid -p perfclock-cli | sed 's/.*[#@]//')
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || die "cannot read the workspace version (cargo pkgid says '$version')"

# --- build -------------------------------------------------------------------------------------
say "building perfclock $version for $triple (release)"
PERFCLOCK_FFI_SONAME=1 cargo build --release --locked "${cargo_target[@]}" \
    -p perfclock-cli -p perfclock-jvmti -p perfclock-ffi
work=$(mktemp -d "$target_dir/package-work.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Man pages and completions from the command's clap definitions, on this machine (they do not
# depend on the architecture).
say "generating man pages and shell completions"
cargo run --quiet --locked -p perfclock-cli --features gen-docs --example gen-docs -- "$work/gen"

# The crates compiled into the binaries, their licenses and sources (inferno's CDDL-1.0 asks
# that recipients be told where its source is), and their license texts.
python3 scripts/third-party-licenses.py "$triple" "$work/THIRD-PARTY-LICENSES" >&2 ||
    die "scripts/third-party-licenses.py failed"

soname=$(readelf -d "$build_dir/libperfclock_ffi.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ $soname == libperfclock.so.* ]] ||
    die "$build_dir/libperfclock_ffi.so has soname '$soname', expected libperfclock.so.N (PERFCLOCK_FFI_SONAME, crates/perfclock-ffi/build.rs)"
units=(packaging/systemd/*.service)
[ -e "${units[0]}" ] || die "no systemd unit in packaging/systemd/"

# What a static link of the archive needs besides it (rustc --print native-static-libs).
native_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

# stage DIR PREFIX LIBDIR RPATH: the installed tree under DIR (a prefix: bin/, lib/, ...).
stage() {
    local dir=$1 prefix=$2 libdir=$3 rpath=$4
    install -D -m 755 "$build_dir/perfclock" "$dir/bin/perfclock"
    install -D -m 644 "$build_dir/libperfclock_agent.so" "$dir/lib/perfclock/libperfclock_agent.so"
    install -D -m 644 "$build_dir/libperfclock_ffi.so" "$dir/lib/libperfclock.so.$version"
    ln -s "libperfclock.so.$version" "$dir/lib/$soname"
    ln -s "$soname" "$dir/lib/libperfclock.so"
    install -D -m 644 "$build_dir/libperfclock_ffi.a" "$dir/lib/libperfclock.a"
    install -D -m 644 crates/perfclock-ffi/include/perfclock.h "$dir/include/perfclock.h"
    mkdir -p "$dir/lib/pkgconfig"
    sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" -e "s|@VERSION@|$version|" \
        -e "s|@RPATH@|$rpath|" -e "s|@NATIVE_LIBS@|$native_libs|" \
        packaging/perfclock.pc.in >"$dir/lib/pkgconfig/perfclock.pc"
    install -D -m 644 -t "$dir/lib/systemd/system" "${units[@]}"
    install -D -m 644 -t "$dir/share/man/man1" "$work/gen/man/"*.1
    install -D -m 644 "$work/gen/completions/perfclock.bash" "$dir/share/bash-completion/completions/perfclock"
    install -D -m 644 "$work/gen/completions/_perfclock" "$dir/share/zsh/vendor-completions/_perfclock"
    install -D -m 644 "$work/gen/completions/perfclock.fish" "$dir/share/fish/vendor_completions.d/perfclock.fish"
}

mkdir -p "$out"
# --- tarball: relocatable, its pkg-config file points at wherever it was unpacked ---------------
name=perfclock-$version-linux-$arch
tree=$work/tar/$name
stage "$tree" '${pcfiledir}/../..' '${prefix}/lib' '-Wl,-rpath,${libdir} '
install -m 644 packaging/README.package.md "$tree/README.md"
install -m 644 packaging/licenses/LICENSE-MIT packaging/licenses/LICENSE-APACHE \
    "$work/THIRD-PARTY-LICENSES" "$tree/"
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
tarball=$out/$name.tar.gz
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$work/tar" \
    -czf "$tarball.tmp" "$name"
mv -f "$tarball.tmp" "$tarball"
say "wrote $tarball"

# --- Debian package: the same tree under /usr, packed by cargo deb ------------------------------
# cargo deb takes the files from target/release/perfclock-deb-root (its name for this target's
# release directory, the cross one included), per [package.metadata.deb] of perfclock-cli.
deb_root=$build_dir/perfclock-deb-root
rm -rf "$deb_root"
stage "$deb_root/usr" /usr '${prefix}/lib' ''
install -D -m 644 packaging/README.package.md "$deb_root/usr/share/doc/perfclock/README.md"
install -m 644 packaging/licenses/LICENSE-MIT packaging/licenses/LICENSE-APACHE \
    "$work/THIRD-PARTY-LICENSES" "$deb_root/usr/share/doc/perfclock/"
rm -rf "$work/deb" && mkdir -p "$work/deb"
cargo deb -p perfclock-cli --no-build --no-strip --locked "${cargo_target[@]}" \
    --output "$work/deb/" >&2
debs=("$work/deb/"*.deb)
[ ${#debs[@]} = 1 ] && [ -f "${debs[0]}" ] || die "cargo deb wrote ${#debs[@]} files into $work/deb"
deb=$out/$(basename "${debs[0]}")
[[ $deb == *"_${version}-1_$debarch.deb" ]] || die "cargo deb wrote $(basename "$deb"), expected perfclock_${version}-1_$debarch.deb"
mv -f "${debs[0]}" "$deb"
rm -rf "$deb_root"
say "wrote $deb"
