/*
 * Inputs and exact references for the correctness matrix (see ref.h).
 */
#define _GNU_SOURCE
#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hashing ---- */

uint64_t ref_mix(uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t x = seed + a * 0x9e3779b97f4a7c15ull + b * 0xd1b54a32d192ed03ull;
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* ---- float16 / bfloat16 ---- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t ref_float_to_half(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up round to inf */
    if (ax < 0x38800000u) /* below 2^-14: a subnormal half, in units of 2^-24 */
        return (uint16_t)(sign | (uint16_t)rintf(fabsf(f) * 16777216.0f));
    uint32_t h = ((((ax >> 23) - 127u + 15u)) << 10) | ((ax & 0x7fffffu) >> 13);
    uint32_t rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

float ref_half_to_float(uint16_t h) {
    float sign = (h & 0x8000u) ? -1.0f : 1.0f;
    int e = (h >> 10) & 0x1f;
    int m = h & 0x3ff;
    if (e == 0) return sign * ldexpf((float)m, -24);
    if (e == 31) return m ? bits_f32(((uint32_t)(h & 0x8000u) << 16) | 0x7fc00000u | ((uint32_t)m << 13))
                          : sign * INFINITY;
    return sign * ldexpf((float)(1024 + m), e - 25);
}

uint16_t ref_float_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float ref_bf16_to_float(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* ---- dtype facts ---- */

struct dt_info {
    int bits;
    int is_signed;
    int is_float;
    int precision; /* significand bits of a float type */
};

static struct dt_info dt_info(ccl_dtype_t d) {
    switch (d) {
    case CCL_INT8: return (struct dt_info){8, 1, 0, 0};
    case CCL_UINT8: return (struct dt_info){8, 0, 0, 0};
    case CCL_INT32: return (struct dt_info){32, 1, 0, 0};
    case CCL_UINT32: return (struct dt_info){32, 0, 0, 0};
    case CCL_INT64: return (struct dt_info){64, 1, 0, 0};
    case CCL_UINT64: return (struct dt_info){64, 0, 0, 0};
    case CCL_FLOAT16: return (struct dt_info){16, 1, 1, 11};
    case CCL_BFLOAT16: return (struct dt_info){16, 1, 1, 8};
    case CCL_FLOAT32: return (struct dt_info){32, 1, 1, 24};
    case CCL_FLOAT64: return (struct dt_info){64, 1, 1, 53};
    default: return (struct dt_info){8, 0, 0, 0};
    }
}

static void store_bits(void *buf, size_t i, int bits, uint64_t v) {
    switch (bits) {
    case 8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case 16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case 32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    default: ((uint64_t *)buf)[i] = v; break;
    }
}

/* v must be exactly representable in the type (the inputs guarantee it),
 * except for AVG results, which round here like the library's division. */
static void store_float(void *buf, size_t i, ccl_dtype_t d, double v) {
    switch (d) {
    case CCL_FLOAT16: ((uint16_t *)buf)[i] = ref_float_to_half((float)v); break;
    case CCL_BFLOAT16: ((uint16_t *)buf)[i] = ref_float_to_bf16((float)v); break;
    case CCL_FLOAT32: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = v; break;
    }
}

int ref_op_applies(ccl_dtype_t dtype, ccl_op_t op) {
    return (unsigned)op < CCL_NUM_OPS && (!dt_info(dtype).is_float || op < CCL_BAND);
}

/* ---- the two parts of every input ---- */

/* h mapped to [-lim, lim]. */
static int64_t in_range(uint64_t h, uint64_t lim) { return (int64_t)(h % (2 * lim + 1)) - (int64_t)lim; }

/* Per-case parameters, derived once per call. */
struct gen {
    const struct ref_case *c;
    struct dt_info d;
    uint64_t lim;     /* magnitude bound of additive parts (0: every bit) */
    int unsigned_avg; /* AVG on an unsigned type: parts in [0, lim] */
};

static struct gen gen_make(const struct ref_case *c) {
    struct gen g = {.c = c, .d = dt_info(c->dtype)};
    uint64_t n = (uint64_t)(c->nranks > 0 ? c->nranks : 1);
    if (g.d.is_float) {
        uint64_t exact = 1ull << g.d.precision; /* integers up to this are exact */
        if (c->op == CCL_SUM || c->op == CCL_AVG) g.lim = exact / (2 * n);
        else g.lim = exact / 4;
        if (g.lim == 0) g.lim = 1;
        return g;
    }
    int b = g.d.bits;
    if (c->op == CCL_MAX || c->op == CCL_MIN) {
        g.lim = 1ull << (b - 2); /* a + g stays in range */
    } else if (c->op == CCL_AVG) {
        uint64_t top = g.d.is_signed ? (b == 64 ? (uint64_t)INT64_MAX : (1ull << (b - 1)) - 1)
                                     : (b == 64 ? UINT64_MAX : (1ull << b) - 1);
        g.lim = top / (2 * n);
        g.unsigned_avg = !g.d.is_signed;
    }
    return g;
}

static uint64_t a_hash(const struct ref_case *c, size_t i) { return ref_mix(c->seed, 0xa11ce, i); }
static uint64_t g_hash(const struct ref_case *c, int r, size_t k) {
    return ref_mix(c->seed ^ 0x5bd1e995u, (uint64_t)r + 1, k);
}

/* Additive part (SUM/AVG/MAX/MIN) as a signed integer, or raw bits for
 * integer SUM and PROD. */
static int64_t part_add(const struct gen *g, uint64_t h) {
    if (g->c->op == CCL_SUM && !g->d.is_float) return (int64_t)h;
    if (g->unsigned_avg) return (int64_t)(h % (g->lim + 1));
    if (!g->d.is_float && (g->c->op == CCL_MAX || g->c->op == CCL_MIN)) {
        int64_t v = (int64_t)(h >> (64 - (g->d.bits - 1))); /* [0, 2^(b-1)) */
        return g->d.is_signed ? v - (int64_t)g->lim : v;
    }
    return in_range(h, g->lim);
}

/* Integer PROD factors: mostly odd so products do not collapse to 0. */
static uint64_t part_mul_int(uint64_t h, int rare_even) { return rare_even ? (h & ~1ull) : (h | 1ull); }

/* Float PROD factors: sign * 2^exp, exp in {-1, 0, 1}. */
struct pow2 {
    int neg;
    int exp;
};

static struct pow2 a_pow2(const struct gen *g, uint64_t h) {
    struct pow2 p = {(int)(h & 1), 0};
    /* float16 has too little range for N * exp; its variety is the sign. */
    if (g->c->dtype != CCL_FLOAT16) p.exp = (int)((h >> 1) % 3) - 1;
    return p;
}

static struct pow2 g_pow2(uint64_t h, int r) {
    struct pow2 p = {(int)(h & 1), 0};
    if (r < 14 && ((h >> 1) & 3) == 0) p.exp = ((h >> 3) & 1) ? 1 : -1;
    return p;
}

/* Bitwise ops: x = A(i) | G(r, k) for AND, A & G for OR, A ^ G for XOR,
 * whose reductions are A | AND_r G, A & OR_r G and (A if N is odd) ^
 * XOR_r G. Each side is sparse or dense so that neither the AND nor the OR
 * of a few ranks' parts is all zeros or all ones. */
static int is_bitwise(ccl_op_t op) { return op == CCL_BAND || op == CCL_BOR || op == CCL_BXOR; }
static uint64_t sparse(uint64_t h) { return h & (h >> 7); }
static uint64_t dense(uint64_t h) { return h | (h >> 7); }
static uint64_t bit_a(ccl_op_t op, uint64_t h) { return op == CCL_BAND ? sparse(h) : op == CCL_BOR ? dense(h) : h; }
static uint64_t bit_g(ccl_op_t op, uint64_t h) { return op == CCL_BAND ? dense(h) : op == CCL_BOR ? sparse(h) : h; }
static uint64_t bit_input(ccl_op_t op, uint64_t a, uint64_t g) {
    return op == CCL_BAND ? a | g : op == CCL_BOR ? a & g : a ^ g;
}

void ref_reduce_input(const struct ref_case *c, int rank, size_t first, size_t n, void *buf) {
    struct gen g = gen_make(c);
    int64_t gadd[REF_PERIOD];
    uint64_t graw[REF_PERIOD];
    for (size_t k = 0; k < REF_PERIOD; k++) {
        graw[k] = g_hash(c, rank, k);
        gadd[k] = part_add(&g, graw[k]);
    }
    for (size_t j = 0; j < n; j++) {
        size_t i = first + j;
        size_t k = i % REF_PERIOD;
        uint64_t ha = a_hash(c, i);
        if (is_bitwise(c->op)) {
            store_bits(buf, j, g.d.bits, bit_input(c->op, bit_a(c->op, ha), bit_g(c->op, graw[k])));
        } else if (c->op == CCL_PROD && g.d.is_float) {
            struct pow2 a = a_pow2(&g, ha), b = g_pow2(graw[k], rank);
            store_float(buf, j, c->dtype, ldexp((a.neg ^ b.neg) ? -1.0 : 1.0, a.exp + b.exp));
        } else if (c->op == CCL_PROD) {
            store_bits(buf, j, g.d.bits, part_mul_int(ha, (ha >> 60) == 0) * part_mul_int(graw[k], k % 11 == 0));
        } else if (g.d.is_float) {
            store_float(buf, j, c->dtype, (double)(part_add(&g, ha) + gadd[k]) * 0.25);
        } else {
            store_bits(buf, j, g.d.bits, (uint64_t)part_add(&g, ha) + (uint64_t)gadd[k]);
        }
    }
}

static uint64_t pow_u64(uint64_t b, int e) {
    uint64_t r = 1;
    for (; e > 0; e >>= 1, b *= b)
        if (e & 1) r *= b;
    return r;
}

/* The rank-dependent half of the result, per residue k. */
struct agg {
    uint64_t add[REF_PERIOD]; /* SUM / AVG: sum (wrapping for integer SUM) */
    int64_t ext[REF_PERIOD];  /* MAX / MIN */
    uint64_t mul[REF_PERIOD]; /* integer PROD */
    int neg[REF_PERIOD];      /* float PROD */
    int exp[REF_PERIOD];
    uint64_t bits[REF_PERIOD]; /* BAND / BOR / BXOR of the G parts */
};

static void agg_make(const struct gen *g, struct agg *a) {
    const struct ref_case *c = g->c;
    for (size_t k = 0; k < REF_PERIOD; k++) {
        a->add[k] = 0;
        a->mul[k] = 1;
        a->neg[k] = 0;
        a->exp[k] = 0;
        a->bits[k] = c->op == CCL_BAND ? ~0ull : 0;
        for (int r = 0; r < c->nranks; r++) {
            uint64_t h = g_hash(c, r, k);
            uint64_t gb = bit_g(c->op, h);
            a->bits[k] = c->op == CCL_BAND ? a->bits[k] & gb : c->op == CCL_BOR ? a->bits[k] | gb : a->bits[k] ^ gb;
            int64_t v = part_add(g, h);
            if (r == 0 || (c->op == CCL_MAX ? v > a->ext[k] : v < a->ext[k])) a->ext[k] = v;
            a->add[k] += (uint64_t)v;
            a->mul[k] *= part_mul_int(h, k % 11 == 0);
            struct pow2 p = g_pow2(h, r);
            a->neg[k] ^= p.neg;
            a->exp[k] += p.exp;
        }
    }
}

static double float_avg(ccl_dtype_t d, double sum, int nranks) {
    switch (d) {
    case CCL_FLOAT64: return sum / (double)nranks;
    default: return (double)((float)sum / (float)nranks); /* f32, and f16/bf16 via float */
    }
}

static uint64_t int_avg(const struct gen *g, uint64_t total) {
    uint64_t n = (uint64_t)g->c->nranks;
    if (g->unsigned_avg) return total / n;
    return (uint64_t)((int64_t)total / (int64_t)n); /* C division truncates toward zero */
}

void ref_reduce_expected(const struct ref_case *c, size_t first, size_t n, void *buf) {
    struct gen g = gen_make(c);
    struct agg agg;
    agg_make(&g, &agg);
    uint64_t nr = (uint64_t)c->nranks;
    for (size_t j = 0; j < n; j++) {
        size_t i = first + j;
        size_t k = i % REF_PERIOD;
        uint64_t ha = a_hash(c, i);
        if (is_bitwise(c->op)) {
            uint64_t a = bit_a(c->op, ha);
            uint64_t v = c->op == CCL_BAND ? a | agg.bits[k] : c->op == CCL_BOR ? a & agg.bits[k]
                                                                                 : ((nr & 1) ? a : 0) ^ agg.bits[k];
            store_bits(buf, j, g.d.bits, v);
            continue;
        }
        if (c->op == CCL_PROD && g.d.is_float) {
            struct pow2 a = a_pow2(&g, ha);
            int neg = agg.neg[k] ^ (a.neg & (int)(nr & 1));
            store_float(buf, j, c->dtype, ldexp(neg ? -1.0 : 1.0, (int)nr * a.exp + agg.exp[k]));
            continue;
        }
        if (c->op == CCL_PROD) {
            store_bits(buf, j, g.d.bits, pow_u64(part_mul_int(ha, (ha >> 60) == 0), c->nranks) * agg.mul[k]);
            continue;
        }
        int64_t a = part_add(&g, ha);
        uint64_t total = nr * (uint64_t)a + agg.add[k];
        if (g.d.is_float) {
            double v;
            if (c->op == CCL_MAX || c->op == CCL_MIN) v = (double)(a + agg.ext[k]) * 0.25;
            else v = (double)(int64_t)total * 0.25;
            if (c->op == CCL_AVG) v = float_avg(c->dtype, v, c->nranks);
            store_float(buf, j, c->dtype, v);
        } else if (c->op == CCL_MAX || c->op == CCL_MIN) {
            store_bits(buf, j, g.d.bits, (uint64_t)a + (uint64_t)agg.ext[k]); /* u64: above INT64_MAX */
        } else {
            store_bits(buf, j, g.d.bits, c->op == CCL_AVG ? int_avg(&g, total) : total);
        }
    }
}

void ref_bytes(uint64_t seed, int rank, size_t first, size_t nbytes, void *buf) {
    uint8_t *out = buf;
    size_t j = 0;
    while (j < nbytes) {
        size_t pos = first + j;
        uint64_t w = ref_mix(seed, (uint64_t)rank + 77, pos / 8);
        size_t lane = pos % 8;
        size_t take = 8 - lane < nbytes - j ? 8 - lane : nbytes - j;
        for (size_t b = 0; b < take; b++) out[j + b] = (uint8_t)(w >> (8 * (lane + b)));
        j += take;
    }
}

/* ---- messages ---- */

void ref_format_elem(ccl_dtype_t dtype, const void *buf, size_t i, char *out, size_t n) {
    switch (dtype) {
    case CCL_INT8: snprintf(out, n, "%d", ((const int8_t *)buf)[i]); break;
    case CCL_UINT8: snprintf(out, n, "%u", ((const uint8_t *)buf)[i]); break;
    case CCL_INT32: snprintf(out, n, "%d", ((const int32_t *)buf)[i]); break;
    case CCL_UINT32: snprintf(out, n, "%u", ((const uint32_t *)buf)[i]); break;
    case CCL_INT64: snprintf(out, n, "%lld", (long long)((const int64_t *)buf)[i]); break;
    case CCL_UINT64: snprintf(out, n, "%llu", (unsigned long long)((const uint64_t *)buf)[i]); break;
    case CCL_FLOAT16: {
        uint16_t h = ((const uint16_t *)buf)[i];
        snprintf(out, n, "%.9g (0x%04x)", (double)ref_half_to_float(h), h);
        break;
    }
    case CCL_BFLOAT16: {
        uint16_t h = ((const uint16_t *)buf)[i];
        snprintf(out, n, "%.9g (0x%04x)", (double)ref_bf16_to_float(h), h);
        break;
    }
    case CCL_FLOAT32: {
        float f = ((const float *)buf)[i];
        snprintf(out, n, "%.9g (0x%08x)", (double)f, f32_bits(f));
        break;
    }
    case CCL_FLOAT64: {
        double f = ((const double *)buf)[i];
        uint64_t u;
        memcpy(&u, &f, sizeof u);
        snprintf(out, n, "%.17g (0x%016llx)", f, (unsigned long long)u);
        break;
    }
    default: snprintf(out, n, "?"); break;
    }
}

size_t ref_first_diff(ccl_dtype_t dtype, const void *a, const void *b, size_t count) {
    size_t es = ccl_dtype_size(dtype);
    if (es == 0) es = 1;
    if (memcmp(a, b, count * es) == 0) return SIZE_MAX;
    for (size_t i = 0; i < count; i++)
        if (memcmp((const uint8_t *)a + i * es, (const uint8_t *)b + i * es, es) != 0) return i;
    return SIZE_MAX;
}

/* ---- guarded buffers ---- */

#define GUARD_BYTE 0xa5
#define MAX_MISALIGN 64

int tbuf_alloc(struct tbuf *b, size_t cap) {
    memset(b, 0, sizeof *b);
    size_t total = cap + 2 * TBUF_GUARD + MAX_MISALIGN;
    total = (total + 63) / 64 * 64;
    b->base = aligned_alloc(64, total);
    if (!b->base) return -1;
    b->cap = cap;
    b->offset = TBUF_GUARD;
    return 0;
}

void tbuf_free(struct tbuf *b) {
    free(b->base);
    memset(b, 0, sizeof *b);
}

void *tbuf_arm(struct tbuf *b, size_t bytes, size_t misalign) {
    if (bytes > b->cap) bytes = b->cap;
    b->offset = TBUF_GUARD + (misalign % MAX_MISALIGN);
    b->bytes = bytes;
    memset(b->base, GUARD_BYTE, b->offset);
    memset(b->base + b->offset + bytes, GUARD_BYTE, TBUF_GUARD);
    return b->base + b->offset;
}

void *tbuf_data(const struct tbuf *b) { return b->base + b->offset; }

static int all_bytes(const uint8_t *p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

int tbuf_guards_ok(const struct tbuf *b) {
    return all_bytes(b->base, b->offset, GUARD_BYTE) &&
           all_bytes(b->base + b->offset + b->bytes, TBUF_GUARD, GUARD_BYTE);
}

void tbuf_poison(struct tbuf *b) { memset(b->base + b->offset, POISON_BYTE, b->bytes); }

int tbuf_is_poison(const struct tbuf *b) { return all_bytes(b->base + b->offset, b->bytes, POISON_BYTE); }
