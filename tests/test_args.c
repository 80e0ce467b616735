/* ctest: TIMEOUT 300 */
/*
 * Bad arguments. On a working communicator every bad call must return
 * CCL_ERR_INVALID_ARGUMENT or CCL_ERR_INVALID_USAGE, leave a sentence in
 * ccl_comm_last_error, write no buffer, and leave the communicator working
 * (a correct all_reduce follows every group of bad calls). Every rank makes
 * the same bad calls, so none of them may communicate. Also: init with bad
 * arguments, status strings, calls on a destroyed or foreign communicator
 * (also one destroyed inside a group), a request waited twice, an
 * unbalanced ccl_group_end, counts that differ between ranks, and under
 * CCL_CHECK=1 every kind of disagreement named at once.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ref.h"
#include "util.h"

#define BUF_ELEMS 64

struct state {
    ccl_comm_t *comm;
    int rank, nranks;
    float in[BUF_ELEMS * 8], out[BUF_ELEMS * 8];
    float in_saved[BUF_ELEMS * 8], out_saved[BUF_ELEMS * 8];
};

static struct state *state_new(ccl_comm_t *comm, int rank, int nranks) {
    struct state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->comm = comm;
    s->rank = rank;
    s->nranks = nranks;
    return s;
}

static void arm(struct state *s) {
    for (size_t i = 0; i < sizeof s->in / sizeof s->in[0]; i++) {
        s->in[i] = (float)i + 0.5f;
        s->out[i] = -(float)i;
    }
    memcpy(s->in_saved, s->in, sizeof s->in);
    memcpy(s->out_saved, s->out, sizeof s->out);
}

static void expect_rejected(struct harness_tally *t, struct state *s, int line, const char *call, ccl_status_t st) {
    if (st != CCL_ERR_INVALID_ARGUMENT && st != CCL_ERR_INVALID_USAGE)
        harness_fail(t, __FILE__, line, "%s returned %s, expected an invalid argument/usage error", call,
                     ccl_status_string(st));
    if (s->comm && ccl_comm_last_error(s->comm)[0] == '\0')
        harness_fail(t, __FILE__, line, "%s: ccl_comm_last_error is empty", call);
    if (memcmp(s->in, s->in_saved, sizeof s->in) != 0 || memcmp(s->out, s->out_saved, sizeof s->out) != 0)
        harness_fail(t, __FILE__, line, "%s wrote to a buffer", call);
}

#define REJECT(t, s, call)                                        \
    do {                                                          \
        arm(s);                                                   \
        expect_rejected((t), (s), __LINE__, #call, (call));       \
    } while (0)

/* A correct all_reduce, checked: the communicator survived. */
static void expect_still_works(struct harness_tally *t, struct state *s, const char *after) {
    int32_t in[33], out[33];
    for (int i = 0; i < 33; i++) in[i] = i + s->rank;
    ccl_status_t st = ccl_all_reduce(in, out, 33, CCL_INT32, CCL_SUM, s->comm);
    int bad = 0;
    for (int i = 0; i < 33; i++) bad += out[i] != i * s->nranks + s->nranks * (s->nranks - 1) / 2;
    EXPECT(t, st == CCL_OK && bad == 0, "after %s: all_reduce returned %s with %d wrong elements", after,
           ccl_status_string(st), st == CCL_OK ? bad : -1);
}

static void bad_buffers(struct harness_tally *t, struct state *s) {
    ccl_comm_t *c = s->comm;
    float *in = s->in, *out = s->out;
    /* NULL buffers with count > 0 */
    REJECT(t, s, ccl_all_reduce(NULL, out, 8, CCL_FLOAT32, CCL_SUM, c));
    REJECT(t, s, ccl_all_reduce(in, NULL, 8, CCL_FLOAT32, CCL_SUM, c));
    REJECT(t, s, ccl_reduce_scatter(NULL, out, 8, CCL_FLOAT32, CCL_SUM, c));
    REJECT(t, s, ccl_reduce_scatter(in, NULL, 8, CCL_FLOAT32, CCL_SUM, c));
    REJECT(t, s, ccl_all_gather(NULL, out, 8, CCL_FLOAT32, c));
    REJECT(t, s, ccl_all_gather(in, NULL, 8, CCL_FLOAT32, c));
    REJECT(t, s, ccl_all_to_all(NULL, out, 8, CCL_FLOAT32, c));
    REJECT(t, s, ccl_all_to_all(in, NULL, 8, CCL_FLOAT32, c));
    /* Every rank its own root, so each is the root of its call. */
    REJECT(t, s, ccl_broadcast(NULL, out, 8, CCL_FLOAT32, s->rank, c));
    REJECT(t, s, ccl_broadcast(in, NULL, 8, CCL_FLOAT32, s->rank, c));
    REJECT(t, s, ccl_reduce(NULL, out, 8, CCL_FLOAT32, CCL_SUM, s->rank, c));
    REJECT(t, s, ccl_reduce(in, NULL, 8, CCL_FLOAT32, CCL_SUM, s->rank, c));
    int peer = (s->rank + 1) % s->nranks;
    REJECT(t, s, ccl_send(NULL, 8, CCL_FLOAT32, peer, c));
    REJECT(t, s, ccl_recv(NULL, 8, CCL_FLOAT32, peer, c));
    expect_still_works(t, s, "NULL buffers");
}

