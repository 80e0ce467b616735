/*
 * NCCL's API on libccl (see nccl.h). Every call maps onto the public libccl
 * API: collectives and send/recv onto the _stream twins (NCCL's stream
 * semantics), groups onto groups, communicators onto communicators. What
 * NCCL has and libccl has not is added here: premultiplied sums
 * (ncclRedOpCreatePreMulSum) and a per-thread last error.
 */
#include "nccl_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccl.h"
#include "reduce/elem.h"

_Thread_local char nccl_last_error[512];
_Thread_local int nccl_group_depth;

ncclResult_t from_ccl(ccl_status_t st) {
    switch (st) {
    case CCL_OK: return ncclSuccess;
    case CCL_INPROGRESS: return ncclInProgress;
    case CCL_ERR_INVALID_ARGUMENT: return ncclInvalidArgument;
    case CCL_ERR_INVALID_USAGE:
    case CCL_ERR_ABORTED:
    case CCL_ERR_UNSUPPORTED: return ncclInvalidUsage;
    case CCL_ERR_REMOTE:
    case CCL_ERR_REVOKED: return ncclRemoteError;
    case CCL_ERR_TIMEOUT: return ncclTimeout;
    case CCL_ERR_SYSTEM:
    case CCL_ERR_NO_MEMORY: return ncclSystemError;
    default: return ncclInternalError;
    }
}

ncclResult_t done(ncclComm_t comm, ccl_status_t st) {
    if (st < 0) snprintf(nccl_last_error, sizeof nccl_last_error, "%s", ccl_comm_last_error(comm ? comm->c : NULL));
    return from_ccl(st);
}

ncclResult_t fail(ncclResult_t r, const char *fmt, const char *arg) {
    snprintf(nccl_last_error, sizeof nccl_last_error, fmt, arg);
    return r;
}

int valid(const struct ncclComm *comm) { return comm && comm->magic == COMM_MAGIC; }

int dtype_of(ncclDataType_t d, ccl_dtype_t *out) {
    static const ccl_dtype_t map[ncclNumTypes] = {
        [ncclInt8] = CCL_INT8,       [ncclUint8] = CCL_UINT8,     [ncclInt32] = CCL_INT32,
        [ncclUint32] = CCL_UINT32,   [ncclInt64] = CCL_INT64,     [ncclUint64] = CCL_UINT64,
        [ncclFloat16] = CCL_FLOAT16, [ncclFloat32] = CCL_FLOAT32, [ncclFloat64] = CCL_FLOAT64,
        [ncclBfloat16] = CCL_BFLOAT16, [ncclFloat8e4m3] = CCL_UINT8, [ncclFloat8e5m2] = CCL_UINT8,
    };
    if ((unsigned)d >= ncclNumTypes) return -1;
    *out = map[d];
    return 0;
}

