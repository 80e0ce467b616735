/*
 * The reduction table: dst[i] = a[i] OP b[i] for every (dtype, op), plus the
 * division that finishes CCL_AVG.
 *
 * Each kernel is one plain loop with no branch on dtype or op inside, so the
 * compiler (this file is built with -O3) vectorises it; float32/float64 SUM
 * and PROD are written in vectors (below), for the NaN rule. dst may equal
 * a or b: every element is read before it is written and no element is
 * read after its own write, so exact aliasing is safe, and GCC's runtime
 * overlap check still takes the vector path when the distance is zero.
 *
 * Results must be bit-identical on every rank, including ranks on machines
 * with and without AVX2/F16C, so the AVX2 fast paths are the baseline
 * path's exact twins (tests/test_reduce.c checks both against one
 * reference) and no kernel depends on how a compiler reassociates: each
 * element is one operation.
 */
#include "reduce/reduce.h"
#include "reduce/elem.h"

#include <string.h>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CCL_REDUCE_HAVE_X86_SIMD 1
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#endif

float ccl__half_to_float(uint16_t h) { return half_to_float_inline(h); }
uint16_t ccl__float_to_half(float f) { return float_to_half_inline(f); }
float ccl__bf16_to_float(uint16_t h) { return bf16_to_float_inline(h); }
uint16_t ccl__float_to_bf16(float f) { return float_to_bf16_inline(f); }

/* ---- kernels ---- */

#define DEFINE_REDUCE(name, T, EXPR)                                        \
    static void name(void *dst, const void *a, const void *b, size_t n) {   \
        T *d = dst;                                                         \
        const T *pa = a;                                                    \
        const T *pb = b;                                                    \
        for (size_t i = 0; i < n; i++) {                                    \
            T x = pa[i];                                                    \
            T y = pb[i];                                                    \
            d[i] = (EXPR);                                                  \
        }                                                                   \
    }

/* Integers: sum_i8 ... min_u64, each op as reduce/elem.h defines it. */
#define DEFINE_INT_KERNEL(tag, op, T, EXPR) DEFINE_REDUCE(op##_##tag, T, EXPR)
#define DEFINE_INT_KERNELS(tag, T, U) CCL_ELEM_INT_OPS(DEFINE_INT_KERNEL, tag, T, U)
CCL_ELEM_INT_TYPES(DEFINE_INT_KERNELS)

DEFINE_REDUCE(max_f32_kernel, float, max_f32(x, y))
DEFINE_REDUCE(min_f32_kernel, float, min_f32(x, y))
DEFINE_REDUCE(max_f64_kernel, double, max_f64(x, y))
DEFINE_REDUCE(min_f64_kernel, double, min_f64(x, y))

/* float32 and float64 SUM and PROD: the bare operation, then elem.h's NaN
 * rule wherever the result is NaN (the hardware's own NaN would depend on
 * the operand order the compiler chose, which differs between a loop that
 * writes over an operand and one that does not). A NaN is rare, so on x86
 * the operation runs on whole vectors, four at a time, with one test for a
 * NaN among them; only a block that holds one goes element by element. */
#define ARITH_BY_ELEMENT(T, PICK, OP, d, pa, pb, from, to)          \
    for (size_t k_ = (from); k_ < (to); k_++) {                     \
        T x_ = (pa)[k_], y_ = (pb)[k_];                             \
        (d)[k_] = PICK(x_, y_, x_ OP y_);                           \
    }

