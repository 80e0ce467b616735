/*
 * The zero-copy path: a collective whose buffers lie, on every rank, in
 * shared allocations (ccl_mem_alloc, which every rank of the host maps)
 * reads its peers' inputs where they are and writes results straight into
 * the outputs: no slot, no window, no staging. It is one round of the
 * direct path (direct_round.h), whose counters order it:
 *
 *   post       each rank publishes, with the call's identity, where its
 *              buffers lie (a record in its control page); once every
 *              peer has posted, every rank has entered the call and its
 *              inputs are ready, and every rank decides alike from the
 *              same records whether the path runs. When it does not (a
 *              rank's buffers are not in shared memory, or it cannot map
 *              some peer's), the round ends there and the call runs as
 *              any other (the caller's plan).
 *   reduce     all-reduce and reduce: rank r folds slice r of every rank's
 *              input, in rank order 0, 1, ..., N-1 (the direct
 *              algorithm's order, so its bits), into slice r of its output
 *              (the root's, for reduce); reduce-scatter folds block r into
 *              its own output; all-gather and broadcast copy every
 *              input's (the root's) block into their output.
 *   reduced    all-reduce only: once every rank has published its slice,
 *              each copies the others' slices out of their outputs.
 *   done       every rank's reads and writes of its peers' buffers are
 *              over; no rank returns before every peer is done, so no
 *              caller touches a buffer a peer still reads.
 *
 * Each slice is folded through a small scratch piece, the last fold
 * writing the output, so an output that is also an input (in place) is
 * never written before this rank has read it; no other rank reads that
 * slice. Per byte of the buffer, an all-reduce rank reads
 * the N inputs' slices once and every other slice once, and writes its
 * output once: 2 reads and 1 write, where the staged paths make 3 and
 * 2.25.
 */
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/direct_round.h"

/* Where a rank's buffers lie: in its control page, one record per window
 * buffer (round parity), after the direct path's counters. */
struct zrec {
    uint64_t send_serial, recv_serial; /* its allocations' serials (0: no buffer there) */
    uint64_t send_off, recv_off;       /* the buffers' offsets in them */
    uint32_t ok;                       /* every buffer it has lies in shared memory, and it maps every peer's */
};
#define ZREC_AT 1024
_Static_assert(ZREC_AT + 2 * sizeof(struct zrec) <= CCL__WINDOW_GPU_WORDS, "the records end before the GPU words");

#define PIECE_BYTES 16384 /* a fold's scratch: stays in the first-level cache from one fold to the next */

static struct zrec *zrec_of(const struct ccl__direct *d, int rank) {
    return (struct zrec *)(void *)(ccl__direct_ctrl_page(d, rank) + ZREC_AT) + (d->g & 1);
}

/* Whether every allocation of the communicator is mapped here from every
 * peer: then any record's serial can be followed. */
static int mapped_everywhere(const struct ccl_comm *comm) {
    for (const struct ccl__mem *m = comm->mems; m; m = m->next)
        if (!m->shared) return 0;
    return 1;
}

/* This rank's record for the call. */
static struct zrec my_record(const struct ccl_comm *comm, const struct ccl__coll_args *a) {
    struct zrec z = {0};
    size_t smult, rmult, b = a->id.count * ccl_dtype_size(a->id.dtype);
    ccl__coll_extent(comm, a, &smult, &rmult);
    const struct ccl__mem *s = smult ? ccl__mem_holding(comm, a->sendbuf, b * smult) : NULL;
    const struct ccl__mem *r = rmult ? ccl__mem_holding(comm, a->recvbuf, b * rmult) : NULL;
    /* A traced call or a forced algorithm keeps the algorithm it names. */
    int wanted = !comm->trace && comm->algo_forced[a->id.kind] < 0 && a->mem == CCL__MEM_HOST;
    z.ok = wanted && (!smult || s) && (!rmult || r) && mapped_everywhere(comm);
    if (s) z.send_serial = s->serial, z.send_off = (uint64_t)((const char *)a->sendbuf - (const char *)s->base);
    if (r) z.recv_serial = r->serial, z.recv_off = (uint64_t)((char *)a->recvbuf - (char *)r->base);
    return z;
}

/* Rank q's send or receive buffer, as mapped in this process. */
static char *peer_buf(const struct ccl_comm *comm, const struct zrec *z, int q, int recv) {
    const struct ccl__mem *m = ccl__mem_by_serial(comm, recv ? z->recv_serial : z->send_serial);
    return m && m->peer[q] ? (char *)m->peer[q] + (recv ? z->recv_off : z->send_off) : NULL;
}

/* dst <- srcs[0] op srcs[1] op ... op srcs[n - 1], n elements (divided
 * for CCL_AVG), the partial folds in the scratch piece: in place, dst is
 * one of the inputs, read after the first folds. The last fold writes dst
 * itself (an exact alias of an input, compute.h): no other rank reads
 * this slice of any input. */
static void fold(const struct ccl__direct *d, char *scratch, char *dst, char *const *srcs, size_t at, size_t n) {
    const struct ccl__compute *cu = d->p.compute;
    size_t es = d->p.esize, per = PIECE_BYTES / es;
    int N = d->n;
    for (size_t off = 0; off < n; off += per) {
        size_t m = n - off < per ? n - off : per, b = (at + off) * es;
        char *out = dst + off * es;
        for (int q = 1; q < N; q++)
            cu->reduce(d->p.reduce, q == N - 1 ? out : scratch, q == 1 ? srcs[0] + b : scratch, srcs[q] + b, m);
        if (d->p.id.op == CCL_AVG) cu->divide(out, m, d->p.id.dtype, N);
    }
}

