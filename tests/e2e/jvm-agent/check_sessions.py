#!/usr/bin/env python3
"""Checks what sessions.sh recorded: the two sessions' dumps and the names perf prints.

Dumps: each ends with a JIT_CODE_CLOSE record (finished); session 1 (inline=0) has no inlined
range (a load named `a <- b`), session 2 (defaults) has some: each session took its own options;
session 2 holds a load of Names.__call__, compiled before it began (replayed).
Names: every kind of method appears, in the Java form, among the frames `perf script` prints,
the symbols `perf report` lists and the JIT frames of `samply import`'s profile; no frame of
any is in the JVM form (`Lpkg/Class;name(`). samply symbolizes in its server, not in the file:
its frames point at the `jitted-*.so` images `perf inject --jit` wrote, each holding the one
symbol samply shows (read with `nm`). `samply record` reads the dump itself and writes its
names into the profile's strings, checked there.
"""
import argparse
import json
import re
import struct
import subprocess
import sys

JIT_CODE_LOAD, JIT_CODE_CLOSE = 0, 3
JVM_FORM = re.compile(r"(^|\s|<- )L[\w/$]+;[\w$<>]+\(")
# Each kind of name, as the agent writes it (names=java).
KINDS = {
    "underscore": r"Names\.__call__\(long\)",
    "lambda body": r"Names\.lambda\$main\$\d+\(long\)",
    "hidden (generated) class": r"Names\$\$Lambda[$\d]*/0x[0-9a-f]+\.applyAsLong\(long\)",
    "inner class": r"Names\$Inner\.step\(long\)",
    "constructor": r"Names\$Built\.<init>\(long\)",
    "static initializer": r"Names\$Init\.<clinit>\(\)",
}


def records(path):
    """[(id, name or None)] of the dump's records, in file order."""
    with open(path, "rb") as f:
        data = f.read()
    header_size = struct.unpack_from("<I", data, 8)[0]
    out, pos = [], header_size
    while pos + 16 <= len(data):
        rec_id, size, _ts = struct.unpack_from("<IIQ", data, pos)
        if size < 16 or pos + size > len(data):
            raise ValueError(f"{path}: record at {pos} cut short")
        name = None
        if rec_id == JIT_CODE_LOAD:
            end = data.index(b"\0", pos + 56, pos + size)
            name = data[pos + 56:end].decode("utf-8", "replace")
        out.append((rec_id, name))
        pos += size
    return out


def check_dumps(work, pid, problems):
    s1 = records(f"{work}/s1/jit-{pid}.dump")
    s2 = records(f"{work}/s2/jit-{pid}.dump")
    for label, recs in (("session 1", s1), ("session 2", s2)):
        if not recs or recs[-1][0] != JIT_CODE_CLOSE:
            problems.append(f"{label}'s dump does not end with its close record")
    inlined1 = [n for i, n in s1 if n and " <- " in n]
    inlined2 = [n for i, n in s2 if n and " <- " in n]
    if inlined1:
        problems.append(f"session 1 (inline=0) has {len(inlined1)} inlined ranges: {inlined1[:2]}")
    if not inlined2:
        problems.append("session 2 (inline=1) has no inlined range: it inherited inline=0?")
    if not any(n == "Names.__call__(long)" for i, n in s2):
        problems.append("session 2 holds no load of Names.__call__(long): no replay")
    print(f"  dumps: session 1 {len(s1)} records, session 2 {len(s2)} records "
          f"({len(inlined2)} inlined ranges)")


def check_names(work, problems):
    with open(f"{work}/script.txt") as f:
        script = f.read()
    with open(f"{work}/report.txt") as f:
        report = "".join(l for l in f if not l.startswith("#"))
    for tool, text in (("perf script", script), ("perf report", report)):
        for kind, pattern in KINDS.items():
            if not re.search(pattern, text):
                problems.append(f"{tool}: no {kind} frame matching {pattern}")
        jvm = [l.strip() for l in text.splitlines() if JVM_FORM.search(l)]
        if jvm:
            problems.append(f"{tool}: {len(jvm)} frames in the JVM form, e.g. {jvm[0]}")
    frames = len(re.findall(r"Names[\w$]*[./]", script))
    print(f"  names: {frames} Names frames in perf script")


def samply_jit_names(profile_path):
    """The symbols of the jitted-*.so images the frames of samply's profile point at."""
    with open(profile_path) as f:
        profile = json.load(f)
    libs = profile["libs"]
    paths = set()
    for t in profile["threads"]:
        ft, fn, rt = t["frameTable"], t["funcTable"], t["resourceTable"]
        for func in ft["func"]:
            r = fn["resource"][func]
            if r is not None and r >= 0 and rt["lib"][r] is not None:
                path = libs[rt["lib"][r]]["path"]
                if "/jitted-" in path:
                    paths.add(path)
    names = []
    for path in sorted(paths):
        out = subprocess.run(["nm", path], capture_output=True, text=True, check=True).stdout
        # `ADDRESS TYPE NAME`, where NAME may hold spaces (inlined chains).
        names += [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]
    return names


def check_samply(work, problems):
    names = samply_jit_names(f"{work}/samply.json")
    text = "\n".join(names)
    for kind, pattern in KINDS.items():
        if not re.search(pattern, text):
            problems.append(f"samply import: no {kind} frame matching {pattern}")
    jvm = [n for n in names if JVM_FORM.search(n)]
    if jvm:
        problems.append(f"samply import: {len(jvm)} JIT frames in the JVM form, e.g. {jvm[0]}")
    print(f"  samply import: {len(names)} JIT frames' symbols")


def check_samply_record(work, problems):
    """samply record reads the dump itself and puts the names in each thread's strings."""
    with open(f"{work}/samply-record.json") as f:
        profile = json.load(f)
    names = [s for t in profile["threads"] for s in t["stringArray"]]
    text = "\n".join(names)
    for kind, pattern in KINDS.items():
        if not re.search(pattern, text):
            problems.append(f"samply record: no {kind} function matching {pattern}")
    jvm = [n for n in names if JVM_FORM.search(n)]
    if jvm:
        problems.append(f"samply record: {len(jvm)} functions in the JVM form, e.g. {jvm[0]}")
    print(f"  samply record: {len(set(names))} distinct strings")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--pid", required=True)
    args = ap.parse_args()
    problems = []
    print(f"sessions e2e: {args.label}")
    check_dumps(args.work, args.pid, problems)
    check_names(args.work, problems)
    check_samply(args.work, problems)
    check_samply_record(args.work, problems)
    for p in problems:
        print(f"SESSIONS E2E FAIL ({args.label}): {p}", file=sys.stderr)
    if not problems:
        print(f"sessions e2e: {args.label}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
