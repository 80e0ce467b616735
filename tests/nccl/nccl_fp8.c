/*
 * NCCL's 8-bit floats through libccl-nccl, on host buffers: every
 * reduction (sum, average, min, max, product) of ncclFloat8e4m3 and
 * ncclFloat8e5m2 by all-reduce (in place and out), reduce and
 * reduce-scatter, against a reference computed here: the exact result,
 * rounded to the nearest 8-bit value found by searching all of them (ties
 * to the even code), saturating at the largest finite one. The inputs are
 * every finite code but -0 (zero's sign under min and max would depend on
 * the order ranks combine), so subnormals, the extremes and sums that
 * saturate all occur. Then the calls that only move bytes, and the
 * refusals: a reduction inside a group, on a stream, a premultiplied sum.
 *
 *   nccl_fp8 [NRANKS]      (1 to 5; default 3)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"
#include "nccl/check.h"
#include "spawn_ranks.h"

static int rank, nranks, fails;

struct format {
    ncclDataType_t type;
    const char *name;
    int exp_bits, mant_bits, bias;
    int ieee_top; /* e5m2: the top exponent is infinity and NaN; e4m3: only S.1111.111 is NaN */
};
static const struct format formats[] = {{ncclFloat8e4m3, "e4m3", 4, 3, 7, 0}, {ncclFloat8e5m2, "e5m2", 5, 2, 15, 1}};

/* The value of a code; NaN for the codes that are not finite numbers. */
static double value_of(const struct format *f, uint8_t c) {
    int e = (c >> f->mant_bits) & ((1 << f->exp_bits) - 1), m = c & ((1 << f->mant_bits) - 1);
    int top = (1 << f->exp_bits) - 1;
    if ((f->ieee_top && e == top) || (!f->ieee_top && e == top && m == (1 << f->mant_bits) - 1)) return NAN;
    double frac = (double)m / (1 << f->mant_bits);
    double v = e == 0 ? frac * pow(2, 1 - f->bias) : (1 + frac) * pow(2, e - f->bias);
    return c & 0x80 ? -v : v;
}

/* The nearest finite code to x (ties: the even code), the largest finite
 * one beyond it; zero keeps x's sign. */
static uint8_t nearest(const struct format *f, double x) {
    int best = -1;
    double best_d = INFINITY;
    for (int c = 0; c < 256; c++) {
        double v = value_of(f, (uint8_t)c);
        if (isnan(v) || (signbit(v) != signbit(x))) continue;
        double d = fabs(v - x);
        if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
    }
    return (uint8_t)best;
}

/* Rank r's element i: a finite code other than -0, spread over them all. */
static uint8_t input(const struct format *f, int r, size_t i, int salt) {
    uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 40503u) ^ (uint32_t)(salt * 97u);
    for (;;) {
        h = h * 1103515245u + 12345u;
        uint8_t c = (uint8_t)(h >> 16);
        if (c != 0x80 && !isnan(value_of(f, c))) return c;
    }
}

static uint8_t expected(const struct format *f, ncclRedOp_t op, size_t i, int salt) {
    double acc = value_of(f, input(f, 0, i, salt));
    for (int r = 1; r < nranks; r++) {
        double v = value_of(f, input(f, r, i, salt));
        acc = op == ncclProd ? acc * v : op == ncclMax ? (v > acc ? v : acc) : op == ncclMin ? (v < acc ? v : acc) : acc + v;
    }
    return nearest(f, op == ncclAvg ? acc / nranks : acc);
}

static void check_bytes(const uint8_t *got, const uint8_t *want, size_t n, const char *what, const struct format *f,
                        int op, size_t count) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            CHECK(0, "%s %s op %d count %zu: element %zu is 0x%02x, want 0x%02x", what, f->name, op, count, i, got[i],
                  want[i]);
            return;
        }
}

static void reductions(ncclComm_t comm, const struct format *f) {
    static const size_t counts[] = {0, 1, 1031};
    uint8_t *in = malloc(1031 * 5), *out = malloc(1031 * 5), *want = malloc(1031 * 5);
    for (int op = 0; op < ncclNumOps; op++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            size_t n = counts[k];
            int salt = op * 7 + (int)k;
            for (size_t i = 0; i < n; i++) in[i] = input(f, rank, i, salt), want[i] = expected(f, op, i, salt);
            NCCL_OK(ncclAllReduce(in, out, n, f->type, op, comm, NULL));
            check_bytes(out, want, n, "ncclAllReduce", f, op, n);
            NCCL_OK(ncclAllReduce(in, in, n, f->type, op, comm, NULL)); /* in place */
            check_bytes(in, want, n, "ncclAllReduce in place", f, op, n);
            for (size_t i = 0; i < n; i++) in[i] = input(f, rank, i, salt);
            memset(out, 0xee, n);
            NCCL_OK(ncclReduce(in, out, n, f->type, op, nranks - 1, comm, NULL));
            if (rank == nranks - 1) check_bytes(out, want, n, "ncclReduce", f, op, n);
            /* reduce-scatter: this rank's block is elements [rank n, rank n + n) */
            for (size_t i = 0; i < n * (size_t)nranks; i++) in[i] = input(f, rank, i, salt);
            for (size_t i = 0; i < n; i++) want[i] = expected(f, op, (size_t)rank * n + i, salt);
            NCCL_OK(ncclReduceScatter(in, out, n, f->type, op, comm, NULL));
            check_bytes(out, want, n, "ncclReduceScatter", f, op, n);
        }
    free(in);
    free(out);
    free(want);
}

