/* Device buffers: which calls have them, and staging them through pinned
 * host memory (see device.h). */
#include "coll/device.h"
#include "coll/device_state.h"
#include "coll/device_direct.h"

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
    char *base; /* on a stream: the pinned buffer the regions are in */
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

/* Polls a stream to idle. */
static CUresult stream_drain(const struct ccl__cu *cu, CUstream s) {
    CUresult r;
    for (int spins = 0; (r = cu->StreamQuery(s)) == CCL__CUDA_ERROR_NOT_READY; spins++)
        if (spins > 1000) nanosleep(&(struct timespec){0, 20000}, NULL);
    return r;
}

/* A call without a stream whose buffers are device memory follows the work
 * queued before it on the legacy default stream, as cudaMemcpy does. It is
 * waited for here, at issue, because the staging stream does not follow
 * that stream (see stage_ready). */
static ccl_status_t follow_default_stream(struct ccl_comm *comm, const struct ccl__cu *cu, const char *what) {
    CUcontext prev = NULL, ctx = comm->device->ctx;
    cu->CtxGetCurrent(&prev);
    if (prev != ctx) cu->CtxSetCurrent(ctx);
    CUresult r = stream_drain(cu, CCL__CU_STREAM_LEGACY);
    if (prev != ctx) cu->CtxSetCurrent(prev);
    return r == CCL__CUDA_SUCCESS ? CCL_OK : ccl__device_fail(comm, r, "cuStreamQuery", what);
}

ccl_status_t ccl__device_classify(struct ccl_comm *comm, struct ccl__call *calls, int n, const char *what) {
    const struct ccl__cu *cu = ccl__cuda();
    if (!cu) return CCL_OK;
    int follow = 0;
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
            follow |= !c->on_stream;
            CCL_CHECK(ccl__device_bind(comm, ctx, what));
        }
    }
    return follow ? follow_default_stream(comm, cu, what) : CCL_OK;
}

/* At least bytes of pinned memory in *buf (which has *have). An outgrown
 * buffer is retired, not freed: cuMemFreeHost waits for every stream of
 * the context, and a stream may be waiting for the very batch that
 * outgrew it (or still copy out of it). Each buffer is at least twice the
 * last, so the retired ones add up to less than the one in use. */
static ccl_status_t grow_pinned(struct ccl_comm *comm, const struct ccl__cu *cu, void **buf, size_t *have,
                                size_t bytes) {
    struct ccl__device_state *d = comm->device;
    if (*have >= bytes) return CCL_OK;
    if (d->nretired == (int)(sizeof d->retired / sizeof d->retired[0]))
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "staging device buffers: the staging buffer grew too often");
    size_t grown = bytes > 2 * *have ? bytes : 2 * *have;
    void *p = NULL;
    CUresult r = cu->MemHostAlloc(&p, grown, CCL__CU_MEMHOSTALLOC_PORTABLE);
    if (r != CCL__CUDA_SUCCESS) return ccl__device_fail(comm, r, "cuMemHostAlloc", "staging device buffers");
    if (*buf) d->retired[d->nretired++] = *buf;
    *buf = p;
    *have = grown;
    return CCL_OK;
}

ccl_status_t ccl__device_stream(struct ccl_comm *comm, CUstream *s) {
    const struct ccl__cu *cu = ccl__cuda();
    struct ccl__device_state *d = comm->device;
    CUresult r = cu->CtxSetCurrent(d->ctx);
    if (r != CCL__CUDA_SUCCESS) return ccl__device_fail(comm, r, "cuCtxSetCurrent", "staging device buffers");
    /* Non-blocking: a stream-ordered call on the legacy default stream
     * leaves that stream waiting for its batch (stream.c), and a copy on a
     * blocking stream would wait for it in turn. */
    if (!d->stream && (r = cu->StreamCreate(&d->stream, CCL__CU_STREAM_NON_BLOCKING)) != CCL__CUDA_SUCCESS)
        return ccl__device_fail(comm, r, "cuStreamCreate", "staging device buffers");
    *s = d->stream;
    return CCL_OK;
}

/* The staging stream and at least bytes of pinned memory, in comm's
 * context (made current on this thread). */
static ccl_status_t stage_ready(struct ccl_comm *comm, const struct ccl__cu *cu, size_t bytes) {
    CUstream s;
    CCL_CHECK(ccl__device_stream(comm, &s));
    return grow_pinned(comm, cu, &comm->device->stage, &comm->device->stage_bytes, bytes);
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

/* The regions of calls[0..n)'s device buffers and the pinned bytes they
 * take; *out NULL when no call has any. */
static ccl_status_t stage_plan(struct ccl_comm *comm, struct ccl__call *calls, int n, struct ccl__stage **out,
                               size_t *total) {
    *out = NULL;
    *total = 0;
    int ndev = 0;
    for (int i = 0; i < n; i++) ndev += calls[i].device != 0;
    if (!ndev) return CCL_OK;
    struct ccl__stage *st = calloc(1, sizeof(*st));
    if (st) st->r = calloc((size_t)ndev * 2, sizeof(*st->r));
    if (!st || !st->r) {
        free(st);
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "out of memory staging device buffers");
    }
    for (int i = 0; i < n; i++)
        if (calls[i].device) plan_call(comm, &calls[i], st->r, &st->n, total);
    if (!*total) *total = 64;
    *out = st;
    return CCL_OK;
}

/* Points the calls at their staged copies in base. */
static void stage_point(const struct ccl__stage *st, char *base) {
    for (int i = 0; i < st->n; i++)
        for (int k = 0; k < 2; k++)
            if (st->r[i].fix[k]) *st->r[i].fix[k] = base + st->r[i].at + st->r[i].fix_at[k];
}

