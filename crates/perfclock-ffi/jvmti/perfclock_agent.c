/*
 * perfclock_agent: a JVMTI agent that writes perf's jitdump (jit-<pid>.dump) through perfclock,
 * so `perf inject --jit` names JIT-compiled Java code in a default-clock `perf record`.
 *
 *   java -agentpath:/path/libperfclock_agent.so[=options] ...
 *
 * Options (comma-separated key=value; values cannot contain commas; an unknown, repeated or
 * valueless key, or a jitdump directory that cannot be written, makes the JVM refuse to start):
 *   jitdump=DIR       write DIR/jit-<pid>.dump and its DIR/jit-<pid>.dump.timeconv record
 *                     (default ".", the JVM's working directory: where `perf record` usually
 *                     writes perf.data and where `perf inject --jit` then writes the
 *                     jitted-<pid>-<n>.so files it needs; DIR must exist and be writable).
 *                     jitdump=off disables it (write jitdump=./off for a directory named off).
 *   jitdump_clock=arch|perf|monotonic
 *                     the jitdump's clock (PERFCLOCK_CLOCK_*): arch (raw counter, for `perf inject
 *                     --jit` of a default perf record), perf (perf-clock ns, for `samply import`
 *                     of a default perf record) or monotonic (for `samply record`). Default: the
 *                     environment's PERFCLOCK_JITDUMP_CLOCK, else arch.
 *   perfmap=0|1       also write /tmp/perf-<pid>.map (START SIZE name, hex), where `perf
 *                     report/script` look without `perf inject`. It has no time, so it names the
 *                     wrong method once the code cache reuses an address. Default 0. Created
 *                     exclusively, as the jitdump is: a symlink, a FIFO or another user's file
 *                     at that name (the pid is predictable) makes the JVM refuse to start; only
 *                     a stale regular file of the JVM's own user is replaced.
 *   log=PATH          event log with two stamps per event (default: no log; format below)
 *   allow_no_clock=1  start even if perfclock_init() fails: the jitdump is then off (its
 *                     timestamps could not be converted) and log stamps are 0. Default 0.
 *
 * Events: CompiledMethodLoad and DynamicCodeGenerated (stubs, the interpreter) go to the jitdump,
 * the map and the log; at VMInit the agent asks the JVM to replay both (GenerateEvents), which
 * reports code generated before the callbacks could run (the interpreter, early stubs) and repeats
 * some loads already written (harmless: same code, later stamp). Symbol names follow perf's own
 * agent: class signature + method name + method signature, e.g. `Lcom/x/Foo;bar(I)J`.
 * The jitdump's timestamps are raw counter values taken by perfclock when each record is written;
 * `perfclock inject-time-conv` turns the .timeconv record into the PERF_RECORD_TIME_CONV that
 * `perf inject --jit` needs to convert them. Caveat: HotSpot installs an nmethod before its
 * Service thread posts CompiledMethodLoad, so code can run for a while (up to tens of
 * milliseconds on a busy machine) before its load record's stamp; perf cannot name samples
 * taken in that window.
 *
 * Log format, one event per line, '#' starts a comment line. Each line carries two stamps taken
 * back to back: perfclock_now_ns() (the perf clock) and CLOCK_MONOTONIC, for comparing the two
 * domains; GC events are kept in memory during the pause and written at VM death.
 *   gc_start    PERF_NS MONO_NS TID
 *   gc_finish   PERF_NS MONO_NS TID
 *   code_load   PERF_NS MONO_NS TID ADDR_HEX SIZE NAME
 *   code_unload PERF_NS MONO_NS TID ADDR_HEX
 *   dyn_code    PERF_NS MONO_NS TID ADDR_HEX SIZE NAME
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jvmti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "perfclock.h"

#define MAX_GC_EVENTS 65536
#define PATH_LEN 4096

struct gc_event {
    uint64_t perf_ns, mono_ns;
    long tid;
    int start;
};

static struct gc_event gc_events[MAX_GC_EVENTS];
static unsigned gc_count; /* written only by the VM thread, inside pauses */
static unsigned gc_dropped;

/* Serialises every output: callbacks arrive from the Service, compiler and VM threads. */
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file, *map_file;
static perfclock_jitdump *jitdump;
static unsigned long jitdump_failures; /* code_load calls that failed (first one printed) */
static jvmtiEnv *jvmti;

struct options {
    char jitdump_dir[PATH_LEN]; /* empty: jitdump off */
    char log_path[PATH_LEN];    /* empty: no log */
    int perfmap;
    int allow_no_clock;
    int jitdump_clock; /* PERFCLOCK_CLOCK_*, or -1: PERFCLOCK_JITDUMP_CLOCK (default arch) */
};

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static long gettid_(void) { return (long)syscall(SYS_gettid); }

