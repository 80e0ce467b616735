/*
 * Pipelined staging of device buffers (lib/device/pipeline.h) on the
 * simulated GPU (tests/cuda/sim_driver.c), whose memory the CPU cannot
 * touch and whose copies each take a moment, so that a piece run before
 * its copy in, or copied out before the host wrote it, shows as a wrong
 * value. A communicator made with a context current cuts large
 * all-reduces, broadcasts, reduces, reduce-scatters and all-gathers (their
 * pieces strided across the ranks' blocks) into pieces on every rank: results
 * bit for bit against a reference computed here, on device and on host
 * buffers, in place and out, counts that cut into 2, 3, 7 and more than
 * the 64 pieces a call may have; ranks that disagree (one without a
 * context, on host buffers; pieces of different sizes asked for; a rank
 * that asks for whole calls); a rank killed during pipelined calls; a
 * cut call's trace.
 */
/* ctest: TIMEOUT 300 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kill_later.h"
#include "ref.h"
#include "sim_gpu.h"
#include "util.h"

#define PIECE 65536 /* CCL_DEVICE_PIECE_BYTES in these tests: 16384 elements of 4 bytes */
#define ENV "CCL_CUDA_LIBRARY=" CCL_TEST_SIM_DRIVER " CCL_CUDA_DIRECT=0"

enum { K_AR, K_BC, K_RD, K_RS, K_AG, KINDS };
static const char *const kind_names[] = {"all_reduce", "broadcast", "reduce", "reduce_scatter", "all_gather"};

/* Blocks of n elements in a call's input and output: a reduce-scatter's
 * input and an all-gather's output hold one per rank. */
static size_t in_blocks(int kind, int nranks) { return kind == K_RS ? (size_t)nranks : 1; }
static size_t out_blocks(int kind, int nranks) { return kind == K_AG ? (size_t)nranks : 1; }

/* Whether the communicator cuts a call (device/pipeline.c's rule): more
 * than two pieces of piece bytes in all, a piece taking its elements
 * from every block of a reduce-scatter's input or an all-gather's output. */
static int is_cut(int kind, size_t n, int nranks, long piece) {
    size_t blocks = in_blocks(kind, nranks) * out_blocks(kind, nranks), per = (size_t)piece / 4 / blocks;
    return piece && n > 2 * (per ? per : 1);
}

static uint32_t input(int rank, size_t i, int salt) {
    return (uint32_t)(ref_mix((uint64_t)salt, (uint64_t)rank, i) % 2000001u);
}

/* Rank r's element i, as int32 (sum) or float32 (max). */
static void fill(void *buf, ccl_dtype_t dt, int rank, size_t n, int salt) {
    for (size_t i = 0; i < n; i++) {
        uint32_t v = input(rank, i, salt);
        if (dt == CCL_FLOAT32) ((float *)buf)[i] = (float)v / 8.0f - 100000.0f;
        else ((int32_t *)buf)[i] = (int32_t)(v * 2654435761u);
    }
}

/* What element i must hold after kind on every rank with a result (a
 * reduce-scatter's on rank `rank`). */
static void reference(void *want, int kind, ccl_dtype_t dt, int root, int nranks, size_t n, int salt, int rank) {
    float *f = want;
    int32_t *s = want;
    if (kind == K_BC) {
        fill(want, dt, root, n, salt);
        return;
    }
    if (kind == K_AG) {
        for (int r = 0; r < nranks; r++) fill((char *)want + (size_t)r * n * 4, dt, r, n, salt);
        return;
    }
    if (kind == K_RS) {
        reference(want, K_AR, dt, root, nranks, n * (size_t)nranks, salt, rank);
        memmove(want, (char *)want + (size_t)rank * n * 4, n * 4);
        return;
    }
    fill(want, dt, 0, n, salt);
    for (int r = 1; r < nranks; r++)
        for (size_t i = 0; i < n; i++) {
            uint32_t v = input(r, i, salt);
            if (dt == CCL_FLOAT32) {
                float x = (float)v / 8.0f - 100000.0f;
                if (x > f[i]) f[i] = x;
            } else {
                s[i] = (int32_t)((uint32_t)s[i] + v * 2654435761u);
            }
        }
}

static ccl_status_t call(int kind, const void *s, void *r, size_t n, ccl_dtype_t dt, int root, ccl_comm_t *c) {
    ccl_op_t op = dt == CCL_FLOAT32 ? CCL_MAX : CCL_SUM;
    if (kind == K_AR) return ccl_all_reduce(s, r, n, dt, op, c);
    if (kind == K_BC) return ccl_broadcast(s, r, n, dt, root, c);
    if (kind == K_RS) return ccl_reduce_scatter(s, r, n, dt, op, c);
    if (kind == K_AG) return ccl_all_gather(s, r, n, dt, c);
    return ccl_reduce(s, r, n, dt, op, root, c);
}

