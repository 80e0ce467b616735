/*
 * Algorithms, written once against the primitives (never against a
 * transport). Each takes a fully validated call.
 */
#ifndef CCL_ALGO_H
#define CCL_ALGO_H

#include "core/comm.h"
#include "prims/prims.h"

struct ccl__coll_args {
    struct ccl__coll_id id; /* kind, seq, count, dtype, op, root */
    const void *sendbuf;
    void *recvbuf;
};

/* Ring algorithms: all_reduce (reduce-scatter then all-gather, each rank
 * sending 2(N-1)/N of the data), reduce_scatter, all_gather, broadcast and
 * reduce (a pipelined chain along the ring), barrier (a one-byte
 * all_reduce). */
ccl_status_t ccl__ring_all_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a);
ccl_status_t ccl__ring_reduce_scatter(struct ccl_comm *comm, const struct ccl__coll_args *a);
ccl_status_t ccl__ring_all_gather(struct ccl_comm *comm, const struct ccl__coll_args *a);
ccl_status_t ccl__ring_broadcast(struct ccl_comm *comm, const struct ccl__coll_args *a);
ccl_status_t ccl__ring_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a);
ccl_status_t ccl__ring_barrier(struct ccl_comm *comm, const struct ccl__coll_args *a);
/* Every pair exchanges directly; all transfers progress together. */
ccl_status_t ccl__direct_all_to_all(struct ccl_comm *comm, const struct ccl__coll_args *a);

#endif
