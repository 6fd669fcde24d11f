#!/usr/bin/env python3
"""Checks a perf recording of the JVM against the perfclock JVMTI agent's event log.

Usage: check_e2e.py AGENT_LOG PERF_SCRIPT_OUTPUT JAVA_PID

PERF_SCRIPT_OUTPUT is `perf script --ns -F comm,pid,tid,time,ip,sym` of a `perf record -g` run.
Each check runs twice: with the agent's perf-clock stamps, and with its CLOCK_MONOTONIC stamps
(the negative control: the same check must fail there, or it says nothing about clock domains).

GC check (strict, two-sided): every sample of a Parallel GC worker thread ("GC Thread#N") whose
call chain is inside a collector task (`...::work`) lies inside a [gc_start, gc_finish] window the
agent stamped, widened by the clock's error bound. Task samples only, because the same threads
also run safepoint-cleanup tasks (ParallelSPCleanupTask) at every safepoint, before
GarbageCollectionStart or without any collection, and wake up/go to sleep outside the windows.

JIT check: every sample whose ip lies in the workload's compiled code (methods of class Workload,
compiled once the JVM is up; JDK methods compiled during start-up wait for the Service thread to
start and are only reported) comes after that code's code_load stamp.
HotSpot installs an nmethod first and posts CompiledMethodLoad later from the Service thread, so
code can legitimately run before the agent's stamp (by milliseconds on two busy vCPUs). Samples
before the stamp are counted and reported; only those more than JIT_POSTING_ALLOWANCE_NS before
it fail the check. This check is therefore coarse; the GC check is the sharp one.

Exit status 0 when the perf-clock checks pass, the negative control's GC check fails, and there
were enough samples for both to mean something; 1 otherwise.
"""
import bisect
import re
import sys
from collections import defaultdict

GC_THREAD = re.compile(r"^GC Thread#\d+$")
GC_TASK_FRAME = re.compile(r"\w::work\b")
NOT_GC_WORK = re.compile(r"ParallelSPCleanupTask|SafepointSynchronize")
HEADER = re.compile(r"^(\S.*?)\s+(\d+)/(\d+)\s+(\d+)\.(\d{9}):\s*([0-9a-f]+)?")
FRAME = re.compile(r"^\s+([0-9a-f]+)\s*(.*)$")
MIN_GC_WINDOWS = 20
MIN_GC_WORK_SAMPLES = 100
MIN_JIT_SAMPLES = 200
JIT_POSTING_ALLOWANCE_NS = 50_000_000
JIT_CHECKED_CODE = re.compile(r"^Workload::")


def parse_log(path):
    header = {}
    gc = []  # (kind, perf_ns, mono_ns)
    code = []  # (addr, size, perf_ns, mono_ns, name)
    with open(path) as f:
        for line in f:
            if line.startswith("# perfclock-jvmti"):
                for word in line.split():
                    if "=" in word:
                        k, v = word.split("=", 1)
                        header[k] = v
                continue
            if line.startswith("#") or not line.strip():
                continue
            parts = line.rstrip("\n").split(" ", 6)
            kind, perf, mono = parts[0], int(parts[1]), int(parts[2])
            if kind in ("gc_start", "gc_finish"):
                gc.append((kind, perf, mono))
            elif kind == "code_load":
                code.append((int(parts[4], 16), int(parts[5]), perf, mono, parts[6]))
    return header, gc, code


def parse_samples(path, pid):
    """[(time_ns, comm, tid, leaf_ip, [frame symbols])] for samples of `pid`."""
    samples, current = [], None
    with open(path, errors="replace") as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                current = None
                if int(m.group(2)) != pid:
                    continue
                t = int(m.group(4)) * 1_000_000_000 + int(m.group(5))
                ip = int(m.group(6), 16) if m.group(6) else None
                current = [t, m.group(1), int(m.group(3)), ip, []]
                samples.append(current)
                continue
            fm = FRAME.match(line)
            if fm and current is not None:
                if current[3] is None:
                    current[3] = int(fm.group(1), 16)
                current[4].append(fm.group(2))
    return [tuple(s) for s in samples if s[3] is not None]


