/* Stream-ordered calls: a batch waits for its stream's earlier work, and
 * the stream waits for the batch (see device.h). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "device/device.h"
#include "device/pipeline.h"
#include "device/state.h"
#include "core/log.h"
#include "prims/wait.h"

/* Words in pinned, device-mapped memory that streams and executors pass
 * to each other, so that an executor makes no CUDA call for a
 * stream-ordered batch: a call into the driver can wait for a lock that a
 * thread holds while it waits for the stream (a pageable cudaMemcpy, say),
 * and the stream waits for the batch.
 *
 * First the ticket words, one per communicator that has ordered a stream.
 * They live as long as the process: a stream may reach its wait on a word
 * after the communicator is gone, so a word is never freed, only handed to
 * a later communicator, which continues its count (a wait that is still
 * queued then still passes). Then the ready words, one per batch in
 * flight: the stream sets it once the work before the batch is done. */
#define TICKET_WORDS 1024
#define READY_WORDS 4096
static pthread_mutex_t words_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t *words;
static CUdeviceptr words_dev; /* the words as devices see them: one mapping, so word i is at words_dev + 4 i */
static unsigned char words_used[TICKET_WORDS + READY_WORDS];

/* Under words_lock: a free word in [lo, hi), or -1. */
static int take_word(int lo, int hi) {
    for (int i = lo; words && i < hi; i++)
        if (!words_used[i]) return words_used[i] = 1, i;
    return -1;
}

static void give_word(_Atomic uint32_t *w) {
    pthread_mutex_lock(&words_lock);
    words_used[w - words] = 0;
    pthread_mutex_unlock(&words_lock);
}

/* Under words_lock: the words, allocated and mapped once. */
static ccl_status_t words_ready(struct ccl_comm *comm, const struct ccl__cu *cu) {
    if (words) return CCL_OK;
    void *p = NULL;
    CUresult r = cu->MemHostAlloc(&p, (TICKET_WORDS + READY_WORDS) * sizeof(uint32_t),
                                  CCL__CU_MEMHOSTALLOC_PORTABLE | CCL__CU_MEMHOSTALLOC_DEVICEMAP);
    if (r != CCL__CUDA_SUCCESS) return ccl__device_fail(comm, r, "cuMemHostAlloc", "ordering a stream");
    if ((r = cu->MemHostGetDevicePointer(&words_dev, p, 0)) != CCL__CUDA_SUCCESS) {
        cu->MemFreeHost(p); /* nothing waits on these words yet */
        return ccl__device_fail(comm, r, "cuMemHostGetDevicePointer", "ordering a stream");
    }
    words = p;
    return CCL_OK;
}

static CUdeviceptr word_dev(_Atomic uint32_t *w) { return words_dev + (CUdeviceptr)(w - words) * sizeof(uint32_t); }

struct host_wait {
    _Atomic int go;
};

struct ccl__stream_link {
    struct ccl__device_state *d;
    _Atomic uint32_t *ready; /* a ready word: the batch runs once the stream has set it */
    uint32_t ticket;         /* the stream goes on once the ticket word reaches it */
    struct host_wait *hw;    /* instead, where the stream waits in a host function */
    /* A call staged piece by piece (pipeline.h): piece i runs once the
     * stream set its ready word (after its copy in), and the stream copies
     * piece i out once the ticket word reaches first_ticket + i (or its
     * host function is let go); ticket is the last piece's. */
    struct ccl__pipe *pipe;
    size_t npieces, released;
    uint32_t first_ticket;
    _Atomic uint32_t *piece_ready[CCL__PIPE_MAX_PIECES];
    struct host_wait *piece_hw[CCL__PIPE_MAX_PIECES];
};

/* A stream capturing a CUDA graph would record the call's host functions
 * and waits, and a replay would run them again against stale state (the
 * call would be neither redone nor right): refused, saying so. */
static ccl_status_t refuse_capture(void *stream, char *why, size_t whylen) {
    const struct ccl__cu *cu = ccl__cuda();
    int status = 0;
    if (!cu->StreamIsCapturing || cu->StreamIsCapturing(stream, &status) != CCL__CUDA_SUCCESS || status == 0)
        return CCL_OK;
    snprintf(why, whylen, "the CUDA stream is %s a CUDA graph: libccl's calls cannot be captured in a graph (they "
             "would not run again on replay); make the call outside the capture",
             status == 1 ? "capturing" : "in an invalidated capture of");
    return CCL_ERR_INVALID_USAGE;
}

