/*
 * perfclock.h - C ABI of perfclock: the clock Linux perf stamps into samples
 * (PERF_SAMPLE_TIME, i.e. the kernel's local_clock()), read in user space.
 *
 * Link statically with libperfclock_ffi.a or dynamically with libperfclock_ffi.so, both built
 * by `cargo build --release -p perfclock-ffi` into target/release/. The static library needs
 * the C runtime libraries Rust uses: `-lpthread -ldl -lm -lrt -lgcc_s -lc` (the exact list is
 * printed by `cargo rustc --release -p perfclock-ffi --crate-type staticlib -- --print
 * native-static-libs`). Inside a shared object (an agent), add `-Wl,--exclude-libs,ALL` so the
 * Rust symbols of the archive are not exported.
 *
 * Modes
 *   PERFCLOCK_MODE_KERNEL (1): the kernel publishes the conversion (cap_user_time_zero=1 on the
 *     perf_event mmap page). perfclock_now_ns() is the value perf would stamp at the instant of
 *     the counter read: bit-exact on x86_64, at most 1 ns above it on arm64.
 *   PERFCLOCK_MODE_PARAVIRT (4): the kernel withholds the conversion because its sched_clock is
 *     KVM's paravirtual kvm-clock; perfclock reads that clock as the kernel does (the vDSO's
 *     pvclock entry, the kernel's arithmetic bit for bit) plus the boot's constant offset. With
 *     the offset from the kernel log (/dev/kmsg, root) or a root-published page, readings are
 *     exact (perfclock_error_bound_ns() = 0); from kernel-stamped brackets alone, within about
 *     500 ns. No thread, perf event or ring after init. UINT64_MAX bound if the host drops
 *     the entry's stable bit (call perfclock_init() in a new process to fall back).
 *     PERFCLOCK_PARAVIRT=off skips this mode.
 *   PERFCLOCK_MODE_CALIBRATED (2): the kernel withholds the conversion and no other mode applies
 *     (Xen, Hyper-V and VMware guests; a KVM guest with PERFCLOCK_PARAVIRT=off); perfclock fits
 *     the counter against timestamps the kernel wrote
 *     into perf records, at init and then in a background thread. Readings are in the perf
 *     clock's domain within perfclock_error_bound_ns().
 *   PERFCLOCK_MODE_SHARED (3): as calibrated, but the conversion and its bound are read from the
 *     page a `perfclock serve` of this machine publishes (no thread, perf event or ring in this
 *     process; PERFCLOCK_SHARED_PAGE=PATH names the page, =off disables it). The bound is
 *     UINT64_MAX while the server's heartbeat is stale (over 5 s old).
 *   PERFCLOCK_MODE_NONE (0): perfclock_init() has not succeeded. Every reading call returns its
 *     "no clock" value (documented per function); none of them initialises.
 *
 * Safety and cost
 *   - perfclock_init() opens a perf event, maps its page and, in calibrated mode, calibrates; it
 *     makes syscalls, allocates, may start a background calibration thread, and in calibrated
 *     mode returns only after a first calibration. Call it once at start-up (JNI_OnLoad, Agent_OnLoad, main), never from a
 *     signal handler. It is thread-safe; once it has succeeded, later calls return PERFCLOCK_OK
 *     at no cost. A failure is not remembered: the next call tries again.
 *   - The clock's reading calls (perfclock_now_ns() to perfclock_strerror() below) are
 *     async-signal-safe, thread-safe, make no syscall, take no lock and do not allocate: a
 *     seqlock read of a page plus one counter read and integer arithmetic. They may be called
 *     from signal handlers, JVMTI callbacks in any phase, and fork children (the library re-maps
 *     its page in a child).
 *   - The writers (perfclock_jitdump_*, perfclock_markers_*) create files and allocate: none is
 *     async-signal-safe except perfclock_marker(), under the conditions stated there.
 *     perfclock_snapshot() is not documented async-signal-safe. Each function says which it is.
 *   - Files the writers create in a directory others may write (/tmp, a shared dump directory)
 *     are created exclusively (O_CREAT|O_EXCL|O_NOFOLLOW through the directory's descriptor):
 *     never through a symlink, never into a FIFO, a device or another user's file. A stale file
 *     at the name (an earlier process with the same pid) is replaced only if it is a regular
 *     file of the caller's effective user that no live writer holds open (each writer holds an
 *     flock(LOCK_EX) on its file while it is open, so a writer with the same pid number in
 *     another pid namespace, as containerised JITs all are pid 1, is seen to be alive; an empty
 *     file nobody holds is also kept, as it may be a writer's that has not locked it yet);
 *     anything else makes the open fail with PERFCLOCK_E_NAME_TAKEN and is left as it was.
 *   - fork(): a writer handle belongs to the process that opened it. In a fork child every call
 *     on an inherited handle writes nothing and returns PERFCLOCK_E_FORK_CHILD (close still
 *     frees the child's copy of the handle), and nothing the child does (loading, closing,
 *     exiting with or without closing) changes the parent's files. A child opens its own
 *     writer, which writes jit-<child pid>.dump / marker-<child pid>.txt.
 *   - No Rust panic unwinds across this boundary: a panic inside the library (a bug) is caught
 *     and turned into PERFCLOCK_E_INTERNAL or the function's "no clock" value.
 *
 * Error codes are negative ints with a stable mapping; new codes may be added, existing ones
 * keep their value and meaning. perfclock_init() returns -1..-9, -13 or -14; a failed
 * perf_event_open(2) or mmap(2) maps to -1..-4 by its cause, also when it made calibration
 * fail. The reading calls return -10..-13; the writers -12, -13, -15..-19 and, opening the
 * clock, perfclock_init()'s codes.
 * perfclock_strerror() names each of them.
 */
