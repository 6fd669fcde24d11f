#!/usr/bin/env bash
# What the system calls of `init()` with a live server cost on this machine, without perfclock:
# a C program makes the same calls in the same order (the kernel page check: perf_event_open of
# a dummy event, mmap, read the capabilities, close, munmap; then the shared page: open
# O_NOFOLLOW, mmap, touch; the boot id read) and times each, three rounds in each of three fresh
# processes. Round 0 is what a process's `init()` pays; the later rounds show the warm cost.
#
#   scripts/init-syscall-floor.sh PAGE     (PAGE: a shared page `perfclock serve --path PAGE` keeps)
set -euo pipefail
page=${1:?usage: scripts/init-syscall-floor.sh PAGE}
[ -r "$page" ] || { echo "init-syscall-floor: cannot read $page (start perfclock serve --path $page)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/floor.c" <<'C'
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

int main(int argc, char **argv) {
    for (int round = 0; round < 3; round++) {
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.type = PERF_TYPE_SOFTWARE;
        attr.size = sizeof attr;
        attr.config = PERF_COUNT_SW_DUMMY;
        attr.exclude_kernel = 1;
        attr.exclude_hv = 1;
        long t0 = now();
        int fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
        long t1 = now();
        void *kernel_page = mmap(0, 4096, PROT_READ, MAP_SHARED, fd, 0);
        long t2 = now();
        if (fd < 0 || kernel_page == MAP_FAILED) { perror("perf page"); return 1; }
        volatile unsigned long long caps = ((struct perf_event_mmap_page *)kernel_page)->capabilities;
        (void)caps;
        close(fd);
        long t3 = now();
        munmap(kernel_page, 4096);
        long t4 = now();
        int file = open(argv[1], O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        void *shared = mmap(0, 4096, PROT_READ, MAP_SHARED, file, 0);
        if (file < 0 || shared == MAP_FAILED) { perror(argv[1]); return 1; }
        close(file);
        volatile long word = *(long *)shared;
        (void)word;
        long t5 = now();
        char boot_id[64];
        int id = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
        if (id < 0 || read(id, boot_id, sizeof boot_id) <= 0) { perror("boot_id"); return 1; }
        close(id);
        long t6 = now();
        munmap(shared, 4096);
        printf("round %d: kernel page: perf_event_open %ld mmap %ld read+close %ld munmap %ld | "
               "shared page open+mmap+touch %ld | boot id %ld | total %ld ns\n",
               round, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t6 - t0);
    }
    return 0;
}
C
cc -O2 -o "$work/floor" "$work/floor.c"
for process in 1 2 3; do
    echo "process $process"
    "$work/floor" "$page"
done