/* In place, a reduce-scatter's output is this rank's block of its input,
 * an all-gather's input this rank's block of its output: the byte offsets
 * of input and output in the one buffer. */
static void in_place_offsets(int kind, int rank, size_t n, size_t *in_at, size_t *out_at) {
    *in_at = kind == K_AG ? (size_t)rank * n * 4 : 0;
    *out_at = kind == K_RS ? (size_t)rank * n * 4 : 0;
}

/* The number after key in comm's description, -1 when absent. */
static long described(ccl_comm_t *c, const char *key) {
    char desc[2048] = "";
    if (ccl_comm_describe(c, desc, sizeof desc) != CCL_OK) return -2;
    const char *at = strstr(desc, key);
    return at ? atol(at + strlen(key)) : -1;
}

struct cfg {
    int device;       /* this rank's buffers are device memory (and a context is current at the split) */
    long want_piece;  /* the communicator's piece in bytes, 0: whole calls */
};

/* One call on this rank's buffers (device or host) against the
 * reference; 1 when it ran piece by piece on device buffers. */
static int check_one(struct harness_tally *t, ccl_comm_t *g, int device, int kind, ccl_dtype_t dt, size_t n,
                     int in_place, int rank, int nranks, long piece, unsigned char **bufs, sim_ptr din, sim_ptr dout) {
    int root = nranks > 1 ? 1 : 0, salt = kind * 16 + (int)dt * 2 + in_place;
    size_t in_bytes = n * 4 * in_blocks(kind, nranks), out_bytes = n * 4 * out_blocks(kind, nranks);
    size_t buf_bytes = in_bytes > out_bytes ? in_bytes : out_bytes, in_at = 0, out_at = 0;
    unsigned char *hin = bufs[0], *hout = bufs[1], *want = bufs[2], *got = bufs[3];
    if (in_place) in_place_offsets(kind, rank, n, &in_at, &out_at);
    /* in place, the input is written into the one buffer (hin) where the call reads it */
    memset(hin, 0xa5, buf_bytes);
    memset(hout, 0xa5, buf_bytes);
    fill(hin + in_at, dt, rank, n * in_blocks(kind, nranks), salt);
    reference(want, kind, dt, root, nranks, n, salt, rank);
    void *s = hin + in_at, *r = in_place ? hin + out_at : hout;
    if (device) {
        void *st = NULL; /* the legacy default stream: copies with pageable memory end before they return */
        if (buf_bytes) {
            EXPECT(t, sim.MemcpyAsync(din, (sim_ptr)(uintptr_t)hin, buf_bytes, st) == 0, "cuMemcpyAsync");
            EXPECT(t, sim.MemcpyAsync(dout, (sim_ptr)(uintptr_t)hout, buf_bytes, st) == 0, "cuMemcpyAsync");
        }
        s = (void *)(uintptr_t)(din + in_at);
        r = (void *)(uintptr_t)(in_place ? din + out_at : dout);
    }
    EXPECT_OK(t, call(kind, s, r, n, dt, root, g));
    int has_result = kind != K_RD || rank == root;
    if (device && out_bytes)
        EXPECT(t, sim.MemcpyAsync((sim_ptr)(uintptr_t)got, (sim_ptr)(uintptr_t)r, out_bytes, NULL) == 0, "cuMemcpyAsync");
    else memcpy(got, r, out_bytes);
    if (has_result && out_bytes && memcmp(got, want, out_bytes) != 0) {
        size_t i = 0;
        while (memcmp(got + i * 4, want + i * 4, 4) == 0) i++;
        EXPECT(t, 0, "%s %s, %zu elements, %s, on %s buffers: element %zu of %zu differs from the reference",
               kind_names[kind], dt == CCL_FLOAT32 ? "float32 max" : "int32 sum", n, in_place ? "in place" : "out of place",
               device ? "device" : "host", i, out_bytes / 4);
    }
    return device && is_cut(kind, n, nranks, piece);
}

/* A premultiplied-sum reduce-scatter of int32 (each rank's scalar its
 * rank + 2), whose pieces scale their strided blocks: in place and out,
 * against the sum of each rank's products (wrapping, as int32 does). */
