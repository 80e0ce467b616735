/*
 * Stream-ordered calls where the process has no CUDA: every _stream twin
 * on the default stream runs at once with results checked bit-exactly
 * (1, 3 and 5 ranks), a group of them too; a real stream without a CUDA
 * driver is CCL_ERR_UNSUPPORTED naming why, with nothing written and the
 * communicator still usable; calls of one communicator that name two
 * streams in one group are refused alike on every rank; a process that
 * holds the driver with no current context runs the twins at once too
 * (tests/cuda/driver_without_context.c stands in for the driver); and
 * device buffers, with and without streams, on a simulated GPU whose
 * memory the CPU cannot touch (tests/cuda/sim_driver.c). (Device buffers
 * and real streams: tests/cuda/, on a GPU.)
 */
/* ctest: TIMEOUT 300 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll_kinds.h"
#include "container.h"
#include "gpu_resident_calls.h"
#include "harness.h"
#include "kill_later.h"
#include "ref.h"
#include "sim_gpu.h"
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

/* ---- stream order on a simulated GPU (tests/cuda/sim_driver.c) ---- */

#define SIM_ROUNDS 3 /* on a created stream, another one, then the legacy default stream */
enum { SIM_AR, SIM_AR_IN_PLACE, SIM_RS, SIM_AG, SIM_BC, SIM_SENDRECV, SIM_KINDS };
static const char *const sim_names[] = {"all_reduce", "all_reduce in place", "reduce_scatter", "all_gather",
                                        "broadcast", "send/recv"};

static int32_t sim_val(int rank, size_t i, int round) {
    return (int32_t)(ref_mix(11, (uint64_t)rank * 8 + (uint64_t)round, i) & 0xffff) - 0x7fff;
}

/* What element i of result `kind` must hold on rank (n per rank). */
static int32_t sim_want(int kind, int rank, int nranks, size_t i, size_t n, int round) {
    uint32_t s = 0;
    switch (kind) {
    case SIM_AR:
    case SIM_AR_IN_PLACE:
        for (int r = 0; r < nranks; r++) s += (uint32_t)sim_val(r, i, round);
        return (int32_t)s;
    case SIM_RS:
        for (int r = 0; r < nranks; r++) s += (uint32_t)sim_val(r, (size_t)rank * n + i, round);
        return (int32_t)s;
    case SIM_AG: return sim_val((int)(i / n), i % n, round);
    case SIM_BC: return sim_val(nranks - 1, i, round);
    default: return sim_val((rank + nranks - 1) % nranks, i, round);
    }
}

/* Three rounds, each on its own stream, with no host synchronisation: a
 * copy writes the device input, the collectives run, copies read each
 * result out; then a copy to pageable memory, which holds the driver's
 * lock while it waits for the stream, as a trainer's cudaMemcpy does. A
 * collective that ran before its input was written, or a result read
 * before its collective, shows as a wrong value; an executor that calls
 * into the driver for a stream-ordered batch waits for that lock forever. */
