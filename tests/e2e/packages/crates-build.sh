#!/usr/bin/env bash
# Every publishable crate packages and builds from its package alone (`cargo package`).
# --workspace packages them together: their dependencies on each other resolve to the packages
# just made (a local registry), so none has to be on the registry first. Left out: the crates
# with `publish = false` (JVMTI agent cdylib, test bed guest program, test helpers, the
# signal-safety proof).
# --allow-dirty: this checks what the packages hold and that they build, not that the work tree is
# committed (a run on a tree with edits would stop here otherwise).
# Cargo unpacks those packages under $CARGO_HOME/registry/src/<hash of the local registry's path>/
# and never unpacks a name-version again, so a machine that packaged this checkout's path before
# would verify against its old sources. The copies are ours alone; drop them so the packages just
# made are used.
# A target directory of its own: the C ABI crate's staticlib/cdylib outputs carry no hash in their
# names, so a verify build in target/ would replace the workspace's own libperfclock_ffi.rlib with
# one built against the packaged facade, and the next `cargo test` would link two facades.
# That directory starts empty each time: cargo takes a registry crate of the same name and version
# for unchanged (registry sources are immutable to it), so a verify build would link the
# workspace crates as an earlier run packaged them.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rm -rf target/package-verify "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/perfclock-[0-9]* \
    "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/perfclock-*-[0-9]*
cargo package --workspace --allow-dirty --target-dir target/package-verify \
    --exclude perfclock-jvmti --exclude perfclock-testbed --exclude perfclock-testutil \
    --exclude perfclock-signal-safety
