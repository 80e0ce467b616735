/* GPU buffers for --device (see device_mem.h). */
#define _GNU_SOURCE
#include "device_mem.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "measure.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*GetErrorString)(CUresult, const char **);
} cu;
static char name[128];

static const char *err(CUresult r) {
    const char *s = NULL;
    return cu.GetErrorString && cu.GetErrorString(r, &s) == 0 && s ? s : "unknown CUDA error";
}

int bench_device_open(int rank, char *why, size_t whylen) {
    const char *lib = getenv("CCL_CUDA_LIBRARY") ? getenv("CCL_CUDA_LIBRARY") : "libcuda.so.1";
    void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    if (!h) return snprintf(why, whylen, "--device needs the CUDA driver: %s", dlerror()), -1;
    static const char *const syms[] = {
        "cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName", "cuDevicePrimaryCtxRetain",
        "cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemsetD8_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2",
        "cuMemcpyDtoDAsync_v2", "cuStreamSynchronize", "cuGetErrorString"};
    void **slots = (void **)&cu;
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(slots[i] = dlsym(h, syms[i]))) return snprintf(why, whylen, "the CUDA driver %s has no %s", lib, syms[i]), -1;
    int count = 0;
    CUdevice dev;
    CUcontext ctx;
    CUresult r = cu.Init(0);
    if (r == 0) r = cu.DeviceGetCount(&count);
    if (r != 0 || count < 1)
        return snprintf(why, whylen, "--device: no GPU (%s)", r ? err(r) : "the driver counts none"), -1;
    if ((r = cu.DeviceGet(&dev, rank % count)) != 0 || (r = cu.DevicePrimaryCtxRetain(&ctx, dev)) != 0 ||
        (r = cu.CtxSetCurrent(ctx)) != 0)
        return snprintf(why, whylen, "--device: GPU %d: %s", rank % count, err(r)), -1;
    if (cu.DeviceGetName(name, sizeof name, dev) != 0) snprintf(name, sizeof name, "GPU %d", rank % count);
    return 0;
}

void *bench_device_alloc(size_t bytes) {
    CUdeviceptr p = 0;
    if (cu.MemAlloc(&p, bytes ? bytes : 1) != 0) return NULL;
    if (cu.MemsetD8(p, 0, bytes) != 0) {
        cu.MemFree(p);
        return NULL;
    }
    return (void *)(uintptr_t)p;
}

void bench_device_free(void *p) {
    if (p) cu.MemFree((CUdeviceptr)(uintptr_t)p);
}

int bench_device_upload(void *dev, const void *host, size_t bytes) {
    return cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)dev, host, bytes) == 0 ? 0 : -1;
}

int bench_device_download(void *host, const void *dev, size_t bytes) {
    return cu.MemcpyDtoH(host, (CUdeviceptr)(uintptr_t)dev, bytes) == 0 ? 0 : -1;
}

const char *bench_device_name(void) { return name; }

#define COPY_REPS 5
#define COPY_BYTES_PER_REP (4ull << 30) /* enough copies to last milliseconds on any GPU */
#define COPY_CAP (1ull << 30)
#define COPY_MAX_CALLS 4096 /* small buffers: the copies' launches would dominate anyway */

struct bench_memcpy bench_measure_device_copy(size_t bytes) {
    struct bench_memcpy m = {.gbps = 0, .bytes = bytes > COPY_CAP ? COPY_CAP : bytes < 4096 ? 4096 : bytes,
                             .reps = COPY_REPS};
    char *src = bench_device_alloc(m.bytes), *dst = bench_device_alloc(m.bytes);
    size_t copies = COPY_BYTES_PER_REP / m.bytes;
    if (copies > COPY_MAX_CALLS) copies = COPY_MAX_CALLS;
    double gbps[COPY_REPS];
    int ok = src && dst;
    /* the first copy outside the timing */
    ok = ok && cu.MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, m.bytes, NULL) == 0 &&
         cu.StreamSynchronize(NULL) == 0;
    for (int rep = 0; ok && rep < COPY_REPS; rep++) {
        double t0 = bench_now();
        for (size_t c = 0; ok && c < copies; c++)
            ok = cu.MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, m.bytes, NULL) == 0;
        ok = ok && cu.StreamSynchronize(NULL) == 0;
        double dt = bench_now() - t0;
        gbps[rep] = dt > 0 ? (double)m.bytes * (double)copies / dt / 1e9 : 0;
    }
    if (ok) m.gbps = bench_stats_of(gbps, COPY_REPS).median;
    bench_device_free(src);
    bench_device_free(dst);
    return m;
}
