/* ctest: TIMEOUT 900 LABELS matrix */
/*
 * The data-exchange part of the matrix, on every matrix configuration:
 * ccl_all_to_all (every dtype x count; not in place by definition), a ring
 * exchange of ccl_send/ccl_recv in a group (every dtype x count), and
 * ccl_barrier checked through a counter in memory shared by the ranks.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_ALL_TO_ALL 6
#define COLL_RING 7

/* Distinct payload for every (source, destination) pair. */
static int pair_id(int src, int dst) { return src * HARNESS_MAX_RANKS + dst; }

/* ---- all_to_all ---- */

static ccl_status_t a2a_combo(struct matrix_body *mb, const struct matrix_combo *c) {
    struct harness_tally *t = &mb->t;
    struct tbuf *sb = &mb->b.send, *rb = &mb->b.recv;
    uint8_t *scratch = mb->b.want;
    int rank = mb->rank, nranks = mb->nranks;
    ccl_dtype_t dt = c->dtype;
    size_t count = c->count, block = count * ccl_dtype_size(dt), total = block * (size_t)nranks;
    uint64_t seed = matrix_seed(COLL_ALL_TO_ALL, dt, 0, count, 0, 0);
    char combo[160];
    snprintf(combo, sizeof combo, "all_to_all %s count_per_peer=%zu misalign=%zu", ccl_dtype_name(dt), count,
             c->misalign);
    uint8_t *send = tbuf_arm(sb, total, c->misalign);
    uint8_t *recv = tbuf_arm(rb, total, c->misalign);
    tbuf_poison(rb);
    for (int p = 0; p < nranks; p++) ref_bytes(seed, pair_id(rank, p), 0, block, send + (size_t)p * block);

    ccl_status_t st = MATRIX_CALL_OK(mb, combo, ccl_all_to_all(send, recv, count, dt, mb->comm));
    if (st != CCL_OK) return st;
    for (int p = 0; p < nranks; p++) {
        char what[64];
        ref_bytes(seed, pair_id(p, rank), 0, block, scratch);
        snprintf(what, sizeof what, "recvbuf block from rank %d", p);
        if (!matrix_expect_equal(t, combo, what, dt, recv + (size_t)p * block, scratch, count)) break;
    }
    for (int p = 0; p < nranks; p++) {
        ref_bytes(seed, pair_id(rank, p), 0, block, scratch);
        if (!matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send + (size_t)p * block, scratch,
                                 count))
            break;
    }
    matrix_expect_guards(t, combo, "sendbuf", sb);
    matrix_expect_guards(t, combo, "recvbuf", rb);
    return CCL_OK;
}

static int body_all_to_all(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    /* Every dtype at the big count; there is no placement to rotate. */
    static const struct matrix_sweep sweep = {.run = a2a_combo, .placements = 1, .blocked = 1};
    struct matrix_body mb;
    size_t block_cap = matrix_block_buf_cap(nranks), cap = block_cap * (size_t)nranks;
    /* want is the scratch block for one peer's expected bytes. */
    if (matrix_body_begin(&mb, comm, rank, nranks, arg, cap, cap, block_cap, 0) == 0) matrix_sweep(&mb, &sweep);
    return matrix_body_end(&mb);
}

START_TEST(all_to_all_matrix) { matrix_run(_i, body_all_to_all, "all_to_all", NULL); }
END_TEST

/* ---- ring of send/recv in a group ---- */

static ccl_status_t ring_combo(struct matrix_body *mb, const struct matrix_combo *c) {
    struct harness_tally *t = &mb->t;
    struct tbuf *sb = &mb->b.send, *rb = &mb->b.recv;
    uint8_t *scratch = mb->b.want;
    int rank = mb->rank, nranks = mb->nranks;
    ccl_dtype_t dt = c->dtype;
    size_t count = c->count, bytes = count * ccl_dtype_size(dt);
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    uint64_t seed = matrix_seed(COLL_RING, dt, 0, count, 0, 0);
    char combo[160];
    snprintf(combo, sizeof combo, "ring send/recv %s count=%zu misalign=%zu", ccl_dtype_name(dt), count,
             c->misalign);
    uint8_t *send = tbuf_arm(sb, bytes, c->misalign);
    uint8_t *recv = tbuf_arm(rb, bytes, c->misalign);
    tbuf_poison(rb);
    ref_bytes(seed, rank, 0, bytes, send);

    ccl_status_t st = ccl_group_start();
    if (st == CCL_OK) {
        ccl_status_t s1 = ccl_send(send, count, dt, next, mb->comm);
        ccl_status_t s2 = ccl_recv(recv, count, dt, prev, mb->comm);
        st = ccl_group_end();
        if (st == CCL_OK) st = s1 != CCL_OK ? s1 : s2;
    }
    if (MATRIX_CALL_OK(mb, combo, st) != CCL_OK) return st;
    ref_bytes(seed, prev, 0, bytes, scratch);
    matrix_expect_equal(t, combo, "recvbuf (from the previous rank)", dt, recv, scratch, count);
    ref_bytes(seed, rank, 0, bytes, scratch);
    matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, scratch, count);
    matrix_expect_guards(t, combo, "sendbuf", sb);
    matrix_expect_guards(t, combo, "recvbuf", rb);
    return CCL_OK;
}