static void check_premul_rs(struct harness_tally *t, ccl_comm_t *g, int device, size_t n, int rank, int nranks,
                            unsigned char **bufs, sim_ptr din, sim_ptr dout) {
    int32_t scalar = rank + 2;
    ccl_op_t op;
    EXPECT_OK(t, ccl_op_create_premul_sum(g, CCL_INT32, &scalar, &op));
    if (t->fails) return;
    size_t in_bytes = n * 4 * (size_t)nranks;
    int32_t *want = (int32_t *)(void *)bufs[2], *got = (int32_t *)(void *)bufs[3];
    for (size_t i = 0; i < n; i++) {
        uint32_t sum = 0;
        for (int r = 0; r < nranks; r++)
            sum += input(r, (size_t)rank * n + i, 7) * 2654435761u * (uint32_t)(r + 2);
        want[i] = (int32_t)sum;
    }
    for (int in_place = 0; in_place < 2 && !t->fails; in_place++) {
        fill(bufs[0], CCL_INT32, rank, n * (size_t)nranks, 7);
        char *s = (char *)bufs[0], *r = in_place ? s + (size_t)rank * n * 4 : (char *)bufs[1];
        if (device) {
            EXPECT(t, sim.MemcpyAsync(din, (sim_ptr)(uintptr_t)s, in_bytes, NULL) == 0, "cuMemcpyAsync");
            s = (char *)(uintptr_t)din;
            r = in_place ? s + (size_t)rank * n * 4 : (char *)(uintptr_t)dout;
        }
        EXPECT_OK(t, ccl_reduce_scatter(s, r, n, CCL_INT32, op, g));
        if (device) EXPECT(t, sim.MemcpyAsync((sim_ptr)(uintptr_t)got, (sim_ptr)(uintptr_t)r, n * 4, NULL) == 0, "cuMemcpyAsync");
        else memcpy(got, r, n * 4);
        EXPECT(t, memcmp(got, want, n * 4) == 0, "premultiplied-sum reduce_scatter of %zu int32, %s, on %s buffers: "
               "result differs from the reference", n, in_place ? "in place" : "out of place", device ? "device" : "host");
    }
    EXPECT_OK(t, ccl_op_destroy(g, op));
}

/* The end of a body: its device buffers (0: none), host buffers and
 * communicator go. */
static void release(struct harness_tally *t, ccl_comm_t *g, unsigned char **bufs, sim_ptr din, sim_ptr dout) {
    if (din) sim.MemFree(din);
    if (dout) sim.MemFree(dout);
    for (int b = 0; b < 4; b++) free(bufs[b]);
    EXPECT_OK(t, ccl_comm_destroy(g));
}

static int body_pieces(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct cfg *cfg = (const struct cfg *)arg + rank;
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    if (t.fails) return t.fails;
    if (!cfg->device) EXPECT(&t, sim.CtxSetCurrent(NULL) == 0, "cuCtxSetCurrent"); /* no context at the split */
    ccl_comm_t *g = NULL;
    EXPECT_OK(&t, ccl_comm_split(comm, 0, rank, &g));
    if (t.fails) return t.fails;
    long piece = described(g, "device_piece_bytes=");
    EXPECT(&t, piece == (cfg->want_piece ? cfg->want_piece : -1), "device_piece_bytes=%ld, expected %ld", piece,
           cfg->want_piece);
    if (piece < 0) piece = 0;
    /* 2 pieces exactly (whole), 3, 7, and more than 64 (larger pieces) */
    const size_t counts[] = {0, 1, 32768, 32769, 100003, 16384 * 70 + 5};
    const size_t max_bytes = (16384 * 70 + 5) * 4 * (size_t)nranks;
    unsigned char *bufs[4];
    for (int b = 0; b < 4; b++) bufs[b] = malloc(max_bytes);
    sim_ptr din = 0, dout = 0;
    if (cfg->device) EXPECT(&t, sim.MemAlloc(&din, max_bytes) == 0 && sim.MemAlloc(&dout, max_bytes) == 0, "cuMemAlloc");
    int piped = 0;
    for (int k = 0; k < KINDS && !t.fails; k++)
        for (int d = 0; d < 2 && !t.fails; d++)
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0] && !t.fails; ci++)
                for (int in_place = 0; in_place < 2 && !t.fails; in_place++) {
                    ccl_dtype_t dt = d ? CCL_FLOAT32 : CCL_INT32;
                    /* the device call, then the same on host buffers (which every rank cuts alike) */
                    piped += check_one(&t, g, cfg->device, k, dt, counts[ci], in_place, rank, nranks, piece, bufs,
                                       din, dout);
                    check_one(&t, g, 0, k, dt, counts[ci], in_place, rank, nranks, piece, bufs, din, dout);
                }
    /* cut into pieces of 3 blocks each on 3 ranks, whole on 1 */
    check_premul_rs(&t, g, cfg->device, 100003, rank, nranks, bufs, din, dout);
    piped += 2 * (cfg->device && is_cut(K_RS, 100003, nranks, piece));
    long seen = described(g, "pipelined_calls=");
    EXPECT(&t, seen == (piece ? piped : -1), "pipelined_calls=%ld, expected %d", seen, piece ? piped : -1);
    release(&t, g, bufs, din, dout);
    return t.fails;
}