ccl_status_t ccl__stream_usable(void *stream, int *ordered, char *why, size_t whylen) {
    *ordered = 0;
    if (ccl__cuda_in_process()) {
        /* The default stream belongs to the thread's current context: with
         * none, this thread has queued nothing that the call could follow
         * (a process may hold the driver without using it: a library it
         * links may have loaded it), so the call runs at once, as without CUDA. */
        CUcontext ctx = NULL;
        *ordered = stream || (ccl__cuda()->CtxGetCurrent(&ctx) == CCL__CUDA_SUCCESS && ctx);
        return *ordered ? refuse_capture(stream, why, whylen) : CCL_OK;
    }
    if (!stream) return CCL_OK; /* no CUDA here: nothing can be on the default stream */
    char reason[600];
    if (!ccl__cuda_load(reason, sizeof reason)) {
        snprintf(why, whylen, "a CUDA stream was given, but %s", reason);
        return CCL_ERR_UNSUPPORTED;
    }
    *ordered = 1;
    return refuse_capture(stream, why, whylen);
}

/* Under d->lock, with d's context current: comm's ticket word. */
static ccl_status_t ticket_word(struct ccl_comm *comm, const struct ccl__cu *cu, struct ccl__device_state *d) {
    if (d->ticket) return CCL_OK;
    pthread_mutex_lock(&words_lock);
    ccl_status_t st = words_ready(comm, cu);
    int w = st == CCL_OK ? take_word(0, TICKET_WORDS) : -1;
    pthread_mutex_unlock(&words_lock);
    if (st != CCL_OK) return st;
    if (w < 0)
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "ordering a stream: more than %d live communicators order streams",
                              TICKET_WORDS);
    d->ticket = &words[w];
    d->ticket_dev = word_dev(d->ticket);
    atomic_store(&d->issued, atomic_load(d->ticket));
    return CCL_OK;
}

void ccl__stream_ticket_free(struct ccl__device_state *d) {
    if (!d->ticket) return;
    give_word(d->ticket);
    d->ticket = NULL;
}

/* A host function (it makes no CUDA call, as host functions must not). */
static void set_ready_fn(void *arg) { atomic_store_explicit((_Atomic uint32_t *)arg, 1, memory_order_release); }

/* Under d's lock, ctx current, the words ready (ticket_word): a ready
 * word in *out, set by stream after the work queued on it so far (a host
 * function sets it where stream memory operations are not supported);
 * *out stays NULL unless the write is queued. */
static ccl_status_t queue_ready_word(struct ccl_comm *comm, const struct ccl__cu *cu, CUstream stream,
                                     _Atomic uint32_t **out) {
    *out = NULL;
    pthread_mutex_lock(&words_lock);
    int w = take_word(TICKET_WORDS, TICKET_WORDS + READY_WORDS);
    pthread_mutex_unlock(&words_lock);
    if (w < 0)
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY,
                              "ordering a stream: more than %d stream-ordered batches, or pieces of large calls "
                              "(CCL_DEVICE_PIECE_BYTES), in flight in this process",
                              READY_WORDS);
    _Atomic uint32_t *word = &words[w];
    atomic_store(word, 0);
    CUresult r = cu->StreamWriteValue32(stream, word_dev(word), 1, 0);
    if (r != CCL__CUDA_SUCCESS) r = cu->LaunchHostFunc(stream, set_ready_fn, (void *)word);
    if (r != CCL__CUDA_SUCCESS) {
        give_word(word);
        return ccl__device_fail(comm, r, "cuLaunchHostFunc", "ordering a stream");
    }
    *out = word;
    return CCL_OK;
}

/* A host function that holds its stream until the batch lets it go (it
 * makes no CUDA call, as host functions must not). It cannot wait through
 * ccl__wait: it runs on the driver's thread, which owns no communicator
 * and must not touch one that may be gone by then. Its end is certain
 * all the same: every batch releases its link, run or not
 * (ccl__stream_link_release), and a batch's own waits have deadlines. */
static void host_wait_fn(void *arg) {
    struct host_wait *w = arg;
    while (!atomic_load_explicit(&w->go, memory_order_acquire)) nanosleep(&(struct timespec){0, 20000}, NULL);
    free(w);
}

/* A ready word the stream has set goes back; one it has not set yet
 * (a batch that failed before it ran) stays taken, so that no later
 * batch takes it and is let go by this one's write. */
static void give_ready_word(_Atomic uint32_t *w) {
    if (w && atomic_load_explicit(w, memory_order_acquire)) give_word(w);
}

/* No CUDA call: the executor frees links (see the words). */
static void link_free(struct ccl__stream_link *l) {
    give_ready_word(l->ready);
    for (size_t i = 0; i < l->npieces; i++) give_ready_word(l->piece_ready[i]);
    ccl__pipe_free(l->pipe);
    free(l);
}