static int body_ring(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    struct matrix_body mb;
    size_t cap = matrix_buf_cap();
    if (matrix_body_begin(&mb, comm, rank, nranks, arg, cap, cap, cap, 0) != 0) return matrix_body_end(&mb);
    size_t counts[8];
    int ncounts = matrix_small_counts(nranks, counts);
    ccl_status_t st = CCL_OK;
    /* Per dtype: the small counts, then the big one. */
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++) {
        ccl_dtype_t dt = (ccl_dtype_t)d;
        for (int ci = 0; ci < ncounts && st == CCL_OK; ci++) {
            size_t misalign = ccl_dtype_size(dt) * (size_t)((d + ci) % 3);
            st = ring_combo(&mb, &(struct matrix_combo){.dtype = dt, .count = counts[ci], .misalign = misalign});
            mb.stats.combos++;
        }
        if (st == CCL_OK) {
            st = ring_combo(&mb, &(struct matrix_combo){.dtype = dt, .count = matrix_big_count(dt)});
            mb.stats.combos++;
        }
    }
    return matrix_body_end(&mb);
}

START_TEST(ring_send_recv_matrix) { matrix_run(_i, body_ring, "ring send/recv", NULL); }
END_TEST

/* ---- barrier ---- */

#define BARRIER_ROUNDS 300

/* arrived[i] counts the ranks that reached barrier i; shared by the ranks
 * because it is mapped before the harness forks them. */
struct barrier_shared {
    _Atomic int arrived[BARRIER_ROUNDS];
};

static int body_barrier(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct barrier_shared *sh = ctx->user;
    struct harness_tally t = {rank, 0};
    struct matrix_stats stats = {0, harness_now()};
    for (int i = 0; i < BARRIER_ROUNDS; i++) {
        /* One rank per round arrives late, so an early release shows. */
        if (i % nranks == rank)
            for (volatile int spin = 0; spin < 20000; spin++) {
            }
        atomic_fetch_add(&sh->arrived[i], 1);
        if (EXPECT_OK(&t, ccl_barrier(comm)) != CCL_OK) break;
        int seen = atomic_load(&sh->arrived[i]);
        EXPECT(&t, seen == nranks, "barrier %d released this rank when only %d of %d ranks had arrived", i, seen,
               nranks);
        stats.combos++;
    }
    matrix_summary(ctx, rank, &stats, &t);
    return t.fails;
}

START_TEST(barrier_matrix) {
    struct barrier_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    matrix_run(_i, body_barrier, "barrier", sh);
    munmap(sh, sizeof *sh);
}
END_TEST

/* ---- every all-to-all and barrier algorithm on the same sweeps ---- */

static const struct matrix_algo a2a_algos[] = {
    {"alltoall:direct", NULL, NULL, NULL}, {"alltoall:pairwise", NULL, NULL, NULL}, {"alltoall:bruck", NULL, NULL, NULL}};
#define NA2A ((int)(sizeof a2a_algos / sizeof a2a_algos[0]))
static const struct matrix_algo barrier_algos[] = {{"barrier:ring", NULL, NULL, NULL}, {"barrier:bruck", NULL, NULL, NULL}};
#define NBARRIER ((int)(sizeof barrier_algos / sizeof barrier_algos[0]))

START_TEST(all_to_all_algos) { matrix_run_algo(_i, a2a_algos, NA2A, body_all_to_all, "all_to_all", NULL); }
END_TEST

START_TEST(barrier_algos_run) {
    struct barrier_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    matrix_run_algo(_i, barrier_algos, NBARRIER, body_barrier, "barrier", sh);
    munmap(sh, sizeof *sh);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("exchange");
    matrix_add_loop(s, "all_to_all", all_to_all_matrix, 600);
    matrix_add_loop(s, "ring_send_recv", ring_send_recv_matrix, 600);
    matrix_add_loop(s, "barrier", barrier_matrix, 300);
    matrix_add_algo_loop(s, "all_to_all_algos", all_to_all_algos, a2a_algos, NA2A, 600);
    matrix_add_algo_loop(s, "barrier_algos", barrier_algos_run, barrier_algos, NBARRIER, 300);
    return s;
}

int main(void) { return harness_main(suite()); }