#ifndef PERFCLOCK_H
#define PERFCLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Clocks of perfclock_jitdump_open_with_clock() and perfclock_markers_open_with_clock(), by
 * the tool that reads the file (docs/jit.md, docs/markers.md):
 *   ARCH (jitdump only): the raw counter with JITDUMP_FLAGS_ARCH_TIMESTAMP, for `perf inject
 *     --jit` of a default perf record (plus `perfclock inject-time-conv` where perf wrote no
 *     TIME_CONV);
 *   PERF: perf-clock ns, flags 0, for `samply import` of a default perf record (no inject);
 *   MONOTONIC: CLOCK_MONOTONIC ns, flags 0, for `samply record` and `perf record -k monotonic`. */
#define PERFCLOCK_CLOCK_ARCH 0
#define PERFCLOCK_CLOCK_PERF 1
#define PERFCLOCK_CLOCK_MONOTONIC 2

/* Return values of perfclock_mode(). */
#define PERFCLOCK_MODE_NONE 0
#define PERFCLOCK_MODE_KERNEL 1
#define PERFCLOCK_MODE_CALIBRATED 2
#define PERFCLOCK_MODE_SHARED 3
#define PERFCLOCK_MODE_PARAVIRT 4

/* Success. */
#define PERFCLOCK_OK 0
/* perf_event_open(2) refused (EACCES/EPERM): /proc/sys/kernel/perf_event_paranoid, missing
 * CAP_PERFMON, or a seccomp filter (containers' default profiles). */
#define PERFCLOCK_E_PERMISSION_DENIED (-1)
/* No perf events (ENOSYS): kernel without CONFIG_PERF_EVENTS, or a sandbox hiding the call. */
#define PERFCLOCK_E_NO_PERF_SUPPORT (-2)
/* Out of file descriptors (EMFILE/ENFILE) while opening the perf event. */
#define PERFCLOCK_E_FD_EXHAUSTED (-3)
/* Any other perf_event_open(2) or mmap(2) failure (event unsupported, mlock limit, ...). */
#define PERFCLOCK_E_PERF_EVENT (-4)
/* The kernel withholds the time conversion (cap_user_time_zero=0) and kernel mode was
 * required. */
