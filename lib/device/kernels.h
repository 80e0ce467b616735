/*
 * The GPU reductions (kernels.cu), embedded in libccl as a fatbin and run
 * through the driver API, with the host table's bits (reduce/reduce.h).
 * Where libccl was built without nvcc (CCL_CUDA=OFF), they report that
 * instead.
 */
#ifndef CCL_CUDA_KERNELS_H
#define CCL_CUDA_KERNELS_H

#include <stddef.h>

#include "ccl.h"
#include "device/driver.h"
#include "device/fold_args.h"

/* 1 when this build carries GPU kernels. */
int ccl__cuda_have_kernels(void);
/* The GPU-resident path's kernel (fold_args.h) over `groups` groups. */
int ccl__cuda_fold(ccl_dtype_t dtype, ccl_op_t op, const struct ccl_fold_args *a, unsigned groups, CUstream stream,
                   char *why, size_t whylen);

#endif
