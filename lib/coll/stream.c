/* Stream-ordered calls: a batch waits for its stream's earlier work, and
 * the stream waits for the batch (see device.h). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "coll/device.h"
#include "coll/device_state.h"
#include "core/log.h"

/* Ticket words, one per communicator that has ordered a stream. They live
 * as long as the process: a stream may reach its wait on a word after the
 * communicator is gone, so a word is never freed, only handed to a later
 * communicator, which continues its count (a wait that is still queued
 * then still passes). */
#define TICKET_WORDS 1024
static pthread_mutex_t words_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t *words;           /* pinned, device-mapped */
static unsigned char words_used[TICKET_WORDS];

struct host_wait {
    _Atomic int go;
};

struct ccl__stream_link {
    struct ccl__device_state *d;
    CUevent ready;         /* recorded on the stream at issue: the batch runs once it completes */
    uint32_t ticket;       /* the stream goes on once the ticket word reaches it */
    struct host_wait *hw;  /* instead, where the stream waits in a host function */
};

ccl_status_t ccl__stream_usable(void *stream, int *ordered, char *why, size_t whylen) {
    *ordered = 0;
    if (ccl__cuda_in_process()) {
        /* The default stream belongs to the thread's current context: with
         * none, this thread has queued nothing that the call could follow
         * (a process may hold the driver without using it: hwloc's CUDA
         * plugins load it), so the call runs at once, as without CUDA. */
        CUcontext ctx = NULL;
        *ordered = stream || (ccl__cuda()->CtxGetCurrent(&ctx) == CCL__CUDA_SUCCESS && ctx);
        return CCL_OK;
    }
    if (!stream) return CCL_OK; /* no CUDA here: nothing can be on the default stream */
    char reason[600];
    if (!ccl__cuda_load(reason, sizeof reason)) {
        snprintf(why, whylen, "a CUDA stream was given, but %s", reason);
        return CCL_ERR_UNSUPPORTED;
    }
    *ordered = 1;
    return CCL_OK;
}

/* Under d->lock, with d's context current: comm's ticket word. */
static ccl_status_t ticket_word(struct ccl_comm *comm, const struct ccl__cu *cu, struct ccl__device_state *d) {
    if (d->ticket) return CCL_OK;
    CUresult r = CCL__CUDA_SUCCESS;
    pthread_mutex_lock(&words_lock);
    if (!words) {
        void *p = NULL;
        r = cu->MemHostAlloc(&p, TICKET_WORDS * sizeof(uint32_t),
                             CCL__CU_MEMHOSTALLOC_PORTABLE | CCL__CU_MEMHOSTALLOC_DEVICEMAP);
        if (r == CCL__CUDA_SUCCESS) words = p;
    }
    int w = -1;
    for (int i = 0; words && i < TICKET_WORDS && w < 0; i++)
        if (!words_used[i]) w = i;
    if (w >= 0) words_used[w] = 1;
    pthread_mutex_unlock(&words_lock);
    if (r != CCL__CUDA_SUCCESS) return ccl__device_fail(comm, r, "cuMemHostAlloc", "ordering a stream");
    if (w < 0)
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "ordering a stream: more than %d live communicators order streams",
                              TICKET_WORDS);
    r = cu->MemHostGetDevicePointer(&d->ticket_dev, (void *)&words[w], 0);
    if (r != CCL__CUDA_SUCCESS) {
        pthread_mutex_lock(&words_lock);
        words_used[w] = 0;
        pthread_mutex_unlock(&words_lock);
        return ccl__device_fail(comm, r, "cuMemHostGetDevicePointer", "ordering a stream");
    }
    d->ticket = &words[w];
    atomic_store(&d->issued, atomic_load(d->ticket));
    return CCL_OK;
}

void ccl__stream_ticket_free(struct ccl__device_state *d) {
    if (!d->ticket) return;
    pthread_mutex_lock(&words_lock);
    words_used[d->ticket - words] = 0;
    pthread_mutex_unlock(&words_lock);
    d->ticket = NULL;
}

/* A host function that holds its stream until the batch lets it go (it
 * makes no CUDA call, as host functions must not). */
static void host_wait_fn(void *arg) {
    struct host_wait *w = arg;
    while (!atomic_load_explicit(&w->go, memory_order_acquire)) nanosleep(&(struct timespec){0, 20000}, NULL);
    free(w);
}

