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
 * creation and every copy also take.
 *
 * For the GPU-resident path: IPC handles name an allocation's memory file
 * by its owner's pid and descriptor, which another process opens through
 * /proc; the one kernel that path launches (ccl_fold_*, device/fold_args.h)
 * runs on the stream's thread, built from the same element functions as
 * the real one (reduce/elem.h). CCL_SIM_FOLD_STALL=S makes that kernel
 * take S seconds more, a GPU that hangs for a while; CCL_SIM_NO_MEMOPS=1 refuses
 * stream memory operations, as a device without them does. Not simulated: other kernels, blocking
 * streams' order with the legacy default stream, several devices.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "device/fold_args.h"
#include "reduce/elem.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { SUCCESS = 0, INVALID_VALUE = 1, NOT_READY = 600, UNKNOWN = 999 };
enum { ATTR_CONTEXT = 1, ATTR_MEMORY_TYPE = 2, ATTR_BUFFER_ID = 7, ATTR_IS_MANAGED = 8, ATTR_DEVICE_ORDINAL = 9,
       MEMORYTYPE_DEVICE = 2 };

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
    int fd;       /* device memory: its file (IPC handles name it), -1 once closed */
    unsigned long long id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
};
static unsigned long long next_id;
static struct alloc allocs[MAX_ALLOCS];
static pthread_mutex_t allocs_lock = PTHREAD_MUTEX_INITIALIZER;

static int add_alloc(void *p, size_t bytes, int device, void *shadow, int fd) {
    pthread_mutex_lock(&allocs_lock);
    int slot = -1;
    for (int i = 0; i < MAX_ALLOCS && slot < 0; i++)
        if (!allocs[i].base) slot = i;
    if (slot >= 0) allocs[slot] = (struct alloc){p, bytes, device, shadow, fd, ++next_id};
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
        if (a.fd >= 0) close(a.fd);
    } else {
        free(a.base);
    }
}

