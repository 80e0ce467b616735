/* Device buffers: which calls have them, and staging them through pinned
 * host memory (see device.h). */
#include "device/device.h"
#include "device/state.h"
#include "device/gpu_direct.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "device/driver.h"
#include "prims/compute.h"
#include "prims/wait.h"


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

struct drain {
    struct ccl_comm *comm;
    const struct ccl__cu *cu;
    CUstream s;
    const char *what;
};

static ccl_status_t drain_poll(void *ctx, int *moved) {
    struct drain *d = ctx;
    (void)moved;
    CUresult r = d->cu->StreamQuery(d->s);
    if (r == CCL__CUDA_SUCCESS) return CCL_OK;
    return r == CCL__CUDA_ERROR_NOT_READY ? CCL_INPROGRESS : ccl__device_fail(d->comm, r, "cuStreamQuery", d->what);
}

/* Waits for s to go idle, through ccl__wait: copies that read or write
 * the caller's buffers end before the call goes on, whatever fails
 * meanwhile (only CCL_TIMEOUT ends the wait early: a copy that long is a
 * GPU gone wrong). Nothing rings a bell when a stream goes idle: after
 * the communicator's spin and yield, the wait naps 20 us at a time.
 * detached: at issue, in the caller's thread, beside the executor. */
ccl_status_t ccl__stream_drain(struct ccl_comm *comm, CUstream s, int detached, const char *what) {
    struct drain d = {.comm = comm, .cu = ccl__cuda(), .s = s, .what = what};
    int none = 0;
    struct ccl__wait_opts o = {.nap_s = 20e-6, .through_failures = 1, .detached = detached};
    return ccl__wait_with(comm, what, NULL, &none, drain_poll, &d, &o);
}

/* A call without a stream whose buffers are device memory follows the work
 * queued before it on the legacy default stream, as cudaMemcpy does. It is
 * waited for here, at issue, because the staging stream does not follow
 * that stream (see stage_ready), and the executor may only come to the
 * call after the caller has queued more on it. */
static ccl_status_t follow_default_stream(struct ccl_comm *comm, const struct ccl__cu *cu, const char *what) {
    CUcontext prev = NULL, ctx = comm->device->ctx;
    cu->CtxGetCurrent(&prev);
    if (prev != ctx) cu->CtxSetCurrent(ctx);
    ccl_status_t st = ccl__stream_drain(comm, CCL__CU_STREAM_LEGACY, 1, what);
    if (prev != ctx) cu->CtxSetCurrent(prev);
    return st;
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
            if (!bufs[k] || ccl__device_mem_kind(cu, bufs[k], &ctx) != CCL__MEM_CUDA) continue;
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
ccl_status_t ccl__grow_pinned(struct ccl_comm *comm, const struct ccl__cu *cu, void **buf, size_t *have,
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
     * leaves that stream waiting for its batch (stream_link.c), and a copy on a
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
    return ccl__grow_pinned(comm, cu, &comm->device->stage, &comm->device->stage_bytes, bytes);
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
    for (int i = 0; i < n; i++) ndev += calls[i].device != 0 && !calls[i].piped;
    if (!ndev) return CCL_OK;
    struct ccl__stage *st = calloc(1, sizeof(*st));
    if (st) st->r = calloc((size_t)ndev * 2, sizeof(*st->r));
    if (!st || !st->r) {
        free(st);
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "out of memory staging device buffers");
    }
    for (int i = 0; i < n; i++)
        if (calls[i].device && !calls[i].piped) plan_call(comm, &calls[i], st->r, &st->n, total);
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
    s = r == CCL__CUDA_SUCCESS ? ccl__stream_drain(comm, comm->device->stream, 0, "copying device buffers in")
                               : ccl__device_fail(comm, r, "cuMemcpyAsync", "copying device buffers in");
    if (s != CCL_OK) {
        stage_free(st);
        return s;
    }
    *out = st;
    return CCL_OK;
}

ccl_status_t ccl__stage_out(struct ccl_comm *comm, struct ccl__stage *st, int ok) {
    if (!st) return CCL_OK;
    const struct ccl__cu *cu = ccl__cuda();
    const char *what = "copying results to device buffers";
    CUresult r = ok ? stage_copies(cu, st, comm->device->stage, 0, comm->device->stream) : CCL__CUDA_SUCCESS;
    ccl_status_t s = r != CCL__CUDA_SUCCESS ? ccl__device_fail(comm, r, "cuMemcpyAsync", what)
                     : ok                   ? ccl__stream_drain(comm, comm->device->stream, 0, what)
                                            : CCL_OK;
    stage_free(st);
    return s;
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
    ccl_status_t res = ccl__grow_pinned(comm, cu, &d->ostage, &d->ostage_bytes, total);
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

