/*
 * Reduction ops beyond the enum: the premultiplied sums that
 * ccl_op_create_premul_sum makes, one table per communicator, and which
 * built-in op fits which dtype.
 */
#ifndef CCL_CORE_OPS_H
#define CCL_CORE_OPS_H

#include <pthread.h>
#include <stdint.h>

#include "ccl.h"

/* A call's op once its made op was looked up (the scalar then rides in the
 * call's arguments): one value on every rank, whatever slot each rank's op
 * took, so CCL_CHECK compares like with like. Fits a slot's uint8 op. */
#define CCL__OP_PREMUL_SUM ((ccl_op_t)CCL_NUM_OPS)
/* ccl_op_create_premul_sum's ops are this plus their slot. */
#define CCL__OP_MADE_FIRST 0x100u
#define CCL__OP_SCALAR_BYTES 8

struct ccl__made_op {
    int live;
    ccl_dtype_t dtype;
    unsigned char scalar[CCL__OP_SCALAR_BYTES]; /* one element of dtype */
};

struct ccl__made_ops {
    pthread_mutex_t lock; /* any thread may make, destroy and use ops */
    struct ccl__made_op *slots;
    int n;
};

/* 1 when the built-in op reduces dtype (bitwise ops: integers only). */
int ccl__op_fits(ccl_op_t op, ccl_dtype_t dtype);

#endif
