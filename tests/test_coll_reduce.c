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
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_REDUCE 5

enum placement { OUT_OF_PLACE = 0, IN_PLACE = 1, NULL_RECV_ON_NONROOT = 2, NUM_PLACEMENTS = 3 };
static const char *const placement_names[] = {"out-of-place", "in-place", "NULL recvbuf on non-roots"};

struct bufs {
    struct tbuf send, recv;
    uint8_t *want, *saved;
};

static int bufs_alloc(struct bufs *b, size_t cap) {
    memset(b, 0, sizeof *b);
    if (tbuf_alloc(&b->send, cap) || tbuf_alloc(&b->recv, cap)) return -1;
    b->want = malloc(cap);
    b->saved = malloc(cap);
    return b->want && b->saved ? 0 : -1;
}

static void bufs_free(struct bufs *b) {
    tbuf_free(&b->send);
    tbuf_free(&b->recv);
    free(b->want);
    free(b->saved);
}

static ccl_status_t run_combo(struct harness_tally *t, ccl_comm_t *comm, int rank, int nranks, struct bufs *b,
                              ccl_dtype_t dt, ccl_op_t op, size_t count, int root, enum placement pl,
                              size_t misalign) {
    size_t bytes = count * ccl_dtype_size(dt);
    struct ref_case c = {dt, op, nranks, matrix_seed(COLL_REDUCE, dt, op, count, pl, root)};
    char combo[160];
    snprintf(combo, sizeof combo, "reduce %s %s count=%zu root=%d %s misalign=%zu", ccl_dtype_name(dt),
             ccl_op_name(op), count, root, placement_names[pl], misalign);

    uint8_t *send = tbuf_arm(&b->send, bytes, misalign);
    ref_reduce_input(&c, rank, 0, count, send);
    memcpy(b->saved, send, bytes);
    uint8_t *recv = NULL;
    if (pl == IN_PLACE) {
        recv = send;
    } else if (pl == OUT_OF_PLACE || rank == root) {
        recv = tbuf_arm(&b->recv, bytes, misalign);
        tbuf_poison(&b->recv);
    }

    ccl_status_t st = ccl_reduce(send, recv, count, dt, op, root, comm);
    if (st != CCL_OK) {
        harness_fail(t, __FILE__, __LINE__, "%s returned %s: %s", combo, ccl_status_string(st),
                     ccl_comm_last_error(comm));
        return st;
    }
    matrix_expect_guards(t, combo, "sendbuf", &b->send);
    if (recv && recv != send) matrix_expect_guards(t, combo, "recvbuf", &b->recv);
    if (rank == root) {
        ref_reduce_expected(&c, 0, count, b->want);
        matrix_expect_equal(t, combo, "recvbuf", dt, recv, b->want, count);
    } else if (recv && recv != send) {
        EXPECT(t, tbuf_is_poison(&b->recv), "%s: a non-root's recvbuf was written", combo);
    }
    if (recv != send || rank != root)
        matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, b->saved, count);
    return CCL_OK;
}

static int body_matrix(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    struct matrix_stats stats = {0, harness_now()};
    size_t cap = 99991 * 8 + 64;
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        size_t bytes = matrix_big_count((ccl_dtype_t)d) * ccl_dtype_size((ccl_dtype_t)d);
        if (bytes > cap) cap = bytes;
    }
    struct bufs b;
    if (bufs_alloc(&b, cap) != 0) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        bufs_free(&b);
        return t.fails;
    }
    size_t counts[8];
    int ncounts = matrix_small_counts(nranks, counts);
    ccl_status_t st = CCL_OK;
    for (int root = 0; root < nranks && st == CCL_OK; root++)
        for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++)
            for (int op = 0; op < CCL_NUM_OPS && st == CCL_OK; op++)
                for (int ci = 0; ci < ncounts && st == CCL_OK; ci++)
                    for (int pl = 0; pl < NUM_PLACEMENTS && st == CCL_OK; pl++) {
                        size_t misalign = ccl_dtype_size((ccl_dtype_t)d) * (size_t)((d + op + ci + root) % 3);
                        st = run_combo(&t, comm, rank, nranks, &b, (ccl_dtype_t)d, (ccl_op_t)op, counts[ci],
                                       root, (enum placement)pl, misalign);
                        stats.combos++;
                    }
    /* Above 4 MiB: every dtype once, ops, roots and placements rotating
     * (every op and placement in full mode, roots still rotating). */
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++)
        for (int op = 0; op < CCL_NUM_OPS && st == CCL_OK; op++)
            for (int pl = 0; pl < NUM_PLACEMENTS && st == CCL_OK; pl++) {
                if (!matrix_full() && (op != (int)matrix_big_op((ccl_dtype_t)d) || pl != d % NUM_PLACEMENTS))
                    continue;
                int root = (d + op + pl) % nranks;
                st = run_combo(&t, comm, rank, nranks, &b, (ccl_dtype_t)d, (ccl_op_t)op,
                               matrix_big_count((ccl_dtype_t)d), root, (enum placement)pl, 0);
                stats.combos++;
            }
    matrix_summary(ctx, rank, &stats, &t);
    bufs_free(&b);
    return t.fails;
}

START_TEST(reduce_matrix) { matrix_run(_i, body_matrix, "reduce", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("reduce");
    matrix_add_loop(s, "matrix", reduce_matrix, 600);
    return s;
}

int main(void) { return harness_main(suite()); }
