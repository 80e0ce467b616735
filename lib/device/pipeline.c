/* Pipelined staging of one call's device buffers (see pipeline.h). */
#include "device/pipeline.h"

#include <stdlib.h>

#include "core/log.h"
#include "core/params.h"
#include "device/device.h"
#include "device/state.h"
#include "prims/wait.h"

void ccl__pipe_wish(uint8_t *ctx, uint32_t *piece_bytes) {
    const struct ccl__cu *cu = ccl__cuda_in_process() ? ccl__cuda() : NULL;
    CUcontext cur = NULL;
    *ctx = cu && cu->CtxGetCurrent(&cur) == CCL__CUDA_SUCCESS && cur;
    *piece_bytes = *ctx ? (uint32_t)ccl__params_get()->device_piece_bytes : 0;
}

void ccl__pipe_plan(struct ccl_comm *comm) {
    size_t piece = 0;
    int any = 0, whole = 0;
    for (int p = 0; p < comm->nranks; p++) {
        if (!comm->peers[p].device_ctx) continue;
        any = 1;
        size_t b = comm->peers[p].device_piece_bytes;
        if (!b) whole = 1;
        else if (!piece || b < piece) piece = b;
    }
    comm->device_piece_bytes = any && !whole ? piece : 0;
    if (comm->device_piece_bytes)
        CCL_INFO(CCL__SUB_PLAN, comm->rank,
                 "device buffers: all-reduce, broadcast, reduce, reduce-scatter and all-gather larger than %zu bytes "
                 "run in pieces of %zu (CCL_DEVICE_PIECE_BYTES), staged piece by piece",
                 2 * comm->device_piece_bytes, comm->device_piece_bytes);
}

/* How many blocks of count a reduce-scatter's input and an all-gather's
 * output hold (one per rank); every other buffer holds one. */
static int blocks_of(int kind, int nranks) {
    return kind == CCL__K_REDUCE_SCATTER || kind == CCL__K_ALL_GATHER ? nranks : 1;
}

size_t ccl__pipe_piece_elems(const struct ccl_comm *comm, const struct ccl__coll_args *a) {
    int k = a->id.kind;
    size_t es = ccl_dtype_size(a->id.dtype);
    if (!comm->device_piece_bytes || !es || a->planner_only ||
        (k != CCL__K_ALL_REDUCE && k != CCL__K_BROADCAST && k != CCL__K_REDUCE && k != CCL__K_REDUCE_SCATTER &&
         k != CCL__K_ALL_GATHER))
        return 0;
    /* A piece of a reduce-scatter or all-gather takes its elements from
     * every rank's block: a piece's bytes in all are the piece size. */
    size_t per = comm->device_piece_bytes / es / (size_t)blocks_of(k, comm->nranks), count = a->id.count;
    if (per == 0) per = 1;
    if (count <= 2 * per) return 0;
    size_t least = (count + CCL__PIPE_MAX_PIECES - 1) / CCL__PIPE_MAX_PIECES;
    return per > least ? per : least;
}

/* The call's device send and receive buffers (NULL: none, or host). */
static void device_sides(const struct ccl__call *c, const char **send, char **recv) {
    *send = c->device & CCL__DEV_SEND ? c->coll.sendbuf : NULL;
    *recv = c->device & CCL__DEV_RECV ? c->coll.recvbuf : NULL;
}

/* In place, where the call's send buffer lies in its receive buffer (or
 * the other way round): the byte offset of the smaller in the larger (an
 * all-gather's input is this rank's block of its output, a
 * reduce-scatter's output this rank's block of its input); -1 when the
 * buffers are not the call's in-place pair. */
static long in_place_at(const struct ccl_comm *comm, const struct ccl__coll_args *a, const char *s, const char *v) {
    size_t own = (size_t)comm->rank * a->id.count * ccl_dtype_size(a->id.dtype);
    switch (a->id.kind) {
    case CCL__K_ALL_GATHER: return s == v + own ? (long)own : -1;
    case CCL__K_REDUCE_SCATTER: return v == s + own ? (long)own : -1;
    default: return s == v ? 0 : -1;
    }
}

int ccl__pipe_fits(const struct ccl_comm *comm, const struct ccl__call *c) {
    if (c->is_p2p || !c->device || !ccl__pipe_piece_elems(comm, &c->coll)) return 0;
    const char *s;
    char *v;
    device_sides(c, &s, &v);
    size_t sb, rb;
    ccl__coll_span(comm, &c->coll, &sb, &rb);
    /* the call's in-place pair, or two buffers apart: a piece's copy out
     * then never lands on input a later piece has still to copy in */
    return !s || !v || in_place_at(comm, &c->coll, s, v) >= 0 || s + sb <= v || v + rb <= s;
}

struct ccl__pipe {
    struct ccl__coll_args host; /* the call on pinned memory (and the caller's host buffers) */
    const char *dsend;          /* device buffers, NULL where host */
    char *drecv;
    size_t es, count, per, pieces;
    int send_blocks, recv_blocks; /* blocks of count in each buffer, a piece's part of each copied alike */
    size_t send_span, recv_span;  /* pinned bytes of each, whole cache lines */
    long in_place;                /* in_place_at: -1, or the smaller buffer's offset in the larger */
    CUstream in, out;
    struct ccl__stream_link *link; /* a stream-ordered call's: the stream orders the copies, not the executor */
};

