/*
 * Reductions on the GPU, for every dtype x op: built from the host
 * table's element functions (reduce/elem.h), with single IEEE operations
 * (__fadd_rn and friends: nothing is fused), so that a reduction on the
 * GPU gives the host's bits. Compiled to a fatbin by nvcc and embedded in
 * libccl, which loads it with the driver API (cuda/kernels.c): libccl
 * links no CUDA library.
 *
 * Names: ccl_fold_<dtype>_<op> (struct ccl_fold_args), dtype and op as in
 * cuda/kernels.c (CCL_AVG is a sum with a divisor).
 */
#include <stddef.h>
#include <stdint.h>

#include "device/fold_args.h"
#include "reduce/elem.h"

/* The GPU-resident path's kernel (device/gpu_direct.c). Group g =
 * blockIdx.y reads its sources (src[g] alone when src_one, else src[k] +
 * g src_step for every k), folds them in source order with the element
 * function, as the host's direct algorithm folds ranks in rank order
 * (divided by `divisor` when it is not 0, for CCL_AVG), and writes the
 * result to its destinations (dst[g] alone when dst_one, else dst[j] + g
 * dst_step for every j). Where every address is 16-byte aligned, a thread
 * moves 16 bytes of each at a time. */
template <typename T, typename Op, typename Div>
__device__ static void fold(const struct ccl_fold_args &a, Op op, Div div) {
    const unsigned g = blockIdx.y;
    const T *src[CCL_FOLD_MAX];
    T *dst[CCL_FOLD_MAX];
    const int ns = a.src_one ? 1 : a.nsrc, nd = a.dst_one ? 1 : a.ndst;
    for (int k = 0; k < ns; k++) src[k] = (const T *)(a.src_one ? a.src[g] : a.src[k]) + (a.src_one ? 0 : g * a.src_step);
    for (int j = 0; j < nd; j++) dst[j] = (T *)(a.dst_one ? a.dst[g] : a.dst[j]) + (a.dst_one ? 0 : g * a.dst_step);
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t head = 0;
    if (a.vector) {
        const int V = 16 / sizeof(T);
        head = a.n / V * V;
        for (size_t v = first; v < a.n / V; v += stride) {
            union {
                uint4 q;
                T e[16 / sizeof(T)];
            } acc, x;
            acc.q = ((const uint4 *)src[0])[v];
            for (int k = 1; k < ns; k++) {
                x.q = ((const uint4 *)src[k])[v];
#pragma unroll
                for (int e = 0; e < V; e++) acc.e[e] = op(acc.e[e], x.e[e]);
            }
            if (a.divisor)
#pragma unroll
                for (int e = 0; e < V; e++) acc.e[e] = div(acc.e[e], a.divisor);
            for (int j = 0; j < nd; j++) ((uint4 *)dst[j])[v] = acc.q;
        }
    }
    for (size_t i = head + first; i < a.n; i += stride) {
        T acc = src[0][i];
        for (int k = 1; k < ns; k++) acc = op(acc, src[k][i]);
        if (a.divisor) acc = div(acc, a.divisor);
        for (int j = 0; j < nd; j++) dst[j][i] = acc;
    }
}

#define OP_FN(name, T, EXPR) \
    struct name {            \
        __device__ T operator()(T x, T y) const { return (EXPR); } \
    };
#define DIV_FN(name, T, DIVISOR_T, EXPR) \
    struct name {                        \
        __device__ T operator()(T x, int d) const { DIVISOR_T dv = (DIVISOR_T)d; return (EXPR); } \
    };
#define FOLD(tag, op, T)                                                                      \
    extern "C" __global__ void ccl_fold_##tag##_##op(const struct ccl_fold_args a) {          \
        fold<T>(a, op_##tag##_##op(), div_##tag());                                           \
    }

#define INT_FOLD(tag, op, T, EXPR) OP_FN(op_##tag##_##op, T, EXPR) FOLD(tag, op, T)
#define INT_FOLDS(tag, T, U) CCL_ELEM_INT_OPS(INT_FOLD, tag, T, U)
DIV_FN(div_i8, int8_t, int, (int8_t)(x / dv))
DIV_FN(div_u8, uint8_t, int, (uint8_t)(x / dv))
DIV_FN(div_i32, int32_t, int32_t, x / dv)
DIV_FN(div_u32, uint32_t, uint32_t, x / dv)
DIV_FN(div_i64, int64_t, int64_t, x / dv)
DIV_FN(div_u64, uint64_t, uint64_t, x / dv)
DIV_FN(div_f32, float, float, pick_nan_f32(x, x, __fdiv_rn(x, dv)))
DIV_FN(div_f64, double, double, pick_nan_f64(x, x, __ddiv_rn(x, dv)))
DIV_FN(div_f16, uint16_t, float, float_to_half_inline(pick_nan_f32(half_to_float_inline(x), half_to_float_inline(x), __fdiv_rn(half_to_float_inline(x), dv))))
DIV_FN(div_bf16, uint16_t, float, float_to_bf16_inline(pick_nan_f32(bf16_to_float_inline(x), bf16_to_float_inline(x), __fdiv_rn(bf16_to_float_inline(x), dv))))
CCL_ELEM_INT_TYPES(INT_FOLDS)

#define FLOAT_FOLDS(tag, T, ADD, MUL, MAX, MIN)                                \
    OP_FN(op_##tag##_sum, T, pick_nan_##tag(x, y, ADD(x, y))) FOLD(tag, sum, T) \
    OP_FN(op_##tag##_prod, T, pick_nan_##tag(x, y, MUL(x, y))) FOLD(tag, prod, T) \
    OP_FN(op_##tag##_max, T, max_##tag(x, y)) FOLD(tag, max, T)                \
    OP_FN(op_##tag##_min, T, min_##tag(x, y)) FOLD(tag, min, T)
FLOAT_FOLDS(f32, float, __fadd_rn, __fmul_rn, MAX, MIN)
FLOAT_FOLDS(f64, double, __dadd_rn, __dmul_rn, MAX, MIN)

#define HALF_FOLDS(tag, TO_FLOAT, FROM_FLOAT)                                                                            \
    OP_FN(op_##tag##_sum, uint16_t, FROM_FLOAT(pick_nan_f32(TO_FLOAT(x), TO_FLOAT(y), __fadd_rn(TO_FLOAT(x), TO_FLOAT(y))))) \
    FOLD(tag, sum, uint16_t)                                                                                             \
    OP_FN(op_##tag##_prod, uint16_t, FROM_FLOAT(pick_nan_f32(TO_FLOAT(x), TO_FLOAT(y), __fmul_rn(TO_FLOAT(x), TO_FLOAT(y))))) \
    FOLD(tag, prod, uint16_t)                                                                                            \
    OP_FN(op_##tag##_max, uint16_t, FROM_FLOAT(max_f32(TO_FLOAT(x), TO_FLOAT(y))))                                       \
    FOLD(tag, max, uint16_t)                                                                                             \
    OP_FN(op_##tag##_min, uint16_t, FROM_FLOAT(min_f32(TO_FLOAT(x), TO_FLOAT(y))))                                       \
    FOLD(tag, min, uint16_t)
HALF_FOLDS(f16, half_to_float_inline, float_to_half_inline)
HALF_FOLDS(bf16, bf16_to_float_inline, float_to_bf16_inline)
