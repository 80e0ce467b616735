/*
 * libccl-nccl: NCCL's API on libccl. A program written against NCCL's
 * nccl.h builds against this header and links -lccl-nccl instead of
 * -lnccl, unchanged: the names, types, enum values and the layout of
 * ncclUniqueId and ncclConfig_t are NCCL's (API level 2.30). What differs
 * is said in docs/cuda.md ("The NCCL-compatible library").
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#if !defined(__DRIVER_TYPES_H__)
/* cudaStream_t exactly as CUDA's driver_types.h declares it. */
typedef struct CUstream_st *cudaStream_t;
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 30
#define NCCL_PATCH 7
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 23007
#define NCCL_VERSION(X, Y, Z) \
    (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclTimeout = 8, /* NCCL 2.29 */
    ncclNumResults = 9
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f
#define NCCL_API_MAGIC 0xcafebeef
/* ncclCommWindowRegister's flags, and the alignment a window needs */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_STRICT_ORDERING 0x02
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096
/* ncclConfig_t.CTAPolicy */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02
/* ncclCommSuspend's flags */
#define NCCL_SUSPEND_MEM 0x01
/* ncclCommShrink's flags and ncclCommRevoke's (NCCL 2.28). */
#define NCCL_SHRINK_DEFAULT 0x00 /* shrink; the parent's operations must have ended */
#define NCCL_SHRINK_ABORT 0x01   /* revoke the parent's ongoing operations first */
#define NCCL_REVOKE_DEFAULT 0x00

/* NCCL 2.30's layout. A program built against an older nccl.h passes
 * the shorter struct of its version (size and version say which); libccl
 * checks the magic and that size covers the fields every version has, and
 * reads nothing past the size given. libccl's calls complete before they
 * return, whatever blocking says; the other fields steer NCCL's GPU
 * kernels and networks and are accepted and ignored. */
typedef struct ncclConfig_v23000 {
    /* set by NCCL_CONFIG_INITIALIZER, never by hand */
    size_t size;
    unsigned int magic;
    unsigned int version;
    /* what a program may set */
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;        /* 2.24 */
    const char *commName;    /* 2.24 */
    int collnetEnable;       /* 2.24 */
    int CTAPolicy;           /* 2.27 */
    int shrinkShare;         /* 2.27 */
    int nvlsCTAs;            /* 2.27 */
    int nChannelsPerNetPeer; /* 2.28 */
    int nvlinkCentricSched;  /* 2.28 */
    int graphUsageMode;      /* 2.29 */
    int numRmaCtx;           /* 2.29 */
    int maxP2pPeers;         /* 2.30 */
    int graphStreamOrdering; /* 2.30 */
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                               \
    {                                                                                                         \
        sizeof(ncclConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,        \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,        \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,        \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT         \
    }

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    /* 8-bit floats (NCCL 2.24): moved as bytes; reduced on host buffers by
     * widening to float64, where the sum of up to 2^21 values and the
     * minimum and maximum are exact, then rounded once to nearest even,
     * saturating at the largest finite value (docs/cuda.md) */
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
/* Every pending and later call on comm, on every rank, fails (libccl's
 * ccl_comm_revoke); it can still be shrunk. revokeFlags must be 0. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
/* A communicator of comm's ranks without excludeRanksList (ccl_comm_shrink;
 * libccl also takes NULL and 0: the ranks that failed, as the survivors
 * agree). config NULL: comm's. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
                            ncclConfig_t *config, int shrinkFlags);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

/* ---- NCCL 2.28's other calls (CUDA 13's nccl.h): what libccl has is
 * implemented on it; the rest answers ncclInvalidUsage, and
 * ncclGetLastError says why. Every one has its pnccl twin. ---- */
typedef struct ncclWindow_vidmem *ncclWindow_t;
typedef struct ncclSimInfo_v22200 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimatedTime;
} ncclSimInfo_t;
#define NCCL_SIM_INFO_INITIALIZER {sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT}
/* buff in place: ncclBroadcast(buff, buff, ...) */
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream);
/* Nothing to flush first: ncclCommDestroy waits for queued operations. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
/* ccl_comm_register / ccl_comm_deregister */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
/* The first id of commIds (every rank passes the same list). */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds,
                                      ncclConfig_t *config);
