/*
 * The calls NCCL added after 2.19, up to 2.28 (CUDA 13's nccl.h), so that a
 * program built against that header finds every symbol it names. What
 * libccl can do is done on it; the rest answers ncclInvalidUsage with a
 * sentence in ncclGetLastError, never a missing symbol.
 */
#include <stddef.h>

#include "nccl_impl.h"

/* A call libccl has no _stream twin of, ordered on stream as the twins
 * are: a group of its own, ended on the stream (inside the caller's open
 * group, the outermost end decides). */
#define ON_STREAM(stream, call)                                 \
    ({                                                          \
        ccl_status_t on_stream_st_ = ccl_group_start();         \
        if (on_stream_st_ == CCL_OK) {                          \
            ccl_status_t on_stream_call_ = (call);              \
            on_stream_st_ = ccl_group_end_stream(stream);       \
            if (on_stream_call_ != CCL_OK) on_stream_st_ = on_stream_call_; \
        }                                                       \
        on_stream_st_;                                          \
    })

#define TYPED(what)                                                                                    \
    CHECK_COMM(comm, what);                                                                            \
    ccl_dtype_t dt;                                                                                    \
    if (dtype_of(datatype, &dt) < 0)                                                                   \
        return fail(ncclInvalidArgument, "%s: a datatype libccl has not (the fp8 types are not here yet)", what)

NCCL_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclComm_t comm, cudaStream_t stream) {
    TYPED("ncclAlltoAll");
    return done(comm, ccl_all_to_all_stream(sendbuff, recvbuff, count, dt, comm->c, stream));
}

NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                 int root, ncclComm_t comm, cudaStream_t stream) {
    TYPED("ncclGather");
    return done(comm, ON_STREAM(stream, ccl_gather(sendbuff, recvbuff, count, dt, root, comm->c)));
}

NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  int root, ncclComm_t comm, cudaStream_t stream) {
    TYPED("ncclScatter");
    return done(comm, ON_STREAM(stream, ccl_scatter(sendbuff, recvbuff, count, dt, root, comm->c)));
}

NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    CHECK_COMM(comm, "ncclCommFinalize");
    return ncclSuccess; /* ncclCommDestroy waits for what is queued: nothing to flush before it */
}

NCCL_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
    CHECK_COMM(comm, "ncclCommRegister");
    return done(comm, ccl_comm_register(comm->c, buff, size, handle));
}

NCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
    CHECK_COMM(comm, "ncclCommDeregister");
    return done(comm, ccl_comm_deregister(comm->c, handle));
}

NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                               ncclUniqueId *commIds, ncclConfig_t *config) {
    if (nId < 1 || !commIds)
        return fail(ncclInvalidArgument, "%s: needs at least one unique id (nId >= 1, commIds)",
                    "ncclCommInitRankScalable");
    /* One root serves a job here: every rank passes the same ids, in order. */
    return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
    (void)comm, (void)ndev, (void)devlist;
    return fail(ncclInvalidUsage, "%s: several ranks in one process are not supported by libccl-nccl yet: start "
                "one process per rank (ncclCommInitRank)", "ncclCommInitAll");
}

NCCL_API ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
    (void)ptr, (void)size;
    return fail(ncclInvalidUsage, "%s: libccl-nccl does not allocate memory yet: allocate with cudaMalloc (or "
                "malloc for host buffers) and register it with ncclCommRegister", "ncclMemAlloc");
}

NCCL_API ncclResult_t ncclMemFree(void *ptr) {
    (void)ptr;
    return fail(ncclInvalidUsage, "%s: no memory of ncclMemAlloc's to free (it allocates none here)", "ncclMemFree");
}

NCCL_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                             int winFlags) {
    (void)buff, (void)size, (void)win, (void)winFlags;
    CHECK_COMM(comm, "ncclCommWindowRegister");
    return fail(ncclInvalidUsage, "%s: symmetric windows are not supported by libccl-nccl yet (libccl's own are "
                "ccl_mem_alloc's shared allocations)", "ncclCommWindowRegister");
}

NCCL_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
    (void)win;
    CHECK_COMM(comm, "ncclCommWindowDeregister");
    return fail(ncclInvalidUsage, "%s: no window of ncclCommWindowRegister's (it registers none here)",
                "ncclCommWindowDeregister");
}

NCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
    (void)simInfo;
    return fail(ncclInvalidUsage, "%s: not supported by libccl-nccl yet (tools/ccl-plan shows the planner's "
                "estimates)", "ncclGroupSimulateEnd");
}

NCCL_API void ncclResetDebugInit(void) {} /* libccl reads its logging settings once; nothing to reset */

PNCCL(ncclBcast);
PNCCL(ncclAlltoAll);
PNCCL(ncclGather);
PNCCL(ncclScatter);
PNCCL(ncclCommFinalize);
PNCCL(ncclCommRegister);
PNCCL(ncclCommDeregister);
PNCCL(ncclCommInitRankScalable);
PNCCL(ncclCommInitAll);
PNCCL(ncclMemAlloc);
PNCCL(ncclMemFree);
PNCCL(ncclCommWindowRegister);
PNCCL(ncclCommWindowDeregister);
PNCCL(ncclGroupSimulateEnd);
PNCCL(ncclResetDebugInit);
