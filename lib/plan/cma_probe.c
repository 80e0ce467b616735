/*
 * Whether the single-copy algorithm can run (algo/single_copy.c): every
 * rank tries to read every peer's probe word through cross-memory attach
 * (core/cma.h) and the ranks trade what they found, so that all decide
 * alike. The kernel may refuse one direction and allow the other (a peer
 * that is not dumpable, a different user), and a rank may have the path
 * switched off (CCL_SINGLE_COPY=0): any refusal anywhere leaves it off
 * everywhere, and calls copy through the shared-memory slots as before.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "core/cma.h"
#include "core/log.h"
#include "plan/plan.h"

/* What one rank found: err 0 (it reads every peer), -1 (switched off
 * there), or the errno of its first refused peer. */
struct verdict {
    int32_t err, peer;
};

static struct verdict probe_peers(const struct ccl_comm *comm) {
    const struct ccl__peer_info *me = &comm->peers[comm->rank];
    if (!comm->params.single_copy) return (struct verdict){-1, comm->rank};
    for (int q = 0; q < comm->nranks; q++) {
        if (q == comm->rank) continue;
        const struct ccl__peer_info *p = &comm->peers[q];
        /* A pid means the same process only within one PID namespace. */
        int err = !me->pid_ns || p->pid_ns != me->pid_ns ? EXDEV : ccl__cma_probe(p->pid, p->cma_probe);
        if (err) return (struct verdict){err, q};
    }
    return (struct verdict){0, -1};
}

static void say_off(const struct ccl_comm *comm, int r, struct verdict v) {
    static int said; /* once per process: every communicator would find the same */
    if (comm->rank != 0 || __atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) return;
    if (v.err < 0) {
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "single-copy: off (CCL_SINGLE_COPY=0 on rank %d): calls on one host "
                 "copy through the shared-memory slots", r);
        return;
    }
    const char *why = v.err == EXDEV  ? "the ranks are in different PID namespaces"
                      : v.err == EPERM ? "the kernel refuses cross-memory attach (Yama's ptrace_scope, a seccomp "
                                         "filter, or a container without CAP_SYS_PTRACE)"
                      : v.err == ENOSYS ? "this kernel has no cross-memory attach"
                                        : strerror(v.err);
    CCL_INFO(CCL__SUB_PLAN, comm->rank, "single-copy: off: rank %d cannot read rank %d's memory: %s; calls on one "
             "host copy through the shared-memory slots", r, v.peer, why);
}

ccl_status_t ccl__plan_single_copy(struct ccl_comm *comm) {
    comm->single_copy = 0;
    int n = comm->nranks;
    /* The direct path's rounds order the algorithm's reads; its windows
     * are on or off alike everywhere, so every rank comes to the trade
     * below or none does. */
    if (n < 2 || !comm->windows) return CCL_OK;
    struct verdict mine = probe_peers(comm), *all = calloc((size_t)n, sizeof(*all));
    if (!all) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    ccl_status_t st = ccl__ring_gather_bytes(comm, CCL__SEQ_SINGLE_COPY, &mine, all, sizeof mine);
    int off = -1;
    for (int r = 0; r < n && st == CCL_OK && off < 0; r++)
        if (all[r].err) off = r;
    if (st == CCL_OK && off >= 0) say_off(comm, off, all[off]);
    if (st == CCL_OK && off < 0) {
        comm->single_copy = 1;
        if (comm->rank == 0)
            CCL_INFO(CCL__SUB_PLAN, comm->rank, "single-copy: on: every rank reads its peers' buffers through "
                 "cross-memory attach");
    }
    free(all);
    return st;
}
