/*
 * Exercises every function of perfclock.h through the C ABI.
 *
 * Compiled and run by tests/ffi/c_abi.rs against the static library (and the shared one). Handles
 * both outcomes of perfclock_init(): with a clock it checks readings against timestamps the
 * kernel itself writes into perf records (PERF_RECORD_COMM after prctl(PR_SET_NAME)); without
 * one it checks every call returns its documented "no clock" value. The mode exercised is printed.
 * Environment: PERFCLOCK_REQUIRE_PERF set to anything but empty or 0 (the test helpers' rule)
 * makes a failed perfclock_init() a test failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "perfclock.h"

static int checks, failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if (cond) {                                                                                \
            printf("ok - ");                                                                       \
        } else {                                                                                   \
            failures++;                                                                            \
            printf("not ok - ");                                                                   \
        }                                                                                          \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
    } while (0)

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const int all_codes[] = {
    PERFCLOCK_OK,
    PERFCLOCK_E_PERMISSION_DENIED,
    PERFCLOCK_E_NO_PERF_SUPPORT,
    PERFCLOCK_E_FD_EXHAUSTED,
    PERFCLOCK_E_PERF_EVENT,
    PERFCLOCK_E_KERNEL_WITHHOLDS_TIME,
    PERFCLOCK_E_PAGE,
    PERFCLOCK_E_UNSUPPORTED,
    PERFCLOCK_E_TOO_MANY_CLOCKS,
    PERFCLOCK_E_CALIBRATION,
    PERFCLOCK_E_NOT_INITIALIZED,
    PERFCLOCK_E_READ,
    PERFCLOCK_E_NULL_POINTER,
    PERFCLOCK_E_INTERNAL,
    PERFCLOCK_E_OTHER,
    PERFCLOCK_E_IO,
    PERFCLOCK_E_INVALID_ARGUMENT,
    PERFCLOCK_E_NAME_TAKEN,
    PERFCLOCK_E_FORK_CHILD,
    PERFCLOCK_E_BUSY,
};
#define N_CODES (sizeof all_codes / sizeof all_codes[0])

static void check_strerror(void) {
    const char *unknown = perfclock_strerror(1);
    CHECK(unknown && strcmp(unknown, "unknown perfclock error code") == 0,
          "strerror(1) is the unknown-code text: \"%s\"", unknown ? unknown : "(null)");
    CHECK(perfclock_strerror(INT_MIN) == unknown && perfclock_strerror(-20) == unknown,
          "strerror(INT_MIN) and strerror(-20) are the same static unknown-code string");
    int distinct = 1;
    for (size_t i = 0; i < N_CODES; i++) {
        const char *a = perfclock_strerror(all_codes[i]);
        if (!a || !*a || strcmp(a, unknown) == 0 || a != perfclock_strerror(all_codes[i]))
            distinct = 0;
        for (size_t j = 0; a && j < i; j++)
            if (strcmp(a, perfclock_strerror(all_codes[j])) == 0) distinct = 0;
    }
    CHECK(distinct, "strerror gives %zu distinct, stable, non-empty strings for codes 0..-19",
          N_CODES);
}

static void check_counter(void) {
#if defined(__x86_64__) || defined(__aarch64__)
    uint64_t a = perfclock_read_counter(), b = perfclock_read_counter();
    CHECK(a != 0 && b >= a, "read_counter is non-zero and non-decreasing (%llu, %llu)",
          (unsigned long long)a, (unsigned long long)b);
#else
    CHECK(perfclock_read_counter() == 0, "read_counter is 0 on an unsupported architecture");
#endif
}

/* Every reading call must give its documented "no clock" value. */
static void check_no_clock(const char *when) {
    uint64_t sentinel = 0x5eed5eed5eed5eedull, out = sentinel;
    CHECK(perfclock_mode() == PERFCLOCK_MODE_NONE, "%s: mode is NONE", when);
    CHECK(perfclock_now_ns() == 0, "%s: now_ns is 0", when);
    CHECK(perfclock_now_ns_ordered() == 0, "%s: now_ns_ordered is 0", when);
    int rc = perfclock_try_now_ns(&out);
    CHECK(rc == PERFCLOCK_E_NOT_INITIALIZED && out == sentinel,
          "%s: try_now_ns returns NOT_INITIALIZED (%d) and leaves *out unchanged", when, rc);
    CHECK(perfclock_try_now_ns(NULL) == PERFCLOCK_E_NULL_POINTER, "%s: try_now_ns(NULL)", when);
    CHECK(perfclock_error_bound_ns() == UINT64_MAX, "%s: error_bound_ns is UINT64_MAX", when);
    CHECK(perfclock_cycles_to_ns(123456789) == 0 && perfclock_ns_to_cycles(123456789) == 0,
          "%s: cycles_to_ns and ns_to_cycles are 0", when);
    check_counter();
}

/* --- the kernel's own timestamps: PERF_RECORD_COMM after prctl(PR_SET_NAME) --- */

struct ring {
    int fd;
    struct perf_event_mmap_page *page;
    char *data;
    uint64_t size, tail;
};

