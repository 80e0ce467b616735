/* Device buffers: which calls have them, and staging them through pinned
 * host memory (see device.h). */
#include "coll/device.h"
#include "coll/device_state.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "cuda/driver.h"
#include "prims/compute.h"


/* One staged buffer of a call. */
struct region {
    void *dev;    /* device address */
    size_t bytes;
    int in, out;  /* copied in before the batch, out after it */
    size_t at;    /* offset in the staging buffer */
    void **fix[2];     /* the call's pointers into it, set once it exists */
    size_t fix_at[2];  /* and where they point, from at */
};

struct ccl__stage {
    struct region *r;
    int n;
};

ccl_status_t ccl__device_fail(struct ccl_comm *comm, CUresult res, const char *call, const char *what) {
    char buf[200];
    return ccl__set_error(comm, CCL_ERR_SYSTEM, "%s: %s", what, ccl__cuda_error(res, call, buf, sizeof buf));
}

/* The bytes a call reads (send) and writes (recv) on this rank. */
static void call_bytes(const struct ccl_comm *comm, const struct ccl__call *c, size_t *sb, size_t *rb) {
    if (c->is_p2p) {
        size_t b = c->xfer.count * ccl_dtype_size(c->xfer.dtype);
        *sb = c->xfer.is_send ? b : 0;
        *rb = c->xfer.is_send ? 0 : b;
        return;
    }
    size_t smult, rmult, b = c->coll.id.count * ccl_dtype_size(c->coll.id.dtype);
    ccl__coll_extent(comm, &c->coll, &smult, &rmult);
    *sb = b * smult;
    *rb = b * rmult;
}

static void call_buffers(struct ccl__call *c, void ***send, void ***recv) {
    if (c->is_p2p) {
        *send = c->xfer.is_send ? &c->xfer.buf : NULL;
        *recv = c->xfer.is_send ? NULL : &c->xfer.buf;
    } else {
        *send = (void **)&c->coll.sendbuf;
        *recv = &c->coll.recvbuf;
    }
}

struct ccl__device_state *ccl__device_state(struct ccl_comm *comm) {
    if (comm->device) return comm->device;
    struct ccl__device_state *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    pthread_mutex_init(&d->lock, NULL);
    /* Only the issuing thread creates it; later readers see it through the
     * executor's queue hand-off. */
    comm->device = d;
    return d;
}

/* CCL__MEM_CUDA with its context, or CCL__MEM_HOST (host, pinned host and
 * managed memory: the CPU reaches all three). */
static int mem_kind(const struct ccl__cu *cu, const void *p, CUcontext *ctx) {
    unsigned type = 0, managed = 0;
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)p;
    if (cu->PointerGetAttribute(&type, CCL__CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a) != CCL__CUDA_SUCCESS ||
        type != CCL__CU_MEMORYTYPE_DEVICE)
        return CCL__MEM_HOST;
    if (cu->PointerGetAttribute(&managed, CCL__CU_POINTER_ATTRIBUTE_IS_MANAGED, a) == CCL__CUDA_SUCCESS && managed)
        return CCL__MEM_HOST;
    if (cu->PointerGetAttribute(ctx, CCL__CU_POINTER_ATTRIBUTE_CONTEXT, a) != CCL__CUDA_SUCCESS) *ctx = NULL;
    return CCL__MEM_CUDA;
}

/* comm's context is ctx from now on (the first device buffer or stream
 * names it); another one is an error. */
ccl_status_t ccl__device_bind(struct ccl_comm *comm, CUcontext ctx, const char *what) {
    struct ccl__device_state *d = ccl__device_state(comm);
    if (!d) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory", what);
    pthread_mutex_lock(&d->lock);
    if (!d->ctx) d->ctx = ctx;
    int same = d->ctx == ctx;
    pthread_mutex_unlock(&d->lock);
    if (!same)
        return ccl__set_error(comm, CCL_ERR_UNSUPPORTED,
                              "%s: device buffers or streams of two CUDA contexts (devices) on one communicator; "
                              "make one communicator per device",
                              what);
    return CCL_OK;
}

