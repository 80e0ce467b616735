/*
 * Stream-ordered calls where the process has no CUDA: every _stream twin
 * on the default stream runs at once with results checked bit-exactly
 * (1, 3 and 5 ranks), a group of them too; a real stream without a CUDA
 * driver is CCL_ERR_UNSUPPORTED naming why, with nothing written and the
 * communicator still usable; calls of one communicator that name two
 * streams in one group are refused alike on every rank; a process that
 * holds the driver with no current context runs the twins at once too
 * (tests/cuda/driver_without_context.c stands in for the driver). (Device buffers
 * and real streams: tests/cuda/, on a GPU.)
 */
/* ctest: TIMEOUT 300 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "ref.h"
#include "util.h"

#define COUNT 1001 /* divisible by nothing useful */

static int check_i32(struct harness_tally *t, const char *what, const int32_t *got, const int32_t *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            EXPECT(t, 0, "%s: element %zu is %d, expected %d", what, i, got[i], want[i]);
            return 1;
        }
    return 0;
}

static int32_t val(int rank, size_t i) { return (int32_t)(ref_mix(7, (uint64_t)rank, i) & 0xffffff) - 0x7fffff; }

static int body_twins(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    struct harness_tally t = {.rank = rank};
    size_t n = COUNT, all = n * (size_t)nranks;
    int32_t *in = malloc(all * 4), *out = malloc(all * 4), *want = malloc(all * 4);
    for (size_t i = 0; i < all; i++) in[i] = val(rank, i);

    /* all_reduce (sum), then in place */
    for (size_t i = 0; i < n; i++) {
        uint32_t s = 0;
        for (int r = 0; r < nranks; r++) s += (uint32_t)val(r, i);
        want[i] = (int32_t)s;
    }
    EXPECT_OK(&t, ccl_all_reduce_stream(in, out, n, CCL_INT32, CCL_SUM, comm, NULL));
    check_i32(&t, "all_reduce_stream", out, want, n);
    memcpy(out, in, n * 4);
    EXPECT_OK(&t, ccl_all_reduce_stream(out, out, n, CCL_INT32, CCL_SUM, comm, NULL));
    check_i32(&t, "all_reduce_stream in place", out, want, n);

    /* reduce_scatter: block `rank` of the sum of every rank's all elements */
    for (size_t i = 0; i < n; i++) {
        uint32_t s = 0;
        for (int r = 0; r < nranks; r++) s += (uint32_t)val(r, (size_t)rank * n + i);
        want[i] = (int32_t)s;
    }
    EXPECT_OK(&t, ccl_reduce_scatter_stream(in, out, n, CCL_INT32, CCL_SUM, comm, NULL));
    check_i32(&t, "reduce_scatter_stream", out, want, n);

    /* all_gather, broadcast from the last rank, reduce (max) to rank 0 */
    for (int r = 0; r < nranks; r++)
        for (size_t i = 0; i < n; i++) want[(size_t)r * n + i] = val(r, i);
    EXPECT_OK(&t, ccl_all_gather_stream(in, out, n, CCL_INT32, comm, NULL));
    check_i32(&t, "all_gather_stream", out, want, all);
    for (size_t i = 0; i < n; i++) want[i] = val(nranks - 1, i);
    EXPECT_OK(&t, ccl_broadcast_stream(in, out, n, CCL_INT32, nranks - 1, comm, NULL));
    check_i32(&t, "broadcast_stream", out, want, n);
    for (size_t i = 0; i < n; i++) {
        int32_t m = val(0, i);
        for (int r = 1; r < nranks; r++) m = val(r, i) > m ? val(r, i) : m;
        want[i] = m;
    }
    EXPECT_OK(&t, ccl_reduce_stream(in, out, n, CCL_INT32, CCL_MAX, 0, comm, NULL));
    if (rank == 0) check_i32(&t, "reduce_stream", out, want, n);

    /* all_to_all: block r of my output is block `rank` of rank r's input */
    for (int r = 0; r < nranks; r++)
        for (size_t i = 0; i < n; i++) want[(size_t)r * n + i] = val(r, (size_t)rank * n + i);
    EXPECT_OK(&t, ccl_all_to_all_stream(in, out, n, CCL_INT32, comm, NULL));
    check_i32(&t, "all_to_all_stream", out, want, all);

    /* send/recv around the ring, in a group of stream calls */
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    for (size_t i = 0; i < n; i++) want[i] = val(prev, i);
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_send_stream(in, n, CCL_INT32, next, comm, NULL));
    EXPECT_OK(&t, ccl_recv_stream(out, n, CCL_INT32, prev, comm, NULL));
    EXPECT_OK(&t, ccl_group_end());
    check_i32(&t, "send_stream/recv_stream in a group", out, want, n);

    /* count 0 and a group ended on the default stream */
    EXPECT_OK(&t, ccl_all_reduce_stream(in, out, 0, CCL_INT32, CCL_SUM, comm, NULL));
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_all_reduce(in, out, 1, CCL_INT32, CCL_SUM, comm));
    EXPECT_OK(&t, ccl_group_end_stream(NULL));
    uint32_t s0 = 0;
    for (int r = 0; r < nranks; r++) s0 += (uint32_t)val(r, 0);
    EXPECT(&t, out[0] == (int32_t)s0, "group ended on the default stream: %d, expected %d", out[0], (int32_t)s0);

    ccl_status_t err = CCL_ERR_INTERNAL;
    EXPECT_OK(&t, ccl_comm_get_async_error(comm, &err));
    EXPECT(&t, err == CCL_OK, "async error of a healthy communicator: %s", ccl_status_string(err));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_get_async_error(comm, NULL));
    free(in);
    free(out);
    free(want);
    return t.fails;
}