static int body_simulated(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    if (t.fails) return t.fails;
    size_t n = COUNT, all = n * (size_t)nranks, bytes = all * 4;
    void *streams[SIM_ROUNDS] = {NULL, NULL, NULL}; /* the last: the legacy default stream */
    sim_ptr din[SIM_ROUNDS], dout[SIM_ROUNDS];
    int32_t *src[SIM_ROUNDS], *res[SIM_ROUNDS][SIM_KINDS];
    for (int r = 0; r < SIM_ROUNDS; r++) {
        if (r < 2) EXPECT(&t, sim.StreamCreate(&streams[r], 1) == 0, "cuStreamCreate");
        EXPECT(&t, sim.MemAlloc(&din[r], bytes) == 0 && sim.MemAlloc(&dout[r], bytes) == 0, "cuMemAlloc");
        EXPECT(&t, sim.MemHostAlloc((void **)&src[r], bytes, 0) == 0, "cuMemHostAlloc");
        for (int k = 0; k < SIM_KINDS; k++) EXPECT(&t, sim.MemHostAlloc((void **)&res[r][k], bytes, 0) == 0, "cuMemHostAlloc");
        for (size_t i = 0; i < all; i++) src[r][i] = sim_val(rank, i, r);
    }
    if (t.fails) return t.fails;
    ccl_comm_t *c = comm;
#define DEV(p) ((void *)(uintptr_t)(p))
#define COPY(dst, src, b) EXPECT(&t, sim.MemcpyAsync((sim_ptr)(uintptr_t)(dst), (sim_ptr)(uintptr_t)(src), b, s) == 0, "cuMemcpyAsync")
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    for (int r = 0; r < SIM_ROUNDS; r++) {
        void *s = streams[r];
        COPY(DEV(din[r]), src[r], bytes);
        EXPECT_OK(&t, ccl_all_reduce_stream(DEV(din[r]), DEV(dout[r]), n, CCL_INT32, CCL_SUM, c, s));
        COPY(res[r][SIM_AR], DEV(dout[r]), n * 4);
        COPY(DEV(dout[r]), src[r], n * 4);
        EXPECT_OK(&t, ccl_all_reduce_stream(DEV(dout[r]), DEV(dout[r]), n, CCL_INT32, CCL_SUM, c, s));
        COPY(res[r][SIM_AR_IN_PLACE], DEV(dout[r]), n * 4);
        EXPECT_OK(&t, ccl_reduce_scatter_stream(DEV(din[r]), DEV(dout[r]), n, CCL_INT32, CCL_SUM, c, s));
        COPY(res[r][SIM_RS], DEV(dout[r]), n * 4);
        EXPECT_OK(&t, ccl_all_gather_stream(DEV(din[r]), DEV(dout[r]), n, CCL_INT32, c, s));
        COPY(res[r][SIM_AG], DEV(dout[r]), all * 4);
        EXPECT_OK(&t, ccl_broadcast_stream(DEV(din[r]), DEV(dout[r]), n, CCL_INT32, nranks - 1, c, s));
        COPY(res[r][SIM_BC], DEV(dout[r]), n * 4);
        EXPECT_OK(&t, ccl_group_start());
        EXPECT_OK(&t, ccl_send_stream(DEV(din[r]), n, CCL_INT32, next, c, s));
        EXPECT_OK(&t, ccl_recv_stream(DEV(dout[r]), n, CCL_INT32, prev, c, s));
        EXPECT_OK(&t, ccl_group_end());
        COPY(res[r][SIM_SENDRECV], DEV(dout[r]), n * 4);
    }
    int32_t last[4]; /* pageable: this copy waits for its stream, the driver's lock held */
    void *s = streams[SIM_ROUNDS - 1];
    COPY(last, DEV(dout[SIM_ROUNDS - 1]), sizeof last);
    for (int r = 0; r < SIM_ROUNDS; r++) sim.StreamSynchronize(streams[r]);
    for (int r = 0; r < SIM_ROUNDS; r++)
        for (int k = 0; k < SIM_KINDS; k++) {
            size_t len = k == SIM_AG ? all : n;
            for (size_t i = 0; i < len; i++) {
                int32_t want = sim_want(k, rank, nranks, i, n, r);
                if (res[r][k][i] != want) {
                    EXPECT(&t, 0, "round %d, %s: element %zu is %d, expected %d", r, sim_names[k], i, res[r][k][i], want);
                    break;
                }
            }
        }
    EXPECT(&t, last[0] == sim_want(SIM_SENDRECV, rank, nranks, 0, n, SIM_ROUNDS - 1),
           "the pageable copy after the last call read %d", last[0]);
    ccl_status_t err = CCL_ERR_INTERNAL;
    EXPECT_OK(&t, ccl_comm_get_async_error(comm, &err));
    EXPECT(&t, err == CCL_OK, "async error: %s (%s)", ccl_status_string(err), ccl_comm_last_error(comm));
#undef COPY
#undef DEV
    for (int r = 0; r < SIM_ROUNDS; r++) {
        sim.MemFree(din[r]);
        sim.MemFree(dout[r]);
        sim.MemFreeHost(src[r]);
        for (int k = 0; k < SIM_KINDS; k++) sim.MemFreeHost(res[r][k]);
        if (streams[r]) sim.StreamDestroy(streams[r]);
    }
    return t.fails;
}

/* Calls without a stream on device buffers: every collective, in place
 * and out, counts growing from 0 past the staging buffer's size, int32
 * sums and float32 maxima, each against the same call on host buffers;
 * then an asynchronous one. The simulated device memory cannot be touched
 * by the CPU, so a call that skipped staging would die. */