static size_t piece_off(const struct ccl__pipe *p, size_t i) { return i * p->per * p->es; }
static size_t piece_len(const struct ccl__pipe *p, size_t i) {
    size_t start = i * p->per, n = p->count - start < p->per ? p->count - start : p->per;
    return n * p->es;
}

static size_t lines(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

ccl_status_t ccl__pipe_new(struct ccl_comm *comm, const struct ccl__call *c, size_t piece_elems,
                           struct ccl__pipe **out, size_t *pinned_bytes) {
    struct ccl__pipe *p = calloc(1, sizeof(*p));
    *out = p;
    if (!p) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "out of memory staging device buffers");
    p->host = c->coll;
    device_sides(c, &p->dsend, &p->drecv);
    int k = c->coll.id.kind;
    p->es = ccl_dtype_size(c->coll.id.dtype);
    p->count = c->coll.id.count;
    p->per = piece_elems;
    p->pieces = (p->count + piece_elems - 1) / piece_elems;
    p->send_blocks = k == CCL__K_REDUCE_SCATTER ? comm->nranks : 1;
    p->recv_blocks = k == CCL__K_ALL_GATHER ? comm->nranks : 1;
    p->send_span = lines(p->count * p->es * (size_t)p->send_blocks);
    p->recv_span = lines(p->count * p->es * (size_t)p->recv_blocks);
    p->in_place = p->dsend && p->drecv ? in_place_at(comm, &c->coll, p->dsend, p->drecv) : -1;
    if (p->in_place >= 0) *pinned_bytes = p->send_span > p->recv_span ? p->send_span : p->recv_span;
    else *pinned_bytes = (p->dsend ? p->send_span : 0) + (p->drecv ? p->recv_span : 0);
    return CCL_OK;
}

void ccl__pipe_place(struct ccl__pipe *p, char *base) {
    if (p->in_place >= 0) { /* the pinned copy aliases as the device buffers do */
        int send_inside = p->recv_blocks > 1; /* an all-gather's input in its output */
        p->host.sendbuf = base + (send_inside ? p->in_place : 0);
        p->host.recvbuf = base + (send_inside ? 0 : p->in_place);
        return;
    }
    if (p->dsend) p->host.sendbuf = base;
    if (p->drecv) p->host.recvbuf = base + (p->dsend ? p->send_span : 0);
}

size_t ccl__pipe_pieces(const struct ccl__pipe *p) { return p->pieces; }
int ccl__pipe_copies_in(const struct ccl__pipe *p) { return p->dsend != NULL; }
int ccl__pipe_copies_out(const struct ccl__pipe *p) { return p->drecv != NULL; }

/* Piece i's part of every block: one copy each (the blocks are the
 * call's count apart in the device buffer and in its pinned copy alike). */
CUresult ccl__pipe_copy_in(const struct ccl__cu *cu, const struct ccl__pipe *p, size_t i, CUstream s) {
    CUresult r = CCL__CUDA_SUCCESS;
    for (int b = 0; b < p->send_blocks && r == CCL__CUDA_SUCCESS; b++) {
        size_t off = (size_t)b * p->count * p->es + piece_off(p, i);
        r = cu->MemcpyAsync((CUdeviceptr)(uintptr_t)((const char *)p->host.sendbuf + off),
                            (CUdeviceptr)(uintptr_t)(p->dsend + off), piece_len(p, i), s);
    }
    return r;
}

CUresult ccl__pipe_copy_out(const struct ccl__cu *cu, const struct ccl__pipe *p, size_t i, CUstream s) {
    CUresult r = CCL__CUDA_SUCCESS;
    for (int b = 0; b < p->recv_blocks && r == CCL__CUDA_SUCCESS; b++) {
        size_t off = (size_t)b * p->count * p->es + piece_off(p, i);
        r = cu->MemcpyAsync((CUdeviceptr)(uintptr_t)(p->drecv + off),
                            (CUdeviceptr)(uintptr_t)((char *)p->host.recvbuf + off), piece_len(p, i), s);
    }
    return r;
}

void ccl__pipe_attach(struct ccl__pipe *p, struct ccl__stream_link *l) { p->link = l; }
void ccl__pipe_free(struct ccl__pipe *p) { free(p); }

/* The out stream and the events of npieces, made on first use. */
static ccl_status_t pipe_resources(struct ccl_comm *comm, const struct ccl__cu *cu, size_t npieces) {
    struct ccl__device_state *d = comm->device;
    CUresult r;
    if (!d->out_stream && (r = cu->StreamCreate(&d->out_stream, CCL__CU_STREAM_NON_BLOCKING)) != CCL__CUDA_SUCCESS)
        return ccl__device_fail(comm, r, "cuStreamCreate", "staging device buffers in pieces");
    for (size_t i = 0; i < npieces; i++)
        if (!d->piece_in[i] &&
            (r = cu->EventCreate(&d->piece_in[i], CCL__CU_EVENT_DISABLE_TIMING)) != CCL__CUDA_SUCCESS)
            return ccl__device_fail(comm, r, "cuEventCreate", "staging device buffers in pieces");
    return CCL_OK;
}