/* Both stamps, perf clock first: the pair is at most a few tens of ns apart. */
static void stamp(uint64_t *perf, uint64_t *mono) {
    *perf = perfclock_now_ns();
    *mono = mono_ns();
}

/* Caller holds out_lock. */
static void jitdump_code_load(const char *name, const void *addr, jint size) {
    if (!jitdump || size <= 0) return;
    int rc = perfclock_jitdump_code_load(jitdump, name, (uint64_t)(uintptr_t)addr, addr,
                                         (uint64_t)size);
    if (rc != PERFCLOCK_OK && jitdump_failures++ == 0)
        fprintf(stderr,
                "perfclock_agent: writing the jitdump failed: %d (%s); perf will not name code "
                "loaded from now on (check the jitdump=DIR directory's free space)\n",
                rc, perfclock_strerror(rc));
}

static void code_event(const char *kind, const void *addr, jint size, const char *name,
                       uint64_t perf, uint64_t mono) {
    pthread_mutex_lock(&out_lock);
    jitdump_code_load(name, addr, size);
    if (map_file && size > 0) {
        fprintf(map_file, "%lx %x %s\n", (unsigned long)(uintptr_t)addr, (unsigned)size, name);
        fflush(map_file);
    }
    if (log_file) {
        fprintf(log_file, "%s %llu %llu %ld %lx %d %s\n", kind, (unsigned long long)perf,
                (unsigned long long)mono, gettid_(), (unsigned long)(uintptr_t)addr, (int)size,
                name);
    }
    pthread_mutex_unlock(&out_lock);
}

/* Class signature + method name + method signature, as perf's agent names them:
 * "Lcom/x/Foo;" + "bar" + "(I)J" -> "Lcom/x/Foo;bar(I)J". */
static void method_name(jvmtiEnv *env, jmethodID method, char *out, size_t len) {
    char *name = NULL, *sig = NULL, *class_sig = NULL;
    jclass klass = NULL;
    snprintf(out, len, "unknown_method");
    if ((*env)->GetMethodName(env, method, &name, &sig, NULL) != JVMTI_ERROR_NONE) return;
    if ((*env)->GetMethodDeclaringClass(env, method, &klass) == JVMTI_ERROR_NONE &&
        (*env)->GetClassSignature(env, klass, &class_sig, NULL) == JVMTI_ERROR_NONE)
        snprintf(out, len, "%s%s%s", class_sig, name, sig);
    else
        snprintf(out, len, "%s%s", name, sig);
    (*env)->Deallocate(env, (unsigned char *)name);
    (*env)->Deallocate(env, (unsigned char *)sig);
    if (class_sig) (*env)->Deallocate(env, (unsigned char *)class_sig);
}

static void JNICALL on_compiled_method_load(jvmtiEnv *env, jmethodID method, jint code_size,
                                            const void *code_addr, jint map_length,
                                            const jvmtiAddrLocationMap *map,
                                            const void *compile_info) {
    (void)map_length, (void)map, (void)compile_info;
    uint64_t perf, mono;
    stamp(&perf, &mono);
    char name[1024];
    method_name(env, method, name, sizeof name);
    code_event("code_load", code_addr, code_size, name, perf, mono);
}

static void JNICALL on_compiled_method_unload(jvmtiEnv *env, jmethodID method,
                                              const void *code_addr) {
    (void)env, (void)method;
    uint64_t perf, mono;
    stamp(&perf, &mono);
    pthread_mutex_lock(&out_lock);
    if (log_file)
        fprintf(log_file, "code_unload %llu %llu %ld %lx\n", (unsigned long long)perf,
                (unsigned long long)mono, gettid_(), (unsigned long)(uintptr_t)code_addr);
    pthread_mutex_unlock(&out_lock);
}

static void JNICALL on_dynamic_code_generated(jvmtiEnv *env, const char *name,
                                              const void *address, jint length) {
    (void)env;
    uint64_t perf, mono;
    stamp(&perf, &mono);
    code_event("dyn_code", address, length, name, perf, mono);
}

/* Runs in the VM thread inside the pause: no I/O, no allocation, no JVMTI calls. */
static void gc_event(int start) {
    uint64_t perf, mono;
    stamp(&perf, &mono);
    if (gc_count >= MAX_GC_EVENTS) {
        gc_dropped++;
        return;
    }
    struct gc_event *e = &gc_events[gc_count];
    e->perf_ns = perf;
    e->mono_ns = mono;
    e->tid = gettid_();
    e->start = start;
    gc_count++;
}

