/*
 * One element of a reduction: the bit views, the float16/bfloat16
 * conversions and the NaN and signed-zero rules, written once for the
 * host (reduce.c) and for the GPU (device/kernels.cu), so that a reduction
 * gives the same bits wherever it runs. Plain C99 that nvcc also compiles;
 * CCL_ELEM makes each function a device function there.
 */
#ifndef CCL_REDUCE_ELEM_H
#define CCL_REDUCE_ELEM_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define CCL_ELEM static __host__ __device__ __forceinline__
#else
#define CCL_ELEM static inline
#endif

/* ---- bit views ---- */

CCL_ELEM uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

CCL_ELEM float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

CCL_ELEM uint64_t double_bits(double f) {
    uint64_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

CCL_ELEM double bits_double(uint64_t u) {
    double f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- float16 and bfloat16 conversions ----
 * Written without branches (every case computed, one selected) so that the
 * loops that call them can still be vectorised. Rounding is done on the
 * integer encodings, so it is round-to-nearest-even whatever the FPU's
 * rounding mode is, exactly like the F16C instruction with an explicit mode. */

CCL_ELEM float half_to_float_inline(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    /* Normal: rebias the exponent from 15 to 127. */
    uint32_t normal = ((exponent + 112u) << 23) | (mantissa << 13);
    /* Subnormal: mantissa * 2^-24, built as 2^-14 * (1 + mantissa/1024)
     * minus 2^-14, both exact (zero falls out too). Every lane subtracts
     * and the bits are selected after, so the loop stays free of branches;
     * only this lane's result goes through arithmetic (a GPU returns its
     * canonical NaN from any arithmetic on a NaN, dropping the payload). */
    uint32_t subnormal = float_bits(bits_float(0x38800000u | (mantissa << 13)) - 0x1p-14f);
    /* Infinity keeps its encoding; a NaN keeps its payload and comes back
     * quiet, as the hardware conversion does. */
    uint32_t special = 0x7f800000u | (mantissa << 13) | (mantissa != 0 ? 0x00400000u : 0u);
    uint32_t magnitude = exponent == 0 ? subnormal : exponent == 31 ? special : normal;
    return bits_float(sign | magnitude);
}

CCL_ELEM uint16_t float_to_half_inline(float f) {
    uint32_t x = float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs_bits = x & 0x7fffffffu;
    /* Normal: rebias, then round away the 13 low bits to nearest even. A
     * carry out of the mantissa lands in the exponent, which is right. */
    uint32_t rebiased = abs_bits - 0x38000000u;
    uint32_t normal = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;
    /* Subnormal: the full significand shifted right by 126 - exponent. The
     * shift is clamped to [14, 25]: 25 already rounds every float below
     * 2^-25 to zero, and a clamped shift keeps the unused lanes defined. */
    int shift = 126 - (int)(abs_bits >> 23);
    shift = shift < 14 ? 14 : shift > 25 ? 25 : shift;
    uint32_t significand = (abs_bits & 0x7fffffu) | 0x800000u;
    uint32_t subnormal =
        (significand + ((1u << (shift - 1)) - 1u) + ((significand >> shift) & 1u)) >> shift;
    /* NaN: keep the top payload bits, force quiet. */
    uint32_t nan = 0x7e00u | ((abs_bits >> 13) & 0x3ffu);
    uint32_t magnitude = abs_bits > 0x7f800000u   ? nan
                         : abs_bits >= 0x477ff000u ? 0x7c00u /* >= 65520 rounds to inf */
                         : abs_bits >= 0x38800000u ? normal  /* >= 2^-14 */
                                                   : subnormal;
    return (uint16_t)(sign | magnitude);
}

CCL_ELEM float bf16_to_float_inline(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    uint32_t quiet = (x & 0x7fffffffu) > 0x7f800000u ? 0x00400000u : 0u;
    return bits_float(x | quiet);
}

CCL_ELEM uint16_t float_to_bf16_inline(float f) {
    uint32_t x = float_bits(f);
    /* Same exponent range as float32: only the low 16 bits are rounded away,
     * and overflow to infinity and subnormals fall out of the carry. */
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x0040u;
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* ---- NaN results ----
 * Which NaN comes out must not depend on which operand a compiler puts
 * first (x86 returns the first source operand's, and for a commutative
 * operation the compiler chooses which is first), nor on the CPU's or the
 * GPU's default NaN, or two ranks (or the SIMD and the portable path)
 * could disagree in the bits. So: the first NaN operand, made quiet,
 * payload kept; a NaN made from numbers (inf - inf, 0 * inf) is the
 * positive default quiet NaN. */

#define QUIET_NAN_F32 0x7fc00000u
#define QUIET_NAN_F64 0x7ff8000000000000ull

CCL_ELEM float quiet_f32(float x) { return bits_float(float_bits(x) | 0x00400000u); }
CCL_ELEM double quiet_f64(double x) { return bits_double(double_bits(x) | 0x0008000000000000ull); }

/* The first NaN operand, made quiet; r when neither is NaN. */
CCL_ELEM float first_nan_f32(float x, float y, float r) { return x != x ? quiet_f32(x) : y != y ? quiet_f32(y) : r; }
CCL_ELEM double first_nan_f64(double x, double y, double r) {
    return x != x ? quiet_f64(x) : y != y ? quiet_f64(y) : r;
}

/* An arithmetic result under the rule (float32 also holds the widened
 * 16-bit operands, whose NaNs are quiet already). */
CCL_ELEM float pick_nan_f32(float x, float y, float result) {
    return first_nan_f32(x, y, result != result ? bits_float(QUIET_NAN_F32) : result);
}

CCL_ELEM double pick_nan_f64(double x, double y, double result) {
    return first_nan_f64(x, y, result != result ? bits_double(QUIET_NAN_F64) : result);
}

/* ---- IEEE 754-2019 maximum / minimum ----
 * Equal operands have identical encodings except +0 and -0, where AND of
 * the encodings gives +0 (maximum) and OR gives -0 (minimum). Everything is
 * computed, then selected, so the loops have no branch to stop vectorising. */

CCL_ELEM float max_f32(float x, float y) {
    float equal = bits_float(float_bits(x) & float_bits(y));
    float larger = x == y ? equal : x > y ? x : y;
    return first_nan_f32(x, y, larger);
}

CCL_ELEM float min_f32(float x, float y) {
    float equal = bits_float(float_bits(x) | float_bits(y));
    float smaller = x == y ? equal : x < y ? x : y;
    return first_nan_f32(x, y, smaller);
}

CCL_ELEM double max_f64(double x, double y) {
    double equal = bits_double(double_bits(x) & double_bits(y));
    double larger = x == y ? equal : x > y ? x : y;
    return first_nan_f64(x, y, larger);
}

CCL_ELEM double min_f64(double x, double y) {
    double equal = bits_double(double_bits(x) | double_bits(y));
    double smaller = x == y ? equal : x < y ? x : y;
    return first_nan_f64(x, y, smaller);
}

/* ---- integers ----
 * What each op means on each integer type, for every place that builds a
 * kernel table: CCL_ELEM_INT_TYPES(M) calls M(tag, T, U) per type, and
 * CCL_ELEM_INT_OPS(K, tag, T, U) calls K(tag, op, T, EXPR) per op, EXPR an
 * expression of the two elements x and y. SUM and PROD are done in the
 * unsigned twin U, where wrap-around is defined (narrow types promote to
 * int, where 255 * 255 cannot overflow either). */

#define CCL_ELEM_INT_TYPES(M) \
    M(i8, int8_t, uint8_t)    \
    M(u8, uint8_t, uint8_t)   \
    M(i32, int32_t, uint32_t) \
    M(u32, uint32_t, uint32_t) \
    M(i64, int64_t, uint64_t) \
    M(u64, uint64_t, uint64_t)

#define CCL_ELEM_INT_OPS(K, tag, T, U)    \
    K(tag, sum, T, (T)((U)x + (U)y))      \
    K(tag, prod, T, (T)((U)x * (U)y))     \
    K(tag, max, T, x > y ? x : y)         \
    K(tag, min, T, x < y ? x : y)         \
    K(tag, band, T, (T)(x & y))           \
    K(tag, bor, T, (T)(x | y))            \
    K(tag, bxor, T, (T)(x ^ y))

#endif