/* The calls that move bytes: any code, NaNs included, arrives unchanged. */
static void moving(ncclComm_t comm, const struct format *f) {
    const size_t n = 1031;
    uint8_t *in = malloc(n * 5), *out = malloc(n * 5), *want = malloc(n * 5);
    for (size_t i = 0; i < n; i++) in[i] = (uint8_t)(rank * 31 + i * 7);
    for (int r = 0; r < nranks; r++)
        for (size_t i = 0; i < n; i++) want[(size_t)r * n + i] = (uint8_t)(r * 31 + i * 7);
    NCCL_OK(ncclAllGather(in, out, n, f->type, comm, NULL));
    check_bytes(out, want, n * (size_t)nranks, "ncclAllGather", f, -1, n);
    memcpy(out, in, n);
    NCCL_OK(ncclBcast(out, n, f->type, 0, comm, NULL));
    check_bytes(out, want, n, "ncclBcast", f, -1, n);
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(in, n, f->type, next, comm, NULL));
    NCCL_OK(ncclRecv(out, n, f->type, prev, comm, NULL));
    NCCL_OK(ncclGroupEnd());
    check_bytes(out, want + (size_t)prev * n, n, "ncclSend/ncclRecv", f, -1, n);
    free(in);
    free(out);
    free(want);
}

static void refusals(ncclComm_t comm) {
    uint8_t b[4] = {0x38, 0x38, 0x38, 0x38};
    NCCL_OK(ncclGroupStart());
    ncclResult_t r = ncclAllReduce(b, b, 4, ncclFloat8e4m3, ncclSum, comm, NULL);
    CHECK(r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "group"), "an fp8 reduction in a group: %d (%s)", r,
          ncclGetLastError(NULL));
    NCCL_OK(ncclGroupEnd());
    r = ncclAllReduce(b, b, 4, ncclFloat8e5m2, ncclSum, comm, (cudaStream_t)(uintptr_t)0x1000);
    CHECK(r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "default stream"), "an fp8 reduction on a stream: %d (%s)",
          r, ncclGetLastError(NULL));
    ncclRedOp_t op;
    uint8_t two = 0x40;
    r = ncclRedOpCreatePreMulSum(&op, &two, ncclFloat8e4m3, ncclScalarHostImmediate, comm);
    CHECK(r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "8-bit"), "an fp8 premultiplied sum: %d (%s)", r,
          ncclGetLastError(NULL));
    /* a premultiplied sum in a group is refused too (its scaled copy lives for the call alone) */
    int32_t three = 3, x[4] = {1, 2, 3, 4};
    NCCL_OK(ncclRedOpCreatePreMulSum(&op, &three, ncclInt32, ncclScalarHostImmediate, comm));
    NCCL_OK(ncclGroupStart());
    r = ncclAllReduce(x, x, 4, ncclInt32, op, comm, NULL);
    CHECK(r == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "group"), "a premultiplied sum in a group: %d (%s)", r,
          ncclGetLastError(NULL));
    NCCL_OK(ncclGroupEnd());
    NCCL_OK(ncclRedOpDestroy(op, comm));
    /* the communicator is still good */
    NCCL_OK(ncclAllReduce(b, b, 4, ncclFloat8e4m3, ncclMax, comm, NULL));
    CHECK(b[0] == 0x38, "max of 1.0 on every rank is 0x%02x", b[0]);
}

static int rank_main(int r, const void *id) {
    rank = r;
    ncclComm_t comm = NULL;
    NCCL_OK(ncclCommInitRank(&comm, nranks, *(const ncclUniqueId *)id, rank));
    if (!comm) return 1;
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
        reductions(comm, &formats[k]);
        moving(comm, &formats[k]);
    }
    refusals(comm);
    NCCL_OK(ncclCommDestroy(comm));
    return fails != 0;
}

static int make_id(void *id) { return ncclGetUniqueId(id) != ncclSuccess; }

int main(int argc, char **argv) {
    nranks = argc > 1 ? atoi(argv[1]) : 3;
    if (nranks < 1 || nranks > 5) {
        fprintf(stderr, "usage: nccl_fp8 [NRANKS, 1 to 5]\n");
        return 2;
    }
    int bad = spawn_ranks(nranks, sizeof(ncclUniqueId), make_id, rank_main, 120);
    printf("nccl_fp8: %d ranks: %s\n", nranks, bad ? "FAILED" : "every check passed");
    return bad;
}
