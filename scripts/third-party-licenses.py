#!/usr/bin/env python3
"""Writes the third-party notice the packages ship: every crate compiled into perfclock's
shipped binaries (the command, the C library, the JVM agent) with its version, license and
source repository, then the license texts each crate ships, in full.

Usage: third-party-licenses.py TARGET_TRIPLE OUT

The crates are read from `cargo metadata --locked` for TARGET_TRIPLE, following normal
dependencies only (build and dev dependencies are not in the binaries). Most are MIT or
Apache-2.0, whose texts are in the package already; inferno, which draws the flame graphs, is
CDDL-1.0, which asks that a binary's recipients be told where its source is: the repository
line says so. Exits 1 if a crate names no license. OUT appears complete or not at all.
"""

import json
import os
import pathlib
import subprocess
import sys

SHIPPED = ["perfclock-cli", "perfclock-ffi", "perfclock-jvmti"]
LICENSE_FILES = ("LICENSE", "LICENCE", "COPYING", "NOTICE")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    triple, out = sys.argv[1], pathlib.Path(sys.argv[2])
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", triple],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {package["id"]: package for package in metadata["packages"]}
    nodes = {node["id"]: node for node in metadata["resolve"]["nodes"]}
    members = set(metadata["workspace_members"])
    roots = [id for id in members if packages[id]["name"] in SHIPPED]
    if len(roots) != len(SHIPPED):
        sys.exit(f"third-party-licenses: the workspace lacks one of {SHIPPED}")
    seen, stack = set(), list(roots)
    while stack:
        id = stack.pop()
        if id in seen:
            continue
        seen.add(id)
        for dep in nodes[id]["deps"]:
            if any(kind["kind"] is None for kind in dep["dep_kinds"]):
                stack.append(dep["pkg"])
    third_party = sorted(
        (packages[id] for id in seen - members), key=lambda p: (p["name"], p["version"])
    )
    unlicensed = [p["name"] for p in third_party if not p.get("license")]
    if unlicensed:
        sys.exit(f"third-party-licenses: no license named by {', '.join(unlicensed)}")

    lines = [
        "Third-party software in perfclock",
        "",
        "perfclock (MIT OR Apache-2.0) is built with the following crates, each under its own",
        "license. The source of each is at its repository, at the version given.",
        "",
    ]
    for package in third_party:
        lines.append(
            f"{package['name']} {package['version']}: {package['license']}"
            f" (source: {package.get('repository') or 'no repository named'})"
        )
    # Each distinct text once, headed by the crates' files that hold it.
    texts = {}
    for package in third_party:
        directory = pathlib.Path(package["manifest_path"]).parent
        for path in sorted(directory.iterdir()):
            if path.is_file() and path.name.upper().startswith(LICENSE_FILES):
                text = path.read_text(encoding="utf-8", errors="replace").rstrip()
                texts.setdefault(text, []).append(
                    f"{package['name']} {package['version']}: {path.name}"
                )
    for text, holders in texts.items():
        lines += ["", "=" * 78, *holders, "=" * 78, "", text]
    temporary = out.with_name(out.name + ".tmp")
    temporary.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(temporary, out)
    print(f"third-party-licenses: {len(third_party)} crates in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
