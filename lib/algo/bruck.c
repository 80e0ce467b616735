/*
 * Bruck's algorithms: ceil(log2 N) steps for any N, each step talking to
 * the ranks at distance 2^k. For small messages, where the number of
 * steps, not bytes, sets the time.
 *
 * all-gather: at step k a rank sends every block it has gathered (at most
 * 2^k, those of ranks r .. r+2^k-1) to r - 2^k and receives the next ones
 * from r + 2^k; blocks land straight at their final place in recvbuf.
 * all-to-all: blocks are rotated so block i goes to rank r + i; at step k
 * every block whose index has bit k set moves 2^k ranks on (packed into
 * one message); a final rotation puts each block in place. Each block
 * travels once per set bit of its distance: more bytes than pairwise, far
 * fewer steps.
 * barrier: the dissemination pattern, empty messages to r + 2^k.
 */
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Blocks [first, first + m) mod n of a buffer of n blocks of `count`
 * elements: one contiguous piece, or two when the span wraps. A sender and
 * its receiver name the same absolute blocks, so they cut alike. */
struct span {
    size_t off[2], len[2]; /* elements: up to two contiguous pieces */
    int pieces;
};

static struct span span_of(int first, int m, int n, size_t count) {
    struct span s = {.pieces = 1};
    int end = first + m;
    s.off[0] = (size_t)first * count;
    s.len[0] = (size_t)((end > n ? n : end) - first) * count;
    if (end > n) {
        s.pieces = 2;
        s.off[1] = 0;
        s.len[1] = (size_t)(end - n) * count;
    }
    return s;
}

/* The k-th chunk of a span: its element offset and length, 0 when past
 * the end. Both ends of a link cut the same span alike. */
static size_t span_chunk(const struct span *s, size_t k, size_t chunk, size_t *off) {
    for (int i = 0; i < s->pieces; i++) {
        size_t chunks = (s->len[i] + chunk - 1) / chunk;
        if (k < chunks) {
            *off = s->off[i] + k * chunk;
            return min_sz(chunk, s->len[i] - k * chunk);
        }
        k -= chunks;
    }
    return 0;
}

static void trace_piece(struct ccl__prims *p, int step, size_t off, size_t count) {
    if (__builtin_expect(p->comm->trace != NULL, 0))
        ccl__prims_at(p, CCL__TR_BRUCK, CCL__TR_ALL_GATHER, step, CCL__TR_ALL_GATHER, step,
                      (int)(off / (count ? count : 1)), 0, (uint64_t)off * p->esize);
}

static ccl_status_t bruck_all_gather(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct ccl__prims p;
    CCL_CHECK(ccl__prims_init(&p, comm, &a->id, a->plan.chunk_bytes, a->mem));
    int n = comm->nranks, r = comm->rank;
    size_t count = a->id.count;
    char *buf = a->recvbuf;
    p.compute->copy(buf + (size_t)r * count * p.esize, a->sendbuf, count * p.esize);
    for (int d = 1, step = 0; d < n; d <<= 1, step++) {
        int m = d < n - d ? d : n - d, to = ccl__mod(r - d, n), from = (r + d) % n;
        struct span out = span_of(r, m, n, count), in = span_of((r + d) % n, m, n, count);
        for (size_t k = 0;; k++) {
            size_t so = 0, ro = 0, sn = span_chunk(&out, k, p.chunk_elems, &so), rn = span_chunk(&in, k, p.chunk_elems, &ro);
            if (!sn && !rn) break;
            /* the trace names each piece by where it lands: its first block
             * and its byte offset in recvbuf, the same on both ends */
            if (sn) trace_piece(&p, step, so, count);
            if (sn) CCL_CHECK(ccl__prims_send(&p, to, ccl__at(buf, so, p.esize), sn));
            if (rn) trace_piece(&p, step, ro, count);
            if (rn) CCL_CHECK(ccl__prims_recv(&p, from, (char *)ccl__at(buf, ro, p.esize), rn));
        }
    }
    return ccl__prims_flush(comm, ccl__prims_what(&p));
}