static void bad_types(struct harness_tally *t, struct state *s) {
    ccl_comm_t *c = s->comm;
    float *in = s->in, *out = s->out;
    const ccl_dtype_t bad_dt[] = {CCL_NUM_DTYPES, (ccl_dtype_t)-1, (ccl_dtype_t)1000};
    const ccl_op_t bad_op[] = {CCL_NUM_OPS, (ccl_op_t)-1, (ccl_op_t)77};
    for (int k = 0; k < 3; k++) {
        ccl_dtype_t d = bad_dt[k];
        ccl_op_t o = bad_op[k];
        REJECT(t, s, ccl_all_reduce(in, out, 8, d, CCL_SUM, c));
        REJECT(t, s, ccl_all_reduce(in, out, 8, CCL_FLOAT32, o, c));
        REJECT(t, s, ccl_reduce_scatter(in, out, 8, d, CCL_SUM, c));
        REJECT(t, s, ccl_reduce_scatter(in, out, 8, CCL_FLOAT32, o, c));
        REJECT(t, s, ccl_all_gather(in, out, 8, d, c));
        REJECT(t, s, ccl_broadcast(in, out, 8, d, 0, c));
        REJECT(t, s, ccl_reduce(in, out, 8, d, CCL_SUM, 0, c));
        REJECT(t, s, ccl_reduce(in, out, 8, CCL_FLOAT32, o, 0, c));
        REJECT(t, s, ccl_all_to_all(in, out, 8, d, c));
        REJECT(t, s, ccl_send(in, 8, d, (s->rank + 1) % s->nranks, c));
        REJECT(t, s, ccl_recv(out, 8, d, (s->rank + 1) % s->nranks, c));
    }
    /* The bitwise ops are for integers: every float dtype is refused. */
    const ccl_op_t bitwise[] = {CCL_BAND, CCL_BOR, CCL_BXOR};
    for (int d = CCL_FLOAT16; d <= CCL_FLOAT64; d++)
        for (int k = 0; k < 3; k++) {
            REJECT(t, s, ccl_all_reduce(in, out, 8, (ccl_dtype_t)d, bitwise[k], c));
            REJECT(t, s, ccl_reduce_scatter(in, out, 2, (ccl_dtype_t)d, bitwise[k], c));
            REJECT(t, s, ccl_reduce(in, out, 8, (ccl_dtype_t)d, bitwise[k], 0, c));
        }
    REJECT(t, s, ccl_all_reduce(in, out, 8, CCL_BFLOAT16, CCL_BXOR, c));
    EXPECT(t, strstr(ccl_comm_last_error(c), "op bxor is for integer dtypes, not bfloat16") != NULL,
           "a float bitwise op's message: %s", ccl_comm_last_error(c));
    /* A timeout must be a number of seconds; an open group refuses it. */
    REJECT(t, s, ccl_comm_set_timeout(c, 0));
    REJECT(t, s, ccl_comm_set_timeout(c, -1));
    REJECT(t, s, ccl_comm_set_timeout(c, NAN));
    REJECT(t, s, ccl_comm_set_timeout(c, 2e9));
    EXPECT_OK(t, ccl_comm_set_timeout(c, 45));
    expect_still_works(t, s, "invalid dtypes and ops");
}

static void bad_ranks(struct harness_tally *t, struct state *s) {
    ccl_comm_t *c = s->comm;
    float *in = s->in, *out = s->out;
    int n = s->nranks;
    const int bad_root[] = {n, n + 100, -1, INT32_MIN};
    for (int k = 0; k < 4; k++) {
        REJECT(t, s, ccl_broadcast(in, out, 8, CCL_FLOAT32, bad_root[k], c));
        REJECT(t, s, ccl_reduce(in, out, 8, CCL_FLOAT32, CCL_SUM, bad_root[k], c));
        REJECT(t, s, ccl_send(in, 8, CCL_FLOAT32, bad_root[k], c));
        REJECT(t, s, ccl_recv(out, 8, CCL_FLOAT32, bad_root[k], c));
    }
    expect_still_works(t, s, "roots and peers out of range");
}

static void bad_counts(struct harness_tally *t, struct state *s) {
    ccl_comm_t *c = s->comm;
    float *in = s->in, *out = s->out;
    size_t n = (size_t)s->nranks;
    /* count * dtype size overflows */
    REJECT(t, s, ccl_all_reduce(in, out, SIZE_MAX, CCL_FLOAT32, CCL_SUM, c));
    REJECT(t, s, ccl_all_reduce(in, out, SIZE_MAX / 2, CCL_FLOAT64, CCL_SUM, c));
    REJECT(t, s, ccl_broadcast(in, out, SIZE_MAX, CCL_INT32, 0, c));
    REJECT(t, s, ccl_reduce(in, out, SIZE_MAX / 4 + 1, CCL_FLOAT32, CCL_MAX, 0, c));
    REJECT(t, s, ccl_send(in, SIZE_MAX, CCL_FLOAT64, (s->rank + 1) % s->nranks, c));
    REJECT(t, s, ccl_recv(out, SIZE_MAX, CCL_FLOAT64, (s->rank + 1) % s->nranks, c));
    /* bytes fit, but times nranks they do not */
    size_t per_rank = SIZE_MAX / n + 1;
    REJECT(t, s, ccl_all_gather(in, out, per_rank, CCL_INT8, c));
    REJECT(t, s, ccl_reduce_scatter(in, out, per_rank, CCL_INT8, CCL_SUM, c));
    REJECT(t, s, ccl_all_to_all(in, out, per_rank, CCL_INT8, c));
    REJECT(t, s, ccl_all_gather(in, out, SIZE_MAX / 4 / n + 1, CCL_FLOAT32, c));
    /* all_to_all_v: a displacement whose byte offset does not fit, alone
     * (count 1) or with a count that takes the block's end past it, on
     * either side; every rank refuses alike, before anything moves. */
    size_t ones[HARNESS_MAX_RANKS], packed[HARNESS_MAX_RANKS], huge[HARNESS_MAX_RANKS], edge[HARNESS_MAX_RANKS];
    const size_t most = (size_t)INT64_MAX / sizeof(float);
    for (size_t p = 0; p < n; p++) ones[p] = 1, packed[p] = p, huge[p] = most + 1 + p, edge[p] = most;
    REJECT(t, s, ccl_all_to_all_v(in, ones, huge, out, ones, packed, CCL_FLOAT32, c));
    REJECT(t, s, ccl_all_to_all_v(in, ones, packed, out, ones, huge, CCL_FLOAT32, c));
    REJECT(t, s, ccl_all_to_all_v(in, ones, edge, out, ones, packed, CCL_FLOAT32, c));
    for (size_t p = 0; p < n; p++) huge[p] = SIZE_MAX - p;
    REJECT(t, s, ccl_all_to_all_v(in, ones, huge, out, ones, packed, CCL_FLOAT32, c));
    expect_still_works(t, s, "overflowing counts");
}

