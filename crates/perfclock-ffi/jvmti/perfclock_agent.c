/*
 * perfclock_agent: a JVMTI agent that stamps JVM events with the perf clock.
 *
 *   java -agentpath:/path/libperfclock_agent.so[=options] ...
 *
 * Options (comma-separated):
 *   log=PATH          event log (default /tmp/perfclock-jvmti-<pid>.log)
 *   map=PATH          perf code map (default /tmp/perf-<pid>.map, where `perf report/script`
 *                     looks for it)
 *   allow_no_clock=1  start even if perfclock_init() fails (perf-clock stamps are then 0)
 *
 * Events: CompiledMethodLoad/Unload and DynamicCodeGenerated go to the map (START SIZE name, hex)
 * and to the log; GarbageCollectionStart/Finish go to an in-memory table (their callbacks run
 * inside the pause, where the agent should not do I/O) written to the log at VM death.
 * Each log line carries two stamps taken back to back: perfclock_now_ns() (the perf clock) and
 * CLOCK_MONOTONIC, so that one run can show the difference between the two domains.
 *
 * Log format, one event per line, '#' starts a comment line:
 *   gc_start    PERF_NS MONO_NS TID
 *   gc_finish   PERF_NS MONO_NS TID
 *   code_load   PERF_NS MONO_NS TID ADDR_HEX SIZE NAME
 *   code_unload PERF_NS MONO_NS TID ADDR_HEX
 *   dyn_code    PERF_NS MONO_NS TID ADDR_HEX SIZE NAME
 * Caveat: HotSpot installs an nmethod before it queues CompiledMethodLoad for the Service
 * thread, so code can run briefly before its code_load stamp.
 */
#define _GNU_SOURCE
#include <jvmti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "perfclock.h"

#define MAX_GC_EVENTS 65536

struct gc_event {
    uint64_t perf_ns, mono_ns;
    long tid;
    int start;
};

static struct gc_event gc_events[MAX_GC_EVENTS];
static unsigned gc_count; /* written only by the VM thread, inside pauses */
static unsigned gc_dropped;

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_file, *map_file;
static jvmtiEnv *jvmti;
static int clock_ok;

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

