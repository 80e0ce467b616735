/* ctest: TIMEOUT 600 LABELS matrix */
/*
 * IEEE special values through the reducing collectives (all_reduce,
 * reduce_scatter, reduce) on every float dtype: NaN (from one rank or all,
 * with different payloads), +-inf (alone and against each other), signed
 * zeros. The library's MAX/MIN follow IEEE 754-2019 maximum/minimum (NaN
 * wins; -0 < +0). A NaN result may carry any payload, but every rank must
 * hold the same bits; everything else is bit-exact.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define SPECIAL_COUNT 803 /* covers every pattern many times, odd */

static const ccl_dtype_t float_dtypes[] = {CCL_FLOAT16, CCL_BFLOAT16, CCL_FLOAT32, CCL_FLOAT64};
static const ccl_op_t special_ops[] = {CCL_SUM, CCL_MAX, CCL_MIN};

/* Rank r's element i: one of eight patterns by i % 8. */
static double special_value(int r, int nranks, size_t i) {
    int owner = (int)((i / 8) % (size_t)nranks);
    int other = (owner + 1) % nranks;
    switch (i % 8) {
    case 0: return r == owner ? NAN : (double)r - 2.0;                 /* one NaN */
    case 1: return r == owner ? INFINITY : (double)r + 0.5;            /* one +inf */
    case 2: return r == owner ? INFINITY : r == other ? -INFINITY : 1; /* +inf vs -inf */
    case 3: return -0.0;                                               /* all -0 */
    case 4: return r == owner ? 0.0 : -0.0;                            /* +0 among -0 */
    case 5: return -INFINITY;                                          /* all -inf */
    case 6: return NAN;                                                /* all NaN */
    default: return (double)((int)(i % 7) - 3 + r) * 0.5;             /* finite */
    }
}

/* NaNs get a payload that names the rank, to see whose wins. */
static void put(ccl_dtype_t dt, void *buf, size_t i, double v, int rank) {
    uint32_t payload = (uint32_t)rank + 1;
    switch (dt) {
    case CCL_FLOAT16:
        ((uint16_t *)buf)[i] = isnan(v) ? (uint16_t)(0x7e00u | payload) : ref_float_to_half((float)v);
        break;
    case CCL_BFLOAT16:
        ((uint16_t *)buf)[i] = isnan(v) ? (uint16_t)(0x7fc0u | payload) : ref_float_to_bf16((float)v);
        break;
    case CCL_FLOAT32: {
        uint32_t bits = 0x7fc00000u | payload;
        float f = (float)v;
        if (isnan(v)) memcpy(&f, &bits, sizeof f);
        ((float *)buf)[i] = f;
        break;
    }
    default: {
        uint64_t bits = 0x7ff8000000000000ull | payload;
        double d = v;
        if (isnan(v)) memcpy(&d, &bits, sizeof d);
        ((double *)buf)[i] = d;
        break;
    }
    }
}

static int is_nan_elem(ccl_dtype_t dt, const void *buf, size_t i) {
    switch (dt) {
    case CCL_FLOAT16: return (((const uint16_t *)buf)[i] & 0x7fffu) > 0x7c00u;
    case CCL_BFLOAT16: return (((const uint16_t *)buf)[i] & 0x7fffu) > 0x7f80u;
    case CCL_FLOAT32: return isnan(((const float *)buf)[i]);
    default: return isnan(((const double *)buf)[i]);
    }
}

/* IEEE 754-2019 maximum/minimum and plain addition, folded over ranks. */
static double special_expected(ccl_op_t op, int nranks, size_t i) {
    double acc = special_value(0, nranks, i);
    for (int r = 1; r < nranks; r++) {
        double x = special_value(r, nranks, i);
        if (isnan(acc) || isnan(x)) {
            acc = NAN;
        } else if (op == CCL_SUM) {
            acc += x;
        } else if (x == acc) { /* equal, or +0 vs -0 */
            int acc_neg = signbit(acc) != 0, x_neg = signbit(x) != 0;
            if (op == CCL_MAX && acc_neg && !x_neg) acc = x;
            if (op == CCL_MIN && !acc_neg && x_neg) acc = x;
        } else if (op == CCL_MAX ? x > acc : x < acc) {
            acc = x;
        }
    }
    return acc;
}

static uint64_t checksum(const void *buf, size_t bytes) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++) h = (h ^ ((const uint8_t *)buf)[i]) * 0x100000001b3ull;
    return h;
}