NCCL_API ncclResult_t ncclGetVersion(int *version) {
    if (!version) return fail(ncclInvalidArgument, "%s: version is NULL", "ncclGetVersion");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* With NCCL_COMM_ID=host:port (NCCL's), every rank makes the same id for
 * itself and rank 0 starts the root there at init (ccl_unique_id_from_address:
 * the job's secret from CCL_SECRET or CCL_SECRET_FILE). */
NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return fail(ncclInvalidArgument, "%s: uniqueId is NULL", "ncclGetUniqueId");
    ccl_unique_id_t u;
    const char *comm_id = getenv("NCCL_COMM_ID");
    ccl_status_t st = comm_id && *comm_id ? ccl_unique_id_from_address(comm_id, &u) : ccl_get_unique_id(&u);
    if (st == CCL_OK) memcpy(id->internal, u.internal, sizeof id->internal);
    return done(NULL, st);
}

ncclResult_t wrap(ncclComm_t *out, ccl_comm_t *c) {
    struct ncclComm *w = calloc(1, sizeof(*w));
    if (!w) {
        ccl_comm_destroy(c);
        return fail(ncclSystemError, "%s: out of memory", "ncclCommInitRank");
    }
    w->magic = COMM_MAGIC;
    w->c = c;
    *out = w;
    return ncclSuccess;
}

/* Any NCCL version's ncclConfig_t (2.14's, the first, ends at blocking;
 * each later one is longer): made with NCCL_CONFIG_INITIALIZER, so its
 * magic is right and its size covers at least 2.14's fields. Nothing past
 * its size is read. */
ncclResult_t check_config(const ncclConfig_t *config, const char *what) {
    if (config && (config->magic != NCCL_API_MAGIC || config->size < offsetof(ncclConfig_t, cgaClusterSize) ||
                   config->size > 4096))
        return fail(ncclInvalidArgument, "%s: config was not made with NCCL_CONFIG_INITIALIZER", what);
    return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                             ncclConfig_t *config) {
    if (!comm) return fail(ncclInvalidArgument, "%s: comm is NULL", "ncclCommInitRank");
    ncclResult_t r = check_config(config, "ncclCommInitRankConfig");
    if (r != ncclSuccess) return r;
    /* Non-blocking init (config->blocking == 0) may complete before it
     * returns; it does, so ncclInProgress is never seen. */
    ccl_unique_id_t u;
    memcpy(u.internal, commId.internal, sizeof u.internal);
    ccl_comm_t *c = NULL;
    ccl_status_t st = ccl_comm_init_rank(&c, nranks, u, rank);
    if (st != CCL_OK) return done(NULL, st);
    return wrap(comm, c);
}

NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    return ncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
    CHECK_COMM(comm, "ncclCommSplit");
    if (!newcomm) return fail(ncclInvalidArgument, "%s: newcomm is NULL", "ncclCommSplit");
    ncclResult_t r = check_config(config, "ncclCommSplit");
    if (r != ncclSuccess) return r;
    ccl_comm_t *c = NULL;
    ccl_status_t st = ccl_comm_split(comm->c, color < 0 ? CCL_SPLIT_NOCOLOR : color, key, &c);
    if (st != CCL_OK) return done(comm, st);
    if (!c) {
        *newcomm = NCCL_COMM_NULL;
        return ncclSuccess;
    }
    return wrap(newcomm, c);
}

static void unwrap_free(ncclComm_t comm) {
    comm->magic = 0;
    free(comm);
}

NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    CHECK_COMM(comm, "ncclCommDestroy");
    ccl_status_t st = ccl_comm_destroy(comm->c);
    unwrap_free(comm);
    return done(NULL, st);
}

NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    CHECK_COMM(comm, "ncclCommAbort");
    ccl_comm_abort(comm->c);
    ccl_comm_destroy(comm->c); /* fails with "aborted": NCCL's abort frees all the same */
    unwrap_free(comm);
    return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
    CHECK_COMM(comm, "ncclCommRevoke");
    if (revokeFlags != NCCL_REVOKE_DEFAULT)
        return fail(ncclInvalidArgument, "%s: revokeFlags must be NCCL_REVOKE_DEFAULT (0)", "ncclCommRevoke");
    return done(comm, ccl_comm_revoke(comm->c));
}

NCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                     ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
    CHECK_COMM(comm, "ncclCommShrink");
    if (!newcomm) return fail(ncclInvalidArgument, "%s: newcomm is NULL", "ncclCommShrink");
    *newcomm = NCCL_COMM_NULL;
    if (shrinkFlags & ~NCCL_SHRINK_ABORT)
        return fail(ncclInvalidArgument, "%s: shrinkFlags takes NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT",
                    "ncclCommShrink");
    ncclResult_t r = check_config(config, "ncclCommShrink");
    if (r != ncclSuccess) return r;
    if (shrinkFlags & NCCL_SHRINK_ABORT) ccl_comm_revoke(comm->c);
    ccl_comm_t *c = NULL;
    ccl_status_t st = ccl_comm_shrink(comm->c, excludeRanksList, excludeRanksCount, &c);
    if (st != CCL_OK) return done(comm, st);
    return wrap(newcomm, c);
}

