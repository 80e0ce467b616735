/*
 * Single-host direct collectives over the direct path's shared windows
 * (comm->windows, set up by the planner when every rank maps every other
 * rank's window): instead of passing data hop by hop, each rank reads what
 * it needs straight out of its peers' windows.
 *
 * A rank's window, written by its owner only and read by every peer:
 *   control    the round counters and the call's identity (struct ctrl)
 *   buffer 0   in area, out area (AREA bytes each)
 *   buffer 1   the same
 * A call runs in rounds, numbered over the communicator's life
 * (comm->direct_rounds, the same on every rank). Round g uses buffer g % 2,
 * so a rank may fill one buffer while a slow peer still reads the other.
 *
 * Round g of an all-reduce on rank r of N, over one chunk of the input:
 *   1. wait until every peer's `done` >= g - 2 (or `posted` >= g - 1, which
 *      it publishes only later): nobody reads buffer g % 2
 *   2. copy the chunk into in; publish the call's identity and posted = g
 *   3. wait until every peer's `posted` >= g and check its identity; reduce
 *      slice r of the chunk from every rank's in area, in rank order
 *      0, 1, ..., N-1, into out; reduced = g
 *   4. wait until every peer's `reduced` >= g; copy slice q of rank q's out
 *      area to the output, for every q; done = g
 * Each element is reduced once, by one rank, so every rank gets the same
 * bits, run after run. The order (rank order) is not the ring's, so a float
 * result may differ from the ring's in the last bits.
 *
 * A small round (ONE_SHOT_BYTES at most) skips the out area: every rank
 * that wants the result reduces the whole chunk itself, in the same rank
 * order, so the bits agree, and one wait fewer is worth more than the
 * repeated arithmetic.
 *
 * Reduce is the same with only the root copying out; reduce-scatter reduces
 * rank r's block straight into its output (no out area, no step 4);
 * all-gather and broadcast copy in, then copy out (broadcast's root
 * alone copies in, but every rank posts and checks the call's identity).
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

#include "algo/algo.h"
#include "algo/direct_round.h"
#include "prims/wait.h"

#define CTRL_BYTES 8192
#define ONE_SHOT_BYTES 16384

struct ctrl {
    _Alignas(64) _Atomic uint64_t posted;  /* last round whose input is in the window */
    struct ccl__slot_meta meta[2];         /* the call each buffer's `posted` belongs to */
    _Alignas(64) _Atomic uint64_t reduced; /* last round whose out area is complete */
    _Alignas(64) _Atomic uint64_t done;    /* last round whose reads of peers' windows are over */
};
_Static_assert(sizeof(struct ctrl) <= CCL__WINDOW_GPU_WORDS, "the control block ends before the GPU words");
_Static_assert(CCL__WINDOW_GPU_WORDS + 128 <= CCL__WINDOW_LINES_AT, "the GPU words end before the tiny calls' slots");
_Static_assert(CCL__WINDOW_LINES_AT + 2 * CCL__LINES_SLOT_BYTES <= CTRL_BYTES, "the slots fit the control page");
/* A reader that sees `posted` move has the call's identity in the same
 * cache line: one transfer between cores per peer and round, not two. */
_Static_assert(offsetof(struct ctrl, meta) + sizeof(((struct ctrl *)0)->meta) <= 64, "posted and meta share a line");

static struct ctrl *ctrl_of(const struct ccl__direct *d, int rank) { return (struct ctrl *)(void *)d->comm->windows[rank]; }

uint8_t *ccl__direct_ctrl_page(const struct ccl__direct *d, int rank) { return d->comm->windows[rank]; }

static _Atomic uint64_t *flag_of(const struct ccl__direct *d, int rank, enum ccl__direct_flag f) {
    struct ctrl *c = ctrl_of(d, rank);
    return f == CCL__DIRECT_POSTED ? &c->posted : f == CCL__DIRECT_REDUCED ? &c->reduced : &c->done;
}

static int reached(const struct ccl__direct *d, int rank, enum ccl__direct_flag f, uint64_t want) {
    if (f == CCL__DIRECT_FREE) {
        if (atomic_load_explicit(&ctrl_of(d, rank)->posted, memory_order_acquire) > want) return 1;
        f = CCL__DIRECT_DONE;
    }
    return atomic_load_explicit(flag_of(d, rank, f), memory_order_acquire) >= want;
}