ccl_status_t ccl__device_classify(struct ccl_comm *comm, struct ccl__call *calls, int n, const char *what) {
    const struct ccl__cu *cu = ccl__cuda();
    if (!cu) return CCL_OK;
    for (int i = 0; i < n; i++) {
        struct ccl__call *c = &calls[i];
        size_t sb, rb;
        void **send, **recv;
        call_bytes(comm, c, &sb, &rb);
        call_buffers(c, &send, &recv);
        void *bufs[2] = {send && sb ? *send : NULL, recv && rb ? *recv : NULL};
        const int bit[2] = {CCL__DEV_SEND, CCL__DEV_RECV};
        for (int k = 0; k < 2; k++) {
            CUcontext ctx = NULL;
            if (!bufs[k] || mem_kind(cu, bufs[k], &ctx) != CCL__MEM_CUDA) continue;
            c->device |= bit[k];
            CCL_CHECK(ccl__device_bind(comm, ctx, what));
        }
    }
    return CCL_OK;
}

/* Polls the staging stream to idle (GPU copies always finish). */
static CUresult stream_drain(const struct ccl__cu *cu, CUstream s) {
    CUresult r;
    for (int spins = 0; (r = cu->StreamQuery(s)) == CCL__CUDA_ERROR_NOT_READY; spins++)
        if (spins > 1000) nanosleep(&(struct timespec){0, 20000}, NULL);
    return r;
}

/* The staging stream and at least bytes of pinned memory, in comm's
 * context (made current on this thread). */
static ccl_status_t stage_ready(struct ccl_comm *comm, const struct ccl__cu *cu, size_t bytes) {
    struct ccl__device_state *d = comm->device;
    CUresult r = cu->CtxSetCurrent(d->ctx);
    if (r != CCL__CUDA_SUCCESS) return ccl__device_fail(comm, r, "cuCtxSetCurrent", "staging device buffers");
    if (!d->stream && (r = cu->StreamCreate(&d->stream, 0)) != CCL__CUDA_SUCCESS)
        return ccl__device_fail(comm, r, "cuStreamCreate", "staging device buffers");
    if (d->stage_bytes >= bytes) return CCL_OK;
    if (d->stage) cu->MemFreeHost(d->stage);
    d->stage = NULL;
    d->stage_bytes = 0;
    if ((r = cu->MemHostAlloc(&d->stage, bytes, CCL__CU_MEMHOSTALLOC_PORTABLE)) != CCL__CUDA_SUCCESS)
        return ccl__device_fail(comm, r, "cuMemHostAlloc", "staging device buffers");
    d->stage_bytes = bytes;
    return CCL_OK;
}

/* Adds the device regions of one call: one when its send and receive
 * buffers overlap (in place), so the staged copy aliases alike. */
static void plan_call(const struct ccl_comm *comm, struct ccl__call *c, struct region *r, int *nr, size_t *total) {
    size_t sb, rb;
    void **send, **recv;
    call_bytes(comm, c, &sb, &rb);
    call_buffers(c, &send, &recv);
    /* Which buffers are device memory was found at issue (classify). */
    char *s = c->device & CCL__DEV_SEND ? *send : NULL, *v = c->device & CCL__DEV_RECV ? *recv : NULL;
    if (s && v && s < v + rb && v < s + sb) {
        char *lo = s < v ? s : v, *hi = s + sb > v + rb ? s + sb : v + rb;
        r[(*nr)++] = (struct region){.dev = lo, .bytes = (size_t)(hi - lo), .in = 1, .out = 1, .at = *total,
                                     .fix = {send, recv}, .fix_at = {(size_t)(s - lo), (size_t)(v - lo)}};
        *total += ((size_t)(hi - lo) + 63) & ~(size_t)63;
        return;
    }
    if (s) {
        r[(*nr)++] = (struct region){.dev = s, .bytes = sb, .in = 1, .at = *total, .fix = {send}};
        *total += (sb + 63) & ~(size_t)63;
    }
    if (v) {
        r[(*nr)++] = (struct region){.dev = v, .bytes = rb, .out = 1, .at = *total, .fix = {recv}};
        *total += (rb + 63) & ~(size_t)63;
    }
}

/* Copies the staged regions in (device to host) or out, and waits. */
static CUresult copy_regions(struct ccl_comm *comm, const struct ccl__stage *st, int in) {
    const struct ccl__cu *cu = ccl__cuda();
    char *base = comm->device->stage;
    CUresult r = CCL__CUDA_SUCCESS;
    for (int i = 0; i < st->n && r == CCL__CUDA_SUCCESS; i++) {
        CUdeviceptr dev = (CUdeviceptr)(uintptr_t)st->r[i].dev, host = (CUdeviceptr)(uintptr_t)(base + st->r[i].at);
        if (in ? st->r[i].in : st->r[i].out)
            r = cu->MemcpyAsync(in ? host : dev, in ? dev : host, st->r[i].bytes, comm->device->stream);
    }
    return r == CCL__CUDA_SUCCESS ? stream_drain(cu, comm->device->stream) : r;
}

