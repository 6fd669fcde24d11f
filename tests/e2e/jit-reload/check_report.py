#!/usr/bin/env python3
"""Checks `perfclock report`'s outputs of jit_reload's recording against perf script's samples.

jit_reload loads a different function at one address every period, so an address names a
different function at each time; check.py has checked that perf script names each sample's
function right. Here the flame graph (FLAME, HTML or SVG) and the pprof profile, as
`go tool pprof -top` prints it (TOP), must give every function the number of samples perf
script gives it (SCRIPT: `perf script -F time,ip,sym --ns`, no call chains, so each sample's
symbol is its leaf), and the same total.

Prints the figures; exits 0 if every jitted function's count and the total agree in both
outputs, 1 otherwise (2 on unusable input).
"""

import argparse
import html
import re
import sys
from collections import Counter

from check import parse_script


def script_counts(path):
    """Samples per leaf symbol ("[unknown]" for none, as perf report says)."""
    return Counter(sym or "[unknown]" for _, _, sym in parse_script(path))


def flame_counts(path):
    """Samples per frame name from the flame graph's tooltips, `NAME (N samples, P%)`."""
    counts = Counter()
    with open(path, encoding="utf-8") as flame:
        text = flame.read()
    for name, count in re.findall(r"<title>(.*?) \(([\d,]+) samples?, [\d.]+%\)</title>", text):
        counts[html.unescape(name)] += int(count.replace(",", ""))
    return counts


def pprof_top(path):
    """Flat samples per function and the total, from `go tool pprof -top`."""
    flat = Counter()
    total = None
    with open(path, encoding="utf-8") as top:
        for line in top:
            # `Showing nodes accounting for N, P% of TOTAL total`
            match = re.search(r" of (\d+) total$", line.rstrip())
            if match:
                total = int(match.group(1))
            fields = line.split()
            # `flat flat% sum% cum cum% NAME...`
            if len(fields) >= 6 and fields[0].isdigit() and fields[1].endswith("%"):
                flat[" ".join(fields[5:])] += int(fields[0])
    if total is None:
        raise ValueError(f"{path}: no `... of N total` line: not go tool pprof -top output")
    return flat, total


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", required=True, help="perf script -F time,ip,sym --ns output")
    parser.add_argument("--flame", required=True, help="perfclock report's flame graph")
    parser.add_argument("--top", required=True, help="go tool pprof -top of its profile")
    parser.add_argument("--prefix", default="jit_fn_", help="the jitted functions' names")
    args = parser.parse_args()
    try:
        script = script_counts(args.script)
        flame = flame_counts(args.flame)
        top, top_total = pprof_top(args.top)
    except (OSError, ValueError) as error:
        print(f"report: unusable input: {error}", file=sys.stderr)
        return 2

    total = sum(script.values())
    functions = sorted(name for name in script if name.startswith(args.prefix))
    failures = []
    if not functions:
        failures.append(f"perf script names no {args.prefix}* function")
    if flame.get("all") != total:
        failures.append(f"flame graph total {flame.get('all')}, perf script {total}")
    if top_total != total:
        failures.append(f"pprof total {top_total}, perf script {total}")
    agreeing = 0
    for name in functions:
        wrong = [
            f"{name}: {output} {counts.get(name)}, perf script {script[name]}"
            for output, counts in (("flame graph", flame), ("pprof", top))
            if counts.get(name) != script[name]
        ]
        failures += wrong
        agreeing += not wrong
    jitted = sum(script[name] for name in functions)
    print(
        f"report: {total} samples, {jitted} in {len(functions)} jitted functions at one "
        f"address; the flame graph and pprof agree with perf script on {agreeing} of them"
    )
    for failure in failures:
        print(f"report: FAIL: {failure}")
    if failures:
        return 1
    print("report: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