#define PERFCLOCK_E_KERNEL_WITHHOLDS_TIME (-5)
/* The kernel's perf page could not be read or publishes parameters that make no sense. */
#define PERFCLOCK_E_PAGE (-6)
/* No usable user-space counter: an architecture or platform without a supported one (x86_64
 * TSC and arm64 CNTVCT_EL0 on Linux are supported), or an x86_64 thread that may not read the
 * TSC (prctl(PR_SET_TSC, PR_TSC_SIGSEGV); undo it with PR_TSC_ENABLE). */
#define PERFCLOCK_E_UNSUPPORTED (-7)
/* Too many kernel-mode clocks are open in this process. */
#define PERFCLOCK_E_TOO_MANY_CLOCKS (-8)
/* The kernel withholds the conversion and calibrating a perf-domain clock failed. */
#define PERFCLOCK_E_CALIBRATION (-9)
/* A reading call was made before perfclock_init() succeeded. */
#define PERFCLOCK_E_NOT_INITIALIZED (-10)
/* A read failed after initialisation (seqlock contended beyond the retry bound, or the
 * parameters were withdrawn). Transient: retrying is allowed. */
#define PERFCLOCK_E_READ (-11)
/* A required pointer argument was NULL. */
#define PERFCLOCK_E_NULL_POINTER (-12)
/* A bug in perfclock (a Rust panic was caught at the boundary). */
#define PERFCLOCK_E_INTERNAL (-13)
/* An initialisation error this version of the C ABI has no specific code for. */
#define PERFCLOCK_E_OTHER (-14)
/* A file could not be created, written or mapped: the directory is missing or not writable, or
 * the disk is full. */
#define PERFCLOCK_E_IO (-15)
/* An argument is out of its documented range. */
#define PERFCLOCK_E_INVALID_ARGUMENT (-16)
/* A writer's file name is taken by something it may not replace: a symlink, a FIFO, a device, a
 * directory, or another user's file (planted, or left by another user's process). It was left as
 * it was; remove it if it is stale, or write into a directory only you can write. Also a file of
 * your own user that another live writer holds open (a process with the same pid number in
 * another pid namespace: containers sharing a dump directory): give each container its own dump
 * directory, or stop the other writer. */
#define PERFCLOCK_E_NAME_TAKEN (-17)
/* A writer handle was used in a fork child of the process that opened it: nothing was written.
 * Open a new writer in the child. */
#define PERFCLOCK_E_FORK_CHILD (-18)
/* perfclock_marker() from a signal handler that interrupted a marker call (or a flush) on the
 * same thread: refused at once instead of waiting for the interrupted call's lock, counted as a
 * lost marker. */
#define PERFCLOCK_E_BUSY (-19)

