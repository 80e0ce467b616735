/* ctest: TIMEOUT 900 LABELS matrix */
/*
 * ccl_reduce_scatter, bit-exact on every rank: every dtype x op x count x
 * placement on every matrix configuration. Rank r's input is nranks *
 * recvcount elements; it receives the reduction of block r. In place,
 * recvbuf == sendbuf + rank * recvcount, and the rest of sendbuf (const)
 * must not change either.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_REDUCE_SCATTER 2

struct bufs {
    struct tbuf send, recv;
    uint8_t *want, *saved;
};

static int bufs_alloc(struct bufs *b, size_t send_cap, size_t recv_cap) {
    memset(b, 0, sizeof *b);
    if (tbuf_alloc(&b->send, send_cap) || tbuf_alloc(&b->recv, recv_cap)) return -1;
    b->want = malloc(recv_cap);
    b->saved = malloc(send_cap);
    return b->want && b->saved ? 0 : -1;
}

static void bufs_free(struct bufs *b) {
    tbuf_free(&b->send);
    tbuf_free(&b->recv);
    free(b->want);
    free(b->saved);
}

static ccl_status_t run_combo(struct harness_tally *t, ccl_comm_t *comm, int rank, int nranks, struct bufs *b,
                              ccl_dtype_t dt, ccl_op_t op, size_t count, int in_place, size_t misalign) {
    size_t es = ccl_dtype_size(dt);
    size_t block = count * es, total = block * (size_t)nranks;
    struct ref_case c = {dt, op, nranks, matrix_seed(COLL_REDUCE_SCATTER, dt, op, count, in_place, 0)};
    char combo[160];
    snprintf(combo, sizeof combo, "reduce_scatter %s %s recvcount=%zu %s misalign=%zu", ccl_dtype_name(dt),
             ccl_op_name(op), count, in_place ? "in-place" : "out-of-place", misalign);

    uint8_t *send = tbuf_arm(&b->send, total, misalign);
    ref_reduce_input(&c, rank, 0, count * (size_t)nranks, send);
    memcpy(b->saved, send, total);
    uint8_t *recv = send + (size_t)rank * block;
    if (!in_place) {
        recv = tbuf_arm(&b->recv, block, misalign);
        tbuf_poison(&b->recv);
    }
    ccl_status_t st = ccl_reduce_scatter(send, recv, count, dt, op, comm);
    if (st != CCL_OK) {
        harness_fail(t, __FILE__, __LINE__, "%s returned %s: %s", combo, ccl_status_string(st),
                     ccl_comm_last_error(comm));
        return st;
    }
    ref_reduce_expected(&c, (size_t)rank * count, count, b->want);
    matrix_expect_equal(t, combo, "recvbuf", dt, recv, b->want, count);
    matrix_expect_guards(t, combo, "sendbuf", &b->send);
    if (in_place) {
        /* Blocks other than this rank's are input only. */
        matrix_expect_equal(t, combo, "sendbuf before this rank's block", dt, send, b->saved,
                            (size_t)rank * count);
        size_t after = (size_t)(rank + 1) * block;
        matrix_expect_equal(t, combo, "sendbuf after this rank's block", dt, send + after, b->saved + after,
                            (size_t)(nranks - rank - 1) * count);
    } else {
        matrix_expect_guards(t, combo, "recvbuf", &b->recv);
        matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, b->saved,
                            count * (size_t)nranks);
    }
    return CCL_OK;
}

static int body_matrix(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    struct matrix_stats stats = {0, harness_now()};
    size_t recv_cap = 99991 * 8 + 64;
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        size_t bytes = matrix_big_block_count((ccl_dtype_t)d, nranks) * ccl_dtype_size((ccl_dtype_t)d);
        if (bytes > recv_cap) recv_cap = bytes;
    }
    struct bufs b;
    if (bufs_alloc(&b, recv_cap * (size_t)nranks, recv_cap) != 0) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        bufs_free(&b);
        return t.fails;
    }
    size_t counts[8];
    int ncounts = matrix_small_counts(nranks, counts);
    ccl_status_t st = CCL_OK;
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++)
        for (int op = 0; op < CCL_NUM_OPS && st == CCL_OK; op++)
            for (int ci = 0; ci < ncounts && st == CCL_OK; ci++)
                for (int ip = 0; ip < 2 && st == CCL_OK; ip++) {
                    size_t misalign = ccl_dtype_size((ccl_dtype_t)d) * (size_t)((d + op + ci) % 3);
                    st = run_combo(&t, comm, rank, nranks, &b, (ccl_dtype_t)d, (ccl_op_t)op, counts[ci], ip,
                                   misalign);
                    stats.combos++;
                }
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++) {
        size_t count = matrix_big_block_count((ccl_dtype_t)d, nranks);
        for (int op = 0; op < CCL_NUM_OPS && st == CCL_OK; op++)
            for (int ip = 0; ip < 2 && st == CCL_OK; ip++) {
                if (!matrix_full() && (op != (int)matrix_big_op((ccl_dtype_t)d) ||
                                       ip != matrix_big_in_place((ccl_dtype_t)d)))
                    continue;
                st = run_combo(&t, comm, rank, nranks, &b, (ccl_dtype_t)d, (ccl_op_t)op, count, ip, 0);
                stats.combos++;
            }
    }
    matrix_summary(ctx, rank, &stats, &t);
    bufs_free(&b);
    return t.fails;
}

START_TEST(reduce_scatter_matrix) { matrix_run(_i, body_matrix, "reduce_scatter", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("reduce_scatter");
    matrix_add_loop(s, "matrix", reduce_scatter_matrix, 600);
    return s;
}

int main(void) { return harness_main(suite()); }
