/* ctest: TIMEOUT 600 */
/*
 * Non-blocking twins, on the short configuration list: every _async call
 * with ccl_wait and checked results; ccl_test polling (CCL_INPROGRESS until
 * done, then the request's status, and the request stays valid until
 * ccl_wait); several outstanding requests that must complete in issue
 * order; and overlap: a large async all_reduce while the caller computes.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"

#define ASYNC_COUNT 10007
#define POLL_DEADLINE_S 120.0

/* Per-rank int32 inputs whose SUM over ranks has a closed form. */
static int32_t in_value(int rank, size_t i) { return (int32_t)(i % 977) + 1000 * rank; }
static int32_t sum_value(int nranks, size_t i) {
    return (int32_t)(i % 977) * nranks + 1000 * (nranks * (nranks - 1) / 2);
}

static void fill_inputs(int32_t *buf, int rank, size_t first, size_t n) {
    for (size_t i = 0; i < n; i++) buf[i] = in_value(rank, first + i);
}

static size_t count_wrong_sums(const int32_t *buf, int nranks, size_t first, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += buf[i] != sum_value(nranks, first + i);
    return bad;
}

/* Waits for req and checks it finished with CCL_OK. */
static int wait_ok(struct harness_tally *t, const char *what, ccl_request_t *req) {
    ccl_status_t st = ccl_wait(req);
    EXPECT(t, st == CCL_OK, "%s: ccl_wait returned %s", what, ccl_status_string(st));
    return st == CCL_OK;
}

/* ---- every twin once ---- */

static int body_each_twin(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    size_t n = ASYNC_COUNT, total = n * (size_t)nranks;
    int32_t *in = malloc(total * 4), *out = malloc(total * 4);
    ccl_request_t *req = NULL;
    if (!in || !out) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    /* all_reduce */
    fill_inputs(in, rank, 0, n);
    if (EXPECT_OK(&t, ccl_all_reduce_async(in, out, n, CCL_INT32, CCL_SUM, comm, &req)) == CCL_OK &&
        wait_ok(&t, "all_reduce_async", req))
        EXPECT(&t, count_wrong_sums(out, nranks, 0, n) == 0, "all_reduce_async: wrong sums");
    /* reduce_scatter */
    fill_inputs(in, rank, 0, total);
    if (EXPECT_OK(&t, ccl_reduce_scatter_async(in, out, n, CCL_INT32, CCL_SUM, comm, &req)) == CCL_OK &&
        wait_ok(&t, "reduce_scatter_async", req))
        EXPECT(&t, count_wrong_sums(out, nranks, (size_t)rank * n, n) == 0, "reduce_scatter_async: wrong sums");
    /* all_gather */
    fill_inputs(in, rank, 0, n);
    if (EXPECT_OK(&t, ccl_all_gather_async(in, out, n, CCL_INT32, comm, &req)) == CCL_OK &&
        wait_ok(&t, "all_gather_async", req)) {
        size_t bad = 0;
        for (int p = 0; p < nranks; p++)
            for (size_t i = 0; i < n; i++) bad += out[(size_t)p * n + i] != in_value(p, i);
        EXPECT(&t, bad == 0, "all_gather_async: %zu elements wrong", bad);
    }
    /* broadcast from the last rank */
    int root = nranks - 1;
    fill_inputs(in, rank, 0, n);
    memset(out, 0, n * 4);
    if (EXPECT_OK(&t, ccl_broadcast_async(in, out, n, CCL_INT32, root, comm, &req)) == CCL_OK &&
        wait_ok(&t, "broadcast_async", req)) {
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += out[i] != in_value(root, i);
        EXPECT(&t, bad == 0, "broadcast_async: %zu elements wrong", bad);
    }
    /* reduce to rank 1 */
    root = 1 % nranks;
    fill_inputs(in, rank, 0, n);
    memset(out, 0xcd, n * 4);
    if (EXPECT_OK(&t, ccl_reduce_async(in, out, n, CCL_INT32, CCL_SUM, root, comm, &req)) == CCL_OK &&
        wait_ok(&t, "reduce_async", req) && rank == root)
        EXPECT(&t, count_wrong_sums(out, nranks, 0, n) == 0, "reduce_async: wrong sums on the root");
    /* all_to_all: block p of rank r holds r * 100 + p */
    for (int p = 0; p < nranks; p++)
        for (size_t i = 0; i < n; i++) in[(size_t)p * n + i] = rank * 100 + p + (int32_t)i * 7;
    if (EXPECT_OK(&t, ccl_all_to_all_async(in, out, n, CCL_INT32, comm, &req)) == CCL_OK &&
        wait_ok(&t, "all_to_all_async", req)) {
        size_t bad = 0;
        for (int p = 0; p < nranks; p++)
            for (size_t i = 0; i < n; i++) bad += out[(size_t)p * n + i] != p * 100 + rank + (int32_t)i * 7;
        EXPECT(&t, bad == 0, "all_to_all_async: %zu elements wrong", bad);
    }
    /* barrier */
    if (EXPECT_OK(&t, ccl_barrier_async(comm, &req)) == CCL_OK) wait_ok(&t, "barrier_async", req);
    /* send/recv in pairs (0,1), (2,3)...: the lower rank sends first. Large
     * enough not to fit in buffering, so issue order matters. */
    int partner = rank ^ 1;
    if (partner < nranks) {
        size_t big = total; /* nranks * ASYNC_COUNT int32 */
        int32_t *snd = in, *rcv = out;
        for (size_t i = 0; i < big; i++) snd[i] = rank * 31 + (int32_t)i;
        memset(rcv, 0, big * 4);
        ccl_request_t *rs = NULL, *rr = NULL;
        if (rank < partner) {
            EXPECT_OK(&t, ccl_send_async(snd, big, CCL_INT32, partner, comm, &rs));
            EXPECT_OK(&t, ccl_recv_async(rcv, big, CCL_INT32, partner, comm, &rr));
        } else {
            EXPECT_OK(&t, ccl_recv_async(rcv, big, CCL_INT32, partner, comm, &rr));
            EXPECT_OK(&t, ccl_send_async(snd, big, CCL_INT32, partner, comm, &rs));
        }
        if (rs) wait_ok(&t, "send_async", rs);
        if (rr && wait_ok(&t, "recv_async", rr)) {
            size_t bad = 0;
            for (size_t i = 0; i < big; i++) bad += rcv[i] != partner * 31 + (int32_t)i;
            EXPECT(&t, bad == 0, "recv_async: %zu elements wrong", bad);
        }
    }
    /* Blocking and async mix on one communicator. */
    int one = 1, sum = 0;
    EXPECT_OK(&t, ccl_all_reduce(&one, &sum, 1, CCL_INT32, CCL_SUM, comm));
    EXPECT(&t, sum == nranks, "all_reduce after the async calls gave %d", sum);
out:
    free(in);
    free(out);
    return t.fails;
}

