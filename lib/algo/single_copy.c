/*
 * The single-copy algorithm: on one host, a rank reads its peers' own
 * buffers, wherever the callers put them, through cross-memory attach
 * (core/cma.h): the kernel copies from the peer's pages straight into
 * this rank's memory, one copy where the slots make two (the writer's in,
 * the reader's out). It is one round of the direct path (direct_round.h),
 * whose counters order it:
 *
 *   post       each rank publishes, with the call's identity, the
 *              addresses of its buffers in its own process; once every
 *              peer has posted, every input is ready.
 *   reduce     all-reduce, reduce-scatter and reduce: rank r folds slice
 *              (block) r of every rank's input, in rank order 0, 1, ...,
 *              N-1 (the direct algorithm's order, so its bits), reading
 *              each peer's piece into a small scratch piece, and writes
 *              the result to its own output (reduce: to the root's,
 *              through the kernel too).
 *   reduced    all-reduce only: once every rank has published its slice,
 *              each reads the others' slices out of their outputs
 *              straight into its own.
 *   copy       all-gather and broadcast: each rank reads every peer's
 *              block (the root's buffer) straight into its output.
 *   done       every rank's reads and writes of its peers' buffers are
 *              over; no rank returns before every peer is done, so no
 *              caller touches a buffer a peer still reads.
 *
 * A rank writes only its own slice of any output, and reads a peer's
 * input only where no rank writes before the round's next counter, so in
 * place is safe. The kernel checks every access: a peer that exits, or a
 * buffer unmapped during the call, fails the call with the culprit named,
 * never a crash. Whether the kernel allows it at all was probed at init
 * (plan/cma_probe.c, comm->single_copy).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/direct_round.h"
#include "core/cma.h"
#include "core/trace.h"
#include "core/wake.h"
#include "prims/wait.h"

/* Where a rank's buffers lie in its own process: in its control page, one
 * record per window buffer (round parity), after the zero-copy path's. */
struct srec {
    uint64_t send, recv;
};
#define SREC_AT 1536
_Static_assert(SREC_AT + 2 * sizeof(struct srec) <= CCL__WINDOW_GPU_WORDS, "the records end before the GPU words");

/* A peer's piece read into scratch to be folded: in the second-level
 * cache between the kernel's copy and the reduction, and large enough
 * that a system call's cost is small beside its bytes. */
#define PIECE_BYTES (64u << 10)

struct single {
    struct ccl__direct d;
    const struct ccl__coll_args *a;
    char *acc, *tmp; /* folding scratch, PIECE_BYTES each */
};

/* rank's record of the round, in its control page: it stays until the
 * round two later, which waits for this rank's done. */
static struct srec *srec_of(const struct ccl__direct *d, int rank) {
    return (struct srec *)(void *)(ccl__direct_ctrl_page(d, rank) + SREC_AT) + (d->g & 1);
}

static uint64_t send_of(const struct single *s, int q) { return srec_of(&s->d, q)->send; }
static uint64_t recv_of(const struct single *s, int q) { return srec_of(&s->d, q)->recv; }

static ccl_status_t cma_failed(struct single *s, int q, int err, int writing, uint64_t at, size_t len) {
    const char *what = ccl__prims_what(&s->d.p);
    /* A rank that heard of a failure elsewhere returns and its caller may
     * free its buffers while this rank still reads them: the failure it
     * heard of is the one to name. */
    ccl_status_t known = ccl__check_failures(s->d.comm, what);
    return known < 0 ? known : (ccl_status_t)ccl__cma_failed(s->d.comm, what, q, err, writing, at, len);
}

static ccl_status_t peer_read(struct single *s, int q, void *dst, uint64_t remote, size_t len) {
    int err = len ? ccl__cma_read(s->d.comm->peers[q].pid, dst, remote, len) : 0;
    return err ? cma_failed(s, q, err, 0, remote, len) : CCL_OK;
}

static ccl_status_t peer_write(struct single *s, int q, uint64_t remote, const void *src, size_t len) {
    int err = len ? ccl__cma_write(s->d.comm->peers[q].pid, remote, src, len) : 0;
    return err ? cma_failed(s, q, err, 1, remote, len) : CCL_OK;
}

