#!/usr/bin/env python3
"""Checks that `perf inject --jit` named the JVM's JIT-compiled code right, from the perfclock
agent's jitdump, and that the negative controls fail. run.sh runs the tools and calls this.

Inputs (all from one `perf record -g -e cpu-clock` run of Workload.java under the agent):
  --dump            the agent's jit-<pid>.dump (its .timeconv record next to it)
  --raw-script      `perf script --ns -G -F comm,pid,tid,time,ip,sym,dso` of perf.data (no inject)
  --script          the same of jitted.data: perf.data + perfclock's TIME_CONV + perf inject --jit
  --shifted-script  the same with a TIME_CONV whose time_zero is 200 ms late (control)
  --noconv-status, --noconv-stderr: `perf inject --jit` on perf.data without TIME_CONV (control)
  --log             the agent's log (optional; CLOCK_MONOTONIC figures, information only)

Definitions
  phase sample: a sample of the Java pid in thread phaseA, phaseB or phaseC. Those threads run
    only the code of Workload$PhaseA, $PhaseB, $PhaseC respectively (Workload.java), so the
    class of every compiled frame they execute is known without asking perf.
  in JIT-compiled code: a phase sample whose leaf ip lies inside the code range of some
    compiled-method load in the jitdump (a CODE_LOAD whose name is a Java method, `class.name(`),
    of any method at any time. Timestamps play no part here, so a wrong clock cannot move a sample
    out of the denominator. Interpreter and stub samples (DynamicCodeGenerated loads) are not in it.
  attributed right: perf script names the leaf of such a sample with a method of the thread's
    class: for thread phaseA a symbol starting with `Workload$PhaseA.` (perf demangles the agent's
    `LWorkload$PhaseA;step(J)J` to `Workload$PhaseA.step(long)`) or, undemangled,
    `LWorkload$PhaseA;`. `[unknown]` or any other name is wrong.
  near a reload: the sample was taken less than CONTROL_SHIFT_NS after a code load covering its ip
    (in the perf clock, converted with the dump's own .timeconv record): the samples a late
    conversion misnames.

Pass: enough phase samples in JIT code, >= 95% of them attributed right; the no-TIME_CONV inject
refused (a non-zero status and perf's 'no timestamp conversion' message, nothing else); the
shifted control scores at least CONTROL_MIN_DROP percentage points lower and has more wrong
samples near reloads. Exit status 0 on pass, 1 otherwise; the figures are printed either way.
"""
import argparse
import bisect
import re
import statistics
import struct
import sys

PHASE_THREADS = {"phaseA": "Workload$PhaseA", "phaseB": "Workload$PhaseB",
                 "phaseC": "Workload$PhaseC"}
# A Java method in either of the agent's forms: `Lpkg/Class;name(` (names=jvm) or
# `pkg.Class.name(` (names=java, the default); stub names hold spaces or no `(`.
JAVA_METHOD = re.compile(r"^(L[^;]+;[^(;]+\(|[\w$/.]+\.[\w$<>]+\()")
# comm pid/tid secs.nanos: ip sym (dso); comm may hold spaces, a Java symbol holds parentheses.
SAMPLE = re.compile(r"^\s*(.*?)\s+(\d+)/(\d+)\s+(\d+)\.(\d{9}):\s+([0-9a-f]+)\s+(.*?)\s+\(([^()]*)\)\s*$")
MIN_JIT_SAMPLES = 2000
MIN_RIGHT_FRACTION = 0.95
CONTROL_SHIFT_NS = 200_000_000
CONTROL_MIN_DROP = 0.10
POSTING_DELAY_NS = 100_000_000
NOCONV_MESSAGE = "no timestamp conversion"

JITDUMP_MAGIC = 0x4A695444
JIT_CODE_LOAD = 0
JIT_CODE_CLOSE = 3


def parse_jitdump(path):
    """[(start, end, raw_timestamp, name)] of the dump's CODE_LOAD records, in file order."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 40:
        raise ValueError(f"{path}: shorter than a jitdump header")
    magic, version, header_size, _mach, _pad, _pid, _ts, flags = struct.unpack_from("<IIIIIIQQ", data)
    if magic != JITDUMP_MAGIC:
        raise ValueError(f"{path}: not a little-endian jitdump (magic {magic:#x})")
    if not flags & 1:
        raise ValueError(f"{path}: JITDUMP_FLAGS_ARCH_TIMESTAMP is not set")
    loads, pos = [], header_size
    while pos + 16 <= len(data):
        rec_id, size, ts = struct.unpack_from("<IIQ", data, pos)
        if size < 16 or pos + size > len(data):
            break  # a record cut short by the end of the run
        if rec_id == JIT_CODE_LOAD:
            _pid, _tid, vma, _code_addr, code_size, _index = struct.unpack_from("<IIQQQQ", data, pos + 16)
            name_start = pos + 56
            name_end = data.index(b"\0", name_start, pos + size)
            name = data[name_start:name_end].decode("utf-8", "replace")
            loads.append((vma, vma + code_size, ts, name))
        elif rec_id == JIT_CODE_CLOSE:
            break
        pos += size
    return loads


def parse_timeconv(path):
    """The .timeconv record as a dict of ints (and strings for the text keys)."""
    with open(path) as f:
        lines = f.read().splitlines()
    if not lines or lines[0] != "perfclock-timeconv 1":
        raise ValueError(f"{path}: first line is not 'perfclock-timeconv 1'")
    conv = {}
    for line in lines[1:]:
        key, _, value = line.partition("=")
        conv[key] = int(value) if value.isdigit() else value
    return conv


def counter_to_perf_ns(conv, cyc):
    """perf's tools/perf/util/tsc.c tsc_to_perf_time: the conversion perf inject applies."""
    if conv["cap_user_time_short"]:
        cyc = conv["time_cycles"] + ((cyc - conv["time_cycles"]) & conv["time_mask"])
    shift, mult = conv["time_shift"], conv["time_mult"]
    quot, rem = cyc >> shift, cyc & ((1 << shift) - 1)
    return (conv["time_zero"] + quot * mult + ((rem * mult) >> shift)) & (2**64 - 1)


