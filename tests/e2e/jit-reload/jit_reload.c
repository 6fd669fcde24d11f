/*
 * jit_reload: a minimal JIT that loads a DIFFERENT function at the SAME address every PERIOD_MS
 * milliseconds, records each through perfclock_jitdump_code_load() just before running it, and
 * spins in it until the next reload. Under `perf record` + `perfclock inject-time-conv` +
 * `perf inject --jit`, every sample in the region must name the function loaded at its time
 * (checked by check.py from this program's log).
 *
 * Usage: jit_reload DIR [RELOADS [PERIOD_MS]]   (defaults 12 and 200)
 *
 * Output (stdout), one fact per line:
 *   ok - <check> / not ok - <check>      C ABI checks of the jitdump functions
 *   mode <n> bound_ns <n>                 perfclock_mode() and perfclock_error_bound_ns()
 *   region <addr hex> <len>               the executable region every function is loaded at
 *   load <k> <name> <addr hex> <size> <before_ns> <after_ns>
 *       before_ns: perfclock_now_ns() after the previous function last returned, before the
 *       new code is written; after_ns: after perfclock_jitdump_code_load() returned, before the
 *       new function first runs. So the previous function ran only before before_ns and the
 *       new one only after after_ns.
 *   end <ns>                              after the last function last returned
 *   dump <path>
 * With JIT_RELOAD_MARKERS=1 in the environment it also writes a marker per function, "phase
 * jit_fn_<k>" from after_ns to the moment the function last returned, to DIR/marker-<pid>.txt
 * (perfclock_markers_open: the clock PERFCLOCK_MARKERS_CLOCK names), so a profiler that shows
 * both (samply) can be checked against them on its own time axis. JIT_RELOAD_MARKER_SHIFT_NS=N
 * moves every marker N ns later (a negative control). The jitdump's clock is the one
 * PERFCLOCK_JITDUMP_CLOCK names (perfclock_jitdump_open).
 * Exit status 0 only if every check and call succeeded.
 *
 * x86_64 only: the functions are hand-assembled x86-64 machine code.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "perfclock.h"

#if !defined(__x86_64__)
#error "jit_reload hand-assembles x86-64 code"
#endif

#define REGION_LEN 4096
/* Iterations per call of a jitted function: well under a millisecond, so the period is kept. */
#define CALL_ITERATIONS 100000

static int failures;

static void check(int ok, const char *what)
{
    printf("%s - %s\n", ok ? "ok" : "not ok", what);
    if (!ok)
        failures++;
}

/*
 * Function k, for k < 64: `uint64_t f(uint64_t n)` looping n times over a body unique to k.
 *   mov rax, rdi
 * L: add rcx, k ; k % 8 + 1 nops ; (odd k) imul rdx, rdx, k
 *   dec rax ; jnz L ; ret
 * Returns the code's length.
 */
