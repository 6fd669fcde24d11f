#!/usr/bin/env python3
"""Checks a samply profile of jit_reload (run with JIT_RELOAD_MARKERS=1): every sample taken
inside a "phase jit_fn_<k>" marker must be named jit_fn_<k> (its leaf frame's function), on
samply's own time axis, where the markers and the jitdump's stamps both land.

Exit 0 when at least --min-ratio of at least --min-samples such samples are named right; with
--expect-none, when none of them is named jit_fn_<anything> (the control: a jitdump in a clock
samply cannot place). Prints one summary line either way.
"""
import argparse
import gzip
import json
import re
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--label", required=True)
    ap.add_argument("--min-samples", type=int, default=200)
    ap.add_argument("--min-ratio", type=float, default=0.95)
    ap.add_argument("--expect-none", action="store_true")
    args = ap.parse_args()

    profile = load(args.profile)
    phase_re = re.compile(r"^phase (jit_fn_\d+)$")
    best = None
    for thread in profile["threads"]:
        strings = thread["stringArray"]
        markers = thread["markers"]
        phases = []
        for i in range(markers["length"]):
            # Markers from a marker file are SimpleMarkers, their text in data.name.
            data = markers["data"][i] or {}
            name = data.get("name", markers["name"][i])
            m = phase_re.match(strings[name] if isinstance(name, int) else str(name))
            start, end = markers["startTime"][i], markers["endTime"][i]
            if m and start is not None and end is not None:
                phases.append((start, end, m.group(1)))
        if phases and (best is None or len(phases) > len(best[1])):
            best = (thread, phases)
    if best is None:
        print(f"{args.label}: FAIL: no 'phase jit_fn_<k>' markers in {args.profile}")
        return 1
    thread, phases = best
    strings = thread["stringArray"]
    samples, stacks = thread["samples"], thread["stackTable"]
    frames, funcs = thread["frameTable"], thread["funcTable"]

    def leaf_name(stack):
        if stack is None:
            return None
        return strings[funcs["name"][frames["func"][stacks["frame"][stack]]]]

    phases.sort()
    total = right = any_jit = 0
    wrong = {}
    for stack, time in zip(samples["stack"], samples["time"]):
        phase = next((p for p in phases if p[0] <= time <= p[1]), None)
        if phase is None:
            continue
        total += 1
        name = leaf_name(stack)
        if name == phase[2]:
            right += 1
        elif name is not None:
            wrong[name] = wrong.get(name, 0) + 1
        if name is not None and name.startswith("jit_fn_"):
            any_jit += 1
    ratio = right / total if total else 0.0
    top_wrong = sorted(wrong.items(), key=lambda kv: -kv[1])[:3]
    print(
        f"{args.label}: {len(phases)} phases, {total} samples inside them, {right} named by the "
        f"function of their phase ({100 * ratio:.1f}%), {any_jit} named jit_fn_*; most frequent "
        f"other names: {top_wrong}"
    )
    if total < args.min_samples:
        print(f"{args.label}: FAIL: fewer than {args.min_samples} samples in the phases")
        return 1
    if args.expect_none:
        return 0 if any_jit == 0 else 1
    return 0 if ratio >= args.min_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