static void bad_handles(struct harness_tally *t, struct state *s) {
    float *in = s->in, *out = s->out;
    ccl_comm_t *saved = s->comm;
    s->comm = NULL; /* no last error to look at for these */
    REJECT(t, s, ccl_all_reduce(in, out, 8, CCL_FLOAT32, CCL_SUM, NULL));
    REJECT(t, s, ccl_reduce_scatter(in, out, 8, CCL_FLOAT32, CCL_SUM, NULL));
    REJECT(t, s, ccl_all_gather(in, out, 8, CCL_FLOAT32, NULL));
    REJECT(t, s, ccl_broadcast(in, out, 8, CCL_FLOAT32, 0, NULL));
    REJECT(t, s, ccl_reduce(in, out, 8, CCL_FLOAT32, CCL_SUM, 0, NULL));
    REJECT(t, s, ccl_all_to_all(in, out, 8, CCL_FLOAT32, NULL));
    REJECT(t, s, ccl_barrier(NULL));
    REJECT(t, s, ccl_send(in, 8, CCL_FLOAT32, 0, NULL));
    REJECT(t, s, ccl_recv(out, 8, CCL_FLOAT32, 0, NULL));
    int r = -5;
    REJECT(t, s, ccl_comm_rank(NULL, &r));
    REJECT(t, s, ccl_comm_size(NULL, &r));
    EXPECT(t, r == -5, "ccl_comm_rank/size(NULL) wrote its output");
    REJECT(t, s, ccl_comm_abort(NULL));
    ccl_comm_t *nc = NULL;
    REJECT(t, s, ccl_comm_split(NULL, 0, 0, &nc));
    REJECT(t, s, ccl_comm_create_group(NULL, &r, 1, &nc));
    EXPECT(t, ccl_comm_last_error(NULL) != NULL, "ccl_comm_last_error(NULL) returned NULL");
    /* A pointer that was never a communicator. */
    ccl_comm_t *foreign = (ccl_comm_t *)s->out;
    REJECT(t, s, ccl_comm_rank(foreign, &r));
    REJECT(t, s, ccl_barrier(foreign));
    /* NULL output pointers */
    ccl_request_t *req = NULL;
    REJECT(t, s, ccl_all_reduce_async(in, out, 8, CCL_FLOAT32, CCL_SUM, NULL, &req));
    s->comm = saved;
    ccl_comm_t *c = saved;
    REJECT(t, s, ccl_comm_rank(c, NULL));
    REJECT(t, s, ccl_comm_size(c, NULL));
    REJECT(t, s, ccl_all_reduce_async(in, out, 8, CCL_FLOAT32, CCL_SUM, c, NULL));
    REJECT(t, s, ccl_reduce_scatter_async(in, out, 8, CCL_FLOAT32, CCL_SUM, c, NULL));
    REJECT(t, s, ccl_all_gather_async(in, out, 8, CCL_FLOAT32, c, NULL));
    REJECT(t, s, ccl_broadcast_async(in, out, 8, CCL_FLOAT32, 0, c, NULL));
    REJECT(t, s, ccl_reduce_async(in, out, 8, CCL_FLOAT32, CCL_SUM, 0, c, NULL));
    REJECT(t, s, ccl_all_to_all_async(in, out, 8, CCL_FLOAT32, c, NULL));
    REJECT(t, s, ccl_barrier_async(c, NULL));
    REJECT(t, s, ccl_send_async(in, 8, CCL_FLOAT32, (s->rank + 1) % s->nranks, c, NULL));
    REJECT(t, s, ccl_recv_async(out, 8, CCL_FLOAT32, (s->rank + 1) % s->nranks, c, NULL));
    REJECT(t, s, ccl_comm_split(c, 0, 0, NULL));
    REJECT(t, s, ccl_comm_create_group(c, &s->rank, 1, NULL));
    int done = 0;
    s->comm = NULL;
    REJECT(t, s, ccl_test(NULL, &done));
    REJECT(t, s, ccl_wait(NULL));
    s->comm = saved;
    /* An async request tested with a NULL flag, then waited properly. */
    req = NULL;
    if (EXPECT_OK(t, ccl_barrier_async(c, &req)) == CCL_OK && req) {
        ccl_status_t st = ccl_test(req, NULL);
        EXPECT(t, st == CCL_ERR_INVALID_ARGUMENT || st == CCL_ERR_INVALID_USAGE, "ccl_test(req, NULL) returned %s",
               ccl_status_string(st));
        EXPECT_OK(t, ccl_wait(req));
    }
    /* Unbalanced group end. */
    s->comm = NULL;
    REJECT(t, s, ccl_group_end());
    s->comm = saved;
    expect_still_works(t, s, "NULL handles and an unbalanced group end");
}

