/*
 * Reductions of NCCL's 8-bit floats (ncclFloat8e4m3, ncclFloat8e5m2).
 * libccl's reduction table has no 8-bit floats, and adding two of them in
 * 8 bits would round at every step, in an order that depends on the
 * algorithm. Instead each rank widens its input to float64, libccl reduces
 * that, and the result is rounded once back to 8 bits. Every 8-bit value
 * is exact in float64, and so are the sum of up to 2^21 of them (their
 * bits span at most 32 places) and the minimum and maximum; a product is
 * exact while its factors' significant bits fit in 53, which bounds the
 * rank count (PROD_MAX_RANKS). So every rank gets the correctly rounded
 * result, the same whatever the algorithm. Rounding is to nearest, ties
 * to even, saturating at the largest finite value (as CUDA's
 * __NV_SATFINITE conversions); NaN stays NaN. The average is the exact sum
 * divided by the rank count in float64, then rounded.
 *
 * The widened copies are host memory that lives for the call alone, so
 * these run on host buffers, on the default stream, outside groups; the
 * other cases are refused with ncclInvalidUsage saying so.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_impl.h"

struct fp8_format {
    int mant_bits;   /* stored significand bits */
    int bias;
    double max;      /* largest finite value */
    int nan_is_max_code; /* e4m3: only 0x7f/0xff are NaN, no infinity; e5m2: IEEE-like */
};

static const struct fp8_format E4M3 = {3, 7, 448.0, 1};
static const struct fp8_format E5M2 = {2, 15, 57344.0, 0};

/* ranks whose product of 8-bit values stays exact in float64 */
#define PROD_MAX_RANKS(f) (53 / ((f)->mant_bits + 1))

static double fp8_decode(const struct fp8_format *f, uint8_t b) {
    int sign = b >> 7, exp_bits = 7 - f->mant_bits;
    int e = (b >> f->mant_bits) & ((1 << exp_bits) - 1), m = b & ((1 << f->mant_bits) - 1);
    int top = (1 << exp_bits) - 1;
    double v;
    if (f->nan_is_max_code && e == top && m == (1 << f->mant_bits) - 1) v = NAN;
    else if (!f->nan_is_max_code && e == top) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp(m, 1 - f->bias - f->mant_bits);
    else v = ldexp((1 << f->mant_bits) + m, e - f->bias - f->mant_bits);
    return sign ? -v : v;
}

static uint8_t fp8_encode(const struct fp8_format *f, double x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return 0x7f;
    double a = fabs(x);
    int emin = 1 - f->bias;
    uint8_t max_code = (uint8_t)(f->nan_is_max_code ? 0x7e : 0x7b);
    if (a >= f->max) return sign | max_code; /* saturated (infinity too) */
    if (a == 0) return sign;
    int e;
    frexp(a, &e);
    e -= 1; /* a = 1.x * 2^e */
    if (e < emin) e = emin;
    double r = nearbyint(ldexp(a, f->mant_bits - e)); /* significand in units of the last place, rounded to even */
    if (r >= (double)(2 << f->mant_bits)) r /= 2, e++;
    if (ldexp(r, e - f->mant_bits) > f->max) return sign | max_code;
    int m = (int)r;
    if (m < (1 << f->mant_bits)) return sign | (uint8_t)m; /* subnormal: e == emin */
    return sign | (uint8_t)(((e + f->bias) << f->mant_bits) | (m - (1 << f->mant_bits)));
}

ncclResult_t fp8_reduce(int kind, const void *send, void *recv, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream, const char *what) {
    const struct fp8_format *f = datatype == ncclFloat8e4m3 ? &E4M3 : &E5M2;
    int nranks = 1, me = 0;
    ccl_comm_size(comm->c, &nranks);
    ccl_comm_rank(comm->c, &me);
    char why[256];
    if ((unsigned)op >= ncclNumOps)
        return fail(ncclInvalidArgument, "%s: 8-bit floats take ncclSum, ncclProd, ncclMax, ncclMin or ncclAvg", what);
    if (stream || ccl_is_device_pointer(send) || ccl_is_device_pointer(recv)) {
        snprintf(why, sizeof why, "%s: 8-bit float reductions run on host buffers and the default stream only "
                 "(they are widened to float64 on the host)", what);
        return fail(ncclInvalidUsage, "%s", why);
    }
    if (nccl_group_depth > 0) {
        snprintf(why, sizeof why, "%s: an 8-bit float reduction cannot be queued in ncclGroupStart/End (its result "
                 "is rounded after the call): make it outside the group", what);
        return fail(ncclInvalidUsage, "%s", why);
    }
    if (op == ncclProd && nranks > PROD_MAX_RANKS(f)) {
        snprintf(why, sizeof why, "%s: a product of %d 8-bit floats may not be exact in float64 (at most %d ranks)",
                 what, nranks, PROD_MAX_RANKS(f));
        return fail(ncclInvalidUsage, "%s", why);
    }
    size_t in_n = kind == K_REDUCE_SCATTER ? count * (size_t)nranks : count;
    double *wide_in = malloc(in_n * sizeof(double) + 8), *wide_out = malloc(count * sizeof(double) + 8);
    if (!wide_in || !wide_out) {
        free(wide_in);
        free(wide_out);
        return fail(ncclSystemError, "%s: out of memory widening 8-bit floats", what);
    }
    const uint8_t *in = send;
    for (size_t i = 0; i < in_n; i++) wide_in[i] = fp8_decode(f, in[i]);
    ccl_op_t o = op == ncclAvg ? CCL_SUM : (ccl_op_t)op; /* the average: divided once, below */
    ccl_status_t st = kind == K_ALL_REDUCE ? ccl_all_reduce(wide_in, wide_out, count, CCL_FLOAT64, o, comm->c)
                      : kind == K_REDUCE   ? ccl_reduce(wide_in, wide_out, count, CCL_FLOAT64, o, root, comm->c)
                                           : ccl_reduce_scatter(wide_in, wide_out, count, CCL_FLOAT64, o, comm->c);
    if (st == CCL_OK && (kind != K_REDUCE || me == root)) {
        uint8_t *out = recv;
        for (size_t i = 0; i < count; i++)
            out[i] = fp8_encode(f, op == ncclAvg ? wide_out[i] / nranks : wide_out[i]);
    }
    free(wide_in);
    free(wide_out);
    return done(comm, st);
}