static int body_sim_device(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    if (t.fails) return t.fails;
    const size_t counts[] = {0, 1, 1001, 70001};
    const struct {
        ccl_dtype_t dt;
        ccl_op_t op;
    } types[] = {{CCL_INT32, CCL_SUM}, {CCL_FLOAT32, CCL_MAX}};
    size_t maxb = 70001 * 4 * (size_t)nranks;
    unsigned char *hin = malloc(maxb), *hout = malloc(maxb), *got = malloc(maxb);
    sim_ptr din = 0, dout = 0;
    EXPECT(&t, sim.MemAlloc(&din, maxb) == 0 && sim.MemAlloc(&dout, maxb) == 0, "cuMemAlloc");
    /* The harness made comm before the driver was loaded: no device until
     * its first device buffer binds it (ccl_comm_describe names it then). */
    char desc[1024] = "";
    EXPECT_OK(&t, ccl_comm_describe(comm, desc, sizeof desc));
    EXPECT(&t, !strstr(desc, "cuda_device="), "describe names a device before any device buffer: %s", desc);
    void *s = NULL; /* the legacy default stream: copies to and from pageable memory finish before they return */
#define COPY(dst, src, b) EXPECT(&t, sim.MemcpyAsync((sim_ptr)(uintptr_t)(dst), (sim_ptr)(uintptr_t)(src), b, s) == 0, "cuMemcpyAsync")
    for (int k = 0; k < COLL_KINDS && !t.fails; k++)
        for (size_t ty = 0; ty < 2 && !t.fails; ty++)
            for (size_t ci = 0; ci < 4 && !t.fails; ci++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    if (inplace && (k == COLL_RS || k == COLL_A2A)) continue; /* in place only where the API has it */
                    size_t n = counts[ci], es = 4;
                    size_t in_b, out_b;
                    coll_kind_bytes(k, n, nranks, es, &in_b, &out_b);
                    size_t buf_b = in_b > out_b ? in_b : out_b;
                    for (size_t i = 0; i < buf_b / 4; i++) {
                        uint32_t v = (uint32_t)ref_mix((uint64_t)(k * 10 + (int)ty), (uint64_t)rank, i);
                        float f = (float)(int32_t)(v % 20001) - 10000.0f;
                        if (types[ty].dt == CCL_FLOAT32) memcpy(hin + i * 4, &f, 4);
                        else memcpy(hin + i * 4, &v, 4);
                    }
                    memcpy(hout, hin, buf_b);
                    if (buf_b) {
                        COPY((void *)(uintptr_t)din, hin, buf_b);
                        COPY((void *)(uintptr_t)dout, hin, buf_b);
                    }
                    const void *hs = hin, *ds = (void *)(uintptr_t)din;
                    void *hr = inplace ? hin : hout, *dr = (void *)(uintptr_t)(inplace ? din : dout);
                    if (inplace && k == COLL_AG) hs = hin + rank * n * es, ds = (char *)(uintptr_t)din + rank * n * es;
                    EXPECT_OK(&t, coll_kind_call(k, hs, hr, n, types[ty].dt, types[ty].op, comm));
                    EXPECT_OK(&t, coll_kind_call(k, ds, dr, n, types[ty].dt, types[ty].op, comm));
                    if (out_b) COPY(got, dr, out_b);
                    if (!(k == COLL_RD && rank != 0) && out_b)
                        EXPECT(&t, memcmp(got, hr, out_b) == 0, "kind %d type %zu count %zu in place %d: device result "
                               "differs from host", k, ty, n, inplace);
                }
    EXPECT_OK(&t, ccl_comm_describe(comm, desc, sizeof desc));
    EXPECT(&t, strstr(desc, " cuda_device=0"), "describe does not name the device the calls bound: %s", desc);
    /* An asynchronous call on device buffers, waited for. */
    size_t n = 1001;
    for (size_t i = 0; i < n; i++) ((int32_t *)hin)[i] = val(rank, i);
    COPY((void *)(uintptr_t)din, hin, n * 4);
    ccl_request_t *req = NULL;
    EXPECT_OK(&t, ccl_all_reduce_async((void *)(uintptr_t)din, (void *)(uintptr_t)dout, n, CCL_INT32, CCL_SUM, comm, &req));
    if (req) EXPECT_OK(&t, ccl_wait(req));
    COPY(got, (void *)(uintptr_t)dout, n * 4);
    EXPECT_OK(&t, ccl_all_reduce(hin, hout, n, CCL_INT32, CCL_SUM, comm));
    EXPECT(&t, memcmp(got, hout, n * 4) == 0, "asynchronous all_reduce on device buffers differs from host");
#undef COPY
    sim.MemFree(din);
    sim.MemFree(dout);
    free(hin);
    free(hout);
    free(got);
    return t.fails;
}

