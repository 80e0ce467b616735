/*
 * Inputs and exact references for the correctness matrix.
 *
 * Every rank can compute any rank's input and the exact result of any
 * reduction without talking to anyone. Inputs are built so that every
 * reduction is exact in any order: element i of rank r combines a part
 * that depends on i only (a hash, so no two positions look alike) with a
 * part that depends on r and i mod REF_PERIOD (a small table). The
 * reference then costs O(count + nranks * REF_PERIOD), not O(count * nranks):
 *   SUM, AVG: x = a(i) + g(r, k)    -> N*a(i) + sum_r g(r, k)
 *   PROD:     x = a(i) * g(r, k)    -> a(i)^N * prod_r g(r, k)
 *   MAX, MIN: x = a(i) + g(r, k)    -> a(i) + max_r g(r, k)
 *   BAND:     x = a(i) | g(r, k)    -> a(i) | and_r g(r, k)  (BOR, BXOR alike)
 * with ranges chosen per dtype and op so that nothing overflows where that
 * matters (integer SUM/PROD wrap by definition and may use every bit;
 * floats stay exactly representable: dyadic values with few bits, products
 * of powers of two).
 */
#ifndef CCL_TEST_REF_H
#define CCL_TEST_REF_H

#include <stddef.h>
#include <stdint.h>

#include "ccl.h"
#include "harness.h"

#define REF_PERIOD 67 /* prime: never a divisor of a power-of-two chunk size */
#define REF_MAX_RANKS HARNESS_MAX_RANKS

/* One reduction problem: the same on every rank. */
struct ref_case {
    ccl_dtype_t dtype;
    ccl_op_t op;
    int nranks;
    uint64_t seed;
};

/* 1 when op reduces dtype: the bitwise ops are for integers only. */
int ref_op_applies(ccl_dtype_t dtype, ccl_op_t op);

/* A hash of three words: the source of every "random" value here. */
uint64_t ref_mix(uint64_t seed, uint64_t a, uint64_t b);

/* Elements [first, first + n) of rank `rank`'s input into buf. */
void ref_reduce_input(const struct ref_case *c, int rank, size_t first, size_t n, void *buf);
/* Elements [first, first + n) of the reduced result into buf. */
void ref_reduce_expected(const struct ref_case *c, size_t first, size_t n, void *buf);

/* Data-movement payload: arbitrary bytes (every bit pattern, NaNs too) of
 * rank `rank`'s buffer, starting at byte `first`. */
void ref_bytes(uint64_t seed, int rank, size_t first, size_t nbytes, void *buf);

/* float16 / bfloat16 conversions written here (round to nearest even), so
 * the reference does not trust the library's own. */
uint16_t ref_float_to_half(float f);
float ref_half_to_float(uint16_t h);
uint16_t ref_float_to_bf16(float f);
float ref_bf16_to_float(uint16_t h);

/* Element i of buf as text ("-3", "0x7e00 (nan)", "1.5"), for messages. */
void ref_format_elem(ccl_dtype_t dtype, const void *buf, size_t i, char *out, size_t n);
/* Index of the first element where a and b differ bytewise, or SIZE_MAX. */
size_t ref_first_diff(ccl_dtype_t dtype, const void *a, const void *b, size_t count);

/* ---- guarded buffers ----
 * Guard bytes before and after the region a call may touch, checked after
 * the call: a collective must not write outside the buffers it was given. */
#define TBUF_GUARD 64
struct tbuf {
    uint8_t *base;
    size_t cap;       /* bytes usable between the guards */
    size_t offset;    /* where the data starts after the front guard */
    size_t bytes;     /* size armed by tbuf_arm */
};
int tbuf_alloc(struct tbuf *b, size_t cap);
void tbuf_free(struct tbuf *b);
/* Data pointer for `bytes` bytes starting `misalign` bytes after an aligned
 * address; guards are refilled around it. */
void *tbuf_arm(struct tbuf *b, size_t bytes, size_t misalign);
void *tbuf_data(const struct tbuf *b);
/* 1 if both guards still hold their pattern. */
int tbuf_guards_ok(const struct tbuf *b);
/* Fill with the "never written" pattern. */
/* The byte tbuf_poison fills with. */
#define POISON_BYTE 0xcd
void tbuf_poison(struct tbuf *b);
int tbuf_is_poison(const struct tbuf *b);

#endif
