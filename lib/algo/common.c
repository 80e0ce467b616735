/* The algorithm registry and the pieces every algorithm shares. */
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"

const struct ccl__algo *const ccl__algos[CCL__NUM_ALGOS] = {
    [CCL__ALGO_RING] = &ccl__algo_ring,   [CCL__ALGO_TREE] = &ccl__algo_tree,
    [CCL__ALGO_RD] = &ccl__algo_rd,       [CCL__ALGO_RHD] = &ccl__algo_rhd,
    [CCL__ALGO_BRUCK] = &ccl__algo_bruck, [CCL__ALGO_PAIRWISE] = &ccl__algo_pairwise,
    [CCL__ALGO_DIRECT] = &ccl__algo_direct, [CCL__ALGO_HIER] = &ccl__algo_hier,
    [CCL__ALGO_SINGLE_COPY] = &ccl__algo_single_copy,
};

const char *const ccl__algo_names[CCL__NUM_ALGOS] = {"ring",  "tree",     "rd",     "rhd",
                                                    "bruck", "pairwise", "direct", "hier",
                                                    "single_copy"};

char *ccl__fold_scratch(struct ccl_comm *comm, size_t bytes) {
    if (comm->fold_scratch_bytes < bytes) {
        free(comm->fold_scratch);
        comm->fold_scratch_bytes = 0;
        if (!(comm->fold_scratch = aligned_alloc(64, bytes))) return NULL;
        comm->fold_scratch_bytes = bytes;
    }
    return comm->fold_scratch;
}

int ccl__algo_by_name(const char *name, size_t len) {
    for (int i = 0; i < CCL__NUM_ALGOS; i++)
        if (strlen(ccl__algo_names[i]) == len && strncmp(ccl__algo_names[i], name, len) == 0) return i;
    return -1;
}

int ccl__algo_output_streams(const struct ccl_comm *comm, int mem, size_t output_bytes, int output_was_read) {
    return mem == CCL__MEM_HOST && !output_was_read && output_bytes >= comm->stream_bytes;
}

void ccl__algo_local_copy(const struct ccl__coll_args *a, size_t count) {
    if (a->sendbuf != a->recvbuf && count) memcpy(a->recvbuf, a->sendbuf, count * ccl_dtype_size(a->id.dtype));
}

size_t ccl__block_off(size_t count, int n, int b) {
    size_t base = count / (size_t)n, extra = count % (size_t)n;
    return (size_t)b * base + ((size_t)b < extra ? (size_t)b : extra);
}

size_t ccl__block_len(size_t count, int n, int b) {
    return count / (size_t)n + ((size_t)b < count % (size_t)n);
}

void ccl__coll_extent(const struct ccl_comm *comm, const struct ccl__coll_args *a, size_t *smult, size_t *rmult) {
    ccl__coll_extent_of(comm, a, comm->rank, smult, rmult);
}

void ccl__coll_span(const struct ccl_comm *comm, const struct ccl__coll_args *a, size_t *send_bytes,
                    size_t *recv_bytes) {
    size_t smult, rmult, es = ccl_dtype_size(a->id.dtype), count = a->id.count;
    ccl__coll_extent(comm, a, &smult, &rmult);
    *send_bytes = count * es * smult;
    *recv_bytes = count * es * rmult;
    if (!a->block_stride || !count) return;
    /* N blocks of count, block_stride apart */
    size_t strided = ((size_t)(comm->nranks - 1) * a->block_stride + count) * es;
    if (a->id.kind == CCL__K_REDUCE_SCATTER) *send_bytes = strided;
    if (a->id.kind == CCL__K_ALL_GATHER) *recv_bytes = strided;
}

void ccl__coll_extent_of(const struct ccl_comm *comm, const struct ccl__coll_args *a, int rank, size_t *smult,
                         size_t *rmult) {
    size_t n = (size_t)comm->nranks;
    int root = a->id.root == rank;
    switch (a->id.kind) {
    case CCL__K_REDUCE_SCATTER: *smult = n, *rmult = 1; break;
    case CCL__K_ALL_GATHER: *smult = 1, *rmult = n; break;
    case CCL__K_ALL_TO_ALL: *smult = n, *rmult = n; break;
    case CCL__K_BROADCAST: *smult = root, *rmult = 1; break; /* only the root's sendbuf is read */
    case CCL__K_REDUCE: *smult = 1, *rmult = root; break;    /* only the root's recvbuf is written */
    case CCL__K_BARRIER: *smult = 0, *rmult = 0; break;
    default: *smult = 1, *rmult = 1; break;
    }
}