def parse_script(path, pid):
    """[(time_ns, comm, tid, ip, sym, dso)] for the samples of `pid`."""
    samples = []
    with open(path, errors="replace") as f:
        for line in f:
            m = SAMPLE.match(line)
            if m and int(m.group(2)) == pid:
                samples.append((int(m.group(4)) * 1_000_000_000 + int(m.group(5)), m.group(1),
                                int(m.group(3)), int(m.group(6), 16), m.group(7), m.group(8)))
    return samples


def names_class(sym, cls):
    """Whether a symbol names a method of class `cls`, as the agent writes it or as perf
    demangles it."""
    return sym.startswith(f"L{cls};") or sym.startswith(f"{cls}.")


class CodeRanges:
    """Which compiled-method loads cover an address, and when (perf-clock ns)."""

    def __init__(self, loads):
        self.loads = sorted(loads)
        self.starts = [l[0] for l in self.loads]
        self.max_len = max((l[1] - l[0] for l in self.loads), default=0)

    def covering(self, ip):
        lo = bisect.bisect_left(self.starts, ip - self.max_len)
        hi = bisect.bisect_right(self.starts, ip)
        return [l for l in self.loads[lo:hi] if l[0] <= ip < l[1]]


def score(samples, ranges):
    """Phase samples in JIT code: (in_jit, right, wrong list of (sample, load times covering ip))."""
    in_jit, right, wrong = 0, 0, []
    for s in samples:
        cls = PHASE_THREADS.get(s[1])
        if cls is None:
            continue
        covering = ranges.covering(s[3])
        if not covering:
            continue
        in_jit += 1
        if names_class(s[4], cls):
            right += 1
        else:
            wrong.append((s, [l[2] for l in covering]))
    return in_jit, right, wrong


def near_reload(wrong):
    """How many wrong samples were taken within CONTROL_SHIFT_NS after a load covering their ip."""
    return sum(1 for s, times in wrong if any(0 <= s[0] - t < CONTROL_SHIFT_NS for t in times))


def before_own_load(wrong, ranges):
    """How many wrong samples were taken at most POSTING_DELAY_NS before a load of their own
    thread's class covering their ip: code HotSpot ran before its Service thread posted the load
    (information: no clock can fix these)."""
    count = 0
    for s, _ in wrong:
        cls = PHASE_THREADS[s[1]]
        count += any(names_class(l[3], cls) and 0 < l[2] - s[0] <= POSTING_DELAY_NS
                     for l in ranges.covering(s[3]))
    return count


