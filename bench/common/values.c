/*
 * Check-pass data. Every value is a small non-negative integer, kept in an
 * int64 and written into the element type only at the end:
 *
 *   sum  each rank gives 0..m with n * m <= 256, so every partial sum is an
 *        integer <= 256: exact in bfloat16 (8 significant bits) and wider;
 *   prod each rank gives 1 or 2 and at most 10 ranks give 2, so every
 *        partial product is a power of two <= 1024 (exact in float16);
 *   max, min and the non-reducing collectives: 0..100;
 *   avg  rank contributions a + d with d in {-1, 0, +1} summing to zero over
 *        the ranks, so the sum is exactly n * a and the average exactly a.
 *
 * Integers wrap as the library's integer arithmetic does (modulo 2^bits,
 * which the same modular arithmetic here reproduces whatever the order),
 * and an integer average is the wrapped sum divided by n, truncated.
 */
#include "values.h"

#include <string.h>
#include <strings.h>

#include "colls.h"

struct dtype_desc {
    const char *name, *alias;
    size_t size;
};

static const struct dtype_desc dtypes[CCL_NUM_DTYPES] = {
    [CCL_INT8] = {"int8", "char", 1},          [CCL_UINT8] = {"uint8", "uchar", 1},
    [CCL_INT32] = {"int32", "int", 4},         [CCL_UINT32] = {"uint32", "uint", 4},
    [CCL_INT64] = {"int64", "long", 8},        [CCL_UINT64] = {"uint64", "ulong", 8},
    [CCL_FLOAT16] = {"float16", "half", 2},    [CCL_BFLOAT16] = {"bfloat16", "bf16", 2},
    [CCL_FLOAT32] = {"float32", "float", 4},   [CCL_FLOAT64] = {"float64", "double", 8},
};
static const char *const redops[BENCH_NUM_REDOPS] = {"sum", "prod", "max", "min", "avg"};

size_t bench_dtype_size(ccl_dtype_t dtype) { return dtypes[dtype].size; }
const char *bench_dtype_name(ccl_dtype_t dtype) { return dtypes[dtype].name; }
const char *bench_redop_name(ccl_op_t op) { return redops[op]; }

int bench_dtype_parse(const char *name) {
    for (int d = 0; d < CCL_NUM_DTYPES; d++)
        if (!strcasecmp(name, dtypes[d].name) || !strcasecmp(name, dtypes[d].alias)) return d;
    return -1;
}

int bench_redop_parse(const char *name) {
    for (int op = 0; op < BENCH_NUM_REDOPS; op++)
        if (!strcasecmp(name, redops[op])) return op;
    return -1;
}

/* ---- input values ---- */

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t hash(int rank, size_t index) { return mix(((uint64_t)(unsigned)rank << 40) ^ (uint64_t)index); }

enum { EXACT_SUM_LIMIT = 256, MAX_VALUE = 100, MAX_TWOS = 10 };

static int64_t input_value(const struct bench_check_case *k, int rank, size_t i) {
    uint64_t h = hash(rank, i);
    int n = k->nranks;
    if (!bench_coll_info(k->coll)->has_redop) return (int64_t)(h % (MAX_VALUE + 1));
    switch (k->redop) {
    case CCL_SUM: {
        int m = EXACT_SUM_LIMIT / n < 8 ? EXACT_SUM_LIMIT / n : 8;
        return (int64_t)(h % (uint64_t)(m + 1));
    }
    case CCL_PROD:
        return rank < MAX_TWOS && (h >> 7) % 2 ? 2 : 1;
    case CCL_AVG: {
        /* a depends on the element only; d pairs rank positions (rotated
         * per element) as +1/-1, an odd one out getting 0. */
        int amax = EXACT_SUM_LIMIT / n - 1 < 8 ? EXACT_SUM_LIMIT / n - 1 : 8;
        if (amax < 1) return 1;
        int64_t a = 1 + (int64_t)(mix(i) % (uint64_t)amax);
        size_t s = ((size_t)rank + i) % (size_t)n;
        int d = s % 2 == 1 ? -1 : (s + 1 < (size_t)n ? 1 : 0);
        return a + d;
    }
    default:
        return (int64_t)(h % (MAX_VALUE + 1));
    }
}

/* The value the element type holds for v (integer wrap-around). */
static int64_t wrap(ccl_dtype_t dtype, int64_t v) {
    switch (dtype) {
    case CCL_INT8: return (int8_t)v;
    case CCL_UINT8: return (uint8_t)v;
    case CCL_INT32: return (int32_t)v;
    case CCL_UINT32: return (uint32_t)v;
    default: return v;
    }
}

static int64_t reduced_value(const struct bench_check_case *k, size_t i) {
    int64_t acc = input_value(k, 0, i);
    for (int r = 1; r < k->nranks; r++) {
        int64_t v = input_value(k, r, i);
        switch (k->redop) {
        case CCL_PROD: acc *= v; break;
        case CCL_MAX: acc = v > acc ? v : acc; break;
        case CCL_MIN: acc = v < acc ? v : acc; break;
        default: acc += v; break; /* sum, and avg before its division */
        }
    }
    acc = wrap(k->dtype, acc);
    return k->redop == CCL_AVG ? acc / k->nranks : acc;
}

/* float16 bits of a non-negative integer that float16 holds exactly. */
static uint16_t half_bits(int64_t v) {
    if (v == 0) return 0;
    int e = 63 - __builtin_clzll((unsigned long long)v);
    uint64_t mant = e <= 10 ? (uint64_t)v << (10 - e) : (uint64_t)v >> (e - 10);
    return (uint16_t)((unsigned)(e + 15) << 10 | (mant & 0x3ff));
}