/*
 * Opens the process-wide clock: kernel mode if the kernel publishes the conversion, else
 * calibrated mode. Returns PERFCLOCK_OK or a negative PERFCLOCK_E_* code.
 * Not async-signal-safe (syscalls, allocation, and in calibrated mode tens of milliseconds of
 * calibration on a new thread). Thread-safe: concurrent first calls open one clock. Once it has
 * succeeded, later calls return PERFCLOCK_OK at no cost. A failure is not remembered: each later
 * call tries again, so after PERFCLOCK_E_FD_EXHAUSTED, or a calibration that failed on a thread or
 * locked-memory limit, raising the limit and calling again works. (If Rust code in the same
 * process called perfclock::init() first, its result, failure included, is the process's.)
 * Where not to call it:
 *   - a signal handler;
 *   - a constructor of a library loaded with dlopen() (__attribute__((constructor)), a C++
 *     static initialiser such as `static int g = perfclock_init();`): dlopen() holds the
 *     dynamic loader's lock while constructors run, and in calibrated mode the calibration
 *     thread blocks on that lock until dlopen() returns. perfclock_init() then gives up after
 *     the start timeout (2 s by default) with PERFCLOCK_E_CALIBRATION, so dlopen() takes that
 *     long; the thread is told to stop and ends on its own once dlopen() returns, and a later
 *     perfclock_init() succeeds. Kernel mode starts no thread and works there. Call it after
 *     dlopen() has returned instead: JNI_OnLoad and Agent_OnLoad run after it, so they are fine;
 *   - an LD_PRELOAD or otherwise always-loaded constructor: every process then pays the open
 *     (in calibrated mode the whole calibration; every program a script execs loads the
 *     library and pays again), even those that never read the clock. Call it on first use
 *     instead (see README.md);
 *   - a fork() child on its way to exec() (only async-signal-safe calls belong there).
 * Fork children that go on running (pre-fork servers): in calibrated mode a child inherits the
 * clock but not its refinement thread. The child's first perfclock_init() starts one there
 * (waiting for a first calibration, as opening does; it continues the inherited clock without
 * stepping it back unless the clock jumped since); until then the child's
 * perfclock_error_bound_ns() is the inherited bound only for the longest refinement pause (1 s by
 * default) after the parent's last refit, then UINT64_MAX, since nothing in the child would
 * notice a clock jump (a restored VM snapshot, a host migration). Restarting uses threads and
 * malloc in a child of a multi-threaded parent, which glibc and musl support. A child made by a
 * raw clone() system call (which runs no pthread_atfork handler) is not recognised as a fork
 * child. Once perfclock_init() has returned, the calibration thread neither allocates nor frees,
 * so it holds no malloc lock such a child could inherit and fork() there does not wait on it;
 * locks the program's own threads held are copied as they were (glibc's rule for any threaded
 * parent), so do not raw-clone while perfclock_init() runs on another thread.
 * x86_64: returns PERFCLOCK_E_UNSUPPORTED if the calling thread may not read the TSC
 * (prctl(PR_SET_TSC, PR_TSC_SIGSEGV)), instead of dying with SIGSEGV.
 */
int perfclock_init(void);

/*
 * The perf clock now, in nanoseconds (the domain of PERF_SAMPLE_TIME and of `perf script --ns`).
 * Returns 0 if perfclock_init() has not succeeded or the read failed (use perfclock_try_now_ns()
 * to tell those apart). Never initialises. Async-signal-safe; one counter read plus a seqlock read.
 *
 * Unordered, the fastest read (as the kernel's own sched_clock): the counter read (x86_64
 * rdtsc) may execute before earlier loads complete, so a reading taken right after receiving
 * another thread's reading (through a lock, an atomic, a queue) can be below it, by as long as
 * that load waited (hundreds of nanoseconds when threads contend for its cache line). When
 * readings of different threads are compared, use perfclock_now_ns_ordered().
 */
uint64_t perfclock_now_ns(void);

/*
 * As perfclock_now_ns(), but the counter is read only after every earlier instruction has
 * completed (x86_64 lfence; rdtsc, arm64 isb; mrs): never below a reading this thread has
 * observed through a happens-before edge (a lock, an acquire load, a queue). Costs about one
 * ordered counter read. Returns 0 as perfclock_now_ns() does. Never initialises.
 * Async-signal-safe.
 */
uint64_t perfclock_now_ns_ordered(void);

/*
 * Like perfclock_now_ns() but reports failure: on success stores the reading in *out and returns
 * PERFCLOCK_OK; otherwise leaves *out unchanged and returns PERFCLOCK_E_NOT_INITIALIZED,
 * PERFCLOCK_E_READ, or PERFCLOCK_E_NULL_POINTER (out == NULL). Async-signal-safe.
 */
int perfclock_try_now_ns(uint64_t *out);

/* PERFCLOCK_MODE_NONE, PERFCLOCK_MODE_KERNEL, PERFCLOCK_MODE_CALIBRATED, PERFCLOCK_MODE_SHARED or
 * PERFCLOCK_MODE_PARAVIRT. Async-signal-safe. */
int perfclock_mode(void);

