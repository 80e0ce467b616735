/*
 * Ring collectives. Positions on the ring come from the planner
 * (comm->ring); block b of a reduce-scatter or all-gather belongs to rank
 * b, so every rank ends with its own block whatever the ring order. The
 * same code runs a ring over a subset of the ranks (ccl__ring_run: the
 * hierarchical algorithm's rings inside a host and across hosts), where
 * the block of each position is given with the order.
 *
 * Data is processed in rounds: round j moves slice j (at most
 * slice_elems elements) of every block through all 2(N-1) steps. Steps only
 * wait for the slots they need, so consecutive rounds overlap in the FIFOs:
 * that is the pipeline. Each slice of the result is reduced in one fixed
 * order (ring order starting after its owner), the same on every run.
 */
#include <string.h>

#include "algo/algo.h"

/* N blocks: block b holds base + (b < extra) elements and starts after the
 * blocks before it. all_reduce splits its count near-evenly (extra = count %
 * N); reduce_scatter and all_gather have N blocks of count (extra = 0),
 * stride elements apart (count, or a cut call's whole count for a piece). */
struct blocks {
    size_t base, extra, stride;
};

static size_t block_len(const struct blocks *B, int b) { return B->base + ((size_t)b < B->extra); }

/* Element offset of block b in the N-block buffer. */
static size_t block_off(const struct blocks *B, int b) {
    return (size_t)b * B->stride + ((size_t)b < B->extra ? (size_t)b : B->extra);
}

struct ring {
    struct ccl_comm *comm;
    const struct ccl__coll_args *a;
    struct ccl__prims p;
    struct blocks B;
    int n, pos;
    const int *order; /* [n]: the rank at each position */
    const int *blk;   /* [n]: the block each position owns */
    const struct ccl__ring_spec *label; /* trace labels of a ring inside another algorithm, or NULL */
    int prev, next;   /* ranks */
    int div;
    int in_recvbuf;   /* reduce-scatter results and all-gather inputs sit at their block in recvbuf */
    size_t zc_bytes;  /* blocks this large gather whole (gather_blocks); 0: never */
    uint8_t stream;   /* the all-gather half writes its blocks past the caches (out_streams) */
};

static const char *at_elem(const void *buf, size_t elems, size_t esize) { return (const char *)buf + elems * esize; }

/* Slice j of the block at ring position q: [*off, *off + *n) within the block. */
static size_t slice_n(struct ring *R, int q, size_t j) {
    size_t len = block_len(&R->B, R->blk[ccl__mod(q, R->n)]);
    size_t start = j * R->p.chunk_elems;
    return start >= len ? 0 : (len - start < R->p.chunk_elems ? len - start : R->p.chunk_elems);
}

static const char *sblk(struct ring *R, int q, size_t j) {
    int b = R->blk[ccl__mod(q, R->n)];
    return at_elem(R->a->sendbuf, block_off(&R->B, b) + j * R->p.chunk_elems, R->p.esize);
}

static char *rblk(struct ring *R, int q, size_t j) {
    int b = R->blk[ccl__mod(q, R->n)];
    return (char *)at_elem(R->a->recvbuf, block_off(&R->B, b) + j * R->p.chunk_elems, R->p.esize);
}

enum phase { RS_THEN_AG, RS_ONLY, AG_ONLY };

/* For the trace: the step about to run touches block q (ring position),
 * slice j; its receive half moves data sent in step rstep, its send half
 * data of step sstep. Only evaluated while tracing. */
static inline void at(struct ring *R, int q, size_t j, int rph, int rstep, int sph, int sstep) {
    if (__builtin_expect(R->comm->trace == NULL, 1)) return;
    int b = R->blk[ccl__mod(q, R->n)];
    uint64_t off = (uint64_t)(block_off(&R->B, b) + j * R->p.chunk_elems) * R->p.esize;
    const struct ccl__ring_spec *l = R->label;
    if (!l) {
        ccl__prims_at(&R->p, CCL__TR_RING, rph, rstep, sph, sstep, b, (uint32_t)j, off);
        return;
    }
    ccl__prims_at(&R->p, l->trace_algo, rph, rstep < 0 ? rstep : l->step_base + rstep, sph,
                  sstep < 0 ? sstep : l->step_base + sstep, l->chunk_base + b, (uint32_t)j,
                  off + (uint64_t)l->elem_base * R->p.esize);
}

#define RS CCL__TR_REDUCE_SCATTER
#define AG CCL__TR_ALL_GATHER


/* The reduce-scatter steps of round j; the last sends its result on as
 * the all-gather's first step (then_ag) and leaves it at its block in
 * recvbuf (into_block) or, for reduce_scatter, at the start of recvbuf. */
