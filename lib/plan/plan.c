/* Transport per peer, ring order, algorithm per call. */
#include "plan/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

ccl_status_t ccl__plan_transports(struct ccl_comm *comm, uint8_t *use[CCL__NUM_TRANSPORTS]) {
    const struct ccl__transport *forced = NULL;
    if (comm->params.transport[0]) {
        forced = ccl__transport_by_name(comm->params.transport);
        if (!forced)
            return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "init: CCL_TRANSPORT=%s is not a transport (shm, tcp)",
                                  comm->params.transport);
    }
    const struct ccl__peer_info *me = &comm->peers[comm->rank];
    for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank) continue;
        const struct ccl__peer_info *peer = &comm->peers[p];
        int best = -1, best_score = 0;
        for (int t = 0; t < CCL__NUM_TRANSPORTS; t++) {
            const struct ccl__transport *tr = ccl__transports[t];
            if (forced && tr != forced) continue;
            int s = tr->can_connect(me, peer);
            if (s > best_score) best = t, best_score = s;
        }
        if (best < 0) {
            if (forced)
                return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                                      "init: CCL_TRANSPORT=%s cannot connect rank %d (%s) to rank %d (%s)",
                                      forced->name, comm->rank, me->hostname, p, peer->hostname);
            return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "init: no transport connects rank %d (%s) to rank %d (%s)",
                                  comm->rank, me->hostname, p, peer->hostname);
        }
        use[best][p] = 1;
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "rank %d -> rank %d (%s) via %s", comm->rank, p, peer->hostname,
                 ccl__transports[best]->name);
    }
    return CCL_OK;
}

ccl_status_t ccl__plan_ring(struct ccl_comm *comm) {
    int n = comm->nranks;
    comm->ring = malloc(sizeof(int) * (size_t)n);
    if (!comm->ring) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    int *placed = calloc((size_t)n, sizeof(int));
    if (!placed) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    int k = 0;
    for (int first = 0; first < n; first++) {
        if (placed[first]) continue;
        for (int r = first; r < n; r++)
            if (!placed[r] && strcmp(comm->peers[r].host_id, comm->peers[first].host_id) == 0) {
                placed[r] = 1;
                comm->ring[k++] = r;
            }
    }
    free(placed);
    for (int i = 0; i < n; i++)
        if (comm->ring[i] == comm->rank) comm->ring_pos = i;
    if (CCL__LOG_ON(CCL__LOG_INFO, CCL__SUB_PLAN) && comm->rank == 0) {
        char line[512];
        size_t o = 0;
        for (int i = 0; i < n && o + 16 < sizeof(line); i++)
            o += (size_t)snprintf(line + o, sizeof(line) - o, "%s%d", i ? " -> " : "", comm->ring[i]);
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "ring: %s%s", line, o + 16 >= sizeof(line) ? " ..." : "");
    }
    return CCL_OK;
}

ccl__algo_fn ccl__plan_algo(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    ccl__algo_fn fn = NULL;
    switch (a->id.kind) {
    case CCL__K_ALL_REDUCE: fn = ccl__ring_all_reduce; break;
    case CCL__K_REDUCE_SCATTER: fn = ccl__ring_reduce_scatter; break;
    case CCL__K_ALL_GATHER: fn = ccl__ring_all_gather; break;
    case CCL__K_BROADCAST: fn = ccl__ring_broadcast; break;
    case CCL__K_REDUCE: fn = ccl__ring_reduce; break;
    case CCL__K_BARRIER: fn = ccl__ring_barrier; break;
    case CCL__K_ALL_TO_ALL: fn = ccl__direct_all_to_all; break;
    default: break;
    }
    CCL_TRACE(CCL__SUB_PLAN, comm->rank, "%s #%u count %llu %s: %s", ccl__op_kind_name(a->id.kind), a->id.seq,
              (unsigned long long)a->id.count, ccl_dtype_name(a->id.dtype),
              a->id.kind == CCL__K_ALL_TO_ALL ? "direct" : "ring");
    return fn;
}
