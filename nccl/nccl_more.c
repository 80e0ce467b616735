/*
 * The calls NCCL added after 2.19, up to 2.28 (CUDA 13's nccl.h), so that a
 * program built against that header finds every symbol it names. What
 * libccl can do is done on it; the rest answers ncclInvalidUsage with a
 * sentence in ncclGetLastError, never a missing symbol.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

NCCL_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclComm_t comm, cudaStream_t stream) {
    MOVING("ncclAlltoAll", ccl_all_to_all_stream(sendbuff, recvbuff, count, dt, comm->c, stream));
}

NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                 int root, ncclComm_t comm, cudaStream_t stream) {
    MOVING("ncclGather", ON_STREAM(stream, ccl_gather(sendbuff, recvbuff, count, dt, root, comm->c)));
}

NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                                  int root, ncclComm_t comm, cudaStream_t stream) {
    MOVING("ncclScatter", ON_STREAM(stream, ccl_scatter(sendbuff, recvbuff, count, dt, root, comm->c)));
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

/* ncclCommInitAll's ranks: each joins on a thread of its own, as an init
 * waits for the others. */
struct one_rank {
    ncclComm_t *slot;
    int nranks, rank;
    ncclUniqueId id;
    ncclResult_t r;
    char err[sizeof nccl_last_error];
};

static void *init_one(void *arg) {
    struct one_rank *a = arg;
    a->r = ncclCommInitRank(a->slot, a->nranks, a->id, a->rank);
    memcpy(a->err, nccl_last_error, sizeof a->err); /* the thread's own last error */
    return NULL;
}

/* ndev ranks in this process, rank i in comm[i]. A device is bound to a
 * communicator at its first device buffer or stream (docs/cuda.md), so
 * devlist is read for its length only. One thread then drives them all,
 * a call on every communicator inside one group, as NCCL's programs do. */
NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
    (void)devlist;
    if (!comm || ndev < 1)
        return fail(ncclInvalidArgument, "%s: needs comm and ndev >= 1", "ncclCommInitAll");
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return r;
    struct one_rank *a = calloc((size_t)ndev, sizeof(*a));
    pthread_t *t = calloc((size_t)ndev, sizeof(*t));
    if (!a || !t) {
        free(a), free(t);
        return fail(ncclSystemError, "%s: out of memory", "ncclCommInitAll");
    }
    int started = 0;
    for (int i = 0; i < ndev; i++) {
        comm[i] = NULL;
        a[i] = (struct one_rank){.slot = &comm[i], .nranks = ndev, .rank = i, .id = id, .r = ncclSystemError};
        snprintf(a[i].err, sizeof a[i].err, "ncclCommInitAll: cannot start a thread for rank %d", i);
        if (pthread_create(&t[i], NULL, init_one, &a[i]) != 0) break;
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    int bad = -1;
    for (int i = 0; i < ndev && bad < 0; i++)
        if (a[i].r != ncclSuccess) bad = i;
    if (bad >= 0) {
        r = a[bad].r;
        snprintf(nccl_last_error, sizeof nccl_last_error, "%s", a[bad].err);
        for (int i = 0; i < ndev; i++)
            if (comm[i]) ncclCommDestroy(comm[i]), comm[i] = NULL;
    }
    free(a);
    free(t);
    return r;
}

/* ---- ncclMemAlloc: device memory where the program uses CUDA, pages on the host elsewhere ---- */

/* Host allocations, so that ncclMemFree knows them (and their size). */
struct host_block {
    void *p;
    size_t bytes;
    struct host_block *next;
};
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_block *host_blocks;

typedef int (*cuda_alloc_fn)(void **, size_t);
typedef int (*cuda_free_fn)(void *);

/* The CUDA runtime's calls, where the program has it loaded (it links
 * libcudart to use NCCL on GPUs); NULL in a host-only program. */
static void *cuda_runtime(const char *name) { return dlsym(RTLD_DEFAULT, name); }

NCCL_API ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
    if (!ptr || size == 0) return fail(ncclInvalidArgument, "%s: ptr is NULL or size is 0", "ncclMemAlloc");
    *ptr = NULL;
    cuda_alloc_fn cuda_malloc = (cuda_alloc_fn)cuda_runtime("cudaMalloc");
    int devices = 0;
    int (*count)(int *) = (int (*)(int *))cuda_runtime("cudaGetDeviceCount");
    if (cuda_malloc && count && count(&devices) == 0 && devices > 0) {
        int e = cuda_malloc(ptr, size); /* on the current device, as NCCL's */
        if (e != 0) {
            char why[96];
            snprintf(why, sizeof why, "cudaMalloc of %zu bytes failed (cudaError %d)", size, e);
            return fail(ncclUnhandledCudaError, "ncclMemAlloc: %s", why);
        }
        return ncclSuccess;
    }
    /* No GPU here: whole pages, which ncclCommRegister can register. */
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = (size + page - 1) / page * page;
    struct host_block *b = malloc(sizeof *b);
    void *p = b ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(b);
        return fail(ncclSystemError, "%s: out of memory", "ncclMemAlloc");
    }
    *b = (struct host_block){p, bytes, NULL};
    pthread_mutex_lock(&host_lock);
    b->next = host_blocks, host_blocks = b;
    pthread_mutex_unlock(&host_lock);
    *ptr = p;
    return ncclSuccess;
}

NCCL_API ncclResult_t ncclMemFree(void *ptr) {
    if (!ptr) return ncclSuccess;
    pthread_mutex_lock(&host_lock);
    struct host_block **at = &host_blocks;
    while (*at && (*at)->p != ptr) at = &(*at)->next;
    struct host_block *b = *at;
    if (b) *at = b->next;
    pthread_mutex_unlock(&host_lock);
    if (b) {
        munmap(b->p, b->bytes);
        free(b);
        return ncclSuccess;
    }
    cuda_free_fn cuda_free = (cuda_free_fn)cuda_runtime("cudaFree");
    if (cuda_free && ccl_is_device_pointer(ptr)) {
        int e = cuda_free(ptr);
        if (e == 0) return ncclSuccess;
        char why[64];
        snprintf(why, sizeof why, "cudaFree failed (cudaError %d)", e);
        return fail(ncclUnhandledCudaError, "ncclMemFree: %s", why);
    }
    return fail(ncclInvalidArgument, "%s: not memory of ncclMemAlloc's (or freed already)", "ncclMemFree");
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

/* The group ends running nothing; estimatedTime is libccl's cost model's
 * time for its calls, in microseconds (ccl_group_simulate_end). */
NCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
    if (!simInfo || simInfo->magic != 0x74685283u || simInfo->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float))
        return fail(ncclInvalidArgument, "%s: simInfo was not made with NCCL_SIM_INFO_INITIALIZER",
                    "ncclGroupSimulateEnd");
    double us = 0;
    ccl_status_t st = ccl_group_simulate_end(&us);
    if (st == CCL_ERR_INVALID_USAGE)
        return fail(ncclInvalidUsage, "%s: no group to end (ncclGroupStart first), or a nested one",
                    "ncclGroupSimulateEnd");
    if (st != CCL_OK) return from_ccl(st);
    if (nccl_group_depth > 0) nccl_group_depth--;
    simInfo->estimatedTime = (float)us;
    return ncclSuccess;
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