static ccl_status_t round_rs(struct ring *R, size_t j, int then_ag, int into_block) {
    int P = R->pos, N = R->n;
    size_t n;
    at(R, P - 1, j, RS, -1, RS, 0);
    if ((n = slice_n(R, P - 1, j))) CCL_CHECK(ccl__prims_send(&R->p, R->next, sblk(R, P - 1, j), n));
    for (int k = 1; k <= N - 2; k++) {
        at(R, P - 1 - k, j, RS, k - 1, RS, k);
        if ((n = slice_n(R, P - 1 - k, j)))
            CCL_CHECK(ccl__prims_step(&R->p, &(struct ccl__step){.src = sblk(R, P - 1 - k, j), .n = n, .nrecv = 1,
                                                                 .recv = {R->prev}, .nsend = 1, .send = {R->next},
                                                                 .reduce = 1}));
    }
    if (!(n = slice_n(R, P, j))) return CCL_OK;
    at(R, P, j, RS, N - 2, AG, N - 1);
    char *dst = into_block ? rblk(R, P, j) : (char *)at_elem(R->a->recvbuf, j * R->p.chunk_elems, R->p.esize);
    return ccl__prims_step(&R->p, &(struct ccl__step){.src = sblk(R, P, j), .dst = dst, .n = n, .nrecv = 1,
                                                      .recv = {R->prev}, .nsend = then_ag, .send = {R->next},
                                                      .reduce = 1, .div = R->div});
}

/* All-gather steps; `base` numbers them after a reduce-scatter's. */
static ccl_status_t round_ag(struct ring *R, size_t j, int first_step_done) {
    int P = R->pos, N = R->n, base = first_step_done ? N - 1 : 0;
    size_t n;
    at(R, P, j, AG, -1, AG, base);
    if (!first_step_done && (n = slice_n(R, P, j))) {
        /* in_recvbuf: this rank's block is already in place; send it from there */
        const char *src = R->in_recvbuf ? rblk(R, P, j) : at_elem(R->a->sendbuf, j * R->p.chunk_elems, R->p.esize);
        CCL_CHECK(ccl__prims_step(&R->p, &(struct ccl__step){.src = src, .dst = R->in_recvbuf ? NULL : rblk(R, P, j),
                                                             .n = n, .nsend = 1, .send = {R->next},
                                                             .stream_dst = R->stream}));
    }
    for (int k = 1; k <= N - 2; k++) {
        at(R, P - k, j, AG, base + k - 1, AG, base + k);
        if ((n = slice_n(R, P - k, j)))
            CCL_CHECK(ccl__prims_step(&R->p, &(struct ccl__step){.dst = rblk(R, P - k, j), .n = n, .nrecv = 1,
                                                                 .recv = {R->prev}, .nsend = 1, .send = {R->next},
                                                                 .stream_dst = R->stream}));
    }
    at(R, P + 1, j, AG, base + N - 2, AG, -1);
    if ((n = slice_n(R, P + 1, j)))
        CCL_CHECK(ccl__prims_step(&R->p, &(struct ccl__step){.dst = rblk(R, P + 1, j), .n = n, .nrecv = 1,
                                                             .recv = {R->prev}, .stream_dst = R->stream}));
    return CCL_OK;
}

/* The all-gather half as whole blocks, one exchange per step: step k
 * sends the block at position P - k on to the next rank and receives the
 * one at P - k - 1 from the previous, in place in recvbuf. Point-to-point
 * moves a large message zero-copy over a link that can (the receiver reads
 * straight out of the sender's buffer), where the rounds copy every slice
 * into a slot and out of one. With `own_from_sendbuf`, this rank's block
 * comes from sendbuf first. */
static ccl_status_t gather_blocks(struct ring *R, int own_from_sendbuf, int base) {
    int P = R->pos, N = R->n;
    const struct ccl__coll_args *a = R->a;
    char *own = rblk(R, P, 0);
    if (own_from_sendbuf && a->sendbuf != own)
        memcpy(own, a->sendbuf, block_len(&R->B, R->blk[P]) * R->p.esize);
    for (int k = 0; k < N - 1; k++) {
        int q = ccl__mod(P - k, N), r = ccl__mod(P - k - 1, N);
        /* In the trace, step base + k of the all-gather, as the rounds
         * label theirs: block q goes out in it, block r comes in. */
        struct ccl__p2p_label sent = {.seq = R->p.trace_seq}, got = sent;
        if (R->comm->trace) {
            at(R, q, 0, AG, -1, AG, base + k);
            sent.tr = R->p.tr;
            at(R, r, 0, AG, base + k, AG, -1);
            got.tr = R->p.tr;
        }
        struct ccl__p2p_xfer x[2] = {
            {.peer = R->next, .is_send = 1, .buf = rblk(R, q, 0), .count = block_len(&R->B, R->blk[q]),
             .dtype = a->id.dtype, .label = &sent},
            {.peer = R->prev, .is_send = 0, .buf = rblk(R, r, 0), .count = block_len(&R->B, R->blk[r]),
             .dtype = a->id.dtype, .label = &got},
        };
        CCL_CHECK(ccl__p2p_run(R->comm, x, 2, a->id.kind, ccl__prims_what(&R->p)));
    }
    return CCL_OK;
}