static uint8_t *in_area(const struct ccl__direct *d, int rank) {
    return d->comm->windows[rank] + CTRL_BYTES + (size_t)(d->g & 1) * 2 * d->area;
}

size_t ccl__direct_area(size_t window_bytes) { return ((window_bytes - CTRL_BYTES) / 4) & ~(size_t)63; }

static uint8_t *out_area(const struct ccl__direct *d, int rank) { return in_area(d, rank) + d->area; }

ccl__copy_fn ccl__direct_out_copy(const struct ccl__direct *d, size_t output_bytes, int output_was_read) {
    const struct ccl__compute *cu = d->p.compute;
    int past = cu->copy_streaming && ccl__algo_output_streams(d->comm, d->p.mem, output_bytes, output_was_read);
    return past ? cu->copy_streaming : cu->copy;
}

ccl_status_t ccl__direct_init(struct ccl__direct *d, struct ccl_comm *comm, const struct ccl__coll_args *a) {
    d->comm = comm;
    d->n = comm->nranks;
    d->r = comm->rank;
    d->area = ccl__direct_area(comm->window_bytes);
    d->g = d->g0 = comm->direct_rounds;
    d->long_reads = 0;
    return ccl__prims_init(&d->p, comm, &a->id, d->area, a->mem);
}

/* ---- waiting on peers' counters ---- */

struct flag_wait {
    const struct ccl__direct *d;
    enum ccl__direct_flag f;
    uint64_t want;
    struct ccl__conn **pending; /* peers not there yet; shrinks as they arrive */
    int npending;
};

static ccl_status_t poll_flag(void *ctx, int *moved) {
    struct flag_wait *w = ctx;
    int k = 0;
    for (int i = 0; i < w->npending; i++) {
        if (!reached(w->d, w->pending[i]->peer, w->f, w->want)) w->pending[k++] = w->pending[i];
    }
    if (k < w->npending) *moved = 1;
    w->npending = k;
    return k ? CCL_INPROGRESS : CCL_OK;
}

/* Waits until `rank`'s counter f reaches want (rank < 0: every peer's).
 * A timeout names the peers still missing. */
ccl_status_t ccl__direct_wait(const struct ccl__direct *d, enum ccl__direct_flag f, uint64_t want, int rank) {
    struct ccl_comm *comm = d->comm;
    struct flag_wait w = {.d = d, .f = f, .want = want, .pending = comm->scratch_conns};
    for (int q = 0; q < d->n; q++)
        if (q != d->r && (rank < 0 || q == rank)) w.pending[w.npending++] = comm->conns[q];
    static const struct ccl__wait_opts long_reads = {.no_learn = 1};
    return ccl__wait_with(comm, ccl__prims_what(&d->p), w.pending, &w.npending, poll_flag, &w,
                          d->long_reads ? &long_reads : NULL);
}

/* Publishes counter f = the current round and rings every peer. */
void ccl__direct_publish(const struct ccl__direct *d, enum ccl__direct_flag f) {
    atomic_store_explicit(flag_of(d, d->r, f), d->g, memory_order_release);
    ccl__wake_peers(d->comm);
}

struct settle_wait {
    const struct ccl__compute *cu;
    struct ccl__compute_ticket t;
};

static ccl_status_t poll_settled(void *ctx, int *moved) {
    struct settle_wait *w = ctx;
    (void)moved;
    return w->cu->done(w->t) ? CCL_OK : CCL_INPROGRESS;
}

/* Waits for the copies and reductions submitted so far: a counter is
 * published only over data that is really there. */
ccl_status_t ccl__direct_settle(const struct ccl__direct *d) {
    struct settle_wait w = {.cu = d->p.compute, .t = d->p.compute->fence()};
    int none = 0;
    return ccl__wait(d->comm, ccl__prims_what(&d->p), NULL, &none, poll_settled, &w);
}

/* ---- the phases of a round ---- */

