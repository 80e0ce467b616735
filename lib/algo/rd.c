/*
 * Recursive doubling and recursive halving/doubling (Rabenseifner).
 *
 * Both work on a power of two P of ranks. With N = P + R ranks, the first
 * 2R ranks pair up first: each even one hands its data to the odd one
 * above it and sits out, receiving the result at the end (two extra
 * steps). Ranks taking part are renumbered 0..P-1.
 *
 * rd all-reduce: log2(P) exchanges of the whole buffer with the partner
 * whose number differs in one bit: fewest steps, for small messages.
 * rhd all-reduce: a reduce-scatter by recursive halving (each exchange
 * sends half of what is left) then an all-gather by recursive doubling:
 * 2 log2(P) steps moving about 2(P-1)/P of the data, for mid sizes.
 * Both run a buffer larger than a segment (SEGMENT_BYTES below) as one
 * such all-reduce per segment, so that no step streams more than the
 * caches hold.
 * rd all-gather (P = N only): log2(N) exchanges of everything gathered so
 * far.
 *
 * Partners both compute (lower side's data) OP (higher side's data), so
 * each element is reduced alike on every rank, NaN payloads included. The
 * grouping differs from the ring's, so inexact float sums may round
 * differently from ring's (exact inputs give identical results).
 */
#include <stdio.h>

#include "algo/algo.h"

struct fold {
    int p2, rem;
    int me; /* number among the P, or -1 for a rank that sits out */
};

static struct fold fold_of(int n, int rank) {
    struct fold f = {.p2 = 1};
    while (f.p2 * 2 <= n) f.p2 *= 2;
    f.rem = n - f.p2;
    if (rank < 2 * f.rem) f.me = rank % 2 ? rank / 2 : -1;
    else f.me = rank - f.rem;
    return f;
}

static int real_rank(const struct fold *f, int me) { return me < f->rem ? 2 * me + 1 : me + f->rem; }

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* For the trace: the exchanges that follow are step `step` (both
 * partners send and receive in it); exchange() labels each slice. */
static void at(struct ccl__prims *p, int algo, int phase, int step) {
    if (__builtin_expect(p->comm->trace != NULL, 0)) ccl__prims_at(p, algo, phase, step, phase, step, 0, 0, 0);
}

/* The slice at element `off`: the piece of the buffer the trace files it
 * under (round = slice number, so a piece keeps its name from step to
 * step when, as in rd, every exchange cuts the whole buffer alike). */
static void at_slice(struct ccl__prims *p, size_t off) {
    if (__builtin_expect(p->comm->trace != NULL, 0)) {
        p->tr.round = (uint32_t)(off / p->chunk_elems);
        p->tr.offset = (uint64_t)off * p->esize;
    }
}

/* Sends elements [soff, soff + slen) of this side's data to `peer` while
 * receiving [roff, roff + rlen) from it, chunk by chunk; received data is
 * reduced with this side's into buf (with div > 1 divided after) or
 * copied there. This side's data lies at *in: the caller's send buffer
 * until the first exchange, which reads it from there instead of copying
 * it into buf first (one pass over the buffer less), and in buf from then
 * on (*in becomes buf). The lower-numbered side's data is always the first
 * operand (peer_first when the peer is lower), so both sides reduce alike
 * even where operand order shows (the payload of a NaN meeting a NaN). */
static ccl_status_t exchange(struct ccl__prims *p, int peer, const char **in, char *buf, size_t soff, size_t slen,
                             size_t roff, size_t rlen, int reduce, int div, int peer_first) {
    size_t c = p->chunk_elems;
    for (size_t k = 0; k < slen || k < rlen; k += c) {
        if (k < slen) {
            at_slice(p, soff + k);
            CCL_CHECK(ccl__prims_send(p, peer, ccl__at(*in, soff + k, p->esize), min_sz(c, slen - k)));
        }
        if (k < rlen) {
            at_slice(p, roff + k);
            char *at_buf = (char *)ccl__at(buf, roff + k, p->esize);
            CCL_CHECK(ccl__prims_step(p, &(struct ccl__step){.src = reduce ? ccl__at(*in, roff + k, p->esize) : NULL,
                                                             .dst = at_buf, .n = min_sz(c, rlen - k), .nrecv = 1,
                                                             .recv = {peer}, .reduce = (uint8_t)reduce,
                                                             .src_last = (uint8_t)peer_first, .div = div}));
        }
    }
    *in = buf;
    return CCL_OK;
}

/* The ranks that sit out hand their data in (fold) or get the result back
 * (unfold). */