NCCL_API const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (ncclGetLastError says which)";
    case ncclSystemError: return "unhandled system error (ncclGetLastError says which)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (ncclGetLastError says which)";
    case ncclInvalidUsage: return "invalid usage (ncclGetLastError says why)";
    case ncclRemoteError: return "remote process exited or there was a network error (ncclGetLastError names the rank)";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "timeout (ncclGetLastError says which rank is behind)";
    default: return "unknown result code";
    }
}

NCCL_API const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm; /* as in NCCL: the calling thread's last error */
    return nccl_last_error;
}

NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    CHECK_COMM(comm, "ncclCommGetAsyncError");
    if (!asyncError) return fail(ncclInvalidArgument, "%s: asyncError is NULL", "ncclCommGetAsyncError");
    ccl_status_t err = CCL_OK;
    ccl_status_t st = ccl_comm_get_async_error(comm->c, &err);
    if (st != CCL_OK) return done(comm, st);
    *asyncError = from_ccl(err);
    return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    CHECK_COMM(comm, "ncclCommCount");
    return done(comm, ccl_comm_size(comm->c, count));
}

NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    CHECK_COMM(comm, "ncclCommUserRank");
    return done(comm, ccl_comm_rank(comm->c, rank));
}

NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
    CHECK_COMM(comm, "ncclCommCuDevice");
    if (!device) return fail(ncclInvalidArgument, "%s: device is NULL", "ncclCommCuDevice");
    ccl_status_t st = ccl_comm_cuda_device(comm->c, device);
    if (st == CCL_ERR_UNSUPPORTED) return fail(ncclInvalidUsage, "%s: this process has no CUDA device", "ncclCommCuDevice");
    return done(comm, st);
}

/* ---- premultiplied sums: sum over ranks of (scalar * x) ---- */

NCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                               ncclScalarResidence_t residence, ncclComm_t comm) {
    CHECK_COMM(comm, "ncclRedOpCreatePreMulSum");
    ccl_dtype_t dt;
    if (!op || !scalar || dtype_of(datatype, &dt) < 0)
        return fail(ncclInvalidArgument, "%s: op or scalar is NULL, or the datatype is unknown", "ncclRedOpCreatePreMulSum");
    if (is_fp8(datatype))
        return fail(ncclInvalidUsage, "%s: premultiplied sums of 8-bit floats are not supported (sum float32 or "
                    "bfloat16 copies)", "ncclRedOpCreatePreMulSum");
    if (residence != ncclScalarHostImmediate || ccl_is_device_pointer(scalar))
        return fail(ncclInvalidUsage, "%s: only host-immediate scalars (ncclScalarHostImmediate) are supported",
                    "ncclRedOpCreatePreMulSum");
    for (int i = 0; i < MAX_PREMUL; i++)
        if (!comm->ops[i].live) {
            comm->ops[i] = (struct premul){.live = 1, .dtype = datatype};
            memcpy(comm->ops[i].scalar, scalar, ccl_dtype_size(dt));
            *op = (ncclRedOp_t)(ncclNumOps + i);
            return ncclSuccess;
        }
    return fail(ncclInvalidUsage, "%s: too many live premultiplied-sum operations on this communicator",
                "ncclRedOpCreatePreMulSum");
}

static struct premul *premul_of(ncclComm_t comm, ncclRedOp_t op) {
    int i = (int)op - ncclNumOps;
    return i >= 0 && i < MAX_PREMUL && comm->ops[i].live ? &comm->ops[i] : NULL;
}

NCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
    CHECK_COMM(comm, "ncclRedOpDestroy");
    struct premul *p = premul_of(comm, op);
    if (!p) return fail(ncclInvalidArgument, "%s: not an operation of ncclRedOpCreatePreMulSum on this communicator", "ncclRedOpDestroy");
    p->live = 0;
    return ncclSuccess;
}

/* dst[i] = scalar * src[i] in the element type (integers wrap, 16-bit
 * floats through float32 with one rounding, as the reductions do). */