START_TEST(each_twin) { matrix_run_short(_i, body_each_twin, "async twins", NULL); }
END_TEST

/* ---- polling with ccl_test ---- */

#define BIG_COUNT ((size_t)4 << 20 | 1)

/* in and out of BIG_COUNT elements, in holding this rank's inputs. Returns
 * -1 after counting the failure when out of memory; the caller frees both
 * either way. */
static int alloc_big_inputs(struct harness_tally *t, int rank, int32_t **in, int32_t **out) {
    *in = malloc(BIG_COUNT * 4);
    *out = malloc(BIG_COUNT * 4);
    if (!*in || !*out) {
        harness_fail(t, __FILE__, __LINE__, "out of memory");
        return -1;
    }
    fill_inputs(*in, rank, 0, BIG_COUNT);
    return 0;
}

static int body_polling(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    int32_t *in = NULL, *out = NULL;
    if (alloc_big_inputs(&t, rank, &in, &out) != 0) goto out;
    ccl_request_t *req = NULL;
    if (EXPECT_OK(&t, ccl_all_reduce_async(in, out, BIG_COUNT, CCL_INT32, CCL_SUM, comm, &req)) != CCL_OK)
        goto out;
    long polls = 0, inprogress = 0;
    int done = 0;
    double deadline = harness_now() + POLL_DEADLINE_S;
    ccl_status_t st = CCL_INPROGRESS;
    while (!done && harness_now() < deadline) {
        st = ccl_test(req, &done);
        polls++;
        if (!done) {
            inprogress++;
            sched_yield(); /* leave the core to the progress thread */
            EXPECT(&t, st == CCL_INPROGRESS, "ccl_test: not done but returned %s", ccl_status_string(st));
            if (st != CCL_INPROGRESS) break;
        }
    }
    EXPECT(&t, done, "ccl_test never reported the request done within %.0f s", POLL_DEADLINE_S);
    EXPECT(&t, st == CCL_OK, "ccl_test on the finished request returned %s", ccl_status_string(st));
    /* Still valid: testing again gives the same answer. */
    done = 0;
    st = ccl_test(req, &done);
    EXPECT(&t, done == 1 && st == CCL_OK, "ccl_test again: done=%d status %s", done, ccl_status_string(st));
    wait_ok(&t, "ccl_wait after ccl_test", req);
    EXPECT(&t, count_wrong_sums(out, nranks, 0, BIG_COUNT) == 0, "polled all_reduce: wrong sums");
    if (rank == 0)
        fprintf(stderr, "[async] polling, %s: %ld polls, %ld in progress\n", ctx->cfg->name, polls, inprogress);
out:
    free(in);
    free(out);
    return t.fails;
}