START_TEST(device_buffers_on_a_simulated_gpu) {
    static const struct {
        int nranks;
        const char *transport;
    } cfg[] = {{1, "shm"}, {3, "shm"}, {4, "tcp"}};
    struct harness_run run = {.nranks = cfg[_i].nranks, .transport = cfg[_i].transport, .body = body_sim_device,
                              .deadline_s = 120, .env = "CCL_CUDA_LIBRARY=" CCL_TEST_SIM_DRIVER};
    util_run_clean(&run, 0, "device buffers on a simulated GPU, %d ranks over %s", cfg[_i].nranks, cfg[_i].transport);
}
END_TEST

START_TEST(stream_order_on_a_simulated_gpu) {
    static const struct {
        int nranks;
        const char *transport;
    } cfg[] = {{1, "shm"}, {3, "shm"}, {2, "tcp"}};
    struct harness_run run = {.nranks = cfg[_i].nranks, .transport = cfg[_i].transport, .body = body_simulated,
                              .deadline_s = 120, .env = "CCL_CUDA_LIBRARY=" CCL_TEST_SIM_DRIVER};
    util_run_clean(&run, 0, "stream order on a simulated GPU, %d ranks over %s", cfg[_i].nranks, cfg[_i].transport);
}
END_TEST

/* ---- a stream capturing a CUDA graph ----
 * A call on a stream that is capturing a graph would be recorded without
 * its host side, and a replay would not redo it: every way onto a stream
 * is refused with CCL_ERR_INVALID_USAGE, saying why, before anything is
 * queued; the same call after the capture runs and is right. The
 * simulated driver's streams capture while CCL_SIM_CAPTURING is set. */
static int body_capture(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    void *s = NULL;
    if (!t.fails) EXPECT(&t, sim.StreamCreate(&s, 1) == 0, "cuStreamCreate");
    if (t.fails) return t.fails;
    enum { N = 1031 };
    int32_t in[N], out[N];
    for (size_t i = 0; i < N; i++) in[i] = val(rank, i), out[i] = 0;
    setenv("CCL_SIM_CAPTURING", "1", 1);
    ccl_status_t st = ccl_all_reduce_stream(in, out, N, CCL_INT32, CCL_SUM, comm, s);
    EXPECT(&t, st == CCL_ERR_INVALID_USAGE && strstr(ccl_comm_last_error(comm), "capturing a CUDA graph"),
           "a call on a capturing stream returned %s: %s", ccl_status_string(st), ccl_comm_last_error(comm));
    EXPECT_OK(&t, ccl_group_start());
    EXPECT_OK(&t, ccl_broadcast(in, out, N, CCL_INT32, 0, comm));
    st = ccl_group_end_stream(s);
    EXPECT(&t, st == CCL_ERR_INVALID_USAGE, "a group ended on a capturing stream returned %s", ccl_status_string(st));
    unsetenv("CCL_SIM_CAPTURING");
    EXPECT(&t, out[0] == 0 && out[N - 1] == 0, "a refused call wrote its output");
    EXPECT_OK(&t, ccl_all_reduce_stream(in, out, N, CCL_INT32, CCL_SUM, comm, s));
    EXPECT(&t, sim.StreamSynchronize(s) == 0, "cuStreamSynchronize");
    for (size_t i = 0; i < N; i++) {
        int32_t want = 0;
        for (int r = 0; r < nranks; r++) want = (int32_t)((uint32_t)want + (uint32_t)val(r, i));
        if (out[i] != want) {
            EXPECT(&t, 0, "after the capture, element %zu is %d, not %d", i, out[i], want);
            break;
        }
    }
    sim.StreamDestroy(s);
    return t.fails;
}

START_TEST(stream_capture_refused) {
    struct harness_run run = {.nranks = 2 + _i, .transport = _i ? "tcp" : "shm", .body = body_capture,
                              .deadline_s = 60, .env = "CCL_CUDA_LIBRARY=" CCL_TEST_SIM_DRIVER};
    util_run_clean(&run, 0, "a capturing stream, %d ranks", 2 + _i);
}
END_TEST

/* ---- the GPU-resident path on a simulated GPU ----
 * A communicator made while the simulated GPU is current (a split of the
 * harness's) has every rank on one GPU: with windows (shm), its
 * collectives on device buffers run as one kernel of the leader's, which
 * the simulated driver runs on the CPU with the kernel's element functions,
 * through IPC mappings of the peers' buffers. Every dtype x op, in place
 * and out, against the same call on host buffers with the direct
 * algorithm (the same fold in rank order: the same bits, NaN payloads and
 * all); then the stream-ordered rounds of body_simulated; the calls must
 * have run there. Over tcp (no windows), and with a rank in a PID namespace
 * of its own, the path is off: they are staged. Where the leader cannot
 * map its peers' buffers (the simulated driver refuses), the first call
 * finds out and every call is staged, each rank alike, and correct. */
