/*
 * The calls NCCL added in 2.29 and 2.30: growing a communicator (on
 * libccl's ccl_comm_grow), suspending one, and the one-sided and
 * parameter calls that libccl has no counterpart of, which answer
 * ncclInvalidUsage with a sentence in ncclGetLastError.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nccl_impl.h"

NCCL_API ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId) {
    CHECK_COMM(comm, "ncclCommGetUniqueId");
    if (!uniqueId) return fail(ncclInvalidArgument, "%s: uniqueId is NULL", "ncclCommGetUniqueId");
    ccl_unique_id_t u;
    ccl_status_t st = ccl_comm_grow_id(comm->c, &u);
    if (st == CCL_OK) memcpy(uniqueId->internal, u.internal, sizeof uniqueId->internal);
    return done(comm, st);
}

NCCL_API ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                                   ncclComm_t *newcomm, ncclConfig_t *config) {
    if (!newcomm) return fail(ncclInvalidArgument, "%s: newcomm is NULL", "ncclCommGrow");
    *newcomm = NCCL_COMM_NULL;
    if (comm) CHECK_COMM(comm, "ncclCommGrow");
    ncclResult_t r = check_config(config, "ncclCommGrow");
    if (r != ncclSuccess) return r;
    ccl_unique_id_t u;
    if (uniqueId) memcpy(u.internal, uniqueId->internal, sizeof u.internal);
    ccl_comm_t *c = NULL;
    ccl_status_t st = ccl_comm_grow(comm ? comm->c : NULL, nRanks, uniqueId ? &u : NULL, rank, &c);
    if (st != CCL_OK) return done(comm, st);
    return wrap(newcomm, c);
}

NCCL_API ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags) {
    CHECK_COMM(comm, "ncclCommSuspend");
    if (flags & ~NCCL_SUSPEND_MEM) return fail(ncclInvalidArgument, "%s: flags takes NCCL_SUSPEND_MEM or 0", "ncclCommSuspend");
    if (comm->suspended) return fail(ncclInvalidUsage, "%s: the communicator is suspended already", "ncclCommSuspend");
    comm->suspended = 1;
    return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommResume(ncclComm_t comm) {
    CHECK_COMM(comm, "ncclCommResume");
    if (!comm->suspended) return fail(ncclInvalidUsage, "%s: the communicator is not suspended", "ncclCommResume");
    comm->suspended = 0;
    return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value) {
    CHECK_COMM(comm, "ncclCommMemStats");
    if (!value) return fail(ncclInvalidArgument, "%s: value is NULL", "ncclCommMemStats");
    switch (stat) {
    case ncclStatGpuMemSuspended: *value = (uint64_t)comm->suspended; return ncclSuccess;
    case ncclStatGpuMemSuspend:
    case ncclStatGpuMemPersist:
    case ncclStatGpuMemTotal: *value = 0; return ncclSuccess; /* no device memory is held per communicator */
    default: return fail(ncclInvalidArgument, "%s: unknown statistic", "ncclCommMemStats");
    }
}

NCCL_API ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr) {
    (void)win, (void)outUserPtr;
    CHECK_COMM(comm, "ncclWinGetUserPtr");
    return fail(ncclInvalidUsage, "%s: libccl-nccl has no windows (ncclCommWindowRegister makes none)",
                "ncclWinGetUserPtr");
}

#define NO_ONE_SIDED(what)                                                                                     \
    fail(ncclInvalidUsage, "%s: libccl has no one-sided communication yet: use ncclSend/ncclRecv in a group", \
         what)

NCCL_API ncclResult_t ncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
                                    ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                                    unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
    (void)localbuff, (void)count, (void)datatype, (void)peer, (void)peerWin, (void)peerWinOffset, (void)sigIdx;
    (void)ctx, (void)flags, (void)stream;
    CHECK_COMM(comm, "ncclPutSignal");
    return NO_ONE_SIDED("ncclPutSignal");
}

