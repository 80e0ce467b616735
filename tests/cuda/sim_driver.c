/*
 * A simulated CUDA driver, loaded through CCL_CUDA_LIBRARY by
 * test_stream_host, so that device buffers and stream-ordered calls are
 * tested where there is no GPU. "Device memory" is a mapping the CPU cannot
 * touch (PROT_NONE): a library that reads or writes it instead of copying
 * it through the driver dies on the spot; this driver's copies reach the
 * memory through a second mapping. Each stream is a thread that runs its
 * operations in order (copies, waits on and writes of 32-bit words, host
 * functions, events), each copy taking a moment so that a missing order
 * shows.
 *
 * Where the real driver was seen to block, this one blocks too (H100,
 * driver 580): cuMemFreeHost and cuMemFree wait for every stream to be
 * idle, and a copy to or from pageable memory waits for its stream while
 * holding the driver's lock, which event creation and destruction, stream
 * creation and every copy also take. Not simulated: kernels, blocking
 * streams' order with the legacy default stream, several devices.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { SUCCESS = 0, INVALID_VALUE = 1, NOT_READY = 600, UNKNOWN = 999 };
enum { ATTR_CONTEXT = 1, ATTR_MEMORY_TYPE = 2, ATTR_IS_MANAGED = 8, ATTR_DEVICE_ORDINAL = 9, MEMORYTYPE_DEVICE = 2 };

#define EXPORT __attribute__((visibility("default")))

static int the_context;
static __thread void *current;
static pthread_mutex_t driver_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- memory: device allocations and pinned host allocations ---- */
#define MAX_ALLOCS 512
struct alloc {
    char *base;   /* what callers see (device memory: not accessible) */
    size_t bytes; /* mapped (device memory: whole pages) */
    int device;
    char *shadow; /* device memory as this driver's copies reach it */
};
static struct alloc allocs[MAX_ALLOCS];
static pthread_mutex_t allocs_lock = PTHREAD_MUTEX_INITIALIZER;

static int add_alloc(void *p, size_t bytes, int device, void *shadow) {
    pthread_mutex_lock(&allocs_lock);
    int slot = -1;
    for (int i = 0; i < MAX_ALLOCS && slot < 0; i++)
        if (!allocs[i].base) slot = i;
    if (slot >= 0) allocs[slot] = (struct alloc){p, bytes, device, shadow};
    pthread_mutex_unlock(&allocs_lock);
    return slot;
}

/* Where this driver's copies reach p. */
static void *reach(const void *p) {
    const char *c = p;
    char *at = (char *)c;
    pthread_mutex_lock(&allocs_lock);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base && allocs[i].device && c >= allocs[i].base && c < allocs[i].base + allocs[i].bytes)
            at = allocs[i].shadow + (c - allocs[i].base);
    pthread_mutex_unlock(&allocs_lock);
    return at;
}

/* 1 device, 2 pinned host, 0 unknown (pageable) */
static int kind_of(const void *p) {
    const char *c = p;
    int kind = 0;
    pthread_mutex_lock(&allocs_lock);
    for (int i = 0; i < MAX_ALLOCS && !kind; i++)
        if (allocs[i].base && c >= allocs[i].base && c < allocs[i].base + allocs[i].bytes) kind = allocs[i].device ? 1 : 2;
    pthread_mutex_unlock(&allocs_lock);
    return kind;
}

static void drop_alloc(void *p) {
    struct alloc a = {0};
    pthread_mutex_lock(&allocs_lock);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base == p) a = allocs[i], allocs[i].base = NULL;
    pthread_mutex_unlock(&allocs_lock);
    if (!a.base) return;
    if (a.device) {
        munmap(a.base, a.bytes);
        munmap(a.shadow, a.bytes);
    } else {
        free(a.base);
    }
}

