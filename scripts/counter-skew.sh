#!/usr/bin/env bash
# Do this machine's CPUs agree on the counter? Two threads pinned to two CPUs hand the raw
# counter (x86_64 `lfence; rdtsc`, no perfclock involved) back and forth through one cache
# line; each reads its own counter after it has seen the other's value. The smallest difference
# seen in each direction is the one-way handoff latency plus the skew between the two counters:
# a negative minimum means the counter itself went back from one CPU to the other, which no
# conversion of it can hide (docs/serve.md, "Order across processes").
#
#   scripts/counter-skew.sh [ROUNDS]      (default 20 rounds of 2,000,000 handoffs; CPUs 0 and 1)
set -euo pipefail
rounds=${1:-20}
[ "$(uname -m)" = x86_64 ] || { echo "counter-skew: x86_64 only (rdtsc)" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "counter-skew: needs two CPUs" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/skew.c" <<'C'
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <x86intrin.h>

#define HANDOFFS 2000000
static _Atomic uint64_t cell;
static _Atomic int turn;
static int64_t smallest[2] = {INT64_MAX, INT64_MAX};

static uint64_t ordered(void) { _mm_lfence(); return __rdtsc(); }

static void *run(void *arg) {
    int me = (int)(intptr_t)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(me, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        perror("pthread_setaffinity_np");
        return (void *)1;
    }
    for (int i = 0; i < HANDOFFS; i++) {
        while (atomic_load_explicit(&turn, memory_order_acquire) != me) {
        }
        uint64_t theirs = atomic_load_explicit(&cell, memory_order_relaxed);
        int64_t difference = (int64_t)(ordered() - theirs);
        if ((i > 0 || me == 1) && difference < smallest[me]) smallest[me] = difference;
        atomic_store_explicit(&cell, ordered(), memory_order_relaxed);
        atomic_store_explicit(&turn, 1 - me, memory_order_release);
    }
    return 0;
}

int main(void) {
    pthread_t threads[2];
    void *failed[2];
    atomic_store(&cell, ordered());
    for (intptr_t i = 0; i < 2; i++) pthread_create(&threads[i], 0, run, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], &failed[i]);
    if (failed[0] || failed[1]) return 1;
    printf("cpu0->cpu1 %lld cpu1->cpu0 %lld\n", (long long)smallest[1], (long long)smallest[0]);
    return 0;
}
C
cc -O2 -pthread "$work/skew.c" -o "$work/skew"
echo "counter-skew: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $rounds rounds of 2,000,000 handoffs; smallest (own counter - other's), ticks:"
went_back=0
for _ in $(seq "$rounds"); do
    line=$("$work/skew")
    echo "  $line"
    read -r _ forward _ backward <<<"$line"
    if [ "$forward" -lt 0 ] || [ "$backward" -lt 0 ]; then went_back=$((went_back + 1)); fi
done
echo "counter-skew: the counter went back between the CPUs in $went_back of $rounds rounds"