START_TEST(polling) { matrix_run_short(_i, body_polling, "ccl_test polling", NULL); }
END_TEST

/* ---- many outstanding: completion in issue order ---- */

#define OUTSTANDING 8

static int body_outstanding(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    /* Sizes vary so that a library running them out of order would often
     * finish a small later one first. */
    static const size_t sizes[OUTSTANDING] = {1 << 20, 5, 300000, 1, 1 << 18, 77, 2 << 20, 1000};
    int32_t *in[OUTSTANDING] = {0}, *out[OUTSTANDING] = {0};
    ccl_request_t *req[OUTSTANDING] = {0};
    int done[OUTSTANDING] = {0}, issued = 0;
    for (int k = 0; k < OUTSTANDING; k++) {
        in[k] = malloc(sizes[k] * 4);
        out[k] = malloc(sizes[k] * 4);
        if (!in[k] || !out[k]) {
            harness_fail(&t, __FILE__, __LINE__, "out of memory");
            goto out;
        }
        fill_inputs(in[k], rank + k, 0, sizes[k]);
    }
    for (int k = 0; k < OUTSTANDING; k++) {
        ccl_status_t st;
        if (k % 4 == 3)
            st = ccl_broadcast_async(in[k], out[k], sizes[k], CCL_INT32, k % nranks, comm, &req[k]);
        else
            st = ccl_all_reduce_async(in[k], out[k], sizes[k], CCL_INT32, CCL_SUM, comm, &req[k]);
        if (EXPECT_OK(&t, st) != CCL_OK) goto out;
        issued++;
    }
    /* Poll newest first: whenever request k is done, every earlier one must
     * be done too. */
    double deadline = harness_now() + POLL_DEADLINE_S;
    while (!done[0] || !done[OUTSTANDING - 1]) {
        if (harness_now() > deadline) {
            harness_fail(&t, __FILE__, __LINE__, "requests not done within %.0f s", POLL_DEADLINE_S);
            break;
        }
        for (int k = OUTSTANDING - 1; k >= 0; k--) {
            if (done[k]) continue;
            ccl_status_t st = ccl_test(req[k], &done[k]);
            EXPECT(&t, done[k] ? st == CCL_OK : st == CCL_INPROGRESS, "ccl_test on request %d: %s", k,
                   ccl_status_string(st));
            if (!done[k]) sched_yield();
            if (done[k])
                for (int j = 0; j < k; j++) {
                    int earlier = done[j];
                    if (!earlier) ccl_test(req[j], &earlier);
                    EXPECT(&t, earlier, "request %d completed before request %d, issued earlier", k, j);
                }
        }
    }
out:
    for (int k = 0; k < issued; k++) {
        char what[48];
        snprintf(what, sizeof what, "outstanding request %d", k);
        if (!wait_ok(&t, what, req[k])) continue;
        size_t bad = 0;
        if (k % 4 == 3) {
            for (size_t i = 0; i < sizes[k]; i++) bad += out[k][i] != in_value(k % nranks + k, i);
        } else {
            /* inputs of rank r were in_value(r + k, i) */
            for (size_t i = 0; i < sizes[k]; i++)
                bad += out[k][i] != sum_value(nranks, i) + 1000 * k * nranks;
        }
        EXPECT(&t, bad == 0, "%s: %zu elements wrong", what, bad);
    }
    for (int k = 0; k < OUTSTANDING; k++) {
        free(in[k]);
        free(out[k]);
    }
    return t.fails;
}

START_TEST(outstanding_in_order) { matrix_run_short(_i, body_outstanding, "outstanding requests", NULL); }
END_TEST

/* ---- overlap with compute ---- */