/* ---- streams ---- */
enum op_kind { OP_COPY, OP_WAIT_GEQ, OP_WRITE, OP_HOST_FN, OP_RECORD, OP_WAIT_EVENT, OP_FOLD };
struct fold; /* a launch of ccl_fold_* */
static void run_fold(struct fold *f);
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
    struct fold *fold;
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

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run_op(struct op *o) {
    switch (o->kind) {
    case OP_COPY: {
        /* A copy takes a while, so work that runs out of order shows; with
         * CCL_SIM_COPY_GBPS, as long as a link of that speed takes (10 us
         * and bytes / rate: a model of PCIe for timing the staging). */
        const char *gbps = getenv("CCL_SIM_COPY_GBPS");
        double t0 = now_s(), need = gbps ? 10e-6 + (double)o->bytes / (atof(gbps) * 1e9) : 300e-6;
        memcpy(o->dst, o->src, o->bytes);
        double left = need - (now_s() - t0);
        if (left > 0) usleep((useconds_t)(left * 1e6));
        break;
    }
    case OP_WAIT_GEQ:
        while ((int32_t)(__atomic_load_n(o->word, __ATOMIC_ACQUIRE) - o->value) < 0) usleep(50);
        break;
    case OP_WRITE: __atomic_store_n(o->word, o->value, __ATOMIC_RELEASE); break;
    case OP_HOST_FN: o->fn(o->arg); break;
    case OP_RECORD: atomic_store(&o->ev->completed, o->seq); break;
    case OP_WAIT_EVENT:
        while (atomic_load(&o->ev->completed) < o->seq) usleep(50);
        break;
    case OP_FOLD:
        usleep(300); /* a kernel takes a while too */
        if (getenv("CCL_SIM_FOLD_STALL")) usleep((useconds_t)(atof(getenv("CCL_SIM_FOLD_STALL")) * 1e6));
        run_fold(o->fold);
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
        free(o->fold);
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
    case ATTR_BUFFER_ID: {
        const char *c = (const char *)(uintptr_t)ptr;
        pthread_mutex_lock(&allocs_lock);
        for (int i = 0; i < MAX_ALLOCS; i++)
            if (allocs[i].base && c >= allocs[i].base && c < allocs[i].base + allocs[i].bytes)
                *(unsigned long long *)data = allocs[i].id;
        pthread_mutex_unlock(&allocs_lock);
        return SUCCESS;
    }
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
    if (p == MAP_FAILED || shadow == MAP_FAILED || add_alloc(p, len, 1, shadow, fd) < 0) {
        if (p != MAP_FAILED) munmap(p, len);
        if (shadow != MAP_FAILED) munmap(shadow, len);
        close(fd);
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
    if (!p || add_alloc(p, bytes ? bytes : 1, 0, NULL, -1) < 0) return free(p), UNKNOWN;
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

/* The synchronous copies and set and the device-to-device copy the
 * benchmarks' --device uses (bench/common/device_mem.c). */
API(CUresult, cuMemcpyHtoD_v2, (CUdeviceptr dst, const void *src, size_t bytes)) {
    return cuMemcpyAsync(dst, (CUdeviceptr)(uintptr_t)src, bytes, NULL) == SUCCESS ? (drain(stream_of(NULL)), SUCCESS)
                                                                              : UNKNOWN;
}
API(CUresult, cuMemcpyDtoH_v2, (void *dst, CUdeviceptr src, size_t bytes)) {
    return cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, src, bytes, NULL) == SUCCESS ? (drain(stream_of(NULL)), SUCCESS)
                                                                              : UNKNOWN;
}
API(CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *stream)) {
    return cuMemcpyAsync(dst, src, bytes, stream);
}
API(CUresult, cuMemsetD8_v2, (CUdeviceptr dst, unsigned char v, size_t n)) {
    drain(stream_of(NULL));
    memset(reach((void *)(uintptr_t)dst), v, n);
    return SUCCESS;
}
API(CUresult, cuDeviceGetName, (char *name, int len, int dev)) {
    (void)dev;
    snprintf(name, (size_t)len, "simulated GPU");
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
/* CCL_SIM_CAPTURING set: every created stream is capturing a graph. */
API(CUresult, cuStreamIsCapturing, (void *handle, int *status)) {
    *status = handle && getenv("CCL_SIM_CAPTURING") ? 1 : 0;
    return SUCCESS;
}

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
/* CCL_SIM_NO_MEMOPS: a device without stream memory operations (the
 * library then waits and signals in host functions). */
enum { NOT_SUPPORTED = 801 };
API(CUresult, cuStreamWaitValue32_v2, (void *stream, CUdeviceptr addr, uint32_t value, unsigned flags)) {
    if (getenv("CCL_SIM_NO_MEMOPS")) return NOT_SUPPORTED;
    if (flags != 0) return INVALID_VALUE; /* "greater or equal" only */
    enqueue(stream_of(stream), (struct op){.kind = OP_WAIT_GEQ, .word = (uint32_t *)(uintptr_t)addr, .value = value});
    return SUCCESS;
}
API(CUresult, cuStreamWriteValue32_v2, (void *stream, CUdeviceptr addr, uint32_t value, unsigned flags)) {
    if (getenv("CCL_SIM_NO_MEMOPS")) return NOT_SUPPORTED;
    enqueue(stream_of(stream), (struct op){.kind = OP_WRITE, .word = (uint32_t *)(uintptr_t)addr, .value = value});
    return SUCCESS;
}
API(CUresult, cuLaunchHostFunc, (void *stream, void (*fn)(void *), void *arg)) {
    enqueue(stream_of(stream), (struct op){.kind = OP_HOST_FN, .fn = fn, .arg = arg});
    return SUCCESS;
}

API(CUresult, cuDeviceGetUuid_v2, (char uuid[16], int dev)) {
    memcpy(uuid, "simulated-gpu-0", 16);
    return dev ? INVALID_VALUE : SUCCESS;
}
API(CUresult, cuMemGetAddressRange_v2, (CUdeviceptr *base, size_t *bytes, CUdeviceptr p)) {
    const char *c = (const char *)(uintptr_t)p;
    CUresult r = INVALID_VALUE;
    pthread_mutex_lock(&allocs_lock);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base && allocs[i].device && c >= allocs[i].base && c < allocs[i].base + allocs[i].bytes) {
            *base = (CUdeviceptr)(uintptr_t)allocs[i].base;
            *bytes = allocs[i].bytes;
            r = SUCCESS;
        }
    pthread_mutex_unlock(&allocs_lock);
    return r;
}

/* An IPC handle: the owner's pid and the allocation's descriptor there. */
struct ipc_handle {
    char magic[8];
    int pid, fd;
    size_t bytes;
    char pad[64 - 8 - 2 * sizeof(int) - sizeof(size_t)];
};
_Static_assert(sizeof(struct ipc_handle) == 64, "an IPC handle is 64 bytes");

API(CUresult, cuIpcGetMemHandle, (struct ipc_handle *h, CUdeviceptr p)) {
    CUresult r = INVALID_VALUE;
    pthread_mutex_lock(&allocs_lock);
    for (int i = 0; i < MAX_ALLOCS; i++)
        if (allocs[i].base && allocs[i].device && allocs[i].fd >= 0 && (uintptr_t)allocs[i].base == p) {
            memset(h, 0, sizeof(*h));
            memcpy(h->magic, "simipc", 7);
            h->pid = getpid(), h->fd = allocs[i].fd, h->bytes = allocs[i].bytes;
            r = SUCCESS;
        }
    pthread_mutex_unlock(&allocs_lock);
    return r;
}
/* CCL_SIM_IPC_FAIL set: every open fails, as between processes CUDA will
 * not let share memory. */
API(CUresult, cuIpcOpenMemHandle_v2, (CUdeviceptr *p, struct ipc_handle h, unsigned flags)) {
    if (memcmp(h.magic, "simipc", 7) != 0 || h.pid == getpid() || getenv("CCL_SIM_IPC_FAIL")) return INVALID_VALUE;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.fd);
    int fd = open(path, O_RDWR);
    if (fd < 0) return INVALID_VALUE;
    void *base = mmap(NULL, h.bytes, PROT_NONE, MAP_SHARED, fd, 0);
    void *shadow = mmap(NULL, h.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED || shadow == MAP_FAILED || add_alloc(base, h.bytes, 1, shadow, -1) < 0) {
        if (base != MAP_FAILED) munmap(base, h.bytes);
        if (shadow != MAP_FAILED) munmap(shadow, h.bytes);
        return UNKNOWN;
    }
    return *p = (CUdeviceptr)(uintptr_t)base, SUCCESS;
}
API(CUresult, cuIpcCloseMemHandle, (CUdeviceptr p)) {
    drop_alloc((void *)(uintptr_t)p);
    return SUCCESS;
}