static void JNICALL on_gc_start(jvmtiEnv *env) {
    (void)env;
    gc_event(1);
}

static void JNICALL on_gc_finish(jvmtiEnv *env) {
    (void)env;
    gc_event(0);
}

static void JNICALL on_vm_init(jvmtiEnv *env, JNIEnv *jni, jthread thread) {
    (void)jni, (void)thread;
    /* Replays code generated before the callbacks could see it (interpreter, early stubs). */
    const jvmtiEvent replay[] = {JVMTI_EVENT_DYNAMIC_CODE_GENERATED,
                                 JVMTI_EVENT_COMPILED_METHOD_LOAD};
    for (size_t i = 0; i < sizeof replay / sizeof replay[0]; i++) {
        jvmtiError err = (*env)->GenerateEvents(env, replay[i]);
        if (err != JVMTI_ERROR_NONE)
            fprintf(stderr,
                    "perfclock_agent: GenerateEvents(%d) failed: JVMTI error %d; code generated "
                    "before VM init is missing from the jitdump\n",
                    (int)replay[i], (int)err);
    }
}

/* Writes the GC table to the log and closes the jitdump, which rewrites its .timeconv record a
 * last time. Idempotent: VMDeath and Agent_OnUnload both call it. */
static void finish(void) {
    pthread_mutex_lock(&out_lock);
    if (log_file) {
        for (unsigned i = 0; i < gc_count; i++)
            fprintf(log_file, "%s %llu %llu %ld\n", gc_events[i].start ? "gc_start" : "gc_finish",
                    (unsigned long long)gc_events[i].perf_ns,
                    (unsigned long long)gc_events[i].mono_ns, gc_events[i].tid);
        fprintf(log_file, "# end gc_events=%u dropped=%u jitdump_failures=%lu\n", gc_count,
                gc_dropped, jitdump_failures);
        fflush(log_file);
    }
    gc_count = 0;
    if (jitdump) {
        int rc = perfclock_jitdump_close(jitdump);
        if (rc != PERFCLOCK_OK)
            fprintf(stderr, "perfclock_agent: closing the jitdump failed: %d (%s)\n", rc,
                    perfclock_strerror(rc));
        jitdump = NULL;
    }
    if (jitdump_failures)
        fprintf(stderr, "perfclock_agent: %lu jitdump records could not be written\n",
                jitdump_failures);
    jitdump_failures = 0;
    pthread_mutex_unlock(&out_lock);
}

static void JNICALL on_vm_death(jvmtiEnv *env, JNIEnv *jni) {
    (void)env, (void)jni;
    finish();
}

static int parse_flag(const char *key, const char *value, int *out) {
    if (strcmp(value, "0") == 0 || strcmp(value, "1") == 0) {
        *out = value[0] == '1';
        return 1;
    }
    fprintf(stderr, "perfclock_agent: option %s=%s: expected %s=0 or %s=1\n", key, value, key,
            key);
    return 0;
}

static int parse_path(const char *key, const char *value, char *out) {
    if (value[0] == '\0' || strlen(value) >= PATH_LEN) {
        fprintf(stderr, "perfclock_agent: option %s= needs a path of 1 to %d bytes\n", key,
                PATH_LEN - 1);
        return 0;
    }
    strcpy(out, value);
    return 1;
}

/* Parses "k=v,k=v" into *opt. Returns 0 (after printing why) on an unknown, repeated or
 * malformed option. */