/*
 * Bound, in ns, on |perfclock_now_ns() - the kernel's local_clock()| at the instant of the
 * counter read: 0 in kernel mode, the calibration's current bound in calibrated mode (it
 * changes as the background calibration refines, so read it when you need it rather than once), UINT64_MAX when no clock is initialised.
 * UINT64_MAX also in a fork child that has not called perfclock_init() again, once the longest
 * refinement pause has passed since the parent's last refit (see perfclock_init()).
 * (arm64 kernel mode: readings can be 1 ns above the kernel's stamp; see the crate docs.)
 * Shared mode: UINT64_MAX once the server's heartbeat is stale; it never reconnects by itself
 * (that takes system calls): a later perfclock_init() from ordinary code follows a restarted
 * server and the bound comes back.
 * Async-signal-safe.
 */
uint64_t perfclock_error_bound_ns(void);

/*
 * The raw counter the clock converts (TSC on x86_64, CNTVCT_EL0 on arm64), or 0 on an
 * architecture without one. Needs no initialisation. Async-signal-safe; one counter read and
 * nothing else (unordered, as perfclock_now_ns()).
 * The deferred stamp: stamp in the hottest paths (signal handlers, per-event tracing) with this
 * and convert later with perfclock_cycles_to_ns().
 */
uint64_t perfclock_read_counter(void);

/*
 * Converts a value of perfclock_read_counter() to perf-clock nanoseconds with the clock's current
 * parameters (the kernel's formula in kernel mode, the fit in calibrated mode). Returns 0 if no
 * clock is initialised or the parameters cannot be read. Async-signal-safe.
 * Trade-off of deferring: the conversion used is the one current at this call, not at the
 * stamp. In kernel mode the kernel rewrites it rarely (only when the clock itself changed);
 * in calibrated mode each refit moves it slightly, so convert within seconds of stamping to stay
 * within perfclock_error_bound_ns(). Stamps from another boot convert to garbage.
 */
uint64_t perfclock_cycles_to_ns(uint64_t cycles);

/*
 * Inverse of perfclock_cycles_to_ns(), rounded down (the kernel's documented inverse in kernel
 * mode): the counter value at which the clock reads `ns`. Returns 0 if no clock is initialised
 * or the parameters cannot be read. `ns` must not precede the conversion's origin
 * (time_zero; on x86_64, perfclock_cycles_to_ns(0)): for an earlier `ns` the unsigned
 * arithmetic wraps (ns - time_zero taken modulo 2^64, as in the kernel's formula) and the
 * result is a huge, meaningless counter value, not 0. Async-signal-safe.
 */
uint64_t perfclock_ns_to_cycles(uint64_t ns);

/*
 * A static, NUL-terminated English description of a PERFCLOCK_OK or PERFCLOCK_E_* code;
 * "unknown perfclock error code" for anything else. Never NULL; the string must not be freed.
 * Async-signal-safe.
 */
const char *perfclock_strerror(int code);

/* ---- jitdump: perf's jit-<pid>.dump, stamped in the counter perf converts ---- */

/*
 * A jitdump writer: perf's jit-<pid>.dump for code a JIT generates, so `perf inject --jit`
 * names the JIT's functions in samples of a default `perf record` (no -k 1). See docs/jit.md.
 *
 * Records carry the raw counter (perfclock_read_counter()) with JITDUMP_FLAGS_ARCH_TIMESTAMP;
 * perf converts it with the recording's PERF_RECORD_TIME_CONV. Where the kernel withholds the
 * conversion (and perf record therefore writes none), the writer keeps it in
 * jit-<pid>.dump.timeconv next to the dump; `perfclock inject-time-conv` adds it to perf.data.
 *
 * Thread safety: perfclock_jitdump_code_load() may be called from any number of threads at
 * once on the same handle. perfclock_jitdump_close() must be called exactly once per handle,
 * after every code_load on the handle has returned; the handle is freed by it and must not be
 * used again. None of these functions is async-signal-safe (they write files and allocate).
 * One dump per process and directory: a second perfclock_jitdump_open() on a directory this
 * process already has a dump open in (by any name of it) returns another handle to the same dump
 * (a JVMTI agent and a JNI library of one process share it); the close record is written when
 * the last handle is closed. Nothing is ever truncated under a live handle.
 * fork(): see "Safety and cost" above; code_load and close on an inherited handle return
 * PERFCLOCK_E_FORK_CHILD and write nothing.
 */