static void link_free(const struct ccl__cu *cu, struct ccl__stream_link *l) {
    if (l->ready) cu->EventDestroy(l->ready);
    free(l);
}

ccl_status_t ccl__stream_link_new(struct ccl_comm *comm, void *stream, struct ccl__stream_link **out) {
    const struct ccl__cu *cu = ccl__cuda();
    CUcontext ctx = NULL;
    CUresult r = stream ? cu->StreamGetCtx(stream, &ctx) : cu->CtxGetCurrent(&ctx);
    if (r != CCL__CUDA_SUCCESS) return ccl__device_fail(comm, r, stream ? "cuStreamGetCtx" : "cuCtxGetCurrent", "ordering a stream");
    if (!ctx)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "ordering the default stream: this thread has no current CUDA context (set a device first)");
    CCL_CHECK(ccl__device_bind(comm, ctx, "ordering a stream"));
    struct ccl__device_state *d = comm->device;
    CUcontext prev = NULL;
    cu->CtxGetCurrent(&prev);
    if (prev != ctx) cu->CtxSetCurrent(ctx);
    pthread_mutex_lock(&d->lock);
    ccl_status_t st = ticket_word(comm, cu, d);
    pthread_mutex_unlock(&d->lock);
    struct ccl__stream_link *l = st == CCL_OK ? calloc(1, sizeof(*l)) : NULL;
    if (st == CCL_OK && !l) st = ccl__set_error(comm, CCL_ERR_NO_MEMORY, "ordering a stream: out of memory");
    if (st == CCL_OK) {
        l->d = d;
        if ((r = cu->EventCreate(&l->ready, CCL__CU_EVENT_DISABLE_TIMING)) != CCL__CUDA_SUCCESS ||
            (r = cu->EventRecord(l->ready, stream)) != CCL__CUDA_SUCCESS)
            st = ccl__device_fail(comm, r, "cuEventRecord", "ordering a stream");
    }
    if (st == CCL_OK) {
        l->ticket = atomic_fetch_add(&d->issued, 1) + 1;
        r = cu->StreamWaitValue32(stream, d->ticket_dev, l->ticket, CCL__CU_STREAM_WAIT_VALUE_GEQ);
        if (r != CCL__CUDA_SUCCESS) { /* no stream memory operations on this device */
            l->hw = calloc(1, sizeof(*l->hw));
            r = l->hw ? cu->LaunchHostFunc(stream, host_wait_fn, l->hw) : r;
            if (r != CCL__CUDA_SUCCESS) {
                free(l->hw);
                l->hw = NULL;
                st = ccl__device_fail(comm, r, "cuLaunchHostFunc", "making a stream wait");
            }
        }
    }
    if (prev != ctx) cu->CtxSetCurrent(prev);
    if (st != CCL_OK) {
        if (l) link_free(cu, l);
        return st;
    }
    *out = l;
    return CCL_OK;
}

ccl_status_t ccl__stream_link_wait(struct ccl_comm *comm, struct ccl__stream_link *l) {
    const struct ccl__cu *cu = ccl__cuda();
    cu->CtxSetCurrent(l->d->ctx);
    CUresult r;
    for (int spins = 0; (r = cu->EventQuery(l->ready)) == CCL__CUDA_ERROR_NOT_READY; spins++) {
        ccl_status_t h = ccl__comm_health(comm);
        if (h < 0) return h;
        if (spins > 1000) nanosleep(&(struct timespec){0, 20000}, NULL);
    }
    if (r != CCL__CUDA_SUCCESS) return ccl__device_fail(comm, r, "cuEventQuery", "waiting for the stream");
    return CCL_OK;
}

void ccl__stream_link_release(struct ccl__stream_link *l) {
    if (!l) return;
    const struct ccl__cu *cu = ccl__cuda();
    cu->CtxSetCurrent(l->d->ctx);
    if (l->hw) {
        atomic_store_explicit(&l->hw->go, 1, memory_order_release); /* the host function frees it */
    } else {
        /* Batches of one communicator finish in issue order, so tickets
         * only grow; the comparison keeps that true across wrap-around. */
        uint32_t cur = atomic_load_explicit(l->d->ticket, memory_order_relaxed);
        if ((int32_t)(l->ticket - cur) > 0) atomic_store_explicit(l->d->ticket, l->ticket, memory_order_release);
    }
    link_free(cu, l);
}
