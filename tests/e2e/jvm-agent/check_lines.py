#!/usr/bin/env python3
"""Checks the agent's source lines, inlined-method names, GC markers and attach in what
`perf inject --jit` + `perf script` make of three recordings of Lines.java (run.sh runs them).

Each run directory holds dump/jit-<pid>.dump (+ .timeconv) and jitted.script, the output of
`perf script --ns -G -F comm,pid,tid,time,ip,sym,srcline` on the injected recording (perf
prints a sample's source line, when it has one, on the line after the sample).

Definitions (ground truth from the workload and the dump, never from perf's names):
  in JIT code: a sample of the JVM whose ip lies in a whole-method load of the dump (a load
    named `Lclass;method(`, not an inlined-range load, which has ` <- ` in its name), of any
    method at any time.
  looper samples: thread "looper" in JIT code; it runs only Lines.spin, whose hot loop is the
    line ending in `// HOT-LOOP` (the hot line).
  outer samples: thread "inliner" with ip in a load of Lines.outer, the code helper() was
    inlined into.

Pass (full run, defaults lines=1 inline=1): >= 90% of looper samples print Lines.java:<hot
line>; >= 80% of outer samples are named after helper (a name starting `LLines;helper(`), and
>= 80% of those print Lines.java:<helper line>; >= 1 GC pause marker per System.gc() the
workload made, inside the recording's time span.
Control (lines=0 inline=0), after checking its own setup (enough looper and outer samples):
no JIT sample prints a Lines.java line and no sample is named after an inlined range.
Attach (agent loaded with jcmd into the running JVM): >= 90% of the looper and outer samples
taken 100 ms after the dump was created are named after their method (spin; helper or outer).
"""
import argparse
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "../jvm-attribution"))
from check_attribution import counter_to_perf_ns, parse_jitdump, parse_timeconv  # noqa: E402

SAMPLE = re.compile(r"^\s*(.*?)\s+(\d+)/(\d+)\s+(\d+)\.(\d{9}):\s+([0-9a-f]+)\s+(.*?)\s*$")
JAVA_METHOD = re.compile(r"^L[^;]+;[^(;]+\(")
MIN_SAMPLES = 300
MIN_LINE_FRACTION = 0.90
MIN_INLINE_FRACTION = 0.80
MIN_ATTACH_FRACTION = 0.90
# Fewer: the attach run records only the part of the workload after the attach.
MIN_ATTACH_SAMPLES = 250
ATTACH_SETTLE_NS = 100_000_000


def marked_line(source, marker):
    with open(source) as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith("// " + marker):
                return number
    sys.exit(f"no line ending in '// {marker}' in {source}")


def parse_script(path):
    """[(comm, pid, time_ns, ip, sym, srcline or '')]."""
    samples = []
    with open(path, errors="replace") as f:
        for line in f:
            m = SAMPLE.match(line)
            if m:
                samples.append([m.group(1), int(m.group(2)),
                                int(m.group(4)) * 1_000_000_000 + int(m.group(5)),
                                int(m.group(6), 16), m.group(7), ""])
            elif samples and line.strip() and not samples[-1][5]:
                samples[-1][5] = line.strip()
    return samples


class Run:
    def __init__(self, directory):
        dumps = glob.glob(os.path.join(directory, "dump", "jit-*.dump"))
        if len(dumps) != 1:
            sys.exit(f"{directory}: expected one jit-<pid>.dump, found {len(dumps)}")
        self.dump = dumps[0]
        self.pid = int(re.search(r"jit-(\d+)\.dump$", self.dump).group(1))
        self.conv = parse_timeconv(self.dump + ".timeconv")
        loads = parse_jitdump(self.dump)
        self.whole = [l for l in loads if JAVA_METHOD.match(l[3]) and " <- " not in l[3]]
        self.inlined_loads = sum(1 for l in loads if " <- " in l[3])
        with open(self.dump, "rb") as f:
            header = f.read(40)
        self.created_ns = counter_to_perf_ns(self.conv, int.from_bytes(header[24:32], "little"))
        self.samples = [s for s in parse_script(os.path.join(directory, "jitted.script"))
                        if s[1] == self.pid]

    def in_loads(self, ip, prefix=""):
        return any(a <= ip < b and name.startswith(prefix) for a, b, _, name in self.whole)

    def looper(self):
        return [s for s in self.samples if s[0] == "looper" and self.in_loads(s[3])]

    def outer(self):
        return [s for s in self.samples if s[0] == "inliner" and self.in_loads(s[3], "LLines;outer(")]