/* Starts the next round, in which this rank fills its buffer (or only
 * its identity) for `reader` to read (-1: every peer). Whoever read the
 * round two before, which used the same buffer, must be done with it:
 * that may have been every peer, in another call, so a round read by one
 * peer waits for that one only when the round before it was read by the
 * same one alone (comm->direct_narrow remembers, per buffer). */
ccl_status_t ccl__direct_begin(struct ccl__direct *d, int reader) {
    struct ccl_comm *comm = d->comm;
    d->g = ++comm->direct_rounds;
    unsigned bit = 1u << (d->g & 1);
    int wait_on = reader >= 0 && (comm->direct_narrow & bit) ? reader : -1;
    if (d->g > 2) CCL_CHECK(ccl__direct_wait(d, CCL__DIRECT_FREE, d->g - 2, wait_on));
    comm->direct_narrow = reader >= 0 ? comm->direct_narrow | bit : comm->direct_narrow & ~bit;
    return CCL_OK;
}

/* The in area has been filled with `bytes` of this call: tell the peers. */
ccl_status_t ccl__direct_post(struct ccl__direct *d, size_t bytes) {
    CCL_CHECK(ccl__direct_settle(d));
    ctrl_of(d, d->r)->meta[d->g & 1] = ccl__prims_stamp(&d->p, bytes);
    ccl__direct_publish(d, CCL__DIRECT_POSTED);
    return CCL_OK;
}

/* Waits for rank's (rank < 0: every peer's) input of this round and checks
 * that it belongs to the same call. */
ccl_status_t ccl__direct_await_posted(struct ccl__direct *d, size_t bytes, int rank) {
    CCL_CHECK(ccl__direct_wait(d, CCL__DIRECT_POSTED, d->g, rank));
    for (int q = 0; q < d->n; q++)
        if (q != d->r && (rank < 0 || q == rank))
            CCL_CHECK(ccl__prims_check_meta(&d->p, q, &ctrl_of(d, q)->meta[d->g & 1], bytes));
    return CCL_OK;
}

/* This rank's input for the round is in its in area: publish it and wait
 * for every peer's. */
static ccl_status_t exchange_inputs(struct ccl__direct *d, size_t bytes) {
    CCL_CHECK(ccl__direct_post(d, bytes));
    return ccl__direct_await_posted(d, bytes, -1);
}

/* This rank's reads of peers' windows for the round are over. */
ccl_status_t ccl__direct_end(struct ccl__direct *d) {
    CCL_CHECK(ccl__direct_settle(d));
    ccl__direct_publish(d, CCL__DIRECT_DONE);
    return CCL_OK;
}

/* dst <- every rank's in area at byte offset `at`, n elements, reduced in
 * rank order (divided for CCL_AVG). */
static void reduce_all(const struct ccl__direct *d, void *dst, size_t at, size_t n) {
    const struct ccl__compute *cu = d->p.compute;
    if (n == 0) return;
    if (d->n == 1) cu->copy(dst, in_area(d, 0) + at, n * d->p.esize);
    else cu->reduce(d->p.reduce, dst, in_area(d, 0) + at, in_area(d, 1) + at, n);
    for (int q = 2; q < d->n; q++) cu->reduce(d->p.reduce, dst, dst, in_area(d, q) + at, n);
    if (d->p.id.op == CCL_AVG) cu->divide(dst, n, d->p.id.dtype, d->n);
}

/* ---- tracing ----
 * Nothing is sent on the direct path: a rank publishes its data in its
 * window and peers read it in place. The trace still tells it as
 * transfers, so a replay can follow every piece: the owner records a send
 * to every peer that will read the piece when it publishes, the reader a
 * receive (and a reduction, when it adds the piece) when it reads. Both
 * record a pair's pieces in the same order, so link_seq pairs them. A
 * piece is (chunk, round): which slice or block, and which round. */

static int tracing(const struct ccl__direct *d) { return __builtin_expect(d->comm->trace != NULL, 0); }

static void trace_label(struct ccl__direct *d, int phase, int step, int chunk, size_t off_bytes) {
    ccl__prims_at(&d->p, CCL__TR_DIRECT, phase, step, phase, step, chunk, (uint32_t)(d->g - 1 - d->g0),
                  (uint64_t)off_bytes);
}