/* ccl_comm_register where no transport registers memory (shm, tcp): a
 * handle all the same, transfers in the memory work, bad arguments and
 * handles are refused; a handle left registered is released by destroy
 * (the sanitizer run would report it otherwise). */
static void registration(struct harness_tally *t, struct state *s) {
    void *h = NULL, *left = NULL;
    int dummy;
    ccl_status_t st = ccl_comm_register(s->comm, s->in, sizeof s->in, &h);
    EXPECT(t, st == CCL_OK && h, "register on %s: %s", "a comm without RDMA", ccl_status_string(st));
    int to = (s->rank + 1) % s->nranks, from = (s->rank + s->nranks - 1) % s->nranks;
    for (int i = 0; i < BUF_ELEMS; i++) s->in[i] = (float)(s->rank * 1000 + i);
    st = ccl_group_start();
    if (st == CCL_OK) st = ccl_send(s->in, BUF_ELEMS, CCL_FLOAT32, to, s->comm);
    if (st == CCL_OK) st = ccl_recv(s->in + BUF_ELEMS, BUF_ELEMS, CCL_FLOAT32, from, s->comm);
    ccl_status_t end = ccl_group_end();
    EXPECT(t, st == CCL_OK && end == CCL_OK, "send/recv in registered memory: %s/%s", ccl_status_string(st),
           ccl_status_string(end));
    for (int i = 0; i < BUF_ELEMS && st == CCL_OK; i++)
        if (s->in[BUF_ELEMS + i] != (float)(from * 1000 + i)) {
            harness_fail(t, __FILE__, __LINE__, "element %d from rank %d: %g", i, from, s->in[BUF_ELEMS + i]);
            break;
        }
    EXPECT(t, ccl_comm_register(s->comm, NULL, 64, &left) == CCL_ERR_INVALID_ARGUMENT, "register of NULL");
    EXPECT(t, ccl_comm_register(s->comm, s->out, 0, &left) == CCL_ERR_INVALID_ARGUMENT, "register of 0 bytes");
    EXPECT(t, ccl_comm_register(s->comm, s->out, 64, NULL) == CCL_ERR_INVALID_ARGUMENT, "register without handle");
    EXPECT(t, ccl_comm_register(NULL, s->out, 64, &left) == CCL_ERR_INVALID_ARGUMENT, "register on NULL comm");
    EXPECT(t, ccl_comm_deregister(s->comm, h) == CCL_OK, "deregister");
    st = ccl_comm_deregister(s->comm, h);
    EXPECT(t, st == CCL_ERR_INVALID_ARGUMENT && strstr(ccl_comm_last_error(s->comm), "not a live handle"),
           "a second deregister returned %s: '%s'", ccl_status_string(st), ccl_comm_last_error(s->comm));
    EXPECT(t, ccl_comm_deregister(s->comm, &dummy) == CCL_ERR_INVALID_ARGUMENT, "deregister of a stray pointer");
    EXPECT(t, ccl_comm_register(s->comm, s->out, sizeof s->out, &left) == CCL_OK && left, "register left for destroy");
}

static void destroyed_comm(struct harness_tally *t, struct state *s) {
    ccl_comm_t *dup = NULL;
    if (EXPECT_OK(t, ccl_comm_split(s->comm, 0, s->rank, &dup)) != CCL_OK || !dup) return;
    EXPECT_OK(t, ccl_comm_destroy(dup));
    ccl_comm_t *saved = s->comm;
    s->comm = NULL; /* a destroyed communicator has no last error to read */
    int r = -5;
    EXPECT_STATUS(t, CCL_ERR_INVALID_USAGE, ccl_all_reduce(s->in, s->out, 8, CCL_FLOAT32, CCL_SUM, dup));
    EXPECT_STATUS(t, CCL_ERR_INVALID_USAGE, ccl_barrier(dup));
    EXPECT_STATUS(t, CCL_ERR_INVALID_USAGE, ccl_comm_rank(dup, &r));
    EXPECT_STATUS(t, CCL_ERR_INVALID_USAGE, ccl_comm_destroy(dup));
    EXPECT_STATUS(t, CCL_ERR_INVALID_USAGE, ccl_comm_abort(dup));
    EXPECT(t, r == -5, "ccl_comm_rank on a destroyed communicator wrote its output");
    s->comm = saved;
    expect_still_works(t, s, "calls on a destroyed communicator");
}

/* A communicator destroyed between a group's start and end, after calls
 * on it were recorded (one blocking, one async, one on the live
 * communicator too): the end reports the lost calls, the request completes
 * with the same status, and nothing touches the freed communicator. */
