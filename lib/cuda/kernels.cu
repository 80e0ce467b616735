/*
 * Reductions on the GPU: the host table's kernels (reduce/reduce.c) for
 * every dtype x op, one element per thread in a grid-stride loop, built
 * from the same element functions (reduce/elem.h) so that a reduction on
 * the GPU gives the host's bits. Compiled to a fatbin by nvcc and embedded
 * in libccl, which loads it with the driver API (cuda/kernels.c): libccl
 * links no CUDA library.
 *
 * Names: ccl_reduce_<dtype>_<op> (dst, a, b, n) and ccl_div_<dtype>
 * (buf, n, divisor), dtype and op as in cuda/kernels.h.
 */
#include <stddef.h>
#include <stdint.h>

#include "reduce/elem.h"

#define EACH(n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

#define REDUCE(name, T, EXPR)                                                                \
    extern "C" __global__ void name(T *__restrict__ d, const T *a, const T *b, size_t n) {   \
        EACH(n) {                                                                            \
            T x = a[i];                                                                      \
            T y = b[i];                                                                      \
            d[i] = (EXPR);                                                                   \
        }                                                                                    \
    }

/* Integers: ccl_reduce_i8_sum ... ccl_reduce_u64_min, each op as reduce/elem.h defines it. */
#define INT_KERNEL(tag, op, T, EXPR) REDUCE(ccl_reduce_##tag##_##op, T, EXPR)
#define INT_KERNELS(tag, T, U) CCL_ELEM_INT_OPS(INT_KERNEL, tag, T, U)
CCL_ELEM_INT_TYPES(INT_KERNELS)

/* __fadd_rn and friends: one IEEE operation, never fused with another; a
 * NaN result follows the host's rule (elem.h), not the GPU's canonical NaN. */
REDUCE(ccl_reduce_f32_sum, float, pick_nan_f32(x, y, __fadd_rn(x, y)))
REDUCE(ccl_reduce_f32_prod, float, pick_nan_f32(x, y, __fmul_rn(x, y)))
REDUCE(ccl_reduce_f32_max, float, max_f32(x, y))
REDUCE(ccl_reduce_f32_min, float, min_f32(x, y))
REDUCE(ccl_reduce_f64_sum, double, pick_nan_f64(x, y, __dadd_rn(x, y)))
REDUCE(ccl_reduce_f64_prod, double, pick_nan_f64(x, y, __dmul_rn(x, y)))
REDUCE(ccl_reduce_f64_max, double, max_f64(x, y))
REDUCE(ccl_reduce_f64_min, double, min_f64(x, y))

/* 16-bit floats: widen both, one float32 operation, round once to nearest even. */
#define HALF_REDUCE(name, TO_FLOAT, FROM_FLOAT, FLOAT_EXPR)                                           \
    extern "C" __global__ void name(uint16_t *__restrict__ d, const uint16_t *a, const uint16_t *b,  \
                                    size_t n) {                                                      \
        EACH(n) {                                                                                    \
            float x = TO_FLOAT(a[i]);                                                                \
            float y = TO_FLOAT(b[i]);                                                                \
            d[i] = FROM_FLOAT(FLOAT_EXPR);                                                           \
        }                                                                                            \
    }

#define HALF_KERNELS(tag, TO_FLOAT, FROM_FLOAT)                                                     \
    HALF_REDUCE(ccl_reduce_##tag##_sum, TO_FLOAT, FROM_FLOAT, pick_nan_f32(x, y, __fadd_rn(x, y)))  \
    HALF_REDUCE(ccl_reduce_##tag##_prod, TO_FLOAT, FROM_FLOAT, pick_nan_f32(x, y, __fmul_rn(x, y))) \
    HALF_REDUCE(ccl_reduce_##tag##_max, TO_FLOAT, FROM_FLOAT, max_f32(x, y))                        \
    HALF_REDUCE(ccl_reduce_##tag##_min, TO_FLOAT, FROM_FLOAT, min_f32(x, y))

HALF_KERNELS(f16, half_to_float_inline, float_to_half_inline)
HALF_KERNELS(bf16, bf16_to_float_inline, float_to_bf16_inline)

/* Finishing CCL_AVG: C's division in the element type (integers truncate
 * toward zero), 16-bit floats through float32 with one rounding. */
#define DIV(name, T, DIVISOR_T, EXPR)                                         \
    extern "C" __global__ void name(T *p, size_t n, int divisor) {            \
        DIVISOR_T dv = (DIVISOR_T)divisor;                                    \
        EACH(n) {                                                             \
            T x = p[i];                                                       \
            p[i] = (EXPR);                                                    \
        }                                                                     \
    }

DIV(ccl_div_i8, int8_t, int, (int8_t)(x / dv))
DIV(ccl_div_u8, uint8_t, int, (uint8_t)(x / dv))
DIV(ccl_div_i32, int32_t, int32_t, x / dv)
DIV(ccl_div_u32, uint32_t, uint32_t, x / dv)
DIV(ccl_div_i64, int64_t, int64_t, x / dv)
DIV(ccl_div_u64, uint64_t, uint64_t, x / dv)
DIV(ccl_div_f32, float, float, pick_nan_f32(x, x, __fdiv_rn(x, dv)))
DIV(ccl_div_f64, double, double, pick_nan_f64(x, x, __ddiv_rn(x, dv)))
DIV(ccl_div_f16, uint16_t, float, float_to_half_inline(pick_nan_f32(half_to_float_inline(x), half_to_float_inline(x), __fdiv_rn(half_to_float_inline(x), dv))))
DIV(ccl_div_bf16, uint16_t, float, float_to_bf16_inline(pick_nan_f32(bf16_to_float_inline(x), bf16_to_float_inline(x), __fdiv_rn(bf16_to_float_inline(x), dv))))
