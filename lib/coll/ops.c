/* Reduction ops made at run time (premultiplied sums), the check that an
 * op fits its call, and the premultiplication itself, done where a call
 * runs so that everything after it is a plain CCL_SUM. */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "reduce/reduce.h"

CCL_API ccl_status_t ccl_op_create_premul_sum(ccl_comm_t *comm, ccl_dtype_t dtype, const void *scalar,
                                              ccl_op_t *op) {
    const char *what = "op_create_premul_sum";
    CCL_CHECK(ccl__check_comm(comm, what));
    CCL_CHECK(ccl__check_dtype(comm, dtype, what));
    if (!scalar || !op)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: %s is NULL", what, scalar ? "op" : "scalar");
    struct ccl__made_ops *m = &comm->made_ops;
    pthread_mutex_lock(&m->lock);
    int slot = 0;
    while (slot < m->n && m->slots[slot].live) slot++;
    if (slot == m->n) {
        /* Grows by half again; ops are few and long-lived, or made and
         * destroyed around each call (which reuses the first free slot). */
        int cap = m->n + m->n / 2 + 8;
        struct ccl__made_op *grown = realloc(m->slots, (size_t)cap * sizeof(*grown));
        if (!grown || cap > (int)(0x7fffffffu - CCL__OP_MADE_FIRST)) {
            if (grown) m->slots = grown;
            pthread_mutex_unlock(&m->lock);
            return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: no room for another op (%d made)", what, m->n);
        }
        memset(grown + m->n, 0, (size_t)(cap - m->n) * sizeof(*grown));
        m->slots = grown;
        m->n = cap;
    }
    struct ccl__made_op *o = &m->slots[slot];
    o->live = 1;
    o->dtype = dtype;
    memset(o->scalar, 0, sizeof o->scalar);
    memcpy(o->scalar, scalar, ccl_dtype_size(dtype));
    pthread_mutex_unlock(&m->lock);
    *op = (ccl_op_t)(CCL__OP_MADE_FIRST + (unsigned)slot);
    return CCL_OK;
}

CCL_API ccl_status_t ccl_op_destroy(ccl_comm_t *comm, ccl_op_t op) {
    const char *what = "op_destroy";
    CCL_CHECK(ccl__check_comm(comm, what));
    struct ccl__made_ops *m = &comm->made_ops;
    unsigned slot = (unsigned)op - CCL__OP_MADE_FIRST;
    pthread_mutex_lock(&m->lock);
    int live = (unsigned)op >= CCL__OP_MADE_FIRST && slot < (unsigned)m->n && m->slots[slot].live;
    if (live) m->slots[slot].live = 0;
    pthread_mutex_unlock(&m->lock);
    if (!live)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: op %d is not a live op made on this communicator",
                              what, (int)op);
    return CCL_OK;
}

ccl_status_t ccl__op_take(struct ccl_comm *comm, struct ccl__coll_args *a, const char *what) {
    if (!ccl__kind_reduces(a->id.kind)) return CCL_OK;
    CCL_CHECK(ccl__check_dtype(comm, a->id.dtype, what));
    unsigned op = (unsigned)a->id.op;
    if (op < CCL_NUM_OPS) {
        if (ccl__op_fits(a->id.op, a->id.dtype)) return CCL_OK;
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: op %s is for integer dtypes, not %s", what,
                              ccl_op_name(a->id.op), ccl_dtype_name(a->id.dtype));
    }
    if (op < CCL__OP_MADE_FIRST)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: invalid op %d", what, (int)a->id.op);
    struct ccl__made_ops *m = &comm->made_ops;
    unsigned slot = op - CCL__OP_MADE_FIRST;
    struct ccl__made_op o = {0};
    pthread_mutex_lock(&m->lock);
    if (slot < (unsigned)m->n) o = m->slots[slot];
    pthread_mutex_unlock(&m->lock);
    if (!o.live)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "%s: op %d is not a live op of this communicator (destroyed, or never made)", what,
                              (int)a->id.op);
    if (o.dtype != a->id.dtype)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: the premul_sum op was made for %s, the call is of %s",
                              what, ccl_dtype_name(o.dtype), ccl_dtype_name(a->id.dtype));
    memcpy(a->premul, o.scalar, sizeof a->premul);
    a->id.op = CCL__OP_PREMUL_SUM;
    return CCL_OK;
}

/* dst = src * scalar over n elements, through the CCL_PROD kernel (its
 * rounding and NaN rule) against a block of copies of the scalar. */
static void scale(void *dst, const void *src, size_t n, ccl_dtype_t dtype, const unsigned char *scalar) {
    enum { BLOCK = 4096 };
    size_t es = ccl_dtype_size(dtype), per = BLOCK / es;
    _Alignas(64) unsigned char copies[BLOCK];
    for (size_t i = 0; i < per; i++) memcpy(copies + i * es, scalar, es);
    ccl__reduce_fn prod = ccl__reduce_get(dtype, CCL_PROD);
    for (size_t at = 0; at < n; at += per) {
        size_t k = n - at < per ? n - at : per;
        prod((char *)dst + at * es, (const char *)src + at * es, copies, k);
    }
}

ccl_status_t ccl__premul_apply(struct ccl_comm *comm, struct ccl__coll_args *a, void **scratch) {
    *scratch = NULL;
    a->id.op = CCL_SUM;
    size_t es = ccl_dtype_size(a->id.dtype), n = a->id.count;
    if (n == 0) return CCL_OK;
    int kind = a->id.kind, root = kind == CCL__K_REDUCE && a->id.root == comm->rank;
    void *into;
    size_t elems = n;
    if (kind == CCL__K_ALL_REDUCE || root) {
        into = a->recvbuf; /* the output; the call then runs in place */
    } else {
        /* A reduce-scatter's whole input, or a reduce's off the root: the
         * user's sendbuf stays as it was. */
        if (kind == CCL__K_REDUCE_SCATTER) elems = n * (size_t)comm->nranks;
        into = *scratch = malloc(elems * es);
        if (!into)
            return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory for the premultiplied input (%zu bytes)",
                                  ccl__op_kind_name(kind), elems * es);
    }
    if (kind == CCL__K_REDUCE_SCATTER && a->block_stride) {
        /* a piece of a cut call: its blocks lie apart, the scaled copy's
         * side by side */
        for (int r = 0; r < comm->nranks; r++)
            scale((char *)into + (size_t)r * n * es, (const char *)a->sendbuf + (size_t)r * a->block_stride * es, n,
                  a->id.dtype, a->premul);
        a->block_stride = 0;
    } else {
        scale(into, a->sendbuf, elems, a->id.dtype, a->premul);
    }
    a->sendbuf = into;
    return CCL_OK;
}