static int parse_options(const char *text, struct options *opt) {
    static const char *const keys[] = {"jitdump", "perfmap", "log", "allow_no_clock",
                                       "jitdump_clock"};
    enum { n_keys = sizeof keys / sizeof keys[0] };
    int seen[n_keys] = {0};
    memset(opt, 0, sizeof *opt);
    strcpy(opt->jitdump_dir, ".");
    opt->jitdump_clock = -1;
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char item[PATH_LEN + 32];
        if (n >= sizeof item) {
            fprintf(stderr, "perfclock_agent: option too long: %.40s...\n", p);
            return 0;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        p = end ? end + 1 : NULL;
        char *eq = strchr(item, '=');
        if (eq) *eq = '\0';
        size_t k = 0;
        while (k < n_keys && strcmp(item, keys[k]) != 0) k++;
        if (k == n_keys) {
            fprintf(stderr,
                    "perfclock_agent: unknown option '%s'; known: jitdump=DIR|off, "
                    "jitdump_clock=arch|perf|monotonic, perfmap=0|1, log=PATH, allow_no_clock=0|1 "
                    "(comma-separated)\n",
                    item);
            return 0;
        }
        if (!eq) {
            fprintf(stderr, "perfclock_agent: option '%s' needs a value: %s=...\n", item, item);
            return 0;
        }
        if (seen[k]++) {
            fprintf(stderr, "perfclock_agent: option %s given twice\n", item);
            return 0;
        }
        const char *value = eq + 1;
        int ok = 1;
        if (k == 0) {
            if (strcmp(value, "off") == 0)
                opt->jitdump_dir[0] = '\0';
            else
                ok = parse_path(item, value, opt->jitdump_dir);
        } else if (k == 1) {
            ok = parse_flag(item, value, &opt->perfmap);
        } else if (k == 2) {
            ok = parse_path(item, value, opt->log_path);
        } else if (k == 3) {
            ok = parse_flag(item, value, &opt->allow_no_clock);
        } else {
            static const char *const clocks[] = {"arch", "perf", "monotonic"};
            for (int c = 0; c < 3; c++)
                if (strcmp(value, clocks[c]) == 0) opt->jitdump_clock = c; /* PERFCLOCK_CLOCK_* */
            if (opt->jitdump_clock < 0) {
                fprintf(stderr,
                        "perfclock_agent: jitdump_clock=%s: use arch (perf inject --jit), perf "
                        "(samply import) or monotonic (samply record)\n",
                        value);
                ok = 0;
            }
        }
        if (!ok) return 0;
    }
    return 1;
}

#define CHECK_JVMTI(call, what)                                                                    \
    do {                                                                                           \
        jvmtiError err_ = (call);                                                                  \
        if (err_ != JVMTI_ERROR_NONE) {                                                            \
            fprintf(stderr, "perfclock_agent: %s failed: JVMTI error %d\n", what, (int)err_);     \
            close_outputs();                                                                       \
            return JNI_ERR;                                                                        \
        }                                                                                          \
    } while (0)

static const char *file_kind(mode_t mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFLNK: return "a symbolic link";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    default: return "a device node";
    }
}

/*
 * Creates DIR/NAME for writing the way perfclock's writers create theirs (the Rust
 * perfclock_event::shared_file::create_exclusive; the C ABI does not export it): openat with
 * O_CREAT|O_EXCL|O_NOFOLLOW through the directory's descriptor, so never through a link and never
 * into a file someone prepared; a stale regular file of this user at the name is unlinked and the
 * create retried. Returns NULL after saying why and what to do.
 */
static FILE *create_exclusive(const char *dir, const char *name) {
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        fprintf(stderr, "perfclock_agent: cannot open %s for the perf map (perfmap=1): %s\n", dir,
                strerror(errno));
        return NULL;
    }
    int fd = -1;
    for (int attempt = 0; attempt < 3 && fd < 0; attempt++) {
        fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST) break;
        struct stat st;
        if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) continue; /* gone meanwhile: create again */
            break;
        }
        if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
            fprintf(stderr,
                    "perfclock_agent: %s/%s already exists and is %s owned by uid %u; the perf "
                    "map is never written through a link or into a file another user controls "
                    "(only a stale regular file of uid %u is replaced): remove it if it is stale, "
                    "or pass perfmap=0\n",
                    dir, name, file_kind(st.st_mode), (unsigned)st.st_uid, (unsigned)geteuid());
            close(dir_fd);
            errno = EEXIST;
            return NULL;
        }
        if (unlinkat(dir_fd, name, 0) != 0 && errno != ENOENT) break;
    }
    int saved = errno;
    close(dir_fd);
    FILE *file = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!file) {
        if (fd >= 0) {
            saved = errno;
            close(fd);
        }
        fprintf(stderr, "perfclock_agent: cannot create %s/%s (perfmap=1): %s\n", dir, name,
                strerror(saved));
    }
    return file;
}