START_TEST(pieces_on_a_simulated_gpu) {
    static const struct {
        int nranks;
        const char *transport, *env;
    } runs[] = {{1, "shm", ENV " CCL_DEVICE_PIECE_BYTES=65536"},
                {3, "shm", ENV " CCL_DEVICE_PIECE_BYTES=65536"},
                {2, "tcp", ENV " CCL_DEVICE_PIECE_BYTES=65536"},
                /* an algorithm forced that takes no strided blocks: the
                 * reduce-scatters' and all-gathers' pieces run the ring */
                {3, "shm", ENV " CCL_DEVICE_PIECE_BYTES=65536 CCL_ALGO=direct"}};
    struct cfg cfg[3] = {{1, PIECE}, {1, PIECE}, {1, PIECE}};
    struct harness_run run = {.nranks = runs[_i].nranks, .transport = runs[_i].transport, .body = body_pieces,
                              .arg = cfg, .deadline_s = 200, .env = runs[_i].env};
    util_run_clean(&run, 0, "pipelined staging, %d ranks over %s%s", runs[_i].nranks, runs[_i].transport,
                   strstr(runs[_i].env, "CCL_ALGO") ? ", CCL_ALGO=direct" : "");
}
END_TEST

/* Rank 1 has no context at the split and host buffers; rank 2 asks for
 * pieces twice as large (the smallest wins), or for whole calls (then
 * nothing is cut, on any rank). */
START_TEST(pieces_when_ranks_differ) {
    static const char *const twice[3] = {NULL, NULL, "CCL_DEVICE_PIECE_BYTES=131072"};
    static const char *const whole[3] = {NULL, NULL, "CCL_DEVICE_PIECE_BYTES=0"};
    struct cfg cfg[3] = {{1, PIECE}, {0, PIECE}, {1, PIECE}};
    if (_i == 1)
        for (int r = 0; r < 3; r++) cfg[r].want_piece = 0;
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_pieces, .arg = cfg, .deadline_s = 200,
                              .env = ENV " CCL_DEVICE_PIECE_BYTES=65536", .rank_env = _i ? whole : twice};
    util_run_clean(&run, 0, "pipelined staging, ranks that differ (%s)", _i ? "one asks for whole calls" : "pieces");
}
END_TEST

/* ---- stream-ordered calls in pieces ----
 * On a created stream, then the legacy default stream, with no host
 * synchronisation until the end: a copy writes each call's device input,
 * the call runs on the stream, a copy reads its result into pinned memory;
 * between the cut calls, a call too small to cut and a group of two (staged
 * whole, cut on the host). A piece run before its copy in, a copy out
 * before the piece's results, or the staging buffer reused before the last
 * call's copies out ended, shows as a wrong value. */
#define STREAM_CALLS 14

struct stream_call {
    int kind, in_place, group;
    size_t n;
    ccl_dtype_t dt;
};

