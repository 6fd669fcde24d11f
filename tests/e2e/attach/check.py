#!/usr/bin/env python3
"""Checks one `perfclock attach` end-to-end run (run.sh beside this file): a JVM started without
an agent, recorded with `perf record -g -p PID` (perf's default clock), given the agent by
`perfclock attach`, then `perfclock inject-time-conv` and `perf inject --jit`.

Definitions
  attach time: the earliest CODE_LOAD stamp in the agent's jitdump, converted to the perf clock
    with the dump's own .timeconv record (the agent's first records are the replay of what was
    compiled before it came: GenerateEvents in Agent_OnAttach).
  hot sample: a sample of the Java pid in thread phaseA, phaseB or phaseC whose leaf ip lies in
    the code range of a CODE_LOAD of any phase class (Workload$PhaseX). Each phase thread
    runs only its own class's code, so the right class is known without asking perf.
  named right: perf script names the leaf with a method of the thread's class
    (`Workload$PhaseA.` as perf demangles it, or `LWorkload$PhaseA;` as written).

Pass: at least MIN_SAMPLES hot samples after the attach time, at least MIN_RIGHT of them named
right; and the control: of the hot samples taken before the attach time (the same code, running
before any agent was there; at least MIN_BEFORE of them), at most MAX_BEFORE_NAMED are named, so
the names after come from the attach's records and their stamps. Exit 0 on pass, 1 otherwise;
the figures are printed either way.
"""
import argparse
import bisect
import os
import re
import sys

# The jitdump, .timeconv and conversion readers of the JVM end-to-end check, one copy.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "jvm-attribution"))
from check_attribution import counter_to_perf_ns, names_class, parse_jitdump, parse_timeconv  # noqa: E402

WORKLOAD = "Workload"
PHASE_THREADS = {f"phase{p}": f"{WORKLOAD}$Phase{p}" for p in "ABC"}
# comm pid/tid secs.nanos: ip sym (dso); comm may hold spaces, a Java symbol holds parentheses.
SAMPLE = re.compile(r"^\s*(.*?)\s+(\d+)/(\d+)\s+(\d+)\.(\d{9}):\s+([0-9a-f]+)\s+(.*?)\s+\(([^()]*)\)\s*$")
MIN_SAMPLES = 1000
MIN_RIGHT = 0.90
MIN_BEFORE = 100
MAX_BEFORE_NAMED = 0.10

def names_any_phase(name):
    return any(names_class(name, c) for c in PHASE_THREADS.values())


class CodeRanges:
    def __init__(self, loads):
        self.loads = sorted(loads)
        self.starts = [l[0] for l in self.loads]
        self.max_len = max((l[1] - l[0] for l in self.loads), default=0)

    def covers(self, ip):
        lo = bisect.bisect_left(self.starts, ip - self.max_len)
        hi = bisect.bisect_right(self.starts, ip)
        return any(l[0] <= ip < l[1] for l in self.loads[lo:hi])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pid", type=int, required=True, help="the JVM's pid as perf recorded it")
    parser.add_argument("--dump", required=True, help="the agent's jit-<pid>.dump")
    parser.add_argument("--script", required=True,
                        help="perf script --ns -G -F comm,pid,tid,time,ip,sym,dso of jitted.data")
    parser.add_argument("--label", default="", help="what this run is, for the output")
    args = parser.parse_args()

    loads = parse_jitdump(args.dump)
    conv = parse_timeconv(args.dump + ".timeconv")
    phase_loads = [l for l in loads if names_any_phase(l[3])]
    if not phase_loads:
        print(f"{args.label}: FAIL: no CODE_LOAD of a phase class in {args.dump} ({len(loads)} loads)")
        return 1
    attach_ns = min(counter_to_perf_ns(conv, l[2]) for l in loads)
    ranges = CodeRanges(phase_loads)

    after = before = right = named_before = 0
    wrong_kinds = {}
    with open(args.script, errors="replace") as f:
        for line in f:
            m = SAMPLE.match(line)
            if not m or int(m.group(2)) != args.pid:
                continue
            cls = PHASE_THREADS.get(m.group(1))
            if cls is None or not ranges.covers(int(m.group(6), 16)):
                continue
            time_ns = int(m.group(4)) * 1_000_000_000 + int(m.group(5))
            sym = m.group(7)
            if time_ns >= attach_ns:
                after += 1
                if names_class(sym, cls):
                    right += 1
                else:
                    kind = "unnamed" if sym.startswith("[unknown]") else (
                        "another phase" if names_any_phase(sym) else "another name")
                    wrong_kinds[kind] = wrong_kinds.get(kind, 0) + 1
            else:
                before += 1
                named_before += names_any_phase(sym)

    fraction = right / after if after else 0.0
    before_fraction = named_before / before if before else 1.0
    print(f"{args.label}: {len(loads)} code loads ({len(phase_loads)} of phase classes); hot "
          f"samples after the attach: {after}, named right {right} ({100 * fraction:.2f}%; wrong: "
          f"{', '.join(f'{n} {k}' for k, n in sorted(wrong_kinds.items())) or 'none'}); before the "
          f"attach: {before}, named {named_before} ({100 * before_fraction:.2f}%)")
    failures = []
    if after < MIN_SAMPLES:
        failures.append(f"only {after} hot samples after the attach (< {MIN_SAMPLES})")
    if fraction < MIN_RIGHT:
        failures.append(f"{100 * fraction:.2f}% named right after the attach (< {100 * MIN_RIGHT:.0f}%)")
    if before < MIN_BEFORE:
        failures.append(f"control not set up: only {before} hot samples before the attach (< {MIN_BEFORE})")
    elif before_fraction > MAX_BEFORE_NAMED:
        failures.append(f"control: {100 * before_fraction:.2f}% of the samples before the attach are "
                        f"named (> {100 * MAX_BEFORE_NAMED:.0f}%): the names do not depend on the attach")
    for failure in failures:
        print(f"{args.label}: FAIL: {failure}")
    if not failures:
        print(f"{args.label}: PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
