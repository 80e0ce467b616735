/*
 * The reduction table (lib/reduce) against references written here from the
 * definitions: 16-bit floats through double arithmetic and a plain
 * round-to-nearest-even encoder, integers through 128-bit arithmetic; the
 * library's own code never computes an expected value. The suite runs twice,
 * on the kernels the library picks for this CPU (AVX2 and F16C where it has
 * them) and on the baseline ones, so the same exact references pin the fast
 * path and the portable path to the same bits.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/reduce.h"

/* The kernels under test: the library's (AVX2 where the CPU has it), then,
 * in a second run of the suite, the baseline every CPU of the architecture
 * runs. One set of references pins both to the same bits. */
static ccl__reduce_fn (*get_kernel)(ccl_dtype_t, ccl_op_t) = ccl__reduce_get;
static void (*div_kernel)(void *, size_t, ccl_dtype_t, int) = ccl__reduce_div;

#define BIG_N 1031
#define GUARD_BYTES 64
#define GUARD_BYTE 0xA5

/* ck_assert records a mark for every passing check (a write to the parent);
 * loops over millions of elements report only failures. */
#define EXPECT(cond, ...)                \
    do {                                 \
        if (!(cond))                     \
            ck_abort_msg(__VA_ARGS__);   \
    } while (0)

static const struct {
    size_t size;
    bool is_float;
    bool is_signed;
    const char *name;
} types[CCL_NUM_DTYPES] = {
    [CCL_INT8] = {1, false, true, "int8"},       [CCL_UINT8] = {1, false, false, "uint8"},
    [CCL_INT32] = {4, false, true, "int32"},     [CCL_UINT32] = {4, false, false, "uint32"},
    [CCL_INT64] = {8, false, true, "int64"},     [CCL_UINT64] = {8, false, false, "uint64"},
    [CCL_FLOAT16] = {2, true, true, "float16"},  [CCL_BFLOAT16] = {2, true, true, "bfloat16"},
    [CCL_FLOAT32] = {4, true, true, "float32"},  [CCL_FLOAT64] = {8, true, true, "float64"},
};

static const char *const op_names[CCL_NUM_OPS] = {"sum", "prod", "max", "min", "avg", "band", "bor", "bxor"};

/* The float types have the ops before the bitwise ones; integers all. */
#define FLOAT_OPS CCL_BAND
static bool op_applies(ccl_dtype_t t, int op) { return !types[t].is_float || op < FLOAT_OPS; }