/* Elements [at, at + n) of every rank's input (block offset at), folded in
 * rank order into this rank's dst, or, with to >= 0, into rank to's
 * output at remote. */
static ccl_status_t fold(struct single *s, size_t at, size_t n, char *dst, int to, uint64_t remote) {
    const struct ccl__compute *cu = s->d.p.compute;
    const char *mine = s->a->sendbuf;
    size_t es = s->d.p.esize, per = PIECE_BYTES / es;
    int N = s->d.n, r = s->d.r;
    for (size_t off = 0; off < n; off += per) {
        size_t m = n - off < per ? n - off : per, b = (at + off) * es;
        /* Into the output at the last reduction, in place or not: dst
         * may alias an input exactly (compute.h). */
        char *last = to < 0 ? dst + off * es : s->acc;
        const char *first = mine + b;
        if (r != 0) {
            CCL_CHECK(peer_read(s, 0, s->acc, send_of(s, 0) + b, m * es));
            first = s->acc;
        }
        for (int q = 1; q < N; q++) {
            const char *src = mine + b;
            if (q != r) {
                CCL_CHECK(peer_read(s, q, s->tmp, send_of(s, q) + b, m * es));
                src = s->tmp;
            }
            cu->reduce(s->d.p.reduce, q == N - 1 ? last : s->acc, q == 1 ? first : s->acc, src, m);
        }
        if (s->d.p.id.op == CCL_AVG) cu->divide(last, m, s->d.p.id.dtype, N);
        if (to >= 0 && to != r) CCL_CHECK(peer_write(s, to, remote + off * es, s->acc, m * es));
        else if (to >= 0) cu->copy(dst + off * es, s->acc, m * es);
    }
    return CCL_OK;
}

static ccl_status_t run(struct single *s) {
    const struct ccl__coll_args *a = s->a;
    struct ccl__direct *d = &s->d;
    size_t es = d->p.esize, count = a->id.count;
    int n = d->n, r = d->r, kind = a->id.kind, root = a->id.root;
    char *out = a->recvbuf;
    double t0 = ccl__direct_trace_now(d);
    if (kind == CCL__K_ALL_REDUCE || kind == CCL__K_REDUCE) {
        size_t so = ccl__block_off(count, n, r), sl = ccl__block_len(count, n, r);
        for (int q = 0; q < n; q++)
            ccl__direct_trace_published(d, q, CCL__TR_REDUCE_SCATTER, 0, q, ccl__block_off(count, n, q) * es,
                                        ccl__block_len(count, n, q) * es, t0);
        t0 = ccl__direct_trace_now(d);
        if (kind == CCL__K_ALL_REDUCE) CCL_CHECK(fold(s, so, sl, out + so * es, -1, 0));
        else CCL_CHECK(fold(s, so, sl, r == root ? out + so * es : NULL, root, recv_of(s, root) + so * es));
        for (int q = 0; q < n; q++) ccl__direct_trace_read(d, q, 1, CCL__TR_REDUCE_SCATTER, 0, r, so * es, sl * es, t0);
        if (kind == CCL__K_REDUCE) return CCL_OK;
        t0 = ccl__direct_trace_now(d);
        ccl__direct_publish(d, CCL__DIRECT_REDUCED);
        ccl__direct_trace_published(d, -1, CCL__TR_ALL_GATHER, 1, r, so * es, sl * es, t0);
        CCL_CHECK(ccl__direct_wait(d, CCL__DIRECT_REDUCED, d->g, -1));
        for (int q = 0; q < n; q++) {
            size_t qo = ccl__block_off(count, n, q) * es, ql = ccl__block_len(count, n, q) * es;
            if (q == r) continue;
            t0 = ccl__direct_trace_now(d);
            CCL_CHECK(peer_read(s, q, out + qo, recv_of(s, q) + qo, ql));
            ccl__direct_trace_read(d, q, 0, CCL__TR_ALL_GATHER, 1, q, qo, ql, t0);
        }
        return CCL_OK;
    }
    if (kind == CCL__K_REDUCE_SCATTER) {
        for (int q = 0; q < n; q++)
            ccl__direct_trace_published(d, q, CCL__TR_REDUCE_SCATTER, 0, q, (size_t)q * count * es, count * es, t0);
        t0 = ccl__direct_trace_now(d);
        CCL_CHECK(fold(s, (size_t)r * count, count, out, -1, 0));
        for (int q = 0; q < n; q++)
            ccl__direct_trace_read(d, q, 1, CCL__TR_REDUCE_SCATTER, 0, r, (size_t)r * count * es, count * es, t0);
        return CCL_OK;
    }
    if (kind == CCL__K_ALL_GATHER) {
        size_t b = count * es;
        ccl__direct_trace_published(d, -1, CCL__TR_ALL_GATHER, 0, r, (size_t)r * b, b, t0);
        if (out + (size_t)r * b != (const char *)a->sendbuf) d->p.compute->copy(out + (size_t)r * b, a->sendbuf, b);
        for (int q = 0; q < n; q++) {
            if (q == r) continue;
            t0 = ccl__direct_trace_now(d);
            CCL_CHECK(peer_read(s, q, out + (size_t)q * b, send_of(s, q), b));
            ccl__direct_trace_read(d, q, 0, CCL__TR_ALL_GATHER, 0, q, (size_t)q * b, b, t0);
        }
        return CCL_OK;
    }
    /* broadcast */
    if (r == root) {
        ccl__direct_trace_published(d, -1, CCL__TR_BROADCAST, 0, 0, 0, count * es, t0);
        ccl__algo_local_copy(a, count);
        return CCL_OK;
    }
    CCL_CHECK(peer_read(s, root, out, send_of(s, root), count * es));
    ccl__direct_trace_read(d, root, 0, CCL__TR_BROADCAST, 0, 0, 0, count * es, t0);
    return CCL_OK;
}

