/*
 * The correctness matrix's shared frame (see matrix.h).
 */
#define _GNU_SOURCE
#include "matrix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

const struct matrix_config matrix_configs[] = {
    {1, "shm", 0, "1 rank shm", NULL},
    {2, "shm", 0, "2 ranks shm", NULL},
    {3, "shm", 0, "3 ranks shm", NULL},
    {4, "shm", 0, "4 ranks shm", NULL},
    {5, "shm", 0, "5 ranks shm", NULL},
    {8, "shm", 0, "8 ranks shm", NULL},
    {1, "tcp", 0, "1 rank tcp", NULL},
    {2, "tcp", 0, "2 ranks tcp", NULL},
    {3, "tcp", 0, "3 ranks tcp", NULL},
    {4, "tcp", 0, "4 ranks tcp", NULL},
    {5, "tcp", 0, "5 ranks tcp", NULL},
    {8, "tcp", 0, "8 ranks tcp", NULL},
    /* Every rank its own "host": the planner must treat them as remote. */
    {3, "tcp", 1, "3 ranks tcp, one host each", NULL},
    /* Two hosts of two ranks, transports left to the planner. */
    {4, NULL, 2, "4 ranks auto, 2 hosts x 2 ranks", NULL},
};
const int matrix_config_count = (int)(sizeof matrix_configs / sizeof matrix_configs[0]);

/* CCL_TEST_MATRIX=ib: the same sweeps over the RDMA transport, for a
 * machine with RDMA devices (tools/rdma-vm runs them in a VM with two
 * soft-RoCE devices; CCL_TEST_IB_HCAS spreads the "hosts" over them). */
static const struct matrix_config ib_configs[] = {
    {2, "ib", 1, "2 ranks ib, one host each", NULL},
    {3, "ib", 1, "3 ranks ib, one host each", NULL},
    {4, NULL, 2, "4 ranks auto (shm in a host, ib across), 2 hosts x 2", NULL},
    /* Under CCL_TEST_FULL only: the emulated VM takes 80 s per collective. */
    {4, "ib", 2, "4 ranks ib, 2 hosts x 2", NULL},
};

static const struct matrix_config *active_configs(int *n) {
    const char *m = getenv("CCL_TEST_MATRIX");
    if (m && strcmp(m, "ib") == 0) {
        *n = (int)(sizeof ib_configs / sizeof ib_configs[0]) - (matrix_full() ? 0 : 1);
        return ib_configs;
    }
    *n = matrix_config_count;
    return matrix_configs;
}

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

/* The arithmetic ops (every dtype has them) come before the bitwise ones. */
#define ARITH_OPS CCL_BAND

ccl_op_t matrix_big_op(ccl_dtype_t dtype) { return (ccl_op_t)((int)dtype % ARITH_OPS); }

int matrix_big_in_place(ccl_dtype_t dtype) { return ((int)dtype / ARITH_OPS) % 2; }

int matrix_op_wanted(ccl_dtype_t dtype, ccl_op_t op) {
    if (op < ARITH_OPS) return 1;
    if (!ref_op_applies(dtype, op)) return 0; /* no bitwise ops on floats (test_args checks the refusal) */
    /* A bitwise op is one integer kernel like another: each runs on two
     * of the six integer types (an 8-bit and a wider one), every type
     * meeting one of them; all of them in full mode. */
    return matrix_full() || ((int)dtype + (int)op) % 3 == 0;
}

uint64_t matrix_seed(int collective, int dtype, int op, size_t count, int placement, int root) {
    uint64_t s = ref_mix(0x63636c74ull, (uint64_t)collective, (uint64_t)dtype);
    s = ref_mix(s, (uint64_t)op, count);
    return ref_mix(s, (uint64_t)placement, (uint64_t)(root + 1));
}

const struct matrix_config matrix_short_configs[] = {
    {4, "shm", 0, "4 ranks shm", NULL},
    {3, "tcp", 0, "3 ranks tcp", NULL},
    {4, "tcp", 1, "4 ranks tcp, one host each", NULL},
    {5, NULL, 3, "5 ranks auto, hosts of 3 and 2 ranks", NULL},
};
const int matrix_short_config_count = (int)(sizeof matrix_short_configs / sizeof matrix_short_configs[0]);

void matrix_run(int index, harness_body_fn body, const char *what, void *user) {
    int n;
    const struct matrix_config *cfgs = active_configs(&n);
    ck_assert_int_lt(index, n);
    matrix_run_config(&cfgs[index], body, what, user);
}

void matrix_run_short(int index, harness_body_fn body, const char *what, void *user) {
    matrix_run_config(&matrix_short_configs[index], body, what, user);
}

