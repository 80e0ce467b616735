/* ctest: TIMEOUT 900 LABELS matrix */
/*
 * ccl_reduce, bit-exact on the root: every root x dtype x op x count x
 * placement on every matrix configuration. recvbuf is written on the root
 * only: a non-root's recvbuf must come back untouched (or may be NULL), and
 * in place (sendbuf == recvbuf everywhere) a non-root's buffer is its input,
 * which must not change either.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_REDUCE 5

enum placement { OUT_OF_PLACE = 0, IN_PLACE = 1, NULL_RECV_ON_NONROOT = 2, NUM_PLACEMENTS = 3 };
static const char *const placement_names[] = {"out-of-place", "in-place", "NULL recvbuf on non-roots"};

static ccl_status_t run_combo(struct matrix_body *mb, const struct matrix_combo *c) {
    struct matrix_bufs *b = &mb->b;
    struct harness_tally *t = &mb->t;
    int rank = mb->rank, root = c->root;
    ccl_dtype_t dt = c->dtype;
    ccl_op_t op = c->op;
    enum placement pl = (enum placement)c->placement;
    size_t count = c->count, bytes = count * ccl_dtype_size(dt);
    struct ref_case rc = {dt, op, mb->nranks, matrix_seed(COLL_REDUCE, dt, op, count, pl, root)};
    char combo[160];
    snprintf(combo, sizeof combo, "reduce %s %s count=%zu root=%d %s misalign=%zu", ccl_dtype_name(dt),
             ccl_op_name(op), count, root, placement_names[pl], c->misalign);

    uint8_t *send = tbuf_arm(&b->send, bytes, c->misalign);
    ref_reduce_input(&rc, rank, 0, count, send);
    memcpy(b->saved, send, bytes);
    uint8_t *recv = NULL;
    if (pl == IN_PLACE) {
        recv = send;
    } else if (pl == OUT_OF_PLACE || rank == root) {
        recv = tbuf_arm(&b->recv, bytes, c->misalign);
        tbuf_poison(&b->recv);
    }

    ccl_status_t st = MATRIX_CALL_OK(mb, combo, ccl_reduce(send, recv, count, dt, op, root, mb->comm));
    if (st != CCL_OK) return st;
    matrix_expect_guards(t, combo, "sendbuf", &b->send);
    if (recv && recv != send) matrix_expect_guards(t, combo, "recvbuf", &b->recv);
    if (rank == root) {
        ref_reduce_expected(&rc, 0, count, b->want);
        matrix_expect_equal(t, combo, "recvbuf", dt, recv, b->want, count);
    } else if (recv && recv != send) {
        EXPECT(t, tbuf_is_poison(&b->recv), "%s: a non-root's recvbuf was written", combo);
    }
    if (recv != send || rank != root)
        matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, b->saved, count);
    return CCL_OK;
}

/* Above 4 MiB, ops and placements rotate over the dtypes (every op and
 * placement in full mode); roots rotate always. */
static int pick_big(int nranks, struct matrix_combo *c) {
    c->root = ((int)c->dtype + (int)c->op + c->placement) % nranks;
    return c->op == matrix_big_op(c->dtype) && c->placement == (int)c->dtype % NUM_PLACEMENTS;
}

static int body_matrix(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    static const struct matrix_sweep sweep = {
        .run = run_combo, .has_root = 1, .has_op = 1, .placements = NUM_PLACEMENTS, .pick_big = pick_big};
    struct matrix_body mb;
    size_t cap = matrix_buf_cap();
    if (matrix_body_begin(&mb, comm, rank, nranks, arg, cap, cap, cap, cap) == 0) matrix_sweep(&mb, &sweep);
    return matrix_body_end(&mb);
}

START_TEST(reduce_matrix) { matrix_run(_i, body_matrix, "reduce", NULL); }
END_TEST

/* ---- every reduce algorithm on the same sweeps ---- */

static const struct matrix_algo algos[] = {
    {"reduce:ring", NULL, NULL, NULL}, {"reduce:tree", NULL, NULL, NULL}, {"reduce:direct", matrix_one_host_configs, NULL, NULL}, {"reduce:single_copy", matrix_one_host_multi_configs, NULL, NULL},
    /* a chunk of no power of two, so pieces never line up with blocks or slots */
    {"reduce:ring", NULL, "4160", NULL}};
#define NALGOS ((int)(sizeof algos / sizeof algos[0]))

START_TEST(reduce_algos) { matrix_run_algo(_i, algos, NALGOS, body_matrix, "reduce", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("reduce");
    matrix_add_loop(s, "matrix", reduce_matrix, 600);
    matrix_add_algo_loop(s, "algos", reduce_algos, algos, NALGOS, 600);
    return s;
}

int main(void) { return harness_main(suite()); }