static void encode(ccl_dtype_t dtype, int64_t v, unsigned char *out) {
    union {
        int8_t i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64;
        uint16_t h; float f; double d; unsigned char bytes[8];
    } u = {0};
    switch (dtype) {
    case CCL_INT8: u.i8 = (int8_t)v; break;
    case CCL_UINT8: u.u8 = (uint8_t)v; break;
    case CCL_INT32: u.i32 = (int32_t)v; break;
    case CCL_UINT32: u.u32 = (uint32_t)v; break;
    case CCL_INT64: u.i64 = v; break;
    case CCL_UINT64: u.u64 = (uint64_t)v; break;
    case CCL_FLOAT16: u.h = half_bits(v); break;
    case CCL_BFLOAT16: { /* exact values: the top half of the float32 */
        float f = (float)v;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        u.h = (uint16_t)(bits >> 16);
        break;
    }
    case CCL_FLOAT32: u.f = (float)v; break;
    default: u.d = (double)v; break;
    }
    memcpy(out, u.bytes, dtypes[dtype].size);
}

/* ---- inputs and expected outputs per collective ---- */

static size_t input_elems(const struct bench_check_case *k) {
    if (k->coll == BENCH_REDUCE_SCATTER || k->coll == BENCH_ALL_TO_ALL || k->coll == BENCH_SCATTER)
        return (size_t)k->nranks * k->count;
    if (k->coll == BENCH_ALLTOALLV) return k->count; /* what this rank sends in all */
    return k->coll == BENCH_BARRIER ? 0 : k->count;
}

void bench_fill_input(const struct bench_check_case *k, void *send) {
    size_t es = dtypes[k->dtype].size, n = input_elems(k);
    unsigned char *p = send;
    for (size_t i = 0; i < n; i++) encode(k->dtype, input_value(k, k->rank, i), p + i * es);
}

size_t bench_output_elems(const struct bench_check_case *k) {
    switch (k->coll) {
    case BENCH_ALL_GATHER:
    case BENCH_ALL_TO_ALL:
        return (size_t)k->nranks * k->count;
    case BENCH_REDUCE:
        return k->rank == k->root ? k->count : 0;
    case BENCH_GATHER:
        return k->rank == k->root ? (size_t)k->nranks * k->count : 0;
    case BENCH_HYPERCUBE:
        return (size_t)k->nranks * k->count;
    case BENCH_BARRIER:
        return 0;
    case BENCH_PINGPONG: /* the last of an odd count has no partner */
        return (k->rank ^ 1) < k->nranks ? k->count : 0;
    default:
        return k->count;
    }
}

/* alltoallv's output: block p (from rank p, in rank order) holds what p
 * sent this rank, which sits in p's send buffer after p's blocks for the
 * ranks before this one. Block by block, so each offset is summed once. */
static size_t a2av_count_wrong(const struct bench_check_case *k, const unsigned char *out) {
    size_t es = dtypes[k->dtype].size, at = 0, wrong = 0;
    unsigned char want[8];
    for (int p = 0; p < k->nranks; p++) {
        size_t n = bench_a2av_elems(p, k->rank, k->nranks, k->size_bytes, es), from = 0;
        for (int q = 0; q < k->rank; q++) from += bench_a2av_elems(p, q, k->nranks, k->size_bytes, es);
        for (size_t j = 0; j < n; j++, at++) {
            encode(k->dtype, input_value(k, p, from + j), want);
            wrong += memcmp(out + at * es, want, es) != 0;
        }
    }
    return wrong;
}

static int64_t expected_value(const struct bench_check_case *k, size_t j) {
    size_t c = k->count;
    switch (k->coll) {
    case BENCH_HYPERCUBE: return input_value(k, (int)(j / c), j % c);
    case BENCH_REDUCE_SCATTER: return reduced_value(k, (size_t)k->rank * c + j);
    case BENCH_ALL_REDUCE:
    case BENCH_REDUCE: return reduced_value(k, j);
    case BENCH_ALL_GATHER:
    case BENCH_GATHER: return input_value(k, (int)(j / c), j % c);
    case BENCH_SCATTER: return input_value(k, k->root, (size_t)k->rank * c + j);
    case BENCH_BROADCAST: return input_value(k, k->root, j);
    case BENCH_ALL_TO_ALL: return input_value(k, (int)(j / c), (size_t)k->rank * c + j % c);
    case BENCH_PINGPONG: return input_value(k, k->rank ^ 1, j);
    default: return input_value(k, (k->rank + k->nranks - 1) % k->nranks, j); /* sendrecv: from rank - 1 */
    }
}

size_t bench_count_wrong(const struct bench_check_case *k, const void *recv) {
    if (k->coll == BENCH_ALLTOALLV) return a2av_count_wrong(k, recv);
    size_t es = dtypes[k->dtype].size, n = bench_output_elems(k), wrong = 0;
    const unsigned char *p = recv;
    unsigned char want[8];
    for (size_t j = 0; j < n; j++) {
        encode(k->dtype, expected_value(k, j), want);
        wrong += memcmp(p + j * es, want, es) != 0;
    }
    return wrong;
}

int bench_corrupt_rank(const struct bench_check_case *k) {
    return k->coll == BENCH_REDUCE || k->coll == BENCH_GATHER ? k->root : 0;
}

void bench_corrupt_one(const struct bench_check_case *k, void *recv) {
    size_t es = dtypes[k->dtype].size, n = bench_output_elems(k);
    if (n == 0) return;
    unsigned char *p = (unsigned char *)recv + (n / 2) * es;
    for (size_t b = 0; b < es; b++) p[b] = (unsigned char)~p[b];
}
