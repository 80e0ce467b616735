/* ctest: TIMEOUT 900 LABELS matrix */
/*
 * The rooted and uneven exchanges, on every matrix configuration:
 * ccl_gather and ccl_scatter (every dtype x count x root, in place on the
 * root and not, NULL for the buffer only the root uses elsewhere), and
 * ccl_all_to_all_v with a different count for every pair (zeros among
 * them) laid out backwards with gaps that must stay untouched. Then the
 * async twins against the blocking results, the exchanges inside a group,
 * and counts the two sides of a pair disagree on.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_GATHER 8
#define COLL_SCATTER 9
#define COLL_A2AV 10
#define IN_PLACE 1

static int pair_id(int src, int dst) { return src * HARNESS_MAX_RANKS + dst; }

/* Calls the blocking call, or (async) its twin and ccl_wait. */
struct call_mode {
    int async;
};

/* ---- gather ---- */

static ccl_status_t gather_combo(struct matrix_body *mb, const struct matrix_combo *c) {
    struct harness_tally *t = &mb->t;
    int rank = mb->rank, n = mb->nranks, root = c->root, async = mb->ctx->user != NULL;
    ccl_dtype_t dt = c->dtype;
    size_t count = c->count, block = count * ccl_dtype_size(dt);
    int in_place = c->placement == IN_PLACE && rank == root;
    uint64_t seed = matrix_seed(COLL_GATHER, dt, 0, count, c->placement, root);
    char combo[160];
    snprintf(combo, sizeof combo, "gather%s %s count=%zu root=%d %s misalign=%zu", async ? "_async" : "",
             ccl_dtype_name(dt), count, root, c->placement == IN_PLACE ? "in-place" : "out-of-place", c->misalign);
    uint8_t *recv = tbuf_arm(&mb->b.recv, block * (size_t)n, c->misalign);
    tbuf_poison(&mb->b.recv);
    uint8_t *send = in_place ? recv + (size_t)rank * block : tbuf_arm(&mb->b.send, block, c->misalign);
    ref_bytes(seed, rank, 0, block, send);
    void *rb = rank == root ? recv : NULL; /* only the root's is used */
    ccl_status_t st;
    if (async) {
        ccl_request_t *req = NULL;
        st = ccl_gather_async(send, rb, count, dt, root, mb->comm, &req);
        if (st == CCL_OK) st = ccl_wait(req);
    } else {
        st = ccl_gather(send, rb, count, dt, root, mb->comm);
    }
    if (MATRIX_CALL_OK(mb, combo, st) != CCL_OK) return st;
    uint8_t *want = mb->b.want;
    if (rank == root) {
        for (int p = 0; p < n; p++) {
            char what[64];
            ref_bytes(seed, p, 0, block, want);
            snprintf(what, sizeof what, "recvbuf block from rank %d", p);
            if (!matrix_expect_equal(t, combo, what, dt, recv + (size_t)p * block, want, count)) break;
        }
    } else {
        EXPECT(t, tbuf_is_poison(&mb->b.recv), "%s: a non-root rank's recvbuf was written", combo);
    }
    if (!in_place) {
        ref_bytes(seed, rank, 0, block, want);
        matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, want, count);
        matrix_expect_guards(t, combo, "sendbuf", &mb->b.send);
    }
    matrix_expect_guards(t, combo, "recvbuf", &mb->b.recv);
    return CCL_OK;
}

/* ---- scatter ---- */