static uint64_t next_random(uint64_t *state) { /* splitmix64 */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- reference 16-bit float formats ---- */

struct small_format {
    int mantissa_bits;
    int exponent_bits;
};
static const struct small_format HALF = {10, 5};
static const struct small_format BF16 = {7, 8};

static double ref_decode(uint16_t h, struct small_format f) {
    int bias = (1 << (f.exponent_bits - 1)) - 1;
    unsigned all_ones = (1u << f.exponent_bits) - 1;
    unsigned exponent = (h >> f.mantissa_bits) & all_ones;
    unsigned mantissa = h & ((1u << f.mantissa_bits) - 1);
    double sign = (h & 0x8000) ? -1.0 : 1.0;
    if (exponent == all_ones)
        return mantissa ? NAN : sign * INFINITY;
    if (exponent == 0)
        return sign * ldexp(mantissa, 1 - bias - f.mantissa_bits);
    return sign * ldexp(mantissa + (1u << f.mantissa_bits), (int)exponent - bias - f.mantissa_bits);
}

/* Scale to an integer count of quanta, round that to nearest even by hand. */
static uint16_t ref_encode(double x, struct small_format f) {
    int bias = (1 << (f.exponent_bits - 1)) - 1;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    uint16_t inf = (uint16_t)(((1u << f.exponent_bits) - 1) << f.mantissa_bits);
    if (isnan(x))
        return inf | (uint16_t)(1u << (f.mantissa_bits - 1));
    double magnitude = fabs(x);
    if (isinf(magnitude))
        return sign | inf;
    if (magnitude == 0)
        return sign;
    int e;
    frexp(magnitude, &e);
    e -= 1; /* magnitude in [2^e, 2^(e+1)) */
    if (e < 1 - bias)
        e = 1 - bias;
    double quanta = magnitude / ldexp(1.0, e - f.mantissa_bits);
    double q = floor(quanta);
    double fraction = quanta - q;
    if (fraction > 0.5 || (fraction == 0.5 && fmod(q, 2.0) == 1.0))
        q += 1;
    double one = ldexp(1.0, f.mantissa_bits);
    if (q >= 2 * one) { /* rounded up into the next binade */
        q /= 2;
        e += 1;
    }
    if (e > bias)
        return sign | inf;
    if (q < one) /* subnormal */
        return sign | (uint16_t)q;
    return sign | (uint16_t)(((unsigned)(e + bias) << f.mantissa_bits) | (unsigned)(q - one));
}

/* ---- elements of any dtype ---- */

/* An element's encoding, zero-extended. Through memcpy: the buffers are
 * also read as other types. */
#define LOAD_AS(T)                                         \
    do {                                                   \
        T v;                                               \
        memcpy(&v, (const char *)p + i * sizeof v, sizeof v); \
        return v;                                          \
    } while (0)
#define STORE_AS(T)                                        \
    do {                                                   \
        T v = (T)raw;                                      \
        memcpy((char *)p + i * sizeof v, &v, sizeof v);    \
        return;                                            \
    } while (0)

static uint64_t load_raw(ccl_dtype_t t, const void *p, size_t i) {
    switch (types[t].size) {
    case 1:
        LOAD_AS(uint8_t);
    case 2:
        LOAD_AS(uint16_t);
    case 4:
        LOAD_AS(uint32_t);
    default:
        LOAD_AS(uint64_t);
    }
}

static void store_raw(ccl_dtype_t t, void *p, size_t i, uint64_t raw) {
    switch (types[t].size) {
    case 1:
        STORE_AS(uint8_t);
    case 2:
        STORE_AS(uint16_t);
    case 4:
        STORE_AS(uint32_t);
    default:
        STORE_AS(uint64_t);
    }
}

static __int128 load_int(ccl_dtype_t t, const void *p, size_t i) {
    uint64_t raw = load_raw(t, p, i);
    int bits = (int)types[t].size * 8;
    if (types[t].is_signed && bits < 64 && (raw >> (bits - 1)) & 1)
        return (__int128)raw - ((__int128)1 << bits);
    if (types[t].is_signed && bits == 64)
        return (__int128)(int64_t)raw;
    return (__int128)raw;
}

/* Keeps v modulo 2^bits: the definition of integer wrap-around. */
static void store_int(ccl_dtype_t t, void *p, size_t i, unsigned __int128 v) { store_raw(t, p, i, (uint64_t)v); }

static double load_float(ccl_dtype_t t, const void *p, size_t i) {
    uint64_t raw = load_raw(t, p, i);
    switch (t) {
    case CCL_FLOAT16:
        return ref_decode((uint16_t)raw, HALF);
    case CCL_BFLOAT16:
        return ref_decode((uint16_t)raw, BF16);
    case CCL_FLOAT32: {
        float f;
        memcpy(&f, (const char *)p + i * 4, 4);
        return f;
    }
    default: {
        double d;
        memcpy(&d, (const char *)p + i * 8, 8);
        return d;
    }
    }
}

static void store_float(ccl_dtype_t t, void *p, size_t i, double v) {
    if (t == CCL_FLOAT16) {
        store_raw(t, p, i, ref_encode(v, HALF));
    } else if (t == CCL_BFLOAT16) {
        store_raw(t, p, i, ref_encode(v, BF16));
    } else if (t == CCL_FLOAT32) {
        float f = (float)v; /* innocuous double rounding: 53 >= 2 * 24 + 2 */
        memcpy((char *)p + i * 4, &f, 4);
    } else {
        memcpy((char *)p + i * 8, &v, 8);
    }
}

static const uint64_t quiet_bit[CCL_NUM_DTYPES] = {
    [CCL_FLOAT16] = 1u << 9, [CCL_BFLOAT16] = 1u << 6, [CCL_FLOAT32] = 1u << 22, [CCL_FLOAT64] = 1ull << 51};

/* ---- reference reductions ---- */

static double ref_max(double x, double y) {
    if (isnan(x) || isnan(y))
        return NAN;
    if (x == 0 && y == 0)
        return signbit(x) && signbit(y) ? -0.0 : 0.0;
    return x > y ? x : y;
}

static double ref_min(double x, double y) {
    if (isnan(x) || isnan(y))
        return NAN;
    if (x == 0 && y == 0)
        return signbit(x) || signbit(y) ? -0.0 : 0.0;
    return x < y ? x : y;
}

/* The library's NaN rule, for every float dtype and op: the first NaN
 * operand, quiet, payload kept; a NaN made from numbers is the positive
 * quiet NaN (what ref_encode and (float)NAN give). */
static void store_float_result(ccl_dtype_t t, void *out, size_t i, const void *a, const void *b, double r) {
    if (isnan(load_float(t, a, i)))
        store_raw(t, out, i, load_raw(t, a, i) | quiet_bit[t]);
    else if (isnan(load_float(t, b, i)))
        store_raw(t, out, i, load_raw(t, b, i) | quiet_bit[t]);
    else
        store_float(t, out, i, r);
}

/* out[i] = a[i] op b[i]. Doubles hold 16-bit sums and products exactly and
 * float32 ones with innocuous double rounding; float64 uses the C ops. */
static void ref_reduce(ccl_dtype_t t, ccl_op_t op, const void *a, const void *b, void *out, size_t i) {
    if (!types[t].is_float) {
        __int128 x = load_int(t, a, i), y = load_int(t, b, i);
        unsigned __int128 ux = (unsigned __int128)x, uy = (unsigned __int128)y;
        unsigned __int128 r = op == CCL_PROD   ? ux * uy
                              : op == CCL_MAX  ? (unsigned __int128)(x > y ? x : y)
                              : op == CCL_MIN  ? (unsigned __int128)(x < y ? x : y)
                              : op == CCL_BAND ? ux & uy
                              : op == CCL_BOR  ? ux | uy
                              : op == CCL_BXOR ? ux ^ uy
                                               : ux + uy;
        store_int(t, out, i, r);
        return;
    }
    double x = load_float(t, a, i), y = load_float(t, b, i);
    double r = op == CCL_PROD ? x * y : op == CCL_MAX ? ref_max(x, y) : op == CCL_MIN ? ref_min(x, y) : x + y;
    store_float_result(t, out, i, a, b, r);
}

static void ref_div(ccl_dtype_t t, void *buf, size_t i, int divisor) {
    if (!types[t].is_float) {
        __int128 x = load_int(t, buf, i);
        __int128 q = (x < 0 ? -x : x) / divisor; /* magnitudes, then the sign: toward zero */
        store_int(t, buf, i, (unsigned __int128)(x < 0 ? -q : q));
        return;
    }
    store_float_result(t, buf, i, buf, buf, load_float(t, buf, i) / divisor);
}

static void check_element(ccl_dtype_t t, ccl_op_t op, const void *got, const void *want, size_t i) {
    EXPECT(load_raw(t, got, i) == load_raw(t, want, i), "%s %s [%zu]: got 0x%llx want 0x%llx", op_names[op],
           types[t].name, i, (unsigned long long)load_raw(t, got, i), (unsigned long long)load_raw(t, want, i));
}

/* Integers: any bits. Floats: a quarter raw bit patterns (NaN, inf,
 * subnormals), the rest moderate values whose sums and products round. Some
 * pairs are made equal or signed zeros so MAX/MIN meet ties. */
static void fill_pair(ccl_dtype_t t, void *a, void *b, size_t n, uint64_t *rng) {
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            void *p = k ? b : a;
            uint64_t r = next_random(rng);
            if (!types[t].is_float || (r & 3) == 0) {
                store_raw(t, p, i, r >> 2);
            } else {
                double m = 1.0 + (double)(next_random(rng) >> 11) * 0x1p-53;
                store_float(t, p, i, ldexp((r >> 63) ? -m : m, (int)((r >> 8) % 41) - 20));
            }
        }
        if (i % 13 == 5)
            memcpy((char *)b + i * types[t].size, (char *)a + i * types[t].size, types[t].size);
        if (i % 17 == 3 && types[t].is_float) {
            store_float(t, a, i, (i & 8) ? -0.0 : 0.0);
            store_float(t, b, i, (i & 32) ? -0.0 : 0.0);
        }
    }
}

