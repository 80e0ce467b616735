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
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_BROADCAST 4

enum placement { OUT_OF_PLACE = 0, IN_PLACE = 1, NULL_SEND_ON_NONROOT = 2, NUM_PLACEMENTS = 3 };
static const char *const placement_names[] = {"out-of-place", "in-place", "NULL sendbuf on non-roots"};

static ccl_status_t run_combo(struct matrix_body *mb, const struct matrix_combo *c) {
    struct matrix_bufs *b = &mb->b;
    struct harness_tally *t = &mb->t;
    int rank = mb->rank, root = c->root;
    ccl_dtype_t dt = c->dtype;
    enum placement pl = (enum placement)c->placement;
    size_t count = c->count, bytes = count * ccl_dtype_size(dt);
    uint64_t seed = matrix_seed(COLL_BROADCAST, dt, 0, count, pl, root);
    char combo[160];
    snprintf(combo, sizeof combo, "broadcast %s count=%zu root=%d %s misalign=%zu", ccl_dtype_name(dt), count,
             root, placement_names[pl], c->misalign);

    uint8_t *recv = tbuf_arm(&b->recv, bytes, c->misalign);
    uint8_t *send = NULL;
    if (pl == IN_PLACE) {
        send = recv;
    } else if (pl == OUT_OF_PLACE || rank == root) {
        send = tbuf_arm(&b->send, bytes, c->misalign);
    }
    tbuf_poison(&b->recv);
    /* The root's payload; a non-root's sendbuf gets bytes of its own. */
    if (send) ref_bytes(seed, rank == root ? root : 1000 + rank, 0, bytes, send);
    if (send && send != recv) memcpy(b->saved, send, bytes);

    ccl_status_t st = MATRIX_CALL_OK(mb, combo, ccl_broadcast(send, recv, count, dt, root, mb->comm));
    if (st != CCL_OK) return st;
    ref_bytes(seed, root, 0, bytes, b->want);
    matrix_expect_equal(t, combo, "recvbuf", dt, recv, b->want, count);
    matrix_expect_guards(t, combo, "recvbuf", &b->recv);
    if (send && send != recv) {
        matrix_expect_guards(t, combo, "sendbuf", &b->send);
        matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, b->saved, count);
    }
    return CCL_OK;
}

/* Above 4 MiB, roots and placements rotate over the dtypes. */
static int pick_big(int nranks, struct matrix_combo *c) {
    return c->root == (int)c->dtype % nranks && c->placement == (int)c->dtype % NUM_PLACEMENTS;
}

static int body_matrix(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    static const struct matrix_sweep sweep = {
        .run = run_combo, .has_root = 1, .placements = NUM_PLACEMENTS, .big_every_root = 1, .pick_big = pick_big};
    struct matrix_body mb;
    size_t cap = matrix_buf_cap();
    if (matrix_body_begin(&mb, comm, rank, nranks, arg, cap, cap, cap, cap) == 0) matrix_sweep(&mb, &sweep);
    return matrix_body_end(&mb);
}

START_TEST(broadcast_matrix) { matrix_run(_i, body_matrix, "broadcast", NULL); }
END_TEST

/* ---- every broadcast algorithm on the same sweeps ---- */

static const struct matrix_algo algos[] = {
    {"broadcast:ring", NULL, NULL, NULL}, {"broadcast:tree", NULL, NULL, NULL}, {"broadcast:direct", matrix_one_host_configs, NULL, NULL}, {"broadcast:single_copy", matrix_one_host_multi_configs, NULL, NULL},
    /* a chunk of no power of two, so pieces never line up with blocks or slots */
    {"broadcast:ring", NULL, "4160", NULL},
    /* outputs written past the caches from any byte, in the least window */
    {"broadcast:direct", matrix_one_host_multi_configs, NULL, "CCL_STREAM_OUTPUT_BYTES=1 CCL_DIRECT_WINDOW_BYTES=65536"},
    /* the ring's outputs written past the caches from any byte, in a chunk
     * of no power of two (unaligned heads and tails) */
    {"broadcast:ring", NULL, "4160", "CCL_STREAM_OUTPUT_BYTES=1"}};
#define NALGOS ((int)(sizeof algos / sizeof algos[0]))

START_TEST(broadcast_algos) { matrix_run_algo(_i, algos, NALGOS, body_matrix, "broadcast", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("broadcast");
    matrix_add_loop(s, "matrix", broadcast_matrix, 600);
    matrix_add_algo_loop(s, "algos", broadcast_algos, algos, NALGOS, 600);
    return s;
}

int main(void) { return harness_main(suite()); }
