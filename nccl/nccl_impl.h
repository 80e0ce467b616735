/*
 * What the two halves of libccl-nccl share (nccl.c: the calls of NCCL
 * 2.19's API; nccl_more.c: those NCCL added up to 2.28): the wrapped
 * communicator, this thread's last error, and the mappings. Hidden: none
 * of it is exported.
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
    struct premul ops[MAX_PREMUL]; /* op ncclNumOps + i */
};

extern _Thread_local char nccl_last_error[512];

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
/* NCCL's datatype as libccl's; -1 for one libccl has not (fp8). */
int dtype_of(ncclDataType_t d, ccl_dtype_t *out);
/* The body of a call that moves data: comm and datatype checked (the
 * caller's variables comm and datatype), then call, with dt the datatype
 * as libccl's. */
#define MOVING(what, call)                                                                \
    do {                                                                                  \
        CHECK_COMM(comm, what);                                                           \
        ccl_dtype_t dt;                                                                   \
        if (dtype_of(datatype, &dt) < 0) return fail(ncclInvalidArgument, "%s: unknown datatype", what); \
        return done(comm, call);                                                          \
    } while (0)
/* *out: a new wrapped communicator around c (c destroyed on failure). */
ncclResult_t wrap(ncclComm_t *out, ccl_comm_t *c);

#endif
