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
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_REDUCE_SCATTER 2

static ccl_status_t run_combo(struct matrix_body *mb, const struct matrix_combo *c) {
    struct matrix_bufs *b = &mb->b;
    struct harness_tally *t = &mb->t;
    int rank = mb->rank, nranks = mb->nranks, in_place = c->placement;
    ccl_dtype_t dt = c->dtype;
    ccl_op_t op = c->op;
    size_t count = c->count, block = count * ccl_dtype_size(dt), total = block * (size_t)nranks;
    struct ref_case rc = {dt, op, nranks, matrix_seed(COLL_REDUCE_SCATTER, dt, op, count, in_place, 0)};
    char combo[160];
    snprintf(combo, sizeof combo, "reduce_scatter %s %s recvcount=%zu %s misalign=%zu", ccl_dtype_name(dt),
             ccl_op_name(op), count, in_place ? "in-place" : "out-of-place", c->misalign);

    uint8_t *send = tbuf_arm(&b->send, total, c->misalign);
    ref_reduce_input(&rc, rank, 0, count * (size_t)nranks, send);
    memcpy(b->saved, send, total);
    uint8_t *recv = send + (size_t)rank * block;
    if (!in_place) {
        recv = tbuf_arm(&b->recv, block, c->misalign);
        tbuf_poison(&b->recv);
    }
    ccl_status_t st = MATRIX_CALL_OK(mb, combo, ccl_reduce_scatter(send, recv, count, dt, op, mb->comm));
    if (st != CCL_OK) return st;
    ref_reduce_expected(&rc, (size_t)rank * count, count, b->want);
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

/* Above 4 MiB, ops and placements rotate over the dtypes. */
static int pick_big(int nranks, struct matrix_combo *c) {
    (void)nranks;
    return c->op == matrix_big_op(c->dtype) && c->placement == matrix_big_in_place(c->dtype);
}

static int body_matrix(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    static const struct matrix_sweep sweep = {
        .run = run_combo, .has_op = 1, .placements = 2, .blocked = 1, .pick_big = pick_big};
    struct matrix_body mb;
    size_t recv_cap = matrix_block_buf_cap(nranks), send_cap = recv_cap * (size_t)nranks;
    if (matrix_body_begin(&mb, comm, rank, nranks, arg, send_cap, recv_cap, recv_cap, send_cap) == 0)
        matrix_sweep(&mb, &sweep);
    return matrix_body_end(&mb);
}

START_TEST(reduce_scatter_matrix) { matrix_run(_i, body_matrix, "reduce_scatter", NULL); }
END_TEST

/* ---- the other reduce-scatter algorithms on the same sweeps (the matrix
 * above runs the ring) ---- */

static const struct matrix_algo algos[] = {{"reducescatter:direct", matrix_one_host_configs, NULL, NULL}, {"reducescatter:single_copy", matrix_one_host_multi_configs, NULL, NULL}};
#define NALGOS ((int)(sizeof algos / sizeof algos[0]))

START_TEST(reduce_scatter_algos) { matrix_run_algo(_i, algos, NALGOS, body_matrix, "reduce_scatter", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("reduce_scatter");
    matrix_add_loop(s, "matrix", reduce_scatter_matrix, 600);
    matrix_add_algo_loop(s, "algos", reduce_scatter_algos, algos, NALGOS, 600);
    return s;
}

int main(void) { return harness_main(suite()); }