static void destroyed_inside_group(struct harness_tally *t, struct state *s) {
    ccl_comm_t *dup = NULL;
    if (EXPECT_OK(t, ccl_comm_split(s->comm, 0, s->rank, &dup)) != CCL_OK || !dup) return;
    ccl_request_t *req = NULL;
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8], z[8];
    EXPECT_OK(t, ccl_group_start());
    EXPECT_OK(t, ccl_all_reduce(x, y, 8, CCL_FLOAT32, CCL_SUM, dup));
    EXPECT_OK(t, ccl_barrier_async(dup, &req));
    EXPECT_OK(t, ccl_all_reduce(x, z, 8, CCL_FLOAT32, CCL_MAX, s->comm));
    EXPECT_OK(t, ccl_comm_destroy(dup));
    EXPECT_STATUS(t, CCL_ERR_INVALID_USAGE, ccl_group_end());
    if (req) EXPECT_STATUS(t, CCL_ERR_INVALID_USAGE, ccl_wait(req));
    for (int i = 0; i < 8; i++)
        EXPECT(t, z[i] == x[i], "the live communicator's call in that group: z[%d] = %g, expected %g", i, z[i], x[i]);
    expect_still_works(t, s, "a communicator destroyed inside a group");
}

/* A request waited twice, or tested after its wait. */
static void request_reused(struct harness_tally *t, struct state *s) {
    ccl_request_t *req = NULL;
    if (EXPECT_OK(t, ccl_barrier_async(s->comm, &req)) != CCL_OK || !req) return;
    EXPECT_OK(t, ccl_wait(req));
    int done = -1;
    EXPECT_STATUS(t, CCL_ERR_INVALID_USAGE, ccl_wait(req));
    EXPECT_STATUS(t, CCL_ERR_INVALID_USAGE, ccl_test(req, &done));
    EXPECT(t, done == -1, "ccl_test on a waited request wrote its flag");
    expect_still_works(t, s, "a request waited twice");
}

static int body_bad_args(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    struct state *s = state_new(comm, rank, nranks);
    if (!s) return 1;
    bad_buffers(&t, s);
    bad_types(&t, s);
    bad_ranks(&t, s);
    bad_counts(&t, s);
    bad_handles(&t, s);
    registration(&t, s);
    destroyed_comm(&t, s);
    destroyed_inside_group(&t, s);
    request_reused(&t, s);
    if (rank == 0) fprintf(stderr, "[args] %d ranks: last error example: \"%s\"\n", nranks, ccl_comm_last_error(comm));
    free(s);
    return t.fails;
}

static const char *const arg_transports[] = {"shm", "tcp"};

START_TEST(bad_arguments_on_a_working_comm) {
    struct harness_run run = {.nranks = 3, .transport = arg_transports[_i], .body = body_bad_args, .deadline_s = 120};
    HARNESS_RUN_OK(&run);
}
END_TEST

/* ---- without a communicator ---- */