def describe_wrong(wrong):
    kinds = {}
    for s, _ in wrong:
        sym = s[4]
        kind = ("unnamed ([unknown])" if sym.startswith("[unknown]") else
                "another phase's class" if any(names_class(sym, c) for c in PHASE_THREADS.values())
                else "another name")
        kinds[kind] = kinds.get(kind, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "none"


def reuse_figures(loads):
    """Compiled-method loads of the phase classes, and how many overlap an earlier load of a
    different phase class (an address a late conversion would name with the wrong class)."""
    phase = [l for l in loads if any(names_class(l[3], c) for c in PHASE_THREADS.values())]
    seen, crossed = [], 0
    for l in sorted(phase, key=lambda l: l[2]):
        cls = l[3].split(";", 1)[0]
        if any(a < l[1] and l[0] < b and c != cls for a, b, c in seen):
            crossed += 1
        seen.append((l[0], l[1], cls))
    return len(phase), crossed


def monotonic_info(log_path):
    """Median perf clock - CLOCK_MONOTONIC over the agent's code_load stamps (information)."""
    diffs = []
    with open(log_path) as f:
        for line in f:
            parts = line.split(" ", 3)
            if parts[0] in ("code_load", "dyn_code") and len(parts) > 3:
                diffs.append(int(parts[1]) - int(parts[2]))
    return statistics.median(diffs) if diffs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--raw-script", required=True)
    ap.add_argument("--script", required=True)
    ap.add_argument("--shifted-script", required=True)
    ap.add_argument("--noconv-status", type=int, required=True)
    ap.add_argument("--noconv-stderr", required=True)
    ap.add_argument("--log")
    args = ap.parse_args()

    conv = parse_timeconv(args.dump + ".timeconv")
    raw_loads = parse_jitdump(args.dump)
    loads = [(a, b, counter_to_perf_ns(conv, ts), name) for a, b, ts, name in raw_loads
             if JAVA_METHOD.match(name)]
    ranges = CodeRanges(loads)
    phase_loads, crossed = reuse_figures(loads)
    print(f"jitdump: {len(raw_loads)} code loads, {len(loads)} of Java methods, {phase_loads} of "
          f"the phase classes ({crossed} at addresses an earlier load of another phase class "
          f"had used); mode={conv.get('mode')} counter={conv.get('counter')} "
          f"error_bound_ns={conv.get('error_bound_ns')}")
    if args.log:
        median = monotonic_info(args.log)
        if median is not None:
            print(f"information only: perf clock - CLOCK_MONOTONIC at the agent's code stamps, "
                  f"median {median / 1e6:.3f} ms")

    raw = parse_script(args.raw_script, args.pid)
    raw_in_jit, raw_right, _ = score(raw, ranges)
    print(f"without inject: {len(raw)} samples of pid {args.pid}, {raw_in_jit} phase samples in "
          f"JIT code, {raw_right} of them named (no perf map was written, so expect 0)")

    problems = []
    results = {}
    for label, path in (("perfclock TIME_CONV", args.script),
                        ("control, time_zero +200 ms", args.shifted_script)):
        samples = parse_script(path, args.pid)
        in_jit, right, wrong = score(samples, ranges)
        phase = sum(1 for s in samples if s[1] in PHASE_THREADS)
        fraction = right / in_jit if in_jit else 0.0
        near = near_reload(wrong)
        results[label] = (in_jit, right, fraction, near)
        print(f"[{label}] samples of pid {args.pid}: {len(samples)}; in phase threads: {phase}; "
              f"in JIT-compiled code: {in_jit}; attributed right: {right} ({100 * fraction:.2f}%); "
              f"wrong: {len(wrong)} ({describe_wrong(wrong)}), {near} of them within "
              f"{CONTROL_SHIFT_NS // 1_000_000} ms after a load at their address, "
              f"{before_own_load(wrong, ranges)} at most {POSTING_DELAY_NS // 1_000_000} ms before a load "
              f"of their thread's class there (HotSpot posts loads late)")
        if len(samples) != len(raw):
            problems.append(f"{label}: {len(samples)} samples after inject, {len(raw)} before")

    good_in, good_right, good_fraction, good_near = results["perfclock TIME_CONV"]
    ctl_in, _, ctl_fraction, ctl_near = results["control, time_zero +200 ms"]
    if good_in < MIN_JIT_SAMPLES:
        problems.append(f"only {good_in} phase samples in JIT code (need {MIN_JIT_SAMPLES})")
    good_ok = good_fraction >= MIN_RIGHT_FRACTION
    print(f"RESULT attribution with perfclock's TIME_CONV: {'PASS' if good_ok else 'FAIL'} "
          f"({good_right}/{good_in} = {100 * good_fraction:.2f}% right, need "
          f"{100 * MIN_RIGHT_FRACTION:.0f}%)")

    with open(args.noconv_stderr, errors="replace") as f:
        noconv_err = f.read()
    # The control is about one refusal: perf's, for want of a conversion. Any other failure
    # (a crash, a missing file) proves nothing about the TIME_CONV record.
    refused = args.noconv_status != 0 and NOCONV_MESSAGE in noconv_err
    print(f"RESULT control, perf inject --jit without TIME_CONV: "
          + ("refused, as it must" if refused else
             "ACCEPTED: perf converted the dump without it" if args.noconv_status == 0 else
             "FAILED FOR ANOTHER REASON than the missing conversion")
          + f" (exit status {args.noconv_status}; "
          + (f"'{NOCONV_MESSAGE}' in its messages)" if NOCONV_MESSAGE in noconv_err
             else "no conversion message)"))

    shifted_fails = (ctl_fraction <= good_fraction - CONTROL_MIN_DROP and ctl_near > good_near
                     and ctl_in == good_in)
    print(f"RESULT control, time_zero 200 ms late: "
          + ("scores worse, as it must" if shifted_fails else "DOES NOT score worse")
          + f" ({100 * ctl_fraction:.2f}% right against {100 * good_fraction:.2f}%, need at least "
          f"{100 * CONTROL_MIN_DROP:.0f} points lower; wrong samples near reloads {ctl_near} "
          f"against {good_near})")
    for problem in problems:
        print(f"RESULT not enough evidence: {problem}")
    ok = good_ok and refused and shifted_fails and not problems
    print("E2E " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