typedef struct perfclock_jitdump perfclock_jitdump;

/*
 * Calls perfclock_init(), then creates DIR/jit-<pid>.dump exclusively (mode 0644 less the
 * umask; a stale regular file of this user at the name is replaced if no live writer holds it,
 * anything else refused), writes its header, maps its first page PROT_EXEC (the marker perf
 * record logs so perf inject finds the dump) and writes DIR/jit-<pid>.dump.timeconv (written to
 * a temporary file and renamed; the name is checked as the dump's). If this process already has
 * a dump open in DIR, stores another handle to it instead. `perf inject --jit` later writes
 * jitted-<pid>-<n>.so files into DIR, so it must stay writable.
 * On success stores the handle in *out and returns PERFCLOCK_OK. Otherwise leaves *out unchanged
 * and returns PERFCLOCK_E_NULL_POINTER (dir or out NULL), PERFCLOCK_E_NAME_TAKEN (a symlink, a
 * FIFO, another user's file, another live writer's dump ... at either name: nothing was created
 * or changed), PERFCLOCK_E_IO (DIR missing, not a directory, not writable, full, or mounted
 * noexec), PERFCLOCK_E_READ (the clock's conversion could not be read), or perfclock_init()'s
 * code if the clock cannot be opened. After success the reading calls (perfclock_now_ns(), ...)
 * work without a separate perfclock_init(). Not async-signal-safe.
 * The dump's clock is the one the environment variable PERFCLOCK_JITDUMP_CLOCK names: arch
 * (also when unset or empty), perf or monotonic (see PERFCLOCK_CLOCK_*), so a program switches
 * without a rebuild; any other value returns PERFCLOCK_E_INVALID_ARGUMENT and creates nothing.
 */
int perfclock_jitdump_open(const char *dir, perfclock_jitdump **out);

/*
 * As perfclock_jitdump_open() with the clock given (PERFCLOCK_CLOCK_ARCH, _PERF or _MONOTONIC;
 * the environment is not read). The .timeconv file says which (clock=arch|perf|monotonic).
 * Returns PERFCLOCK_E_INVALID_ARGUMENT for another value, or when this process already has a
 * dump open in DIR in another clock (a dump has one clock). Not async-signal-safe.
 */
int perfclock_jitdump_open_with_clock(const char *dir, int clock, perfclock_jitdump **out);

/*
 * Records that `size` bytes of machine code at `code` now sit at address `addr` under `name`
 * (a NUL-terminated string of any other bytes; perf shows it as the symbol). Call it after the
 * code is in place and before it first runs: the record is stamped with the counter at this
 * call, and samples before the stamp are not attributed to it. Loading different code at the
 * same address later is supported: each sample goes to the code loaded at its time.
 * `code` may be the executable copy itself or a copy of it; it is only read.
 * Returns PERFCLOCK_OK; PERFCLOCK_E_NULL_POINTER (jd, name or code NULL);
 * PERFCLOCK_E_INVALID_ARGUMENT (size 0: perf cannot attribute samples to empty code; or
 * name and code together over 4 GiB, the format's limit); PERFCLOCK_E_FORK_CHILD (a fork child
 * of the process that opened the dump: nothing written); PERFCLOCK_E_IO if the write failed
 * (e.g. disk full): the file is then cut back to its last complete record, so a failed load
 * leaves no partial record. Thread-safe; not async-signal-safe.
 */
int perfclock_jitdump_code_load(perfclock_jitdump *jd, const char *name, uint64_t addr,
                                const void *code, uint64_t size);

/*
 * Frees the handle (also when it reports an error). The dump's last handle also writes the close
 * record, rewrites the .timeconv file and unmaps the marker. Returns PERFCLOCK_OK,
 * PERFCLOCK_E_NULL_POINTER (jd NULL), PERFCLOCK_E_FORK_CHILD (a fork child: the child's copy is
 * freed, nothing written), PERFCLOCK_E_IO or PERFCLOCK_E_READ. A process that exits without
 * calling it leaves a dump whose complete records all parse, and the .timeconv file as last
 * refreshed (at open, then by code_load at most once a second when the conversion or its bound
 * changed). Not async-signal-safe.
 */