static int ring_open(struct ring *r) {
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_DUMMY;
    attr.sample_type = PERF_SAMPLE_TIME;
    attr.sample_id_all = 1;
    attr.comm = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    attr.watermark = 1;
    attr.wakeup_watermark = 1;
    r->fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (r->fd < 0) return -errno;
    r->size = 64 * 4096;
    void *map = mmap(NULL, 4096 + r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (map == MAP_FAILED) return -errno;
    r->page = map;
    r->data = (char *)map + 4096;
    r->tail = 0;
    return 0;
}

/* Returns the time of the next COMM record of this process, or 0 if none is pending. */
static uint64_t ring_next_comm_time(struct ring *r) {
    uint64_t head = __atomic_load_n(&r->page->data_head, __ATOMIC_ACQUIRE);
    uint64_t found = 0;
    while (r->tail < head && !found) {
        struct perf_event_header h;
        char buf[512];
        for (size_t i = 0; i < sizeof h; i++) ((char *)&h)[i] = r->data[(r->tail + i) % r->size];
        if (h.size < sizeof h || h.size > sizeof buf) break;
        for (size_t i = 0; i < h.size; i++) buf[i] = r->data[(r->tail + i) % r->size];
        if (h.type == PERF_RECORD_COMM) {
            /* pid, tid, comm[] (8-aligned), then sample_id: time (PERF_SAMPLE_TIME only). */
            memcpy(&found, buf + h.size - sizeof(uint64_t), sizeof found);
        }
        r->tail += h.size;
    }
    __atomic_store_n(&r->page->data_tail, r->tail, __ATOMIC_RELEASE);
    return found;
}

static void check_against_kernel(uint64_t bound) {
    struct ring r = {0};
    int rc = ring_open(&r);
    if (rc != 0) {
        CHECK(0, "open a perf event to compare against the kernel's stamps (errno %d)", -rc);
        return;
    }
    const int rounds = 500;
    int inside = 0, missing = 0;
    int64_t worst = 0;
    for (int i = 0; i < rounds; i++) {
        char name[16];
        snprintf(name, sizeof name, "abi-%d", i);
        /* Odd rounds bracket with the ordered read: it must hold against the kernel too. */
        uint64_t before = i % 2 ? perfclock_now_ns_ordered() : perfclock_now_ns();
        prctl(PR_SET_NAME, name, 0, 0, 0);
        uint64_t after = i % 2 ? perfclock_now_ns_ordered() : perfclock_now_ns();
        uint64_t stamp = ring_next_comm_time(&r);
        if (stamp == 0) {
            missing++;
            continue;
        }
        if (stamp + bound >= before && stamp <= after + bound) {
            inside++;
        } else {
            int64_t miss = stamp < before ? (int64_t)(before - stamp) : (int64_t)(stamp - after);
            if (miss > worst) worst = miss;
        }
    }
    CHECK(missing == 0 && inside == rounds,
          "kernel COMM timestamps inside [now_ns(_ordered) before, after] +- bound %llu ns: %d of "
          "%d (%d records missing, worst miss %lld ns)",
          (unsigned long long)bound, inside, rounds, missing, (long long)worst);
    munmap(r.page, 4096 + r.size);
    close(r.fd);
}

/* --- signal handler use --- */

static volatile sig_atomic_t handler_calls, handler_failures;
static volatile uint64_t handler_last_ns;

static void on_alarm(int sig) {
    (void)sig;
    int saved_errno = errno;
    uint64_t now = perfclock_now_ns(), tried = 0;
    uint64_t c = perfclock_read_counter();
    int ok = now != 0 && now >= handler_last_ns && perfclock_try_now_ns(&tried) == PERFCLOCK_OK &&
             tried >= now && perfclock_mode() != PERFCLOCK_MODE_NONE &&
             perfclock_error_bound_ns() != UINT64_MAX && perfclock_cycles_to_ns(c) >= now &&
             perfclock_ns_to_cycles(now) != 0 && perfclock_strerror(PERFCLOCK_E_READ) != NULL;
    if (!ok) handler_failures++;
    handler_last_ns = tried;
    handler_calls++;
    errno = saved_errno;
}

static void check_signal_handler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval every_ms = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every_ms, NULL);
    /* Until 200 handler runs, or 5 s on a loaded machine (signals coalesce). */
    uint64_t end = monotonic_ns() + 5000000000u, main_last = 0;
    int main_ok = 1;
    while (handler_calls < 200 && monotonic_ns() < end) {
        uint64_t now = perfclock_now_ns();
        if (now == 0 || now < main_last) main_ok = 0;
        main_last = now;
    }
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_DFL);
    CHECK(handler_calls >= 100 && handler_failures == 0 && main_ok,
          "every call from a SIGALRM handler interrupting now_ns loops: %d handler runs, %d "
          "failed",
          (int)handler_calls, (int)handler_failures);
}

