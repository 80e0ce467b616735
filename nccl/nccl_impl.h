/*
 * What the parts of libccl-nccl share (nccl.c: the calls of NCCL 2.19's
 * API; nccl_more.c: those NCCL added up to 2.28; nccl_230.c: 2.29 and
 * 2.30's; nccl_fp8.c: reductions of 8-bit floats; nccl_env.c: NCCL's
 * environment read as libccl's): the wrapped communicator, this thread's
 * last error and group depth, and the mappings. Hidden: none of it is
 * exported.
 */
#ifndef CCL_NCCL_IMPL_H
#define CCL_NCCL_IMPL_H

#include <stdint.h>

#include "ccl.h"
#include "nccl.h"

#define NCCL_API __attribute__((visibility("default")))
/* Every call's pnccl twin (NCCL's profiling interface), the same function. */
#define PNCCL(name) extern __typeof__(name) p##name __attribute__((alias(#name), visibility("default")))
#define COMM_MAGIC 0x4e43434cu
#define MAX_PREMUL 64

struct premul {
    int live;
    ncclDataType_t dtype;
    unsigned char scalar[8]; /* the value, in the dtype */
};

struct ncclComm {
    uint32_t magic;
    ccl_comm_t *c;
    int suspended; /* ncclCommSuspend: calls that move data are refused */
    struct premul ops[MAX_PREMUL]; /* op ncclNumOps + i */
};

extern _Thread_local char nccl_last_error[512];
/* How deep this thread is in ncclGroupStart/End: calls that convert
 * their results after libccl's call returns (premultiplied sums, fp8
 * reductions) cannot be queued in a group. */
extern _Thread_local int nccl_group_depth;

ncclResult_t from_ccl(ccl_status_t st);
/* A libccl result, its sentence kept as this thread's last error. */
ncclResult_t done(ncclComm_t comm, ccl_status_t st);
/* r, with fmt (one %s: arg) as this thread's last error. */
ncclResult_t fail(ncclResult_t r, const char *fmt, const char *arg);
int valid(const struct ncclComm *comm);
#define CHECK_COMM(comm, what)                                                                \
    do {                                                                                      \
        if (!valid(comm)) return fail(ncclInvalidArgument, "%s: invalid communicator", what); \
    } while (0)
/* CHECK_COMM, and not suspended (for calls that move data). */
#define CHECK_LIVE(comm, what)                                                                                    \
    do {                                                                                                          \
        CHECK_COMM(comm, what);                                                                                   \
        if ((comm)->suspended) return fail(ncclInvalidUsage, "%s: the communicator is suspended (ncclCommSuspend): " \
                                           "ncclCommResume it first", what);                                      \
    } while (0)
/* NCCL's datatype as libccl's, -1 for an unknown one. The 8-bit floats
 * are moved as bytes (CCL_UINT8); reductions take them apart first
 * (is_fp8). */
int dtype_of(ncclDataType_t d, ccl_dtype_t *out);
static inline int is_fp8(ncclDataType_t d) { return d == ncclFloat8e4m3 || d == ncclFloat8e5m2; }
/* The body of a call that moves data: comm and datatype checked (the
 * caller's variables comm and datatype), then call, with dt the datatype
 * as libccl's. */
#define MOVING(what, call)                                                                \
    do {                                                                                  \
        CHECK_LIVE(comm, what);                                                           \
        ccl_dtype_t dt;                                                                   \
        if (dtype_of(datatype, &dt) < 0) return fail(ncclInvalidArgument, "%s: unknown datatype", what); \
        return done(comm, call);                                                          \
    } while (0)

/* The reducing collectives' kinds. */
enum { K_ALL_REDUCE, K_REDUCE, K_REDUCE_SCATTER };
/* An 8-bit float reduction (nccl_fp8.c): on host buffers, the default
 * stream and outside groups; widened to float64, reduced, rounded back. */
ncclResult_t fp8_reduce(int kind, const void *send, void *recv, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream, const char *what);
/* ncclInvalidArgument (said) unless config is NULL or any NCCL version's
 * ncclConfig_t made with NCCL_CONFIG_INITIALIZER. */
ncclResult_t check_config(const ncclConfig_t *config, const char *what);
/* *out: a new wrapped communicator around c (c destroyed on failure). */
ncclResult_t wrap(ncclComm_t *out, ccl_comm_t *c);

#endif