static int body_stream_pieces(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    ccl_comm_t *g = NULL;
    if (!t.fails) EXPECT_OK(&t, ccl_comm_split(comm, 0, rank, &g));
    if (t.fails) return t.fails;
    const size_t big = 16384 * 70 + 5;
    struct stream_call calls[STREAM_CALLS];
    int nc = 0, cut = 0;
    for (int k = 0; k < KINDS; k++)
        for (int ip = 0; ip < 2; ip++) {
            calls[nc++] = (struct stream_call){k, ip, 0, ip ? 100003 : big, ip ? CCL_FLOAT32 : CCL_INT32};
            cut++;
        }
    calls[nc++] = (struct stream_call){K_AR, 0, 0, 1001, CCL_INT32};  /* whole */
    calls[nc++] = (struct stream_call){K_AR, 0, 1, 32769, CCL_INT32}; /* a group of two: staged whole */
    calls[nc++] = (struct stream_call){K_BC, 1, 1, 32769, CCL_INT32};
    calls[nc++] = (struct stream_call){K_RD, 0, 0, 32769, CCL_FLOAT32};
    cut++;
    void *s = NULL;
    EXPECT(&t, sim.StreamCreate(&s, 1) == 0, "cuStreamCreate");
    sim_ptr din[STREAM_CALLS], dout[STREAM_CALLS];
    unsigned char *src[STREAM_CALLS], *res[STREAM_CALLS];
    size_t in_b[STREAM_CALLS], out_b[STREAM_CALLS], in_at[STREAM_CALLS], out_at[STREAM_CALLS];
    for (int i = 0; i < nc; i++) {
        const struct stream_call *c = &calls[i];
        in_b[i] = c->n * 4 * in_blocks(c->kind, nranks);
        out_b[i] = c->n * 4 * out_blocks(c->kind, nranks);
        in_at[i] = out_at[i] = 0;
        if (c->in_place) in_place_offsets(c->kind, rank, c->n, &in_at[i], &out_at[i]);
        size_t b = in_b[i] > out_b[i] ? in_b[i] : out_b[i];
        EXPECT(&t, sim.MemAlloc(&din[i], b) == 0 && sim.MemAlloc(&dout[i], b) == 0, "cuMemAlloc");
        EXPECT(&t, sim.MemHostAlloc((void **)&src[i], b, 0) == 0 && sim.MemHostAlloc((void **)&res[i], b, 0) == 0,
               "cuMemHostAlloc");
    }
    unsigned char *want = malloc(big * 4 * (size_t)nranks);
    int root = nranks > 1 ? 1 : 0;
    for (int round = 0; round < 2 && !t.fails; round++) {
        void *st = round ? NULL : s; /* then the legacy default stream */
        for (int i = 0; i < nc; i++) {
            const struct stream_call *c = &calls[i];
            fill(src[i], c->dt, rank, in_b[i] / 4, 100 + i + round * 50);
            memset(res[i], 0x5a, out_b[i]);
            /* in place, the input goes where the call reads it in the one buffer */
            EXPECT(&t, sim.MemcpyAsync(din[i] + in_at[i], (sim_ptr)(uintptr_t)src[i], in_b[i], st) == 0,
                   "cuMemcpyAsync");
            void *in = (void *)(uintptr_t)(din[i] + in_at[i]);
            void *out = (void *)(uintptr_t)(c->in_place ? din[i] + out_at[i] : dout[i]);
            ccl_op_t op = c->dt == CCL_FLOAT32 ? CCL_MAX : CCL_SUM;
            if (c->group && (i == 0 || !calls[i - 1].group)) EXPECT_OK(&t, ccl_group_start());
            if (c->kind == K_AR) EXPECT_OK(&t, ccl_all_reduce_stream(in, out, c->n, c->dt, op, g, st));
            else if (c->kind == K_BC) EXPECT_OK(&t, ccl_broadcast_stream(in, out, c->n, c->dt, root, g, st));
            else if (c->kind == K_RS) EXPECT_OK(&t, ccl_reduce_scatter_stream(in, out, c->n, c->dt, op, g, st));
            else if (c->kind == K_AG) EXPECT_OK(&t, ccl_all_gather_stream(in, out, c->n, c->dt, g, st));
            else EXPECT_OK(&t, ccl_reduce_stream(in, out, c->n, c->dt, op, root, g, st));
            if (c->group && i + 1 < nc && calls[i + 1].group) continue; /* its results after the group's end */
            if (c->group) EXPECT_OK(&t, ccl_group_end_stream(st));
            for (int j = i; j >= 0 && (j == i || calls[j].group); j--) {
                const struct stream_call *r = &calls[j];
                sim_ptr o = r->in_place ? din[j] + out_at[j] : dout[j];
                if (r->kind != K_RD || rank == root)
                    EXPECT(&t, sim.MemcpyAsync((sim_ptr)(uintptr_t)res[j], o, out_b[j], st) == 0, "cuMemcpyAsync");
                if (!c->group) break;
            }
        }
        sim.StreamSynchronize(st);
        for (int i = 0; i < nc && !t.fails; i++) {
            const struct stream_call *c = &calls[i];
            if (c->kind == K_RD && rank != root) continue;
            reference(want, c->kind, c->dt, root, nranks, c->n, 100 + i + round * 50, rank);
            EXPECT(&t, memcmp(res[i], want, out_b[i]) == 0, "round %d, call %d (%s of %zu, %s): result differs from "
                   "the reference", round, i, kind_names[c->kind], c->n, c->in_place ? "in place" : "out of place");
        }
    }
    long seen = described(g, "pipelined_calls=");
    EXPECT(&t, seen == 2 * cut, "pipelined_calls=%ld, expected %d", seen, 2 * cut);
    for (int i = 0; i < nc; i++) {
        sim.MemFree(din[i]);
        sim.MemFree(dout[i]);
        sim.MemFreeHost(src[i]);
        sim.MemFreeHost(res[i]);
    }
    free(want);
    sim.StreamDestroy(s);
    EXPECT_OK(&t, ccl_comm_destroy(g));
    return t.fails;
}

