/*
 * The GPU reductions (kernels.cu), embedded in libccl as a fatbin and run
 * through the driver API: dst <- a OP b and buf /= divisor on a stream,
 * with the host table's bits (reduce/reduce.h). The device compute engine
 * is built on these; where libccl was built without nvcc (CCL_CUDA=OFF),
 * they report that instead.
 */
#ifndef CCL_CUDA_KERNELS_H
#define CCL_CUDA_KERNELS_H

#include <stddef.h>

#include "ccl.h"
#include "cuda/driver.h"
#include "cuda/fold_args.h"

/* 1 when this build carries GPU kernels. */
int ccl__cuda_have_kernels(void);
/* Enqueue on stream (in the current context). 0, or -1 with why. */
int ccl__cuda_reduce(ccl_dtype_t dtype, ccl_op_t op, void *dst, const void *a, const void *b, size_t n,
                     CUstream stream, char *why, size_t whylen);
int ccl__cuda_divide(ccl_dtype_t dtype, void *buf, size_t n, int divisor, CUstream stream, char *why,
                     size_t whylen);

/* The GPU-resident path's kernel (fold_args.h) over `groups` groups. */
int ccl__cuda_fold(ccl_dtype_t dtype, ccl_op_t op, const struct ccl_fold_args *a, unsigned groups, CUstream stream,
                   char *why, size_t whylen);

#endif