/* The owner published a piece that `reader` reads (reader < 0: every peer). */
void ccl__direct_trace_published(struct ccl__direct *d, int reader, int phase, int step, int chunk,
                                 size_t off_bytes, size_t bytes, double t0) {
    if (!tracing(d) || !bytes) return;
    trace_label(d, phase, step, chunk, off_bytes);
    double t1 = ccl__now();
    for (int q = 0; q < d->n; q++)
        if (q != d->r && (reader < 0 || q == reader)) ccl__prims_trace(&d->p, CCL__TR_SEND, q, t0, t1, bytes);
}

/* This rank read a piece from `owner`'s window (and added it: reduced). */
void ccl__direct_trace_read(struct ccl__direct *d, int owner, int reduced, int phase, int step, int chunk,
                            size_t off_bytes, size_t bytes, double t0) {
    if (!tracing(d) || !bytes || owner == d->r) return;
    trace_label(d, phase, step, chunk, off_bytes);
    double t1 = ccl__now();
    ccl__prims_trace(&d->p, CCL__TR_RECV, owner, t0, t1, bytes);
    if (reduced) ccl__prims_trace(&d->p, CCL__TR_REDUCE, owner, t0, t1, bytes);
}

/* Read every peer's piece (the same labels from each). */
static void trace_read_all(struct ccl__direct *d, int reduced, int phase, int step, int chunk, size_t off_bytes,
                           size_t bytes, double t0) {
    for (int q = 0; q < d->n; q++) ccl__direct_trace_read(d, q, reduced, phase, step, chunk, off_bytes, bytes, t0);
}

double ccl__direct_trace_now(const struct ccl__direct *d) { return tracing(d) ? ccl__now() : 0; }

/* ---- the collectives ---- */

/* All-reduce, and reduce (only the root copies the result out). */
static ccl_status_t reduce_rounds(struct ccl_comm *comm, const struct ccl__coll_args *a, int everyone) {
    struct ccl__direct d;
    CCL_CHECK(ccl__direct_init(&d, comm, a));
    size_t es = d.p.esize, count = a->id.count, per = d.area / es;
    int wants = everyone || d.r == a->id.root;
    ccl__copy_fn out = ccl__direct_out_copy(&d, count * es, a->sendbuf == a->recvbuf);
    for (size_t off = 0; off < count; off += per) {
        size_t m = count - off < per ? count - off : per;
        CCL_CHECK(ccl__direct_begin(&d, -1));
        double t0 = ccl__direct_trace_now(&d);
        d.p.compute->copy(in_area(&d, d.r), ccl__at(a->sendbuf, off, es), m * es);
        CCL_CHECK(exchange_inputs(&d, m * es));
        if (m * es <= ONE_SHOT_BYTES) {
            /* One step: every rank that wants the result reads every input. */
            ccl__direct_trace_published(&d, everyone ? -1 : a->id.root, CCL__TR_REDUCE_PHASE, 0, 0, off * es, m * es, t0);
            t0 = ccl__direct_trace_now(&d);
            if (wants) reduce_all(&d, (char *)a->recvbuf + off * es, 0, m);
            if (wants) trace_read_all(&d, 1, CCL__TR_REDUCE_PHASE, 0, 0, off * es, m * es, t0);
            CCL_CHECK(ccl__direct_end(&d));
            continue;
        }
        /* Step 0 reduces slice q of every input on rank q; step 1 copies
         * the finished slices out. */
        for (int q = 0; tracing(&d) && q < d.n; q++)
            ccl__direct_trace_published(&d, q, CCL__TR_REDUCE_SCATTER, 0, q, (off + ccl__block_off(m, d.n, q)) * es,
                            ccl__block_len(m, d.n, q) * es, t0);
        t0 = ccl__direct_trace_now(&d);
        size_t so = ccl__block_off(m, d.n, d.r), sl = ccl__block_len(m, d.n, d.r);
        reduce_all(&d, out_area(&d, d.r) + so * es, so * es, sl);
        trace_read_all(&d, 1, CCL__TR_REDUCE_SCATTER, 0, d.r, (off + so) * es, sl * es, t0);
        CCL_CHECK(ccl__direct_settle(&d));
        t0 = ccl__direct_trace_now(&d);
        ccl__direct_publish(&d, CCL__DIRECT_REDUCED);
        ccl__direct_trace_published(&d, everyone ? -1 : a->id.root, CCL__TR_ALL_GATHER, 1, d.r, (off + so) * es, sl * es, t0);
        if (wants) {
            CCL_CHECK(ccl__direct_wait(&d, CCL__DIRECT_REDUCED, d.g, -1));
            for (int q = 0; q < d.n; q++) {
                size_t qo = ccl__block_off(m, d.n, q), ql = ccl__block_len(m, d.n, q);
                t0 = ccl__direct_trace_now(&d);
                out((char *)a->recvbuf + (off + qo) * es, out_area(&d, q) + qo * es, ql * es);
                ccl__direct_trace_read(&d, q, 0, CCL__TR_ALL_GATHER, 1, q, (off + qo) * es, ql * es, t0);
            }
        }
        CCL_CHECK(ccl__direct_end(&d));
    }
    return CCL_OK;
}