START_TEST(stream_ordered_pieces_on_a_simulated_gpu) {
    static const struct {
        int nranks;
        const char *transport;
        const char *env;
    } runs[] = {{1, "shm", ENV " CCL_DEVICE_PIECE_BYTES=65536"},
                {3, "shm", ENV " CCL_DEVICE_PIECE_BYTES=65536"},
                {2, "tcp", ENV " CCL_DEVICE_PIECE_BYTES=65536"},
                /* no stream memory operations: every ready word and ticket wait a host function */
                {3, "shm", ENV " CCL_DEVICE_PIECE_BYTES=65536 CCL_SIM_NO_MEMOPS=1"}};
    struct harness_run run = {.nranks = runs[_i].nranks, .transport = runs[_i].transport, .body = body_stream_pieces,
                              .deadline_s = 200, .env = runs[_i].env};
    util_run_clean(&run, 0, "stream-ordered pipelined staging, %d ranks over %s%s", runs[_i].nranks,
                   runs[_i].transport, strstr(runs[_i].env, "NO_MEMOPS") ? ", without stream memory operations" : "");
}
END_TEST

/* ---- ranks that disagree on a call the communicator cuts ----
 * Rank 0 calls with a count that runs whole (two pieces exactly), the
 * others with one more element (three pieces). Under CCL_CHECK=1 every
 * rank fails the call with CCL_ERR_INVALID_USAGE naming the counts,
 * before anything moves, and the next call, agreed, runs and is right.
 * Without it the pieces themselves meet a count they did not expect:
 * every rank fails, none hangs. */
static int body_disagree(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    int checked = *(const int *)arg;
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    ccl_comm_t *g = NULL;
    if (!t.fails) EXPECT_OK(&t, ccl_comm_split(comm, 0, rank, &g));
    if (t.fails) return t.fails;
    size_t n = rank == 0 ? 32768 : 32769;
    sim_ptr din = 0, dout = 0;
    EXPECT(&t, sim.MemAlloc(&din, 100003 * 4) == 0 && sim.MemAlloc(&dout, 100003 * 4) == 0, "cuMemAlloc");
    double t0 = harness_now();
    ccl_status_t st = ccl_all_reduce((void *)(uintptr_t)din, (void *)(uintptr_t)dout, n, CCL_INT32, CCL_SUM, g);
    const char *err = ccl_comm_last_error(g);
    EXPECT(&t, st < 0 && harness_now() - t0 < 20, "the disagreeing call returned %s after %.1f s",
           ccl_status_string(st), harness_now() - t0);
    /* a piece's own mismatch says which piece of what (a rank may instead
     * learn first that a peer failed on it) */
    if (!checked && n == 32769 && strstr(err, "differs"))
        EXPECT(&t, strstr(err, "(piece 1 of 3 of this rank's call of 32769 elements"), "%s", err);
    if (checked) {
        EXPECT(&t, st == CCL_ERR_INVALID_USAGE && strstr(err, "count"), "%s: %s", ccl_status_string(st), err);
        /* the communicator stays usable: an agreed call, checked */
        unsigned char *bufs[4];
        for (int b = 0; b < 4; b++) bufs[b] = malloc(100003 * 4);
        check_one(&t, g, 1, K_AR, CCL_INT32, 100003, 0, rank, nranks, PIECE, bufs, din, dout);
        for (int b = 0; b < 4; b++) free(bufs[b]);
    }
    fprintf(stderr, "[disagree] rank %d: %s: %s\n", rank, ccl_status_string(st), err);
    sim.MemFree(din);
    sim.MemFree(dout);
    ccl_comm_destroy(g);
    return t.fails;
}

START_TEST(pieces_when_ranks_disagree_on_the_count) {
    int checked = _i == 0;
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_disagree, .arg = &checked,
                              .deadline_s = 100, .ccl_timeout = "10", .lenient_destroy = !checked,
                              .env = checked ? ENV " CCL_DEVICE_PIECE_BYTES=65536 CCL_CHECK=1"
                                             : ENV " CCL_DEVICE_PIECE_BYTES=65536"};
    util_run_clean(&run, 0, "ranks that disagree on a cut call's count (%s)", checked ? "CCL_CHECK=1" : "unchecked");
}
END_TEST