static void code_event(const char *kind, const void *addr, jint size, const char *name,
                       uint64_t perf, uint64_t mono) {
    pthread_mutex_lock(&out_lock);
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

/* "Lcom/example/Foo;" + "bar" -> "com.example.Foo::bar" (perf-map-agent style). */
static void method_name(jmethodID method, char *out, size_t len) {
    char *name = NULL, *sig = NULL, *class_sig = NULL;
    jclass klass = NULL;
    snprintf(out, len, "unknown_method");
    if ((*jvmti)->GetMethodName(jvmti, method, &name, &sig, NULL) != JVMTI_ERROR_NONE) return;
    if ((*jvmti)->GetMethodDeclaringClass(jvmti, method, &klass) == JVMTI_ERROR_NONE &&
        (*jvmti)->GetClassSignature(jvmti, klass, &class_sig, NULL) == JVMTI_ERROR_NONE) {
        const char *c = class_sig;
        size_t n = strlen(c);
        if (n >= 2 && c[0] == 'L' && c[n - 1] == ';') {
            c++;
            n -= 2;
        }
        snprintf(out, len, "%.*s::%s", (int)n, c, name);
        for (char *p = out; *p && p < out + n; p++)
            if (*p == '/') *p = '.';
    } else {
        snprintf(out, len, "%s", name);
    }
    (*jvmti)->Deallocate(jvmti, (unsigned char *)name);
    (*jvmti)->Deallocate(jvmti, (unsigned char *)sig);
    if (class_sig) (*jvmti)->Deallocate(jvmti, (unsigned char *)class_sig);
}

static void JNICALL on_compiled_method_load(jvmtiEnv *env, jmethodID method, jint code_size,
                                            const void *code_addr, jint map_length,
                                            const jvmtiAddrLocationMap *map,
                                            const void *compile_info) {
    (void)env, (void)map_length, (void)map, (void)compile_info;
    uint64_t perf, mono;
    stamp(&perf, &mono);
    char name[512];
    method_name(method, name, sizeof name);
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

static void flush_gc_events(void) {
    pthread_mutex_lock(&out_lock);
    if (log_file) {
        for (unsigned i = 0; i < gc_count; i++)
            fprintf(log_file, "%s %llu %llu %ld\n", gc_events[i].start ? "gc_start" : "gc_finish",
                    (unsigned long long)gc_events[i].perf_ns,
                    (unsigned long long)gc_events[i].mono_ns, gc_events[i].tid);
        fprintf(log_file, "# end gc_events=%u dropped=%u\n", gc_count, gc_dropped);
        fflush(log_file);
    }
    gc_count = 0;
    pthread_mutex_unlock(&out_lock);
}

static void JNICALL on_vm_death(jvmtiEnv *env, JNIEnv *jni) {
    (void)env, (void)jni;
    flush_gc_events();
}

static int option(const char *options, const char *key, char *out, size_t len) {
    size_t klen = strlen(key);
    for (const char *p = options; p && *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            snprintf(out, len, "%.*s", (int)(n - klen - 1), p + klen + 1);
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

#define CHECK_JVMTI(call, what)                                                                    \
    do {                                                                                           \
        jvmtiError err_ = (call);                                                                  \
        if (err_ != JVMTI_ERROR_NONE) {                                                            \
            fprintf(stderr, "perfclock_agent: %s failed: JVMTI error %d\n", what, (int)err_);     \
            return JNI_ERR;                                                                        \
        }                                                                                          \
    } while (0)

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved) {
    (void)reserved;
    char log_path[4096], map_path[4096], allow[8] = "0";
    int pid = (int)getpid();
    if (!option(options, "log", log_path, sizeof log_path))
        snprintf(log_path, sizeof log_path, "/tmp/perfclock-jvmti-%d.log", pid);
    if (!option(options, "map", map_path, sizeof map_path))
        snprintf(map_path, sizeof map_path, "/tmp/perf-%d.map", pid);
    option(options, "allow_no_clock", allow, sizeof allow);

    int rc = perfclock_init();
    clock_ok = rc == PERFCLOCK_OK;
    if (!clock_ok) {
        fprintf(stderr, "perfclock_agent: perfclock_init failed: %d (%s)%s\n", rc,
                perfclock_strerror(rc), strcmp(allow, "1") == 0 ? "; continuing" : "");
        if (strcmp(allow, "1") != 0) return JNI_ERR;
    }

    log_file = fopen(log_path, "w");
    map_file = fopen(map_path, "w");
    if (!log_file || !map_file) {
        fprintf(stderr, "perfclock_agent: cannot open %s or %s\n", log_path, map_path);
        return JNI_ERR;
    }
    setvbuf(log_file, NULL, _IOFBF, 1 << 16);
    fprintf(log_file,
            "# perfclock-jvmti v1 pid=%d mode=%d error_bound_ns=%llu init=%d (%s) map=%s\n", pid,
            perfclock_mode(), (unsigned long long)perfclock_error_bound_ns(), rc,
            perfclock_strerror(rc), map_path);
    fflush(log_file);

    if ((*vm)->GetEnv(vm, (void **)&jvmti, JVMTI_VERSION_1_2) != JNI_OK) {
        fprintf(stderr, "perfclock_agent: no JVMTI 1.2 environment\n");
        return JNI_ERR;
    }
    jvmtiCapabilities caps;
    memset(&caps, 0, sizeof caps);
    caps.can_generate_compiled_method_load_events = 1;
    caps.can_generate_garbage_collection_events = 1;
    CHECK_JVMTI((*jvmti)->AddCapabilities(jvmti, &caps), "AddCapabilities");

    jvmtiEventCallbacks cb;
    memset(&cb, 0, sizeof cb);
    cb.CompiledMethodLoad = on_compiled_method_load;
    cb.CompiledMethodUnload = on_compiled_method_unload;
    cb.DynamicCodeGenerated = on_dynamic_code_generated;
    cb.GarbageCollectionStart = on_gc_start;
    cb.GarbageCollectionFinish = on_gc_finish;
    cb.VMDeath = on_vm_death;
    CHECK_JVMTI((*jvmti)->SetEventCallbacks(jvmti, &cb, (jint)sizeof cb), "SetEventCallbacks");
    const jvmtiEvent events[] = {
        JVMTI_EVENT_COMPILED_METHOD_LOAD,      JVMTI_EVENT_COMPILED_METHOD_UNLOAD,
        JVMTI_EVENT_DYNAMIC_CODE_GENERATED,    JVMTI_EVENT_GARBAGE_COLLECTION_START,
        JVMTI_EVENT_GARBAGE_COLLECTION_FINISH, JVMTI_EVENT_VM_DEATH,
    };
    for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
        CHECK_JVMTI((*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, events[i], NULL),
                    "SetEventNotificationMode");
    return JNI_OK;
}

JNIEXPORT void JNICALL Agent_OnUnload(JavaVM *vm) {
    (void)vm;
    flush_gc_events();
    pthread_mutex_lock(&out_lock);
    if (log_file) fclose(log_file);
    if (map_file) fclose(map_file);
    log_file = map_file = NULL;
    pthread_mutex_unlock(&out_lock);
}