static ccl_status_t fold_in(struct ccl__prims *p, const struct fold *f, int rank, const char **in, char *buf,
                            size_t base, size_t count, int algo) {
    if (rank >= 2 * f->rem) return CCL_OK;
    at(p, algo, CCL__TR_REDUCE_PHASE, 0);
    if (f->me < 0) return exchange(p, rank + 1, in, buf, base, count, 0, 0, 0, 0, 0);
    return exchange(p, rank - 1, in, buf, 0, 0, base, count, 1, 0, 1);
}

/* after_step: the last step of the power-of-two part (the trace's). */
static ccl_status_t fold_out(struct ccl__prims *p, const struct fold *f, int rank, const char **in, char *buf,
                             size_t base, size_t count, int algo, int after_step) {
    if (rank >= 2 * f->rem) return CCL_OK;
    at(p, algo, CCL__TR_BROADCAST, after_step + 1);
    if (f->me < 0) return exchange(p, rank + 1, in, buf, 0, 0, base, count, 0, 0, 0);
    return exchange(p, rank - 1, in, buf, base, count, 0, 0, 0, 0, 0);
}

/* Each step of rhd streams through all it has left, so a buffer larger
 * than the caches comes from memory at every step, where the ring's rounds
 * carry a slice through all their steps while it is still in cache.
 * Measured (loopback tcp, 4 ranks on 2 cores, 32 MiB L3): rhd took
 * 1.09-1.20x the ring's time at 8-32 MiB whole, 0.92-1.06x in segments of
 * 1 or 2 MiB, 1.07-1.16x in 4 MiB ones (4 ranks' segments and their copies
 * no longer fit). */
#define SEGMENT_BYTES ((size_t)1 << 20)

/* Elements of a segment: whole chunks, at least one, SEGMENT_BYTES or
 * less (prims_init makes chunk_elems at least 1). Every rank has the
 * plan's chunk, so every rank cuts alike. */
static size_t segment_elems(const struct ccl__prims *p) {
    size_t chunks = SEGMENT_BYTES / (p->chunk_elems * p->esize);
    return (chunks ? chunks : 1) * p->chunk_elems;
}

/* The P-rank part of an all-reduce of the count elements from `base`,
 * this side's data at *in (see exchange). */
typedef ccl_status_t (*among_p2_fn)(struct ccl__prims *p, const struct fold *f, const char **in, char *buf,
                                    size_t base, size_t count, int div);

/* Every folded all-reduce, one segment of the buffer at a time: fold the
 * extra ranks in, run the power-of-two part, hand the result back to the
 * extra ranks. A segment's first exchange reads the send buffer; a rank
 * that had no exchange (alone) copies at the end. */
static ccl_status_t folded_all_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a, among_p2_fn among,
                                      int algo, int passes) {
    struct ccl__prims p;
    CCL_CHECK(ccl__prims_init(&p, comm, &a->id, a->plan.chunk_bytes, a->mem));
    struct fold f = fold_of(comm->nranks, comm->rank);
    char *buf = a->recvbuf;
    size_t total = a->id.count, seg = segment_elems(&p);
    int div = a->id.op == CCL_AVG ? comm->nranks : 0;
    int log2p = 0; /* the power-of-two part takes passes x log2(P) steps */
    while ((1 << log2p) < f.p2) log2p++;
    size_t base = 0;
    do {
        size_t count = min_sz(seg, total - base);
        const char *in = a->sendbuf;
        /* With ranks folding in, the partners of a step may reach it one
         * having read its send buffer and one not: a reduction gives the
         * same bits in place and out of place (NaN payloads included,
         * lib/reduce), so they still agree. */
        CCL_CHECK(fold_in(&p, &f, comm->rank, &in, buf, base, count, algo));
        if (f.me >= 0) CCL_CHECK(among(&p, &f, &in, buf, base, count, div));
        CCL_CHECK(fold_out(&p, &f, comm->rank, &in, buf, base, count, algo, passes * log2p));
        if (in != buf)
            p.compute->copy((char *)ccl__at(buf, base, p.esize), ccl__at(in, base, p.esize), count * p.esize);
        base += count;
    } while (base < total);
    return ccl__prims_flush(comm, ccl__prims_what(&p));
}

static ccl_status_t rd_among(struct ccl__prims *p, const struct fold *f, const char **in, char *buf, size_t base,
                             size_t count, int div) {
    for (int mask = 1, step = 1; mask < f->p2; mask <<= 1, step++) {
        at(p, CCL__TR_RD, CCL__TR_REDUCE_PHASE, step);
        int last = mask * 2 == f->p2;
        CCL_CHECK(exchange(p, real_rank(f, f->me ^ mask), in, buf, base, count, base, count, 1, last ? div : 0,
                           (f->me & mask) != 0));
    }
    return CCL_OK;
}

