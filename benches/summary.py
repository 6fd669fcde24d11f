#!/usr/bin/env python3
"""Prints the measurements tables from criterion's results: medians and the issue-12 ratios.

usage: python3 benches/summary.py [TARGET_DIR [BENCH_LOG]]
  TARGET_DIR defaults to $CARGO_TARGET_DIR or ./target; BENCH_LOG is the saved output of
  `cargo bench`, from which the CPU (vendor, model) and the paired ratios (printed by
  benches/read.rs) are added; the rdtsc target depends on the vendor.
"""
import json
import os
import re
import sys

target = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CARGO_TARGET_DIR", "target")
root = os.path.join(target, "criterion")


def median_ns(group, bench):
    path = os.path.join(root, group, bench, "new", "estimates.json")
    try:
        with open(path) as f:
            return json.load(f)["median"]["point_estimate"]
    except (OSError, KeyError, ValueError):
        return None


def dirname(name):
    # criterion's directory names: '/', ';', ':' and spaces kept, some characters replaced
    for ch in "/\\?*<>|\":":
        name = name.replace(ch, "_")
    return name


def lookup(group, bench):
    return median_ns(dirname(group), dirname(bench))


def fmt(ns):
    if ns is None:
        return "n/a"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} us"
    return f"{ns:.1f} ns"


READS = [
    ("perfclock::now_ns", "perf"),
    ("perfclock::try_now_ns", "perf"),
    ("Clock::now_ns", "perf"),
    ("PageReader::now_ns clock page", "perf (core reader, the clock's own page)"),
    ("PageReader::now_ns exact page", "perf (exact-mode parameters, ordinary memory)"),
    ("perfclock::now_ns_ordered", "perf, counter read after earlier instructions"),
    ("CounterStamp::now", "raw TSC cycles (deferred stamp)"),
    ("lfence; perfclock::now_ns", "perf, each read waits for the previous one"),
    ("rdtsc", "raw TSC cycles"),
    ("lfence;rdtsc", "raw TSC cycles"),
    ("rdtscp", "raw TSC cycles"),
    ("clock_gettime MONOTONIC", "CLOCK_MONOTONIC"),
    ("std Instant::now", "CLOCK_MONOTONIC"),
    ("quanta Clock::now", "TSC calibrated to CLOCK_MONOTONIC"),
    ("minstant Instant::now", "TSC calibrated to CLOCK_MONOTONIC"),
]

one = {name: lookup("read 1 thread", name) for name, _ in READS}
def per_thread(name, threads):
    return median_ns(dirname("read per thread"), os.path.join(dirname(name), f"{threads} threads"))


one_t = {name: per_thread(name, 1) for name, _ in READS}
two = {name: per_thread(name, 2) for name, _ in READS}
print("| read | time domain | median (wall) | per thread CPU, 1 thread | per thread CPU, 2 threads | 2 threads / 1 |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for name, domain in READS:
    a, a1, b = one[name], one_t[name], two[name]
    ratio = f"{b / a1:.2f}" if a1 and b else ""
    print(f"| `{name}` | {domain} | {fmt(a)} | {fmt(a1) if a1 else ''} | {fmt(b) if b else ''} | {ratio} |")

print()
now, raw, gettime, quanta = (one.get(k) for k in
                             ("perfclock::now_ns", "rdtsc", "clock_gettime MONOTONIC", "quanta Clock::now"))
print("| target | measured | met |")
print("| --- | ---: | --- |")


def target(label, value, limit, less=True):
    if value is None:
        print(f"| {label} | n/a | |")
        return
    ok = value <= limit if less else value >= limit
    print(f"| {label} | {value:.2f} | {'yes' if ok else 'no'} |")



log_lines = []
if len(sys.argv) > 2:
    with open(sys.argv[2]) as log:
        log_lines = log.readlines()
vendor = next((m.group(1) for line in log_lines
               for m in [re.match(r"cpu: vendor (\S+) model (.*)", line)] if m), None)
model = next((m.group(2).strip() for line in log_lines
              for m in [re.match(r"cpu: vendor (\S+) model (.*)", line)] if m), None)
# now_ns within 1.10x rdtsc on Intel (its rdtsc is cheap, so the work around it
# shows), 1.05x on AMD.
rdtsc_limit = 1.10 if vendor == "GenuineIntel" else 1.05
LIMITS = {
    "perfclock::now_ns / rdtsc": rdtsc_limit,
    "perfclock::now_ns / PageReader::now_ns clock page": 1.03,
    "perfclock::now_ns / clock_gettime MONOTONIC": 0.50,
    "perfclock::now_ns / quanta Clock::now": 1.00,
    "perfclock::now_ns_ordered / lfence;rdtsc": 1.15,
    "CounterStamp::now / rdtsc": 1.02,
    "perfclock::now_ns / floor": 1.05,
}

if now and raw:
    target(f"criterion medians: now_ns / rdtsc <= {rdtsc_limit}", now / raw, rdtsc_limit)
if now and gettime:
    target("criterion medians: now_ns / clock_gettime <= 0.50", now / gettime, 0.50)
if now and quanta:
    target("criterion medians: now_ns / quanta Clock::now <= 1.00", now / quanta, 1.00)
for name in ("perfclock::now_ns", "perfclock::now_ns_ordered", "Clock::now_ns",
             "PageReader::now_ns exact page"):
    if one_t.get(name) and two.get(name):
        target(f"per-thread CPU medians: {name}, 2 threads / 1 thread <= 1.10", two[name] / one_t[name], 1.10)

for line in log_lines:
    m = re.match(r"paired ratio (.*): median ([0-9.]+) \(p10 ([0-9.]+), p90 ([0-9.]+)\)", line)
    if m:
        label, median, p10, p90 = m.groups()
        bound = LIMITS.get(label)
        met = "" if bound is None else ("yes" if float(median) <= bound else "no")
        what = "for reference" if bound is None else f"target {bound}"
        print(f"| paired: {label} ({what}) | {median} (p10 {p10}, p90 {p90}) | {met} |")
if vendor:
    print()
    print(f"CPU: {vendor}, {model}")

print()
print("| open | median |")
print("| --- | ---: |")
for name in ("kernel page open+mmap+read+munmap", "Clock::open_kernel_only (fails here)",
             "Clock::open (calibrated)"):
    print(f"| `{name}` | {fmt(lookup('open', name))} |")
