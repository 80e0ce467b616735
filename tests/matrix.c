/*
 * The correctness matrix's shared frame (see matrix.h).
 */
#define _GNU_SOURCE
#include "matrix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct matrix_config matrix_configs[] = {
    {1, "shm", 0, "1 rank shm"},
    {2, "shm", 0, "2 ranks shm"},
    {3, "shm", 0, "3 ranks shm"},
    {4, "shm", 0, "4 ranks shm"},
    {5, "shm", 0, "5 ranks shm"},
    {8, "shm", 0, "8 ranks shm"},
    {1, "tcp", 0, "1 rank tcp"},
    {2, "tcp", 0, "2 ranks tcp"},
    {3, "tcp", 0, "3 ranks tcp"},
    {4, "tcp", 0, "4 ranks tcp"},
    {5, "tcp", 0, "5 ranks tcp"},
    {8, "tcp", 0, "8 ranks tcp"},
    /* Every rank its own "host": the planner must treat them as remote. */
    {3, "tcp", 1, "3 ranks tcp, one host each"},
    /* Two hosts of two ranks, transports left to the planner. */
    {4, NULL, 2, "4 ranks auto, 2 hosts x 2 ranks"},
};
const int matrix_config_count = (int)(sizeof matrix_configs / sizeof matrix_configs[0]);

#define SMALL_PRIME_COUNT 99991
#define BIG_BYTES (4u << 20)

int matrix_small_counts(int nranks, size_t out[8]) {
    size_t cand[] = {0, 1, (size_t)(nranks - 1), (size_t)(nranks + 1), SMALL_PRIME_COUNT};
    int n = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        int dup = 0;
        for (int j = 0; j < n; j++) dup |= out[j] == cand[i];
        if (!dup) out[n++] = cand[i];
    }
    return n;
}

size_t matrix_big_count(ccl_dtype_t dtype) {
    size_t es = ccl_dtype_size(dtype);
    if (es == 0) es = 1;
    return BIG_BYTES / es + 3; /* odd, so no chunking divides it evenly */
}

size_t matrix_big_block_count(ccl_dtype_t dtype, int nranks) {
    size_t es = ccl_dtype_size(dtype);
    if (es == 0) es = 1;
    if (nranks < 1) nranks = 1;
    return BIG_BYTES / es / (size_t)nranks + 3;
}

int matrix_full(void) {
    const char *s = getenv("CCL_TEST_FULL");
    return s && strcmp(s, "1") == 0;
}

ccl_op_t matrix_big_op(ccl_dtype_t dtype) { return (ccl_op_t)((int)dtype % CCL_NUM_OPS); }

int matrix_big_in_place(ccl_dtype_t dtype) { return ((int)dtype / CCL_NUM_OPS) % 2; }

uint64_t matrix_seed(int collective, int dtype, int op, size_t count, int placement, int root) {
    uint64_t s = ref_mix(0x63636c74ull, (uint64_t)collective, (uint64_t)dtype);
    s = ref_mix(s, (uint64_t)op, count);
    return ref_mix(s, (uint64_t)placement, (uint64_t)(root + 1));
}

const struct matrix_config matrix_short_configs[] = {
    {4, "shm", 0, "4 ranks shm"},
    {3, "tcp", 0, "3 ranks tcp"},
    {4, "tcp", 1, "4 ranks tcp, one host each"},
    {5, NULL, 3, "5 ranks auto, hosts of 3 and 2 ranks"},
};
const int matrix_short_config_count = (int)(sizeof matrix_short_configs / sizeof matrix_short_configs[0]);

void matrix_run(int index, harness_body_fn body, const char *what, void *user) {
    ck_assert_int_lt(index, matrix_config_count);
    matrix_run_config(&matrix_configs[index], body, what, user);
}

void matrix_run_config(const struct matrix_config *cfg, harness_body_fn body, const char *what, void *user) {
    struct matrix_ctx ctx = {.cfg = cfg, .what = what, .user = user};
    struct harness_run run = {
        .nranks = cfg->nranks,
        .body = body,
        .arg = &ctx,
        .transport = cfg->transport,
        .ranks_per_host = cfg->ranks_per_host,
        .ccl_timeout = "30",
        .deadline_s = 500,
    };
    char why[2048];
    harness_run(&run);
    harness_describe(&run, 0, why, sizeof why);
    ck_assert_msg(harness_problems(&run, 0) == 0, "%s on %s: %s", what, cfg->name, why);
}

void matrix_add_loop(Suite *s, const char *name, const TTest *test, int timeout_s) {
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    tcase_add_loop_test(tc, test, 0, matrix_config_count);
    suite_add_tcase(s, tc);
}

void matrix_add_short_loop(Suite *s, const char *name, const TTest *test, int timeout_s) {
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    tcase_add_loop_test(tc, test, 0, matrix_short_config_count);
    suite_add_tcase(s, tc);
}

void matrix_summary(const struct matrix_ctx *ctx, int rank, const struct matrix_stats *st,
                    const struct harness_tally *t) {
    if (rank != 0) return;
    fprintf(stderr, "[matrix] %s, %s: %d combinations checked, %d failures on rank 0, %.2f s%s\n", ctx->what,
            ctx->cfg->name, st->combos, t->fails, harness_now() - st->start,
            matrix_full() ? " (CCL_TEST_FULL)" : "");
}

int matrix_expect_equal(struct harness_tally *t, const char *combo, const char *bufname, ccl_dtype_t dtype,
                        const void *got, const void *want, size_t count) {
    size_t first = ref_first_diff(dtype, got, want, count);
    if (first == SIZE_MAX) return 1;
    size_t es = ccl_dtype_size(dtype), bad = 0;
    for (size_t i = first; i < count; i++)
        bad += memcmp((const uint8_t *)got + i * es, (const uint8_t *)want + i * es, es) != 0;
    char g[64], w[64];
    ref_format_elem(dtype, got, first, g, sizeof g);
    ref_format_elem(dtype, want, first, w, sizeof w);
    harness_fail(t, __FILE__, __LINE__, "%s: %s[%zu] = %s, expected %s (%zu of %zu elements wrong)", combo, bufname,
                 first, g, w, bad, count);
    return 0;
}

int matrix_expect_guards(struct harness_tally *t, const char *combo, const char *bufname, const struct tbuf *b) {
    if (tbuf_guards_ok(b)) return 1;
    harness_fail(t, __FILE__, __LINE__, "%s: bytes written outside %s (%zu bytes)", combo, bufname, b->bytes);
    return 0;
}