static ccl_status_t scatter_combo(struct matrix_body *mb, const struct matrix_combo *c) {
    struct harness_tally *t = &mb->t;
    int rank = mb->rank, n = mb->nranks, root = c->root, async = mb->ctx->user != NULL;
    ccl_dtype_t dt = c->dtype;
    size_t count = c->count, block = count * ccl_dtype_size(dt);
    int in_place = c->placement == IN_PLACE && rank == root;
    uint64_t seed = matrix_seed(COLL_SCATTER, dt, 0, count, c->placement, root);
    char combo[160];
    snprintf(combo, sizeof combo, "scatter%s %s count=%zu root=%d %s misalign=%zu", async ? "_async" : "",
             ccl_dtype_name(dt), count, root, c->placement == IN_PLACE ? "in-place" : "out-of-place", c->misalign);
    uint8_t *send = tbuf_arm(&mb->b.send, block * (size_t)n, c->misalign);
    if (rank == root)
        for (int p = 0; p < n; p++) ref_bytes(seed, p, 0, block, send + (size_t)p * block);
    uint8_t *recv = in_place ? send + (size_t)rank * block : tbuf_arm(&mb->b.recv, block, c->misalign);
    if (!in_place) tbuf_poison(&mb->b.recv);
    const void *sb = rank == root ? send : NULL;
    ccl_status_t st;
    if (async) {
        ccl_request_t *req = NULL;
        st = ccl_scatter_async(sb, recv, count, dt, root, mb->comm, &req);
        if (st == CCL_OK) st = ccl_wait(req);
    } else {
        st = ccl_scatter(sb, recv, count, dt, root, mb->comm);
    }
    if (MATRIX_CALL_OK(mb, combo, st) != CCL_OK) return st;
    uint8_t *want = mb->b.want;
    ref_bytes(seed, rank, 0, block, want);
    matrix_expect_equal(t, combo, "recvbuf", dt, recv, want, count);
    if (rank == root)
        for (int p = 0; p < n; p++) {
            ref_bytes(seed, p, 0, block, want);
            if (!matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send + (size_t)p * block, want,
                                     count))
                break;
        }
    matrix_expect_guards(t, combo, "sendbuf", &mb->b.send);
    if (!in_place) matrix_expect_guards(t, combo, "recvbuf", &mb->b.recv);
    return CCL_OK;
}

/* ---- uneven all-to-all ---- */

/* What rank `from` sends rank `to` for the sweep's count c: c/2, c or
 * c/3 (+1 to itself) by pair, so neighbours differ and small c gives
 * zeros. */
static size_t a2av_count(size_t c, int from, int to) {
    switch ((from + 2 * to) % 3) {
    case 0: return c / 2;
    case 1: return c;
    default: return c / 3 + (from == to);
    }
}

/* Blocks laid out last peer first, one element apart (the gaps must
 * survive). Returns the elements the layout spans. */
static size_t a2av_layout(int n, const size_t *counts, size_t *displs) {
    size_t at = 0;
    for (int p = n - 1; p >= 0; p--) {
        displs[p] = at;
        at += counts[p] + 1;
    }
    return at;
}