/* Under d's lock, ctx current: stream waits until the ticket word
 * reaches ticket (in a host function, *hw, where stream memory
 * operations are not supported). */
static ccl_status_t queue_ticket_wait(struct ccl_comm *comm, const struct ccl__cu *cu, struct ccl__device_state *d,
                                      CUstream stream, uint32_t ticket, struct host_wait **hw) {
    *hw = NULL;
    CUresult r = cu->StreamWaitValue32(stream, d->ticket_dev, ticket, CCL__CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CCL__CUDA_SUCCESS) return CCL_OK;
    struct host_wait *w = calloc(1, sizeof(*w)); /* no stream memory operations on this device */
    r = w ? cu->LaunchHostFunc(stream, host_wait_fn, w) : r;
    if (r != CCL__CUDA_SUCCESS) {
        free(w);
        return ccl__device_fail(comm, r, "cuLaunchHostFunc", "making a stream wait");
    }
    *hw = w;
    return CCL_OK;
}

/* Under d's lock, ctx current, the ticket word ready: call c (a batch of
 * its own, which the communicator cuts) staged piece by piece on stream:
 * every piece's copy in and ready word, then per piece its ticket wait
 * and copy out. Once a ticket wait may be queued, a failure fails the
 * communicator and returns CCL_OK: the batch must still be released, in
 * order, for the stream to go on. */
static ccl_status_t link_pieces(struct ccl_comm *comm, const struct ccl__cu *cu, struct ccl__stream_link *l,
                                struct ccl__call *c, size_t per, CUstream stream) {
    struct ccl__device_state *d = comm->device;
    struct ccl__pipe *p;
    size_t total;
    l->d = d;
    ccl_status_t st = ccl__pipe_new(comm, c, per, &p, &total);
    if (st == CCL_OK) st = ccl__grow_pinned(comm, cu, &d->ostage, &d->ostage_bytes, total);
    CUresult r = CCL__CUDA_SUCCESS;
    /* the last stream-ordered batch may still copy out of the buffer */
    if (st == CCL_OK && d->ostage_free && (r = cu->StreamWaitEvent(stream, d->ostage_free, 0)) != CCL__CUDA_SUCCESS)
        st = ccl__device_fail(comm, r, "cuStreamWaitEvent", "staging device buffers on the stream");
    if (st != CCL_OK) {
        ccl__pipe_free(p);
        return st;
    }
    ccl__pipe_place(p, d->ostage);
    ccl__pipe_attach(p, l);
    l->pipe = p;
    size_t k = ccl__pipe_pieces(p);
    for (size_t i = 0; i < k && st == CCL_OK; i++) {
        if (ccl__pipe_copies_in(p) && (r = ccl__pipe_copy_in(cu, p, i, stream)) != CCL__CUDA_SUCCESS)
            st = ccl__device_fail(comm, r, "cuMemcpyAsync", "staging device buffers on the stream");
        if (st == CCL_OK) st = queue_ready_word(comm, cu, stream, &l->piece_ready[i]);
        l->npieces = i + 1;
    }
    if (st != CCL_OK) return st;
    l->first_ticket = atomic_fetch_add(&d->issued, (uint32_t)k) + 1;
    l->ticket = l->first_ticket + (uint32_t)k - 1;
    const char *call = "cuMemcpyAsync";
    for (size_t i = 0; i < k && st == CCL_OK; i++) {
        st = queue_ticket_wait(comm, cu, d, stream, l->first_ticket + (uint32_t)i, &l->piece_hw[i]);
        if (st == CCL_OK && ccl__pipe_copies_out(p) && (r = ccl__pipe_copy_out(cu, p, i, stream)) != CCL__CUDA_SUCCESS)
            st = ccl__device_fail(comm, r, call, "staging results on the stream");
    }
    r = CCL__CUDA_SUCCESS;
    if (!d->ostage_free) call = "cuEventCreate", r = cu->EventCreate(&d->ostage_free, CCL__CU_EVENT_DISABLE_TIMING);
    if (r == CCL__CUDA_SUCCESS) call = "cuEventRecord", r = cu->EventRecord(d->ostage_free, stream);
    if (st == CCL_OK && r != CCL__CUDA_SUCCESS) st = ccl__device_fail(comm, r, call, "staging results on the stream");
    if (st != CCL_OK) ccl__comm_fail(comm, st); /* nobody takes the results */
    c->device = 0; /* the executor sees the pinned copy, through the pieces */
    c->pipe = p;
    return CCL_OK;
}

