/* All-to-all as point-to-point transfers: `direct` (the direct algorithm's
 * all-to-all, algo/direct.c) posts every pair's transfer at once and
 * progresses them together; `pairwise` runs N-1 rounds, in round k sending
 * to r + k and receiving from r - k, so each link carries one exchange at a
 * time (kinder to a congested network). */
#include <stdlib.h>

#include "algo/algo.h"

/* The transfer of block `peer` to or from that peer, in step `step` of
 * `algo` for the trace (*label holds its labels). */
static struct ccl__p2p_xfer xfer(const struct ccl__coll_args *a, int peer, int is_send, int algo, int step,
                                 struct ccl__p2p_label *label) {
    size_t bytes = a->id.count * ccl_dtype_size(a->id.dtype);
    void *buf = is_send ? (char *)a->sendbuf + (size_t)peer * bytes : (char *)a->recvbuf + (size_t)peer * bytes;
    *label = (struct ccl__p2p_label){.seq = a->id.seq,
                                     .tr = {.algo = (uint8_t)algo, .recv_phase = CCL__TR_P2P, .send_phase = CCL__TR_P2P,
                                            .recv_step = is_send ? -1 : step, .send_step = is_send ? step : -1,
                                            .chunk = peer, .offset = (uint64_t)peer * bytes}};
    return (struct ccl__p2p_xfer){.peer = peer, .is_send = is_send, .buf = buf, .count = a->id.count,
                                  .dtype = a->id.dtype, .label = label, .coll = a->id};
}

ccl_status_t ccl__direct_all_to_all(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    int n = comm->nranks;
    struct ccl__p2p_xfer *x = calloc((size_t)n * 2, sizeof(*x));
    struct ccl__p2p_label *labels = calloc((size_t)n * 2, sizeof(*labels));
    if (!x || !labels) {
        free(x);
        free(labels);
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "all_to_all: out of memory");
    }
    /* Start with the next peer so that not every rank sends to rank 0 first. */
    for (int i = 0; i < n; i++) {
        x[2 * i] = xfer(a, (comm->rank + i) % n, 1, CCL__TR_DIRECT, 0, &labels[2 * i]);
        x[2 * i + 1] = xfer(a, ccl__mod(comm->rank - i, n), 0, CCL__TR_DIRECT, 0, &labels[2 * i + 1]);
    }
    ccl_status_t st = ccl__p2p_run(comm, x, 2 * n, CCL__K_ALL_TO_ALL, "all_to_all");
    free(x);
    free(labels);
    return st;
}

static ccl_status_t pairwise_all_to_all(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    int n = comm->nranks, r = comm->rank;
    for (int k = 0; k < n; k++) {
        struct ccl__p2p_label labels[2];
        struct ccl__p2p_xfer x[2] = {xfer(a, (r + k) % n, 1, CCL__TR_PAIRWISE, k, &labels[0]),
                                     xfer(a, ccl__mod(r - k, n), 0, CCL__TR_PAIRWISE, k, &labels[1])};
        CCL_CHECK(ccl__p2p_run(comm, x, 2, CCL__K_ALL_TO_ALL, "all_to_all"));
    }
    return CCL_OK;
}

const struct ccl__algo ccl__algo_pairwise = {
    .name = "pairwise",
    .summary = "N-1 rounds of one exchange each: all-to-all",
    .run = {[CCL__K_ALL_TO_ALL] = pairwise_all_to_all},
};