/* Whether the all-gather half writes recvbuf past the caches (an
 * all-reduce in place has read those lines: it sent its input's blocks
 * from there). */
static int out_streams(const struct ring *R, const struct ccl__coll_args *a, enum phase ph) {
    if (ph == RS_ONLY) return 0;
    size_t out = (ph == RS_THEN_AG ? a->id.count : a->id.count * (size_t)R->n) * R->p.esize;
    return ccl__algo_output_streams(R->comm, a->mem, out, ph == RS_THEN_AG && a->sendbuf == a->recvbuf);
}

static ccl_status_t ring_rounds(struct ring *R, const struct ccl__coll_args *a, enum phase ph, int split) {
    struct ccl_comm *comm = R->comm;
    R->a = a;
    R->prev = R->order[ccl__mod(R->pos - 1, R->n)];
    R->next = R->order[ccl__mod(R->pos + 1, R->n)];
    CCL_CHECK(ccl__prims_init(&R->p, comm, &a->id, a->plan.chunk_bytes, a->mem));
    /* all_reduce splits its buffer; reduce_scatter's sendbuf and
     * all_gather's recvbuf already are N blocks of count. */
    size_t count = a->id.count, n = (size_t)R->n;
    if (split) R->B = (struct blocks){count / n, count % n, count / n};
    else R->B = (struct blocks){count, 0, a->block_stride ? a->block_stride : count};
    R->stream = (uint8_t)out_streams(R, a, ph);
    size_t maxlen = block_len(&R->B, 0);
    size_t rounds = (maxlen + R->p.chunk_elems - 1) / R->p.chunk_elems;
    /* Every rank sees the same blocks and zc_bytes, so all decide alike. */
    int whole = ph != RS_ONLY && R->zc_bytes && a->mem == CCL__MEM_HOST && R->n > 1 &&
                R->B.base * R->p.esize >= R->zc_bytes;
    for (size_t j = 0; j < rounds; j++) {
        if (ph != AG_ONLY)
            CCL_CHECK(round_rs(R, j, ph == RS_THEN_AG && !whole, ph == RS_THEN_AG || R->in_recvbuf));
        if (ph != RS_ONLY && !whole) CCL_CHECK(round_ag(R, j, ph == RS_THEN_AG));
    }
    if (whole) CCL_CHECK(gather_blocks(R, ph == AG_ONLY && !R->in_recvbuf, ph == RS_THEN_AG ? R->n - 1 : 0));
    return ccl__prims_flush(comm, ccl__prims_what(&R->p));
}

/* The whole communicator on the planner's ring: block b is rank b's. */
static ccl_status_t run_ring(struct ccl_comm *comm, const struct ccl__coll_args *a, enum phase ph) {
    struct ring R = {.comm = comm, .n = comm->nranks, .pos = comm->ring_pos, .order = comm->ring, .blk = comm->ring,
                     .zc_bytes = comm->ring_zc_bytes};
    R.div = a->id.op == CCL_AVG ? comm->nranks : 0;
    return ring_rounds(&R, a, ph, ph == RS_THEN_AG);
}

ccl_status_t ccl__ring_run(struct ccl_comm *comm, const struct ccl__coll_args *a, const struct ccl__ring_spec *s) {
    static const enum phase phases[] = {[CCL__RING_ALL_REDUCE] = RS_THEN_AG, [CCL__RING_REDUCE_SCATTER] = RS_ONLY,
                                        [CCL__RING_ALL_GATHER] = AG_ONLY};
    struct ring R = {.comm = comm, .n = s->n, .pos = s->pos, .order = s->order, .blk = s->blk, .div = s->div,
                     .in_recvbuf = 1, .label = s->trace_algo ? s : NULL};
    return ring_rounds(&R, a, phases[s->what], 1);
}

