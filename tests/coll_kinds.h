/*
 * The collectives by number, for tests that run each of them on device
 * buffers against the same call on host buffers (tests/cuda/cuda_device.c,
 * test_stream_host.c): the call, and how many bytes it reads and writes.
 * Roots are rank 0.
 */
#ifndef CCL_TESTS_COLL_KINDS_H
#define CCL_TESTS_COLL_KINDS_H

#include "ccl.h"

enum coll_kind { COLL_AR, COLL_RS, COLL_AG, COLL_BC, COLL_RD, COLL_A2A, COLL_KINDS };

static inline ccl_status_t coll_kind_call(int k, const void *s, void *r, size_t n, ccl_dtype_t dt, ccl_op_t op,
                                          ccl_comm_t *c) {
    switch (k) {
    case COLL_AR: return ccl_all_reduce(s, r, n, dt, op, c);
    case COLL_RS: return ccl_reduce_scatter(s, r, n, dt, op, c);
    case COLL_AG: return ccl_all_gather(s, r, n, dt, c);
    case COLL_BC: return ccl_broadcast(s, r, n, dt, 0, c);
    case COLL_RD: return ccl_reduce(s, r, n, dt, op, 0, c);
    default: return ccl_all_to_all(s, r, n, dt, c);
    }
}

/* The bytes call k with count n reads (*in) and writes (*out) on a rank. */
static inline void coll_kind_bytes(int k, size_t n, int nranks, size_t es, size_t *in, size_t *out) {
    *in = (k == COLL_RS || k == COLL_A2A ? n * (size_t)nranks : n) * es;
    *out = (k == COLL_AG || k == COLL_A2A ? n * (size_t)nranks : n) * es;
}

#endif