static ccl_status_t rhd_among(struct ccl__prims *p, const struct fold *f, const char **in, char *buf, size_t base,
                              size_t count, int div) {
    /* Reduce-scatter by halving: keep the half of [lo, hi) (blocks of
     * count split P ways) that our bit selects, send the other. */
    int lo = 0, hi = f->p2, step = 1;
    for (int mask = f->p2 / 2; mask >= 1; mask /= 2, step++) {
        int mid = (lo + hi) / 2, keep_low = !(f->me & mask);
        int klo = keep_low ? lo : mid, khi = keep_low ? mid : hi, slo = keep_low ? mid : lo, shi = keep_low ? hi : mid;
        size_t ko = base + ccl__block_off(count, f->p2, klo), so = base + ccl__block_off(count, f->p2, slo);
        at(p, CCL__TR_RHD, CCL__TR_REDUCE_SCATTER, step);
        CCL_CHECK(exchange(p, real_rank(f, f->me ^ mask), in, buf, so, base + ccl__block_off(count, f->p2, shi) - so,
                           ko, base + ccl__block_off(count, f->p2, khi) - ko, 1, mask == 1 ? div : 0,
                           (f->me & mask) != 0));
        lo = klo, hi = khi;
    }
    /* All-gather by doubling: swap what each side has. */
    for (int mask = 1; mask < f->p2; mask *= 2, step++) {
        int width = hi - lo, plo = (f->me & mask) ? lo - width : hi;
        size_t mo = base + ccl__block_off(count, f->p2, lo), po = base + ccl__block_off(count, f->p2, plo);
        at(p, CCL__TR_RHD, CCL__TR_ALL_GATHER, step);
        CCL_CHECK(exchange(p, real_rank(f, f->me ^ mask), in, buf, mo, base + ccl__block_off(count, f->p2, hi) - mo,
                           po, base + ccl__block_off(count, f->p2, plo + width) - po, 0, 0, 0));
        if (plo < lo) lo = plo;
        else hi = plo + width;
    }
    return CCL_OK;
}

static ccl_status_t rd_all_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    return folded_all_reduce(comm, a, rd_among, CCL__TR_RD, 1);
}

static ccl_status_t rhd_all_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    return folded_all_reduce(comm, a, rhd_among, CCL__TR_RHD, 2);
}

static int pow2(int n) { return (n & (n - 1)) == 0; }

static int rd_can_run(const struct ccl_comm *comm, const struct ccl__coll_args *a, char *why, size_t whylen) {
    if (a->id.kind == CCL__K_ALL_GATHER && !pow2(comm->nranks)) {
        snprintf(why, whylen, "rd all_gather needs a power-of-two rank count (bruck gathers on any)");
        return 0;
    }
    return 1;
}

/* Blocks of `count` at rank positions: after the exchange with the
 * partner at distance mask, each rank holds the aligned group of 2*mask. */
static ccl_status_t rd_all_gather(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct ccl__prims p;
    CCL_CHECK(ccl__prims_init(&p, comm, &a->id, a->plan.chunk_bytes, a->mem));
    size_t count = a->id.count;
    char *buf = a->recvbuf;
    const char *in = buf;
    p.compute->copy(buf + (size_t)comm->rank * count * p.esize, a->sendbuf, count * p.esize);
    for (int mask = 1, step = 1; mask < comm->nranks; mask <<= 1, step++) {
        int partner = comm->rank ^ mask;
        size_t mine = (size_t)(comm->rank & ~(mask - 1)) * count, theirs = (size_t)(partner & ~(mask - 1)) * count;
        at(&p, CCL__TR_RD, CCL__TR_ALL_GATHER, step);
        CCL_CHECK(exchange(&p, partner, &in, buf, mine, (size_t)mask * count, theirs, (size_t)mask * count, 0, 0, 0));
    }
    return ccl__prims_flush(comm, ccl__prims_what(&p));
}

const struct ccl__algo ccl__algo_rd = {
    .name = "rd",
    .summary = "recursive doubling: log2 N exchanges of the whole buffer (all-reduce), all-gather on 2^k ranks",
    .run = {[CCL__K_ALL_REDUCE] = rd_all_reduce, [CCL__K_ALL_GATHER] = rd_all_gather},
    .can_run = rd_can_run,
};

const struct ccl__algo ccl__algo_rhd = {
    .name = "rhd",
    .summary = "recursive halving then doubling (Rabenseifner): 2 log2 N steps, 2(N-1)/N of the data",
    .run = {[CCL__K_ALL_REDUCE] = rhd_all_reduce},
};