/* ---- a rank killed during pipelined calls ---- */

#define KILL_TIMEOUT_S 10


/* Pipelined all-reduces until one fails: the survivors' call fails with
 * the peer named within the timeout, their next call at once, and their
 * streams end idle (destroy frees them). */
struct kill_case {
    int victim;
    int on_stream; /* stream-ordered calls: the survivors' stream must go on past the failure */
};

/* One all-reduce, waited for: on a stream, the stream synchronised and
 * the communicator's asynchronous error read. */
static ccl_status_t kill_call(ccl_comm_t *g, sim_ptr din, sim_ptr dout, size_t n, void *stream, int on_stream) {
    void *in = (void *)(uintptr_t)din, *out = (void *)(uintptr_t)dout;
    if (!on_stream) return ccl_all_reduce(in, out, n, CCL_INT32, CCL_SUM, g);
    ccl_status_t st = ccl_all_reduce_stream(in, out, n, CCL_INT32, CCL_SUM, g, stream);
    if (st != CCL_OK) return st;
    sim.StreamSynchronize(stream);
    ccl_status_t err = CCL_OK;
    st = ccl_comm_get_async_error(g, &err);
    return st != CCL_OK ? st : err;
}

static int body_kill(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    const struct kill_case *kc = arg;
    int victim = kc->victim;
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    ccl_comm_t *g = NULL;
    if (!t.fails) EXPECT_OK(&t, ccl_comm_split(comm, 0, rank, &g));
    if (t.fails) return t.fails;
    size_t n = 100003;
    sim_ptr din = 0, dout = 0;
    EXPECT(&t, sim.MemAlloc(&din, n * 4) == 0 && sim.MemAlloc(&dout, n * 4) == 0, "cuMemAlloc");
    void *stream = NULL;
    if (kc->on_stream) EXPECT(&t, sim.StreamCreate(&stream, 1) == 0, "cuStreamCreate");
    ccl_status_t st = CCL_OK;
    int calls = 0;
    double failed_at = 0, end = harness_now() + 60;
    pthread_t th;
    while (st == CCL_OK && harness_now() < end) {
        if (rank == victim && calls == 3 &&
            pthread_create(&th, NULL, kill_self_after, (void *)(uintptr_t)(500 + getpid() % 5 * 700)) != 0)
            raise(SIGKILL);
        st = kill_call(g, din, dout, n, stream, kc->on_stream);
        if (st != CCL_OK) failed_at = harness_now();
        calls++;
    }
    EXPECT(&t, rank != victim, "the victim was not killed");
    EXPECT(&t, st == CCL_ERR_REMOTE || st == CCL_ERR_TIMEOUT, "after %d calls: %s, expected a remote failure", calls,
           ccl_status_string(st));
    EXPECT(&t, *death_time > 0 && failed_at - *death_time < KILL_TIMEOUT_S + 5, "the death was seen after %.1f s",
           failed_at - *death_time);
    EXPECT(&t, described(g, "pipelined_calls=") >= 3, "pipelined_calls=%ld before the death",
           described(g, "pipelined_calls="));
    double t0 = harness_now();
    ccl_status_t later = kill_call(g, din, dout, n, stream, kc->on_stream);
    EXPECT(&t, later < 0 && harness_now() - t0 < 5, "the next call returned %s after %.1f s",
           ccl_status_string(later), harness_now() - t0);
    fprintf(stderr, "[pipeline kill%s] rank %d: %s %.3f s after the death, call %d: %s\n",
            kc->on_stream ? ", on a stream" : "", rank, ccl_status_string(st), failed_at - *death_time, calls,
            ccl_comm_last_error(g));
    ccl_comm_destroy(g);
    if (stream) sim.StreamDestroy(stream);
    sim.MemFree(din);
    sim.MemFree(dout);
    return t.fails;
}

START_TEST(pipelined_kill_9) {
    static const int victims[] = {0, 2};
    int victim = victims[_i % 2];
    struct kill_case kc = {victim, _i >= 2};
    death_time_share();
    char timeout[8];
    snprintf(timeout, sizeof timeout, "%d", KILL_TIMEOUT_S);
    struct harness_run run = {.nranks = 3, .transport = "shm", .body = body_kill, .arg = &kc, .deadline_s = 120,
                              .ccl_timeout = timeout, .lenient_destroy = 1,
                              .env = ENV " CCL_DEVICE_PIECE_BYTES=65536"};
    util_run_clean(&run, 1ull << victim, "kill -9 of rank %d during pipelined calls%s", victim,
                   kc.on_stream ? " on a stream" : "");
    int vs = run.status[victim];
    ck_assert_msg(WIFSIGNALED(vs) && WTERMSIG(vs) == SIGKILL, "the victim (rank %d) did not die of SIGKILL (0x%x)",
                  victim, vs);
    death_time_unshare();
}
END_TEST