static ccl_status_t direct_all_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    if (ccl__lines_can_run(comm, a)) return ccl__lines_all_reduce(comm, a);
    return reduce_rounds(comm, a, 1);
}

static ccl_status_t direct_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    return reduce_rounds(comm, a, 0);
}

/* Each round carries elements [off, off + m) of every rank's N blocks. */
static ccl_status_t direct_reduce_scatter(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct ccl__direct d;
    CCL_CHECK(ccl__direct_init(&d, comm, a));
    size_t es = d.p.esize, count = a->id.count, per = d.area / es / (size_t)d.n;
    if (per == 0) per = 1; /* never: a window holds more than N elements */
    for (size_t off = 0; off < count; off += per) {
        size_t m = count - off < per ? count - off : per;
        CCL_CHECK(ccl__direct_begin(&d, -1));
        double t0 = ccl__direct_trace_now(&d);
        for (int b = 0; b < d.n; b++)
            d.p.compute->copy(in_area(&d, d.r) + (size_t)b * m * es,
                              ccl__at(a->sendbuf, (size_t)b * count + off, es), m * es);
        CCL_CHECK(exchange_inputs(&d, m * es));
        for (int q = 0; tracing(&d) && q < d.n; q++) /* block q of every input goes to rank q */
            ccl__direct_trace_published(&d, q, CCL__TR_REDUCE_SCATTER, 0, q, ((size_t)q * count + off) * es, m * es, t0);
        t0 = ccl__direct_trace_now(&d);
        reduce_all(&d, (char *)a->recvbuf + off * es, (size_t)d.r * m * es, m);
        trace_read_all(&d, 1, CCL__TR_REDUCE_SCATTER, 0, d.r, ((size_t)d.r * count + off) * es, m * es, t0);
        CCL_CHECK(ccl__direct_end(&d));
    }
    return CCL_OK;
}

static ccl_status_t direct_all_gather(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct ccl__direct d;
    CCL_CHECK(ccl__direct_init(&d, comm, a));
    size_t es = d.p.esize, count = a->id.count, per = d.area / es;
    ccl__copy_fn out = ccl__direct_out_copy(&d, (size_t)d.n * count * es, 0); /* its own block in place is not copied */
    for (size_t off = 0; off < count; off += per) {
        size_t m = count - off < per ? count - off : per;
        const char *mine = ccl__at(a->sendbuf, off, es);
        CCL_CHECK(ccl__direct_begin(&d, -1));
        double t0 = ccl__direct_trace_now(&d);
        d.p.compute->copy(in_area(&d, d.r), mine, m * es);
        CCL_CHECK(exchange_inputs(&d, m * es));
        ccl__direct_trace_published(&d, -1, CCL__TR_ALL_GATHER, 0, d.r, ((size_t)d.r * count + off) * es, m * es, t0);
        for (int q = 0; q < d.n; q++) {
            char *to = (char *)a->recvbuf + ((size_t)q * count + off) * es;
            const void *from = q == d.r ? (const void *)mine : in_area(&d, q);
            t0 = ccl__direct_trace_now(&d);
            if (to != from) out(to, from, m * es);
            ccl__direct_trace_read(&d, q, 0, CCL__TR_ALL_GATHER, 0, q, ((size_t)q * count + off) * es, m * es, t0);
        }
        CCL_CHECK(ccl__direct_end(&d));
    }
    return CCL_OK;
}

