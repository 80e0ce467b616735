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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "core/cma.h"
#include "core/log.h"
#include "core/socket.h"
#include "plan/cost.h"
#include "plan/plan.h"
#include "plan/tune.h"

/* What one rank found: err 0 (it reads every peer), -1 (switched off
 * there), or the errno of its first refused peer. */
struct verdict {
    int32_t err, peer;
    int64_t large; /* CCL_CMA_LARGE_PROBE: the large point this rank asks for (bytes), 0 none */
};

static struct verdict probe_peers(const struct ccl_comm *comm) {
    const struct ccl__peer_info *me = &comm->peers[comm->rank];
    if (!comm->params.single_copy) return (struct verdict){-1, comm->rank, 0};
    for (int q = 0; q < comm->nranks; q++) {
        if (q == comm->rank) continue;
        const struct ccl__peer_info *p = &comm->peers[q];
        /* A pid means the same process only within one PID namespace. */
        int err = !me->pid_ns || p->pid_ns != me->pid_ns ? EXDEV : ccl__cma_probe(p->pid, p->cma_probe);
        if (err) return (struct verdict){err, q, 0};
    }
    return (struct verdict){0, -1, 0};
}

/* Why the path is off (every rank keeps it, for a refused forced call;
 * rank 0 says it at INFO, once per process: every communicator would
 * find the same). */
static void say_off(struct ccl_comm *comm, int r, struct verdict v) {
    static int said;
    if (v.err < 0) {
        snprintf(comm->single_copy_off, sizeof comm->single_copy_off, "CCL_SINGLE_COPY=0 on rank %d", r);
    } else {
        const char *why = v.err == EXDEV  ? "the ranks are in different PID namespaces"
                          : v.err == EPERM ? "the kernel refuses cross-memory attach (Yama's ptrace_scope, a seccomp "
                                             "filter, or a container without CAP_SYS_PTRACE)"
                          : v.err == ENOSYS ? "this kernel has no cross-memory attach"
                                            : strerror(v.err);
        snprintf(comm->single_copy_off, sizeof comm->single_copy_off, "rank %d cannot read rank %d's memory: %s", r,
                 v.peer, why);
    }
    if (comm->rank == 0 && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "single-copy: off (%s): calls on one host copy through the "
                 "shared-memory slots", comm->single_copy_off);
}

#define PROBE_REPS 7
#define PROBE_SMALL 64 /* bytes: a call's own cost */
#define LARGE_PIECE (64u << 10) /* single_copy.c's PIECE_BYTES: the large point's reads, a call each */
/* A point-to-point message's read, in one call: what decides whether such
 * messages go single-copy (plan/model.c). 1 MiB is the middle of the sizes
 * that may (CCL_SHM_SINGLE_COPY_BYTES to CCL_SHM_SINGLE_COPY_MAX_BYTES). */
#define MSG_PROBE_BYTES (1u << 20)

static ccl_status_t gather(struct ccl_comm *comm, uint32_t *seq, const void *mine, void *all, size_t bytes) {
    return ccl__ring_gather_bytes(comm, CCL__SEQ_SINGLE_COPY | (*seq)++, mine, all, bytes);
}

/* What a read costs, each rank reading the next rank's buffer of `bytes`
 * while every rank does the same, in calls of `piece` bytes (the
 * single-copy algorithm's, for a large buffer): a small read (the call)
 * and the whole buffer, which its owner has just written, as a caller's
 * buffer is (at the probe's size its lines lie dirty in the owner's
 * cache; a large one is in no cache). *call_us and *bytes_per_us: medians
 * of the repetitions, then of the ranks, the same everywhere (0 where no
 * rank could read). */
