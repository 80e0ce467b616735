/* ctest: TIMEOUT 600 LABELS matrix */
/*
 * Premultiplied sums (ccl_op_create_premul_sum) through all_reduce,
 * reduce_scatter and reduce on every dtype, each rank with a scalar of its
 * own (negative ones too), in place and out, over every matrix shape; and
 * the op's life: a call keeps the scalar it was issued with when the op is
 * destroyed before the call completes, a destroyed op or one of another
 * dtype is refused, and under CCL_CHECK=1 a rank that passed one where
 * the others passed CCL_SUM is named. Bit-exact: float inputs are quarters no larger
 * than 2 and the scalars 0.5, -1 and 2, so every product and every partial
 * sum is exact in any order (bfloat16's 8 bits included, up to 8 ranks);
 * integer products and sums wrap, which no order changes either.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

static int is_float(ccl_dtype_t dt) { return dt >= CCL_FLOAT16; }

/* Rank r's scalar: 0.5, -1, 2 for floats; for integers odd and even
 * values, negative ones wrapping in the unsigned types. */
static double float_scalar(int r) { return r % 3 == 0 ? 0.5 : r % 3 == 1 ? -1.0 : 2.0; }
static int64_t int_scalar(int r) { return r % 3 == 0 ? 3 : r % 3 == 1 ? -1 : (int64_t)(r + 4); }

static double float_input(uint64_t seed, int r, size_t i) {
    return (double)((int)(ref_mix(seed, (uint64_t)r, i) % 17) - 8) * 0.25;
}
static uint64_t int_input(uint64_t seed, int r, size_t i) { return ref_mix(seed, (uint64_t)r + 100, i); }

static void put_float(ccl_dtype_t dt, void *buf, size_t i, double v) {
    switch (dt) {
    case CCL_FLOAT16: ((uint16_t *)buf)[i] = ref_float_to_half((float)v); break;
    case CCL_BFLOAT16: ((uint16_t *)buf)[i] = ref_float_to_bf16((float)v); break;
    case CCL_FLOAT32: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = v; break;
    }
}

static void put_int(ccl_dtype_t dt, void *buf, size_t i, uint64_t v) {
    switch (ccl_dtype_size(dt)) {
    case 1: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    default: ((uint64_t *)buf)[i] = v; break;
    }
}

/* Rank r's input element i, and the reduced element i. */
static void put_input(ccl_dtype_t dt, void *buf, size_t j, uint64_t seed, int r, size_t i) {
    if (is_float(dt)) put_float(dt, buf, j, float_input(seed, r, i));
    else put_int(dt, buf, j, int_input(seed, r, i));
}

static void put_expected(ccl_dtype_t dt, void *buf, size_t j, uint64_t seed, int nranks, size_t i) {
    if (is_float(dt)) {
        double sum = 0;
        for (int r = 0; r < nranks; r++) sum += float_scalar(r) * float_input(seed, r, i);
        put_float(dt, buf, j, sum);
    } else {
        uint64_t sum = 0; /* mod 2^64, then the low bits: mod 2^bits */
        for (int r = 0; r < nranks; r++) sum += (uint64_t)int_scalar(r) * int_input(seed, r, i);
        put_int(dt, buf, j, sum);
    }
}

static ccl_status_t make_op(ccl_comm_t *comm, ccl_dtype_t dt, int rank, ccl_op_t *op) {
    unsigned char s[8] = {0};
    if (is_float(dt)) put_float(dt, s, 0, float_scalar(rank));
    else put_int(dt, s, 0, (uint64_t)int_scalar(rank));
    return ccl_op_create_premul_sum(comm, dt, s, op);
}

enum which { ALL_REDUCE, REDUCE_SCATTER, REDUCE, NUM_WHICH };
static const char *const which_names[] = {"all_reduce", "reduce_scatter", "reduce"};

/* One call, async, its op destroyed before the wait (the call keeps the
 * scalar it was issued with). */