/* ndev ranks in this process (one thread then drives them in groups);
 * devlist is read for nothing: a communicator takes its first device
 * buffer's device. */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
/* Device memory (cudaMalloc on the current device) in a program that has
 * the CUDA runtime and a GPU; whole pages of host memory elsewhere (which
 * ncclCommRegister takes). ncclMemFree frees either. */
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);
/* Ends the group running nothing: estimatedTime gets libccl's cost
 * model's time for its calls, in microseconds (ccl_group_simulate_end). */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);
/* ncclInvalidUsage, saying why: */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
void ncclResetDebugInit(void);

/* ---- NCCL 2.29 and 2.30 ---- */
/* Implemented on libccl: */
/* On rank 0 of comm: the id that ncclCommGrow's newcomers join with
 * (ccl_comm_grow_id). */
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
/* ccl_comm_grow: comm's ranks pass comm (rank 0 also the id of
 * ncclCommGetUniqueId, the others NULL) and rank -1; a newcomer passes
 * comm NULL, the id and its rank. config NULL: comm's. */
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm,
                          ncclConfig_t *config);
/* Until ncclCommResume, every call that moves data on comm is refused
 * with ncclInvalidUsage. libccl holds no device memory per communicator to
 * give back, so NCCL_SUSPEND_MEM frees nothing. */
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
typedef enum {
    ncclStatGpuMemSuspend = 0,   /* bytes of device memory a suspend would free */
    ncclStatGpuMemSuspended = 1, /* 1 while suspended */
    ncclStatGpuMemPersist = 2,   /* bytes of device memory a suspend keeps */
    ncclStatGpuMemTotal = 3      /* the two together */
} ncclCommMemStat_t;
/* The device-memory figures are 0 (see ncclCommSuspend). */
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);
/* ncclInvalidUsage, saying why (libccl has no windows or one-sided calls,
 * and keeps its settings in CCL_* variables, not in NCCL's parameter
 * table): */
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);
ncclResult_t ncclPutSignal(const void *localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream);
typedef struct {
    int opCnt;  /* how many signals to wait for */
    int peer;   /* from which rank */
    int sigIdx; /* on which signal */
    int ctx;    /* in which context */
} ncclWaitSignalDesc_t;
ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm, cudaStream_t stream);
typedef struct ncclParamHandle *ncclParamHandle_t;
ncclResult_t ncclParamBind(ncclParamHandle_t *out, const char *key);
ncclResult_t ncclParamGetI8(ncclParamHandle_t h, int8_t *out);
ncclResult_t ncclParamGetI16(ncclParamHandle_t h, int16_t *out);
ncclResult_t ncclParamGetI32(ncclParamHandle_t h, int32_t *out);
ncclResult_t ncclParamGetI64(ncclParamHandle_t h, int64_t *out);
ncclResult_t ncclParamGetU8(ncclParamHandle_t h, uint8_t *out);
ncclResult_t ncclParamGetU16(ncclParamHandle_t h, uint16_t *out);
ncclResult_t ncclParamGetU32(ncclParamHandle_t h, uint32_t *out);
ncclResult_t ncclParamGetU64(ncclParamHandle_t h, uint64_t *out);
ncclResult_t ncclParamGetStr(ncclParamHandle_t h, const char **out);
ncclResult_t ncclParamGet(ncclParamHandle_t h, void *out, int maxLen, int *len);
ncclResult_t ncclParamGetParameter(const char *key, const char **value, int *valueLen);
ncclResult_t ncclParamGetAllParameterKeys(const char ***table, int *tableLen);
/* At CCL_DEBUG=INFO, says on stderr where libccl's settings are. */
void ncclParamDumpAll(void);

