/* ctest: TIMEOUT 900 LABELS matrix */
/*
 * ccl_broadcast, bit-exact on every rank: every root x dtype x count x
 * placement on every matrix configuration. Placements: out of place; in
 * place (sendbuf == recvbuf everywhere); and NULL sendbuf on the non-roots,
 * which the API allows. A non-root's sendbuf holds its own bytes, so a
 * library that read it would be caught; nobody's sendbuf may change.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_BROADCAST 4

enum placement { OUT_OF_PLACE = 0, IN_PLACE = 1, NULL_SEND_ON_NONROOT = 2, NUM_PLACEMENTS = 3 };
static const char *const placement_names[] = {"out-of-place", "in-place", "NULL sendbuf on non-roots"};

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

static ccl_status_t run_combo(struct harness_tally *t, ccl_comm_t *comm, int rank, struct bufs *b, ccl_dtype_t dt,
                              size_t count, int root, enum placement pl, size_t misalign) {
    size_t bytes = count * ccl_dtype_size(dt);
    uint64_t seed = matrix_seed(COLL_BROADCAST, dt, 0, count, pl, root);
    char combo[160];
    snprintf(combo, sizeof combo, "broadcast %s count=%zu root=%d %s misalign=%zu", ccl_dtype_name(dt), count,
             root, placement_names[pl], misalign);

    uint8_t *recv = tbuf_arm(&b->recv, bytes, misalign);
    uint8_t *send = NULL;
    if (pl == IN_PLACE) {
        send = recv;
    } else if (pl == OUT_OF_PLACE || rank == root) {
        send = tbuf_arm(&b->send, bytes, misalign);
    }
    tbuf_poison(&b->recv);
    /* The root's payload; a non-root's sendbuf gets bytes of its own. */
    if (send) ref_bytes(seed, rank == root ? root : 1000 + rank, 0, bytes, send);
    if (send && send != recv) memcpy(b->saved, send, bytes);

    ccl_status_t st = ccl_broadcast(send, recv, count, dt, root, comm);
    if (st != CCL_OK) {
        harness_fail(t, __FILE__, __LINE__, "%s returned %s: %s", combo, ccl_status_string(st),
                     ccl_comm_last_error(comm));
        return st;
    }
    ref_bytes(seed, root, 0, bytes, b->want);
    matrix_expect_equal(t, combo, "recvbuf", dt, recv, b->want, count);
    matrix_expect_guards(t, combo, "recvbuf", &b->recv);
    if (send && send != recv) {
        matrix_expect_guards(t, combo, "sendbuf", &b->send);
        matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, b->saved, count);
    }
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
            for (int ci = 0; ci < ncounts && st == CCL_OK; ci++)
                for (int pl = 0; pl < NUM_PLACEMENTS && st == CCL_OK; pl++) {
                    size_t misalign = ccl_dtype_size((ccl_dtype_t)d) * (size_t)((d + ci + root) % 3);
                    st = run_combo(&t, comm, rank, &b, (ccl_dtype_t)d, counts[ci], root, (enum placement)pl,
                                   misalign);
                    stats.combos++;
                }
    /* Above 4 MiB: every dtype, roots and placements rotating (all in full
     * mode). */
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++)
        for (int root = 0; root < nranks && st == CCL_OK; root++)
            for (int pl = 0; pl < NUM_PLACEMENTS && st == CCL_OK; pl++) {
                if (!matrix_full() && (root != d % nranks || pl != d % NUM_PLACEMENTS)) continue;
                st = run_combo(&t, comm, rank, &b, (ccl_dtype_t)d, matrix_big_count((ccl_dtype_t)d), root,
                               (enum placement)pl, 0);
                stats.combos++;
            }
    matrix_summary(ctx, rank, &stats, &t);
    bufs_free(&b);
    return t.fails;
}

START_TEST(broadcast_matrix) { matrix_run(_i, body_matrix, "broadcast", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("broadcast");
    matrix_add_loop(s, "matrix", broadcast_matrix, 600);
    return s;
}

int main(void) { return harness_main(suite()); }