/* Every rank posts the call's identity each round, the root with its data
 * and the others with none, and checks the next rank's (and the root's):
 * ranks that disagree on the root (two that both believe they are it)
 * disagree with a neighbour somewhere around the ring, so a rank fails in
 * the call and the others hear of it there or at the next call, where the
 * root alone posting would let each go its own way. Checking every peer's
 * identity instead cost every rank a wait on every peer each round: 8 B
 * to 4 KiB broadcasts on 4 ranks took 1.3-1.4x as long. Above a one-shot
 * round (16 KiB) every rank checks every peer's again: on 4 ranks sharing
 * 2 cores, 32 KiB and 256 KiB broadcasts took 1.08x as long checking the
 * neighbours only (medians of 5 alternations), the ranks that finished
 * early taking turns on the cores from the root's copy. */
static ccl_status_t direct_broadcast(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct ccl__direct d;
    CCL_CHECK(ccl__direct_init(&d, comm, a));
    size_t es = d.p.esize, count = a->id.count, per = d.area / es;
    int root = a->id.root, next = (d.r + 1) % d.n, prev = (d.r + d.n - 1) % d.n;
    int narrow = count * es <= ONE_SHOT_BYTES;
    ccl__copy_fn out = ccl__direct_out_copy(&d, count * es, 0);
    for (size_t off = 0; off < count; off += per) {
        size_t m = count - off < per ? count - off : per;
        /* The root's buffer is read by every peer, another rank's identity
         * only by the rank before it. */
        CCL_CHECK(ccl__direct_begin(&d, d.r == root || !narrow ? -1 : prev));
        double t0 = ccl__direct_trace_now(&d);
        if (d.r == root) d.p.compute->copy(in_area(&d, d.r), ccl__at(a->sendbuf, off, es), m * es);
        CCL_CHECK(ccl__direct_post(&d, m * es));
        if (!narrow) {
            CCL_CHECK(ccl__direct_await_posted(&d, m * es, -1));
        } else {
            CCL_CHECK(ccl__direct_await_posted(&d, m * es, next));
            if (d.r != root && next != root) CCL_CHECK(ccl__direct_await_posted(&d, m * es, root));
        }
        if (d.r == root) {
            ccl__direct_trace_published(&d, -1, CCL__TR_BROADCAST, 0, 0, off * es, m * es, t0);
            /* Out of place, the root's own output while the peers read the
             * round: its piece is still in this core's caches, and the
             * peers no longer wait for a copy of the whole buffer first. */
            if (a->sendbuf != a->recvbuf)
                d.p.compute->copy((char *)a->recvbuf + off * es, ccl__at(a->sendbuf, off, es), m * es);
        } else {
            t0 = ccl__direct_trace_now(&d);
            out((char *)a->recvbuf + off * es, in_area(&d, root), m * es);
            ccl__direct_trace_read(&d, root, 0, CCL__TR_BROADCAST, 0, 0, off * es, m * es, t0);
        }
        CCL_CHECK(ccl__direct_end(&d));
    }
    return CCL_OK;
}

static int direct_can_run(const struct ccl_comm *comm, const struct ccl__coll_args *a, char *why, size_t whylen) {
    if (a->id.kind == CCL__K_ALL_TO_ALL || comm->windows) return 1;
    snprintf(why, whylen, "direct %s needs every rank on one host with a shared window (shm between every pair, "
                          "CCL_SHM_WINDOW_BYTES > 0)", ccl__op_kind_name(a->id.kind));
    return 0;
}

const struct ccl__algo ccl__algo_direct = {
    .name = "direct",
    .summary = "one host: every rank reads its peers' shared windows in place; all-to-all: every pair at once",
    .run = {[CCL__K_ALL_REDUCE] = direct_all_reduce, [CCL__K_REDUCE_SCATTER] = direct_reduce_scatter,
            [CCL__K_ALL_GATHER] = direct_all_gather, [CCL__K_BROADCAST] = direct_broadcast,
            [CCL__K_REDUCE] = direct_reduce, [CCL__K_ALL_TO_ALL] = ccl__direct_all_to_all},
    .can_run = direct_can_run,
};