def fraction(part, whole):
    return part / whole if whole else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--full", required=True)
    ap.add_argument("--control", required=True)
    ap.add_argument("--attach", required=True)
    args = ap.parse_args()
    hot = f"Lines.java:{marked_line(args.source, 'HOT-LOOP')}"
    helper_line = f"Lines.java:{marked_line(args.source, 'HELPER-LOOP')}"
    problems = []

    def need(ok, what):
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            problems.append(what)

    print(f"[{args.label}] full run (lines=1 inline=1 markers=DIR)")
    full = Run(args.full)
    looper, outer = full.looper(), full.outer()
    on_hot = sum(1 for s in looper if s[5] == hot)
    named = [s for s in outer if s[4].startswith("LLines;helper(")]
    helper_lined = sum(1 for s in named if s[5] == helper_line)
    print(f"  {len(full.samples)} samples of pid {full.pid}; {len(full.whole)} whole-method loads, "
          f"{full.inlined_loads} inlined-range loads")
    need(len(looper) >= MIN_SAMPLES and len(outer) >= MIN_SAMPLES,
         f"enough samples: {len(looper)} looper, {len(outer)} outer (need {MIN_SAMPLES} each)")
    need(fraction(on_hot, len(looper)) >= MIN_LINE_FRACTION,
         f"hot loop line {hot}: {on_hot}/{len(looper)} = {100 * fraction(on_hot, len(looper)):.2f}% "
         f"of looper samples (need {100 * MIN_LINE_FRACTION:.0f}%)")
    need(fraction(len(named), len(outer)) >= MIN_INLINE_FRACTION,
         f"inlined helper named: {len(named)}/{len(outer)} = "
         f"{100 * fraction(len(named), len(outer)):.2f}% of outer samples "
         f"(need {100 * MIN_INLINE_FRACTION:.0f}%)")
    need(fraction(helper_lined, len(named)) >= MIN_INLINE_FRACTION,
         f"inlined helper's line {helper_line}: {helper_lined}/{len(named)} = "
         f"{100 * fraction(helper_lined, len(named)):.2f}% of them "
         f"(need {100 * MIN_INLINE_FRACTION:.0f}%)")
    markers = glob.glob(os.path.join(args.full, "markers", "marker-*.txt"))
    with open(os.path.join(args.full, "java.out")) as f:
        collections = int(re.search(r"collections=(\d+)", f.read()).group(1))
    pauses = []
    if len(markers) == 1:
        with open(markers[0]) as f:
            pauses = [tuple(map(int, l.split(" ", 2)[:2])) for l in f if l.rstrip().endswith(" GC pause")]
    times = [s[2] for s in full.samples]
    inside = sum(1 for a, b in pauses if times and min(times) <= a <= b <= max(times))
    need(len(pauses) >= collections and inside == len(pauses),
         f"GC markers: {len(pauses)} 'GC pause' spans for {collections} System.gc() calls, "
         f"{inside} inside the recording's time span")

    print(f"[{args.label}] control (lines=0 inline=0)")
    control = Run(args.control)
    c_looper, c_outer = control.looper(), control.outer()
    need(len(c_looper) >= MIN_SAMPLES and len(c_outer) >= MIN_SAMPLES,
         f"control setup: {len(c_looper)} looper, {len(c_outer)} outer samples in JIT code "
         f"(need {MIN_SAMPLES} each; inject succeeded)")
    c_lined = sum(1 for s in control.samples if s[5].startswith("Lines.java:"))
    c_inlined = sum(1 for s in control.samples if " <- " in s[4])
    c_helper = sum(1 for s in c_outer if s[4].startswith("LLines;helper(") or s[4].startswith("Lines.helper("))
    need(c_lined == 0 and c_inlined == 0 and c_helper == 0 and control.inlined_loads == 0,
         f"control shows neither: {c_lined} samples with a Lines.java line, {c_inlined} named "
         f"after an inlined range, {c_helper} outer samples named helper, "
         f"{control.inlined_loads} inlined-range loads")

    print(f"[{args.label}] attach (jcmd JVMTI.agent_load into the running JVM)")
    attach = Run(args.attach)
    after = attach.created_ns + ATTACH_SETTLE_NS
    a_looper = [s for s in attach.looper() if s[2] >= after]
    a_outer = [s for s in attach.outer() if s[2] >= after]
    right = (sum(1 for s in a_looper if s[4].startswith("Lines.spin("))
             + sum(1 for s in a_outer if s[4].startswith(("LLines;helper(", "Lines.outer("))))
    total = len(a_looper) + len(a_outer)
    before = sum(1 for s in attach.samples if s[2] < attach.created_ns)
    print(f"  {before} samples before the attach, {len(attach.samples) - before} after")
    need(len(a_looper) >= MIN_ATTACH_SAMPLES and len(a_outer) >= MIN_ATTACH_SAMPLES,
         f"attach setup: {len(a_looper)} looper, {len(a_outer)} outer samples after the attach "
         f"(need {MIN_ATTACH_SAMPLES} each)")
    need(fraction(right, total) >= MIN_ATTACH_FRACTION,
         f"named after their method after the attach: {right}/{total} = "
         f"{100 * fraction(right, total):.2f}% (need {100 * MIN_ATTACH_FRACTION:.0f}%)")

    print(f"LINES E2E [{args.label}] " + ("PASS" if not problems else "FAIL"))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