static void check_fork_child(void) {
    uint64_t parent = perfclock_now_ns();
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t child = perfclock_now_ns(), out = 0;
        int ok = child > parent && perfclock_try_now_ns(&out) == PERFCLOCK_OK && out >= child &&
                 perfclock_mode() != PERFCLOCK_MODE_NONE;
        _exit(ok ? 0 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a fork child reads the clock (child status 0x%x)", status);
}

static void check_clock(int mode) {
    uint64_t bound = perfclock_error_bound_ns();
    CHECK(mode == PERFCLOCK_MODE_KERNEL || mode == PERFCLOCK_MODE_CALIBRATED ||
              mode == PERFCLOCK_MODE_SHARED || mode == PERFCLOCK_MODE_PARAVIRT,
          "mode is %d", mode);
    if (mode == PERFCLOCK_MODE_KERNEL)
        CHECK(bound <= 1, "kernel mode: error bound %llu ns <= 1", (unsigned long long)bound);
    else if (mode == PERFCLOCK_MODE_PARAVIRT)
        CHECK(bound <= 2000, "paravirt mode: error bound %llu ns <= 2000",
              (unsigned long long)bound);
    else
        CHECK(bound < 1000000000u, "calibrated mode: error bound %llu ns is finite",
              (unsigned long long)bound);

    uint64_t first = perfclock_now_ns(), prev = first;
    int monotone = first != 0;
    for (int i = 0; i < 1000000; i++) {
        uint64_t now = perfclock_now_ns();
        if (now < prev) monotone = 0;
        prev = now;
    }
    CHECK(monotone, "now_ns non-zero and non-decreasing over 1e6 reads (%.1f ns per read)",
          (double)(prev - first) / 1e6);

    uint64_t out = 0, before = perfclock_now_ns();
    int rc = perfclock_try_now_ns(&out);
    uint64_t after = perfclock_now_ns();
    CHECK(rc == PERFCLOCK_OK && before <= out && out <= after, "try_now_ns inside its bracket");
    CHECK(perfclock_try_now_ns(NULL) == PERFCLOCK_E_NULL_POINTER, "try_now_ns(NULL)");

    before = perfclock_now_ns();
    uint64_t c = perfclock_read_counter();
    after = perfclock_now_ns();
    uint64_t ns = perfclock_cycles_to_ns(c);
    CHECK(before <= ns && ns <= after, "cycles_to_ns(read_counter()) inside a now_ns bracket");
    uint64_t back = perfclock_ns_to_cycles(ns), again = perfclock_cycles_to_ns(back);
    CHECK(back != 0 && back <= c + 1 && again <= ns && ns - again <= 2,
          "ns_to_cycles inverts cycles_to_ns (cyc %llu -> ns %llu -> cyc %llu -> ns %llu)",
          (unsigned long long)c, (unsigned long long)ns, (unsigned long long)back,
          (unsigned long long)again);

    uint64_t p0 = perfclock_now_ns(), m0 = monotonic_ns();
    struct timespec pause = {0, 200000000};
    nanosleep(&pause, NULL);
    uint64_t p1 = perfclock_now_ns(), m1 = monotonic_ns();
    double rate = (double)(p1 - p0) / (double)(m1 - m0);
    CHECK(rate > 0.999 && rate < 1.001, "now_ns runs at CLOCK_MONOTONIC's rate (ratio %.6f)",
          rate);
    printf("# now_ns - CLOCK_MONOTONIC = %lld ns (informational)\n",
           (long long)(p1 - m1));

    check_against_kernel(bound);
    check_signal_handler();
    check_fork_child();
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *require = getenv("PERFCLOCK_REQUIRE_PERF");
    int require_clock = require && *require && strcmp(require, "0") != 0;

    check_strerror();
    check_no_clock("before init");

    int rc = perfclock_init();
    int rc2 = perfclock_init();
    CHECK(rc == rc2, "perfclock_init is idempotent (%d then %d)", rc, rc2);
    const char *mode_name = "none";
    if (rc == PERFCLOCK_OK) {
        int mode = perfclock_mode();
        mode_name = mode == PERFCLOCK_MODE_KERNEL       ? "kernel"
                    : mode == PERFCLOCK_MODE_CALIBRATED ? "calibrated"
                    : mode == PERFCLOCK_MODE_SHARED     ? "shared"
                    : mode == PERFCLOCK_MODE_PARAVIRT   ? "paravirt"
                                                        : "invalid";
        check_clock(mode);
    } else {
        CHECK((rc <= PERFCLOCK_E_PERMISSION_DENIED && rc >= PERFCLOCK_E_CALIBRATION) ||
                  rc == PERFCLOCK_E_INTERNAL || rc == PERFCLOCK_E_OTHER,
              "perfclock_init failed with a documented init code: %d (%s)", rc,
              perfclock_strerror(rc));
        check_no_clock("after failed init");
        CHECK(!require_clock, "PERFCLOCK_REQUIRE_PERF is not set (init failed: %s)",
              perfclock_strerror(rc));
    }
    printf("# MODE EXERCISED: %s (perfclock_init returned %d: %s)\n", mode_name, rc,
           perfclock_strerror(rc));
    printf("# %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