/* ---- the GPU-resident path's kernel, on the CPU ---- */
struct fold {
    struct ccl_fold_args a;
    unsigned groups;
    char dtype[8], op[8];
};

/* dst <- x OP y for one element of each dtype, as cuda/kernels.cu does it. */
#define INT_FOLD(DT, T, U)                                                           \
    static T fold_##DT(const char *op, T x, T y) {                                  \
        if (!strcmp(op, "sum")) return (T)((U)x + (U)y);                             \
        if (!strcmp(op, "prod")) return (T)((U)x * (U)y);                            \
        if (!strcmp(op, "max")) return x > y ? x : y;                                \
        if (!strcmp(op, "band")) return (T)(x & y);                                  \
        if (!strcmp(op, "bor")) return (T)(x | y);                                   \
        if (!strcmp(op, "bxor")) return (T)(x ^ y);                                  \
        return x < y ? x : y;                                                        \
    }
CCL_ELEM_INT_TYPES(INT_FOLD)
static float fold_f32(const char *op, float x, float y) {
    if (!strcmp(op, "sum")) return pick_nan_f32(x, y, x + y);
    if (!strcmp(op, "prod")) return pick_nan_f32(x, y, x * y);
    return !strcmp(op, "max") ? max_f32(x, y) : min_f32(x, y);
}
static double fold_f64(const char *op, double x, double y) {
    if (!strcmp(op, "sum")) return pick_nan_f64(x, y, x + y);
    if (!strcmp(op, "prod")) return pick_nan_f64(x, y, x * y);
    return !strcmp(op, "max") ? max_f64(x, y) : min_f64(x, y);
}
static uint16_t fold_f16(const char *op, uint16_t x, uint16_t y) {
    return float_to_half_inline(fold_f32(op, half_to_float_inline(x), half_to_float_inline(y)));
}
static uint16_t fold_bf16(const char *op, uint16_t x, uint16_t y) {
    return float_to_bf16_inline(fold_f32(op, bf16_to_float_inline(x), bf16_to_float_inline(y)));
}
/* C's division in the element type (8-bit ones promote to int; d, a rank
 * count, fits them all). */