#ifndef CCL_TEST_GPU_KERNELS
#define CCL_TEST_GPU_KERNELS 0
#endif

static int body_gpu_resident(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    ccl_comm_t *g = NULL;
    if (!t.fails) EXPECT_OK(&t, ccl_comm_split(comm, 0, rank, &g));
    if (t.fails) return t.fails;
    /* 1: the calls run on the GPU; 0: the path is off, they are staged
     * with the host's own algorithms; 2: the path is on, but the leader
     * cannot map the peers' buffers: every call is staged. */
    int expect = *(const int *)arg;
    if (expect)
        EXPECT_OK(&t, ccl_comm_set_algo(g, "allreduce:direct,reducescatter:direct,allgather:direct,broadcast:direct,"
                                           "reduce:direct"));
    const size_t counts[] = {1, 1001, 4099};
    size_t maxb = 4099 * 8 * (size_t)nranks;
    unsigned char *hin = malloc(maxb), *hout = malloc(maxb), *got = malloc(maxb);
    sim_ptr din = 0, dout = 0;
    EXPECT(&t, sim.MemAlloc(&din, maxb) == 0 && sim.MemAlloc(&dout, maxb) == 0, "cuMemAlloc");
    void *s = NULL;
#define COPY(dst, src, b) EXPECT(&t, sim.MemcpyAsync((sim_ptr)(uintptr_t)(dst), (sim_ptr)(uintptr_t)(src), b, s) == 0, "cuMemcpyAsync")
    for (int k = 0; k < COLL_KINDS && !t.fails; k++)
        for (int dt = 0; dt < CCL_NUM_DTYPES && !t.fails; dt++)
            for (int op = 0; op < CCL_NUM_OPS && !t.fails; op++)
                for (size_t ci = 0; ci < 3 && !t.fails; ci++)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        if ((k == COLL_AG || k == COLL_BC || k == COLL_A2A) && op) continue;
                        if (!ref_op_applies(dt, op)) continue;
                        if (inplace && (k == COLL_RS || k == COLL_A2A)) continue;
                        if (ci == 2 && (dt != CCL_FLOAT16 || op != CCL_SUM)) continue; /* the big count: sampled */
                        size_t n = counts[ci], es = ccl_dtype_size(dt), in_b, out_b;
                        coll_kind_bytes(k, n, nranks, es, &in_b, &out_b);
                        size_t buf_b = in_b > out_b ? in_b : out_b;
                        ref_bytes((uint64_t)(k * 1000 + dt * 10 + op), rank, 0, buf_b, hin); /* NaNs and all */
                        memcpy(hout, hin, buf_b);
                        COPY((void *)(uintptr_t)din, hin, buf_b);
                        COPY((void *)(uintptr_t)dout, hin, buf_b);
                        const void *hs = hin, *ds = (void *)(uintptr_t)din;
                        void *hr = inplace ? hin : hout, *dr = (void *)(uintptr_t)(inplace ? din : dout);
                        if (inplace && k == COLL_AG) hs = hin + rank * n * es, ds = (char *)(uintptr_t)din + rank * n * es;
                        EXPECT_OK(&t, coll_kind_call(k, hs, hr, n, dt, op, g));
                        EXPECT_OK(&t, coll_kind_call(k, ds, dr, n, dt, op, g));
                        COPY(got, dr, out_b);
                        if (!(k == COLL_RD && rank != 0))
                            EXPECT(&t, memcmp(got, hr, out_b) == 0, "kind %d dtype %d op %d count %zu in place %d: "
                                   "device result differs from host", k, dt, op, n, inplace);
                    }
#undef COPY
    sim.MemFree(din);
    sim.MemFree(dout);
    free(hin);
    free(hout);
    free(got);
    if (!t.fails) t.fails += body_simulated(g, rank, nranks, arg);
    long ran = gpu_resident_calls(g);
    if (!CCL_TEST_GPU_KERNELS) expect = 0;
    if (expect == 1) EXPECT(&t, ran > 0, "no call ran on the (simulated) GPU: gpu_resident_calls %ld", ran);
    else if (expect == 2) EXPECT(&t, ran == 0, "the leader cannot map buffers, yet gpu_resident_calls is %ld", ran);
    else EXPECT(&t, ran == -1, "calls ran on the GPU where they cannot: gpu_resident_calls %ld", ran);
    EXPECT_OK(&t, ccl_comm_destroy(g));
    return t.fails;
}