/* The pnccl twins (NCCL's profiling interface): the same calls. */
extern __typeof__(ncclAllGather) pncclAllGather;
extern __typeof__(ncclAllReduce) pncclAllReduce;
extern __typeof__(ncclAlltoAll) pncclAlltoAll;
extern __typeof__(ncclBcast) pncclBcast;
extern __typeof__(ncclBroadcast) pncclBroadcast;
extern __typeof__(ncclCommAbort) pncclCommAbort;
extern __typeof__(ncclCommCount) pncclCommCount;
extern __typeof__(ncclCommCuDevice) pncclCommCuDevice;
extern __typeof__(ncclCommDeregister) pncclCommDeregister;
extern __typeof__(ncclCommDestroy) pncclCommDestroy;
extern __typeof__(ncclCommFinalize) pncclCommFinalize;
extern __typeof__(ncclCommGetAsyncError) pncclCommGetAsyncError;
extern __typeof__(ncclCommGetUniqueId) pncclCommGetUniqueId;
extern __typeof__(ncclCommGrow) pncclCommGrow;
extern __typeof__(ncclCommInitAll) pncclCommInitAll;
extern __typeof__(ncclCommInitRank) pncclCommInitRank;
extern __typeof__(ncclCommInitRankConfig) pncclCommInitRankConfig;
extern __typeof__(ncclCommInitRankScalable) pncclCommInitRankScalable;
extern __typeof__(ncclCommMemStats) pncclCommMemStats;
extern __typeof__(ncclCommRegister) pncclCommRegister;
extern __typeof__(ncclCommResume) pncclCommResume;
extern __typeof__(ncclCommRevoke) pncclCommRevoke;
extern __typeof__(ncclCommShrink) pncclCommShrink;
extern __typeof__(ncclCommSplit) pncclCommSplit;
extern __typeof__(ncclCommSuspend) pncclCommSuspend;
extern __typeof__(ncclCommUserRank) pncclCommUserRank;
extern __typeof__(ncclCommWindowDeregister) pncclCommWindowDeregister;
extern __typeof__(ncclCommWindowRegister) pncclCommWindowRegister;
extern __typeof__(ncclGather) pncclGather;
extern __typeof__(ncclGetErrorString) pncclGetErrorString;
extern __typeof__(ncclGetLastError) pncclGetLastError;
extern __typeof__(ncclGetUniqueId) pncclGetUniqueId;
extern __typeof__(ncclGetVersion) pncclGetVersion;
extern __typeof__(ncclGroupEnd) pncclGroupEnd;
extern __typeof__(ncclGroupSimulateEnd) pncclGroupSimulateEnd;
extern __typeof__(ncclGroupStart) pncclGroupStart;
extern __typeof__(ncclMemAlloc) pncclMemAlloc;
extern __typeof__(ncclMemFree) pncclMemFree;
extern __typeof__(ncclParamBind) pncclParamBind;
extern __typeof__(ncclParamDumpAll) pncclParamDumpAll;
extern __typeof__(ncclParamGet) pncclParamGet;
extern __typeof__(ncclParamGetAllParameterKeys) pncclParamGetAllParameterKeys;
extern __typeof__(ncclParamGetI16) pncclParamGetI16;
extern __typeof__(ncclParamGetI32) pncclParamGetI32;
extern __typeof__(ncclParamGetI64) pncclParamGetI64;
extern __typeof__(ncclParamGetI8) pncclParamGetI8;
extern __typeof__(ncclParamGetParameter) pncclParamGetParameter;
extern __typeof__(ncclParamGetStr) pncclParamGetStr;
extern __typeof__(ncclParamGetU16) pncclParamGetU16;
extern __typeof__(ncclParamGetU32) pncclParamGetU32;
extern __typeof__(ncclParamGetU64) pncclParamGetU64;
extern __typeof__(ncclParamGetU8) pncclParamGetU8;
extern __typeof__(ncclPutSignal) pncclPutSignal;
extern __typeof__(ncclRecv) pncclRecv;
extern __typeof__(ncclRedOpCreatePreMulSum) pncclRedOpCreatePreMulSum;
extern __typeof__(ncclRedOpDestroy) pncclRedOpDestroy;
extern __typeof__(ncclReduce) pncclReduce;
extern __typeof__(ncclReduceScatter) pncclReduceScatter;
extern __typeof__(ncclResetDebugInit) pncclResetDebugInit;
extern __typeof__(ncclScatter) pncclScatter;
extern __typeof__(ncclSend) pncclSend;
extern __typeof__(ncclSignal) pncclSignal;
extern __typeof__(ncclWaitSignal) pncclWaitSignal;
extern __typeof__(ncclWinGetUserPtr) pncclWinGetUserPtr;

#ifdef __cplusplus
}
#endif
#endif /* NCCL_H_ */