/* Runs the table on n elements at an odd offset into guarded buffers and
 * compares with the reference; checks nothing past n was written. */
static void check_reduce_vs_reference(ccl_dtype_t t, ccl_op_t op, size_t n, uint64_t seed) {
    size_t size = types[t].size, bytes = (n + 1) * size;
    char *a = malloc(bytes), *b = malloc(bytes), *want = malloc(bytes), *dst = malloc(bytes + GUARD_BYTES);
    ck_assert(a && b && want && dst);
    memset(dst, GUARD_BYTE, bytes + GUARD_BYTES);
    uint64_t rng = seed;
    fill_pair(t, a + size, b + size, n, &rng);
    for (size_t i = 0; i < n; i++)
        ref_reduce(t, op, a + size, b + size, want + size, i);
    get_kernel(t, op)(dst + size, a + size, b + size, n);
    for (size_t i = 0; i < n; i++)
        check_element(t, op, dst + size, want + size, i);
    for (size_t k = 0; k < size; k++)
        ck_assert_msg((unsigned char)dst[k] == GUARD_BYTE, "%s: wrote before dst", types[t].name);
    for (size_t k = bytes; k < bytes + GUARD_BYTES; k++)
        ck_assert_msg((unsigned char)dst[k] == GUARD_BYTE, "%s n=%zu: wrote past dst[n]", types[t].name, n);
    free(a), free(b), free(want), free(dst);
}

/* ---- the table ---- */

START_TEST(test_table_complete) {
    for (int t = 0; t < CCL_NUM_DTYPES; t++) {
        for (int op = 0; op < CCL_NUM_OPS; op++) {
            if (op_applies(t, op)) ck_assert_ptr_nonnull(get_kernel(t, op));
            else ck_assert_ptr_null(get_kernel(t, op)); /* no bitwise ops on floats */
        }
        ck_assert_ptr_eq(get_kernel(t, CCL_AVG), get_kernel(t, CCL_SUM));
    }
    ck_assert_ptr_null(get_kernel(CCL_NUM_DTYPES, CCL_SUM));
    ck_assert_ptr_null(get_kernel(CCL_FLOAT32, CCL_NUM_OPS));
    ck_assert_ptr_null(get_kernel((ccl_dtype_t)-1, CCL_SUM));
}
END_TEST

/* _i walks every (dtype, op). */
START_TEST(test_random_matches_reference) {
    ccl_dtype_t t = (ccl_dtype_t)(_i / CCL_NUM_OPS);
    ccl_op_t op = (ccl_op_t)(_i % CCL_NUM_OPS);
    if (!op_applies(t, op)) return;
    check_reduce_vs_reference(t, op, BIG_N, 0x5eed0000u + (uint64_t)_i);
    check_reduce_vs_reference(t, op, 1u << 16, 0x0ddba11u + (uint64_t)_i);
}
END_TEST

/* n = 0 writes nothing; short and odd n exercise the tails of vector loops. */
START_TEST(test_tails_and_empty) {
    static const size_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 1031};
    ccl_dtype_t t = (ccl_dtype_t)_i;
    for (int op = 0; op < CCL_NUM_OPS; op++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && op_applies(t, op); k++)
            check_reduce_vs_reference(t, (ccl_op_t)op, sizes[k], 0x7a11u * (k + 1) + (uint64_t)op);
}
END_TEST

/* dst == a, dst == b and dst == a == b give what separate buffers give. */
START_TEST(test_aliasing) {
    ccl_dtype_t t = (ccl_dtype_t)(_i / CCL_NUM_OPS);
    ccl_op_t op = (ccl_op_t)(_i % CCL_NUM_OPS);
    if (!op_applies(t, op)) return;
    size_t size = types[t].size, n = BIG_N, bytes = (n + 1) * size;
    char *a = malloc(bytes), *b = malloc(bytes), *want = malloc(bytes), *sep = malloc(bytes), *io = malloc(bytes);
    ck_assert(a && b && want && sep && io);
    uint64_t rng = 0xa11a5u + (uint64_t)_i;
    fill_pair(t, a + size, b + size, n, &rng); /* + size: not vector-aligned */
    ccl__reduce_fn fn = get_kernel(t, op);
    fn(sep + size, a + size, b + size, n);
    for (size_t i = 0; i < n; i++) {
        ref_reduce(t, op, a + size, b + size, want + size, i);
        check_element(t, op, sep + size, want + size, i);
    }
    memcpy(io, a, bytes);
    fn(io + size, io + size, b + size, n);
    ck_assert_msg(memcmp(io + size, sep + size, n * size) == 0, "%s %s: dst == a differs", op_names[op], types[t].name);
    memcpy(io, b, bytes);
    fn(io + size, a + size, io + size, n);
    ck_assert_msg(memcmp(io + size, sep + size, n * size) == 0, "%s %s: dst == b differs", op_names[op], types[t].name);
    fn(sep + size, a + size, a + size, n);
    memcpy(io, a, bytes);
    fn(io + size, io + size, io + size, n);
    ck_assert_msg(memcmp(io + size, sep + size, n * size) == 0, "%s %s: dst == a == b differs", op_names[op],
                  types[t].name);
    free(a), free(b), free(want), free(sep), free(io);
}
END_TEST

/* ---- fixed cases: raw encodings in, raw encoding out ---- */

struct raw_case {
    ccl_dtype_t t;
    ccl_op_t op;
    uint64_t a, b, want;
};

