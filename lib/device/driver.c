/* Loading the CUDA driver at run time (see driver.h). */
#define _GNU_SOURCE
#include "device/driver.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/params.h"

static struct ccl__cu cu;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int ready;                 /* cu is filled and cuInit succeeded */
static _Atomic unsigned long long adds_seen; /* objects the process had loaded when we last looked */
static char load_error[600];

/* Driver entry points: cuda.h's versioned name and where it goes in cu. */
struct sym {
    const char *name;
    size_t offset;
};
#define SYM(field, name) {name, offsetof(struct ccl__cu, field)}
static const struct sym required[] = {
    SYM(GetErrorString, "cuGetErrorString"),
    SYM(Init, "cuInit"),
    SYM(DriverGetVersion, "cuDriverGetVersion"),
    SYM(PointerGetAttribute, "cuPointerGetAttribute"),
    SYM(CtxGetCurrent, "cuCtxGetCurrent"),
    SYM(CtxSetCurrent, "cuCtxSetCurrent"),
    SYM(CtxGetDevice, "cuCtxGetDevice"),
    SYM(StreamGetCtx, "cuStreamGetCtx"),
    SYM(MemHostAlloc, "cuMemHostAlloc"),
    SYM(MemFreeHost, "cuMemFreeHost"),
    SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"),
    SYM(MemcpyAsync, "cuMemcpyAsync"),
    SYM(StreamCreate, "cuStreamCreate"),
    SYM(StreamDestroy, "cuStreamDestroy_v2"),
    SYM(StreamQuery, "cuStreamQuery"),
    SYM(EventCreate, "cuEventCreate"),
    SYM(EventRecord, "cuEventRecord"),
    SYM(EventQuery, "cuEventQuery"),
    SYM(StreamWaitEvent, "cuStreamWaitEvent"),
    SYM(EventDestroy, "cuEventDestroy_v2"),
    SYM(StreamWaitValue32, "cuStreamWaitValue32_v2"),
    SYM(StreamWriteValue32, "cuStreamWriteValue32_v2"),
    SYM(LaunchHostFunc, "cuLaunchHostFunc"),
    SYM(ModuleLoadData, "cuModuleLoadData"),
    SYM(ModuleGetFunction, "cuModuleGetFunction"),
    SYM(LaunchKernel, "cuLaunchKernel"),
};
/* Only the GPU-resident path needs these: a driver (or a stand-in)
 * without them still stages device buffers. */
static const struct sym optional[] = {
    SYM(DeviceGetUuid, "cuDeviceGetUuid_v2"),
    SYM(MemGetAddressRange, "cuMemGetAddressRange_v2"),
    SYM(IpcGetMemHandle, "cuIpcGetMemHandle"),
    SYM(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2"),
    SYM(IpcCloseMemHandle, "cuIpcCloseMemHandle"),
};
/* Used where the driver has it. */
static const struct sym capture[] = {
    SYM(StreamIsCapturing, "cuStreamIsCapturing"),
};
#undef SYM

/* Fills cu's entries of syms[0..n) from h (NULL where missing); the name
 * of the first missing one, or NULL. */
static const char *bind(void *h, const struct sym *syms, size_t n) {
    const char *missing = NULL;
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(h, syms[i].name);
        if (!f && !missing) missing = syms[i].name;
        memcpy((char *)&cu + syms[i].offset, &f, sizeof f);
    }
    return missing;
}

/* Binds every entry point from an open handle; 0 on success, else names
 * the missing one. */
static int bind_all(void *h, char *why, size_t whylen) {
    const char *missing = bind(h, required, sizeof required / sizeof required[0]);
    if (missing) {
        snprintf(why, whylen, "the CUDA driver has no %s (too old a driver?)", missing);
        return -1;
    }
    cu.has_ipc = bind(h, optional, sizeof optional / sizeof optional[0]) == NULL;
    (void)bind(h, capture, sizeof capture / sizeof capture[0]);
    return 0;
}

/* Under load_lock: fills cu from the driver (already in the process when
 * noload). 1 when ready. */
static int load_locked(int noload) {
    if (atomic_load(&ready)) return 1;
    const char *name = ccl__params_get()->cuda_library;
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL | (noload ? RTLD_NOLOAD : 0));
    if (!h) {
        if (!noload) snprintf(load_error, sizeof load_error, "cannot load the CUDA driver %s: %s", name, dlerror());
        return 0;
    }
    char why[200];
    if (bind_all(h, why, sizeof why) < 0) {
        snprintf(load_error, sizeof load_error, "%s: %s", name, why);
        return 0; /* the handle stays open: the process loaded it anyway */
    }
    CUresult r = cu.Init(0);
    if (r != CCL__CUDA_SUCCESS) {
        const char *s = NULL;
        cu.GetErrorString(r, &s);
        snprintf(load_error, sizeof load_error, "cuInit failed: %s (no usable GPU or driver?)", s ? s : "unknown error");
        return 0;
    }
    atomic_store(&ready, 1);
    return 1;
}

static int count_adds(struct dl_phdr_info *info, size_t size, void *out) {
    (void)size;
    *(unsigned long long *)out = info->dlpi_adds;
    return 1; /* the first object carries the process-wide count */
}

/* How often a process without the driver looks again. The look (the
 * loader's lock and a walk step) cost a small message a twentieth of its
 * time when every call made it. Skipping it for a tick of the coarse clock
 * misses no device pointer: between the driver's arrival and the first
 * device allocation lie cuInit and a context's creation, which take far
 * longer than a tick. */
#define LOOK_EVERY_NS 1000000LL
static _Atomic long long next_look_ns;

static long long coarse_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int ccl__cuda_in_process(void) {
    if (atomic_load_explicit(&ready, memory_order_acquire)) return 1;
    long long now = coarse_now_ns();
    if (now < atomic_load_explicit(&next_look_ns, memory_order_relaxed)) return 0;
    atomic_store_explicit(&next_look_ns, now + LOOK_EVERY_NS, memory_order_relaxed);
    unsigned long long adds = 0;
    dl_iterate_phdr(count_adds, &adds);
    if (adds == atomic_load_explicit(&adds_seen, memory_order_relaxed)) return 0;
    pthread_mutex_lock(&load_lock);
    int ok = load_locked(1);
    atomic_store_explicit(&adds_seen, adds, memory_order_relaxed);
    pthread_mutex_unlock(&load_lock);
    return ok;
}

const struct ccl__cu *ccl__cuda_load(char *why, size_t whylen) {
    pthread_mutex_lock(&load_lock);
    int ok = load_locked(0);
    if (!ok) snprintf(why, whylen, "%s", load_error[0] ? load_error : "the CUDA driver could not be loaded");
    pthread_mutex_unlock(&load_lock);
    return ok ? &cu : NULL;
}

const struct ccl__cu *ccl__cuda(void) { return atomic_load_explicit(&ready, memory_order_acquire) ? &cu : NULL; }

const char *ccl__cuda_error(CUresult r, const char *call, char *buf, size_t n) {
    const char *s = NULL;
    if (!ccl__cuda() || cu.GetErrorString(r, &s) != CCL__CUDA_SUCCESS || !s) s = "unknown error";
    snprintf(buf, n, "%s failed: %s (CUDA error %d)", call, s, r);
    return buf;
}