START_TEST(init_with_bad_arguments) {
    setenv("CCL_TIMEOUT", "5", 1);
    ccl_unique_id_t id;
    ck_assert_int_eq(ccl_get_unique_id(&id), CCL_OK);
    ck_assert_int_eq(ccl_get_unique_id(NULL), CCL_ERR_INVALID_ARGUMENT);
    struct {
        int nranks, rank, null_comm;
    } cases[] = {{0, 0, 0}, {-1, 0, 0}, {INT32_MIN, 0, 0}, {2, 2, 0}, {2, -1, 0}, {4, 100, 0}, {2, 0, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ccl_comm_t *comm = NULL;
        double t0 = harness_now();
        ccl_status_t st = ccl_comm_init_rank(cases[k].null_comm ? NULL : &comm, cases[k].nranks, id, cases[k].rank);
        double took = harness_now() - t0;
        ck_assert_msg(st == CCL_ERR_INVALID_ARGUMENT || st == CCL_ERR_INVALID_USAGE,
                      "init_rank(nranks %d, rank %d%s) returned %s", cases[k].nranks, cases[k].rank,
                      cases[k].null_comm ? ", NULL comm" : "", ccl_status_string(st));
        ck_assert_msg(comm == NULL, "a failed init_rank left a communicator pointer");
        const char *why = ccl_comm_last_error(NULL);
        ck_assert_msg(strstr(why, "ccl_comm_init_rank: ") != NULL,
                      "init_rank(nranks %d, rank %d): ccl_comm_last_error(NULL) says \"%s\"", cases[k].nranks,
                      cases[k].rank, why);
        ck_assert_msg(took < 2.0, "rejecting bad init arguments took %.1f s", took);
    }
    /* An id that ccl_get_unique_id never made: refused, not a long wait. */
    ccl_unique_id_t junk;
    memset(&junk, 0, sizeof junk);
    ccl_comm_t *comm = NULL;
    double t0 = harness_now();
    ccl_status_t st = ccl_comm_init_rank(&comm, 1, junk, 0);
    ck_assert_msg(st < 0, "init_rank with an all-zero unique id returned %s", ccl_status_string(st));
    ck_assert_msg(strstr(ccl_comm_last_error(NULL), "not made by ccl_get_unique_id") != NULL,
                  "a foreign id: ccl_comm_last_error(NULL) says \"%s\"", ccl_comm_last_error(NULL));
    ck_assert_msg(harness_now() - t0 < 10.0, "init_rank with an all-zero unique id took %.1f s", harness_now() - t0);
}
END_TEST

START_TEST(names_and_strings) {
    struct {
        ccl_status_t st;
        const char *text;
    } codes[] = {
#define CODE_ENTRY_(name, value, text) {name, text},
        CCL_STATUS_LIST(CODE_ENTRY_)
#undef CODE_ENTRY_
    };
    size_t ncodes = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < ncodes; i++) {
        const char *s = ccl_status_string(codes[i].st);
        ck_assert_msg(s != NULL && strcmp(s, codes[i].text) == 0, "ccl_status_string(%d) = \"%s\", expected \"%s\"",
                      (int)codes[i].st, s ? s : "(null)", codes[i].text);
    }
    const int unknown[] = {-10, -1000, 2, 99, INT32_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *s = ccl_status_string((ccl_status_t)unknown[i]);
        ck_assert_msg(s != NULL && s[0] != '\0', "ccl_status_string(%d) gave no text", unknown[i]);
    }
    const size_t sizes[CCL_NUM_DTYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    for (int d = 0; d < CCL_NUM_DTYPES; d++) {
        ck_assert_uint_eq(ccl_dtype_size((ccl_dtype_t)d), sizes[d]);
        const char *name = ccl_dtype_name((ccl_dtype_t)d);
        ck_assert_msg(name && name[0], "dtype %d has no name", d);
        for (int e = 0; e < d; e++)
            ck_assert_msg(strcmp(name, ccl_dtype_name((ccl_dtype_t)e)) != 0, "dtypes %d and %d share a name", d, e);
    }
    ck_assert_uint_eq(ccl_dtype_size(CCL_NUM_DTYPES), 0);
    ck_assert_uint_eq(ccl_dtype_size((ccl_dtype_t)-1), 0);
    ck_assert_ptr_nonnull(ccl_dtype_name((ccl_dtype_t)-1));
    ck_assert_ptr_nonnull(ccl_dtype_name(CCL_NUM_DTYPES));
    for (int o = 0; o < CCL_NUM_OPS; o++) {
        const char *name = ccl_op_name((ccl_op_t)o);
        ck_assert_msg(name && name[0], "op %d has no name", o);
        for (int e = 0; e < o; e++)
            ck_assert_msg(strcmp(name, ccl_op_name((ccl_op_t)e)) != 0, "ops %d and %d share a name", o, e);
    }
    ck_assert_ptr_nonnull(ccl_op_name(CCL_NUM_OPS));
    ck_assert_ptr_nonnull(ccl_op_name((ccl_op_t)-3));
    ck_assert_int_eq(ccl_version(), CCL_VERSION_CODE);
}
END_TEST

/* ---- counts that differ between ranks ---- */

#define MISMATCH_COUNT 1000
/* Counts each case gives ranks 0 and 2 (rank 1: one more): past the
 * direct path's tiny all-reduces, and within them (algo/lines.c), where
 * the identity in the line the peers read tells the counts apart at once. */
static const size_t mismatch_counts[] = {MISMATCH_COUNT, 10};

static int body_mismatch(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    struct harness_tally t = {rank, 0};
    struct tbuf in, out;
    size_t base = *(const size_t *)arg;
    if (tbuf_alloc(&in, (MISMATCH_COUNT + 1) * 4) || tbuf_alloc(&out, (MISMATCH_COUNT + 1) * 4)) return 1;
    size_t count = base + (rank == 1);
    float *x = tbuf_arm(&in, count * 4, 0), *y = tbuf_arm(&out, count * 4, 0);
    for (size_t i = 0; i < count; i++) x[i] = 1.0f;
    double t0 = harness_now();
    ccl_status_t st = ccl_all_reduce(x, y, count, CCL_FLOAT32, CCL_SUM, comm);
    EXPECT(&t, st < 0, "all_reduce with count %zu here and %zu on rank 1 returned %s", count, base + 1,
           ccl_status_string(st));
    /* In the lines, every rank reads every peer's identity: no timeout. */
    if (base < MISMATCH_COUNT)
        EXPECT(&t, harness_now() - t0 < 5.0 && st != CCL_ERR_TIMEOUT, "the tiny all-reduce took %.1f s to fail (%s)",
               harness_now() - t0, ccl_status_string(st));
    EXPECT(&t, st >= 0 || ccl_comm_last_error(comm)[0] != '\0', "no last error after %s", ccl_status_string(st));
    EXPECT(&t, tbuf_guards_ok(&out) && tbuf_guards_ok(&in), "bytes written outside the buffers");
    if (rank == 0)
        fprintf(stderr, "[args] mismatched counts %zu and %zu: rank 0 got %s after %.3f s: \"%s\"\n", base,
                base + 1, ccl_status_string(st), harness_now() - t0, ccl_comm_last_error(comm));
    tbuf_free(&in);
    tbuf_free(&out);
    return t.fails;
}

START_TEST(counts_differ_between_ranks) {
    struct harness_run run = {
        .nranks = 3,
        .transport = arg_transports[_i % 2],
        .body = body_mismatch,
        .arg = (void *)&mismatch_counts[_i / 2],
        .ccl_timeout = "10",
        .deadline_s = 60,
        .lenient_destroy = 1,
    };
    HARNESS_RUN_OK(&run);
}
END_TEST

/* ---- ccl_comm_init_rank_config ---- */

#define CONFIG_TIMEOUT_S 1.0

/* A communicator made with a 1 s timeout (its id passed over the harness's
 * communicator): rank 0's all-reduce, which rank 1 never joins, returns
 * CCL_ERR_TIMEOUT after about that long, not CCL_TIMEOUT's 60 s. Bad
 * configs are refused before any rendezvous. */
static int body_config(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    ccl_unique_id_t id;
    util_shared_id(&t, comm, &id);
    ccl_comm_t *c = NULL;
    ccl_config_t bad = CCL_CONFIG_INIT;
    bad.timeout_s = -1;
    EXPECT(&t, ccl_comm_init_rank_config(&c, nranks, id, rank, &bad) == CCL_ERR_INVALID_ARGUMENT && !c,
           "a negative timeout was accepted");
    bad = (ccl_config_t)CCL_CONFIG_INIT;
    bad.size = 0;
    EXPECT(&t, ccl_comm_init_rank_config(&c, nranks, id, rank, &bad) == CCL_ERR_INVALID_ARGUMENT && !c,
           "config.size 0 was accepted");
    ccl_config_t cfg = CCL_CONFIG_INIT;
    cfg.timeout_s = CONFIG_TIMEOUT_S;
    if (EXPECT_OK(&t, ccl_comm_init_rank_config(&c, nranks, id, rank, &cfg)) != CCL_OK) return t.fails;
    float x = 1, y = 0;
    if (rank == 0) {
        double t0 = harness_now();
        ccl_status_t st = ccl_all_reduce(&x, &y, 1, CCL_FLOAT32, CCL_SUM, c);
        double took = harness_now() - t0;
        EXPECT(&t, st == CCL_ERR_TIMEOUT, "an all-reduce nobody joined returned %s", ccl_status_string(st));
        EXPECT(&t, took > 0.8 * CONFIG_TIMEOUT_S && took < 4 * CONFIG_TIMEOUT_S,
               "timed out after %.2f s with a %.1f s timeout", took, CONFIG_TIMEOUT_S);
        fprintf(stderr, "[args] config timeout %.1f s: all_reduce returned %s after %.2f s\n", CONFIG_TIMEOUT_S,
                ccl_status_string(st), took);
    }
    /* Rank 1 leaves after rank 0 gave up: wait for it on the outer communicator. */
    EXPECT_OK(&t, ccl_barrier(comm));
    ccl_comm_destroy(c);
    return t.fails;
}

START_TEST(init_with_config) {
    struct harness_run run = {.nranks = 2, .transport = "shm", .body = body_config, .deadline_s = 60};
    HARNESS_RUN_OK(&run);
}
END_TEST

/* ---- CCL_CHECK=1: ranks that disagree ----
 * Every scenario: one rank (or two) calls with other arguments than the
 * rest. Every rank must get CCL_ERR_INVALID_USAGE at once, with a sentence
 * naming two ranks and both calls, no buffer written, and the
 * communicator still working afterwards. Every call fits the buffers, so
 * a check that let one through could not write out of bounds. */

struct disagreement {
    const char *what;
    int odd_rank; /* the rank that calls differently */
    const char *said; /* in every rank's last error */
    const char *also; /* too; NULL: "rank 0 called" */
};

static const struct disagreement disagreements[] = {
    {"broadcast roots differ", 2, "rank 2 called broadcast", NULL},
    {"reduce roots differ", 1, "rank 1 called reduce", NULL},
    {"count 0 against 500", 1, "(count 0, float32, sum)", NULL},
    {"dtypes differ", 2, "(count 500, int32, sum)", NULL},
    {"ops differ", 1, "(count 500, float32, max)", NULL},
    {"another collective", 2, "rank 2 called all_gather", NULL},
    /* rank 0 believes it is the root, the others that rank 1 is */
    {"two ranks believe they are the root", 0, "rank 1 called broadcast", NULL},
    {"scatter roots differ", 2, "rank 2 called scatter", NULL},
    {"gather roots differ", 1, "rank 1 called gather", NULL},
    /* rank 1 receives nothing from rank 0, which sends it 4 elements */
    {"all_to_all_v counts differ", 1, "rank 0 sends 4 elements to", "receives 0"},
};

#define FIRST_EXCHANGE 7 /* the scenarios from here on are gather, scatter and all_to_all_v */
#define EXCHANGE_COUNT 100 /* scatter and gather: 3 blocks fit the buffers */

static ccl_status_t disagreeing_all_to_all_v(int odd, float *in, float *out, ccl_comm_t *comm) {
    int n = 0;
    if (ccl_comm_size(comm, &n) != CCL_OK || n > 3) return CCL_ERR_INTERNAL;
    size_t counts[3], displs[3], recvcounts[3];
    for (int p = 0; p < n; p++) counts[p] = recvcounts[p] = 4, displs[p] = 4 * (size_t)p;
    if (odd) recvcounts[0] = 0;
    return ccl_all_to_all_v(in, counts, displs, out, recvcounts, displs, CCL_FLOAT32, comm);
}

static ccl_status_t call_disagreeing(int which, int odd, float *in, float *out, ccl_comm_t *comm) {
    switch (which) {
    case 0: return ccl_broadcast(in, out, 500, CCL_FLOAT32, odd ? 1 : 0, comm);
    case 1: return ccl_reduce(in, out, 500, CCL_FLOAT32, CCL_SUM, odd ? 2 : 0, comm);
    case 2: return ccl_all_reduce(in, out, odd ? 0 : 500, CCL_FLOAT32, CCL_SUM, comm);
    case 3: return ccl_all_reduce(in, out, 500, odd ? CCL_INT32 : CCL_FLOAT32, CCL_SUM, comm);
    case 4: return ccl_all_reduce(in, out, 500, CCL_FLOAT32, odd ? CCL_MAX : CCL_SUM, comm);
    case 5:
        return odd ? ccl_all_gather(in, out, 150, CCL_FLOAT32, comm)
                   : ccl_all_reduce(in, out, 500, CCL_FLOAT32, CCL_SUM, comm);
    case 6: return ccl_broadcast(in, out, 500, CCL_FLOAT32, odd ? 0 : 1, comm);
    case 7: return ccl_scatter(in, out, EXCHANGE_COUNT, CCL_FLOAT32, odd ? 1 : 0, comm);
    case 8: return ccl_gather(in, out, EXCHANGE_COUNT, CCL_FLOAT32, odd ? 2 : 0, comm);
    default: return disagreeing_all_to_all_v(odd, in, out, comm);
    }
}

static int body_check_mode(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    struct state *s = state_new(comm, rank, nranks);
    if (!s) return 1;
    for (int k = 0; k < (int)(sizeof disagreements / sizeof disagreements[0]); k++) {
        const struct disagreement *d = &disagreements[k];
        arm(s);
        double t0 = harness_now();
        ccl_status_t st = call_disagreeing(k, rank == d->odd_rank, s->in, s->out, comm);
        const char *why = ccl_comm_last_error(comm);
        EXPECT(&t, st == CCL_ERR_INVALID_USAGE, "%s: returned %s, expected %s", d->what, ccl_status_string(st),
               ccl_status_string(CCL_ERR_INVALID_USAGE));
        const char *also = d->also ? d->also : "rank 0 called";
        EXPECT(&t, strstr(why, d->said) && strstr(why, also), "%s: the error \"%s\" does not say \"%s\" and \"%s\"",
               d->what, why, d->said, also);
        EXPECT(&t, harness_now() - t0 < 5.0, "%s: took %.1f s to fail", d->what, harness_now() - t0);
        EXPECT(&t, memcmp(s->out, s->out_saved, sizeof s->out) == 0, "%s: wrote the output", d->what);
        if (rank == 0) fprintf(stderr, "[args] CCL_CHECK, %s: \"%s\"\n", d->what, why);
        expect_still_works(&t, s, d->what);
    }
    free(s);
    return t.fails;
}

START_TEST(check_mode_names_disagreement) {
    struct harness_run run = {
        .nranks = 3,
        .transport = arg_transports[_i],
        .body = body_check_mode,
        .env = "CCL_CHECK=1",
        .ccl_timeout = "30",
        .deadline_s = 90,
    };
    HARNESS_RUN_OK(&run);
}
END_TEST

/* ---- the same disagreements without CCL_CHECK ----
 * What the data flow proves is caught always: each chunk carries its
 * call's identity. Where no chunk can prove it within the call (two ranks
 * that both believe they are a broadcast's root send and never receive),
 * the next call finds the stale chunk; where a rank is simply not there
 * (it called with count 0 and went on), the others' timeout names it. So
 * no rank may come through the call and the next one with CCL_OK. */

#define NO_CHECK_TIMEOUT "3"
#define NSCENARIOS ((int)(sizeof disagreements / sizeof disagreements[0]))

static int body_no_check(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    int k = *(const int *)arg;
    const struct disagreement *d = &disagreements[k];
    struct harness_tally t = {rank, 0};
    struct state *s = state_new(comm, rank, nranks);
    if (!s) return 1;
    arm(s);
    double t0 = harness_now();
    ccl_status_t st = call_disagreeing(k, rank == d->odd_rank, s->in, s->out, comm);
    /* After an exchange, the same call with every rank agreeing: it must
     * not take the last call's leftover block as its own. */
    ccl_status_t next = st != CCL_OK ? st : k >= FIRST_EXCHANGE ? call_disagreeing(k, 0, s->in, s->out, comm)
                                                                : ccl_barrier(comm);
    const char *why = ccl_comm_last_error(comm);
    EXPECT(&t, next != CCL_OK, "%s: the call returned %s and the next one %s: the disagreement went unnoticed",
           d->what, ccl_status_string(st), ccl_status_string(next));
    EXPECT(&t, harness_now() - t0 < 15.0, "%s: took %.1f s to fail", d->what, harness_now() - t0);
    fprintf(stderr, "[args] without CCL_CHECK, %s: rank %d: %s in the call%s after %.2f s: \"%s\"\n", d->what, rank,
            ccl_status_string(st), st == CCL_OK ? ", failed in the next" : "", harness_now() - t0, why);
    free(s);
    return t.fails;
}

START_TEST(disagreement_without_check) {
    static int which[2 * NSCENARIOS];
    which[_i] = _i % NSCENARIOS;
    struct harness_run run = {
        .nranks = 3,
        .transport = arg_transports[_i / NSCENARIOS],
        .body = body_no_check,
        .arg = &which[_i],
        .ccl_timeout = NO_CHECK_TIMEOUT,
        .lenient_destroy = 1,
        .deadline_s = 60,
    };
    HARNESS_RUN_OK(&run);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("args");
    util_add_loop_case(s, "bad_arguments_on_a_working_comm", bad_arguments_on_a_working_comm, 2, 150);
    TCase *tc = tcase_create("local");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, init_with_bad_arguments);
    tcase_add_test(tc, names_and_strings);
    suite_add_tcase(s, tc);
    util_add_loop_case(s, "counts_differ_between_ranks", counts_differ_between_ranks, 4, 90);
    tc = tcase_create("init_with_config");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, init_with_config);
    suite_add_tcase(s, tc);
    util_add_loop_case(s, "check_mode_names_disagreement", check_mode_names_disagreement, 2, 120);
    util_add_loop_case(s, "disagreement_without_check", disagreement_without_check, 2 * NSCENARIOS, 90);
    return s;
}

int main(void) { return harness_main(suite()); }