/* A chain along the ring from `first` (no receive) to `last` (no send). */
static ccl_status_t chain(struct ccl_comm *comm, const struct ccl__coll_args *a, int reduce) {
    int N = comm->nranks, P = comm->ring_pos;
    int root_pos = 0;
    while (comm->ring[root_pos] != a->id.root) root_pos++;
    /* broadcast flows root -> root+1 -> ...; reduce flows root+1 -> ... -> root */
    int first = reduce ? ccl__mod(root_pos + 1, N) : root_pos, last = ccl__mod(first - 1, N);
    int prev = P == first ? -1 : comm->ring[ccl__mod(P - 1, N)];
    int next = P == last ? -1 : comm->ring[ccl__mod(P + 1, N)];
    struct ccl__prims p;
    CCL_CHECK(ccl__prims_init(&p, comm, &a->id, a->plan.chunk_bytes, a->mem));
    size_t es = p.esize, count = a->id.count;
    int div = a->id.op == CCL_AVG && reduce ? N : 0;
    /* a broadcast's receivers write recvbuf past the caches once it is
     * larger than they hold */
    uint8_t stream = !reduce && ccl__algo_output_streams(comm, a->mem, count * es, 0);
    for (size_t off = 0; off < count; off += p.chunk_elems) {
        size_t n = count - off < p.chunk_elems ? count - off : p.chunk_elems;
        const char *src = a->sendbuf ? at_elem(a->sendbuf, off, es) : NULL;
        char *dst = a->recvbuf ? (char *)at_elem(a->recvbuf, off, es) : NULL;
        if (__builtin_expect(comm->trace != NULL, 0)) {
            /* hop h carries the data from chain position h to h+1 */
            int h = ccl__mod(P - first, N), ph = reduce ? CCL__TR_REDUCE_PHASE : CCL__TR_BROADCAST;
            uint32_t j = (uint32_t)(off / p.chunk_elems);
            ccl__prims_at(&p, CCL__TR_CHAIN, ph, h - 1, ph, h, (int)j, j, (uint64_t)off * es);
        }
        /* the first rank only sends, the last only receives */
        struct ccl__step s = {.src = src, .dst = P == last || !reduce ? dst : NULL, .n = n, .nrecv = P != first,
                              .recv = {prev}, .nsend = P != last, .send = {next}, .reduce = (uint8_t)reduce,
                              .div = P == last ? div : 0, .stream_dst = stream};
        if (!reduce && P != first) s.src = NULL;
        CCL_CHECK(ccl__prims_step(&p, &s));
    }
    return ccl__prims_flush(comm, ccl__prims_what(&p));
}

static ccl_status_t ring_all_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    return run_ring(comm, a, RS_THEN_AG);
}

static ccl_status_t ring_reduce_scatter(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    return run_ring(comm, a, RS_ONLY);
}

static ccl_status_t ring_all_gather(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    return run_ring(comm, a, AG_ONLY);
}

static ccl_status_t ring_broadcast(struct ccl_comm *comm, const struct ccl__coll_args *a) { return chain(comm, a, 0); }

static ccl_status_t ring_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a) { return chain(comm, a, 1); }

/* A one-byte all-reduce. */
static ccl_status_t ring_barrier(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    uint8_t in = 0, out = 0;
    struct ccl__coll_args one = *a;
    one.id.count = 1;
    one.id.dtype = CCL_UINT8;
    one.id.op = CCL_SUM;
    one.sendbuf = &in;
    one.recvbuf = &out;
    return run_ring(comm, &one, RS_THEN_AG);
}

ccl_status_t ccl__ring_gather_bytes(struct ccl_comm *comm, uint32_t seq, const void *mine, void *all, size_t bytes) {
    struct ccl__coll_args g = {
        .id = {.kind = CCL__K_ALL_GATHER, .seq = seq, .count = bytes, .dtype = CCL_UINT8, .op = CCL_SUM, .root = -1},
        .sendbuf = mine,
        .recvbuf = all,
        .mem = CCL__MEM_HOST,
        .plan = {.algo = CCL__ALGO_RING, .chunk_bytes = comm->ring_chunk_bytes},
    };
    return ring_all_gather(comm, &g);
}

const struct ccl__algo ccl__algo_ring = {
    .name = "ring",
    .summary = "pipelined ring: 2(N-1)/N of the data per rank for all-reduce, a chain for broadcast and reduce",
    .run = {[CCL__K_ALL_REDUCE] = ring_all_reduce, [CCL__K_REDUCE_SCATTER] = ring_reduce_scatter,
            [CCL__K_ALL_GATHER] = ring_all_gather, [CCL__K_BROADCAST] = ring_broadcast,
            [CCL__K_REDUCE] = ring_reduce, [CCL__K_BARRIER] = ring_barrier},
};
