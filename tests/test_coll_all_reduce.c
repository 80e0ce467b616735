/* ctest: TIMEOUT 900 LABELS matrix */
/*
 * ccl_all_reduce, bit-exact on every rank: every dtype x op x count x
 * placement on every matrix configuration; then a determinism check with
 * inexact random floats (test_coll_special.c has NaN, inf, signed zeros).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"
#include "util.h"

#define COLL_ALL_REDUCE 1

/* One call and every check on its outcome. Returns the call's status. */
static ccl_status_t run_combo(struct matrix_body *mb, const struct matrix_combo *c) {
    struct matrix_bufs *b = &mb->b;
    struct harness_tally *t = &mb->t;
    ccl_dtype_t dt = c->dtype;
    ccl_op_t op = c->op;
    int in_place = c->placement;
    size_t count = c->count, bytes = count * ccl_dtype_size(dt);
    struct ref_case rc = {dt, op, mb->nranks, matrix_seed(COLL_ALL_REDUCE, dt, op, count, in_place, 0)};
    char combo[160];
    snprintf(combo, sizeof combo, "all_reduce %s %s count=%zu %s misalign=%zu", ccl_dtype_name(dt),
             ccl_op_name(op), count, in_place ? "in-place" : "out-of-place", c->misalign);

    void *send = tbuf_arm(&b->send, bytes, c->misalign);
    ref_reduce_input(&rc, mb->rank, 0, count, send);
    void *recv = send;
    if (!in_place) {
        recv = tbuf_arm(&b->recv, bytes, c->misalign);
        tbuf_poison(&b->recv);
        memcpy(b->saved, send, bytes);
    }
    ccl_status_t st = MATRIX_CALL_OK(mb, combo, ccl_all_reduce(send, recv, count, dt, op, mb->comm));
    if (st != CCL_OK) return st;
    ref_reduce_expected(&rc, 0, count, b->want);
    matrix_expect_equal(t, combo, "recvbuf", dt, recv, b->want, count);
    matrix_expect_guards(t, combo, "sendbuf", &b->send);
    if (!in_place) {
        matrix_expect_guards(t, combo, "recvbuf", &b->recv);
        matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, b->saved, count);
    }
    return CCL_OK;
}

/* Above 4 MiB, ops and placements rotate over the dtypes. */
static int pick_big(int nranks, struct matrix_combo *c) {
    (void)nranks;
    return c->op == matrix_big_op(c->dtype) && c->placement == matrix_big_in_place(c->dtype);
}

static int body_matrix(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    static const struct matrix_sweep sweep = {.run = run_combo, .has_op = 1, .placements = 2, .pick_big = pick_big};
    struct matrix_body mb;
    size_t cap = matrix_buf_cap();
    if (matrix_body_begin(&mb, comm, rank, nranks, arg, cap, cap, cap, cap) == 0) matrix_sweep(&mb, &sweep);
    return matrix_body_end(&mb);
}

START_TEST(all_reduce_matrix) { matrix_run(_i, body_matrix, "all_reduce", NULL); }
END_TEST

/* ---- determinism: inexact inputs, same bits everywhere and every time ---- */

#define DET_COUNT ((size_t)1 << 20 | 5)

static uint64_t checksum(const void *buf, size_t bytes) {
    uint64_t h = 0x811c9dc5u;
    const uint8_t *p = buf;
    for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Every rank's checksum equal, through the library (the matrix already
 * showed that all_gather moves bytes exactly). */
static void expect_same_on_all_ranks(struct harness_tally *t, ccl_comm_t *comm, int nranks, const char *what,
                                     uint64_t mine) {
    uint64_t all[HARNESS_MAX_RANKS];
    ccl_status_t st = EXPECT_OK(t, ccl_all_gather(&mine, all, 1, CCL_UINT64, comm));
    if (st != CCL_OK) return;
    for (int r = 0; r < nranks; r++)
        EXPECT(t, all[r] == mine, "%s: rank %d's result differs from this rank's (checksum %016llx vs %016llx)",
               what, r, (unsigned long long)all[r], (unsigned long long)mine);
}

/* Random floats over many exponents, so that sums round. */
static double random_value(int rank, size_t i) {
    uint64_t h = ref_mix(0xdede, (uint64_t)rank, i);
    double unit = (double)(h >> 11) * 0x1p-53 * 2.0 - 1.0; /* [-1, 1) */
    return ldexp(unit, (int)((h >> 3) % 16) - 8);
}

static void random_floats(ccl_dtype_t dt, int rank, void *buf, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (dt == CCL_FLOAT16) ((uint16_t *)buf)[i] = ref_float_to_half((float)random_value(rank, i));
        else ((float *)buf)[i] = (float)random_value(rank, i);
    }
}