static void premultiply(void *dst, const void *src, size_t n, ccl_dtype_t dt, const unsigned char *scalar) {
#define SCALE_INT(T, U)                                                                  \
    do {                                                                                 \
        T s, *d = dst;                                                                   \
        const T *x = src;                                                                \
        memcpy(&s, scalar, sizeof s);                                                    \
        for (size_t i = 0; i < n; i++) d[i] = (T)((U)x[i] * (U)s);                       \
    } while (0)
#define SCALE_HALF(TO, FROM)                                                                 \
    do {                                                                                     \
        uint16_t s16, *d = dst;                                                              \
        const uint16_t *x = src;                                                             \
        memcpy(&s16, scalar, sizeof s16);                                                    \
        float s = TO(s16);                                                                   \
        for (size_t i = 0; i < n; i++) d[i] = FROM(pick_nan_f32(TO(x[i]), s, TO(x[i]) * s)); \
    } while (0)
    switch (dt) {
    case CCL_INT8: SCALE_INT(int8_t, uint8_t); break;
    case CCL_UINT8: SCALE_INT(uint8_t, uint8_t); break;
    case CCL_INT32: SCALE_INT(int32_t, uint32_t); break;
    case CCL_UINT32: SCALE_INT(uint32_t, uint32_t); break;
    case CCL_INT64: SCALE_INT(int64_t, uint64_t); break;
    case CCL_UINT64: SCALE_INT(uint64_t, uint64_t); break;
    case CCL_FLOAT16: SCALE_HALF(half_to_float_inline, float_to_half_inline); break;
    case CCL_BFLOAT16: SCALE_HALF(bf16_to_float_inline, float_to_bf16_inline); break;
    case CCL_FLOAT32: SCALE_INT(float, float); break;
    default: SCALE_INT(double, double); break;
    }
#undef SCALE_INT
#undef SCALE_HALF
}

/* A premultiplied sum: the inputs scaled on the CPU into a copy, then a
 * sum. The copy is host memory and is freed when the call returns, so
 * only host buffers on the default stream without CUDA work can take it. */
static ncclResult_t premul_sum(int kind, const void *send, void *recv, size_t count, ccl_dtype_t dt,
                               const struct premul *p, int root, ncclComm_t comm, cudaStream_t stream) {
    if (stream || ccl_is_device_pointer(send) || ccl_is_device_pointer(recv))
        return fail(ncclInvalidUsage, "%s: premultiplied sums run on host buffers and the default stream only",
                    "ncclRedOpCreatePreMulSum");
    if (nccl_group_depth > 0)
        return fail(ncclInvalidUsage, "%s: a premultiplied sum cannot be queued in ncclGroupStart/End (libccl scales "
                    "a copy of the input that lives for the call alone): make it outside the group",
                    "ncclRedOpCreatePreMulSum");
    int nranks = 1;
    ccl_comm_size(comm->c, &nranks);
    size_t n = kind == K_REDUCE_SCATTER ? count * (size_t)nranks : count;
    void *scaled = malloc(n * ccl_dtype_size(dt) + 1);
    if (!scaled) return fail(ncclSystemError, "%s: out of memory", "premultiplied sum");
    premultiply(scaled, send, n, dt, p->scalar);
    ccl_status_t st = kind == K_ALL_REDUCE ? ccl_all_reduce(scaled, recv, count, dt, CCL_SUM, comm->c)
                      : kind == K_REDUCE   ? ccl_reduce(scaled, recv, count, dt, CCL_SUM, root, comm->c)
                                           : ccl_reduce_scatter(scaled, recv, count, dt, CCL_SUM, comm->c);
    free(scaled);
    return done(comm, st);
}

