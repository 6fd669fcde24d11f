/*
 * The `phases` example through the C ABI: rounds of three named phases (hash, sort, write_file)
 * in functions phase_hash, phase_sort and phase_write_file, each stamped with perfclock_now_ns()
 * and written with perfclock_marker(); optionally a control marker "late <phase>" stamped
 * LATE_NS later, and a marker whose name holds a newline and invalid UTF-8.
 *
 *   phases_c DIR ROUNDS PHASE_MS [LATE_NS]
 *
 * Built and run by tests/e2e/markers/run.sh against libperfclock_ffi.a.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "perfclock.h"

static volatile uint64_t sink;

__attribute__((noinline, noclone)) void phase_hash(uint64_t deadline_ns)
{
    uint64_t h = 0xcbf29ce484222325u, i = 0;
    while (perfclock_now_ns() < deadline_ns) {
        for (int k = 0; k < 256; k++, i++)
            h = (h ^ i) * 0x100000001b3u;
    }
    sink ^= h;
}

__attribute__((noinline, noclone)) void phase_sort(uint64_t deadline_ns, uint32_t *v, size_t n)
{
    uint32_t seed = 0x2545f491u;
    while (perfclock_now_ns() < deadline_ns) {
        for (size_t k = 0; k < n; k++) {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            v[k] = seed;
        }
        for (size_t k = 1; k < n; k++)
            for (size_t j = k; j > 0 && v[j - 1] > v[j]; j--) {
                uint32_t t = v[j - 1];
                v[j - 1] = v[j];
                v[j] = t;
            }
    }
    sink ^= v[n / 2];
}

__attribute__((noinline, noclone)) int phase_write_file(uint64_t deadline_ns, FILE *f,
                                                        unsigned char *block, size_t n)
{
    uint32_t x = 0x9e3779b9u;
    while (perfclock_now_ns() < deadline_ns) {
        for (size_t k = 0; k < n; k++) {
            x = x * 1664525u + 1013904223u;
            block[k] = (unsigned char)(x >> 24);
        }
        if (ftell(f) >= (4L << 20))
            rewind(f);
        if (fwrite(block, 1, n, f) != n)
            return -1;
    }
    return 0;
}

static int mark(perfclock_markers *m, const char *name, uint64_t start, uint64_t end,
                uint64_t late_ns)
{
    int rc = perfclock_marker(m, name, start, end);
    if (rc == PERFCLOCK_OK && late_ns) {
        char late[64];
        snprintf(late, sizeof late, "late %s", name);
        rc = perfclock_marker(m, late, start + late_ns, end + late_ns);
    }
    if (rc != PERFCLOCK_OK)
        fprintf(stderr, "phases_c: perfclock_marker(%s): %s\n", name, perfclock_strerror(rc));
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: phases_c DIR ROUNDS PHASE_MS [LATE_NS]\n");
        return 2;
    }
    const char *dir = argv[1];
    int rounds = atoi(argv[2]);
    uint64_t phase_ns = strtoull(argv[3], NULL, 10) * 1000000u;
    uint64_t late_ns = argc > 4 ? strtoull(argv[4], NULL, 10) : 0;

    int rc = perfclock_init();
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "phases_c: perfclock_init: %s\n", perfclock_strerror(rc));
        return 1;
    }
    perfclock_markers *m;
    rc = perfclock_markers_open(dir, &m);
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "phases_c: perfclock_markers_open(%s): %s\n", dir, perfclock_strerror(rc));
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/phases-c-data.bin", dir);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    static uint32_t values[256];
    static unsigned char block[16384];
    for (int r = 0; r < rounds; r++) {
        uint64_t s = perfclock_now_ns();
        phase_hash(s + phase_ns);
        if (mark(m, "hash", s, perfclock_now_ns(), late_ns))
            return 1;
        s = perfclock_now_ns();
        phase_sort(s + phase_ns, values, 256);
        if (mark(m, "sort", s, perfclock_now_ns(), late_ns))
            return 1;
        s = perfclock_now_ns();
        if (phase_write_file(s + phase_ns, f, block, sizeof block)) {
            perror(path);
            return 1;
        }
        if (mark(m, "write_file", s, perfclock_now_ns(), late_ns))
            return 1;
    }
    /* A hostile name: it must become one valid line, and samply must read past it. */
    uint64_t now = perfclock_now_ns();
    if (perfclock_marker(m, "bad \xff\xfe name\nwith a newline", now, now) != PERFCLOCK_OK)
        return 1;
    /* Errors are typed. */
    if (perfclock_marker(m, "", now, now) != PERFCLOCK_E_INVALID_ARGUMENT ||
        perfclock_marker(m, "backwards", now, now - 1) != PERFCLOCK_E_INVALID_ARGUMENT ||
        perfclock_marker(m, NULL, now, now) != PERFCLOCK_E_NULL_POINTER) {
        fprintf(stderr, "phases_c: wrong error codes\n");
        return 1;
    }
    perfclock_clock_snapshot snap;
    rc = perfclock_snapshot(&snap);
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "phases_c: perfclock_snapshot: %s\n", perfclock_strerror(rc));
        return 1;
    }
    fclose(f);
    rc = perfclock_markers_close(m);
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "phases_c: perfclock_markers_close: %s\n", perfclock_strerror(rc));
        return 1;
    }
    printf("phases_c: %d rounds; snapshot perf_ns %llu realtime_ns %llu +- %llu ns\n", rounds,
           (unsigned long long)snap.perf_ns, (unsigned long long)snap.realtime_ns,
           (unsigned long long)snap.realtime_uncertainty_ns);
    return 0;
}
