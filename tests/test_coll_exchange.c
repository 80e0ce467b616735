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

static size_t max_bytes(void) {
    size_t cap = 99991 * 8 + 64;
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        size_t bytes = matrix_big_count((ccl_dtype_t)d) * ccl_dtype_size((ccl_dtype_t)d);
        if (bytes > cap) cap = bytes;
    }
    return cap;
}

/* ---- all_to_all ---- */

static ccl_status_t a2a_combo(struct harness_tally *t, ccl_comm_t *comm, int rank, int nranks, struct tbuf *sb,
                              struct tbuf *rb, uint8_t *scratch, ccl_dtype_t dt, size_t count, size_t misalign) {
    size_t block = count * ccl_dtype_size(dt), total = block * (size_t)nranks;
    uint64_t seed = matrix_seed(COLL_ALL_TO_ALL, dt, 0, count, 0, 0);
    char combo[160];
    snprintf(combo, sizeof combo, "all_to_all %s count_per_peer=%zu misalign=%zu", ccl_dtype_name(dt), count,
             misalign);
    uint8_t *send = tbuf_arm(sb, total, misalign);
    uint8_t *recv = tbuf_arm(rb, total, misalign);
    tbuf_poison(rb);
    for (int p = 0; p < nranks; p++) ref_bytes(seed, pair_id(rank, p), 0, block, send + (size_t)p * block);

    ccl_status_t st = ccl_all_to_all(send, recv, count, dt, comm);
    if (st != CCL_OK) {
        harness_fail(t, __FILE__, __LINE__, "%s returned %s: %s", combo, ccl_status_string(st),
                     ccl_comm_last_error(comm));
        return st;
    }
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
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    struct matrix_stats stats = {0, harness_now()};
    size_t block_cap = 99991 * 8 + 64;
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        size_t bytes = matrix_big_block_count((ccl_dtype_t)d, nranks) * ccl_dtype_size((ccl_dtype_t)d);
        if (bytes > block_cap) block_cap = bytes;
    }
    struct tbuf sb, rb;
    uint8_t *scratch = malloc(block_cap);
    if (tbuf_alloc(&sb, block_cap * (size_t)nranks) || tbuf_alloc(&rb, block_cap * (size_t)nranks) || !scratch) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    size_t counts[8];
    int ncounts = matrix_small_counts(nranks, counts);
    ccl_status_t st = CCL_OK;
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++)
        for (int ci = 0; ci < ncounts && st == CCL_OK; ci++) {
            size_t misalign = ccl_dtype_size((ccl_dtype_t)d) * (size_t)((d + ci) % 3);
            st = a2a_combo(&t, comm, rank, nranks, &sb, &rb, scratch, (ccl_dtype_t)d, counts[ci], misalign);
            stats.combos++;
        }
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++) {
        size_t count = matrix_big_block_count((ccl_dtype_t)d, nranks);
        st = a2a_combo(&t, comm, rank, nranks, &sb, &rb, scratch, (ccl_dtype_t)d, count, 0);
        stats.combos++;
    }
    matrix_summary(ctx, rank, &stats, &t);
    tbuf_free(&sb);
    tbuf_free(&rb);
    free(scratch);
    return t.fails;
}

START_TEST(all_to_all_matrix) { matrix_run(_i, body_all_to_all, "all_to_all", NULL); }
END_TEST

/* ---- ring of send/recv in a group ---- */

static ccl_status_t ring_combo(struct harness_tally *t, ccl_comm_t *comm, int rank, int nranks, struct tbuf *sb,
                               struct tbuf *rb, uint8_t *scratch, ccl_dtype_t dt, size_t count, size_t misalign) {
    size_t bytes = count * ccl_dtype_size(dt);
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    uint64_t seed = matrix_seed(COLL_RING, dt, 0, count, 0, 0);
    char combo[160];
    snprintf(combo, sizeof combo, "ring send/recv %s count=%zu misalign=%zu", ccl_dtype_name(dt), count, misalign);
    uint8_t *send = tbuf_arm(sb, bytes, misalign);
    uint8_t *recv = tbuf_arm(rb, bytes, misalign);
    tbuf_poison(rb);
    ref_bytes(seed, rank, 0, bytes, send);

    ccl_status_t st = ccl_group_start();
    if (st == CCL_OK) {
        ccl_status_t s1 = ccl_send(send, count, dt, next, comm);
        ccl_status_t s2 = ccl_recv(recv, count, dt, prev, comm);
        st = ccl_group_end();
        if (st == CCL_OK) st = s1 != CCL_OK ? s1 : s2;
    }
    if (st != CCL_OK) {
        harness_fail(t, __FILE__, __LINE__, "%s returned %s: %s", combo, ccl_status_string(st),
                     ccl_comm_last_error(comm));
        return st;
    }
    ref_bytes(seed, prev, 0, bytes, scratch);
    matrix_expect_equal(t, combo, "recvbuf (from the previous rank)", dt, recv, scratch, count);
    ref_bytes(seed, rank, 0, bytes, scratch);
    matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, scratch, count);
    matrix_expect_guards(t, combo, "sendbuf", sb);
    matrix_expect_guards(t, combo, "recvbuf", rb);
    return CCL_OK;
}

static int body_ring(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    struct matrix_stats stats = {0, harness_now()};
    size_t cap = max_bytes();
    struct tbuf sb, rb;
    uint8_t *scratch = malloc(cap);
    if (tbuf_alloc(&sb, cap) || tbuf_alloc(&rb, cap) || !scratch) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    size_t counts[8];
    int ncounts = matrix_small_counts(nranks, counts);
    ccl_status_t st = CCL_OK;
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++) {
        for (int ci = 0; ci < ncounts && st == CCL_OK; ci++) {
            size_t misalign = ccl_dtype_size((ccl_dtype_t)d) * (size_t)((d + ci) % 3);
            st = ring_combo(&t, comm, rank, nranks, &sb, &rb, scratch, (ccl_dtype_t)d, counts[ci], misalign);
            stats.combos++;
        }
        if (st == CCL_OK) {
            st = ring_combo(&t, comm, rank, nranks, &sb, &rb, scratch, (ccl_dtype_t)d,
                            matrix_big_count((ccl_dtype_t)d), 0);
            stats.combos++;
        }
    }
    matrix_summary(ctx, rank, &stats, &t);
    tbuf_free(&sb);
    tbuf_free(&rb);
    free(scratch);
    return t.fails;
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

static Suite *suite(void) {
    Suite *s = suite_create("exchange");
    matrix_add_loop(s, "all_to_all", all_to_all_matrix, 600);
    matrix_add_loop(s, "ring_send_recv", ring_send_recv_matrix, 600);
    matrix_add_loop(s, "barrier", barrier_matrix, 300);
    return s;
}

int main(void) { return harness_main(suite()); }