static ccl_status_t run_one(ccl_comm_t *comm, enum which w, const void *in, void *out, size_t count,
                            ccl_dtype_t dt, int rank, int root) {
    ccl_op_t op;
    ccl_status_t st = make_op(comm, dt, rank, &op);
    if (st != CCL_OK) return st;
    ccl_request_t *req = NULL;
    if (w == ALL_REDUCE) st = ccl_all_reduce_async(in, out, count, dt, op, comm, &req);
    else if (w == REDUCE_SCATTER) st = ccl_reduce_scatter_async(in, out, count, dt, op, comm, &req);
    else st = ccl_reduce_async(in, out, count, dt, op, root, comm, &req);
    ccl_status_t dst = ccl_op_destroy(comm, op);
    if (st == CCL_OK) st = ccl_wait(req);
    return st != CCL_OK ? st : dst;
}

static int body_premul(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    struct matrix_stats stats = {0, harness_now()};
    size_t counts[8];
    int ncounts = matrix_small_counts(nranks, counts);
    size_t cap = counts[ncounts - 1] * (size_t)nranks * 8;
    uint8_t *in = malloc(cap), *out = malloc(cap), *want = malloc(cap);
    if (!in || !out || !want) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (int w = 0; w < NUM_WHICH; w++)
        for (int d = 0; d < CCL_NUM_DTYPES; d++)
            for (int ci = 0; ci < ncounts; ci++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    ccl_dtype_t dt = (ccl_dtype_t)d;
                    size_t count = counts[ci], es = ccl_dtype_size(dt);
                    size_t in_n = w == REDUCE_SCATTER ? count * (size_t)nranks : count;
                    int root = (int)(count % (size_t)nranks), gets = w != REDUCE || rank == root;
                    uint64_t seed = matrix_seed(100 + w, d, 0, count, in_place, root);
                    char combo[160];
                    snprintf(combo, sizeof combo, "%s premul_sum %s count %zu %s%s", which_names[w],
                             ccl_dtype_name(dt), count, in_place ? "in place" : "out of place",
                             w == REDUCE ? (rank == root ? " (root)" : " (not root)") : "");
                    for (size_t i = 0; i < in_n; i++) put_input(dt, in, i, seed, rank, i);
                    memset(out, 0xa5, cap);
                    /* in place: the output inside the input (the rank's block
                     * of a reduce_scatter) */
                    uint8_t *dst = in_place ? in + (w == REDUCE_SCATTER ? (size_t)rank * count * es : 0) : out;
                    uint8_t *before = in_place ? NULL : malloc(in_n * es + 1);
                    if (before) memcpy(before, in, in_n * es);
                    ccl_status_t st = run_one(comm, (enum which)w, in, dst, count, dt, rank, root);
                    if (st != CCL_OK) {
                        harness_fail(&t, __FILE__, __LINE__, "%s returned %s: %s", combo, ccl_status_string(st),
                                     ccl_comm_last_error(comm));
                        free(before);
                        goto out;
                    }
                    size_t first = w == REDUCE_SCATTER ? (size_t)rank * count : 0;
                    for (size_t j = 0; gets && j < count; j++) put_expected(dt, want, j, seed, nranks, first + j);
                    size_t bad = gets ? ref_first_diff(dt, dst, want, count) : SIZE_MAX;
                    if (bad != SIZE_MAX) {
                        char g[64], e[64];
                        ref_format_elem(dt, dst, bad, g, sizeof g);
                        ref_format_elem(dt, want, bad, e, sizeof e);
                        harness_fail(&t, __FILE__, __LINE__, "%s: element %zu is %s, expected %s", combo, bad, g, e);
                    }
                    /* out of place: the input is as it was */
                    if (before) EXPECT(&t, memcmp(before, in, in_n * es) == 0, "%s: changed the input", combo);
                    free(before);
                    stats.combos++;
                }
out:
    matrix_summary(ctx, rank, &stats, &t);
    free(in);
    free(out);
    free(want);
    return t.fails;
}

START_TEST(premul_sum) { matrix_run(_i, body_premul, "premul_sum", NULL); }
END_TEST