/* Each case fills 19 elements, so it runs in vector lanes and in the tail. */
static void run_raw_cases(const struct raw_case *cases, size_t count) {
    enum { N = 19 };
    for (size_t c = 0; c < count; c++) {
        const struct raw_case *k = &cases[c];
        uint64_t a[N], b[N], dst[N]; /* big enough for any element size */
        for (size_t i = 0; i < N; i++) {
            store_raw(k->t, a, i, k->a);
            store_raw(k->t, b, i, k->b);
        }
        get_kernel(k->t, k->op)(dst, a, b, N);
        uint64_t mask = types[k->t].size == 8 ? ~0ull : (1ull << (8 * types[k->t].size)) - 1;
        for (size_t i = 0; i < N; i++)
            ck_assert_msg(load_raw(k->t, dst, i) == (k->want & mask),
                          "case %zu: %s %s(0x%llx, 0x%llx) = 0x%llx, want 0x%llx", c, types[k->t].name,
                          op_names[k->op], (unsigned long long)k->a, (unsigned long long)k->b,
                          (unsigned long long)load_raw(k->t, dst, i), (unsigned long long)(k->want & mask));
    }
}

#define U(v) ((uint64_t)(v))

START_TEST(test_integer_wraparound) {
    static const struct raw_case cases[] = {
        {CCL_INT8, CCL_SUM, U(127), U(1), U(-128)},
        {CCL_INT8, CCL_SUM, U(-128), U(-1), U(127)},
        {CCL_INT8, CCL_PROD, U(-128), U(-1), U(-128)},
        {CCL_INT8, CCL_PROD, U(100), U(3), U(44)},
        {CCL_INT8, CCL_MAX, U(-128), U(127), U(127)},
        {CCL_INT8, CCL_MIN, U(-128), U(127), U(-128)},
        {CCL_UINT8, CCL_SUM, U(255), U(1), U(0)},
        {CCL_UINT8, CCL_PROD, U(255), U(255), U(1)},
        {CCL_UINT8, CCL_MAX, U(200), U(100), U(200)}, /* unsigned order, not signed */
        {CCL_UINT8, CCL_MIN, U(200), U(100), U(100)},
        {CCL_INT32, CCL_SUM, U(INT32_MAX), U(1), U(INT32_MIN)},
        {CCL_INT32, CCL_SUM, U(INT32_MIN), U(INT32_MIN), U(0)},
        {CCL_INT32, CCL_PROD, U(INT32_MIN), U(-1), U(INT32_MIN)},
        {CCL_INT32, CCL_PROD, U(65536), U(65536), U(0)},
        {CCL_UINT32, CCL_SUM, U(UINT32_MAX), U(2), U(1)},
        {CCL_UINT32, CCL_PROD, U(UINT32_MAX), U(UINT32_MAX), U(1)},
        {CCL_UINT32, CCL_MAX, U(0x80000000u), U(1), U(0x80000000u)},
        {CCL_INT64, CCL_SUM, U(INT64_MAX), U(1), U(INT64_MIN)},
        {CCL_INT64, CCL_PROD, U(INT64_MIN), U(-1), U(INT64_MIN)},
        {CCL_INT64, CCL_PROD, U(1) << 32, U(1) << 32, U(0)},
        {CCL_INT64, CCL_MIN, U(INT64_MIN), U(INT64_MAX), U(INT64_MIN)},
        {CCL_INT64, CCL_MAX, U(-1), U(-2), U(-1)},
        {CCL_UINT64, CCL_SUM, UINT64_MAX, UINT64_MAX, UINT64_MAX - 1},
        {CCL_UINT64, CCL_PROD, (U(1) << 32) + 1, (U(1) << 32) + 1, (U(1) << 33) + 1},
        {CCL_UINT64, CCL_MAX, UINT64_MAX, U(0), UINT64_MAX},
        {CCL_UINT64, CCL_MIN, UINT64_MAX, U(1), U(1)},
    };
    run_raw_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(test_overflow_to_infinity) {
    static const struct raw_case cases[] = {
        {CCL_FLOAT16, CCL_SUM, 0x7bff, 0x7bff, 0x7c00},  /* 65504 + 65504 */
        {CCL_FLOAT16, CCL_SUM, 0x7bff, 0x4c00, 0x7c00},  /* 65504 + 16 = 65520: the tie goes to inf */
        {CCL_FLOAT16, CCL_SUM, 0x7bff, 0x4a00, 0x7bff},  /* 65504 + 12 stays finite */
        {CCL_FLOAT16, CCL_PROD, 0x7bff, 0x4000, 0x7c00}, /* 65504 * 2 */
        {CCL_FLOAT16, CCL_PROD, 0xfbff, 0x4000, 0xfc00},
        {CCL_FLOAT16, CCL_SUM, 0xfbff, 0xfbff, 0xfc00},
        {CCL_BFLOAT16, CCL_SUM, 0x7f7f, 0x7f7f, 0x7f80},
        {CCL_BFLOAT16, CCL_PROD, 0x7f7f, 0x4000, 0x7f80},
        {CCL_BFLOAT16, CCL_PROD, 0xff7f, 0x4000, 0xff80},
        {CCL_FLOAT32, CCL_SUM, 0x7f7fffff, 0x7f7fffff, 0x7f800000},
        {CCL_FLOAT32, CCL_PROD, 0xff7fffff, 0x40000000, 0xff800000},
        {CCL_FLOAT64, CCL_SUM, 0x7fefffffffffffff, 0x7fefffffffffffff, 0x7ff0000000000000},
        {CCL_FLOAT64, CCL_PROD, 0x7fefffffffffffff, 0xc000000000000000, 0xfff0000000000000},
    };
    run_raw_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

START_TEST(test_subnormal_results) {
    static const struct raw_case cases[] = {
        {CCL_FLOAT16, CCL_SUM, 0x0001, 0x0001, 0x0002},
        {CCL_FLOAT16, CCL_SUM, 0x03ff, 0x0001, 0x0400},  /* largest subnormal + 1 ulp = smallest normal */
        {CCL_FLOAT16, CCL_SUM, 0x0400, 0x8001, 0x03ff},
        {CCL_FLOAT16, CCL_PROD, 0x0001, 0x3800, 0x0000}, /* 2^-25: tie to even 0 */
        {CCL_FLOAT16, CCL_PROD, 0x0003, 0x3800, 0x0002}, /* 1.5 ulp: tie to even 2 */
        {CCL_FLOAT16, CCL_PROD, 0x0005, 0x3800, 0x0002}, /* 2.5 ulp */
        {CCL_FLOAT16, CCL_PROD, 0x0007, 0x3800, 0x0004}, /* 3.5 ulp */
        {CCL_FLOAT16, CCL_PROD, 0x8001, 0x3800, 0x8000}, /* underflow keeps the sign */
        {CCL_FLOAT16, CCL_PROD, 0x0200, 0x4000, 0x0400},
        {CCL_FLOAT16, CCL_MAX, 0x0001, 0x8001, 0x0001},
        {CCL_BFLOAT16, CCL_SUM, 0x0001, 0x0001, 0x0002},
        {CCL_BFLOAT16, CCL_SUM, 0x007f, 0x0001, 0x0080},
        {CCL_BFLOAT16, CCL_PROD, 0x0001, 0x3f00, 0x0000},
        {CCL_BFLOAT16, CCL_PROD, 0x0003, 0x3f00, 0x0002},
        {CCL_BFLOAT16, CCL_PROD, 0x0080, 0x3f00, 0x0040},
        {CCL_FLOAT32, CCL_SUM, 0x00000001, 0x00000001, 0x00000002},
        {CCL_FLOAT32, CCL_PROD, 0x00000003, 0x3f000000, 0x00000002},
        {CCL_FLOAT64, CCL_SUM, 0x1, 0x1, 0x2},
        {CCL_FLOAT64, CCL_PROD, 0x3, 0x3fe0000000000000, 0x2},
    };
    run_raw_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* The values of one float dtype for the NaN and zero tests. */
static const struct float_specials {
    ccl_dtype_t t;
    uint64_t pos_zero, neg_zero, one, minus_one, inf, minus_inf, tiny, nans[4];
} specials[] = {
    {CCL_FLOAT16, 0x0000, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x0001, {0x7e00, 0xfe00, 0x7c01, 0x7e55}},
    {CCL_BFLOAT16, 0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x0001, {0x7fc0, 0xffc0, 0x7f81, 0x7fd5}},
    {CCL_FLOAT32, 0, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000, 1,
     {0x7fc00000, 0xffc00000, 0x7f800001, 0x7fc12345}},
    {CCL_FLOAT64, 0, U(1) << 63, 0x3ff0000000000000, 0xbff0000000000000, 0x7ff0000000000000, 0xfff0000000000000, 1,
     {0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001, 0x7ff8123456789abc}},
};

/* Every op with a NaN on either side (or both) gives the first NaN
 * operand, quieted. */
START_TEST(test_nan_propagation) {
    const struct float_specials *s = &specials[_i];
    const uint64_t partners[] = {s->pos_zero, s->neg_zero, s->one, s->minus_one, s->inf, s->minus_inf, s->tiny};
    enum { N = 19 };
    uint64_t a[N], b[N], dst[N], want[N];
    for (int op = 0; op < FLOAT_OPS; op++) {
        for (size_t k = 0; k < 4; k++) {
            for (size_t p = 0; p < sizeof partners / sizeof partners[0] + 4; p++) {
                uint64_t partner = p < 7 ? partners[p] : s->nans[p - 7];
                for (size_t i = 0; i < N; i++) { /* NaN first in even lanes, second in odd */
                    store_raw(s->t, a, i, i % 2 ? partner : s->nans[k]);
                    store_raw(s->t, b, i, i % 2 ? s->nans[k] : partner);
                }
                get_kernel(s->t, (ccl_op_t)op)(dst, a, b, N);
                for (size_t i = 0; i < N; i++) {
                    ref_reduce(s->t, (ccl_op_t)op, a, b, want, i);
                    ck_assert(isnan(load_float(s->t, want, i)));
                    check_element(s->t, (ccl_op_t)op, dst, want, i);
                }
            }
        }
    }
    /* Made from numbers: inf - inf and 0 * inf. */
    for (size_t i = 0; i < N; i++) {
        store_raw(s->t, a, i, i % 2 ? s->inf : s->minus_inf);
        store_raw(s->t, b, i, i % 2 ? s->minus_inf : s->inf);
    }
    get_kernel(s->t, CCL_SUM)(dst, a, b, N);
    for (size_t i = 0; i < N; i++)
        ck_assert_uint_eq(load_raw(s->t, dst, i), s->nans[0]);
    for (size_t i = 0; i < N; i++)
        store_raw(s->t, b, i, i % 2 ? s->pos_zero : s->neg_zero);
    get_kernel(s->t, CCL_PROD)(dst, a, b, N);
    for (size_t i = 0; i < N; i++) /* the library's own default NaN, whatever the CPU's */
        ck_assert_uint_eq(load_raw(s->t, dst, i), s->nans[0]);
}
END_TEST

START_TEST(test_signed_zeros) {
    const struct float_specials *s = &specials[_i];
    uint64_t p = s->pos_zero, m = s->neg_zero;
    const struct raw_case cases[] = {
        {s->t, CCL_MAX, p, m, p},   {s->t, CCL_MAX, m, p, p},   {s->t, CCL_MAX, m, m, m},
        {s->t, CCL_MAX, p, p, p},   {s->t, CCL_MIN, p, m, m},   {s->t, CCL_MIN, m, p, m},
        {s->t, CCL_MIN, m, m, m},   {s->t, CCL_MIN, p, p, p},   {s->t, CCL_SUM, p, m, p},
        {s->t, CCL_SUM, m, m, m},   {s->t, CCL_PROD, p, m, m},  {s->t, CCL_PROD, m, m, p},
        {s->t, CCL_MAX, m, s->minus_one, m}, {s->t, CCL_MIN, p, s->one, p},
        {s->t, CCL_MAX, s->minus_inf, m, m}, {s->t, CCL_MIN, s->inf, p, p},
    };
    run_raw_cases(cases, sizeof cases / sizeof cases[0]);
}
END_TEST

/* ---- float16 / bfloat16 conversions ---- */

static const struct small_api {
    ccl_dtype_t t;
    struct small_format format;
    float (*to_float)(uint16_t);
    uint16_t (*from_float)(float);
    uint16_t max_finite, exponent_mask;
} smalls[] = {
    {CCL_FLOAT16, {10, 5}, ccl__half_to_float, ccl__float_to_half, 0x7bff, 0x7c00},
    {CCL_BFLOAT16, {7, 8}, ccl__bf16_to_float, ccl__float_to_bf16, 0x7f7f, 0x7f80},
};

static bool is_small_quiet_nan(const struct small_api *s, uint16_t h) {
    uint16_t mantissa = h & 0x7fff & (uint16_t)~s->exponent_mask;
    return (h & s->exponent_mask) == s->exponent_mask && mantissa != 0 && (h & quiet_bit[s->t]);
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* All 65536 encodings: exact value out, the same encoding back. */
START_TEST(test_conversion_round_trip_exhaustive) {
    const struct small_api *s = &smalls[_i];
    int checked = 0;
    for (uint32_t h = 0; h < 65536; h++, checked++) {
        float f = s->to_float((uint16_t)h);
        double want = ref_decode((uint16_t)h, s->format);
        uint16_t back = s->from_float(f);
        if (isnan(want)) {
            EXPECT(isnan(f) && (bits_of(f) & 0x400000), "0x%04x: to_float gave 0x%08x", h, bits_of(f));
            EXPECT(is_small_quiet_nan(s, back), "0x%04x: NaN came back as 0x%04x", h, back);
        } else {
            EXPECT((double)f == want && !signbit(f) == !signbit(want), "0x%04x: to_float %a, want %a", h, f, want);
            EXPECT(back == h, "0x%04x: came back as 0x%04x", h, back);
        }
    }
    ck_assert_int_eq(checked, 65536);
}
END_TEST

/* Halfway between every pair of neighbours: ties go to the even encoding,
 * one float ulp either side goes to the nearer neighbour. */
START_TEST(test_conversion_ties_to_even) {
    const struct small_api *s = &smalls[_i];
    for (uint32_t h = 0; h < s->max_finite; h++) {
        double mid = (ref_decode((uint16_t)h, s->format) + ref_decode((uint16_t)(h + 1), s->format)) / 2;
        float f = (float)mid;
        ck_assert_msg((double)f == mid, "midpoint above 0x%04x not exact in float", h);
        for (uint16_t sign = 0; sign <= 1; sign++) {
            float fm = sign ? -f : f;
            uint16_t sign_bit = sign ? 0x8000 : 0;
            uint16_t even = (uint16_t)((h & 1) ? h + 1 : h);
            EXPECT(s->from_float(fm) == (even | sign_bit), "tie above 0x%04x gave 0x%04x", h, s->from_float(fm));
            EXPECT(s->from_float(nextafterf(fm, 0)) == (h | sign_bit), "just below the tie above 0x%04x", h);
            EXPECT(s->from_float(nextafterf(fm, sign ? -INFINITY : INFINITY)) == ((h + 1) | sign_bit),
                   "just above the tie above 0x%04x", h);
        }
    }
}
END_TEST

/* Every 509th float32 encoding (all exponents, varied low bits). */
START_TEST(test_conversion_sampled_floats) {
    const struct small_api *s = &smalls[_i];
    for (uint64_t u = (uint64_t)_i; u <= 0xffffffffu; u += 509) {
        float f;
        uint32_t bits = (uint32_t)u;
        memcpy(&f, &bits, 4);
        uint16_t got = s->from_float(f);
        if (isnan(f))
            EXPECT(is_small_quiet_nan(s, got), "0x%08x gave 0x%04x, not a quiet NaN", bits, got);
        else
            EXPECT(got == ref_encode(f, s->format), "0x%08x gave 0x%04x want 0x%04x", bits, got,
                   ref_encode(f, s->format));
    }
}
END_TEST

START_TEST(test_conversion_known_values) {
    static const struct {
        int small;
        float f;
        uint16_t want;
    } cases[] = {
        {0, 1.0f + 0x1p-11f, 0x3c00},             {0, 1.0f + 0x3p-11f, 0x3c02},
        {0, 1.0f + 0x1p-11f + 0x1p-23f, 0x3c01}, {0, 65504.0f, 0x7bff},
        {0, 65519.99f, 0x7bff},                   {0, 65520.0f, 0x7c00},
        {0, -65520.0f, 0xfc00},                   {0, 1e10f, 0x7c00},
        {0, INFINITY, 0x7c00},                    {0, 0x1p-25f, 0x0000},
        {0, 0x1.000002p-25f, 0x0001},             {0, 0x3p-25f, 0x0002},
        {0, 0x1p-24f, 0x0001},                    {0, 0x1p-14f, 0x0400},
        {0, 0x3ffp-24f, 0x03ff} /* 1023 * 2^-24 */, {0, 0x7ffp-25f, 0x0400} /* 1023.5: tie to even */,
        {0, -1e-10f, 0x8000},                     {0, -0.0f, 0x8000},
        {0, 1.0f / 3.0f, 0x3555},                 {1, 1.0f + 0x1p-8f, 0x3f80},
        {1, 1.0f + 0x3p-8f, 0x3f82},              {1, 1.0f + 0x1p-8f + 0x1p-23f, 0x3f81},
        {1, FLT_MAX, 0x7f80},                     {1, 0x1.fep127f, 0x7f7f},
        {1, 0x1.ffp127f, 0x7f80} /* tie above the largest: even is inf */,
        {1, 0x1.fefffep127f, 0x7f7f},             {1, -FLT_MAX, 0xff80},
        {1, 0x1p-134f, 0x0000},                   {1, 0x3p-134f, 0x0002},
        {1, 0x1p-133f, 0x0001},                   {1, 1.0f / 3.0f, 0x3eab},
        {1, -INFINITY, 0xff80},                   {1, -0.0f, 0x8000},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint16_t got = smalls[cases[c].small].from_float(cases[c].f);
        ck_assert_msg(got == cases[c].want, "case %zu: %a gave 0x%04x, want 0x%04x", c, cases[c].f, got,
                      cases[c].want);
    }
}
END_TEST

/* Every encoding against a set of partners, both orders, every op, and
 * divided by small rank counts. */
START_TEST(test_small_table_exhaustive) {
    const struct small_api *s = &smalls[_i];
    uint16_t inf = s->exponent_mask, quiet = (uint16_t)quiet_bit[s->t];
    const uint16_t partners[] = {0x0000, 0x8000, 0x0001, 0x8123, s->max_finite, (uint16_t)(s->max_finite | 0x8000),
                                 inf, (uint16_t)(inf | 0x8000), (uint16_t)(inf | 1) /* signalling NaN */,
                                 (uint16_t)(inf | quiet | 0x8003), 0x3c00, 0x3555, 0x4170};
    enum { N = 65536 };
    uint16_t *all = malloc(N * 2), *other = malloc(N * 2), *out = malloc(N * 2), *want = malloc(N * 2);
    ck_assert(all && other && out && want);
    for (uint32_t h = 0; h < N; h++)
        all[h] = (uint16_t)h;
    for (size_t p = 0; p < sizeof partners / sizeof partners[0]; p++) {
        for (uint32_t h = 0; h < N; h++)
            other[h] = partners[p];
        for (int op = 0; op < FLOAT_OPS; op++) {
            for (int order = 0; order < 2; order++) {
                const uint16_t *a = order ? other : all, *b = order ? all : other;
                get_kernel(s->t, (ccl_op_t)op)(out, a, b, N);
                for (size_t i = 0; i < N; i++) {
                    ref_reduce(s->t, (ccl_op_t)op, a, b, want, i);
                    check_element(s->t, (ccl_op_t)op, out, want, i);
                }
            }
        }
    }
    static const int divisors[] = {1, 2, 3, 7, 10, 255, 256};
    for (size_t d = 0; d < sizeof divisors / sizeof divisors[0]; d++) {
        memcpy(out, all, N * 2);
        memcpy(want, all, N * 2);
        div_kernel(out, N, s->t, divisors[d]);
        for (size_t i = 0; i < N; i++) {
            ref_div(s->t, want, i, divisors[d]);
            check_element(s->t, CCL_AVG, out, want, i);
        }
    }
    free(all), free(other), free(out), free(want);
}
END_TEST

/* ---- ccl__reduce_div and CCL_AVG ---- */

START_TEST(test_div_known_values) {
    static const struct {
        ccl_dtype_t t;
        uint64_t x;
        int divisor;
        uint64_t want;
    } cases[] = {
        {CCL_INT8, U(-7), 2, U(-3)},          {CCL_INT8, U(-128), 3, U(-42)},
        {CCL_INT8, U(-1), 2, U(0)},           {CCL_INT8, U(127), 2, U(63)},
        {CCL_UINT8, U(255), 2, U(127)},       {CCL_INT32, U(-9), 4, U(-2)},
        {CCL_INT32, U(INT32_MIN), 2, U(-1073741824)}, {CCL_INT32, U(-1), 1000, U(0)},
        {CCL_UINT32, U(UINT32_MAX), 2, U(0x7fffffff)}, {CCL_INT64, U(-7), 2, U(-3)},
        {CCL_INT64, U(INT64_MIN), 3, U(-3074457345618258602)}, {CCL_INT64, U(-5), 5, U(-1)},
        {CCL_UINT64, UINT64_MAX, 3, 0x5555555555555555},
        {CCL_FLOAT16, 0xc700, 2, 0xc300},      /* -7 / 2 = -3.5: floats do not truncate */
        {CCL_FLOAT16, 0x3c00, 3, 0x3555},     {CCL_BFLOAT16, 0x3f80, 3, 0x3eab},
        {CCL_FLOAT32, 0xc0e00000, 2, 0xc0600000}, {CCL_FLOAT32, 0x3f800000, 3, 0x3eaaaaab},
        {CCL_FLOAT64, 0xc01c000000000000, 2, 0xc00c000000000000},
    };
    enum { N = 19 };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint64_t buf[N];
        ccl_dtype_t t = cases[c].t;
        uint64_t mask = types[t].size == 8 ? ~0ull : (1ull << (8 * types[t].size)) - 1;
        for (size_t i = 0; i < N; i++)
            store_raw(t, buf, i, cases[c].x);
        div_kernel(buf, N, t, cases[c].divisor);
        for (size_t i = 0; i < N; i++)
            ck_assert_msg(load_raw(t, buf, i) == (cases[c].want & mask), "case %zu (%s): got 0x%llx want 0x%llx", c,
                          types[t].name, (unsigned long long)load_raw(t, buf, i),
                          (unsigned long long)(cases[c].want & mask));
    }
}
END_TEST

/* 16-bit floats get divisors they hold exactly (the float32 division then
 * rounds once, innocuously); the others also get large ones. */
START_TEST(test_div_random) {
    static const int divisors[] = {1, 2, 3, 4, 5, 7, 10, 16, 100, 255, 256, 1000, 65537, 1000003};
    ccl_dtype_t t = (ccl_dtype_t)_i;
    size_t size = types[t].size;
    static const size_t sizes[] = {0, 1, 7, 8, 9, 17, BIG_N};
    for (size_t d = 0; d < sizeof divisors / sizeof divisors[0]; d++) {
        if (size == 2 && divisors[d] > 256)
            continue;
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k], bytes = (n + 1) * size;
            char *buf = malloc(bytes + GUARD_BYTES), *want = malloc(bytes), *unused = malloc(bytes);
            ck_assert(buf && want && unused);
            memset(buf, GUARD_BYTE, bytes + GUARD_BYTES);
            uint64_t rng = 0xd1u * (d + 1) + k;
            fill_pair(t, buf + size, unused + size, n, &rng);
            memcpy(want, buf, bytes);
            div_kernel(buf + size, n, t, divisors[d]);
            for (size_t i = 0; i < n; i++) {
                ref_div(t, want + size, i, divisors[d]);
                check_element(t, CCL_AVG, buf + size, want + size, i);
            }
            for (size_t g = bytes; g < bytes + GUARD_BYTES; g++)
                ck_assert_msg((unsigned char)buf[g] == GUARD_BYTE, "div wrote past n=%zu", n);
            ck_assert(memcmp(buf, want, size) == 0);
            free(buf), free(want), free(unused);
        }
    }
}
END_TEST

/* An all-reduce's AVG as the algorithms do it: reduce each rank's buffer
 * into one in place with the table's AVG entry, divide once at the end. */
START_TEST(test_avg_as_sum_then_div) {
    ccl_dtype_t t = (ccl_dtype_t)_i;
    static const int rank_counts[] = {2, 3, 5, 8};
    size_t size = types[t].size, n = BIG_N;
    for (size_t c = 0; c < sizeof rank_counts / sizeof rank_counts[0]; c++) {
        int ranks = rank_counts[c];
        char *in = malloc(n * size * (size_t)(ranks + 1)), *acc = malloc(n * size), *want = malloc(n * size);
        ck_assert(in && acc && want);
        uint64_t rng = 0xa76u + c;
        for (int r = 0; r + 1 < ranks + 1; r += 2)
            fill_pair(t, in + (size_t)r * n * size, in + (size_t)(r + 1) * n * size, n, &rng);
        memcpy(acc, in, n * size);
        memcpy(want, in, n * size);
        for (int r = 1; r < ranks; r++) {
            const char *rank_buf = in + (size_t)r * n * size;
            get_kernel(t, CCL_AVG)(acc, acc, rank_buf, n);
            for (size_t i = 0; i < n; i++)
                ref_reduce(t, CCL_SUM, want, rank_buf, want, i);
        }
        div_kernel(acc, n, t, ranks);
        for (size_t i = 0; i < n; i++) {
            ref_div(t, want, i, ranks);
            check_element(t, CCL_AVG, acc, want, i);
        }
        free(in), free(acc), free(want);
    }
}
END_TEST

/* Deterministic: the same inputs give the same bits, call after call. */
START_TEST(test_repeatable) {
    ccl_dtype_t t = (ccl_dtype_t)(_i / CCL_NUM_OPS);
    ccl_op_t op = (ccl_op_t)(_i % CCL_NUM_OPS);
    if (!op_applies(t, op)) return;
    size_t size = types[t].size, n = BIG_N;
    char *a = malloc(n * size), *b = malloc(n * size), *first = malloc(n * size), *again = malloc(n * size);
    ck_assert(a && b && first && again);
    uint64_t rng = 0x4e9u + (uint64_t)_i;
    fill_pair(t, a, b, n, &rng);
    get_kernel(t, op)(first, a, b, n);
    for (int k = 0; k < 3; k++) {
        memset(again, k, n * size);
        get_kernel(t, op)(again, a, b, n);
        ck_assert(memcmp(first, again, n * size) == 0);
    }
    free(a), free(b), free(first), free(again);
}
END_TEST

static Suite *reduce_suite(void) {
    Suite *s = suite_create("reduce");
    TCase *table = tcase_create("table");
    tcase_add_test(table, test_table_complete);
    tcase_add_loop_test(table, test_random_matches_reference, 0, CCL_NUM_DTYPES * CCL_NUM_OPS);
    tcase_add_loop_test(table, test_tails_and_empty, 0, CCL_NUM_DTYPES);
    tcase_add_loop_test(table, test_aliasing, 0, CCL_NUM_DTYPES * CCL_NUM_OPS);
    tcase_add_loop_test(table, test_repeatable, 0, CCL_NUM_DTYPES * CCL_NUM_OPS);
    tcase_set_timeout(table, 120); /* seconds, for sanitizer builds */
    suite_add_tcase(s, table);

    TCase *edges = tcase_create("edge_values");
    tcase_add_test(edges, test_integer_wraparound);
    tcase_add_test(edges, test_overflow_to_infinity);
    tcase_add_test(edges, test_subnormal_results);
    tcase_add_loop_test(edges, test_nan_propagation, 0, sizeof specials / sizeof specials[0]);
    tcase_add_loop_test(edges, test_signed_zeros, 0, sizeof specials / sizeof specials[0]);
    suite_add_tcase(s, edges);

    TCase *conv = tcase_create("half_conversions");
    tcase_add_loop_test(conv, test_conversion_round_trip_exhaustive, 0, 2);
    tcase_add_loop_test(conv, test_conversion_ties_to_even, 0, 2);
    tcase_add_loop_test(conv, test_conversion_sampled_floats, 0, 2);
    tcase_add_test(conv, test_conversion_known_values);
    tcase_add_loop_test(conv, test_small_table_exhaustive, 0, 2);
    tcase_set_timeout(conv, 300);
    suite_add_tcase(s, conv);

    TCase *avg = tcase_create("div_and_avg");
    tcase_add_test(avg, test_div_known_values);
    tcase_add_loop_test(avg, test_div_random, 0, CCL_NUM_DTYPES);
    tcase_add_loop_test(avg, test_avg_as_sum_then_div, 0, CCL_NUM_DTYPES);
    suite_add_tcase(s, avg);
    return s;
}

static int run_suite(void) {
    SRunner *runner = srunner_create(reduce_suite());
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed;
}

int main(void) {
    int failed = run_suite();
    printf("the same tests on the baseline kernels:\n");
    get_kernel = ccl__reduce_get_baseline;
    div_kernel = ccl__reduce_div_baseline;
    failed += run_suite();
    return failed != 0;
}