/* ---- streams ---- */
enum op_kind { OP_COPY, OP_WAIT_GEQ, OP_WRITE, OP_HOST_FN, OP_RECORD, OP_WAIT_EVENT };
struct event {
    _Atomic uint64_t recorded, completed;
};
struct op {
    enum op_kind kind;
    void *dst;
    const void *src;
    size_t bytes;
    uint32_t *word;
    uint32_t value;
    void (*fn)(void *);
    void *arg;
    struct event *ev;
    uint64_t seq;
    struct op *next;
};
struct stream {
    pthread_mutex_t m;
    pthread_cond_t c;
    struct op *head, *tail;
    uint64_t queued, done;
    int stop;
    pthread_t thread;
};

#define MAX_STREAMS 64
static struct stream *streams[MAX_STREAMS];
static struct stream legacy_stream;
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;

static void run_op(struct op *o) {
    switch (o->kind) {
    case OP_COPY:
        usleep(300); /* a copy takes a while: work that runs out of order shows */
        memcpy(o->dst, o->src, o->bytes);
        break;
    case OP_WAIT_GEQ:
        while ((int32_t)(__atomic_load_n(o->word, __ATOMIC_ACQUIRE) - o->value) < 0) usleep(50);
        break;
    case OP_WRITE: __atomic_store_n(o->word, o->value, __ATOMIC_RELEASE); break;
    case OP_HOST_FN: o->fn(o->arg); break;
    case OP_RECORD: atomic_store(&o->ev->completed, o->seq); break;
    case OP_WAIT_EVENT:
        while (atomic_load(&o->ev->completed) < o->seq) usleep(50);
        break;
    }
}

static void *stream_main(void *arg) {
    struct stream *s = arg;
    pthread_mutex_lock(&s->m);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->c, &s->m);
        if (!s->head) break;
        struct op *o = s->head;
        pthread_mutex_unlock(&s->m);
        run_op(o);
        pthread_mutex_lock(&s->m);
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->done++;
        free(o);
        pthread_cond_broadcast(&s->c);
    }
    pthread_mutex_unlock(&s->m);
    return NULL;
}

static void stream_init(struct stream *s) {
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->c, NULL);
    pthread_create(&s->thread, NULL, stream_main, s);
}

static void legacy_init(void) { stream_init(&legacy_stream); }

static struct stream *stream_of(void *handle) {
    if ((uintptr_t)handle <= 2) { /* 0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: one stream here */
        pthread_once(&legacy_once, legacy_init);
        return &legacy_stream;
    }
    return handle;
}

/* Queues o; the number it will have when done. */
static uint64_t enqueue(struct stream *s, struct op o) {
    struct op *p = malloc(sizeof(*p));
    *p = o;
    p->next = NULL;
    pthread_mutex_lock(&s->m);
    if (s->tail) s->tail->next = p;
    else s->head = p;
    s->tail = p;
    uint64_t n = ++s->queued;
    pthread_cond_broadcast(&s->c);
    pthread_mutex_unlock(&s->m);
    return n;
}

static void wait_done(struct stream *s, uint64_t n) {
    pthread_mutex_lock(&s->m);
    while (s->done < n) pthread_cond_wait(&s->c, &s->m);
    pthread_mutex_unlock(&s->m);
}

static void drain(struct stream *s) {
    pthread_mutex_lock(&s->m);
    uint64_t n = s->queued;
    pthread_mutex_unlock(&s->m);
    wait_done(s, n);
}

/* What cuMemFreeHost and cuMemFree were seen to do: wait for every stream. */
static void drain_all(void) {
    drain(stream_of(NULL));
    for (int i = 0; i < MAX_STREAMS; i++)
        if (streams[i]) drain(streams[i]);
}

/* ---- the entry points libccl and its tests use ---- */
#define API(ret, name, args) EXPORT ret name args; ret name args

