/* ctest: TIMEOUT 300 */
/*
 * ccl_group_simulate_end: a group ended with the cost model's estimate of
 * its calls, running none of them. On every rank, alone (no rank talks to
 * another): an estimate above zero that grows with the message, for a
 * collective and for sends and receives, a forced algorithm's too; the
 * outputs untouched; an async call's request completed with
 * CCL_ERR_INVALID_USAGE; refused outside a group and inside a nested one;
 * and the communicator as good as before (a real all-reduce, checked).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "util.h"

#define SMALL 1024
#define BIG (4 << 20)

static double estimate_all_reduce(struct harness_tally *t, ccl_comm_t *comm, float *buf, size_t count) {
    double us = -1;
    EXPECT_OK(t, ccl_group_start());
    EXPECT_OK(t, ccl_all_reduce(buf, buf, count, CCL_FLOAT32, CCL_SUM, comm));
    EXPECT_OK(t, ccl_group_simulate_end(&us));
    return us;
}

static int body(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    float *buf = malloc(sizeof(float) * BIG), *out = malloc(sizeof(float) * BIG);
    if (!buf || !out) return 1;
    for (size_t i = 0; i < BIG; i++) buf[i] = 1.0f, out[i] = -7.0f;
    double us = -1;
    EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_group_simulate_end(&us));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_group_simulate_end(NULL));

    double small = estimate_all_reduce(&t, comm, buf, SMALL), big = estimate_all_reduce(&t, comm, buf, BIG);
    EXPECT(&t, nranks == 1 || (small > 0 && big > small), "all_reduce estimates: %g us for %d floats, %g us for %d",
           small, SMALL, big, BIG);
    EXPECT(&t, buf[0] == 1.0f && buf[BIG - 1] == 1.0f, "a simulated all_reduce changed its buffer");
    if (!t.fails) fprintf(stderr, "[rank %d] estimates on %d ranks: all_reduce %.2f us (4 KiB), %.1f us (16 MiB)\n",
                          rank, nranks, small, big);

    /* the same with a forced algorithm: the model's time for that one */
    EXPECT_OK(&t, ccl_comm_set_algo(comm, "allreduce:ring"));
    double ring = estimate_all_reduce(&t, comm, buf, BIG);
    EXPECT(&t, nranks == 1 || ring > 0, "a forced ring's estimate is %g", ring);
    EXPECT_OK(&t, ccl_comm_set_algo(comm, "auto"));

    /* sends and receives around the ring */
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_send(buf, BIG, CCL_FLOAT32, next, comm));
    EXPECT_OK(&t, ccl_recv(out, BIG, CCL_FLOAT32, prev, comm));
    us = -1;
    EXPECT_OK(&t, ccl_group_simulate_end(&us));
    EXPECT(&t, nranks == 1 || us > 0, "a send and a receive of 16 MiB: estimate %g", us);
    EXPECT(&t, out[0] == -7.0f && out[BIG - 1] == -7.0f, "a simulated receive wrote its buffer");

    /* an async call in the group: its request says it did not run */
    ccl_request_t *req = NULL;
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_all_reduce_async(buf, out, SMALL, CCL_FLOAT32, CCL_SUM, comm, &req));
    EXPECT_OK(&t, ccl_group_simulate_end(&us));
    if (req) EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_wait(req));
    EXPECT(&t, out[0] == -7.0f, "a simulated async all_reduce wrote its output");

    /* nested: only the outermost group is simulated */
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_group_simulate_end(&us));
    EXPECT_OK(&t, ccl_group_end());
    EXPECT_OK(&t, ccl_group_end());

    /* and the communicator runs as before */
    EXPECT_OK(&t, ccl_all_reduce(buf, out, BIG, CCL_FLOAT32, CCL_SUM, comm));
    EXPECT(&t, out[0] == (float)nranks && out[BIG - 1] == (float)nranks, "all_reduce after the estimates: %g", out[0]);
    free(buf);
    free(out);
    return t.fails;
}

START_TEST(simulated_groups) {
    static const struct {
        int nranks;
        const char *transport;
    } cfg[] = {{1, "shm"}, {3, "shm"}, {4, "tcp"}};
    struct harness_run run = {.nranks = cfg[_i].nranks, .transport = cfg[_i].transport, .body = body,
                              .deadline_s = 120};
    util_run_clean(&run, 0, "simulated groups, %d ranks over %s", cfg[_i].nranks, cfg[_i].transport);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("group_estimate");
    util_add_loop_case(s, "simulated_groups", simulated_groups, 3, 150);
    return s;
}

int main(void) { return harness_main(suite()); }
