/*
 * The correctness matrix's shared frame: which communicator shapes every
 * collective runs on, which counts it sweeps, how a body reports what it
 * checked, and how a mismatch is described.
 */
#ifndef CCL_TEST_MATRIX_H
#define CCL_TEST_MATRIX_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "ccl.h"
#include "harness.h"
#include "ref.h"

/* One communicator shape. */
struct matrix_config {
    int nranks;
    const char *transport; /* CCL_TRANSPORT, NULL for the planner's choice */
    int ranks_per_host;    /* CCL_HOST_ID grouping, 0 for one real host */
    const char *name;
};
extern const struct matrix_config matrix_configs[];
extern const int matrix_config_count;

/* What a matrix body receives as its harness argument. */
struct matrix_ctx {
    const struct matrix_config *cfg;
    const char *what; /* "all_reduce", for the summary line */
    void *user;
};

/* Counts swept for n ranks: 0, 1, n-1, n+1, 99991 (duplicates removed);
 * returns how many. */
int matrix_small_counts(int nranks, size_t out[8]);
/* The smallest count whose data exceeds 4 MiB for the dtype. */
size_t matrix_big_count(ccl_dtype_t dtype);
/* For collectives whose buffers hold nranks blocks of `count` elements
 * (reduce_scatter's input, all_gather's output, all_to_all's both): the
 * smallest count for which that whole buffer exceeds 4 MiB. */
size_t matrix_big_block_count(ccl_dtype_t dtype, int nranks);
/* CCL_TEST_FULL=1: the whole cross product at the big count too. */
int matrix_full(void);
/* The op a dtype gets at the big count when not in full mode: the ops
 * rotate over the dtypes, so each op meets two dtypes. */
ccl_op_t matrix_big_op(ccl_dtype_t dtype);
/* In-place or not at the big count when not in full mode: each op gets
 * both placements over its two dtypes. */
int matrix_big_in_place(ccl_dtype_t dtype);
/* A seed every rank derives alike for one combination. */
uint64_t matrix_seed(int collective, int dtype, int op, size_t count, int placement, int root);

/* Runs body on configuration `index` (a loop test's _i); asserts that
 * every rank passed. */
void matrix_run(int index, harness_body_fn body, const char *what, void *user);
/* The same on any configuration (suites with their own short lists). */
void matrix_run_config(const struct matrix_config *cfg, harness_body_fn body, const char *what, void *user);
/* The shorter list the non-matrix suites loop over: shm, tcp, one host
 * per rank, and the planner's choice across two hosts. */
extern const struct matrix_config matrix_short_configs[];
extern const int matrix_short_config_count;
/* A test case looping over every configuration. */
void matrix_add_loop(Suite *s, const char *name, const TTest *test, int timeout_s);
/* A test case looping over matrix_short_configs. */
void matrix_add_short_loop(Suite *s, const char *name, const TTest *test, int timeout_s);

/* ---- inside a body ---- */

struct matrix_stats {
    int combos;
    double start;
};
/* Rank 0 prints "[matrix] what config: N combinations, F failures, T s". */
void matrix_summary(const struct matrix_ctx *ctx, int rank, const struct matrix_stats *st,
                    const struct harness_tally *t);

/* got must equal want bytewise (count elements); on a mismatch, one failure
 * naming the combination, the first bad index, both values and how many
 * elements differ. Returns 1 if equal. */
int matrix_expect_equal(struct harness_tally *t, const char *combo, const char *bufname, ccl_dtype_t dtype,
                        const void *got, const void *want, size_t count);
/* Both guards of b intact, else one failure. */
int matrix_expect_guards(struct harness_tally *t, const char *combo, const char *bufname, const struct tbuf *b);

#endif
