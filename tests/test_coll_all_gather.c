/* ctest: TIMEOUT 900 LABELS matrix */
/*
 * ccl_all_gather, bit-exact on every rank: every dtype x count x placement
 * on every matrix configuration. Payloads are arbitrary bytes (every bit
 * pattern, float NaNs included): gathering must move them untouched. In
 * place, sendbuf == recvbuf + rank * sendcount.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_ALL_GATHER 3

static ccl_status_t run_combo(struct matrix_body *mb, const struct matrix_combo *c) {
    struct matrix_bufs *b = &mb->b;
    struct harness_tally *t = &mb->t;
    int rank = mb->rank, nranks = mb->nranks, in_place = c->placement;
    ccl_dtype_t dt = c->dtype;
    size_t count = c->count, block = count * ccl_dtype_size(dt), total = block * (size_t)nranks;
    uint64_t seed = matrix_seed(COLL_ALL_GATHER, dt, 0, count, in_place, 0);
    char combo[160];
    snprintf(combo, sizeof combo, "all_gather %s sendcount=%zu %s misalign=%zu", ccl_dtype_name(dt), count,
             in_place ? "in-place" : "out-of-place", c->misalign);

    uint8_t *recv = tbuf_arm(&b->recv, total, c->misalign);
    tbuf_poison(&b->recv);
    uint8_t *send = recv + (size_t)rank * block;
    if (!in_place) send = tbuf_arm(&b->send, block, c->misalign);
    ref_bytes(seed, rank, 0, block, send);
    memcpy(b->saved, send, block);

    ccl_status_t st = MATRIX_CALL_OK(mb, combo, ccl_all_gather(send, recv, count, dt, mb->comm));
    if (st != CCL_OK) return st;
    for (int p = 0; p < nranks; p++) ref_bytes(seed, p, 0, block, b->want + (size_t)p * block);
    matrix_expect_equal(t, combo, "recvbuf", dt, recv, b->want, count * (size_t)nranks);
    matrix_expect_guards(t, combo, "recvbuf", &b->recv);
    if (!in_place) {
        matrix_expect_guards(t, combo, "sendbuf", &b->send);
        matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, b->saved, count);
    }
    return CCL_OK;
}

/* Above 4 MiB, placements alternate over the dtypes. */
static int pick_big(int nranks, struct matrix_combo *c) {
    (void)nranks;
    return c->placement == (int)c->dtype % 2;
}

static int body_matrix(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    static const struct matrix_sweep sweep = {.run = run_combo, .placements = 2, .blocked = 1, .pick_big = pick_big};
    struct matrix_body mb;
    size_t send_cap = matrix_block_buf_cap(nranks), recv_cap = send_cap * (size_t)nranks;
    if (matrix_body_begin(&mb, comm, rank, nranks, arg, send_cap, recv_cap, recv_cap, send_cap) == 0)
        matrix_sweep(&mb, &sweep);
    return matrix_body_end(&mb);
}

START_TEST(all_gather_matrix) { matrix_run(_i, body_matrix, "all_gather", NULL); }
END_TEST

/* ---- every all-gather algorithm on the same sweeps (rd needs 2^k ranks) ---- */

static const int pow2_configs[] = {1, 4, 5, 6, -1};
static const struct matrix_algo algos[] = {
    {"allgather:ring", NULL, NULL, NULL}, {"allgather:bruck", NULL, NULL, NULL}, {"allgather:rd", pow2_configs, NULL, NULL},
    {"allgather:direct", matrix_one_host_configs, NULL, NULL}, {"allgather:single_copy", matrix_one_host_multi_configs, NULL, NULL},
    /* outputs written past the caches from any byte, in the least window */
    {"allgather:direct", matrix_one_host_multi_configs, NULL, "CCL_STREAM_OUTPUT_BYTES=1 CCL_DIRECT_WINDOW_BYTES=65536"},
    /* the ring's outputs written past the caches from any byte, in a chunk
     * of no power of two (unaligned heads and tails) */
    {"allgather:ring", NULL, "4160", "CCL_STREAM_OUTPUT_BYTES=1"}};
#define NALGOS ((int)(sizeof algos / sizeof algos[0]))

START_TEST(all_gather_algos) { matrix_run_algo(_i, algos, NALGOS, body_matrix, "all_gather", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("all_gather");
    matrix_add_loop(s, "matrix", all_gather_matrix, 600);
    matrix_add_algo_loop(s, "algos", all_gather_algos, algos, NALGOS, 600);
    return s;
}

int main(void) { return harness_main(suite()); }
