#!/usr/bin/env python3
"""CLOCK_MONOTONIC - perf clock, paired every second for 60 s (the tightest of 2000 bracketed
reads each time), through the C ABI: how far the offset moves between the pairings perfclock
record takes once a second for CLOCK_MONOTONIC jitdumps. Usage: scripts/monotonic-drift.py
[LIBPERFCLOCK] (default target/release/libperfclock_ffi.so: cargo build --release -p
perfclock-ffi)."""
import ctypes
import sys
import time

lib = ctypes.CDLL(sys.argv[1] if len(sys.argv) > 1 else "target/release/libperfclock_ffi.so")
lib.perfclock_now_ns.restype = ctypes.c_uint64
lib.perfclock_init()
if lib.perfclock_now_ns() == 0:
    sys.exit("no perf clock here: run perfclock doctor for why")


def pair():
    """(width, CLOCK_MONOTONIC - perf clock at the middle) of the narrowest bracket."""
    best = None
    for _ in range(2000):
        before = lib.perfclock_now_ns()
        monotonic = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        after = lib.perfclock_now_ns()
        if best is None or after - before < best[0]:
            best = (after - before, monotonic - (before + after) // 2)
    return best


first = pair()
start = time.monotonic()
previous = first
for second in range(1, 61):
    time.sleep(1)
    current = pair()
    if second % 10 == 0:
        elapsed = time.monotonic() - start
        moved = current[1] - first[1]
        print(
            f"{elapsed:5.1f} s: offset moved {moved:+d} ns since the start "
            f"({moved / elapsed:+.1f} ns/s), bracket {current[0]} ns; "
            f"in the last second {current[1] - previous[1]:+d} ns"
        )
    previous = current