static int body_determinism(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    struct matrix_stats stats = {0, harness_now()};
    const ccl_dtype_t dts[] = {CCL_FLOAT32, CCL_FLOAT16};
    const ccl_op_t ops[] = {CCL_SUM, CCL_AVG, CCL_PROD};
    size_t cap = DET_COUNT * 4;
    uint8_t *in = malloc(cap), *first = malloc(cap), *second = malloc(cap);
    if (!in || !first || !second) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (size_t di = 0; di < 2; di++)
        for (size_t oi = 0; oi < 3; oi++) {
            ccl_dtype_t dt = dts[di];
            size_t bytes = DET_COUNT * ccl_dtype_size(dt);
            char what[96];
            snprintf(what, sizeof what, "determinism %s %s", ccl_dtype_name(dt), ccl_op_name(ops[oi]));
            random_floats(dt, rank, in, DET_COUNT);
            if (EXPECT_OK(&t, ccl_all_reduce(in, first, DET_COUNT, dt, ops[oi], comm)) != CCL_OK) goto out;
            if (EXPECT_OK(&t, ccl_all_reduce(in, second, DET_COUNT, dt, ops[oi], comm)) != CCL_OK) goto out;
            EXPECT(&t, memcmp(first, second, bytes) == 0, "%s: two identical calls gave different bits", what);
            expect_same_on_all_ranks(&t, comm, nranks, what, checksum(first, bytes));
            if (dt == CCL_FLOAT32 && ops[oi] == CCL_SUM) {
                /* Not exact, but close: within N ulps of the magnitudes. */
                float *got = (float *)first;
                size_t bad = 0;
                for (size_t i = 0; i < DET_COUNT; i += 97) {
                    double exact = 0, mag = 0;
                    for (int r = 0; r < nranks; r++) {
                        double v = (float)random_value(r, i);
                        exact += v;
                        mag += fabs(v);
                    }
                    bad += fabs((double)got[i] - exact) > mag * nranks * 0x1p-23;
                }
                EXPECT(&t, bad == 0, "%s: %zu sampled sums far from the exact sum", what, bad);
            }
            stats.combos++;
        }
out:
    matrix_summary(ctx, rank, &stats, &t);
    free(in);
    free(first);
    free(second);
    return t.fails;
}

START_TEST(all_reduce_determinism) { matrix_run(_i, body_determinism, "all_reduce determinism", NULL); }
END_TEST

/* ---- every all-reduce algorithm on the same sweeps ---- */

/* hier: 2 hosts x 4, 5 hosts x 1, and one host (3 shm, 4 tcp, 1 rank) */
static const int hier_configs[] = {5, 7, 1, 0, 6, -1};
static const struct matrix_algo algos[] = {
    {"allreduce:ring", NULL, NULL, NULL}, {"allreduce:tree", NULL, NULL, NULL}, {"allreduce:rd", NULL, NULL, NULL},
    {"allreduce:rhd", NULL, NULL, NULL},
    {"allreduce:direct", matrix_one_host_configs, NULL, NULL}, {"allreduce:single_copy", matrix_one_host_multi_configs, NULL, NULL}, {"allreduce:hier", hier_configs, NULL, NULL},
    /* a chunk of no power of two, so pieces never line up with blocks or
     * slots (nor rhd's segments, 252 such chunks, with a power of two) */
    {"allreduce:tree", NULL, "4160", NULL}, {"allreduce:ring", NULL, "4160", NULL}, {"allreduce:rhd", NULL, "4160", NULL},
    /* every output written past the caches from any byte (unaligned heads
     * and tails), in the least window (many rounds) */
    {"allreduce:direct", matrix_one_host_multi_configs, NULL, "CCL_STREAM_OUTPUT_BYTES=1 CCL_DIRECT_WINDOW_BYTES=65536"},
    /* the ring's outputs written past the caches from any byte, in a chunk
     * of no power of two (unaligned heads and tails) */
    {"allreduce:ring", NULL, "4160", "CCL_STREAM_OUTPUT_BYTES=1"}};
#define NALGOS ((int)(sizeof algos / sizeof algos[0]))

START_TEST(all_reduce_algos) { matrix_run_algo(_i, algos, NALGOS, body_matrix, "all_reduce", NULL); }
END_TEST

START_TEST(all_reduce_algos_determinism) {
    matrix_run_algo(_i, algos, NALGOS, body_determinism, "all_reduce determinism", NULL);
}
END_TEST