/* The reducing collectives: the op, and its dtype agreeing with a premultiplied sum's. */
static ncclResult_t reducing(int kind, const void *send, void *recv, size_t count, ncclDataType_t datatype,
                             ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream, const char *what) {
    CHECK_LIVE(comm, what);
    ccl_dtype_t dt;
    if (dtype_of(datatype, &dt) < 0) return fail(ncclInvalidArgument, "%s: unknown datatype", what);
    if (is_fp8(datatype)) return fp8_reduce(kind, send, recv, count, datatype, op, root, comm, stream, what);
    if ((unsigned)op >= ncclNumOps) {
        const struct premul *p = premul_of(comm, op);
        if (!p) return fail(ncclInvalidArgument, "%s: unknown reduction operation", what);
        if (p->dtype != datatype)
            return fail(ncclInvalidArgument, "%s: the premultiplied sum was made for another datatype", what);
        return premul_sum(kind, send, recv, count, dt, p, root, comm, stream);
    }
    ccl_op_t o = (ccl_op_t)op; /* ncclSum..ncclAvg are CCL_SUM..CCL_AVG */
    ccl_status_t st = kind == K_ALL_REDUCE ? ccl_all_reduce_stream(send, recv, count, dt, o, comm->c, stream)
                      : kind == K_REDUCE   ? ccl_reduce_stream(send, recv, count, dt, o, root, comm->c, stream)
                                           : ccl_reduce_scatter_stream(send, recv, count, dt, o, comm->c, stream);
    return done(comm, st);
}

NCCL_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    return reducing(K_ALL_REDUCE, sendbuff, recvbuff, count, datatype, op, -1, comm, stream, "ncclAllReduce");
}

NCCL_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    return reducing(K_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream, "ncclReduce");
}

NCCL_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
    return reducing(K_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream,
                    "ncclReduceScatter");
}

NCCL_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                    int root, ncclComm_t comm, cudaStream_t stream) {
    MOVING("ncclBroadcast", ccl_broadcast_stream(sendbuff, recvbuff, count, dt, root, comm->c, stream));
}

NCCL_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                                    ncclComm_t comm, cudaStream_t stream) {
    MOVING("ncclAllGather", ccl_all_gather_stream(sendbuff, recvbuff, sendcount, dt, comm->c, stream));
}

NCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                               cudaStream_t stream) {
    MOVING("ncclSend", ccl_send_stream(sendbuff, count, dt, peer, comm->c, stream));
}

NCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                               cudaStream_t stream) {
    MOVING("ncclRecv", ccl_recv_stream(recvbuff, count, dt, peer, comm->c, stream));
}

NCCL_API ncclResult_t ncclGroupStart(void) {
    ccl_status_t st = ccl_group_start();
    if (st == CCL_OK) nccl_group_depth++;
    return from_ccl(st);
}

NCCL_API ncclResult_t ncclGroupEnd(void) {
    ccl_status_t st = ccl_group_end();
    if (nccl_group_depth > 0) nccl_group_depth--;
    if (st < 0) snprintf(nccl_last_error, sizeof nccl_last_error, "ncclGroupEnd: %s", ccl_status_string(st));
    return from_ccl(st);
}

PNCCL(ncclGetVersion);
PNCCL(ncclGetUniqueId);
PNCCL(ncclCommInitRankConfig);
PNCCL(ncclCommInitRank);
PNCCL(ncclCommSplit);
PNCCL(ncclCommDestroy);
PNCCL(ncclCommAbort);
PNCCL(ncclCommRevoke);
PNCCL(ncclCommShrink);
PNCCL(ncclCommGetAsyncError);
PNCCL(ncclCommCount);
PNCCL(ncclCommUserRank);
PNCCL(ncclCommCuDevice);
PNCCL(ncclRedOpCreatePreMulSum);
PNCCL(ncclRedOpDestroy);
PNCCL(ncclAllReduce);
PNCCL(ncclReduce);
PNCCL(ncclReduceScatter);
PNCCL(ncclBroadcast);
PNCCL(ncclAllGather);
PNCCL(ncclSend);
PNCCL(ncclRecv);
PNCCL(ncclGroupStart);
PNCCL(ncclGroupEnd);
PNCCL(ncclGetErrorString);
PNCCL(ncclGetLastError);