static ccl_status_t a2av_combo(struct matrix_body *mb, const struct matrix_combo *c) {
    struct harness_tally *t = &mb->t;
    int rank = mb->rank, n = mb->nranks, async = mb->ctx->user != NULL;
    ccl_dtype_t dt = c->dtype;
    size_t es = ccl_dtype_size(dt);
    size_t sc[HARNESS_MAX_RANKS], sd[HARNESS_MAX_RANKS], rc[HARNESS_MAX_RANKS], rd[HARNESS_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        sc[p] = a2av_count(c->count, rank, p);
        rc[p] = a2av_count(c->count, p, rank);
    }
    size_t sspan = a2av_layout(n, sc, sd), rspan = a2av_layout(n, rc, rd);
    uint64_t seed = matrix_seed(COLL_A2AV, dt, 0, c->count, 0, 0);
    char combo[160];
    snprintf(combo, sizeof combo, "all_to_all_v%s %s count=%zu (per pair: c/2, c, c/3) misalign=%zu",
             async ? "_async" : "", ccl_dtype_name(dt), c->count, c->misalign);
    uint8_t *send = tbuf_arm(&mb->b.send, sspan * es, c->misalign);
    uint8_t *recv = tbuf_arm(&mb->b.recv, rspan * es, c->misalign);
    tbuf_poison(&mb->b.recv);
    for (int p = 0; p < n; p++) ref_bytes(seed, pair_id(rank, p), 0, sc[p] * es, send + sd[p] * es);
    ccl_status_t st;
    if (async) {
        ccl_request_t *req = NULL;
        st = ccl_all_to_all_v_async(send, sc, sd, recv, rc, rd, dt, mb->comm, &req);
        if (st == CCL_OK) st = ccl_wait(req);
    } else {
        st = ccl_all_to_all_v(send, sc, sd, recv, rc, rd, dt, mb->comm);
    }
    if (MATRIX_CALL_OK(mb, combo, st) != CCL_OK) return st;
    uint8_t *want = mb->b.want;
    for (int p = 0; p < n; p++) {
        char what[64];
        ref_bytes(seed, pair_id(p, rank), 0, rc[p] * es, want);
        snprintf(what, sizeof what, "recvbuf block from rank %d", p);
        if (!matrix_expect_equal(t, combo, what, dt, recv + rd[p] * es, want, rc[p])) break;
        const uint8_t *gap = recv + (rd[p] + rc[p]) * es;
        int untouched = 1;
        for (size_t b = 0; b < es; b++) untouched &= gap[b] == POISON_BYTE;
        EXPECT(t, untouched, "%s: the gap after rank %d's block was written", combo, p);
    }
    for (int p = 0; p < n; p++) {
        ref_bytes(seed, pair_id(rank, p), 0, sc[p] * es, want);
        if (!matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send + sd[p] * es, want, sc[p]))
            break;
    }
    matrix_expect_guards(t, combo, "sendbuf", &mb->b.send);
    matrix_expect_guards(t, combo, "recvbuf", &mb->b.recv);
    return CCL_OK;
}

/* ---- bodies ---- */

static int pick_big(int nranks, struct matrix_combo *c) {
    return c->root == (int)c->dtype % nranks && c->placement == (int)c->dtype % 2;
}

static int run_sweep(ccl_comm_t *comm, int rank, int nranks, void *arg, matrix_combo_fn fn, int rooted) {
    const struct matrix_sweep sweep = {.run = fn,
                                       .has_root = rooted,
                                       .placements = rooted ? 2 : 1,
                                       .blocked = 1,
                                       .big_every_root = rooted,
                                       .pick_big = rooted ? pick_big : NULL};
    struct matrix_body mb;
    /* Room for n blocks plus the uneven layout's gaps. */
    size_t block_cap = matrix_block_buf_cap(nranks), cap = (block_cap + 64) * (size_t)nranks;
    if (matrix_body_begin(&mb, comm, rank, nranks, arg, cap, cap, block_cap + 64, 0) == 0) matrix_sweep(&mb, &sweep);
    return matrix_body_end(&mb);
}

static int body_gather(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    return run_sweep(comm, rank, nranks, arg, gather_combo, 1);
}
static int body_scatter(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    return run_sweep(comm, rank, nranks, arg, scatter_combo, 1);
}
static int body_a2av(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    return run_sweep(comm, rank, nranks, arg, a2av_combo, 0);
}

static struct call_mode async_mode = {1};

START_TEST(gather_matrix) { matrix_run(_i, body_gather, "gather", NULL); }
END_TEST
START_TEST(scatter_matrix) { matrix_run(_i, body_scatter, "scatter", NULL); }
END_TEST
START_TEST(all_to_all_v_matrix) { matrix_run(_i, body_a2av, "all_to_all_v", NULL); }
END_TEST
/* The async twins on the short list of configurations. */
START_TEST(gather_async) { matrix_run_short(_i, body_gather, "gather_async", &async_mode); }
END_TEST
START_TEST(scatter_async) { matrix_run_short(_i, body_scatter, "scatter_async", &async_mode); }
END_TEST
START_TEST(all_to_all_v_async) { matrix_run_short(_i, body_a2av, "all_to_all_v_async", &async_mode); }
END_TEST

/* ---- inside a group, and disagreeing counts ---- */

#define GROUP_COUNT 1001

/* A gather to rank 0 and a scatter from the last rank in one group, with
 * an async all_to_all_v: all three done at the group's end. */