#define DEFINE_ARITH_VECTOR(name, ATTR, T, V, LANES, LOAD, STORE, VOP, ANY_NAN, PICK, OP)  \
    ATTR static void name(void *dst, const void *a, const void *b, size_t n) {            \
        T *d = dst;                                                                       \
        const T *pa = a;                                                                  \
        const T *pb = b;                                                                  \
        size_t i = 0;                                                                     \
        for (; i + 4 * (LANES) <= n; i += 4 * (LANES)) {                                  \
            V r0 = VOP(LOAD(pa + i), LOAD(pb + i));                                       \
            V r1 = VOP(LOAD(pa + i + (LANES)), LOAD(pb + i + (LANES)));                   \
            V r2 = VOP(LOAD(pa + i + 2 * (LANES)), LOAD(pb + i + 2 * (LANES)));           \
            V r3 = VOP(LOAD(pa + i + 3 * (LANES)), LOAD(pb + i + 3 * (LANES)));           \
            if (__builtin_expect(ANY_NAN(r0, r1, r2, r3), 0)) {                           \
                ARITH_BY_ELEMENT(T, PICK, OP, d, pa, pb, i, i + 4 * (LANES))              \
                continue;                                                                 \
            }                                                                             \
            STORE(d + i, r0);                                                             \
            STORE(d + i + (LANES), r1);                                                   \
            STORE(d + i + 2 * (LANES), r2);                                               \
            STORE(d + i + 3 * (LANES), r3);                                               \
        }                                                                                 \
        ARITH_BY_ELEMENT(T, PICK, OP, d, pa, pb, i, n)                                    \
    }

#if defined(CCL_REDUCE_HAVE_X86_SIMD) && defined(__x86_64__)
/* SSE2, which every x86-64 CPU has. An unordered compare of two vectors
 * is true in each lane where either holds a NaN. */
static inline int sse_any_nan_ps(__m128 a, __m128 b, __m128 c, __m128 d) {
    return _mm_movemask_ps(_mm_or_ps(_mm_cmpunord_ps(a, b), _mm_cmpunord_ps(c, d)));
}
static inline int sse_any_nan_pd(__m128d a, __m128d b, __m128d c, __m128d d) {
    return _mm_movemask_pd(_mm_or_pd(_mm_cmpunord_pd(a, b), _mm_cmpunord_pd(c, d)));
}
#define SSE_F32(name, VOP, OP) \
    DEFINE_ARITH_VECTOR(name, , float, __m128, 4, _mm_loadu_ps, _mm_storeu_ps, VOP, sse_any_nan_ps, pick_nan_f32, OP)
#define SSE_F64(name, VOP, OP) \
    DEFINE_ARITH_VECTOR(name, , double, __m128d, 2, _mm_loadu_pd, _mm_storeu_pd, VOP, sse_any_nan_pd, pick_nan_f64, OP)
SSE_F32(sum_f32, _mm_add_ps, +)
SSE_F32(prod_f32, _mm_mul_ps, *)
SSE_F64(sum_f64, _mm_add_pd, +)
SSE_F64(prod_f64, _mm_mul_pd, *)
#else
DEFINE_REDUCE(sum_f32, float, pick_nan_f32(x, y, x + y))
DEFINE_REDUCE(prod_f32, float, pick_nan_f32(x, y, x * y))
DEFINE_REDUCE(sum_f64, double, pick_nan_f64(x, y, x + y))
DEFINE_REDUCE(prod_f64, double, pick_nan_f64(x, y, x * y))
#endif

/* 16-bit floats: widen both inputs, one float32 operation, round once. */
#define DEFINE_HALF_REDUCE(name, TO_FLOAT, FROM_FLOAT, FLOAT_EXPR)          \
    static void name(void *dst, const void *a, const void *b, size_t n) {   \
        uint16_t *d = dst;                                                  \
        const uint16_t *pa = a;                                             \
        const uint16_t *pb = b;                                             \
        for (size_t i = 0; i < n; i++) {                                    \
            float x = TO_FLOAT(pa[i]);                                      \
            float y = TO_FLOAT(pb[i]);                                      \
            d[i] = FROM_FLOAT(FLOAT_EXPR);                                  \
        }                                                                   \
    }