const struct matrix_config matrix_algo_configs[] = {
    {3, "shm", 0, "3 ranks shm", NULL},
    {4, "tcp", 0, "4 ranks tcp", NULL},
    {5, NULL, 3, "5 ranks auto, hosts of 3 and 2", NULL},
    {7, "shm", 0, "7 ranks shm", NULL},
    {2, "tcp", 0, "2 ranks tcp", NULL},
    {8, NULL, 4, "8 ranks auto, 2 hosts x 4", NULL},
    {1, "shm", 0, "1 rank shm", NULL},
    {5, "tcp", 1, "5 ranks tcp, one host each", NULL},
    {2, "shm", 0, "2 ranks shm", NULL},
};
const int matrix_one_host_configs[] = {6, 8, 0, 3, -1};
const int matrix_one_host_multi_configs[] = {8, 0, 3, -1};
const int matrix_algo_config_count = (int)(sizeof matrix_algo_configs / sizeof matrix_algo_configs[0]);

static void run_config(const struct matrix_config *cfg, const char *chunk, const char *more, harness_body_fn body,
                       const char *what, void *user) {
    struct matrix_ctx ctx = {.cfg = cfg, .what = what, .user = user};
    char env[300] = "";
    if (cfg->algo) snprintf(env, sizeof env, "CCL_ALGO=%s", cfg->algo);
    if (chunk) snprintf(env + strlen(env), sizeof env - strlen(env), "%sCCL_CHUNK_BYTES=%s", *env ? " " : "", chunk);
    if (more) snprintf(env + strlen(env), sizeof env - strlen(env), "%s%s", *env ? " " : "", more);
    struct harness_run run = {
        .nranks = cfg->nranks,
        .body = body,
        .arg = &ctx,
        .transport = cfg->transport,
        .ranks_per_host = cfg->ranks_per_host,
        .ccl_timeout = "30",
        .deadline_s = 500,
        .env = *env ? env : NULL,
    };
    util_run_clean(&run, 0, "%s on %s", what, cfg->name);
}

#define ALGO_ROTATION 3

/* The configurations algorithm a of a list runs on: out[] gets indices. */
static int algo_configs(const struct matrix_algo *list, int a, int out[16]) {
    int n = 0;
    if (list[a].configs) {
        for (const int *c = list[a].configs; *c >= 0 && n < 16; c++) out[n++] = *c;
    } else if (matrix_full()) {
        for (int c = 0; c < matrix_algo_config_count; c++) out[n++] = c;
    } else {
        /* Consecutive triples of the first six mix shm, tcp and mixed hosts. */
        for (int j = 0; j < ALGO_ROTATION; j++) out[n++] = (2 * a + j) % 6;
    }
    return n;
}

int matrix_algo_runs(const struct matrix_algo *list, int n) {
    int total = 0, tmp[16];
    for (int a = 0; a < n; a++) total += algo_configs(list, a, tmp);
    return total;
}

void matrix_run_algo(int index, const struct matrix_algo *list, int n, harness_body_fn body, const char *what,
                     void *user) {
    for (int a = 0; a < n; a++) {
        int cfgs[16], k = algo_configs(list, a, cfgs);
        if (index >= k) {
            index -= k;
            continue;
        }
        struct matrix_config cfg = matrix_algo_configs[cfgs[index]];
        char name[256];
        snprintf(name, sizeof name, "%s, CCL_ALGO=%s%s%s%s%s", cfg.name, list[a].algo,
                 list[a].chunk ? ", CCL_CHUNK_BYTES=" : "", list[a].chunk ? list[a].chunk : "",
                 list[a].env ? ", " : "", list[a].env ? list[a].env : "");
        cfg.name = name;
        cfg.algo = list[a].algo;
        run_config(&cfg, list[a].chunk, list[a].env, body, what, user);
        return;
    }
    ck_abort_msg("matrix_run_algo: index past the list");
}

void matrix_add_algo_loop(Suite *s, const char *name, const TTest *test, const struct matrix_algo *list, int n,
                          int timeout_s) {
    util_add_loop_case(s, name, test, matrix_algo_runs(list, n), timeout_s);
}

void matrix_run_config(const struct matrix_config *cfg, harness_body_fn body, const char *what, void *user) {
    run_config(cfg, NULL, NULL, body, what, user);
}

void matrix_add_loop(Suite *s, const char *name, const TTest *test, int timeout_s) {
    int n;
    active_configs(&n);
    util_add_loop_case(s, name, test, n, timeout_s);
}

