/*
 * Element types, reduction names, and the data of the check pass: inputs
 * chosen so that every reduced result (and every partial result on the way,
 * in any order) is exactly representable in every type, so the expected
 * output is known bit for bit and every mismatch is a real error.
 */
#ifndef BENCH_VALUES_H
#define BENCH_VALUES_H

#include <stddef.h>

#include "bench.h"

size_t bench_dtype_size(ccl_dtype_t dtype);
const char *bench_dtype_name(ccl_dtype_t dtype);
/* The ops the suite sweeps: the arithmetic ones, which every peer
 * library has (the bitwise ops are tested in tests/, not timed). */
#define BENCH_NUM_REDOPS CCL_BAND
const char *bench_redop_name(ccl_op_t op);
/* -1 when the name is unknown. Accepts nccl-tests' spellings too (float, half, double, int, char). */
int bench_dtype_parse(const char *name);
int bench_redop_parse(const char *name);

/* One check: which collective with which arguments, seen from one rank. */
struct bench_check_case {
    enum bench_coll coll;
    ccl_dtype_t dtype;
    ccl_op_t redop;
    int root;
    int nranks, rank;
    size_t count; /* the call's count argument (alltoallv: what this rank sends in all) */
    size_t size_bytes; /* alltoallv: the size its pattern divides (colls.h) */
};

/* Writes this rank's input: the whole send buffer of the call. */
void bench_fill_input(const struct bench_check_case *k, void *send);
/* How many elements this rank's output has (0 where the call writes none). */
size_t bench_output_elems(const struct bench_check_case *k);
/* How many of them differ, bit for bit, from the expected result. */
size_t bench_count_wrong(const struct bench_check_case *k, const void *recv);
/* The rank that the CCL_BENCH_CORRUPT self-test corrupts: 0, or the root
 * of a reduce (the only rank with an output). */
int bench_corrupt_rank(const struct bench_check_case *k);
/* Inverts every bit of one output element. */
void bench_corrupt_one(const struct bench_check_case *k, void *recv);

#endif