START_TEST(gpu_resident_path_on_a_simulated_gpu) {
    static const int own_pid_ns[] = {0, CONTAINER_PID_NS, 0};
    static const struct {
        int nranks;
        const char *transport;
        int expect; /* body_gpu_resident's */
        const int *containers;
        const char *env, *what;
    } cfg[] = {{2, "shm", 1, NULL, "", "shm"},
               {3, "shm", 1, NULL, "", "shm"},
               {3, "tcp", 0, NULL, "", "tcp"},
               {3, "shm", 0, own_pid_ns, "", "shm, rank 1 in a PID namespace of its own"},
               {2, "shm", 2, NULL, "CCL_SIM_IPC_FAIL=1", "shm, no IPC mapping allowed"}};
    char env[512];
    snprintf(env, sizeof env, "%s CCL_CUDA_LIBRARY=%s", cfg[_i].env, CCL_TEST_SIM_DRIVER);
    struct harness_run run = {.nranks = cfg[_i].nranks, .transport = cfg[_i].transport, .body = body_gpu_resident,
                              .arg = (void *)&cfg[_i].expect, .deadline_s = 240, .containers = cfg[_i].containers,
                              .env = env};
    util_run_clean(&run, 0, "the GPU-resident path on a simulated GPU, %d ranks over %s", cfg[_i].nranks, cfg[_i].what);
}
END_TEST

/* Under CCL_CHECK=1, ranks that disagree (one calls with count 0, which
 * alone would not take the GPU-resident path) all get
 * CCL_ERR_INVALID_USAGE before anything runs, and the communicator stays
 * usable: the next call agrees and runs on the GPU. */
static int body_gpu_disagree(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    ccl_comm_t *g = NULL;
    if (!t.fails) EXPECT_OK(&t, ccl_comm_split(comm, 0, rank, &g));
    if (t.fails) return t.fails;
    size_t n = 1001;
    sim_ptr din = 0, dout = 0;
    int32_t *h = malloc(n * 4), *got = malloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = val(rank, i);
    EXPECT(&t, sim.MemAlloc(&din, n * 4) == 0 && sim.MemAlloc(&dout, n * 4) == 0, "cuMemAlloc");
    EXPECT(&t, sim.MemcpyAsync(din, (sim_ptr)(uintptr_t)h, n * 4, NULL) == 0, "cuMemcpyAsync");
    ccl_status_t st = ccl_all_reduce((void *)(uintptr_t)din, (void *)(uintptr_t)dout, rank == 1 ? 0 : n, CCL_INT32,
                                     CCL_SUM, g);
    EXPECT(&t, st == CCL_ERR_INVALID_USAGE, "a count of 0 on rank 1 only gave %s", ccl_status_string(st));
    EXPECT_OK(&t, ccl_all_reduce((void *)(uintptr_t)din, (void *)(uintptr_t)dout, n, CCL_INT32, CCL_SUM, g));
    EXPECT(&t, sim.MemcpyAsync((sim_ptr)(uintptr_t)got, dout, n * 4, NULL) == 0, "cuMemcpyAsync");
    for (size_t i = 0; i < n; i++) {
        uint32_t want = 0;
        for (int r = 0; r < nranks; r++) want += (uint32_t)val(r, i);
        if (got[i] != (int32_t)want) {
            EXPECT(&t, 0, "element %zu is %d, expected %d", i, got[i], (int32_t)want);
            break;
        }
    }
    if (CCL_TEST_GPU_KERNELS) EXPECT(&t, gpu_resident_calls(g) == 1, "gpu_resident_calls %ld, expected 1", gpu_resident_calls(g));
    sim.MemFree(din);
    sim.MemFree(dout);
    free(h);
    free(got);
    EXPECT_OK(&t, ccl_comm_destroy(g));
    return t.fails;
}

START_TEST(gpu_resident_ranks_that_disagree) {
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_gpu_disagree, .deadline_s = 120,
                              .env = "CCL_CHECK=1 CCL_CUDA_LIBRARY=" CCL_TEST_SIM_DRIVER};
    util_run_clean(&run, 0, "ranks that disagree on the GPU-resident path");
}
END_TEST

/* kill -9 on the GPU-resident path: 3 ranks all-reduce device buffers in
 * a loop, and the victim (the leader, or the last rank) dies a few
 * milliseconds into its fifth call, wherever that is: trading records,
 * launching the kernel, waiting for it or for its go word. Every survivor
 * must see CCL_ERR_REMOTE (or a timeout) within CCL_TIMEOUT + 5 s, and its
 * next call must fail at once. */
