/*
 * The direct algorithm's tiny all-reduces: every rank's contribution
 * travels in its own cache lines, with the call's number in the first, so
 * a peer's whole input (up to 32 bytes of it) crosses between cores in the
 * one line the reader polls. A call:
 *
 *   write      rank r copies its input into slot s % 2 of its lines (its
 *              window's control page), stamps the call's identity, and
 *              stores s, the number of its call on this path, last;
 *   read       it waits for every peer's slot s % 2 to say s, checks the
 *              identity, and folds the inputs in rank order 0, 1, ...,
 *              N-1 (the direct algorithm's order, so its bits) into its
 *              output.
 *
 * No round counters and no "done": rank r writes slot s % 2 again only in
 * call s + 2, and it starts that call after it finished call s + 1, for
 * which it saw every peer's s + 1; a peer writes s + 1 only after it
 * finished call s, its reads of r's slot s % 2 included. The direct path's
 * one-shot round instead waits on a counter, reads the input from a line
 * of its own and publishes "done": three lines a peer and call where this
 * takes one (bench/NOTES.md has the measurements).
 */
#include <stdatomic.h>
#include <string.h>

#include "algo/algo.h"
#include "core/status.h"
#include "core/trace.h"
#include "prims/wait.h"

/* One slot: the call's number, its identity and the input, from the start
 * of a cache line. */
struct lines_slot {
    _Alignas(64) _Atomic uint64_t seq;
    struct ccl__slot_meta meta;
    uint8_t data[CCL__LINES_SLOT_BYTES - sizeof(uint64_t) - sizeof(struct ccl__slot_meta)];
};
_Static_assert(sizeof(struct lines_slot) == CCL__LINES_SLOT_BYTES, "a slot is whole lines");
_Static_assert(offsetof(struct lines_slot, data) == 32, "the first 32 bytes of input share the number's line");
_Static_assert(sizeof(((struct lines_slot *)0)->data) == CCL__LINES_MAX_BYTES, "the largest input fits a slot");

static struct lines_slot *slot_of(const struct ccl_comm *comm, int rank, uint64_t s) {
    return (struct lines_slot *)(void *)(comm->windows[rank] + CCL__WINDOW_LINES_AT) + (s & 1);
}

struct lines_wait {
    const struct ccl_comm *comm;
    uint64_t s;
    struct ccl__conn **pending; /* peers whose slot is not there yet */
    int npending;
};

static ccl_status_t poll_slots(void *ctx, int *moved) {
    struct lines_wait *w = ctx;
    int k = 0;
    for (int i = 0; i < w->npending; i++) {
        const struct lines_slot *sl = slot_of(w->comm, w->pending[i]->peer, w->s);
        if (atomic_load_explicit(&sl->seq, memory_order_acquire) != w->s) w->pending[k++] = w->pending[i];
    }
    if (k < w->npending) *moved = 1;
    w->npending = k;
    return k ? CCL_INPROGRESS : CCL_OK;
}

int ccl__lines_can_run(const struct ccl_comm *comm, const struct ccl__coll_args *a) {
    size_t bytes = a->id.count * ccl_dtype_size(a->id.dtype);
    return a->id.kind == CCL__K_ALL_REDUCE && comm->windows && a->mem == CCL__MEM_HOST && bytes > 0 &&
           bytes <= CCL__LINES_MAX_BYTES;
}

/* The trace tells it as the direct path's one-shot round: a send to every
 * peer when the slot is written, a receive and a reduction from every
 * peer when it is read, in rank order on both sides. */
static void trace_all(struct ccl__prims *p, int kind, int reduced, double t0, size_t bytes) {
    struct ccl_comm *comm = p->comm;
    if (__builtin_expect(comm->trace == NULL, 1)) return;
    ccl__prims_at(p, CCL__TR_DIRECT, CCL__TR_REDUCE_PHASE, 0, CCL__TR_REDUCE_PHASE, 0, 0, 0, 0);
    double t1 = ccl__now();
    for (int q = 0; q < comm->nranks; q++) {
        if (q == comm->rank) continue;
        ccl__prims_trace(p, kind, q, t0, t1, bytes);
        if (reduced) ccl__prims_trace(p, CCL__TR_REDUCE, q, t0, t1, bytes);
    }
}

ccl_status_t ccl__lines_all_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct ccl__prims p;
    CCL_CHECK(ccl__prims_init(&p, comm, &a->id, CCL__LINES_MAX_BYTES, a->mem));
    const struct ccl__compute *cu = p.compute;
    size_t count = a->id.count, bytes = count * p.esize;
    int n = comm->nranks, r = comm->rank;
    uint64_t s = ++comm->lines_calls;
    double t0 = comm->trace ? ccl__now() : 0;
    struct lines_slot *mine = slot_of(comm, r, s);
    memcpy(mine->data, a->sendbuf, bytes);
    mine->meta = ccl__prims_stamp(&p, bytes);
    atomic_store_explicit(&mine->seq, s, memory_order_release);
    trace_all(&p, CCL__TR_SEND, 0, t0, bytes);
    t0 = comm->trace ? ccl__now() : 0;

    struct lines_wait w = {.comm = comm, .s = s, .pending = comm->scratch_conns};
    for (int q = 0; q < n; q++)
        if (q != r) w.pending[w.npending++] = comm->conns[q];
    /* The call's name is formatted only for a wait that may have to tell
     * it (formatted every call, 3% of a call's time). */
    int moved = 0;
    if (poll_slots(&w, &moved) == CCL_OK) ccl__status_step(comm); /* done at the first look, counted as ccl__wait does */
    else CCL_CHECK(ccl__wait(comm, ccl__prims_what(&p), w.pending, &w.npending, poll_slots, &w));
    /* Peers are rung after the wait, not at the write: the ring's fence
     * waits for this rank's line to leave its core, which by now it has,
     * and a peer that sleeps waits for every rank anyway, the last of
     * whom rings it. Every rank writes before it waits, so no wait waits
     * on a ring that comes after it. */
    ccl__wake_peers(comm);
    for (int q = 0; q < n; q++)
        if (q != r) CCL_CHECK(ccl__prims_check_meta(&p, q, &slot_of(comm, q, s)->meta, bytes));

    /* Rank order, from the slots (in place, the input is the output). */
    void *dst = a->recvbuf;
    if (n == 1) memcpy(dst, mine->data, bytes);
    else cu->reduce(p.reduce, dst, slot_of(comm, 0, s)->data, slot_of(comm, 1, s)->data, count);
    for (int q = 2; q < n; q++) cu->reduce(p.reduce, dst, dst, slot_of(comm, q, s)->data, count);
    if (a->id.op == CCL_AVG) cu->divide(dst, count, a->id.dtype, n);
    trace_all(&p, CCL__TR_RECV, 1, t0, bytes);
    return CCL_OK;
}