/* Opens the outputs the options ask for. Returns 0 after printing what to change. */
static int open_outputs(const struct options *opt, int clock_ok, int pid) {
    if (opt->jitdump_dir[0]) {
        if (!clock_ok) {
            fprintf(stderr, "perfclock_agent: no perf clock, so no jitdump (allow_no_clock=1); "
                            "pass jitdump=off to silence this\n");
        } else {
            int rc = opt->jitdump_clock < 0
                         ? perfclock_jitdump_open(opt->jitdump_dir, &jitdump)
                         : perfclock_jitdump_open_with_clock(opt->jitdump_dir, opt->jitdump_clock,
                                                             &jitdump);
            if (rc != PERFCLOCK_OK) {
                fprintf(stderr,
                        "perfclock_agent: cannot write the jitdump in '%s': %d (%s); pass "
                        "jitdump=DIR with an existing writable directory, or jitdump=off%s\n",
                        opt->jitdump_dir, rc, perfclock_strerror(rc),
                        rc == PERFCLOCK_E_INVALID_ARGUMENT
                            ? " (an invalid argument here is the clock: jitdump_clock= or "
                              "PERFCLOCK_JITDUMP_CLOCK must be arch, perf or monotonic)"
                            : "");
                jitdump = NULL;
                return 0;
            }
        }
    }
    if (opt->perfmap) {
        char map_name[64];
        snprintf(map_name, sizeof map_name, "perf-%d.map", pid);
        map_file = create_exclusive("/tmp", map_name);
        if (!map_file) return 0;
    }
    if (opt->log_path[0]) {
        log_file = fopen(opt->log_path, "w");
        if (!log_file) {
            fprintf(stderr, "perfclock_agent: cannot create the log log=%s: ", opt->log_path);
            perror(NULL);
            return 0;
        }
        setvbuf(log_file, NULL, _IOFBF, 1 << 16);
    }
    return 1;
}

static void close_outputs(void) {
    finish();
    pthread_mutex_lock(&out_lock);
    if (log_file) fclose(log_file);
    if (map_file) fclose(map_file);
    log_file = map_file = NULL;
    pthread_mutex_unlock(&out_lock);
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved) {
    (void)reserved;
    struct options opt;
    if (!parse_options(options, &opt)) return JNI_ERR;
    int pid = (int)getpid();

    if ((*vm)->GetEnv(vm, (void **)&jvmti, JVMTI_VERSION_1_2) != JNI_OK) {
        fprintf(stderr, "perfclock_agent: no JVMTI 1.2 environment\n");
        return JNI_ERR;
    }
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_generate_compiled_method_load_events = 1;
    caps.can_generate_garbage_collection_events = 1;
    CHECK_JVMTI((*jvmti)->AddCapabilities(jvmti, &caps), "AddCapabilities");

    int rc = perfclock_init();
    int clock_ok = rc == PERFCLOCK_OK;
    if (!clock_ok) {
        fprintf(stderr, "perfclock_agent: perfclock_init failed: %d (%s); %s\n", rc,
                perfclock_strerror(rc),
                opt.allow_no_clock ? "continuing without a clock (allow_no_clock=1)"
                                   : "pass allow_no_clock=1 to start without it");
        if (!opt.allow_no_clock) return JNI_ERR;
    }
    if (!open_outputs(&opt, clock_ok, pid)) {
        close_outputs();
        return JNI_ERR;
    }
    if (log_file) {
        fprintf(log_file,
                "# perfclock-jvmti v2 pid=%d mode=%d error_bound_ns=%llu init=%d (%s) "
                "jitdump=%s perfmap=%d\n",
                pid, perfclock_mode(), (unsigned long long)perfclock_error_bound_ns(), rc,
                perfclock_strerror(rc), jitdump ? opt.jitdump_dir : "off", opt.perfmap);
        fflush(log_file);
    }

    jvmtiEventCallbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.VMInit = on_vm_init;
    cb.CompiledMethodLoad = on_compiled_method_load;
    cb.CompiledMethodUnload = on_compiled_method_unload;
    cb.DynamicCodeGenerated = on_dynamic_code_generated;
    cb.GarbageCollectionStart = on_gc_start;
    cb.GarbageCollectionFinish = on_gc_finish;
    cb.VMDeath = on_vm_death;
    CHECK_JVMTI((*jvmti)->SetEventCallbacks(jvmti, &cb, (jint)sizeof cb), "SetEventCallbacks");
    const jvmtiEvent events[] = {
        JVMTI_EVENT_VM_INIT,
        JVMTI_EVENT_COMPILED_METHOD_LOAD,
        JVMTI_EVENT_COMPILED_METHOD_UNLOAD,
        JVMTI_EVENT_DYNAMIC_CODE_GENERATED,
        JVMTI_EVENT_GARBAGE_COLLECTION_START,
        JVMTI_EVENT_GARBAGE_COLLECTION_FINISH,
        JVMTI_EVENT_VM_DEATH,
    };
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
        CHECK_JVMTI((*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, events[i], NULL),
                    "SetEventNotificationMode");
    return JNI_OK;
}

JNIEXPORT void JNICALL Agent_OnUnload(JavaVM *vm) {
    (void)vm;
    close_outputs();
}