def is_gc_work(sample):
    frames = sample[4]
    return (GC_THREAD.match(sample[1]) is not None
            and any(GC_TASK_FRAME.search(f) for f in frames)
            and not any(NOT_GC_WORK.search(f) for f in frames))


def gc_windows(gc, column):
    """Pairs gc_start/gc_finish in log order (the VM thread writes them in order)."""
    windows, start, unpaired = [], None, 0
    for kind, perf, mono in gc:
        t = perf if column == "perf" else mono
        if kind == "gc_start":
            if start is not None:
                unpaired += 1
            start = t
        elif start is not None:
            windows.append((start, t))
            start = None
        else:
            unpaired += 1
    return sorted(windows), unpaired


def window_distance(windows, starts, t, tolerance):
    """0 if t is inside a window (widened by tolerance), else ns to the nearest edge."""
    i = bisect.bisect_right(starts, t + tolerance) - 1
    if i >= 0 and t <= windows[i][1] + tolerance:
        return 0
    gaps = []
    if i >= 0:
        gaps.append(t - windows[i][1])
    if i + 1 < len(windows):
        gaps.append(windows[i + 1][0] - t)
    return min(gaps) if gaps else float("inf")


def check_jit(samples, code, column):
    """Samples in code_load ranges: after the earliest load stamp covering their ip, or before."""
    idx = 2 if column == "perf" else 3
    blobs = sorted((c[0], c[0] + c[1], c[idx]) for c in code)
    starts = [b[0] for b in blobs]
    max_len = max((b[1] - b[0] for b in blobs), default=0)
    after, before, margins = 0, [], []
    for t, _, _, ip, _ in samples:
        lo = bisect.bisect_left(starts, ip - max_len)
        hi = bisect.bisect_right(starts, ip)
        loads = [b[2] for b in blobs[lo:hi] if b[0] <= ip < b[1]]
        if not loads:
            continue
        first_load = min(loads)
        if t >= first_load:
            after += 1
            margins.append(t - first_load)
        else:
            before.append(first_load - t)
    return after, before, margins


def us(ns):
    return f"{ns / 1000:.1f} us"