/* Queues the copies in (device to host) or out on s. */
static CUresult stage_copies(const struct ccl__cu *cu, const struct ccl__stage *st, char *base, int in, CUstream s) {
    CUresult r = CCL__CUDA_SUCCESS;
    for (int i = 0; i < st->n && r == CCL__CUDA_SUCCESS; i++) {
        CUdeviceptr dev = (CUdeviceptr)(uintptr_t)st->r[i].dev, host = (CUdeviceptr)(uintptr_t)(base + st->r[i].at);
        if (in ? st->r[i].in : st->r[i].out) r = cu->MemcpyAsync(in ? host : dev, in ? dev : host, st->r[i].bytes, s);
    }
    return r;
}

static void stage_free(struct ccl__stage *st) {
    if (!st) return;
    free(st->r);
    free(st);
}

ccl_status_t ccl__stage_in(struct ccl_comm *comm, struct ccl__call *calls, int n, struct ccl__stage **out) {
    const struct ccl__cu *cu = ccl__cuda();
    struct ccl__stage *st;
    size_t total;
    *out = NULL;
    CCL_CHECK(stage_plan(comm, calls, n, &st, &total));
    if (!st) return CCL_OK;
    ccl_status_t s = stage_ready(comm, cu, total);
    if (s != CCL_OK) {
        stage_free(st);
        return s;
    }
    stage_point(st, comm->device->stage);
    CUresult r = stage_copies(cu, st, comm->device->stage, 1, comm->device->stream);
    if (r == CCL__CUDA_SUCCESS) r = stream_drain(cu, comm->device->stream);
    if (r != CCL__CUDA_SUCCESS) {
        stage_free(st);
        return ccl__device_fail(comm, r, "cuMemcpyAsync", "copying device buffers in");
    }
    *out = st;
    return CCL_OK;
}

ccl_status_t ccl__stage_out(struct ccl_comm *comm, struct ccl__stage *st, int ok) {
    if (!st) return CCL_OK;
    const struct ccl__cu *cu = ccl__cuda();
    CUresult r = CCL__CUDA_SUCCESS;
    if (ok) r = stage_copies(cu, st, comm->device->stage, 0, comm->device->stream);
    if (ok && r == CCL__CUDA_SUCCESS) r = stream_drain(cu, comm->device->stream);
    stage_free(st);
    if (r != CCL__CUDA_SUCCESS) return ccl__device_fail(comm, r, "cuMemcpyAsync", "copying results to device buffers");
    return CCL_OK;
}

ccl_status_t ccl__stage_on_stream_in(struct ccl_comm *comm, struct ccl__call *calls, int n, CUstream s,
                                     struct ccl__stage **out) {
    const struct ccl__cu *cu = ccl__cuda();
    struct ccl__device_state *d = comm->device;
    struct ccl__stage *st;
    size_t total;
    *out = NULL;
    CCL_CHECK(stage_plan(comm, calls, n, &st, &total));
    if (!st) return CCL_OK;
    ccl_status_t res = grow_pinned(comm, cu, &d->ostage, &d->ostage_bytes, total);
    CUresult r = CCL__CUDA_SUCCESS;
    /* The last stream-ordered batch may have been on another stream, its
     * results not yet copied out of the buffer. */
    if (res == CCL_OK && d->ostage_free) r = cu->StreamWaitEvent(s, d->ostage_free, 0);
    if (res == CCL_OK && r == CCL__CUDA_SUCCESS) {
        stage_point(st, d->ostage);
        st->base = d->ostage;
        r = stage_copies(cu, st, st->base, 1, s);
    }
    if (res == CCL_OK && r != CCL__CUDA_SUCCESS) res = ccl__device_fail(comm, r, "cuMemcpyAsync", "staging device buffers on the stream");
    if (res != CCL_OK) {
        stage_free(st);
        return res;
    }
    for (int i = 0; i < n; i++) calls[i].device = 0; /* staged already: the executor sees host memory */
    *out = st;
    return CCL_OK;
}

ccl_status_t ccl__stage_on_stream_out(struct ccl_comm *comm, struct ccl__stage *st, CUstream s, int copy) {
    if (!st) return CCL_OK;
    const struct ccl__cu *cu = ccl__cuda();
    struct ccl__device_state *d = comm->device;
    const char *call = "cuMemcpyAsync";
    CUresult r = copy ? stage_copies(cu, st, st->base, 0, s) : CCL__CUDA_SUCCESS;
    if (r == CCL__CUDA_SUCCESS && !d->ostage_free)
        call = "cuEventCreate", r = cu->EventCreate(&d->ostage_free, CCL__CU_EVENT_DISABLE_TIMING);
    if (r == CCL__CUDA_SUCCESS) call = "cuEventRecord", r = cu->EventRecord(d->ostage_free, s);
    stage_free(st);
    return r == CCL__CUDA_SUCCESS ? CCL_OK : ccl__device_fail(comm, r, call, "staging results on the stream");
}

void ccl__device_free(struct ccl_comm *comm) {
    struct ccl__device_state *d = comm->device;
    if (!d) return;
    ccl__gpu_direct_free(comm);
    const struct ccl__cu *cu = ccl__cuda();
    if (cu && d->ctx && cu->CtxSetCurrent(d->ctx) == CCL__CUDA_SUCCESS) {
        if (d->stream) cu->StreamDestroy(d->stream);
        if (d->stage) cu->MemFreeHost(d->stage);
        if (d->ostage) cu->MemFreeHost(d->ostage);
        if (d->ostage_free) cu->EventDestroy(d->ostage_free);
        for (int i = 0; i < d->nretired; i++) cu->MemFreeHost(d->retired[i]);
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
