/* The argument of the GPU-resident path's kernel, ccl_fold_<dtype>_<op>
 * (cuda/kernels.cu), shared by the C side that fills it
 * (cuda/kernels.c) and the kernel: one plain struct passed by value. */
#ifndef CCL_CUDA_FOLD_ARGS_H
#define CCL_CUDA_FOLD_ARGS_H

#define CCL_FOLD_MAX 16 /* sources and destinations: one per rank */

struct ccl_fold_args {
    const void *src[CCL_FOLD_MAX];
    void *dst[CCL_FOLD_MAX];
    unsigned long long n;        /* elements per group */
    unsigned long long src_step; /* elements between groups in a source (not src_one) */
    unsigned long long dst_step; /* and in a destination (not dst_one) */
    int nsrc, ndst;
    int src_one, dst_one; /* group g reads src[g] alone / writes dst[g] alone */
    int divisor;          /* CCL_AVG: divide the fold by it; 0: no division */
    int vector;           /* every address 16-byte aligned: 16 bytes a load */
};

#endif
