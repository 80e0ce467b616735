/* ctest: TIMEOUT 900 LABELS matrix */
/*
 * ccl_all_gather, bit-exact on every rank: every dtype x count x placement
 * on every matrix configuration. Payloads are arbitrary bytes (every bit
 * pattern, float NaNs included): gathering must move them untouched. In
 * place, sendbuf == recvbuf + rank * sendcount.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_ALL_GATHER 3

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
                              ccl_dtype_t dt, size_t count, int in_place, size_t misalign) {
    size_t block = count * ccl_dtype_size(dt), total = block * (size_t)nranks;
    uint64_t seed = matrix_seed(COLL_ALL_GATHER, dt, 0, count, in_place, 0);
    char combo[160];
    snprintf(combo, sizeof combo, "all_gather %s sendcount=%zu %s misalign=%zu", ccl_dtype_name(dt), count,
             in_place ? "in-place" : "out-of-place", misalign);

    uint8_t *recv = tbuf_arm(&b->recv, total, misalign);
    tbuf_poison(&b->recv);
    uint8_t *send = recv + (size_t)rank * block;
    if (!in_place) send = tbuf_arm(&b->send, block, misalign);
    ref_bytes(seed, rank, 0, block, send);
    memcpy(b->saved, send, block);

    ccl_status_t st = ccl_all_gather(send, recv, count, dt, comm);
    if (st != CCL_OK) {
        harness_fail(t, __FILE__, __LINE__, "%s returned %s: %s", combo, ccl_status_string(st),
                     ccl_comm_last_error(comm));
        return st;
    }
    for (int p = 0; p < nranks; p++) ref_bytes(seed, p, 0, block, b->want + (size_t)p * block);
    matrix_expect_equal(t, combo, "recvbuf", dt, recv, b->want, count * (size_t)nranks);
    matrix_expect_guards(t, combo, "recvbuf", &b->recv);
    if (!in_place) {
        matrix_expect_guards(t, combo, "sendbuf", &b->send);
        matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, b->saved, count);
    }
    return CCL_OK;
}

static int body_matrix(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    struct matrix_stats stats = {0, harness_now()};
    size_t send_cap = 99991 * 8 + 64;
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        size_t bytes = matrix_big_block_count((ccl_dtype_t)d, nranks) * ccl_dtype_size((ccl_dtype_t)d);
        if (bytes > send_cap) send_cap = bytes;
    }
    struct bufs b;
    if (bufs_alloc(&b, send_cap, send_cap * (size_t)nranks) != 0) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        bufs_free(&b);
        return t.fails;
    }
    size_t counts[8];
    int ncounts = matrix_small_counts(nranks, counts);
    ccl_status_t st = CCL_OK;
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++)
        for (int ci = 0; ci < ncounts && st == CCL_OK; ci++)
            for (int ip = 0; ip < 2 && st == CCL_OK; ip++) {
                size_t misalign = ccl_dtype_size((ccl_dtype_t)d) * (size_t)((d + ci) % 3);
                st = run_combo(&t, comm, rank, nranks, &b, (ccl_dtype_t)d, counts[ci], ip, misalign);
                stats.combos++;
            }
    /* Above 4 MiB: every dtype, placements alternating (both in full mode). */
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++)
        for (int ip = 0; ip < 2 && st == CCL_OK; ip++) {
            if (!matrix_full() && ip != d % 2) continue;
            size_t count = matrix_big_block_count((ccl_dtype_t)d, nranks);
            st = run_combo(&t, comm, rank, nranks, &b, (ccl_dtype_t)d, count, ip, 0);
            stats.combos++;
        }
    matrix_summary(ctx, rank, &stats, &t);
    bufs_free(&b);
    return t.fails;
}

START_TEST(all_gather_matrix) { matrix_run(_i, body_matrix, "all_gather", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("all_gather");
    matrix_add_loop(s, "matrix", all_gather_matrix, 600);
    return s;
}

int main(void) { return harness_main(suite()); }