/* One packed message of `elems` elements: sent from out, received into in,
 * chunk by chunk. The trace gives each chunk its offset in the message:
 * the blocks with the step's bit set, in index order (which ccl-trace
 * unpacks into places of the work buffer). */
static ccl_status_t swap_packed(struct ccl__prims *p, int to, int from, const char *out, char *in, size_t elems) {
    for (size_t k = 0; k < elems; k += p->chunk_elems) {
        size_t m = min_sz(p->chunk_elems, elems - k);
        if (__builtin_expect(p->comm->trace != NULL, 0)) p->tr.offset = (uint64_t)k * p->esize;
        CCL_CHECK(ccl__prims_send(p, to, ccl__at(out, k, p->esize), m));
        CCL_CHECK(ccl__prims_recv(p, from, (char *)ccl__at(in, k, p->esize), m));
    }
    return CCL_OK;
}

static ccl_status_t bruck_all_to_all(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct ccl__prims p;
    CCL_CHECK(ccl__prims_init(&p, comm, &a->id, a->plan.chunk_bytes, a->mem));
    int n = comm->nranks, r = comm->rank;
    size_t bb = a->id.count * p.esize; /* bytes per block */
    int most = (n + 1) / 2;            /* blocks with a given bit set, at most */
    char *tmp = malloc((size_t)n * bb + 2 * (size_t)most * bb);
    if (!tmp)
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory for %d blocks of %zu bytes",
                              ccl__prims_what(&p), n, bb);
    char *pack = tmp + (size_t)n * bb, *unpack = pack + (size_t)most * bb;
    const struct ccl__compute *cu = p.compute;
    for (int i = 0; i < n; i++) cu->copy(tmp + (size_t)i * bb, (const char *)a->sendbuf + (size_t)((r + i) % n) * bb, bb);
    ccl_status_t st = CCL_OK;
    for (int d = 1, step = 1; d < n && st == CCL_OK; d <<= 1, step++) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (i & d) cu->copy(pack + (size_t)(k++) * bb, tmp + (size_t)i * bb, bb);
        if (__builtin_expect(comm->trace != NULL, 0))
            ccl__prims_at(&p, CCL__TR_BRUCK, CCL__TR_P2P, step - 1, CCL__TR_P2P, step - 1, step - 1, 0, 0);
        st = swap_packed(&p, (r + d) % n, ccl__mod(r - d, n), pack, unpack, (size_t)k * a->id.count);
        k = 0;
        for (int i = 0; i < n && st == CCL_OK; i++)
            if (i & d) cu->copy(tmp + (size_t)i * bb, unpack + (size_t)(k++) * bb, bb);
    }
    for (int i = 0; i < n && st == CCL_OK; i++)
        cu->copy((char *)a->recvbuf + (size_t)ccl__mod(r - i, n) * bb, tmp + (size_t)i * bb, bb);
    free(tmp);
    return st == CCL_OK ? ccl__prims_flush(comm, ccl__prims_what(&p)) : st;
}

static ccl_status_t dissemination_barrier(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct ccl__prims p;
    CCL_CHECK(ccl__prims_init(&p, comm, &a->id, a->plan.chunk_bytes, a->mem));
    int n = comm->nranks, r = comm->rank;
    for (int d = 1, step = 1; d < n; d <<= 1, step++) {
        if (__builtin_expect(comm->trace != NULL, 0))
            ccl__prims_at(&p, CCL__TR_BRUCK, CCL__TR_P2P, step - 1, CCL__TR_P2P, step - 1, step - 1, 0, 0);
        CCL_CHECK(ccl__prims_send(&p, (r + d) % n, NULL, 0));
        CCL_CHECK(ccl__prims_recv(&p, ccl__mod(r - d, n), NULL, 0));
    }
    return ccl__prims_flush(comm, ccl__prims_what(&p));
}

const struct ccl__algo ccl__algo_bruck = {
    .name = "bruck",
    .summary = "Bruck: ceil(log2 N) steps for all-gather and all-to-all; the dissemination barrier",
    .run = {[CCL__K_ALL_GATHER] = bruck_all_gather, [CCL__K_ALL_TO_ALL] = bruck_all_to_all,
            [CCL__K_BARRIER] = dissemination_barrier},
};
