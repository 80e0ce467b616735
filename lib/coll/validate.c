/* Argument checks: bad arguments change nothing and leave the
 * communicator usable. */
#include <stdint.h>

#include "coll/coll.h"

ccl_status_t ccl__check_comm(const struct ccl_comm *comm, const char *what) {
    if (!comm) return CCL_ERR_INVALID_ARGUMENT;
    if (!ccl__registry_has(comm)) return CCL_ERR_INVALID_USAGE;
    (void)what;
    return CCL_OK;
}

ccl_status_t ccl__check_req(struct ccl_comm *comm, int async, ccl_request_t **req, const char *what) {
    if (async && !req) return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: req is NULL", what);
    if (req) *req = NULL;
    return CCL_OK;
}

ccl_status_t ccl__check_dtype(struct ccl_comm *comm, ccl_dtype_t dtype, const char *what) {
    if ((unsigned)dtype >= CCL_NUM_DTYPES)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: invalid dtype %d", what, (int)dtype);
    return CCL_OK;
}

ccl_status_t ccl__check_count(struct ccl_comm *comm, size_t count, size_t mult, ccl_dtype_t dtype, const char *what) {
    size_t es = ccl_dtype_size(dtype), bytes;
    if (mult == 0) mult = 1;
    /* Multiplied with overflow checks, not compared against quotients: the
     * four divisions took 3-4% of an 8-byte all-reduce's call. */
    if (__builtin_mul_overflow(count, es, &bytes) || __builtin_mul_overflow(bytes, mult, &bytes) ||
        bytes > (size_t)INT64_MAX)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: count %zu of %s (x%zu) overflows the byte size",
                              what, count, ccl_dtype_name(dtype), mult);
    return CCL_OK;
}

ccl_status_t ccl__check_coll(struct ccl_comm *comm, const struct ccl__coll_args *a, const char *what) {
    CCL_CHECK(ccl__check_dtype(comm, a->id.dtype, what));
    int k = a->id.kind, n = comm->nranks;
    int reducing = ccl__kind_reduces(k);
    /* ccl__op_take vetted the op already; this catches a path that skipped it. */
    if (reducing && !ccl__op_fits(a->id.op, a->id.dtype) && a->id.op != CCL__OP_PREMUL_SUM)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: invalid op %d", what, (int)a->id.op);
    if (k == CCL__K_BROADCAST || k == CCL__K_REDUCE)
        if (a->id.root < 0 || a->id.root >= n)
            return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: root %d is not a rank (0..%d)", what,
                                  a->id.root, n - 1);
    size_t smult, rmult;
    ccl__coll_extent(comm, a, &smult, &rmult);
    CCL_CHECK(ccl__check_count(comm, a->id.count, smult > rmult ? smult : rmult, a->id.dtype, what));
    if (a->id.count == 0) return CCL_OK;
    int need_send = smult != 0, need_recv = rmult != 0;
    if (need_send && !a->sendbuf)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: sendbuf is NULL with count %zu", what,
                              (size_t)a->id.count);
    if (need_recv && !a->recvbuf)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: recvbuf is NULL with count %zu", what,
                              (size_t)a->id.count);
    if (k == CCL__K_ALL_TO_ALL && a->sendbuf == a->recvbuf)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: in-place is not supported (sendbuf == recvbuf)",
                              what);
    return CCL_OK;
}

ccl_status_t ccl__check_p2p(struct ccl_comm *comm, const void *buf, size_t count, ccl_dtype_t dtype, int peer,
                            const char *what) {
    CCL_CHECK(ccl__check_dtype(comm, dtype, what));
    if (peer < 0 || peer >= comm->nranks)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: peer %d is not a rank (0..%d)", what, peer,
                              comm->nranks - 1);
    CCL_CHECK(ccl__check_count(comm, count, 1, dtype, what));
    if (count && !buf)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: buf is NULL with count %zu", what, count);
    return CCL_OK;
}