/* A cut call traces as one call: its pieces' events carry the call's
 * number and their places in the call's buffers, so the trace's extent is
 * the whole call, each byte of it reduced once a rank (a 2-rank ring),
 * not its first piece's (each piece's events once started at offset 0). */
static int body_trace(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {.rank = rank};
    sim_open(&t);
    if (t.fails) return t.fails;
    ccl_comm_t *g = NULL;
    EXPECT_OK(&t, ccl_comm_split(comm, 0, rank, &g));
    if (t.fails) return t.fails;
    const size_t n = 16384 * 3 + 5, bytes = n * 4; /* 4 pieces */
    unsigned char *bufs[4];
    for (int b = 0; b < 4; b++) bufs[b] = malloc(bytes);
    sim_ptr din = 0, dout = 0;
    EXPECT(&t, sim.MemAlloc(&din, bytes) == 0 && sim.MemAlloc(&dout, bytes) == 0, "cuMemAlloc");
    char path[64];
    snprintf(path, sizeof path, "/tmp/ccl-pipe-trace-%d.json", (int)getppid());
    EXPECT_OK(&t, ccl_comm_trace_start(g));
    check_one(&t, g, 1, K_AR, CCL_INT32, n, 0, rank, nranks, PIECE, bufs, din, dout);
    EXPECT_OK(&t, ccl_comm_trace_stop(g, path));
    EXPECT(&t, described(g, "pipelined_calls=") == 1, "pipelined_calls=%ld, expected 1", described(g, "pipelined_calls="));
    if (rank == 0 && !t.fails) {
        FILE *f = fopen(path, "r");
        EXPECT(&t, f != NULL, "the trace %s was not written", path);
        size_t reduced = 0, end = 0, events = 0;
        char line[1024];
        while (f && fgets(line, sizeof line, f)) {
            const char *o = strstr(line, "\"offset\":"), *b = strstr(line, "\"bytes\":");
            if (!o || !b || !strstr(line, "\"coll\":\"all_reduce\"")) continue;
            unsigned long long off = strtoull(o + 9, NULL, 10), len = strtoull(b + 8, NULL, 10);
            events++;
            if (off + len > end) end = (size_t)(off + len);
            if (strstr(line, "\"cat\":\"reduce\"") && strstr(line, "\"pid\":0,")) reduced += (size_t)len;
        }
        if (f) fclose(f);
        EXPECT(&t, events > 0, "no all_reduce events in %s", path);
        EXPECT(&t, end == bytes, "the traced all_reduce spans %zu bytes of the call's %zu", end, bytes);
        EXPECT(&t, reduced == bytes / 2 || reduced == (bytes + 4) / 2 || reduced == (bytes - 4) / 2,
               "rank 0 reduced %zu bytes in the trace, half of the call's %zu expected", reduced, bytes);
        unlink(path);
    }
    release(&t, g, bufs, din, dout);
    return t.fails;
}

START_TEST(pieces_trace_as_one_call) {
    struct harness_run run = {.nranks = 2, .transport = "shm", .body = body_trace, .deadline_s = 100,
                              .env = ENV " CCL_DEVICE_PIECE_BYTES=65536 CCL_ALGO=allreduce:ring"};
    util_run_clean(&run, 0, "a pipelined call traced, 2 ranks over shm");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("device_pipeline");
    util_add_loop_case(s, "pieces_on_a_simulated_gpu", pieces_on_a_simulated_gpu, 4, 250);
    util_add_loop_case(s, "pieces_when_ranks_differ", pieces_when_ranks_differ, 2, 250);
    util_add_loop_case(s, "stream_ordered_pieces_on_a_simulated_gpu", stream_ordered_pieces_on_a_simulated_gpu, 4, 250);
    util_add_loop_case(s, "pieces_when_ranks_disagree_on_the_count", pieces_when_ranks_disagree_on_the_count, 2, 150);
    util_add_loop_case(s, "pipelined_kill_9", pipelined_kill_9, 4, 150);
    util_add_loop_case(s, "pieces_trace_as_one_call", pieces_trace_as_one_call, 1, 100);
    return s;
}

int main(void) { return harness_main(suite()); }