/* Every piece's copy in on the staging stream, each followed by its event. */
static CUresult queue_in(const struct ccl__cu *cu, const struct ccl__pipe *p, CUevent *ev) {
    CUresult r = CCL__CUDA_SUCCESS;
    for (size_t i = 0; i < p->pieces && r == CCL__CUDA_SUCCESS; i++) {
        r = ccl__pipe_copy_in(cu, p, i, p->in);
        if (r == CCL__CUDA_SUCCESS) r = cu->EventRecord(ev[i], p->in);
    }
    return r;
}

ccl_status_t ccl__pipe_start(struct ccl_comm *comm, const struct ccl__call *c, size_t piece_elems,
                             struct ccl__pipe **out) {
    const struct ccl__cu *cu = ccl__cuda();
    struct ccl__pipe *p;
    size_t total;
    *out = NULL;
    CCL_CHECK(ccl__pipe_new(comm, c, piece_elems, &p, &total));
    ccl_status_t st = ccl__device_stream(comm, &p->in); /* comm's context made current */
    struct ccl__device_state *d = comm->device;
    if (st == CCL_OK) st = pipe_resources(comm, cu, p->pieces);
    if (st == CCL_OK) st = ccl__grow_pinned(comm, cu, &d->pstage, &d->pstage_bytes, total);
    if (st != CCL_OK) {
        free(p);
        return st;
    }
    p->out = d->out_stream;
    ccl__pipe_place(p, d->pstage);
    CUresult r = p->dsend ? queue_in(cu, p, d->piece_in) : CCL__CUDA_SUCCESS;
    if (r != CCL__CUDA_SUCCESS) {
        st = ccl__device_fail(comm, r, "cuMemcpyAsync", "copying device buffers in");
        (void)ccl__stream_drain(comm, p->in, 0, "copying device buffers in"); /* what was queued reads the caller's */
        free(p);
        return st;
    }
    *out = p;
    return CCL_OK;
}

const struct ccl__coll_args *ccl__pipe_args(const struct ccl__pipe *p) { return &p->host; }

/* Read by ccl_comm_describe from any thread. */
static void count_pipelined(struct ccl_comm *comm) { __atomic_fetch_add(&comm->pipelined_calls, 1, __ATOMIC_RELAXED); }

struct piece_wait {
    struct ccl_comm *comm;
    const struct ccl__cu *cu;
    CUevent ev;
};

static ccl_status_t piece_poll(void *ctx, int *moved) {
    struct piece_wait *w = ctx;
    (void)moved;
    CUresult r = w->cu->EventQuery(w->ev);
    if (r == CCL__CUDA_SUCCESS) return CCL_OK;
    return r == CCL__CUDA_ERROR_NOT_READY ? CCL_INPROGRESS
                                          : ccl__device_fail(w->comm, r, "cuEventQuery", "copying device buffers in");
}

/* Nothing rings a bell when a copy ends: after the spin and yield, the
 * wait naps 20 us at a time (a piece of 4 MiB takes 80 us or more). */
ccl_status_t ccl__pipe_ready(struct ccl_comm *comm, struct ccl__pipe *p, size_t piece) {
    if (p->link) return ccl__stream_link_piece_wait(comm, p->link, piece);
    if (!p->dsend) return CCL_OK;
    struct piece_wait w = {.comm = comm, .cu = ccl__cuda(), .ev = comm->device->piece_in[piece]};
    int none = 0;
    struct ccl__wait_opts o = {.nap_s = 20e-6};
    return ccl__wait_with(comm, "copying device buffers in", NULL, &none, piece_poll, &w, &o);
}

ccl_status_t ccl__pipe_done(struct ccl_comm *comm, struct ccl__pipe *p, size_t piece) {
    if (p->link) {
        /* counted before the stream may go on: a caller that synchronised
         * with it then finds the call counted */
        if (piece + 1 == p->pieces) count_pipelined(comm);
        ccl__stream_link_piece_release(p->link, piece);
        return CCL_OK;
    }
    if (!p->drecv) return CCL_OK;
    CUresult r = ccl__pipe_copy_out(ccl__cuda(), p, piece, p->out);
    return r == CCL__CUDA_SUCCESS ? CCL_OK
                                  : ccl__device_fail(comm, r, "cuMemcpyAsync", "copying results to device buffers");
}

ccl_status_t ccl__pipe_end(struct ccl_comm *comm, struct ccl__pipe *p, int ok) {
    if (!p) return CCL_OK;
    if (p->link) { /* the stream copies; the link frees p */
        (void)ok;
        return CCL_OK;
    }
    ccl_status_t in = ccl__stream_drain(comm, p->in, 0, "copying device buffers in");
    ccl_status_t out = ccl__stream_drain(comm, p->out, 0, "copying results to device buffers");
    if (ok && in == CCL_OK && out == CCL_OK) count_pipelined(comm);
    free(p);
    return in != CCL_OK ? in : out;
}