/* got[0..n) against the reference for elements [first, first + n). */
static void check_block(struct harness_tally *t, const char *combo, ccl_dtype_t dt, ccl_op_t op, int nranks,
                        const void *got, size_t first, size_t n, void *scratch) {
    size_t bad = 0, first_bad = 0;
    for (size_t j = 0; j < n; j++) {
        double want = special_expected(op, nranks, first + j);
        int ok;
        if (isnan(want)) {
            ok = is_nan_elem(dt, got, j);
        } else {
            put(dt, scratch, 0, want, 0);
            ok = memcmp((const uint8_t *)got + j * ccl_dtype_size(dt), scratch, ccl_dtype_size(dt)) == 0;
        }
        if (!ok && bad++ == 0) first_bad = j;
    }
    if (bad) {
        char g[64];
        ref_format_elem(dt, got, first_bad, g, sizeof g);
        harness_fail(t, __FILE__, __LINE__, "%s: element %zu (pattern %zu) = %s, expected %.17g; %zu wrong", combo,
                     first + first_bad, (first + first_bad) % 8, g,
                     special_expected(op, nranks, first + first_bad), bad);
    }
}

enum which { ALL_REDUCE, REDUCE_SCATTER, REDUCE, NUM_WHICH };
static const char *const which_names[] = {"all_reduce", "reduce_scatter", "reduce"};

static int body_special(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    struct matrix_stats stats = {0, harness_now()};
    size_t total = SPECIAL_COUNT * (size_t)nranks;
    uint8_t *in = malloc(total * 8), *out = malloc(total * 8), scratch[8];
    uint64_t *sums = malloc(sizeof(uint64_t) * (size_t)nranks);
    if (!in || !out || !sums) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (size_t di = 0; di < 4; di++)
        for (size_t oi = 0; oi < 3; oi++)
            for (int w = 0; w < NUM_WHICH; w++) {
                ccl_dtype_t dt = float_dtypes[di];
                ccl_op_t op = special_ops[oi];
                size_t es = ccl_dtype_size(dt), n = w == REDUCE_SCATTER ? total : SPECIAL_COUNT;
                char combo[128];
                snprintf(combo, sizeof combo, "%s %s %s with NaN/inf/-0", which_names[w], ccl_dtype_name(dt),
                         ccl_op_name(op));
                /* reduce_scatter's input is nranks blocks of the same patterns. */
                for (size_t i = 0; i < n; i++) put(dt, in, i, special_value(rank, nranks, i), rank);
                ccl_status_t st;
                size_t first = 0, got_n = SPECIAL_COUNT;
                if (w == ALL_REDUCE) {
                    st = ccl_all_reduce(in, out, SPECIAL_COUNT, dt, op, comm);
                } else if (w == REDUCE_SCATTER) {
                    st = ccl_reduce_scatter(in, out, SPECIAL_COUNT, dt, op, comm);
                    first = (size_t)rank * SPECIAL_COUNT;
                } else {
                    st = ccl_reduce(in, out, SPECIAL_COUNT, dt, op, 0, comm);
                    if (rank != 0) got_n = 0;
                }
                if (st != CCL_OK) {
                    harness_fail(&t, __FILE__, __LINE__, "%s returned %s: %s", combo, ccl_status_string(st),
                                 ccl_comm_last_error(comm));
                    goto out;
                }
                check_block(&t, combo, dt, op, nranks, out, first, got_n, scratch);
                if (w == ALL_REDUCE) {
                    /* NaN payloads too: every rank must hold the same bits. */
                    uint64_t mine = checksum(out, SPECIAL_COUNT * es);
                    if (EXPECT_OK(&t, ccl_all_gather(&mine, sums, 1, CCL_UINT64, comm)) != CCL_OK) goto out;
                    for (int r = 0; r < nranks; r++)
                        EXPECT(&t, sums[r] == mine, "%s: rank %d holds different bits than this rank", combo, r);
                }
                stats.combos++;
            }
out:
    matrix_summary(ctx, rank, &stats, &t);
    free(in);
    free(out);
    free(sums);
    return t.fails;
}

START_TEST(special_values) { matrix_run(_i, body_special, "special float values", NULL); }
END_TEST

/* ---- the same values through every all-reduce algorithm ---- */

static const struct matrix_algo algos[] = {
    {"tree", NULL, NULL, NULL}, {"allreduce:rd", NULL, NULL, NULL}, {"rhd", NULL, NULL, NULL}, {"direct", matrix_one_host_configs, NULL, NULL}};
#define NALGOS ((int)(sizeof algos / sizeof algos[0]))

START_TEST(special_values_algos) { matrix_run_algo(_i, algos, NALGOS, body_special, "special float values", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("special_values");
    matrix_add_loop(s, "special_values", special_values, 300);
    matrix_add_algo_loop(s, "special_values_algos", special_values_algos, algos, NALGOS, 300);
    return s;
}

int main(void) { return harness_main(suite()); }