static int body_overlap(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct matrix_ctx *ctx = arg;
    struct harness_tally t = {rank, 0};
    int32_t *in = NULL, *out = NULL;
    if (alloc_big_inputs(&t, rank, &in, &out) != 0) goto out;
    ccl_request_t *req = NULL;
    double t0 = harness_now();
    if (EXPECT_OK(&t, ccl_all_reduce_async(in, out, BIG_COUNT, CCL_INT32, CCL_SUM, comm, &req)) != CCL_OK)
        goto out;
    double issued = harness_now() - t0;
    /* Compute that touches neither buffer. */
    uint64_t acc = 0;
    for (uint64_t i = 0; i < 20000000; i++) acc = acc * 6364136223846793005ull + i;
    double computed = harness_now() - t0;
    int done = 0;
    ccl_status_t st = ccl_test(req, &done);
    EXPECT(&t, st == CCL_OK || st == CCL_INPROGRESS, "ccl_test during overlap: %s", ccl_status_string(st));
    wait_ok(&t, "overlapped all_reduce", req);
    double waited = harness_now() - t0;
    EXPECT(&t, count_wrong_sums(out, nranks, 0, BIG_COUNT) == 0, "overlapped all_reduce: wrong sums");
    if (rank == 0)
        fprintf(stderr,
                "[async] overlap, %s: issue %.4f s, compute done at %.3f s (request %s), wait done at %.3f s "
                "(checksum %llx)\n",
                ctx->cfg->name, issued, computed, done ? "finished" : "still running", waited,
                (unsigned long long)(acc & 0xff));
    EXPECT(&t, issued < 1.0, "issuing an async all_reduce took %.3f s: it should return at once", issued);
out:
    free(in);
    free(out);
    return t.fails;
}

START_TEST(overlap) { matrix_run_short(_i, body_overlap, "overlap", NULL); }
END_TEST

/* ---- two threads waiting on one request ---- */

struct waiter {
    ccl_request_t *req;
    ccl_status_t st;
};

static void *wait_in_thread(void *arg) {
    struct waiter *w = arg;
    w->st = ccl_wait(w->req);
    return NULL;
}

/* Rank 0's request is still in flight (the others join 0.3 s late) when two
 * of its threads wait on it: one gets the request's status, the other
 * CCL_ERR_INVALID_USAGE (the header's promise for a request already being
 * waited on, or already released), and neither waits forever. */
static int body_two_waiters(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    int32_t in[ASYNC_COUNT], out[ASYNC_COUNT];
    fill_inputs(in, rank, 0, ASYNC_COUNT);
    if (rank != 0) {
        usleep(300000);
        EXPECT_OK(&t, ccl_all_reduce(in, out, ASYNC_COUNT, CCL_INT32, CCL_SUM, comm));
    } else {
        ccl_request_t *req = NULL;
        if (EXPECT_OK(&t, ccl_all_reduce_async(in, out, ASYNC_COUNT, CCL_INT32, CCL_SUM, comm, &req)) != CCL_OK)
            return t.fails;
        struct waiter w[2] = {{req, CCL_INPROGRESS}, {req, CCL_INPROGRESS}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++) EXPECT(&t, pthread_create(&th[i], NULL, wait_in_thread, &w[i]) == 0, "thread %d", i);
        for (int i = 0; i < 2; i++) pthread_join(th[i], NULL); /* the harness's deadline catches a hang */
        int ok = (w[0].st == CCL_OK) + (w[1].st == CCL_OK);
        int refused = (w[0].st == CCL_ERR_INVALID_USAGE) + (w[1].st == CCL_ERR_INVALID_USAGE);
        EXPECT(&t, ok == 1 && refused == 1, "two waiters got %s and %s: want one CCL_OK and one invalid usage",
               ccl_status_string(w[0].st), ccl_status_string(w[1].st));
    }
    EXPECT(&t, count_wrong_sums(out, nranks, 0, ASYNC_COUNT) == 0, "all_reduce under two waiters: wrong sums");
    return t.fails;
}

START_TEST(two_waiters) { matrix_run_short(_i, body_two_waiters, "two waiters", NULL); }
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("async");
    matrix_add_short_loop(s, "each_twin", each_twin, 300);
    matrix_add_short_loop(s, "polling", polling, 300);
    matrix_add_short_loop(s, "outstanding_in_order", outstanding_in_order, 300);
    matrix_add_short_loop(s, "overlap", overlap, 300);
    matrix_add_short_loop(s, "two_waiters", two_waiters, 300);
    return s;
}

int main(void) { return harness_main(suite()); }