int perfclock_jitdump_close(perfclock_jitdump *jd);

/* ---- markers: samply's marker-<pid>.txt, in perf-clock nanoseconds ---- */

/*
 * A marker writer: spans and instants in perf-clock nanoseconds (perfclock_now_ns()) appended
 * to DIR/marker-<pid>.txt, one "START END NAME" line each, the file samply reads when it imports
 * a `perf record` of this process (`samply import perf.data`) and shows beside the samples.
 * The file is mapped executable once (a default `perf record` records only executable
 * mappings, and samply finds the file through that record); it stays open and mapped until the
 * process exits. Handles opened on the same directory share the file.
 *
 * Cost and threads: perfclock_marker() formats the line into a buffer of the calling thread (no
 * system call, no lock shared with other threads); a thread's buffer is written out with one
 * write when it reaches 16 KiB, on perfclock_markers_flush(), on perfclock_markers_close(), and
 * at exit(3) (returning from main included). Markers still buffered when the process is killed
 * or calls _exit() are lost; the file still ends with a whole line (lines are placed so that a
 * write cut short by a kill or a full disk never leaves a line samply would misread).
 * Thread-safe. Only perfclock_marker() may be called from a signal handler (see there).
 * fork(): see "Safety and cost" above; every call on an inherited handle returns
 * PERFCLOCK_E_FORK_CHILD, the exit-time flush writes nothing in the child, and the markers the
 * child inherited buffered stay the parent's to write.
 */
typedef struct perfclock_markers perfclock_markers;

/*
 * Creates DIR/marker-<pid>.txt exclusively (a stale regular file of this user at the name is
 * replaced if no live writer holds it, anything else refused), maps it, and stores a handle in
 * *out; if this process already has the file of DIR open, a handle to it. Returns PERFCLOCK_OK,
 * PERFCLOCK_E_NULL_POINTER (dir or out NULL), PERFCLOCK_E_NAME_TAKEN (a symlink, a FIFO,
 * another user's file, another live writer's file ... at the name: left as it was), or
 * PERFCLOCK_E_IO (dir missing or not writable, or on a noexec mount). Does not need
 * perfclock_init() (the monotonic clock opens it). Not async-signal-safe.
 * The file's clock is the one the environment variable PERFCLOCK_MARKERS_CLOCK names: perf (also
 * when unset or empty) or monotonic; any other value (arch included) returns
 * PERFCLOCK_E_INVALID_ARGUMENT and creates nothing.
 */
int perfclock_markers_open(const char *dir, perfclock_markers **out);

/*
 * As perfclock_markers_open() with the clock given: PERFCLOCK_CLOCK_PERF (the times as given) or
 * PERFCLOCK_CLOCK_MONOTONIC (for `samply record`). Callers still pass perf-clock ns
 * (perfclock_now_ns()); a monotonic writer adds CLOCK_MONOTONIC - perf clock from a pairing of
 * the two clocks (perfclock_snapshot()'s) taken again whenever the last one is more than 10 ms
 * old at the marker call. A converted time is within the pairing's monotonic_uncertainty_ns plus
 * 500 ppm of its distance from the pairing (at most 5 us for a marker ending at its call).
 * PERFCLOCK_CLOCK_ARCH and other values return PERFCLOCK_E_INVALID_ARGUMENT (samply reads marker
 * times as ns), as does a directory this process already writes in the other clock. Returns
 * PERFCLOCK_E_NOT_INITIALIZED if the monotonic clock finds no perf clock. Not
 * async-signal-safe.
 */
int perfclock_markers_open_with_clock(const char *dir, int clock, perfclock_markers **out);