static ccl_status_t run(struct ccl__direct *d, const struct ccl__coll_args *a, char **send, char **recv) {
    size_t es = d->p.esize, count = a->id.count;
    int n = d->n, r = d->r, kind = a->id.kind, root = a->id.root;
    char *scratch = NULL;
    int folds = kind == CCL__K_ALL_REDUCE || kind == CCL__K_REDUCE || kind == CCL__K_REDUCE_SCATTER;
    if (folds && !(scratch = ccl__fold_scratch(d->comm, PIECE_BYTES)))
        return ccl__set_error(d->comm, CCL_ERR_NO_MEMORY, "%s: out of memory", ccl__prims_what(&d->p));
    if (kind == CCL__K_ALL_REDUCE || kind == CCL__K_REDUCE) {
        size_t so = ccl__block_off(count, n, r), sl = ccl__block_len(count, n, r);
        char *into = kind == CCL__K_REDUCE ? recv[root] : recv[r];
        if (sl) fold(d, scratch, into + so * es, send, so, sl);
        ccl_status_t st = ccl__direct_settle(d);
        if (st == CCL_OK && kind == CCL__K_ALL_REDUCE) {
            /* The peers' slices. In place, the peers have just read those
             * lines of this rank's buffer in their folds, and they are
             * still in the host's caches (measured, 4 ranks in place: 16
             * MiB 1.1-1.3x slower written past them, 64 MiB 1.05-1.15x
             * faster); out of place this call never touched them (1.2x
             * faster at 16 and 64 MiB). */
            ccl__copy_fn out = ccl__direct_out_copy(d, count * es, send[r] == recv[r]);
            ccl__direct_publish(d, CCL__DIRECT_REDUCED);
            st = ccl__direct_wait(d, CCL__DIRECT_REDUCED, d->g, -1);
            for (int q = 0; q < n && st == CCL_OK; q++) {
                size_t qo = ccl__block_off(count, n, q), ql = ccl__block_len(count, n, q);
                if (q != r && ql) out(recv[r] + qo * es, recv[q] + qo * es, ql * es);
            }
        }
        return st;
    }
    if (kind == CCL__K_REDUCE_SCATTER) {
        fold(d, scratch, recv[r], send, (size_t)r * count, count);
    } else if (kind == CCL__K_ALL_GATHER) {
        ccl__copy_fn out = ccl__direct_out_copy(d, (size_t)n * count * es, 0);
        for (int q = 0; q < n; q++) {
            char *to = recv[r] + (size_t)q * count * es;
            if (to != send[q]) out(to, send[q], count * es);
        }
    } else if (recv[r] != send[root]) { /* broadcast */
        ccl__direct_out_copy(d, count * es, 0)(recv[r], send[root], count * es);
    }
    return CCL_OK;
}

int ccl__zero_copy_fits(int kind) {
    return kind == CCL__K_ALL_REDUCE || kind == CCL__K_REDUCE || kind == CCL__K_REDUCE_SCATTER ||
           kind == CCL__K_ALL_GATHER || kind == CCL__K_BROADCAST;
}

ccl_status_t ccl__zero_copy_try(struct ccl_comm *comm, const struct ccl__coll_args *a, int *done) {
    *done = 0;
    struct ccl__direct d;
    CCL_CHECK(ccl__direct_init(&d, comm, a));
    d.long_reads = 1;
    CCL_CHECK(ccl__direct_begin(&d, -1));
    *zrec_of(&d, d.r) = my_record(comm, a);
    CCL_CHECK(ccl__direct_post(&d, 0));
    CCL_CHECK(ccl__direct_await_posted(&d, 0, -1));
    int n = d.n, every = 1;
    for (int q = 0; q < n && every; q++) every = zrec_of(&d, q)->ok;
    if (!every) return ccl__direct_end(&d); /* the caller runs the call its own way */
    size_t nb = (unsigned)n; /* (never negative: the compiler cannot know it) */
    char **send = calloc(nb, sizeof(*send)), **recv = calloc(nb, sizeof(*recv));
    ccl_status_t st = send && recv ? CCL_OK : ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory",
                                                             ccl__prims_what(&d.p));
    for (int q = 0; q < n && st == CCL_OK; q++) {
        const struct zrec *z = zrec_of(&d, q);
        send[q] = z->send_serial ? peer_buf(comm, z, q, 0) : NULL;
        recv[q] = z->recv_serial ? peer_buf(comm, z, q, 1) : NULL;
    }
    /* Every rank decided alike to run: from here a failure fails the
     * communicator (peers may wait on this rank's counters). */
    if (st == CCL_OK) st = run(&d, a, send, recv);
    if (st == CCL_OK) st = ccl__direct_end(&d);
    if (st == CCL_OK) st = ccl__direct_wait(&d, CCL__DIRECT_DONE, d.g, -1);
    free(send);
    free(recv);
    if (st < 0) return ccl__comm_fail(comm, st);
    *done = 1;
    comm->zero_copy_calls++;
    return CCL_OK;
}