#define INT_DIV(DT, T, U) \
    static T div_##DT(T x, int d) { return (T)(x / (T)d); }
CCL_ELEM_INT_TYPES(INT_DIV)
static float div_f32(float x, int d) { return pick_nan_f32(x, x, x / (float)d); }
static double div_f64(double x, int d) { return pick_nan_f64(x, x, x / (double)d); }
static uint16_t div_f16(uint16_t x, int d) { return float_to_half_inline(div_f32(half_to_float_inline(x), d)); }
static uint16_t div_bf16(uint16_t x, int d) { return float_to_bf16_inline(div_f32(bf16_to_float_inline(x), d)); }

/* The kernel's loops: group g folds its sources into its destinations. */
#define FOLD_LOOP(T, DT)                                                                              \
    if (!strcmp(f->dtype, #DT)) {                                                                     \
        for (unsigned g = 0; g < f->groups; g++) {                                                    \
            const T *src[CCL_FOLD_MAX];                                                               \
            T *dst[CCL_FOLD_MAX];                                                                     \
            int ns = a->src_one ? 1 : a->nsrc, nd = a->dst_one ? 1 : a->ndst;                         \
            for (int k = 0; k < ns; k++)                                                              \
                src[k] = (const T *)reach(a->src_one ? a->src[g] : (const T *)a->src[k] + g * a->src_step); \
            for (int j = 0; j < nd; j++) dst[j] = reach(a->dst_one ? a->dst[g] : (T *)a->dst[j] + g * a->dst_step); \
            for (size_t i = 0; i < a->n; i++) {                                                       \
                T acc = src[0][i];                                                                    \
                for (int k = 1; k < ns; k++) acc = fold_##DT(f->op, acc, src[k][i]);                  \
                if (a->divisor) acc = div_##DT(acc, a->divisor);                                      \
                for (int j = 0; j < nd; j++) dst[j][i] = acc;                                         \
            }                                                                                         \
        }                                                                                             \
        return;                                                                                       \
    }
static void run_fold(struct fold *f) {
    const struct ccl_fold_args *a = &f->a;
    FOLD_LOOP(int8_t, i8)
    FOLD_LOOP(uint8_t, u8)
    FOLD_LOOP(int32_t, i32)
    FOLD_LOOP(uint32_t, u32)
    FOLD_LOOP(int64_t, i64)
    FOLD_LOOP(uint64_t, u64)
    FOLD_LOOP(uint16_t, f16)
    FOLD_LOOP(uint16_t, bf16)
    FOLD_LOOP(float, f32)
    FOLD_LOOP(double, f64)
    abort(); /* a kernel name this driver does not know */
}

static int the_module;
struct function {
    char dtype[8], op[8];
};
static struct function functions[64];
static int nfunctions;
API(CUresult, cuModuleLoadData, (void **m, const void *image)) { return *m = &the_module, SUCCESS; }
/* Only ccl_fold_<dtype>_<op>: the GPU-resident path's kernel. */
API(CUresult, cuModuleGetFunction, (void **out, void *m, const char *name)) {
    struct function fn = {0};
    if (sscanf(name, "ccl_fold_%7[a-z0-9]_%7[a-z]", fn.dtype, fn.op) != 2) return UNKNOWN;
    pthread_mutex_lock(&driver_lock);
    int k = 0;
    while (k < nfunctions && memcmp(&functions[k], &fn, sizeof fn) != 0) k++;
    if (k == nfunctions && nfunctions < 64) functions[nfunctions++] = fn;
    pthread_mutex_unlock(&driver_lock);
    return k < 64 ? (*out = &functions[k], SUCCESS) : UNKNOWN;
}
API(CUresult, cuLaunchKernel, (void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shared, void *stream, void **params, void **extra)) {
    const struct function *k = fn;
    struct fold *f = malloc(sizeof(*f));
    if (!f) return UNKNOWN;
    memcpy(&f->a, params[0], sizeof(f->a));
    f->groups = gy;
    memcpy(f->dtype, k->dtype, sizeof f->dtype);
    memcpy(f->op, k->op, sizeof f->op);
    enqueue(stream_of(stream), (struct op){.kind = OP_FOLD, .fold = f});
    return SUCCESS;
}