API(CUresult, cuInit, (unsigned flags)) { return SUCCESS; }
API(CUresult, cuDriverGetVersion, (int *v)) { return *v = 13000, SUCCESS; }
API(CUresult, cuGetErrorString, (CUresult r, const char **s)) { return *s = "simulated driver error", SUCCESS; }
API(CUresult, cuDeviceGetCount, (int *n)) { return *n = 1, SUCCESS; }
API(CUresult, cuDeviceGet, (int *d, int ordinal)) { return ordinal ? INVALID_VALUE : (*d = 0, SUCCESS); }
API(CUresult, cuDevicePrimaryCtxRetain, (void **ctx, int dev)) { return *ctx = &the_context, SUCCESS; }
API(CUresult, cuCtxSetCurrent, (void *ctx)) { return current = ctx, SUCCESS; }
API(CUresult, cuCtxGetCurrent, (void **ctx)) { return *ctx = current, SUCCESS; }
API(CUresult, cuCtxGetDevice, (int *d)) { return current ? (*d = 0, SUCCESS) : INVALID_VALUE; }
API(CUresult, cuStreamGetCtx, (void *s, void **ctx)) { return *ctx = &the_context, SUCCESS; }

API(CUresult, cuPointerGetAttribute, (void *data, int attr, CUdeviceptr ptr)) {
    if (kind_of((void *)(uintptr_t)ptr) != 1) return INVALID_VALUE;
    switch (attr) {
    case ATTR_MEMORY_TYPE: *(unsigned *)data = MEMORYTYPE_DEVICE; return SUCCESS;
    case ATTR_CONTEXT: *(void **)data = &the_context; return SUCCESS;
    case ATTR_IS_MANAGED: *(unsigned *)data = 0; return SUCCESS;
    case ATTR_DEVICE_ORDINAL: *(int *)data = 0; return SUCCESS;
    default: return INVALID_VALUE;
    }
}

API(CUresult, cuMemAlloc_v2, (CUdeviceptr *d, size_t bytes)) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), len = (bytes + page - 1) / page * page;
    if (!len) len = page;
    int fd = memfd_create("ccl-sim-device", 0);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        if (fd >= 0) close(fd);
        return UNKNOWN;
    }
    void *p = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0);
    void *shadow = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED || shadow == MAP_FAILED || add_alloc(p, len, 1, shadow) < 0) {
        if (p != MAP_FAILED) munmap(p, len);
        if (shadow != MAP_FAILED) munmap(shadow, len);
        return UNKNOWN;
    }
    return *d = (CUdeviceptr)(uintptr_t)p, SUCCESS;
}
API(CUresult, cuMemFree_v2, (CUdeviceptr d)) {
    pthread_mutex_lock(&driver_lock);
    drain_all();
    drop_alloc((void *)(uintptr_t)d);
    pthread_mutex_unlock(&driver_lock);
    return SUCCESS;
}
API(CUresult, cuMemHostAlloc, (void **pp, size_t bytes, unsigned flags)) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p || add_alloc(p, bytes ? bytes : 1, 0, NULL) < 0) return free(p), UNKNOWN;
    return *pp = p, SUCCESS;
}
API(CUresult, cuMemFreeHost, (void *p)) {
    pthread_mutex_lock(&driver_lock);
    drain_all();
    drop_alloc(p);
    pthread_mutex_unlock(&driver_lock);
    return SUCCESS;
}
API(CUresult, cuMemHostGetDevicePointer_v2, (CUdeviceptr *d, void *p, unsigned flags)) {
    return kind_of(p) == 2 ? (*d = (CUdeviceptr)(uintptr_t)p, SUCCESS) : INVALID_VALUE;
}

API(CUresult, cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *stream)) {
    void *d = (void *)(uintptr_t)dst, *s = (void *)(uintptr_t)src;
    struct stream *st = stream_of(stream);
    pthread_mutex_lock(&driver_lock);
    uint64_t n = enqueue(st, (struct op){.kind = OP_COPY, .dst = reach(d), .src = reach(s), .bytes = bytes});
    if (!kind_of(d) || !kind_of(s)) wait_done(st, n); /* pageable: synchronous, the lock held meanwhile */
    pthread_mutex_unlock(&driver_lock);
    return SUCCESS;
}

