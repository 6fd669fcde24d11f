#!/usr/bin/env python3
"""Checks that every sample in jit_reload's region names the function loaded at its time.

Inputs: jit_reload's stdout (LOG) and `perf script -F time,ip,sym --ns` of the injected
recording (SCRIPT). The log says, in perf-clock ns, when each function was loaded
(`load K NAME ADDR SIZE BEFORE_NS AFTER_NS`): function K-1 ran only before BEFORE_NS of load K,
function K only after its AFTER_NS. A sample in the region at time T is expected to name the
function whose AFTER_NS <= T < next BEFORE_NS; in the short window between a BEFORE_NS and its
AFTER_NS (writing the code and recording it) no jitted code runs, so a sample there may name
either neighbour.

Prints the figures; exits 0 if at least --min-samples samples fell in the region and none is
misattributed, 1 otherwise (2 on unusable input).
"""

import argparse
import sys


def parse_log(path):
    region = None
    loads = []
    end = None
    with open(path, encoding="utf-8") as log:
        for line in log:
            fields = line.split()
            if not fields:
                continue
            if fields[0] == "region":
                region = (int(fields[1], 16), int(fields[2]))
            elif fields[0] == "load":
                loads.append(
                    {
                        "name": fields[2],
                        "addr": int(fields[3], 16),
                        "size": int(fields[4]),
                        "before": int(fields[5]),
                        "after": int(fields[6]),
                    }
                )
            elif fields[0] == "end":
                end = int(fields[1])
    if region is None or not loads or end is None:
        raise ValueError(f"{path}: no region, load or end line: not a jit_reload log")
    return region, loads, end


def parse_time_ns(text):
    seconds, _, fraction = text.rstrip(":").partition(".")
    if len(fraction) != 9:
        raise ValueError(f"time {text!r} lacks nanoseconds: run perf script with --ns")
    return int(seconds) * 1_000_000_000 + int(fraction)


def parse_script(path):
    """Yields (time_ns, ip, sym) per sample line."""
    with open(path, encoding="utf-8", errors="replace") as script:
        for line in script:
            fields = line.split(None, 2)
            if len(fields) < 2 or not fields[0].endswith(":"):
                continue
            sym = fields[2].strip() if len(fields) > 2 else ""
            yield parse_time_ns(fields[0]), int(fields[1], 16), sym


def expected_names(loads, end, t):
    """The names a sample at t may carry, or None if no jitted code ran then."""
    if t < loads[0]["after"] or t > end:
        return None
    for k, load in enumerate(loads):
        following = loads[k + 1] if k + 1 < len(loads) else None
        if following is None or t < following["before"]:
            return {load["name"]} if t >= load["after"] else None
        if t < following["after"]:
            return {load["name"], following["name"]}
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="jit_reload's stdout")
    parser.add_argument("--script", required=True, help="perf script -F time,ip,sym --ns output")
    parser.add_argument("--min-samples", type=int, default=1000)
    parser.add_argument("--label", default="check", help="name printed with the figures")
    args = parser.parse_args()
    try:
        (start, length), loads, end = parse_log(args.log)
        samples = list(parse_script(args.script))
    except (OSError, ValueError) as error:
        print(f"{args.label}: unusable input: {error}", file=sys.stderr)
        return 2

    in_region = ok = ambiguous = outside_runs = 0
    wrong = {}
    for t, ip, sym in samples:
        if not start <= ip < start + length:
            continue
        in_region += 1
        names = expected_names(loads, end, t)
        if names is None:
            outside_runs += 1
            wrong[("<no function running>", sym)] = wrong.get(("<no function running>", sym), 0) + 1
        elif sym in names:
            ok += 1
            ambiguous += len(names) > 1
        else:
            key = ("/".join(sorted(names)), sym)
            wrong[key] = wrong.get(key, 0) + 1
    misattributed = sum(wrong.values())
    print(
        f"{args.label}: {len(samples)} samples, {in_region} in the JIT region "
        f"({len(loads)} functions at {start:#x}), {ok} attributed correctly "
        f"({ambiguous} inside a reload window), {misattributed} misattributed "
        f"({outside_runs} at times no jitted code ran)"
    )
    for (expected, got), count in sorted(wrong.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {count} samples expected {expected}, perf says {got or '<empty>'}")
    if in_region < args.min_samples:
        print(f"{args.label}: FAIL: {in_region} samples in the region, need {args.min_samples}")
        return 1
    if misattributed:
        print(f"{args.label}: FAIL: {misattributed} samples misattributed")
        return 1
    print(f"{args.label}: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