static void twins(int nranks, const char *transport) {
    struct harness_run run = {.nranks = nranks, .transport = transport, .body = body_twins, .deadline_s = 120};
    util_run_clean(&run, 0, "_stream twins on the default stream, %d ranks over %s", nranks, transport);
}

START_TEST(stream_twins_on_default_stream) {
    static const struct {
        int nranks;
        const char *transport;
    } cfg[] = {{1, "shm"}, {3, "shm"}, {5, "tcp"}};
    twins(cfg[_i].nranks, cfg[_i].transport);
}
END_TEST

/* A stream pointer nobody can use: the driver cannot be loaded. */
#define FAKE_STREAM ((ccl_stream_t)(uintptr_t)0x1000)

static int body_no_driver(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    struct harness_tally t = {.rank = rank};
    int32_t in[16], out[16];
    for (int i = 0; i < 16; i++) in[i] = rank + i, out[i] = -7;
    EXPECT_STATUS(&t, CCL_ERR_UNSUPPORTED, ccl_all_reduce_stream(in, out, 16, CCL_INT32, CCL_SUM, comm, FAKE_STREAM));
    const char *e = ccl_comm_last_error(comm);
    EXPECT(&t, strstr(e, "a CUDA stream was given") && strstr(e, "/nonexistent/libcuda.so.1"),
           "the error names the stream and the driver it could not load: \"%s\"", e);
    for (int i = 0; i < 16; i++) EXPECT(&t, out[i] == -7, "out[%d] was written: %d", i, out[i]);
    /* A group ended on such a stream: the same, and its async request completes with it. */
    ccl_request_t *req = NULL;
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_all_reduce_async(in, out, 16, CCL_INT32, CCL_SUM, comm, &req));
    EXPECT_STATUS(&t, CCL_ERR_UNSUPPORTED, ccl_group_end_stream(FAKE_STREAM));
    if (req) EXPECT_STATUS(&t, CCL_ERR_UNSUPPORTED, ccl_wait(req));
    /* Two streams for one communicator in one group. */
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_all_reduce_stream(in, out, 16, CCL_INT32, CCL_SUM, comm, FAKE_STREAM));
    EXPECT_OK(&t, ccl_all_reduce_stream(in, out, 16, CCL_INT32, CCL_SUM, comm, NULL));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_group_end());
    e = ccl_comm_last_error(comm);
    EXPECT(&t, strstr(e, "two CUDA streams") != NULL, "the error says why: \"%s\"", e);
    for (int i = 0; i < 16; i++) EXPECT(&t, out[i] == -7, "out[%d] was written: %d", i, out[i]);
    /* Nothing broke. */
    EXPECT_OK(&t, ccl_all_reduce(in, out, 16, CCL_INT32, CCL_SUM, comm));
    int32_t want = 0;
    for (int r = 0; r < nranks; r++) want += r;
    EXPECT(&t, out[0] == want, "the communicator still works: %d, expected %d", out[0], want);
    return t.fails;
}

START_TEST(stream_without_driver_is_unsupported) {
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_no_driver, .deadline_s = 60,
                              .env = "CCL_CUDA_LIBRARY=/nonexistent/libcuda.so.1"};
    util_run_clean(&run, 0, "a stream without a CUDA driver");
}
END_TEST

/* A process that holds the CUDA driver but has no current context (a
 * library it links may have loaded the driver): the default stream then
 * orders nothing, and the twins run at once as without CUDA. A real
 * stream still goes to the driver, which shows that it was in use. */
static int body_driver_without_context(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    struct harness_tally t = {.rank = rank};
    void *driver = dlopen(CCL_TEST_DRIVER_WITHOUT_CONTEXT, RTLD_NOW | RTLD_GLOBAL);
    EXPECT(&t, driver != NULL, "loading the stand-in driver: %s", dlerror());
    if (!driver) return t.fails;
    usleep(20000); /* libccl looks for a newly loaded driver at most once a clock tick */
    t.fails += body_twins(comm, rank, nranks, arg);
    int32_t in[4] = {1, 2, 3, 4}, out[4];
    EXPECT_STATUS(&t, CCL_ERR_SYSTEM, ccl_all_reduce_stream(in, out, 4, CCL_INT32, CCL_SUM, comm, FAKE_STREAM));
    const char *e = ccl_comm_last_error(comm);
    EXPECT(&t, strstr(e, "cuStreamGetCtx") != NULL, "a real stream went to the driver: \"%s\"", e);
    return t.fails;
}

START_TEST(stream_twins_with_a_driver_but_no_context) {
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_driver_without_context, .deadline_s = 120,
                              .env = "CCL_CUDA_LIBRARY=" CCL_TEST_DRIVER_WITHOUT_CONTEXT};
    util_run_clean(&run, 0, "_stream twins with a CUDA driver but no context");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("stream_host");
    util_add_loop_case(s, "stream_twins_on_default_stream", stream_twins_on_default_stream, 3, 120);
    util_add_loop_case(s, "stream_without_driver_is_unsupported", stream_without_driver_is_unsupported, 1, 60);
    util_add_loop_case(s, "stream_twins_with_a_driver_but_no_context", stream_twins_with_a_driver_but_no_context, 1, 120);
    return s;
}

int main(void) { return harness_main(suite()); }