API(CUresult, cuStreamCreate, (void **out, unsigned flags)) {
    pthread_mutex_lock(&driver_lock);
    int slot = -1;
    for (int i = 0; i < MAX_STREAMS && slot < 0; i++)
        if (!streams[i]) slot = i;
    struct stream *s = slot >= 0 ? calloc(1, sizeof(*s)) : NULL;
    if (s) {
        stream_init(s);
        streams[slot] = s;
    }
    pthread_mutex_unlock(&driver_lock);
    return s ? (*out = s, SUCCESS) : UNKNOWN;
}
API(CUresult, cuStreamDestroy_v2, (void *handle)) {
    struct stream *s = handle;
    drain(s);
    pthread_mutex_lock(&driver_lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (streams[i] == s) streams[i] = NULL;
    pthread_mutex_unlock(&driver_lock);
    pthread_mutex_lock(&s->m);
    s->stop = 1;
    pthread_cond_broadcast(&s->c);
    pthread_mutex_unlock(&s->m);
    pthread_join(s->thread, NULL);
    free(s);
    return SUCCESS;
}
API(CUresult, cuStreamQuery, (void *handle)) {
    struct stream *s = stream_of(handle);
    pthread_mutex_lock(&s->m);
    int idle = s->done == s->queued;
    pthread_mutex_unlock(&s->m);
    return idle ? SUCCESS : NOT_READY;
}
API(CUresult, cuStreamSynchronize, (void *handle)) { return drain(stream_of(handle)), SUCCESS; }

API(CUresult, cuEventCreate, (void **out, unsigned flags)) {
    pthread_mutex_lock(&driver_lock);
    *out = calloc(1, sizeof(struct event));
    pthread_mutex_unlock(&driver_lock);
    return *out ? SUCCESS : UNKNOWN;
}
API(CUresult, cuEventDestroy_v2, (void *ev)) {
    pthread_mutex_lock(&driver_lock);
    free(ev);
    pthread_mutex_unlock(&driver_lock);
    return SUCCESS;
}
API(CUresult, cuEventRecord, (void *handle, void *stream)) {
    struct event *ev = handle;
    uint64_t seq = atomic_fetch_add(&ev->recorded, 1) + 1;
    enqueue(stream_of(stream), (struct op){.kind = OP_RECORD, .ev = ev, .seq = seq});
    return SUCCESS;
}
API(CUresult, cuEventQuery, (void *handle)) {
    struct event *ev = handle;
    return atomic_load(&ev->completed) >= atomic_load(&ev->recorded) ? SUCCESS : NOT_READY;
}
API(CUresult, cuStreamWaitEvent, (void *stream, void *handle, unsigned flags)) {
    struct event *ev = handle;
    enqueue(stream_of(stream), (struct op){.kind = OP_WAIT_EVENT, .ev = ev, .seq = atomic_load(&ev->recorded)});
    return SUCCESS;
}
API(CUresult, cuStreamWaitValue32_v2, (void *stream, CUdeviceptr addr, uint32_t value, unsigned flags)) {
    if (flags != 0) return INVALID_VALUE; /* "greater or equal" only */
    enqueue(stream_of(stream), (struct op){.kind = OP_WAIT_GEQ, .word = (uint32_t *)(uintptr_t)addr, .value = value});
    return SUCCESS;
}
API(CUresult, cuStreamWriteValue32_v2, (void *stream, CUdeviceptr addr, uint32_t value, unsigned flags)) {
    enqueue(stream_of(stream), (struct op){.kind = OP_WRITE, .word = (uint32_t *)(uintptr_t)addr, .value = value});
    return SUCCESS;
}
API(CUresult, cuLaunchHostFunc, (void *stream, void (*fn)(void *), void *arg)) {
    enqueue(stream_of(stream), (struct op){.kind = OP_HOST_FN, .fn = fn, .arg = arg});
    return SUCCESS;
}

/* No kernels here. */
API(CUresult, cuModuleLoadData, (void **m, const void *image)) { return UNKNOWN; }
API(CUresult, cuModuleGetFunction, (void **f, void *m, const char *name)) { return UNKNOWN; }
API(CUresult, cuLaunchKernel, (void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shared, void *stream, void **params, void **extra)) {
    return UNKNOWN;
}