ccl_status_t ccl__stage_in(struct ccl_comm *comm, struct ccl__call *calls, int n, struct ccl__stage **out) {
    *out = NULL;
    int ndev = 0;
    for (int i = 0; i < n; i++) ndev += calls[i].device != 0;
    if (!ndev) return CCL_OK;
    const struct ccl__cu *cu = ccl__cuda();
    struct ccl__stage *st = calloc(1, sizeof(*st));
    if (st) st->r = calloc((size_t)ndev * 2, sizeof(*st->r));
    if (!st || !st->r) {
        if (st) free(st);
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "out of memory staging device buffers");
    }
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (calls[i].device) plan_call(comm, &calls[i], st->r, &st->n, &total);
    ccl_status_t s = stage_ready(comm, cu, total ? total : 64);
    if (s != CCL_OK) {
        free(st->r);
        free(st);
        return s;
    }
    char *base = comm->device->stage;
    for (int i = 0; i < st->n; i++)
        for (int k = 0; k < 2; k++)
            if (st->r[i].fix[k]) *st->r[i].fix[k] = base + st->r[i].at + st->r[i].fix_at[k];
    *out = st;
    CUresult r = copy_regions(comm, st, 1);
    if (r != CCL__CUDA_SUCCESS) {
        ccl__stage_out(comm, st, 0);
        *out = NULL;
        return ccl__device_fail(comm, r, "cuMemcpyAsync", "copying device buffers in");
    }
    return CCL_OK;
}

ccl_status_t ccl__stage_out(struct ccl_comm *comm, struct ccl__stage *st, int ok) {
    if (!st) return CCL_OK;
    CUresult r = ok ? copy_regions(comm, st, 0) : CCL__CUDA_SUCCESS;
    free(st->r);
    free(st);
    if (r != CCL__CUDA_SUCCESS) return ccl__device_fail(comm, r, "cuMemcpyAsync", "copying results to device buffers");
    return CCL_OK;
}

void ccl__device_free(struct ccl_comm *comm) {
    struct ccl__device_state *d = comm->device;
    if (!d) return;
    const struct ccl__cu *cu = ccl__cuda();
    if (cu && d->ctx && cu->CtxSetCurrent(d->ctx) == CCL__CUDA_SUCCESS) {
        if (d->stream) cu->StreamDestroy(d->stream);
        if (d->stage) cu->MemFreeHost(d->stage);
    }
    ccl__stream_ticket_free(d);
    pthread_mutex_destroy(&d->lock);
    free(d);
    comm->device = NULL;
}

CCL_API int ccl_is_device_pointer(const void *p) {
    CUcontext ctx;
    return p && ccl__cuda_in_process() && mem_kind(ccl__cuda(), p, &ctx) == CCL__MEM_CUDA;
}

void ccl__device_adopt_current(struct ccl_comm *comm) {
    const struct ccl__cu *cu = ccl__cuda_in_process() ? ccl__cuda() : NULL;
    CUcontext ctx = NULL;
    if (cu && cu->CtxGetCurrent(&ctx) == CCL__CUDA_SUCCESS && ctx) (void)ccl__device_bind(comm, ctx, "init");
}

CCL_API ccl_status_t ccl_comm_cuda_device(const ccl_comm_t *comm, int *device) {
    if (!device) return CCL_ERR_INVALID_ARGUMENT;
    CCL_CHECK(ccl__check_comm(comm, "cuda_device"));
    const struct ccl__cu *cu = ccl__cuda_in_process() ? ccl__cuda() : NULL;
    if (!cu) return CCL_ERR_UNSUPPORTED;
    CUcontext prev = NULL, ctx = comm->device ? comm->device->ctx : NULL;
    cu->CtxGetCurrent(&prev);
    if (ctx && ctx != prev) cu->CtxSetCurrent(ctx);
    CUdevice dev = -1;
    CUresult r = (ctx || prev) ? cu->CtxGetDevice(&dev) : 1;
    if (ctx && ctx != prev) cu->CtxSetCurrent(prev);
    if (r != CCL__CUDA_SUCCESS) return CCL_ERR_UNSUPPORTED;
    *device = dev;
    return CCL_OK;
}
