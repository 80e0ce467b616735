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

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define COLL_ALL_REDUCE 1

struct bufs {
    struct tbuf send, recv;
    uint8_t *want, *saved;
};

static int bufs_alloc(struct bufs *b, size_t cap) {
    memset(b, 0, sizeof *b);
    if (tbuf_alloc(&b->send, cap) || tbuf_alloc(&b->recv, cap)) return -1;
    b->want = malloc(cap ? cap : 1);
    b->saved = malloc(cap ? cap : 1);
    return b->want && b->saved ? 0 : -1;
}

static void bufs_free(struct bufs *b) {
    tbuf_free(&b->send);
    tbuf_free(&b->recv);
    free(b->want);
    free(b->saved);
}

/* One call and every check on its outcome. Returns the call's status. */
static ccl_status_t run_combo(struct harness_tally *t, ccl_comm_t *comm, int rank, int nranks, struct bufs *b,
                              ccl_dtype_t dt, ccl_op_t op, size_t count, int in_place, size_t misalign) {
    size_t bytes = count * ccl_dtype_size(dt);
    struct ref_case c = {dt, op, nranks, matrix_seed(COLL_ALL_REDUCE, dt, op, count, in_place, 0)};
    char combo[160];
    snprintf(combo, sizeof combo, "all_reduce %s %s count=%zu %s misalign=%zu", ccl_dtype_name(dt),
             ccl_op_name(op), count, in_place ? "in-place" : "out-of-place", misalign);

    void *send = tbuf_arm(&b->send, bytes, misalign);
    ref_reduce_input(&c, rank, 0, count, send);
    void *recv = send;
    if (!in_place) {
        recv = tbuf_arm(&b->recv, bytes, misalign);
        tbuf_poison(&b->recv);
        memcpy(b->saved, send, bytes);
    }
    ccl_status_t st = ccl_all_reduce(send, recv, count, dt, op, comm);
    if (st != CCL_OK) {
        harness_fail(t, __FILE__, __LINE__, "%s returned %s: %s", combo, ccl_status_string(st),
                     ccl_comm_last_error(comm));
        return st;
    }
    ref_reduce_expected(&c, 0, count, b->want);
    matrix_expect_equal(t, combo, "recvbuf", dt, recv, b->want, count);
    matrix_expect_guards(t, combo, "sendbuf", &b->send);
    if (!in_place) {
        matrix_expect_guards(t, combo, "recvbuf", &b->recv);
        matrix_expect_equal(t, combo, "sendbuf (must stay unchanged)", dt, send, b->saved, count);
    }
    return CCL_OK;
}

static int body_matrix(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    struct matrix_stats stats = {0, harness_now()};
    size_t cap = 0;
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        size_t bytes = matrix_big_count((ccl_dtype_t)d) * ccl_dtype_size((ccl_dtype_t)d);
        if (bytes > cap) cap = bytes;
    }
    size_t small_cap = 99991 * 8 + 64;
    if (small_cap > cap) cap = small_cap;
    struct bufs b;
    if (bufs_alloc(&b, cap) != 0) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    size_t counts[8];
    int ncounts = matrix_small_counts(nranks, counts);
    ccl_status_t st = CCL_OK;
    /* Small counts: the whole cross product. */
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++)
        for (int op = 0; op < CCL_NUM_OPS && st == CCL_OK; op++)
            for (int ci = 0; ci < ncounts && st == CCL_OK; ci++)
                for (int ip = 0; ip < 2 && st == CCL_OK; ip++) {
                    size_t es = ccl_dtype_size((ccl_dtype_t)d);
                    size_t misalign = es * (size_t)((d + op + ci) % 3);
                    st = run_combo(&t, comm, rank, nranks, &b, (ccl_dtype_t)d, (ccl_op_t)op, counts[ci], ip,
                                   misalign);
                    stats.combos++;
                }
    /* Above 4 MiB: each dtype once, ops and placements rotating (or all). */
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++) {
        size_t count = matrix_big_count((ccl_dtype_t)d);
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

static Suite *suite(void) {
    Suite *s = suite_create("all_reduce");
    matrix_add_loop(s, "matrix", all_reduce_matrix, 600);
    matrix_add_loop(s, "determinism", all_reduce_determinism, 300);
    return s;
}

int main(void) { return harness_main(suite()); }