/* Refusals, on one rank: each leaves the communicator usable. */
static int body_refused(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    (void)nranks;
    struct harness_tally t = {rank, 0};
    float f[4] = {1, 2, 3, 4}, half = 0.5f;
    int32_t i4[4] = {1, 2, 3, 4};
    ccl_op_t op, other;
    EXPECT_OK(&t, ccl_op_create_premul_sum(comm, CCL_FLOAT32, &half, &op));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_all_reduce(i4, i4, 4, CCL_INT32, op, comm));
    EXPECT(&t, strstr(ccl_comm_last_error(comm), "made for float32, the call is of int32") != NULL,
           "wrong dtype: %s", ccl_comm_last_error(comm));
    EXPECT_OK(&t, ccl_op_destroy(comm, op));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_op_destroy(comm, op));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_all_reduce(f, f, 4, CCL_FLOAT32, op, comm));
    EXPECT(&t, strstr(ccl_comm_last_error(comm), "not a live op") != NULL, "destroyed op: %s",
           ccl_comm_last_error(comm));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_op_destroy(comm, CCL_SUM));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_op_create_premul_sum(comm, CCL_FLOAT32, NULL, &op));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_op_create_premul_sum(comm, CCL_NUM_DTYPES, &half, &op));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_op_create_premul_sum(comm, CCL_FLOAT32, &half, NULL));
    /* the internal value a made op becomes is no op a caller may pass */
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_all_reduce(f, f, 4, CCL_FLOAT32, (ccl_op_t)CCL_NUM_OPS, comm));
    /* slots are reused, and many ops live at once */
    ccl_op_t many[100];
    for (int k = 0; k < 100; k++) EXPECT_OK(&t, ccl_op_create_premul_sum(comm, CCL_FLOAT32, &half, &many[k]));
    for (int k = 0; k < 100; k += 2) EXPECT_OK(&t, ccl_op_destroy(comm, many[k]));
    EXPECT_OK(&t, ccl_op_create_premul_sum(comm, CCL_FLOAT32, &half, &other));
    EXPECT(&t, other == many[0], "a freed slot is not reused: %d after %d", (int)other, (int)many[0]);
    EXPECT(&t, strcmp(ccl_op_name(other), "premul_sum") == 0, "a made op's name: %s", ccl_op_name(other));
    EXPECT_OK(&t, ccl_all_reduce(f, f, 4, CCL_FLOAT32, many[1], comm));
    EXPECT(&t, f[0] == 0.5f && f[3] == 2.0f, "one rank's premul_sum: %g %g", f[0], f[3]);
    return t.fails;
}

START_TEST(premul_refused) {
    struct harness_run run = {.nranks = 1, .body = body_refused, .deadline_s = 60};
    HARNESS_RUN_OK(&run);
}
END_TEST

/* CCL_CHECK=1: a rank that passed a premultiplied sum where the others
 * passed CCL_SUM is named on every rank, nothing moves, and the next call
 * runs. */
static int body_disagree(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float x[5] = {1, 2, 3, 4, 5}, two = 2.0f;
    ccl_op_t op = CCL_SUM;
    if (rank == 0) EXPECT_OK(&t, ccl_op_create_premul_sum(comm, CCL_FLOAT32, &two, &op));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_all_reduce(x, x, 5, CCL_FLOAT32, op, comm));
    EXPECT(&t, strstr(ccl_comm_last_error(comm), "premul_sum") != NULL, "the mismatch names no premul_sum: %s",
           ccl_comm_last_error(comm));
    EXPECT(&t, x[0] == 1 && x[4] == 5, "a refused call wrote its buffer");
    EXPECT_OK(&t, ccl_all_reduce(x, x, 5, CCL_FLOAT32, CCL_SUM, comm));
    EXPECT(&t, x[4] == 5.0f * (float)nranks, "the call after: %g", x[4]);
    if (rank == 0) EXPECT_OK(&t, ccl_op_destroy(comm, op));
    return t.fails;
}

START_TEST(premul_disagree) {
    struct harness_run run = {.nranks = 3, .body = body_disagree, .env = "CCL_CHECK=1", .deadline_s = 60};
    HARNESS_RUN_OK(&run);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("premul_sum");
    matrix_add_loop(s, "premul_sum", premul_sum, 300);
    TCase *tc = tcase_create("refused");
    tcase_add_test(tc, premul_refused);
    tcase_add_test(tc, premul_disagree);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return harness_main(suite()); }