static ccl_status_t single_copy(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct single s = {.a = a};
    struct ccl__direct *d = &s.d;
    CCL_CHECK(ccl__direct_init(d, comm, a));
    d->long_reads = 1;
    int folds = a->id.kind != CCL__K_ALL_GATHER && a->id.kind != CCL__K_BROADCAST;
    if (folds && (s.acc = ccl__fold_scratch(comm, 2 * PIECE_BYTES))) s.tmp = s.acc + PIECE_BYTES;
    ccl_status_t st = !folds || s.acc
                          ? CCL_OK
                          : ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory", ccl__prims_what(&d->p));
    if (st == CCL_OK) st = ccl__direct_begin(d, -1);
    if (st == CCL_OK) {
        *srec_of(d, d->r) = (struct srec){(uint64_t)(uintptr_t)a->sendbuf, (uint64_t)(uintptr_t)a->recvbuf};
        st = ccl__direct_post(d, 0);
    }
    if (st == CCL_OK) st = ccl__direct_await_posted(d, 0, -1);
    /* Peers wait on this rank's counters from here: a failure fails the
     * communicator, so that they hear of it. */
    if (st == CCL_OK) st = run(&s);
    if (st == CCL_OK) st = ccl__direct_end(d);
    if (st == CCL_OK) st = ccl__direct_wait(d, CCL__DIRECT_DONE, d->g, -1);
    return st < 0 ? ccl__comm_fail(comm, st) : st;
}

static int single_copy_can_run(const struct ccl_comm *comm, const struct ccl__coll_args *a, char *why,
                               size_t whylen) {
    if (!comm->single_copy) {
        if (comm->single_copy_off[0]) snprintf(why, whylen, "single_copy is off: %s", comm->single_copy_off);
        else snprintf(why, whylen, "single_copy needs every rank on one host with a shared window (shm between "
                                   "every pair, CCL_SHM_WINDOW_BYTES > 0)");
        return 0;
    }
    if (a->mem != CCL__MEM_HOST) {
        snprintf(why, whylen, "single_copy reads host memory only");
        return 0;
    }
    return 1;
}

const struct ccl__algo ccl__algo_single_copy = {
    .name = "single_copy",
    .summary = "one host: every rank reads its peers' buffers in place through the kernel (cross-memory attach)",
    .run = {[CCL__K_ALL_REDUCE] = single_copy, [CCL__K_REDUCE_SCATTER] = single_copy,
            [CCL__K_ALL_GATHER] = single_copy, [CCL__K_BROADCAST] = single_copy, [CCL__K_REDUCE] = single_copy},
    .can_run = single_copy_can_run,
};