/* ---- tiny all-reduces back to back (the direct path's lines) ----
 * Calls of every size around the lines' limit follow each other with no
 * barrier, one rank dawdling now and then so the others run ahead as far
 * as they can (one call: a slot is written again two calls later), every
 * result bit-exact against the reference, each call with inputs of its
 * own. Kinds of memory and ops rotate with the calls. */

#define TINY_CALLS 600
static const size_t tiny_bytes[] = {4, 8, 24, 32, 40, 56, 64, 120, 512, 1024, 2016, 2024, 4096, 0};

static int body_tiny_sequence(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    static const ccl_dtype_t dts[] = {CCL_FLOAT32, CCL_INT8, CCL_FLOAT64, CCL_BFLOAT16, CCL_UINT64, CCL_FLOAT16,
                                      CCL_INT32};
    static const ccl_op_t ops[] = {CCL_SUM, CCL_MAX, CCL_PROD, CCL_AVG, CCL_MIN};
    const size_t nb = sizeof tiny_bytes / sizeof tiny_bytes[0], nd = sizeof dts / sizeof dts[0];
    struct tbuf in, out;
    if (tbuf_alloc(&in, 4096) || tbuf_alloc(&out, 4096)) return 1;
    unsigned char want[4096];
    for (int i = 0; i < TINY_CALLS && t.fails == 0; i++) {
        ccl_dtype_t dt = dts[(size_t)i % nd];
        ccl_op_t op = ops[(size_t)(i / 3) % (sizeof ops / sizeof ops[0])];
        if (!ref_op_applies(dt, op)) op = CCL_SUM;
        size_t es = ccl_dtype_size(dt), count = tiny_bytes[(size_t)i % nb] / es;
        int in_place = i % 4 == 1;
        struct ref_case rc = {dt, op, nranks, ref_mix(0x7153, (uint64_t)i, (uint64_t)nranks)};
        void *x = tbuf_arm(&in, count * es, es * (size_t)(i % 3)), *y = x; /* misaligned by elements, as the matrix */
        ref_reduce_input(&rc, rank, 0, count, x);
        if (!in_place) {
            y = tbuf_arm(&out, count * es, 0);
            tbuf_poison(&out);
        }
        if (rank == 1 && i % 7 == 3) usleep((useconds_t)(i % 5) * 40);
        ccl_status_t st = ccl_all_reduce(x, y, count, dt, op, comm);
        EXPECT(&t, st == CCL_OK, "call %d (%zu x %s, %s): %s: %s", i, count, ccl_dtype_name(dt), ccl_op_name(op),
               ccl_status_string(st), ccl_comm_last_error(comm));
        if (st != CCL_OK) break;
        ref_reduce_expected(&rc, 0, count, want);
        size_t bad = ref_first_diff(dt, y, want, count);
        EXPECT(&t, bad >= count, "call %d (%zu x %s, %s, %s): element %zu differs from the reference", i, count,
               ccl_dtype_name(dt), ccl_op_name(op), in_place ? "in place" : "out of place", bad);
        EXPECT(&t, tbuf_guards_ok(&in) && (in_place || tbuf_guards_ok(&out)), "call %d wrote outside its buffers", i);
    }
    tbuf_free(&in);
    tbuf_free(&out);
    return t.fails;
}

/* shm: 2, 3 and 5 ranks with the direct algorithm forced, and 3 with the
 * planner's choice; tcp (no windows, so no lines): 3 ranks. */
static const struct {
    int nranks;
    const char *transport, *env;
} tiny_cases[] = {
    {2, "shm", "CCL_ALGO=allreduce:direct"}, {3, "shm", "CCL_ALGO=allreduce:direct"},
    {5, "shm", "CCL_ALGO=allreduce:direct"}, {3, "shm", NULL}, {3, "tcp", NULL},
};

START_TEST(tiny_sequence) {
    struct harness_run run = {
        .nranks = tiny_cases[_i].nranks,
        .transport = tiny_cases[_i].transport,
        .env = tiny_cases[_i].env,
        .body = body_tiny_sequence,
        .deadline_s = 120,
    };
    HARNESS_RUN_OK(&run);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("all_reduce");
    matrix_add_loop(s, "matrix", all_reduce_matrix, 600);
    matrix_add_loop(s, "determinism", all_reduce_determinism, 300);
    matrix_add_algo_loop(s, "algos", all_reduce_algos, algos, NALGOS, 600);
    matrix_add_algo_loop(s, "algos_determinism", all_reduce_algos_determinism, algos, NALGOS, 300);
    util_add_loop_case(s, "tiny_sequence", tiny_sequence, (int)(sizeof tiny_cases / sizeof tiny_cases[0]), 150);
    return s;
}

int main(void) { return harness_main(suite()); }