NCCL_API ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                                 cudaStream_t stream) {
    (void)peer, (void)sigIdx, (void)ctx, (void)flags, (void)stream;
    CHECK_COMM(comm, "ncclSignal");
    return NO_ONE_SIDED("ncclSignal");
}

NCCL_API ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
                                     cudaStream_t stream) {
    (void)nDesc, (void)signalDescs, (void)stream;
    CHECK_COMM(comm, "ncclWaitSignal");
    return NO_ONE_SIDED("ncclWaitSignal");
}

/* ---- NCCL's parameter table: libccl's settings are CCL_* variables ---- */

#define NO_PARAMS(what)                                                                                         \
    fail(ncclInvalidUsage, "%s: libccl keeps no NCCL parameter table: its settings are CCL_* environment "       \
         "variables (README: Environment; NCCL_DEBUG, NCCL_SOCKET_IFNAME, NCCL_ALGO and a few more are read as " \
         "theirs)", what)

NCCL_API ncclResult_t ncclParamBind(ncclParamHandle_t *out, const char *key) {
    (void)key;
    if (out) *out = NULL;
    return NO_PARAMS("ncclParamBind");
}

#define PARAM_GETTER(name, type)                          \
    NCCL_API ncclResult_t name(ncclParamHandle_t h, type *out) { \
        (void)h, (void)out;                               \
        return NO_PARAMS(#name);                          \
    }
PARAM_GETTER(ncclParamGetI8, int8_t)
PARAM_GETTER(ncclParamGetI16, int16_t)
PARAM_GETTER(ncclParamGetI32, int32_t)
PARAM_GETTER(ncclParamGetI64, int64_t)
PARAM_GETTER(ncclParamGetU8, uint8_t)
PARAM_GETTER(ncclParamGetU16, uint16_t)
PARAM_GETTER(ncclParamGetU32, uint32_t)
PARAM_GETTER(ncclParamGetU64, uint64_t)
PARAM_GETTER(ncclParamGetStr, const char *)

NCCL_API ncclResult_t ncclParamGet(ncclParamHandle_t h, void *out, int maxLen, int *len) {
    (void)h, (void)out, (void)maxLen, (void)len;
    return NO_PARAMS("ncclParamGet");
}

NCCL_API ncclResult_t ncclParamGetParameter(const char *key, const char **value, int *valueLen) {
    (void)key, (void)value, (void)valueLen;
    return NO_PARAMS("ncclParamGetParameter");
}

NCCL_API ncclResult_t ncclParamGetAllParameterKeys(const char ***table, int *tableLen) {
    if (table) *table = NULL;
    if (tableLen) *tableLen = 0;
    return NO_PARAMS("ncclParamGetAllParameterKeys");
}

NCCL_API void ncclParamDumpAll(void) {
    const char *level = getenv("CCL_DEBUG");
    if (level && (strcasecmp(level, "INFO") == 0 || strcasecmp(level, "TRACE") == 0))
        fprintf(stderr, "libccl-nccl: ncclParamDumpAll: libccl keeps no NCCL parameter table; its settings are "
                        "CCL_* environment variables (README: Environment)\n");
}

PNCCL(ncclCommGetUniqueId);
PNCCL(ncclCommGrow);
PNCCL(ncclCommSuspend);
PNCCL(ncclCommResume);
PNCCL(ncclCommMemStats);
PNCCL(ncclWinGetUserPtr);
PNCCL(ncclPutSignal);
PNCCL(ncclSignal);
PNCCL(ncclWaitSignal);
PNCCL(ncclParamBind);
PNCCL(ncclParamGetI8);
PNCCL(ncclParamGetI16);
PNCCL(ncclParamGetI32);
PNCCL(ncclParamGetI64);
PNCCL(ncclParamGetU8);
PNCCL(ncclParamGetU16);
PNCCL(ncclParamGetU32);
PNCCL(ncclParamGetU64);
PNCCL(ncclParamGetStr);
PNCCL(ncclParamGet);
PNCCL(ncclParamGetParameter);
PNCCL(ncclParamGetAllParameterKeys);
PNCCL(ncclParamDumpAll);