static ccl_status_t measure(struct ccl_comm *comm, uint32_t *seq, size_t bytes, size_t piece, double *call_us,
                            double *bytes_per_us) {
    int n = comm->nranks, next = (comm->rank + 1) % n;
    char *buf = aligned_alloc(64, bytes + piece);
    uint64_t *addrs = calloc((size_t)n, sizeof(*addrs));
    double(*each)[2] = calloc((size_t)n, sizeof(*each)), small[PROBE_REPS], whole[PROBE_REPS];
    ccl_status_t st = addrs && each ? CCL_OK : ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    /* Without its buffer a rank still takes part (the peers wait on it),
     * measuring nothing; the figures are the others'. */
    uint64_t mine = (uint64_t)(uintptr_t)buf;
    if (st == CCL_OK) st = gather(comm, seq, &mine, addrs, sizeof mine);
    pid_t pid = comm->peers[next].pid;
    int err = buf && addrs && addrs[next] ? 0 : ENOMEM;
    char token = 0;
    for (int i = 0; i < PROBE_REPS && st == CCL_OK; i++) {
        if (buf) memset(buf, i + 1, bytes);
        st = gather(comm, seq, &token, each, 1); /* every buffer written */
        double t0 = ccl__now();
        if (!err) err = ccl__cma_read(pid, buf + bytes, addrs[next] + bytes - PROBE_SMALL, PROBE_SMALL);
        double t1 = ccl__now();
        for (size_t off = 0; off < bytes && !err; off += piece)
            err = ccl__cma_read(pid, buf + bytes, addrs[next] + off, bytes - off < piece ? bytes - off : piece);
        double t2 = ccl__now();
        small[i] = (t1 - t0) * 1e6, whole[i] = (t2 - t1) * 1e6;
        if (st == CCL_OK) st = gather(comm, seq, &token, each, 1); /* every read over */
    }
    double figures[2] = {0, 0};
    if (st == CCL_OK && !err) {
        double call = ccl__tune_median(small, PROBE_REPS), all = ccl__tune_median(whole, PROBE_REPS);
        /* One call: its cost comes off, as the model adds it apart. A
         * buffer read in pieces keeps theirs: the large point is the
         * algorithm's reads as they run (plan/cost.c). */
        double off = piece >= bytes ? call : 0;
        figures[0] = call, figures[1] = (double)bytes / fmax(all - off, all / 4);
    }
    if (st == CCL_OK) st = gather(comm, seq, figures, each, sizeof figures);
    *call_us = *bytes_per_us = 0;
    if (st == CCL_OK) {
        double call[64], speed[64]; /* ranks beyond these: their medians are the first 64's */
        int k = 0;
        for (int r = 0; r < n && k < 64; r++)
            if (each[r][1] > 0) call[k] = each[r][0], speed[k++] = each[r][1];
        if (k) *call_us = ccl__tune_median(call, k), *bytes_per_us = ccl__tune_median(speed, k);
    }
    free(buf), free(addrs), free(each);
    return st;
}

ccl_status_t ccl__plan_single_copy(struct ccl_comm *comm) {
    comm->single_copy = 0;
    int n = comm->nranks;
    /* The direct path's rounds order the algorithm's reads; its windows
     * are on or off alike everywhere, so every rank comes to the trade
     * below or none does. */
    if (n < 2 || !comm->windows) return CCL_OK;
    struct verdict mine = probe_peers(comm), *all = calloc((size_t)n, sizeof(*all));
    mine.large = (int64_t)comm->params.cma_large_probe;
    if (!all) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    uint32_t seq = 0;
    ccl_status_t st = gather(comm, &seq, &mine, all, sizeof mine);
    int off = -1;
    for (int r = 0; r < n && st == CCL_OK && off < 0; r++)
        if (all[r].err) off = r;
    if (st == CCL_OK && off >= 0) say_off(comm, off, all[off]);
    const struct ccl_comm *parent = comm->parent;
    if (st == CCL_OK && off < 0 && parent && parent->single_copy && parent->cma_bytes_per_us > 0) {
        /* Every rank's parent measured the same machine's reads, alike. */
        comm->single_copy = 1;
        comm->cma_call_us = parent->cma_call_us, comm->cma_bytes_per_us = parent->cma_bytes_per_us;
        comm->cma_large_bytes = parent->cma_large_bytes;
        comm->cma_large_bytes_per_us = parent->cma_large_bytes_per_us;
        comm->cma_msg_bytes = parent->cma_msg_bytes, comm->cma_msg_bytes_per_us = parent->cma_msg_bytes_per_us;
    } else if (st == CCL_OK && off < 0) {
        comm->single_copy = 1;
        double t0 = ccl__now();
        st = measure(comm, &seq, CCL__PROBE_BYTES, CCL__PROBE_BYTES, &comm->cma_call_us, &comm->cma_bytes_per_us);
        if (st == CCL_OK && comm->rank == 0)
            CCL_INFO(CCL__SUB_PLAN, comm->rank, "single-copy: on: every rank reads its peers' buffers through "
                     "cross-memory attach; a read costs %.2f us + %.2f GB/s (probed in %.1f ms)", comm->cma_call_us,
                     comm->cma_bytes_per_us / 1e3, (ccl__now() - t0) * 1e3);
        double call_us, msg_bytes_per_us = 0;
        if (st == CCL_OK) st = measure(comm, &seq, MSG_PROBE_BYTES, MSG_PROBE_BYTES, &call_us, &msg_bytes_per_us);
        if (st == CCL_OK && msg_bytes_per_us > 0) {
            comm->cma_msg_bytes = MSG_PROBE_BYTES;
            comm->cma_msg_bytes_per_us = MSG_PROBE_BYTES / (call_us + MSG_PROBE_BYTES / msg_bytes_per_us);
        }
        /* The large point, where a rank asked for it (ccl-tune does): the
         * largest size asked for anywhere, so that every rank measures it
         * or none does. */
        int64_t large = 0;
        for (int r = 0; r < n; r++)
            if (all[r].large > large) large = all[r].large;
        if (st == CCL_OK && large > 0) {
            st = measure(comm, &seq, (size_t)large, LARGE_PIECE, &call_us, &comm->cma_large_bytes_per_us);
            comm->cma_large_bytes = comm->cma_large_bytes_per_us > 0 ? (double)large : 0;
        }
    }
    free(all);
    return st;
}