ccl_status_t ccl__stream_link_new(struct ccl_comm *comm, void *stream, struct ccl__call *calls, int n,
                                  struct ccl__stream_link **out) {
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
    /* Under the lock from the copies in to the copies out: the batches of
     * comm take the staging buffer in issue order. */
    pthread_mutex_lock(&d->lock);
    struct ccl__stage *stage = NULL;
    ccl_status_t st = ticket_word(comm, cu, d);
    struct ccl__stream_link *l = st == CCL_OK ? calloc(1, sizeof(*l)) : NULL;
    if (st == CCL_OK && !l) st = ccl__set_error(comm, CCL_ERR_NO_MEMORY, "ordering a stream: out of memory");
    size_t per = n == 1 && ccl__pipe_fits(comm, &calls[0]) ? ccl__pipe_piece_elems(comm, &calls[0].coll) : 0;
    if (st == CCL_OK && per) {
        st = link_pieces(comm, cu, l, &calls[0], per, stream);
        pthread_mutex_unlock(&d->lock);
        if (prev != ctx) cu->CtxSetCurrent(prev);
        if (st != CCL_OK) {
            link_free(l);
            return st;
        }
        *out = l;
        return CCL_OK;
    }
    if (st == CCL_OK) st = ccl__stage_on_stream_in(comm, calls, n, stream, &stage);
    if (st == CCL_OK) {
        l->d = d;
        st = queue_ready_word(comm, cu, stream, &l->ready);
    }
    if (st == CCL_OK) {
        l->ticket = atomic_fetch_add(&d->issued, 1) + 1;
        st = queue_ticket_wait(comm, cu, d, stream, l->ticket, &l->hw);
    }
    /* Without the copies out when the link failed: the batch never runs.
     * When only they fail (a broken context), the stream already waits
     * for this batch's ticket, so the batch still runs and releases it,
     * in order; the communicator fails, so nobody takes the results. */
    ccl_status_t out_st = ccl__stage_on_stream_out(comm, stage, stream, st == CCL_OK);
    if (st == CCL_OK && out_st < 0) ccl__comm_fail(comm, out_st);
    pthread_mutex_unlock(&d->lock);
    if (prev != ctx) cu->CtxSetCurrent(prev);
    if (st != CCL_OK) {
        if (l) link_free(l); /* a ready word the stream will still set stays taken (give_ready_word) */
        return st;
    }
    *out = l;
    return CCL_OK;
}

static ccl_status_t ready_poll(void *ctx, int *moved) {
    (void)moved;
    return atomic_load_explicit((_Atomic uint32_t *)ctx, memory_order_acquire) ? CCL_OK : CCL_INPROGRESS;
}

/* Through ccl__wait, so an abort, a failure or CCL_TIMEOUT ends it; the
 * stream rings no bell when it sets the word: after the communicator's
 * spin and yield the wait naps 20 us at a time. */
static ccl_status_t wait_word(struct ccl_comm *comm, _Atomic uint32_t *w) {
    int none = 0;
    return ccl__wait_with(comm, "a stream-ordered call, waiting for the work queued before it on its stream", NULL,
                          &none, ready_poll, (void *)w, &(struct ccl__wait_opts){.nap_s = 20e-6});
}

/* A call in pieces waits for each piece's word instead. */
ccl_status_t ccl__stream_link_wait(struct ccl_comm *comm, struct ccl__stream_link *l) {
    return l->pipe ? CCL_OK : wait_word(comm, l->ready);
}

ccl_status_t ccl__stream_link_piece_wait(struct ccl_comm *comm, struct ccl__stream_link *l, size_t i) {
    return wait_word(comm, l->piece_ready[i]);
}

/* Batches of one communicator finish in issue order, so tickets only
 * grow; the comparison keeps that true across wrap-around. */
static void ticket_out(struct ccl__device_state *d, uint32_t ticket) {
    uint32_t cur = atomic_load_explicit(d->ticket, memory_order_relaxed);
    if ((int32_t)(ticket - cur) > 0) atomic_store_explicit(d->ticket, ticket, memory_order_release);
}

void ccl__stream_link_piece_release(struct ccl__stream_link *l, size_t i) {
    if (l->piece_hw[i]) atomic_store_explicit(&l->piece_hw[i]->go, 1, memory_order_release); /* it frees itself */
    else ticket_out(l->d, l->first_ticket + (uint32_t)i);
    l->piece_hw[i] = NULL;
    l->released = i + 1;
}

void ccl__stream_link_release(struct ccl__stream_link *l) {
    if (!l) return;
    for (size_t i = l->released; l->pipe && i < ccl__pipe_pieces(l->pipe); i++) ccl__stream_link_piece_release(l, i);
    if (l->hw) atomic_store_explicit(&l->hw->go, 1, memory_order_release); /* the host function frees it */
    else ticket_out(l->d, l->ticket);
    link_free(l);
}
