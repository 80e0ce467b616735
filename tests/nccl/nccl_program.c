/*
 * A program written against NCCL's API, and nothing else (nccl.h plus the
 * C library): built and linked against libccl-nccl, it must run as it
 * would on NCCL. It forks NRANKS processes that share one unique id, then
 * on host buffers and the default stream (device buffers: tests/cuda)
 * checks every collective bit-exactly for every datatype and operation,
 * send/recv in a group, split, premultiplied sums, the queries, the error
 * paths and abort. Exits 0 when every rank passed.
 *
 *   nccl_program [NRANKS]      (default 3)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl.h"
#include "nccl/check.h"
#include "spawn_ranks.h"

static int rank, nranks, fails;

/* The ten wide datatypes (the 8-bit floats: nccl_fp8.c). */
#define WIDE_TYPES (ncclBfloat16 + 1)
static const size_t sizes[WIDE_TYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

/* Small integers: exact in every datatype (float16 and bfloat16 too), so
 * sums of a few ranks compare bit for bit. */
static double value(int r, size_t i) { return (double)((int)((r * 7 + i * 3) % 11) - 3); }

static uint16_t to_half(double v) { /* exact for the small integers used */
    if (v == 0) return signbit(v) ? 0x8000 : 0; /* a product with a zero keeps the sign */
    uint16_t sign = v < 0 ? 0x8000 : 0;
    double a = v < 0 ? -v : v;
    int e = 0;
    while (a >= 2) a /= 2, e++;
    return (uint16_t)(sign | ((e + 15) << 10) | (uint16_t)((a - 1) * 1024));
}
static uint16_t to_bf16(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static void put(void *buf, ncclDataType_t t, size_t i, double v) {
    char *p = (char *)buf + i * sizes[t];
    switch (t) {
    case ncclInt8: *(int8_t *)p = (int8_t)v; break;
    case ncclUint8: *(uint8_t *)p = (uint8_t)(int)v; break;
    case ncclInt32: *(int32_t *)p = (int32_t)v; break;
    case ncclUint32: *(uint32_t *)p = (uint32_t)(int64_t)v; break;
    case ncclInt64: *(int64_t *)p = (int64_t)v; break;
    case ncclUint64: *(uint64_t *)p = (uint64_t)(int64_t)v; break;
    case ncclFloat16: *(uint16_t *)p = to_half(v); break;
    case ncclFloat32: *(float *)p = (float)v; break;
    case ncclFloat64: *(double *)p = v; break;
    default: *(uint16_t *)p = to_bf16(v); break;
    }
}

static double reduce2(ncclRedOp_t op, double a, double b) {
    switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return a + b;
    }
}

/* The expected element of a reduction over ranks of value(r, i). Products
 * stay small: ranks <= 5, |value| <= 7. AVG: sum / nranks, truncated for
 * integers; only compared where exact. */
static double expected(ncclRedOp_t op, size_t i) {
    double acc = value(0, i);
    for (int r = 1; r < nranks; r++) acc = reduce2(op, acc, value(r, i));
    return acc;
}

static int same(const void *a, const void *b, ncclDataType_t t, size_t n) { return memcmp(a, b, n * sizes[t]) == 0; }

static int wraps_negative(ncclDataType_t t) { return t == ncclUint8 || t == ncclUint32 || t == ncclUint64; }

static void collectives(ncclComm_t comm) {
    const size_t n = 257;
    char *in = malloc(n * nranks * 8), *out = malloc(n * nranks * 8), *want = malloc(n * nranks * 8);
    for (int t = 0; t < WIDE_TYPES; t++) {
        for (int op = 0; op < ncclNumOps; op++) {
            if (op == ncclAvg && t != ncclFloat32 && t != ncclFloat64) continue; /* exact only there */
            /* products of more than two values may round in 16 bits, in whatever order ranks combine */
            if (op == ncclProd && (t == ncclFloat16 || t == ncclBfloat16) && nranks > 2) continue;
            for (size_t i = 0; i < n; i++) put(in, t, i, value(rank, i));
            for (size_t i = 0; i < n; i++) {
                double e = op == ncclAvg ? expected(ncclSum, i) / nranks : expected(op, i);
                if (wraps_negative(t) && (op == ncclMax || op == ncclMin)) e = 0; /* compared below by type */
                put(want, t, i, e);
            }
            NCCL_OK(ncclAllReduce(in, out, n, t, op, comm, 0));
            if (wraps_negative(t) && (op == ncclMax || op == ncclMin)) continue; /* unsigned order differs */
            CHECK(same(out, want, t, n), "ncclAllReduce: datatype %d op %d differs", t, op);
            NCCL_OK(ncclReduce(in, out, n, t, op, nranks - 1, comm, 0));
            if (rank == nranks - 1) CHECK(same(out, want, t, n), "ncclReduce: datatype %d op %d differs", t, op);
        }
        /* broadcast from rank 1 % nranks, all_gather, reduce_scatter (sum) */
        int root = 1 % nranks;
        for (size_t i = 0; i < n; i++) put(in, t, i, value(rank, i)), put(want, t, i, value(root, i));
        NCCL_OK(ncclBroadcast(in, out, n, t, root, comm, 0));
        CHECK(same(out, want, t, n), "ncclBroadcast: datatype %d differs", t);
        for (int r = 0; r < nranks; r++)
            for (size_t i = 0; i < n; i++) put(want, t, (size_t)r * n + i, value(r, i));
        NCCL_OK(ncclAllGather(in, out, n, t, comm, 0));
        CHECK(same(out, want, t, n * nranks), "ncclAllGather: datatype %d differs", t);
        for (size_t i = 0; i < n * nranks; i++) put(in, t, i, value(rank, i));
        for (size_t i = 0; i < n; i++) {
            double s = 0;
            for (int r = 0; r < nranks; r++) s += value(r, (size_t)rank * n + i);
            put(want, t, i, s);
        }
        NCCL_OK(ncclReduceScatter(in, out, n, t, ncclSum, comm, 0));
        CHECK(same(out, want, t, n), "ncclReduceScatter: datatype %d differs", t);
        /* NCCL 2.28's: ncclBcast (in place), ncclAlltoAll, ncclGather and ncclScatter to and from the last rank */
        for (size_t i = 0; i < n; i++) put(out, t, i, value(rank, i)), put(want, t, i, value(root, i));
        NCCL_OK(ncclBcast(out, n, t, root, comm, 0));
        CHECK(same(out, want, t, n), "ncclBcast: datatype %d differs", t);
        for (int r = 0; r < nranks; r++)
            for (size_t i = 0; i < n; i++)
                put(in, t, (size_t)r * n + i, value(rank * 3 + r, i)), put(want, t, (size_t)r * n + i, value(r * 3 + rank, i));
        NCCL_OK(ncclAlltoAll(in, out, n, t, comm, 0));
        CHECK(same(out, want, t, n * nranks), "ncclAlltoAll: datatype %d differs", t);
        int last = nranks - 1;
        for (size_t i = 0; i < n; i++) put(in, t, i, value(rank, i));
        for (int r = 0; r < nranks; r++)
            for (size_t i = 0; i < n; i++) put(want, t, (size_t)r * n + i, value(r, i));
        NCCL_OK(ncclGather(in, out, n, t, last, comm, 0));
        if (rank == last) CHECK(same(out, want, t, n * nranks), "ncclGather: datatype %d differs", t);
        for (size_t i = 0; i < n * nranks; i++) put(in, t, i, value(last, i));
        for (size_t i = 0; i < n; i++) put(want, t, i, value(last, (size_t)rank * n + i));
        NCCL_OK(ncclScatter(in, out, n, t, last, comm, 0));
        CHECK(same(out, want, t, n), "ncclScatter: datatype %d differs", t);
    }
    /* send/recv around the ring in a group */
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    for (size_t i = 0; i < n; i++) put(in, ncclInt32, i, value(rank, i)), put(want, ncclInt32, i, value(prev, i));
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(in, n, ncclInt32, next, comm, 0));
    NCCL_OK(ncclRecv(out, n, ncclInt32, prev, comm, 0));
    NCCL_OK(ncclGroupEnd());
    CHECK(same(out, want, ncclInt32, n), "ncclSend/ncclRecv in a group differ");
    /* premultiplied sums: sum over ranks of 3 * x, on int32 and float32 */
    int32_t three = 3;
    float half = 0.5f;
    ncclRedOp_t pi, pf;
    NCCL_OK(ncclRedOpCreatePreMulSum(&pi, &three, ncclInt32, ncclScalarHostImmediate, comm));
    NCCL_OK(ncclRedOpCreatePreMulSum(&pf, &half, ncclFloat32, ncclScalarHostImmediate, comm));
    for (size_t i = 0; i < n; i++) put(in, ncclInt32, i, value(rank, i)), put(want, ncclInt32, i, 3 * expected(ncclSum, i));
    NCCL_OK(ncclAllReduce(in, out, n, ncclInt32, pi, comm, 0));
    CHECK(same(out, want, ncclInt32, n), "premultiplied sum (int32, x3) differs");
    for (size_t i = 0; i < n; i++) put(in, ncclFloat32, i, value(rank, i)), put(want, ncclFloat32, i, 0.5 * expected(ncclSum, i));
    NCCL_OK(ncclReduce(in, out, n, ncclFloat32, pf, 0, comm, 0));
    if (rank == 0) CHECK(same(out, want, ncclFloat32, n), "premultiplied sum (float32, x0.5) differs");
    CHECK(ncclAllReduce(in, out, n, ncclInt32, pf, comm, 0) == ncclInvalidArgument, "a premultiplied sum of another datatype is refused");
    NCCL_OK(ncclRedOpDestroy(pi, comm));
    NCCL_OK(ncclRedOpDestroy(pf, comm));
    CHECK(ncclAllReduce(in, out, n, ncclInt32, pi, comm, 0) == ncclInvalidArgument, "a destroyed operation is refused");
    free(in);
    free(out);
    free(want);
}