#define DEFINE_HALF_KERNELS(tag, TO_FLOAT, FROM_FLOAT)                              \
    DEFINE_HALF_REDUCE(sum_##tag, TO_FLOAT, FROM_FLOAT, pick_nan_f32(x, y, x + y))  \
    DEFINE_HALF_REDUCE(prod_##tag, TO_FLOAT, FROM_FLOAT, pick_nan_f32(x, y, x * y)) \
    DEFINE_HALF_REDUCE(max_##tag, TO_FLOAT, FROM_FLOAT, max_f32(x, y))              \
    DEFINE_HALF_REDUCE(min_##tag, TO_FLOAT, FROM_FLOAT, min_f32(x, y))

DEFINE_HALF_KERNELS(f16, half_to_float_inline, float_to_half_inline)
DEFINE_HALF_KERNELS(bf16, bf16_to_float_inline, float_to_bf16_inline)

#define KERNEL_ROW(sum, prod, max, min) \
    { [CCL_SUM] = sum, [CCL_PROD] = prod, [CCL_MAX] = max, [CCL_MIN] = min, [CCL_AVG] = sum }
/* Integers have the bitwise ops too; a float row leaves them NULL. */
#define INT_ROW(tag)                                                                                      \
    {                                                                                                     \
        [CCL_SUM] = sum_##tag, [CCL_PROD] = prod_##tag, [CCL_MAX] = max_##tag, [CCL_MIN] = min_##tag,     \
        [CCL_AVG] = sum_##tag, [CCL_BAND] = band_##tag, [CCL_BOR] = bor_##tag, [CCL_BXOR] = bxor_##tag,   \
    }

/* CCL_AVG reduces as a sum; ccl__reduce_div finishes it. */
static const ccl__reduce_fn reduce_table[CCL_NUM_DTYPES][CCL_NUM_OPS] = {
    [CCL_INT8] = INT_ROW(i8),   [CCL_UINT8] = INT_ROW(u8),   [CCL_INT32] = INT_ROW(i32),
    [CCL_UINT32] = INT_ROW(u32), [CCL_INT64] = INT_ROW(i64), [CCL_UINT64] = INT_ROW(u64),
    [CCL_FLOAT16] = KERNEL_ROW(sum_f16, prod_f16, max_f16, min_f16),
    [CCL_BFLOAT16] = KERNEL_ROW(sum_bf16, prod_bf16, max_bf16, min_bf16),
    [CCL_FLOAT32] = KERNEL_ROW(sum_f32, prod_f32, max_f32_kernel, min_f32_kernel),
    [CCL_FLOAT64] = KERNEL_ROW(sum_f64, prod_f64, max_f64_kernel, min_f64_kernel),
};

/* ---- division that finishes CCL_AVG ---- */

typedef void (*div_fn)(void *buf, size_t n, int divisor);

/* C's `/` in the element type (after the usual promotions) truncates
 * toward zero, which is the contract for integers. */
#define DEFINE_DIV(name, T, DIVISOR_T, TO_WORK, FROM_WORK)   \
    static void name(void *buf, size_t n, int divisor) {     \
        T *p = buf;                                          \
        DIVISOR_T d = (DIVISOR_T)divisor;                    \
        for (size_t i = 0; i < n; i++)                       \
            p[i] = FROM_WORK(TO_WORK(p[i]) / d);             \
    }

#define AS_IS(v) (v)
#define CAST_I8(v) ((int8_t)(v))
#define CAST_U8(v) ((uint8_t)(v))

DEFINE_DIV(div_i8, int8_t, int, AS_IS, CAST_I8)
DEFINE_DIV(div_u8, uint8_t, int, AS_IS, CAST_U8)
DEFINE_DIV(div_i32, int32_t, int32_t, AS_IS, AS_IS)
DEFINE_DIV(div_u32, uint32_t, uint32_t, AS_IS, AS_IS)
DEFINE_DIV(div_i64, int64_t, int64_t, AS_IS, AS_IS)
DEFINE_DIV(div_u64, uint64_t, uint64_t, AS_IS, AS_IS)
DEFINE_DIV(div_f32, float, float, AS_IS, AS_IS)
DEFINE_DIV(div_f64, double, double, AS_IS, AS_IS)

#define DEFINE_HALF_DIV(name, TO_FLOAT, FROM_FLOAT)       \
    static void name(void *buf, size_t n, int divisor) {  \
        uint16_t *p = buf;                                \
        float d = (float)divisor;                         \
        for (size_t i = 0; i < n; i++) {                  \
            float x = TO_FLOAT(p[i]);                     \
            p[i] = FROM_FLOAT(pick_nan_f32(x, x, x / d)); \
        }                                                 \
    }

DEFINE_HALF_DIV(div_f16, half_to_float_inline, float_to_half_inline)
DEFINE_HALF_DIV(div_bf16, bf16_to_float_inline, float_to_bf16_inline)

static const div_fn div_table[CCL_NUM_DTYPES] = {
    [CCL_INT8] = div_i8,       [CCL_UINT8] = div_u8,       [CCL_INT32] = div_i32, [CCL_UINT32] = div_u32,
    [CCL_INT64] = div_i64,     [CCL_UINT64] = div_u64,     [CCL_FLOAT16] = div_f16,
    [CCL_BFLOAT16] = div_bf16, [CCL_FLOAT32] = div_f32,    [CCL_FLOAT64] = div_f64,
};

/* ---- float16 and bfloat16 with AVX2 (and F16C) ----
 * The portable kernels' steps (widen, one float32 operation, the same NaN
 * and zero selections, round to nearest even) eight lanes at a time:
 * float16 through the F16C converters, which are exact and quiet NaNs as
 * the portable code does; bfloat16 through shifts, its NaNs quieted on the
 * way out (the bit a quieting on the way in would have set). So every lane
 * is bit-identical to the portable path. The tail goes through the same
 * vector code on a padded copy. */
#ifdef CCL_REDUCE_HAVE_X86_SIMD
#define X86_SIMD_TARGET __attribute__((target("avx2,f16c")))

X86_SIMD_TARGET static inline __m256 simd_is_nan(__m256 v) { return _mm256_cmp_ps(v, v, _CMP_UNORD_Q); }

X86_SIMD_TARGET static inline int simd_none(__m256 mask) { return _mm256_testz_ps(mask, mask); }

X86_SIMD_TARGET static inline __m256 simd_select_nan(__m256 x, __m256 y, __m256 result) {
    __m256 made = _mm256_castsi256_ps(_mm256_set1_epi32((int)QUIET_NAN_F32));
    __m256 r = _mm256_blendv_ps(result, made, simd_is_nan(result));
    r = _mm256_blendv_ps(r, y, simd_is_nan(y));
    return _mm256_blendv_ps(r, x, simd_is_nan(x));
}

/* For arithmetic, where a NaN operand always makes a NaN result: one test
 * of the result lets the common case skip the selections. */
X86_SIMD_TARGET static inline __m256 simd_pick_nan(__m256 x, __m256 y, __m256 result) {
    return simd_none(simd_is_nan(result)) ? result : simd_select_nan(x, y, result);
}

/* maxps/minps are right for ordered, unequal lanes; fix up the rest. Their
 * result is a number even with a NaN operand, so test the operands. */
X86_SIMD_TARGET static inline __m256 simd_max(__m256 x, __m256 y) {
    __m256 r = _mm256_max_ps(x, y);
    r = _mm256_blendv_ps(r, _mm256_and_ps(x, y), _mm256_cmp_ps(x, y, _CMP_EQ_OQ));
    __m256 unordered = _mm256_cmp_ps(x, y, _CMP_UNORD_Q);
    return simd_none(unordered) ? r : simd_select_nan(x, y, r);
}

X86_SIMD_TARGET static inline __m256 simd_min(__m256 x, __m256 y) {
    __m256 r = _mm256_min_ps(x, y);
    r = _mm256_blendv_ps(r, _mm256_or_ps(x, y), _mm256_cmp_ps(x, y, _CMP_EQ_OQ));
    __m256 unordered = _mm256_cmp_ps(x, y, _CMP_UNORD_Q);
    return simd_none(unordered) ? r : simd_select_nan(x, y, r);
}

X86_SIMD_TARGET static inline __m256 half_load(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

X86_SIMD_TARGET static inline void half_store(uint16_t *p, __m256 v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

X86_SIMD_TARGET static inline __m256 bf16_load(const uint16_t *p) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

X86_SIMD_TARGET static inline void bf16_store(uint16_t *p, __m256 v) {
    __m256i x = _mm256_castps_si256(v);
    __m256i high = _mm256_srli_epi32(x, 16);
    __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(high, _mm256_set1_epi32(1)));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    __m256 is_nan = simd_is_nan(v);
    __m256i nan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    __m256i r = simd_none(is_nan) ? rounded : _mm256_blendv_epi8(rounded, nan, _mm256_castps_si256(is_nan));
    /* Every lane fits 16 bits, so the saturating pack is a plain narrowing;
     * it works per 128-bit half, and the permute joins the halves. */
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}

#define DEFINE_SIMD_REDUCE(name, LOAD, STORE, VEXPR)                                      \
    X86_SIMD_TARGET static void name(void *dst, const void *a, const void *b, size_t n) { \
        uint16_t *d = dst;                                                                \
        const uint16_t *pa = a;                                                           \
        const uint16_t *pb = b;                                                           \
        size_t i = 0;                                                                     \
        for (; i + 8 <= n; i += 8) {                                                      \
            __m256 x = LOAD(pa + i);                                                      \
            __m256 y = LOAD(pb + i);                                                      \
            STORE(d + i, (VEXPR));                                                        \
        }                                                                                 \
        if (i < n) {                                                                      \
            uint16_t ta[8] = {0}, tb[8] = {0}, td[8];                                     \
            memcpy(ta, pa + i, (n - i) * sizeof *pa);                                     \
            memcpy(tb, pb + i, (n - i) * sizeof *pb);                                     \
            __m256 x = LOAD(ta);                                                          \
            __m256 y = LOAD(tb);                                                          \
            STORE(td, (VEXPR));                                                           \
            memcpy(d + i, td, (n - i) * sizeof *d);                                       \
        }                                                                                 \
    }

#define DEFINE_SIMD_KERNELS(tag, LOAD, STORE)                                                   \
    DEFINE_SIMD_REDUCE(sum_##tag##_simd, LOAD, STORE, simd_pick_nan(x, y, _mm256_add_ps(x, y)))  \
    DEFINE_SIMD_REDUCE(prod_##tag##_simd, LOAD, STORE, simd_pick_nan(x, y, _mm256_mul_ps(x, y))) \
    DEFINE_SIMD_REDUCE(max_##tag##_simd, LOAD, STORE, simd_max(x, y))                            \
    DEFINE_SIMD_REDUCE(min_##tag##_simd, LOAD, STORE, simd_min(x, y))                            \
                                                                                                \
    X86_SIMD_TARGET static void div_##tag##_simd(void *buf, size_t n, int divisor) {            \
        uint16_t *p = buf;                                                                      \
        __m256 d = _mm256_set1_ps((float)divisor);                                              \
        size_t i = 0;                                                                           \
        for (; i + 8 <= n; i += 8) {                                                            \
            __m256 x = LOAD(p + i);                                                             \
            STORE(p + i, simd_pick_nan(x, x, _mm256_div_ps(x, d)));                             \
        }                                                                                       \
        if (i < n) {                                                                            \
            uint16_t t[8] = {0};                                                                \
            memcpy(t, p + i, (n - i) * sizeof *p);                                              \
            __m256 x = LOAD(t);                                                                 \
            STORE(t, simd_pick_nan(x, x, _mm256_div_ps(x, d)));                                 \
            memcpy(p + i, t, (n - i) * sizeof *p);                                              \
        }                                                                                       \
    }

DEFINE_SIMD_KERNELS(f16, half_load, half_store)
DEFINE_SIMD_KERNELS(bf16, bf16_load, bf16_store)

/* float32 and float64 SUM and PROD, eight and four lanes a vector (the
 * SSE2 kernels' twins, the same bits). */
X86_SIMD_TARGET static inline int avx_any_nan_ps(__m256 a, __m256 b, __m256 c, __m256 d) {
    return !simd_none(_mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(c, d, _CMP_UNORD_Q)));
}
X86_SIMD_TARGET static inline int avx_any_nan_pd(__m256d a, __m256d b, __m256d c, __m256d d) {
    __m256d u = _mm256_or_pd(_mm256_cmp_pd(a, b, _CMP_UNORD_Q), _mm256_cmp_pd(c, d, _CMP_UNORD_Q));
    return !simd_none(_mm256_castpd_ps(u)); /* a lane's mask sets both halves' sign bits */
}
#define AVX_F32(name, VOP, OP)                                                                                      \
    DEFINE_ARITH_VECTOR(name, X86_SIMD_TARGET, float, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, VOP,          \
                        avx_any_nan_ps, pick_nan_f32, OP)
#define AVX_F64(name, VOP, OP)                                                                                      \
    DEFINE_ARITH_VECTOR(name, X86_SIMD_TARGET, double, __m256d, 4, _mm256_loadu_pd, _mm256_storeu_pd, VOP,        \
                        avx_any_nan_pd, pick_nan_f64, OP)
AVX_F32(sum_f32_simd, _mm256_add_ps, +)
AVX_F32(prod_f32_simd, _mm256_mul_ps, *)
AVX_F64(sum_f64_simd, _mm256_add_pd, +)
AVX_F64(prod_f64_simd, _mm256_mul_pd, *)

static const ccl__reduce_fn simd_rows[CCL_NUM_DTYPES][CCL_NUM_OPS] = {
    [CCL_FLOAT16] = KERNEL_ROW(sum_f16_simd, prod_f16_simd, max_f16_simd, min_f16_simd),
    [CCL_BFLOAT16] = KERNEL_ROW(sum_bf16_simd, prod_bf16_simd, max_bf16_simd, min_bf16_simd),
    [CCL_FLOAT32] = KERNEL_ROW(sum_f32_simd, prod_f32_simd, max_f32_kernel, min_f32_kernel),
    [CCL_FLOAT64] = KERNEL_ROW(sum_f64_simd, prod_f64_simd, max_f64_kernel, min_f64_kernel),
};
static const div_fn simd_div[CCL_NUM_DTYPES] = {[CCL_FLOAT16] = div_f16_simd, [CCL_BFLOAT16] = div_bf16_simd};

/* Asked of the CPU itself (cpuid), not through __builtin_cpu_supports:
 * clang 14 does not know the "f16c" feature name there. AVX also needs the
 * operating system to save the YMM registers (OSXSAVE, then XCR0 bits 1
 * and 2), or its instructions fault. */
static int probe_avx2_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
    if ((c & (osxsave | avx | f16c)) != (osxsave | avx | f16c)) return 0;
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0_lo & 6u) != 6u) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b & (1u << 5)) != 0; /* AVX2 */
}

static int cpu_has_avx2_f16c(void) {
    /* Probed once; racing first calls compute the same answer. */
    static _Atomic int known; /* 0 unknown, 1 no, 2 yes */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (!k) {
        k = probe_avx2_f16c() ? 2 : 1;
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k == 2;
}

static int use_simd(ccl_dtype_t dtype) { return simd_rows[dtype][CCL_SUM] && cpu_has_avx2_f16c(); }
#endif

/* fast: the AVX2 kernels where the CPU has them, else the baseline. */
static ccl__reduce_fn reduce_get(ccl_dtype_t dtype, ccl_op_t op, int fast) {
    if ((unsigned)dtype >= CCL_NUM_DTYPES || (unsigned)op >= CCL_NUM_OPS || !reduce_table[dtype][op])
        return NULL;
#ifdef CCL_REDUCE_HAVE_X86_SIMD
    if (fast && use_simd(dtype))
        return simd_rows[dtype][op];
#endif
    (void)fast;
    return reduce_table[dtype][op];
}

static void reduce_div(void *buf, size_t n, ccl_dtype_t dtype, int divisor, int fast) {
    /* Zero or negative rank counts have no meaning here; refusing them
     * avoids a trap on integer types. */
    if ((unsigned)dtype >= CCL_NUM_DTYPES || divisor < 1)
        return;
#ifdef CCL_REDUCE_HAVE_X86_SIMD
    if (fast && simd_div[dtype] && cpu_has_avx2_f16c()) {
        simd_div[dtype](buf, n, divisor);
        return;
    }
#endif
    (void)fast;
    div_table[dtype](buf, n, divisor);
}

ccl__reduce_fn ccl__reduce_get(ccl_dtype_t dtype, ccl_op_t op) { return reduce_get(dtype, op, 1); }

void ccl__reduce_div(void *buf, size_t n, ccl_dtype_t dtype, int divisor) { reduce_div(buf, n, dtype, divisor, 1); }

ccl__reduce_fn ccl__reduce_get_baseline(ccl_dtype_t dtype, ccl_op_t op) { return reduce_get(dtype, op, 0); }

void ccl__reduce_div_baseline(void *buf, size_t n, ccl_dtype_t dtype, int divisor) {
    reduce_div(buf, n, dtype, divisor, 0);
}
