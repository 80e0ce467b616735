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
    const char *algo;      /* CCL_ALGO, NULL for the planner's choice */
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
/* Whether a sweep runs op on dtype: every arithmetic op; the bitwise ops
 * on integers only, sampled outside full mode (matrix.c says how). */
int matrix_op_wanted(ccl_dtype_t dtype, ccl_op_t op);
/* A seed every rank derives alike for one combination. */
uint64_t matrix_seed(int collective, int dtype, int op, size_t count, int placement, int root);

/* Runs body on configuration `index` (a loop test's _i); asserts that
 * every rank passed. Under CCL_TEST_MATRIX=ib the loop runs over RDMA
 * configurations instead of matrix_configs (2, 3 and 4 ranks on ib, and
 * shm inside two hosts with ib across). */
void matrix_run(int index, harness_body_fn body, const char *what, void *user);
/* The same on any configuration (suites with their own short lists). */
void matrix_run_config(const struct matrix_config *cfg, harness_body_fn body, const char *what, void *user);
/* The shorter list the non-matrix suites loop over: shm, tcp, one host
 * per rank, and the planner's choice across two hosts. */
extern const struct matrix_config matrix_short_configs[];
extern const int matrix_short_config_count;
/* Runs body on matrix_short_configs[index] (a short loop test's _i). */
void matrix_run_short(int index, harness_body_fn body, const char *what, void *user);
/* A test case looping over every configuration. */
void matrix_add_loop(Suite *s, const char *name, const TTest *test, int timeout_s);
/* A test case looping over matrix_short_configs. */
void matrix_add_short_loop(Suite *s, const char *name, const TTest *test, int timeout_s);

/* ---- the same sweeps once per algorithm ----
 * Each algorithm that applies to a collective runs its matrix body with
 * CCL_ALGO forced, on a rotation of three of matrix_algo_configs (shm, tcp
 * and mixed hosts, prime and power-of-two rank counts), or on every one of
 * them under CCL_TEST_FULL=1. */
struct matrix_algo {
    const char *algo;   /* the CCL_ALGO value, e.g. "allreduce:tree" */
    const int *configs; /* indices into matrix_algo_configs ending in -1; NULL: the rotation */
    const char *chunk;  /* CCL_CHUNK_BYTES, NULL for the planner's per call */
    const char *env;    /* more of the environment ("VAR=value ..."), or NULL */
};
extern const struct matrix_config matrix_algo_configs[];
/* The single-host configurations of matrix_algo_configs (1, 2, 3 and 7
 * ranks over shm): where the direct algorithm's windows exist. */
extern const int matrix_one_host_configs[];
/* The same without the 1-rank job (no algorithm runs there: an algorithm
 * that only exists on one host of several ranks is tested on 2, 3 and 7). */
extern const int matrix_one_host_multi_configs[];
extern const int matrix_algo_config_count;
/* How many runs (loop indices) a list of algorithms makes. */
int matrix_algo_runs(const struct matrix_algo *list, int n);
/* Runs body for loop index `index` of the list. */
void matrix_run_algo(int index, const struct matrix_algo *list, int n, harness_body_fn body, const char *what,
                     void *user);
/* A test case looping over a list's runs. */
void matrix_add_algo_loop(Suite *s, const char *name, const TTest *test, const struct matrix_algo *list, int n,
                          int timeout_s);

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

/* ---- a collective's sweep ----
 * Every collective's matrix body runs the same two loops: the whole cross
 * product at the small counts, then one big count per dtype with the other
 * dimensions rotating (all of them under CCL_TEST_FULL). A collective
 * names its dimensions and its one-combination function; the loops, their
 * order, the misalignments and the combination count are shared. */

/* One combination. Collectives without an op or a root see 0 there. */
struct matrix_combo {
    ccl_dtype_t dtype;
    ccl_op_t op;
    size_t count;
    int root;
    int placement;
    size_t misalign;
};

/* Guarded send/recv buffers, the expected result and a copy of the input. */
struct matrix_bufs {
    struct tbuf send, recv;
    uint8_t *want, *saved;
};

/* A body's per-rank state. */
struct matrix_body {
    const struct matrix_ctx *ctx;
    ccl_comm_t *comm;
    int rank, nranks;
    struct harness_tally t;
    struct matrix_stats stats;
    struct matrix_bufs b;
    int ready; /* buffers allocated: the summary is printed */
};

/* Runs one combination and every check on its outcome; returns the call's
 * status (the sweep stops at the first call that fails). */
typedef ccl_status_t (*matrix_combo_fn)(struct matrix_body *mb, const struct matrix_combo *c);

struct matrix_sweep {
    matrix_combo_fn run;
    int has_root;       /* small counts run every root */
    int has_op;         /* every op, at every count */
    int placements;     /* placements 0 .. placements-1, at every count */
    int blocked;        /* the big count is matrix_big_block_count's */
    int big_every_root; /* the big count loops over roots too */
    /* Whether a big-count combination runs outside CCL_TEST_FULL; may set
     * c->root (it is called in full mode too). NULL: every one runs. */
    int (*pick_big)(int nranks, struct matrix_combo *c);
};

/* Bytes for the largest count of any dtype (small or big count), and the
 * same per block for the blocked collectives. */
size_t matrix_buf_cap(void);
size_t matrix_block_buf_cap(int nranks);

/* Starts a body: fills mb and allocates its buffers (a cap of 0 leaves that
 * one out). Returns 0, or -1 after counting an out-of-memory failure. */
int matrix_body_begin(struct matrix_body *mb, ccl_comm_t *comm, int rank, int nranks, void *arg, size_t send_cap,
                      size_t recv_cap, size_t want_cap, size_t saved_cap);
/* The two loops, counting every combination run. */
void matrix_sweep(struct matrix_body *mb, const struct matrix_sweep *sw);
/* The summary line (when begin succeeded), frees; returns the failures. */
int matrix_body_end(struct matrix_body *mb);

/* A collective's call returned st: unless CCL_OK, one failure naming the
 * combination, the status and the communicator's last error. Returns st. */
#define MATRIX_CALL_OK(mb, combo, st) matrix_call_ok_at((mb), (combo), (st), __FILE__, __LINE__)
ccl_status_t matrix_call_ok_at(struct matrix_body *mb, const char *combo, ccl_status_t st, const char *file,
                               int line);

#endif