/*
 * Buffers a span [start_ns, end_ns] (perf-clock ns); start_ns == end_ns is an instant.
 * `name` is copied: invalid UTF-8 is replaced by U+FFFD, control characters (newline, CR, ...)
 * by U+FFFD and tab by a space, so a marker is always one valid line; names are cut at 1024
 * bytes. Returns PERFCLOCK_OK; PERFCLOCK_E_NULL_POINTER (m or name NULL);
 * PERFCLOCK_E_INVALID_ARGUMENT (end_ns < start_ns, or an empty name, which samply cannot read);
 * PERFCLOCK_E_FORK_CHILD (a fork child); PERFCLOCK_E_BUSY (see below); PERFCLOCK_E_READ (a
 * monotonic writer could not pair the clocks: nothing written); PERFCLOCK_E_IO if this
 * call filled the thread's buffer and writing it out failed (those buffered markers are lost).
 * Async-signal-safe in this sense: it never waits for a lock the interrupted code holds and
 * never calls malloc, provided the calling thread has written a marker from ordinary code before
 * (a thread's first marker allocates its buffer; thread-local storage of a dlopen()ed library
 * may be allocated on a thread's first use too). A call from a handler that interrupted a
 * perfclock_marker*() call on the same thread returns PERFCLOCK_E_BUSY at once (the marker is
 * counted as lost); otherwise the marker is buffered, after at most waiting for another thread
 * that is writing this thread's buffer out. A write-out that fails (disk full) allocates its
 * error report.
 */
int perfclock_marker(perfclock_markers *m, const char *name, uint64_t start_ns, uint64_t end_ns);

/*
 * Writes out every thread's buffered markers. Returns PERFCLOCK_OK, PERFCLOCK_E_NULL_POINTER,
 * PERFCLOCK_E_FORK_CHILD or PERFCLOCK_E_IO (disk full: the markers not written are lost, the
 * file ends with a whole line). Thread-safe; not async-signal-safe.
 */
int perfclock_markers_flush(perfclock_markers *m);

/*
 * Flushes and frees the handle (always freed, even on error); no other call may use m during or
 * after it. Returns PERFCLOCK_OK, PERFCLOCK_E_NULL_POINTER, PERFCLOCK_E_FORK_CHILD (nothing
 * written) or PERFCLOCK_E_IO. Not async-signal-safe.
 */
int perfclock_markers_close(perfclock_markers *m);

/*
 * The perf clock paired with CLOCK_MONOTONIC, CLOCK_BOOTTIME and CLOCK_REALTIME: each *_ns is
 * that clock's reading at the instant the perf clock read perf_ns, within +- its
 * *_uncertainty_ns (half the narrowest of 16 counter brackets around clock_gettime, plus the
 * perf clock's error bound, plus a 500 ppm rate allowance). Gives a default-clock perf.data a
 * wall-clock anchor (wall = perf time + realtime_ns - perf_ns; `perf script --tod` needs a
 * recording made with -k) and Perfetto's ClockSnapshot packet (BUILTIN_CLOCK_PERF = 10 paired
 * with BOOTTIME = 6, MONOTONIC = 3, REALTIME = 1).
 */
typedef struct perfclock_clock_snapshot {
    uint64_t perf_ns;
    uint64_t monotonic_ns;
    uint64_t monotonic_uncertainty_ns;
    uint64_t boottime_ns;
    uint64_t boottime_uncertainty_ns;
    uint64_t realtime_ns; /* ns since the Unix epoch */
    uint64_t realtime_uncertainty_ns;
    uint64_t error_bound_ns; /* the perf clock's own bound, included in each uncertainty */
} perfclock_clock_snapshot;

/*
 * Fills *out. Returns PERFCLOCK_OK; PERFCLOCK_E_NULL_POINTER; PERFCLOCK_E_NOT_INITIALIZED before
 * perfclock_init() succeeded; PERFCLOCK_E_UNSUPPORTED without a user-space counter;
 * PERFCLOCK_E_READ if the perf clock or clock_gettime could not be read (or CLOCK_REALTIME is
 * before 1970). Takes a few microseconds; no system call where clock_gettime is in the vDSO.
 * Thread-safe; not async-signal-safe (not documented as such: do not call it from a handler).
 */
int perfclock_snapshot(perfclock_clock_snapshot *out);

#ifdef __cplusplus
}
#endif

#endif /* PERFCLOCK_H */
