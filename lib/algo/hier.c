/*
 * Hierarchical all-reduce for several hosts, three rings:
 *   1. inside each host, a reduce-scatter of the buffer split into L blocks
 *      (L ranks per host): the rank at place i of its host holds block i
 *      summed over its host;
 *   2. across hosts, an all-reduce of block i among the ranks at place i
 *      of every host (comm->across): block i summed over everyone;
 *   3. inside each host, an all-gather of the L blocks.
 * Each byte crosses between hosts 2(H-1)/H times per place instead of the
 * flat ring's once per hop through every rank, and the H-rank rings across
 * hosts run side by side, one per place. Every host must have as many
 * ranks (the places must pair up); the planner records that in
 * comm->across.
 *
 * Sums are grouped by host, then across hosts: a float result may differ
 * from the flat ring's in the last bits, never between ranks or runs.
 */
#include <stdio.h>

#include "algo/algo.h"

static ccl_status_t hier_all_reduce(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    int H = comm->nhosts, h = comm->host, first = comm->host_first[h];
    int L = comm->host_first[h + 1] - first, place = comm->ring_pos - first;
    int div = a->id.op == CCL_AVG ? comm->nranks : 0;
    size_t count = a->id.count, es = ccl_dtype_size(a->id.dtype);
    /* The sum is complete after step 1 on one host, after step 2 otherwise:
     * divide there, once. */
    /* The trace numbers the three rings' steps one after another; block i
     * inside a host is chunk i, sub-block b of place i across hosts is
     * chunk L + i H + b. */
    struct ccl__ring_spec inside = {.what = CCL__RING_REDUCE_SCATTER, .n = L, .pos = place,
                                    .order = comm->ring + first, .blk = comm->identity, .div = H == 1 ? div : 0,
                                    .trace_algo = CCL__TR_HIER};
    if (L > 1) CCL_CHECK(ccl__ring_run(comm, a, &inside));
    else ccl__algo_local_copy(a, count);

    size_t off = ccl__block_off(count, L, place), len = ccl__block_len(count, L, place);
    if (H > 1 && len) {
        struct ccl__coll_args block = *a;
        block.id.count = len;
        block.recvbuf = (char *)a->recvbuf + off * es;
        block.sendbuf = block.recvbuf;
        struct ccl__ring_spec across = {.what = CCL__RING_ALL_REDUCE, .n = H, .pos = h, .order = comm->across,
                                        .blk = comm->identity, .div = div, .trace_algo = CCL__TR_HIER,
                                        .step_base = L - 1, .chunk_base = L + place * H, .elem_base = off};
        CCL_CHECK(ccl__ring_run(comm, &block, &across));
    }

    if (L == 1) return CCL_OK;
    inside.what = CCL__RING_ALL_GATHER;
    inside.div = 0;
    inside.step_base = L - 1 + 2 * (H - 1);
    return ccl__ring_run(comm, a, &inside);
}

static int hier_can_run(const struct ccl_comm *comm, const struct ccl__coll_args *a, char *why, size_t whylen) {
    (void)a;
    if (comm->across) return 1;
    int k = 1;
    while (k + 1 < comm->nhosts &&
           comm->host_first[k + 1] - comm->host_first[k] == comm->host_first[1] - comm->host_first[0])
        k++;
    snprintf(why, whylen, "hier needs as many ranks on every host (host of rank %d has %d, host of rank %d has %d)",
             comm->ring[0], comm->host_first[1] - comm->host_first[0], comm->ring[comm->host_first[k]],
             comm->host_first[k + 1] - comm->host_first[k]);
    return 0;
}

const struct ccl__algo ccl__algo_hier = {
    .name = "hier",
    .summary = "several hosts: reduce-scatter inside each host, all-reduce of each block across hosts, all-gather "
               "inside each host",
    .run = {[CCL__K_ALL_REDUCE] = hier_all_reduce},
    .can_run = hier_can_run,
};