def main():
    log_path, script_path, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
    header, gc, code = parse_log(log_path)
    samples = parse_samples(script_path, pid)
    bound = int(header.get("error_bound_ns", "0"))
    mode = {"1": "kernel", "2": "calibrated"}.get(header.get("mode"), "none")
    print(f"agent: perfclock mode {mode}, error bound {bound} ns; {len(gc)} GC events, "
          f"{len(code)} code_load events")
    if mode == "none" or bound > 10**9:
        print("E2E FAIL: the agent had no working perf clock")
        return 1
    pairs = sorted(p - m for _, p, m in gc) or sorted(c[2] - c[3] for c in code)
    if pairs:
        print(f"perf clock - CLOCK_MONOTONIC at the agent's stamps: median {pairs[len(pairs) // 2]}"
              f" ns")
    gc_thread = [s for s in samples if GC_THREAD.match(s[1])]
    gc_work = [s for s in gc_thread if is_gc_work(s)]
    print(f"perf: {len(samples)} samples of pid {pid}; {len(gc_thread)} in GC worker threads, "
          f"{len(gc_work)} of them inside a collector task")

    results = {}
    for column, label in (("perf", "perfclock"), ("mono", "CLOCK_MONOTONIC")):
        windows, unpaired = gc_windows(gc, column)
        starts = [w[0] for w in windows]
        tolerance = bound if column == "perf" else 0
        misses = [d for d in (window_distance(windows, starts, s[0], tolerance) for s in gc_work)
                  if d > 0]
        idle_out = sum(1 for s in gc_thread if not is_gc_work(s)
                       and window_distance(windows, starts, s[0], tolerance) > 0)
        paused = sum(b - a for a, b in windows)
        after, before, margins = check_jit(
            samples, [c for c in code if JIT_CHECKED_CODE.match(c[4])], column)
        o_after, o_before, _ = check_jit(
            samples, [c for c in code if not JIT_CHECKED_CODE.match(c[4])], column)
        late = [b for b in before if b > JIT_POSTING_ALLOWANCE_NS]
        print(f"[{label}] GC: {len(windows)} windows ({unpaired} unpaired events, "
              f"{paused / 1e6:.1f} ms paused); collector-task samples: "
              f"{len(gc_work) - len(misses)} inside, {len(misses)} outside"
              + (f" (by {us(min(misses))} .. {us(max(misses))})" if misses else "")
              + f"; other GC-thread samples outside windows (not checked): {idle_out}")
        print(f"[{label}] JIT: samples in Workload code: {after} after their code_load stamp, "
              f"{len(before)} before it"
              + (f" (by {us(min(before))} .. {us(max(before))})" if before else "")
              + f", {len(late)} more than {JIT_POSTING_ALLOWANCE_NS // 1_000_000} ms before"
              + (f"; closest after-load sample {us(min(margins))}" if margins else ""))
        print(f"[{label}] JIT, other compiled code (not checked): {o_after} samples after load, "
              f"{len(o_before)} before" + (f" (by up to {us(max(o_before))})" if o_before else ""))
        results[column] = dict(windows=len(windows), unpaired=unpaired, gc_out=len(misses),
                               jit=after + len(before), jit_before=len(before),
                               jit_late=len(late))

    # Resolution (informational): how many collector-task samples a wrong offset would move out.
    windows, _ = gc_windows(gc, "perf")
    resolution = []
    for shift in (-1_000_000, -100_000, 100_000, 1_000_000):
        shifted = [(a + shift, b + shift) for a, b in windows]
        starts = [w[0] for w in shifted]
        out = sum(1 for s in gc_work if window_distance(shifted, starts, s[0], 0) > 0)
        resolution.append(f"{shift / 1000:+.0f} us: {out}")
    print("[perfclock] GC check resolution, collector-task samples outside if the stamps were "
          "off by " + ", ".join(resolution))

    p, m = results["perf"], results["mono"]
    problems = []
    if p["windows"] < MIN_GC_WINDOWS:
        problems.append(f"only {p['windows']} GC windows (need {MIN_GC_WINDOWS})")
    if p["unpaired"]:
        problems.append(f"{p['unpaired']} unpaired GC events")
    if len(gc_work) < MIN_GC_WORK_SAMPLES:
        problems.append(f"only {len(gc_work)} collector-task samples (need {MIN_GC_WORK_SAMPLES})")
    if p["jit"] < MIN_JIT_SAMPLES:
        problems.append(f"only {p['jit']} samples in Workload code (need {MIN_JIT_SAMPLES})")
    perf_ok = p["gc_out"] == 0 and p["jit_late"] == 0
    control_fails = m["gc_out"] > 0
    print(f"RESULT perfclock stamps: {'PASS' if perf_ok else 'FAIL'} "
          f"(collector-task samples outside GC windows: {p['gc_out']}; JIT samples more than "
          f"the posting allowance before load: {p['jit_late']}; within it: "
          f"{p['jit_before'] - p['jit_late']})")
    print(f"RESULT negative control, CLOCK_MONOTONIC stamps: "
          + ("FAILS, as it must" if control_fails else
             "PASSES: the GC check cannot tell the clock domains apart here")
          + f" (collector-task samples outside GC windows: {m['gc_out']}; JIT samples before "
          f"load: {m['jit_before']})")
    for problem in problems:
        print(f"RESULT not enough evidence: {problem}")
    ok = perf_ok and control_fails and not problems
    print("E2E " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
