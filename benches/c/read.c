/*
 * The C ABI's reads against their floors, in one process, paired round by round: what a C
 * program linked with libperfclock.a pays (scripts/c-read-bench.sh builds and runs it).
 *
 *   rdtsc                 the counter alone
 *   floor                 rdtsc and the perf page's arithmetic inline, under a seqlock, from a
 *                         page in this program (no library): what a read cannot go below
 *   perfclock_now_ns      the library's read, in whatever mode init() chose
 *   lfence;rdtsc          the ordered counter
 *   perfclock_now_ns_ordered
 *   clock_gettime         CLOCK_MONOTONIC through the vDSO, for scale
 *
 * Each round times CALLS calls of each, in an order that rotates with the round; every ratio is
 * taken within a round (same CPU state), and the medians of those ratios are printed with the
 * medians of each read's ns per call. x86_64 only.
 *
 * Usage: read [ROUNDS]   (default 41)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#include "perfclock.h"

#define CALLS 100000
#define KINDS 6
#define MAX_ROUNDS 1001

/* The fields of perf_event_mmap_page the floor reads, in its layout's spirit. */
struct floor_page {
    volatile uint32_t lock;
    uint16_t time_shift;
    uint32_t time_mult;
    uint64_t time_zero;
};

static struct floor_page page;
static volatile uint64_t sink;

static inline uint64_t floor_read(const struct floor_page *p)
{
    uint32_t seq;
    uint64_t cyc, quot, rem, ns;
    do {
        seq = p->lock;
        __asm__ volatile("" ::: "memory");
        cyc = __rdtsc();
        quot = cyc >> p->time_shift;
        rem = cyc & (((uint64_t)1 << p->time_shift) - 1);
        ns = p->time_zero + quot * p->time_mult + ((rem * p->time_mult) >> p->time_shift);
        __asm__ volatile("" ::: "memory");
    } while (p->lock != seq);
    return ns;
}

static uint64_t monotonic_raw_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double time_kind(int kind)
{
    uint64_t start = monotonic_raw_ns(), acc = 0;
    int i;
    switch (kind) {
    case 0:
        for (i = 0; i < CALLS; i++)
            acc += __rdtsc();
        break;
    case 1:
        for (i = 0; i < CALLS; i++)
            acc += floor_read(&page);
        break;
    case 2:
        for (i = 0; i < CALLS; i++)
            acc += perfclock_now_ns();
        break;
    case 3:
        for (i = 0; i < CALLS; i++) {
            _mm_lfence();
            acc += __rdtsc();
        }
        break;
    case 4:
        for (i = 0; i < CALLS; i++)
            acc += perfclock_now_ns_ordered();
        break;
    default:
        for (i = 0; i < CALLS; i++)
            acc += monotonic_raw_ns();
        break;
    }
    sink = acc;
    return (double)(monotonic_raw_ns() - start) / CALLS;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n)
{
    qsort(values, (size_t)n, sizeof *values, by_value);
    return values[n / 2];
}

int main(int argc, char **argv)
{
    static const char *names[KINDS] = {
        "rdtsc", "floor", "perfclock_now_ns", "lfence;rdtsc", "perfclock_now_ns_ordered",
        "clock_gettime(CLOCK_MONOTONIC)",
    };
    static const char *modes[] = {"none", "kernel", "calibrated", "shared", "paravirt"};
    static double ns[KINDS][MAX_ROUNDS], ratios[4][MAX_ROUNDS];
    int rounds = argc > 1 ? atoi(argv[1]) : 41, rc, mode, r, k;
    uint64_t ns_per_2_31;

    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: %s [ROUNDS (1-%d)]\n", argv[0], MAX_ROUNDS);
        return 2;
    }
    rc = perfclock_init();
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "perfclock_init: %s\n", perfclock_strerror(rc));
        return 1;
    }
    /* The floor's conversion: the library's own slope, shift 31 as the kernel's pages have it. */
    ns_per_2_31 = perfclock_cycles_to_ns((uint64_t)1 << 31);
    page.time_shift = 31;
    page.time_mult = (uint32_t)ns_per_2_31;
    page.time_zero = perfclock_now_ns() - floor_read(&page);
    for (r = 0; r < rounds; r++) {
        for (k = 0; k < KINDS; k++) {
            int kind = (k + r) % KINDS;
            ns[kind][r] = time_kind(kind);
        }
        ratios[0][r] = ns[2][r] / ns[1][r];
        ratios[1][r] = ns[2][r] / ns[0][r];
        ratios[2][r] = ns[4][r] / ns[3][r];
        ratios[3][r] = ns[2][r] / ns[5][r];
    }
    mode = perfclock_mode();
    printf("mode %s, error bound %llu ns, %d rounds of %d calls each\n",
           mode >= 0 && mode <= PERFCLOCK_MODE_PARAVIRT ? modes[mode] : "?",
           (unsigned long long)perfclock_error_bound_ns(), rounds, CALLS);
    for (k = 0; k < KINDS; k++)
        printf("%-32s %6.2f ns\n", names[k], median(ns[k], rounds));
    printf("paired: perfclock_now_ns / floor %.3f\n", median(ratios[0], rounds));
    printf("paired: perfclock_now_ns / rdtsc %.3f\n", median(ratios[1], rounds));
    printf("paired: perfclock_now_ns_ordered / lfence;rdtsc %.3f\n", median(ratios[2], rounds));
    printf("paired: perfclock_now_ns / clock_gettime %.3f\n", median(ratios[3], rounds));
    return 0;
}