#define GPU_KILL_TIMEOUT_S 10

static int body_gpu_kill(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    int victim = *(const int *)arg;
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    ccl_comm_t *g = NULL;
    if (!t.fails) EXPECT_OK(&t, ccl_comm_split(comm, 0, rank, &g));
    if (t.fails) return t.fails;
    size_t n = 70001;
    sim_ptr din = 0, dout = 0;
    EXPECT(&t, sim.MemAlloc(&din, n * 4) == 0 && sim.MemAlloc(&dout, n * 4) == 0, "cuMemAlloc");
    ccl_status_t st = CCL_OK;
    int calls = 0;
    double seen = 0, end = harness_now() + 60;
    while (st == CCL_OK && harness_now() < end) {
        pthread_t th;
        if (rank == victim && calls == 4 &&
            pthread_create(&th, NULL, kill_self_after, (void *)(uintptr_t)(200 + getpid() % 7 * 400)) != 0)
            raise(SIGKILL);
        st = ccl_all_reduce((void *)(uintptr_t)din, (void *)(uintptr_t)dout, n, CCL_INT32, CCL_SUM, g);
        if (st != CCL_OK) seen = harness_now();
        calls++;
    }
    EXPECT(&t, rank != victim, "the victim was not killed");
    EXPECT(&t, st == CCL_ERR_REMOTE || st == CCL_ERR_TIMEOUT, "after %d calls: %s, expected a remote failure", calls,
           ccl_status_string(st));
    EXPECT(&t, calls >= 5 && *death_time > 0, "a failure after %d calls, before the victim died", calls);
    EXPECT(&t, seen - *death_time < GPU_KILL_TIMEOUT_S + 5, "the death was seen after %.1f s", seen - *death_time);
    double t0 = harness_now();
    ccl_status_t later = ccl_all_reduce((void *)(uintptr_t)din, (void *)(uintptr_t)dout, n, CCL_INT32, CCL_SUM, g);
    EXPECT(&t, later < 0 && harness_now() - t0 < 5, "the next call returned %s after %.1f s", ccl_status_string(later),
           harness_now() - t0);
    fprintf(stderr, "[gpu kill] rank %d saw %s %.3f s after the death, in call %d: %s\n", rank, ccl_status_string(st),
            seen - *death_time, calls, ccl_comm_last_error(g));
    ccl_comm_destroy(g);
    return t.fails;
}

START_TEST(gpu_resident_kill_9) {
    static const int victims[] = {0, 2};
    int victim = victims[_i];
    death_time_share();
    char timeout[8];
    snprintf(timeout, sizeof timeout, "%d", GPU_KILL_TIMEOUT_S);
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_gpu_kill, .arg = &victim,
                              .deadline_s = 120, .ccl_timeout = timeout, .lenient_destroy = 1,
                              .env = "CCL_CUDA_LIBRARY=" CCL_TEST_SIM_DRIVER};
    util_run_clean(&run, 1ull << victim, "kill -9 of rank %d on the GPU-resident path", victim);
    int vs = run.status[victim];
    ck_assert_msg(WIFSIGNALED(vs) && WTERMSIG(vs) == SIGKILL, "the victim (rank %d) did not die of SIGKILL (0x%x)",
                  victim, vs);
    death_time_unshare();
}
END_TEST

/* A kernel that hangs meets CCL_TIMEOUT, not a wait without end: the
 * simulated driver stalls the leader's kernel for STALL_S. Where the
 * peers' CCL_TIMEOUT is 2 s, they fail with CCL_ERR_TIMEOUT saying that no
 * word came from rank 0, and the leader, told of their failure, still
 * waits for its kernel (it reads and writes their buffers) and fails when
 * it ends. Where the leader's is 2 s, it fails naming its kernel, and the
 * peers learn of it at once. Every rank's call returns; nothing hangs. */