static size_t assemble(unsigned k, unsigned char *out)
{
    size_t n = 0, loop;
    unsigned i;
    out[n++] = 0x48; out[n++] = 0x89; out[n++] = 0xf8;                 /* mov rax, rdi */
    loop = n;
    out[n++] = 0x48; out[n++] = 0x83; out[n++] = 0xc1; out[n++] = (unsigned char)k; /* add rcx,k */
    for (i = 0; i < k % 8 + 1; i++)
        out[n++] = 0x90;                                               /* nop */
    if (k % 2) {
        out[n++] = 0x48; out[n++] = 0x6b; out[n++] = 0xd2; out[n++] = (unsigned char)k; /* imul */
    }
    out[n++] = 0x48; out[n++] = 0xff; out[n++] = 0xc8;                 /* dec rax */
    out[n++] = 0x75;                                                   /* jnz loop */
    out[n] = (unsigned char)(int8_t)(loop - (n + 1));
    n++;
    out[n++] = 0xc3;                                                   /* ret */
    return n;
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The ABI's refusals, on a handle that works. */
static void abi_checks(perfclock_jitdump *jd)
{
    static const unsigned char ret = 0xc3;
    perfclock_jitdump *none = NULL;
    char path[] = "/tmp/jit_reload_not_a_dir_XXXXXX";
    int fd;

    check(perfclock_jitdump_open(NULL, &none) == PERFCLOCK_E_NULL_POINTER && none == NULL,
          "open(NULL dir) is PERFCLOCK_E_NULL_POINTER");
    check(perfclock_jitdump_open("/tmp", NULL) == PERFCLOCK_E_NULL_POINTER,
          "open(NULL out) is PERFCLOCK_E_NULL_POINTER");
    fd = mkstemp(path);
    if (fd >= 0) {
        /* A regular file as the directory fails for root too. */
        check(perfclock_jitdump_open(path, &none) == PERFCLOCK_E_IO && none == NULL,
              "open(a regular file) is PERFCLOCK_E_IO");
        close(fd);
        unlink(path);
    } else {
        check(0, "mkstemp for the not-a-directory check");
    }
    check(perfclock_jitdump_code_load(NULL, "f", 0x1000, &ret, 1) == PERFCLOCK_E_NULL_POINTER,
          "code_load(NULL handle) is PERFCLOCK_E_NULL_POINTER");
    check(perfclock_jitdump_code_load(jd, NULL, 0x1000, &ret, 1) == PERFCLOCK_E_NULL_POINTER,
          "code_load(NULL name) is PERFCLOCK_E_NULL_POINTER");
    check(perfclock_jitdump_code_load(jd, "f", 0x1000, NULL, 1) == PERFCLOCK_E_NULL_POINTER,
          "code_load(NULL code) is PERFCLOCK_E_NULL_POINTER");
    check(perfclock_jitdump_code_load(jd, "f", 0x1000, &ret, 0) == PERFCLOCK_E_INVALID_ARGUMENT,
          "code_load(size 0) is PERFCLOCK_E_INVALID_ARGUMENT");
    check(perfclock_jitdump_close(NULL) == PERFCLOCK_E_NULL_POINTER,
          "close(NULL) is PERFCLOCK_E_NULL_POINTER");
}

int main(int argc, char **argv)
{
    const char *dir;
    long reloads = 12, period_ms = 200;
    perfclock_jitdump *jd = NULL;
    perfclock_markers *markers = NULL;
    uint64_t marker_shift = 0;
    unsigned char *region;
    unsigned char code[128];
    char name[32];
    uint64_t (*fn)(uint64_t);
    uint64_t sink = 0;
    int rc;
    long k;

    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s DIR [RELOADS [PERIOD_MS]]\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    if (argc > 2)
        reloads = strtol(argv[2], NULL, 10);
    if (argc > 3)
        period_ms = strtol(argv[3], NULL, 10);
    if (reloads < 1 || reloads > 64 || period_ms < 1) {
        fprintf(stderr, "RELOADS must be 1..64 and PERIOD_MS positive\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    rc = perfclock_init();
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "perfclock_init: %s\n", perfclock_strerror(rc));
        return 1;
    }
    printf("mode %d bound_ns %" PRIu64 "\n", perfclock_mode(), perfclock_error_bound_ns());

    rc = perfclock_jitdump_open(dir, &jd);
    if (rc != PERFCLOCK_OK) {
        fprintf(stderr, "perfclock_jitdump_open(%s): %s\n", dir, perfclock_strerror(rc));
        return 1;
    }
    abi_checks(jd);
    if (getenv("JIT_RELOAD_MARKER_SHIFT_NS"))
        marker_shift = strtoull(getenv("JIT_RELOAD_MARKER_SHIFT_NS"), NULL, 10);
    if (getenv("JIT_RELOAD_MARKERS")) {
        rc = perfclock_markers_open(dir, &markers);
        if (rc != PERFCLOCK_OK) {
            fprintf(stderr, "perfclock_markers_open(%s): %s\n", dir, perfclock_strerror(rc));
            perfclock_jitdump_close(jd);
            return 1;
        }
    }

    /*
     * One RWX mapping for the whole run: changing its protection per reload (W^X) would make
     * the kernel log a fresh anonymous executable mapping over the jitted image each time,
     * and perf would attribute later samples to that instead of the function.
     */
    region = mmap(NULL, REGION_LEN, PROT_READ | PROT_WRITE | PROT_EXEC,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) {
        fprintf(stderr, "mmap RWX: %s (a policy forbidding W+X mappings?)\n", strerror(errno));
        perfclock_jitdump_close(jd);
        return 1;
    }
    printf("region %" PRIxPTR " %d\n", (uintptr_t)region, REGION_LEN);
    memcpy(&fn, &region, sizeof fn);

    for (k = 0; k < reloads; k++) {
        uint64_t before, after, until;
        size_t size = assemble((unsigned)k, code);

        snprintf(name, sizeof name, "jit_fn_%ld", k);
        before = perfclock_now_ns();
        memcpy(region, code, size);
        __builtin___clear_cache((char *)region, (char *)region + size);
        rc = perfclock_jitdump_code_load(jd, name, (uint64_t)(uintptr_t)region, code, size);
        after = perfclock_now_ns();
        if (rc != PERFCLOCK_OK) {
            fprintf(stderr, "code_load %s: %s\n", name, perfclock_strerror(rc));
            failures++;
            break;
        }
        printf("load %ld %s %" PRIxPTR " %zu %" PRIu64 " %" PRIu64 "\n", k, name,
               (uintptr_t)region, size, before, after);
        until = monotonic_ns() + (uint64_t)period_ms * 1000000u;
        while (monotonic_ns() < until)
            sink += fn(CALL_ITERATIONS);
        if (markers) {
            char phase[48];
            snprintf(phase, sizeof phase, "phase %s", name);
            rc = perfclock_marker(markers, phase, after + marker_shift,
                                  perfclock_now_ns() + marker_shift);
            if (rc != PERFCLOCK_OK) {
                fprintf(stderr, "marker %s: %s\n", phase, perfclock_strerror(rc));
                failures++;
            }
        }
    }
    if (markers)
        check(perfclock_markers_close(markers) == PERFCLOCK_OK, "markers close");
    printf("end %" PRIu64 "\n", perfclock_now_ns());

    rc = perfclock_jitdump_close(jd);
    check(rc == PERFCLOCK_OK, "close");
    printf("dump %s/jit-%d.dump\n", dir, (int)getpid());
    /* Keeps the loops from being optimised away in the caller's eyes. */
    if (sink == 42)
        printf("# sink %" PRIu64 "\n", sink);
    munmap(region, REGION_LEN);
    return failures ? 1 : 0;
}
