/*
 * Reductions: one table indexed by [dtype][op]. Every algorithm reduces
 * through it, so each (dtype, op) pair has exactly one definition of what
 * "reduce" means (rounding, NaN handling, integer wrap-around).
 */
#ifndef CCL_REDUCE_H
#define CCL_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "ccl.h"

/* dst[i] = a[i] OP b[i] for i < n elements. dst may alias a or b (exactly,
 * not partially). For CCL_AVG this is the sum: the division by the rank count
 * happens once, at the end, through ccl__reduce_div. */
typedef void (*ccl__reduce_fn)(void *dst, const void *a, const void *b, size_t n);

/* The table entry: NULL for an invalid dtype or op, or a bitwise op on a
 * float type, else never. */
ccl__reduce_fn ccl__reduce_get(ccl_dtype_t dtype, ccl_op_t op);

/* buf[i] = buf[i] / divisor in the element type (integers truncate toward
 * zero; float16/bfloat16 round to nearest even). Used to finish CCL_AVG. */
void ccl__reduce_div(void *buf, size_t n, ccl_dtype_t dtype, int divisor);

/* The same without the AVX2 kernels: what a CPU without them runs. Both
 * give the same bits; tests hold each to the same references. */
ccl__reduce_fn ccl__reduce_get_baseline(ccl_dtype_t dtype, ccl_op_t op);
void ccl__reduce_div_baseline(void *buf, size_t n, ccl_dtype_t dtype, int divisor);

/* IEEE binary16 and bfloat16 conversions, round to nearest even, NaN kept
 * NaN (quiet), infinities kept. Exposed for tests and tools. */
float ccl__half_to_float(uint16_t h);
uint16_t ccl__float_to_half(float f);
float ccl__bf16_to_float(uint16_t h);
uint16_t ccl__float_to_bf16(float f);

#endif