#define STALL_S 6.0
static int body_gpu_stall(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    int leader_times_out = *(const int *)arg;
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    ccl_comm_t *g = NULL;
    if (!t.fails) EXPECT_OK(&t, ccl_comm_split(comm, 0, rank, &g));
    if (t.fails) return t.fails;
    EXPECT(&t, gpu_resident_calls(g) == 0, "the GPU-resident path is off: gpu_resident_calls %ld", gpu_resident_calls(g));
    size_t n = 1001;
    sim_ptr din = 0, dout = 0;
    EXPECT(&t, sim.MemAlloc(&din, n * 4) == 0 && sim.MemAlloc(&dout, n * 4) == 0, "cuMemAlloc");
    double t0 = harness_now();
    ccl_status_t st = ccl_all_reduce((void *)(uintptr_t)din, (void *)(uintptr_t)dout, n, CCL_INT32, CCL_SUM, g);
    double took = harness_now() - t0;
    const char *why = ccl_comm_last_error(g);
    fprintf(stderr, "[gpu stall] rank %d: %s after %.1f s: %s\n", rank, ccl_status_string(st), took, why);
    if (leader_times_out ? rank == 0 : rank != 0) {
        /* A peer may hear of the other peer's timeout first, an instant
         * before its own. */
        int own = st == CCL_ERR_TIMEOUT && strstr(why, rank == 0 ? "the call's kernel" : "no word from rank 0") &&
                  strstr(why, "CCL_TIMEOUT=2");
        int other = rank != 0 && st == CCL_ERR_REMOTE && strstr(why, "failed (operation timed out)");
        EXPECT(&t, own || other, "the call returned %s, without saying what did not finish, or the timeout: '%s'",
               ccl_status_string(st), why);
        EXPECT(&t, took > 1.5 && took < 5, "the timeout came after %.1f s (CCL_TIMEOUT=2)", took);
    } else {
        EXPECT(&t, st < 0, "the call returned %s on a communicator whose %s timed out", ccl_status_string(st),
               rank == 0 ? "peers" : "leader");
        if (rank == 0) /* its kernel held the peers' buffers: it waited for it */
            EXPECT(&t, took > STALL_S - 1 && took < STALL_S + 4, "the leader returned after %.1f s, its kernel took %.0f",
                   took, STALL_S);
        else EXPECT(&t, took < 5 && strstr(why, "rank 0 failed (operation timed out)"),
                    "the peer learnt of the leader's timeout after %.1f s: '%s'", took, why);
    }
    sim.MemFree(din);
    sim.MemFree(dout);
    ccl_comm_destroy(g);
    return t.fails;
}

START_TEST(gpu_resident_stalled_kernel) {
    if (!CCL_TEST_GPU_KERNELS) {
        fprintf(stderr, "SKIP gpu_resident_stalled_kernel: the library was built without its GPU kernels (no nvcc), "
                        "so the GPU-resident path is off\n");
        return;
    }
    static const int leader_times_out[] = {0, 1};
    static const char *const peers_time_out[] = {"CCL_SIM_FOLD_STALL=6", "CCL_TIMEOUT=2", "CCL_TIMEOUT=2"};
    static const char *const leader_times_out_env[] = {"CCL_SIM_FOLD_STALL=6 CCL_TIMEOUT=2", NULL, NULL};
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_gpu_stall, .arg = (void *)&leader_times_out[_i],
                              .deadline_s = 90, .ccl_timeout = "30", .lenient_destroy = 1,
                              .rank_env = _i ? leader_times_out_env : peers_time_out,
                              .env = "CCL_CUDA_LIBRARY=" CCL_TEST_SIM_DRIVER};
    util_run_clean(&run, 0, "a kernel that stalls, the %s timing out", _i ? "leader" : "peers");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("stream_host");
    util_add_loop_case(s, "stream_twins_on_default_stream", stream_twins_on_default_stream, 3, 120);
    util_add_loop_case(s, "stream_without_driver_is_unsupported", stream_without_driver_is_unsupported, 1, 60);
    util_add_loop_case(s, "stream_twins_with_a_driver_but_no_context", stream_twins_with_a_driver_but_no_context, 1, 120);
    util_add_loop_case(s, "stream_order_on_a_simulated_gpu", stream_order_on_a_simulated_gpu, 3, 150);
    util_add_loop_case(s, "device_buffers_on_a_simulated_gpu", device_buffers_on_a_simulated_gpu, 3, 150);
    util_add_loop_case(s, "stream_capture_refused", stream_capture_refused, 2, 120);
    util_add_loop_case(s, "gpu_resident_path_on_a_simulated_gpu", gpu_resident_path_on_a_simulated_gpu, 5, 280);
    util_add_loop_case(s, "gpu_resident_ranks_that_disagree", gpu_resident_ranks_that_disagree, 1, 150);
    util_add_loop_case(s, "gpu_resident_kill_9", gpu_resident_kill_9, 2, 150);
    util_add_loop_case(s, "gpu_resident_stalled_kernel", gpu_resident_stalled_kernel, 2, 120);
    return s;
}

int main(void) { return harness_main(suite()); }