static int body_group(ccl_comm_t *comm, int rank, int n, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    size_t k = GROUP_COUNT;
    int32_t *mine = malloc(k * 4), *all = malloc(k * 4 * (size_t)n), *part = malloc(k * 4);
    int32_t *a2a_in = malloc(k * 4 * (size_t)n), *a2a_out = malloc(k * 4 * (size_t)n);
    size_t counts[HARNESS_MAX_RANKS], displs[HARNESS_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        counts[p] = k;
        displs[p] = (size_t)p * k;
    }
    for (size_t i = 0; i < k; i++) mine[i] = rank * 100000 + (int32_t)i;
    for (size_t i = 0; i < k * (size_t)n; i++) {
        all[i] = rank == n - 1 ? (int32_t)i : -1;
        a2a_in[i] = rank * 1000000 + (int32_t)i;
    }
    int32_t *gathered = malloc(k * 4 * (size_t)n);
    ccl_request_t *req = NULL;
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_gather(mine, gathered, k, CCL_INT32, 0, comm));
    EXPECT_OK(&t, ccl_scatter(all, part, k, CCL_INT32, n - 1, comm));
    EXPECT_OK(&t, ccl_all_to_all_v_async(a2a_in, counts, displs, a2a_out, counts, displs, CCL_INT32, comm, &req));
    EXPECT_OK(&t, ccl_group_end());
    int done = 0;
    EXPECT(&t, req && ccl_test(req, &done) == CCL_OK && done, "the group's async all_to_all_v is not done at its end");
    if (req) EXPECT_OK(&t, ccl_wait(req));
    for (size_t i = 0; i < k; i++) {
        EXPECT(&t, part[i] == rank * (int32_t)k + (int32_t)i, "scatter in a group: part[%zu] = %d", i, part[i]);
        if (part[i] != rank * (int32_t)k + (int32_t)i) break;
    }
    for (int p = 0; p < n && rank == 0; p++)
        EXPECT(&t, gathered[(size_t)p * k + 7] == p * 100000 + 7, "gather in a group: block %d holds %d", p,
               gathered[(size_t)p * k + 7]);
    for (int p = 0; p < n; p++)
        EXPECT(&t, a2a_out[(size_t)p * k + 5] == p * 1000000 + rank * (int32_t)k + 5,
               "all_to_all_v in a group: block from %d holds %d", p, a2a_out[(size_t)p * k + 5]);
    free(mine), free(all), free(part), free(a2a_in), free(a2a_out), free(gathered);
    return t.fails;
}

START_TEST(in_a_group) { matrix_run_short(_i, body_group, "group", NULL); }
END_TEST

/* Rank 1 expects one element more from rank 0 than rank 0 sends: rank 1's
 * call fails naming both sizes; rank 0's call or its next barrier fails
 * too (the communicator is failed); nobody hangs. */
static int body_disagree(ccl_comm_t *comm, int rank, int n, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    size_t sc[HARNESS_MAX_RANKS], sd[HARNESS_MAX_RANKS], rc[HARNESS_MAX_RANKS], rd[HARNESS_MAX_RANKS];
    for (int p = 0; p < n; p++) {
        sc[p] = rc[p] = 10;
        sd[p] = rd[p] = (size_t)p * 16;
    }
    if (rank == 1) rc[0] = 11;
    float in[HARNESS_MAX_RANKS * 16] = {0}, out[HARNESS_MAX_RANKS * 16];
    ccl_status_t st = ccl_all_to_all_v(in, sc, sd, out, rc, rd, CCL_FLOAT32, comm);
    if (rank == 1) {
        EXPECT(&t, st < 0, "rank 1 expected 44 bytes from rank 0, got 40, and its call returned %s",
               ccl_status_string(st));
        const char *e = ccl_comm_last_error(comm);
        EXPECT(&t, strstr(e, "40") && strstr(e, "44"), "rank 1's error does not name both sizes: \"%s\"", e);
        fprintf(stderr, "[exchange] disagreeing counts: rank 1: %s: \"%s\"\n", ccl_status_string(st), e);
    }
    if (st == CCL_OK) st = ccl_barrier(comm);
    EXPECT(&t, st < 0, "rank %d's all_to_all_v and the barrier after it both succeeded next to a failed rank", rank);
    return t.fails;
}