static int run_rank(ncclUniqueId id) {
    int v = 0;
    NCCL_OK(ncclGetVersion(&v));
    CHECK(v == NCCL_VERSION_CODE, "ncclGetVersion: %d", v);
    ncclComm_t comm = NULL;
    /* an init that fails says why in ncclGetLastError (no communicator to ask) */
    ncclResult_t bad_init = ncclCommInitRank(&comm, nranks, id, nranks + 2);
    CHECK(bad_init == ncclInvalidArgument && comm == NULL, "an init with rank %d of %d: %s", nranks + 2, nranks,
          ncclGetErrorString(bad_init));
    CHECK(strstr(ncclGetLastError(NULL), "rank") && !strstr(ncclGetLastError(NULL), "NULL"),
          "ncclGetLastError after a failed init: %s", ncclGetLastError(NULL));
    ncclUniqueId zero;
    memset(&zero, 0, sizeof zero);
    CHECK(ncclCommInitRank(&comm, nranks, zero, rank) != ncclSuccess && comm == NULL, "an init with a zeroed id");
    CHECK(strlen(ncclGetLastError(NULL)) > 10 && !strstr(ncclGetLastError(NULL), "communicator is NULL"),
          "ncclGetLastError after an init with a zeroed id: %s", ncclGetLastError(NULL));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    NCCL_OK(ncclCommInitRankConfig(&comm, nranks, id, rank, &config));
    if (!comm) return 1;
    int count = -1, me = -1, dev = -1;
    NCCL_OK(ncclCommCount(comm, &count));
    NCCL_OK(ncclCommUserRank(comm, &me));
    CHECK(count == nranks && me == rank, "ncclCommCount %d, ncclCommUserRank %d", count, me);
    ncclResult_t r = ncclCommCuDevice(comm, &dev);
    CHECK(r == ncclSuccess || r == ncclInvalidUsage, "ncclCommCuDevice: %s", ncclGetErrorString(r));
    if (r != ncclSuccess) CHECK(strstr(ncclGetLastError(comm), "no CUDA") != NULL, "why: %s", ncclGetLastError(comm));

    collectives(comm);

    /* errors: bad arguments, a bad config, an unknown op */
    float x = 1;
    CHECK(ncclAllReduce(&x, &x, 1, (ncclDataType_t)42, ncclSum, comm, 0) == ncclInvalidArgument, "bad datatype");
    CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, (ncclRedOp_t)77, comm, 0) == ncclInvalidArgument, "bad op");
    CHECK(ncclBroadcast(&x, &x, 1, ncclFloat, nranks + 3, comm, 0) == ncclInvalidArgument, "bad root");
    CHECK(strlen(ncclGetLastError(comm)) > 0, "ncclGetLastError says why");
    ncclConfig_t bad = config;
    bad.magic = 0;
    ncclComm_t none = NULL;
    CHECK(ncclCommSplit(comm, 0, 0, &none, &bad) == ncclInvalidArgument, "a config without the initializer");
    ncclResult_t async = ncclInternalError;
    NCCL_OK(ncclCommGetAsyncError(comm, &async));
    CHECK(async == ncclSuccess, "async error %d", async);

    /* NCCL 2.28's management calls: registration, finalize, and those that answer ncclInvalidUsage saying why */
    void *handle = NULL;
    NCCL_OK(ncclCommRegister(comm, &x, sizeof x, &handle));
    NCCL_OK(ncclCommDeregister(comm, handle));
    NCCL_OK(pncclCommFinalize(comm)); /* the pnccl twins are the same calls */
    void *mem = NULL;
    ncclSimInfo_t sim = {sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION_CODE, -1.0f};
    ncclWindow_t win = NULL;
    /* no CUDA runtime in this program: ncclMemAlloc gives host pages, which take a registration and a call */
    NCCL_OK(ncclMemAlloc(&mem, 5000));
    if (mem) {
        float *m = mem;
        for (int i = 0; i < 1250; i++) m[i] = (float)(rank + i);
        void *mh = NULL;
        NCCL_OK(ncclCommRegister(comm, mem, 5000, &mh));
        NCCL_OK(ncclAllReduce(mem, mem, 1250, ncclFloat, ncclSum, comm, 0));
        CHECK(m[7] == (float)(nranks * 7 + nranks * (nranks - 1) / 2), "all-reduce on ncclMemAlloc's memory: %g", m[7]);
        NCCL_OK(ncclCommDeregister(comm, mh));
        NCCL_OK(ncclMemFree(mem));
    }
    CHECK(ncclMemFree(&x) == ncclInvalidArgument && strstr(ncclGetLastError(NULL), "ncclMemAlloc"),
          "ncclMemFree of memory it did not allocate");
    CHECK(ncclCommWindowRegister(comm, &x, sizeof x, &win, 0) == ncclInvalidUsage, "ncclCommWindowRegister");
    /* a simulated group: the estimate, and nothing run */
    float sim_in[256], sim_out[256];
    for (int i = 0; i < 256; i++) sim_in[i] = 1, sim_out[i] = -3;
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(sim_in, sim_out, 256, ncclFloat, ncclSum, comm, 0));
    NCCL_OK(ncclGroupSimulateEnd(&sim));
    CHECK((nranks == 1 || sim.estimatedTime > 0) && sim_out[0] == -3, "ncclGroupSimulateEnd: estimate %g, output %g",
          sim.estimatedTime, sim_out[0]);
    CHECK(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "ncclGroupSimulateEnd with no group");
    ncclResetDebugInit();

    /* split: even and odd ranks; the last rank opts out */
    ncclComm_t half = NULL;
    int color = rank == nranks - 1 && nranks > 2 ? NCCL_SPLIT_NOCOLOR : rank % 2;
    NCCL_OK(ncclCommSplit(comm, color, rank, &half, NULL));
    if (color == NCCL_SPLIT_NOCOLOR) {
        CHECK(half == NCCL_COMM_NULL, "NCCL_SPLIT_NOCOLOR gives no communicator");
    } else if (half) {
        int hn = 0, hr = -1, want = 0;
        for (int q = 0; q < nranks; q++) want += (q % 2 == color) && !(q == nranks - 1 && nranks > 2);
        NCCL_OK(ncclCommCount(half, &hn));
        NCCL_OK(ncclCommUserRank(half, &hr));
        CHECK(hn == want && hr == rank / 2, "split: %d ranks (want %d), rank %d", hn, want, hr);
        int32_t one = 1, sum = 0;
        NCCL_OK(ncclAllReduce(&one, &sum, 1, ncclInt32, ncclSum, half, 0));
        CHECK(sum == hn, "all-reduce on the split communicator: %d", sum);
        NCCL_OK(ncclCommAbort(half)); /* abort frees it, as NCCL's does */
    }

    /* NCCL 2.29's grow: all but the last rank split off, then take the last rank in again as a newcomer,
     * with rank 0's ncclCommGetUniqueId handed to it over comm */
    if (nranks > 1) {
        int newcomer = rank == nranks - 1;
        ncclComm_t members = NULL, grown = NULL;
        NCCL_OK(ncclCommSplit(comm, newcomer ? NCCL_SPLIT_NOCOLOR : 0, rank, &members, NULL));
        ncclUniqueId gid;
        memset(&gid, 0, sizeof gid);
        if (rank == 0) NCCL_OK(ncclCommGetUniqueId(members, &gid));
        if (rank == 1 % (nranks - 1) && rank != 0)
            CHECK(ncclCommGetUniqueId(members, &gid) == ncclInvalidUsage, "ncclCommGetUniqueId on a rank but 0");
        NCCL_OK(ncclBcast(&gid, sizeof gid, ncclUint8, 0, comm, 0));
        if (newcomer) NCCL_OK(ncclCommGrow(NULL, nranks, &gid, rank, &grown, NULL));
        else NCCL_OK(ncclCommGrow(members, nranks, rank == 0 ? &gid : NULL, -1, &grown, NULL));
        int gn = 0, gr = -1;
        if (grown) {
            NCCL_OK(ncclCommCount(grown, &gn));
            NCCL_OK(ncclCommUserRank(grown, &gr));
            CHECK(gn == nranks && gr == rank, "grown: rank %d of %d", gr, gn);
            int32_t mine = rank + 1, sum = 0;
            NCCL_OK(ncclAllReduce(&mine, &sum, 1, ncclInt32, ncclSum, grown, 0));
            CHECK(sum == nranks * (nranks + 1) / 2, "all-reduce on the grown communicator: %d", sum);
            NCCL_OK(ncclCommDestroy(grown));
        }
        if (members) NCCL_OK(ncclCommDestroy(members));
    }

    /* NCCL 2.30's suspend: calls that move data are refused until resumed */
    uint64_t stat = 9;
    NCCL_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
    CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, 0) == ncclInvalidUsage &&
              strstr(ncclGetLastError(NULL), "suspended"), "a call on a suspended communicator");
    NCCL_OK(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &stat));
    CHECK(stat == 1, "ncclStatGpuMemSuspended %llu while suspended", (unsigned long long)stat);
    CHECK(ncclCommSuspend(comm, 0) == ncclInvalidUsage, "suspending twice");
    NCCL_OK(ncclCommResume(comm));
    NCCL_OK(ncclCommMemStats(comm, ncclStatGpuMemTotal, &stat));
    CHECK(stat == 0, "ncclStatGpuMemTotal %llu", (unsigned long long)stat);
    float unit = 1;
    NCCL_OK(ncclAllReduce(&unit, &x, 1, ncclFloat, ncclSum, comm, 0));
    CHECK(x == (float)nranks, "all-reduce after resume: %g", x);
    /* and the 2.30 calls libccl has no counterpart of say why */
    ncclParamHandle_t ph;
    void *up = NULL;
    CHECK(ncclParamBind(&ph, "NCCL_DEBUG") == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "CCL_"), "ncclParamBind");
    CHECK(ncclSignal(0, 0, 0, 0, comm, 0) == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "one-sided"), "ncclSignal");
    CHECK(ncclWinGetUserPtr(comm, NULL, &up) == ncclInvalidUsage, "ncclWinGetUserPtr");
    ncclParamDumpAll();

    /* shrink: the last rank leaves (it makes no call; its communicator is revoked) */
    CHECK(ncclCommRevoke(comm, 1) == ncclInvalidArgument, "revoke flags other than 0");
    if (nranks > 1 && rank == nranks - 1) {
        int32_t mine = 0;
        CHECK(ncclAllReduce(&mine, &mine, 1, ncclInt32, ncclSum, comm, 0) == ncclRemoteError,
              "the left-out rank's call on the revoked communicator");
    } else if (nranks > 1) {
        int leaver = nranks - 1, sn = 0, sr = -1;
        ncclComm_t small = NULL;
        NCCL_OK(ncclCommShrink(comm, &leaver, 1, &small, NULL, NCCL_SHRINK_DEFAULT));
        NCCL_OK(ncclCommCount(small, &sn));
        NCCL_OK(ncclCommUserRank(small, &sr));
        CHECK(sn == nranks - 1 && sr == rank, "shrink: rank %d of %d", sr, sn);
        int32_t one = 1, sum = 0;
        NCCL_OK(ncclAllReduce(&one, &sum, 1, ncclInt32, ncclSum, small, 0));
        CHECK(sum == nranks - 1, "all-reduce on the shrunk communicator: %d", sum);
        NCCL_OK(ncclCommDestroy(small));
    }
    ncclCommDestroy(comm);
    return fails != 0;
}

static int make_id(void *id) {
    if (ncclGetUniqueId(id) == ncclSuccess) return 0;
    fprintf(stderr, "ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
    return 1;
}

static int rank_main(int r, const void *id) {
    rank = r;
    return run_rank(*(const ncclUniqueId *)id);
}

int main(int argc, char **argv) {
    nranks = argc > 1 ? atoi(argv[1]) : 3;
    if (nranks < 1 || nranks > 5) {
        fprintf(stderr, "usage: nccl_program [NRANKS, 1 to 5]\n");
        return 2;
    }
    int bad = spawn_ranks(nranks, sizeof(ncclUniqueId), make_id, rank_main, 120);
    printf("nccl_program: %d ranks: %s\n", nranks, bad ? "FAILED" : "every check passed");
    return bad;
}