void matrix_add_short_loop(Suite *s, const char *name, const TTest *test, int timeout_s) {
    util_add_loop_case(s, name, test, matrix_short_config_count, timeout_s);
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

size_t matrix_buf_cap(void) {
    size_t cap = SMALL_PRIME_COUNT * 8 + 64;
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        size_t bytes = matrix_big_count((ccl_dtype_t)d) * ccl_dtype_size((ccl_dtype_t)d);
        if (bytes > cap) cap = bytes;
    }
    return cap;
}

size_t matrix_block_buf_cap(int nranks) {
    size_t cap = SMALL_PRIME_COUNT * 8 + 64;
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        size_t bytes = matrix_big_block_count((ccl_dtype_t)d, nranks) * ccl_dtype_size((ccl_dtype_t)d);
        if (bytes > cap) cap = bytes;
    }
    return cap;
}

int matrix_body_begin(struct matrix_body *mb, ccl_comm_t *comm, int rank, int nranks, void *arg, size_t send_cap,
                      size_t recv_cap, size_t want_cap, size_t saved_cap) {
    memset(mb, 0, sizeof *mb);
    mb->ctx = arg;
    mb->comm = comm;
    mb->rank = rank;
    mb->nranks = nranks;
    mb->t.rank = rank;
    mb->stats.start = harness_now();
    int ok = 1;
    if (send_cap) ok &= tbuf_alloc(&mb->b.send, send_cap) == 0;
    if (recv_cap) ok &= tbuf_alloc(&mb->b.recv, recv_cap) == 0;
    if (want_cap) ok &= (mb->b.want = malloc(want_cap)) != NULL;
    if (saved_cap) ok &= (mb->b.saved = malloc(saved_cap)) != NULL;
    if (!ok) {
        harness_fail(&mb->t, __FILE__, __LINE__, "out of memory");
        return -1;
    }
    mb->ready = 1;
    return 0;
}

void matrix_sweep(struct matrix_body *mb, const struct matrix_sweep *sw) {
    int nranks = mb->nranks;
    int nroots = sw->has_root ? nranks : 1, nops = sw->has_op ? CCL_NUM_OPS : 1;
    size_t counts[8];
    int ncounts = matrix_small_counts(nranks, counts);
    ccl_status_t st = CCL_OK;
    for (int root = 0; root < nroots && st == CCL_OK; root++)
        for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++)
            for (int op = 0; op < nops && st == CCL_OK; op++)
                for (int ci = 0; ci < ncounts && st == CCL_OK; ci++)
                    for (int pl = 0; pl < sw->placements && st == CCL_OK; pl++) {
                        if (sw->has_op && !matrix_op_wanted((ccl_dtype_t)d, (ccl_op_t)op)) break;
                        /* Misalignments rotate with the other dimensions. */
                        size_t misalign = ccl_dtype_size((ccl_dtype_t)d) * (size_t)((d + op + ci + root) % 3);
                        struct matrix_combo c = {(ccl_dtype_t)d, (ccl_op_t)op, counts[ci], root, pl, misalign};
                        st = sw->run(mb, &c);
                        mb->stats.combos++;
                    }
    /* Above 4 MiB: every dtype, the rest as pick_big chooses (all of it in
     * full mode). */
    int big_roots = sw->big_every_root ? nranks : 1;
    for (int d = 0; d < CCL_NUM_DTYPES && st == CCL_OK; d++) {
        ccl_dtype_t dt = (ccl_dtype_t)d;
        size_t count = sw->blocked ? matrix_big_block_count(dt, nranks) : matrix_big_count(dt);
        for (int root = 0; root < big_roots && st == CCL_OK; root++)
            for (int op = 0; op < nops && st == CCL_OK; op++)
                for (int pl = 0; pl < sw->placements && st == CCL_OK; pl++) {
                    struct matrix_combo c = {dt, (ccl_op_t)op, count, root, pl, 0};
                    if (sw->has_op && !matrix_op_wanted(dt, c.op)) break;
                    if (sw->pick_big && !sw->pick_big(nranks, &c) && !matrix_full()) continue;
                    st = sw->run(mb, &c);
                    mb->stats.combos++;
                }
    }
}

int matrix_body_end(struct matrix_body *mb) {
    if (mb->ready) matrix_summary(mb->ctx, mb->rank, &mb->stats, &mb->t);
    tbuf_free(&mb->b.send);
    tbuf_free(&mb->b.recv);
    free(mb->b.want);
    free(mb->b.saved);
    return mb->t.fails;
}

ccl_status_t matrix_call_ok_at(struct matrix_body *mb, const char *combo, ccl_status_t st, const char *file,
                               int line) {
    if (st != CCL_OK)
        harness_fail(&mb->t, file, line, "%s returned %s: %s", combo, ccl_status_string(st),
                     ccl_comm_last_error(mb->comm));
    return st;
}