START_TEST(counts_disagree) {
    struct harness_run run = {.nranks = 3,
                              .transport = _i ? "tcp" : "shm",
                              .body = body_disagree,
                              .ccl_timeout = "10",
                              .deadline_s = 60,
                              .lenient_destroy = 1};
    HARNESS_RUN_OK(&run);
}
END_TEST

/* Bad arguments: a clear error, nothing sent, the communicator usable. */
static int body_bad_args(ccl_comm_t *comm, int rank, int n, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    size_t c[HARNESS_MAX_RANKS] = {0}, d[HARNESS_MAX_RANKS] = {0};
    float x[4] = {0}, y[4 * HARNESS_MAX_RANKS];
    ccl_request_t *req;
    /* One call at a time: each must fail alone, naming what is wrong. */
#define BAD(call, words)                                                                                        \
    do {                                                                                                        \
        ccl_status_t st_ = (call);                                                                              \
        EXPECT(&t, st_ == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(comm), words),                \
               "%s returned %s: \"%s\" (expected invalid argument naming \"%s\")", #call,                       \
               ccl_status_string(st_), ccl_comm_last_error(comm), words);                                        \
    } while (0)
    BAD(ccl_gather(x, y, 1, CCL_FLOAT32, n, comm), "root");
    BAD(ccl_gather(NULL, y, 1, CCL_FLOAT32, 0, comm), "sendbuf is NULL");
    BAD(ccl_scatter(x, NULL, 1, CCL_FLOAT32, 0, comm), "recvbuf is NULL");
    BAD(ccl_scatter(x, y, 1, (ccl_dtype_t)99, 0, comm), "dtype");
    BAD(ccl_gather_async(x, y, 1, CCL_FLOAT32, 0, comm, NULL), "req is NULL");
    BAD(ccl_all_to_all_v(x, NULL, d, y, c, d, CCL_FLOAT32, comm), "sendcounts");
    BAD(ccl_all_to_all_v_async(x, c, d, y, c, NULL, CCL_FLOAT32, comm, &req), "recvcounts or recvdispls");
    c[0] = 1;
    BAD(ccl_all_to_all_v(x, c, d, x, c, d, CCL_FLOAT32, comm), "in-place");
    c[0] = 0;
#undef BAD
    /* Moving nothing at all, in place is fine. */
    EXPECT_OK(&t, ccl_all_to_all_v(x, c, d, x, c, d, CCL_FLOAT32, comm));
    /* The communicator still works. */
    for (int p = 0; p < n; p++) {
        c[p] = 1;
        d[p] = (size_t)p;
    }
    for (int i = 0; i < 4; i++) x[i] = (float)rank;
    EXPECT_OK(&t, ccl_all_to_all_v(x, c, d, y, c, d, CCL_FLOAT32, comm));
    for (int p = 0; p < n; p++) EXPECT(&t, y[p] == (float)p, "after the bad calls: y[%d] = %g", p, y[p]);
    return t.fails;
}

START_TEST(bad_arguments) {
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_bad_args};
    HARNESS_RUN_OK(&run);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("scatter");
    matrix_add_loop(s, "gather", gather_matrix, 600);
    matrix_add_loop(s, "scatter", scatter_matrix, 600);
    matrix_add_loop(s, "all_to_all_v", all_to_all_v_matrix, 600);
    matrix_add_short_loop(s, "gather_async", gather_async, 300);
    matrix_add_short_loop(s, "scatter_async", scatter_async, 300);
    matrix_add_short_loop(s, "all_to_all_v_async", all_to_all_v_async, 300);
    matrix_add_short_loop(s, "in_a_group", in_a_group, 120);
    TCase *tc = tcase_create("counts_disagree");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, counts_disagree, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("bad_arguments");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return harness_main(suite()); }
