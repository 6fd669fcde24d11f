/* The C program of tests/e2e/packages/run.sh, compiled with `pkg-config --cflags --libs perfclock`
 * alone: opens the clock, writes a jitdump with one code load into DIR, and prints the mode. */
#include <perfclock.h>
#include <stdint.h>
#include <stdio.h>

static int add_one(int x) { return x + 1; }

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    int rc = perfclock_init();
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "perfclock_init: %s\n", perfclock_strerror(rc));
        return 1;
    }
    uint64_t first = perfclock_now_ns();
    perfclock_jitdump *jd = NULL;
    rc = perfclock_jitdump_open(argv[1], &jd);
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "perfclock_jitdump_open: %s\n", perfclock_strerror(rc));
        return 1;
    }
    rc = perfclock_jitdump_code_load(jd, "add_one", (uint64_t)(uintptr_t)&add_one,
                                     (const void *)&add_one, 16);
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "perfclock_jitdump_code_load: %s\n", perfclock_strerror(rc));
        return 1;
    }
    rc = perfclock_jitdump_close(jd);
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "perfclock_jitdump_close: %s\n", perfclock_strerror(rc));
        return 1;
    }
    uint64_t last = perfclock_now_ns();
    if (first == 0 || last < first) {
        fprintf(stderr, "clock readings %llu then %llu\n", (unsigned long long)first,
                (unsigned long long)last);
        return 1;
    }
    printf("mode=%d bound_ns=%llu first=%llu last=%llu\n", perfclock_mode(),
           (unsigned long long)perfclock_error_bound_ns(), (unsigned long long)first,
           (unsigned long long)last);
    return add_one(-1);
}
