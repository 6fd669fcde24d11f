#!/usr/bin/env python3
"""Checks a samply profile of the `phases` example against its markers.

samply leaves addresses unsymbolized in profile.json, so each sample's leaf frame is mapped to a
function with the binary's symbol table (`nm`). A sample counts for a phase when its leaf frame is
in that phase's function (`phases::phase_<name>`, or --symbol-format); it is "inside" when its time falls in a marker
of that name. Both times come out of samply's one timestamp converter, so the score measures how
well the marker stamps agree with the perf clock of the samples.

Pass: for every phase, at least --min-score of its samples fall inside its own markers, and the
control markers (`late <name>`, stamped --late ns later) score at most --max-control-score. The
control counts only if it ran: there must be one `late <name>` marker per `<name>` marker (a
missing control would otherwise score 0% and pass).
Also checks that samply read every line of the marker file (it stops at the first bad line).
Exit status 0 on pass, 1 on failure, 2 on unusable input.
"""

import argparse
import json
import subprocess
import sys
from bisect import bisect_right

PHASES = ("hash", "sort", "write_file")


def fail(message, status=1):
    print(f"check_markers: FAIL: {message}", file=sys.stderr)
    sys.exit(status)


def phase_symbols(binary, symbol_format):
    """(start, end, phase) of each phase function, as addresses relative to the ELF's base."""
    try:
        out = subprocess.run(
            ["nm", "-S", "-C", "--defined-only", binary],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"nm {binary}: {e} (install binutils)", 2)
    ranges = []
    for line in out.splitlines():
        parts = line.split(None, 3)
        if len(parts) != 4:
            continue
        address, size, _kind, name = parts
        for phase in PHASES:
            if name == symbol_format.format(phase):
                start = int(address, 16)
                ranges.append((start, start + int(size, 16), phase))
    found = {r[2] for r in ranges}
    if found != set(PHASES):
        fail(f"{binary} lacks symbols for {sorted(set(PHASES) - found)}", 2)
    return ranges


def marker_file_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    if data and not data.endswith(b"\n"):
        fail(f"{path} ends with a partial line")
    return data.count(b"\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="profile.json written by samply import")
    ap.add_argument("--binary", required=True, help="the phases binary that was recorded")
    ap.add_argument("--marker-file", required=True, help="the marker-<pid>.txt it wrote")
    ap.add_argument(
        "--symbol-format",
        default="phases::phase_{}",
        help="demangled name of a phase's function, {} standing for the phase (C: phase_{})",
    )
    ap.add_argument("--min-score", type=float, default=0.95)
    ap.add_argument("--max-control-score", type=float, default=0.5)
    ap.add_argument("--min-samples", type=int, default=100, help="per phase")
    args = ap.parse_args()

    try:
        with open(args.profile) as f:
            profile = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"reading {args.profile}: {e}", 2)
    lib_index = [i for i, lib in enumerate(profile["libs"]) if lib.get("path") == args.binary]
    if not lib_index:
        fail(f"{args.binary} is not among the profile's libraries", 2)
    ranges = phase_symbols(args.binary, args.symbol_format)

    spans = {}  # marker name -> sorted [(start_ms, end_ms)]
    simple_markers = 0
    samples = []  # (time_ms, phase)
    for thread in profile["threads"]:
        strings = thread["stringArray"]
        markers = thread["markers"]
        for i in range(markers["length"]):
            data = markers["data"][i] or {}
            if data.get("type") != "SimpleMarker":
                continue
            simple_markers += 1
            name = strings[data["name"]]
            end = markers["endTime"][i]
            start = markers["startTime"][i]
            spans.setdefault(name, []).append((start, start if end is None else end))
        resources = thread["resourceTable"]
        funcs, frames, stacks = thread["funcTable"], thread["frameTable"], thread["stackTable"]
        s = thread["samples"]
        for i in range(s["length"]):
            stack = s["stack"][i]
            if stack is None:
                continue
            frame = stacks["frame"][stack]
            resource = funcs["resource"][frames["func"][frame]]
            if resource is None or resource < 0:
                continue
            if resources["lib"][resource] not in lib_index:
                continue
            address = frames["address"][frame]
            for start, end, phase in ranges:
                if start <= address < end:
                    samples.append((s["time"][i], phase))
                    break

    lines = marker_file_lines(args.marker_file)
    print(f"marker file: {lines} lines; samply read {simple_markers} markers")
    if simple_markers != lines:
        fail(f"samply read {simple_markers} markers of {lines} lines in {args.marker_file}")

    def score(marker_name, phase):
        intervals = sorted(spans.get(marker_name, []))
        starts = [a for a, _ in intervals]
        total = inside = 0
        for t, p in samples:
            if p != phase:
                continue
            total += 1
            k = bisect_right(starts, t) - 1
            if k >= 0 and intervals[k][0] <= t <= intervals[k][1]:
                inside += 1
        return inside, total

    ok = True
    for phase in PHASES:
        real_markers, late_markers = len(spans.get(phase, [])), len(spans.get(f"late {phase}", []))
        if real_markers == 0 or late_markers != real_markers:
            print(
                f"phase {phase}: {real_markers} markers and {late_markers} `late {phase}` control "
                f"markers: the control did not run (record with --late-control-ns)",
                file=sys.stderr,
            )
            ok = False
            continue
        inside, total = score(phase, phase)
        late_inside, _ = score(f"late {phase}", phase)
        real = inside / total if total else 0.0
        control = late_inside / total if total else 1.0
        print(
            f"phase {phase}: {inside}/{total} samples inside its markers ({real:.1%}); "
            f"2 ms-late control: {late_inside}/{total} ({control:.1%})"
        )
        if total < args.min_samples:
            print(f"  too few samples (< {args.min_samples}): record longer", file=sys.stderr)
            ok = False
        if real < args.min_score:
            print(f"  below {args.min_score:.0%}", file=sys.stderr)
            ok = False
        if control > args.max_control_score:
            print(f"  control above {args.max_control_score:.0%}: the check cannot tell", file=sys.stderr)
            ok = False
    if not ok:
        fail("see above")
    print("check_markers: PASS")


if __name__ == "__main__":
    main()
