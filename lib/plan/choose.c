/* The algorithm and chunking of each call: CCL_ALGO when it names one,
 * else a rule on message size and rank count. */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "plan/plan.h"

/* CCL_ALGO's collective names (NCCL's spelling; underscores accepted). */
static const struct {
    const char *name;
    int kind;
} coll_names[] = {
    {"allreduce", CCL__K_ALL_REDUCE}, {"reducescatter", CCL__K_REDUCE_SCATTER}, {"allgather", CCL__K_ALL_GATHER},
    {"broadcast", CCL__K_BROADCAST},  {"reduce", CCL__K_REDUCE},                {"alltoall", CCL__K_ALL_TO_ALL},
    {"barrier", CCL__K_BARRIER},
};

static int coll_by_name(const char *s, size_t len) {
    char flat[32];
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < sizeof flat; i++)
        if (s[i] != '_') flat[k++] = s[i];
    flat[k] = 0;
    for (size_t i = 0; i < sizeof coll_names / sizeof coll_names[0]; i++)
        if (strcmp(flat, coll_names[i].name) == 0) return coll_names[i].kind;
    return -1;
}

static ccl_status_t bad_algo(struct ccl_comm *comm, const char *spec, size_t len) {
    return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                          "init: CCL_ALGO=%s: '%.*s' is not an algorithm (ring, tree, rd, rhd, bruck, pairwise, "
                          "direct, hier) or collective:algorithm",
                          comm->params.algo, (int)len, spec);
}

ccl_status_t ccl__plan_parse_algo(struct ccl_comm *comm) {
    memset(comm->algo_forced, -1, sizeof comm->algo_forced);
    memset(comm->algo_last, -1, sizeof comm->algo_last);
    const char *s = comm->params.algo;
    while (*s) {
        size_t len = strcspn(s, ",");
        const char *colon = memchr(s, ':', len);
        if (!colon) {
            int algo = ccl__algo_by_name(s, len);
            if (algo < 0) return bad_algo(comm, s, len);
            /* One name: every collective it runs. */
            for (int k = 1; k < CCL__NUM_OP_KINDS; k++)
                if (k != CCL__K_P2P && (!ccl__algos[algo] || ccl__algos[algo]->run[k])) comm->algo_forced[k] = (signed char)algo;
        } else {
            int kind = coll_by_name(s, (size_t)(colon - s));
            int algo = ccl__algo_by_name(colon + 1, len - (size_t)(colon - s) - 1);
            if (kind < 0 || algo < 0) return bad_algo(comm, s, len);
            comm->algo_forced[kind] = (signed char)algo;
        }
        s += len;
        if (*s == ',') s++;
    }
    return CCL_OK;
}

/* On one host with the direct path: where reading peers' windows in place
 * beat the FIFO algorithms in bench/algo-table runs on a 2-core machine
 * (2-8 ranks), or -1. The 2-rank ring keeps large all-reduces: with one
 * peer, the ring's pipeline already moves each byte once. */
static int auto_one_host(const struct ccl_comm *comm, const struct ccl__coll_args *a, size_t bytes, const char **why) {
    int n = comm->nranks;
    if (!comm->windows) return -1;
    *why = "one host: peers' windows in place";
    switch (a->id.kind) {
    case CCL__K_ALL_REDUCE: return n > 2 || bytes <= 131072 ? CCL__ALGO_DIRECT : -1;
    case CCL__K_ALL_GATHER: return bytes * (size_t)n > 4096 ? CCL__ALGO_DIRECT : -1;
    case CCL__K_BROADCAST: return bytes > 16384 && bytes <= (4u << 20) ? CCL__ALGO_DIRECT : -1;
    case CCL__K_REDUCE_SCATTER: return bytes * (size_t)n <= 65536 ? CCL__ALGO_DIRECT : -1;
    default: return -1;
    }
}

/* The rule for calls CCL_ALGO leaves open: on one host the direct path
 * where it won; else few steps for small messages, the bandwidth-optimal
 * ring for large ones. */
static int auto_algo(const struct ccl_comm *comm, const struct ccl__coll_args *a, const char **why) {
    int n = comm->nranks;
    size_t bytes = a->id.count * ccl_dtype_size(a->id.dtype);
    int direct = auto_one_host(comm, a, bytes, why);
    if (direct >= 0) return direct;
    switch (a->id.kind) {
    case CCL__K_ALL_REDUCE:
        if (bytes <= 16384) return *why = "small: fewest steps", CCL__ALGO_RD;
        if (bytes <= 262144 && n > 2) return *why = "mid-size: halving then doubling", CCL__ALGO_RHD;
        return *why = "large: bandwidth-optimal", CCL__ALGO_RING;
    case CCL__K_BROADCAST:
    case CCL__K_REDUCE:
        if (bytes <= 262144 || n > 8) return *why = "log2 N hops", CCL__ALGO_TREE;
        return *why = "large: pipelined chain", CCL__ALGO_RING;
    case CCL__K_ALL_GATHER:
        if (bytes * (size_t)n <= 65536) return *why = "small: ceil(log2 N) steps", CCL__ALGO_BRUCK;
        return *why = "large: bandwidth-optimal", CCL__ALGO_RING;
    case CCL__K_ALL_TO_ALL:
        if (bytes <= 256 && n > 2) return *why = "small blocks: ceil(log2 N) steps", CCL__ALGO_BRUCK;
        return *why = "every pair at once", CCL__ALGO_DIRECT;
    case CCL__K_BARRIER: return *why = "ceil(log2 N) empty messages", CCL__ALGO_BRUCK;
    default: return *why = "only one", CCL__ALGO_RING;
    }
}

ccl__algo_fn ccl__plan_call(struct ccl_comm *comm, struct ccl__coll_args *a) {
    int kind = a->id.kind, algo = comm->algo_forced[kind];
    const char *why = "CCL_ALGO";
    const char *what = ccl__op_kind_name(kind);
    if (algo < 0) algo = auto_algo(comm, a, &why);
    const struct ccl__algo *al = ccl__algos[algo];
    if (!al) {
        ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: CCL_ALGO=%s: %s is not available in this version of libccl",
                       what, comm->params.algo, ccl__algo_names[algo]);
        return NULL;
    }
    if (!al->run[kind]) {
        ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: CCL_ALGO=%s: %s does not run %s", what, comm->params.algo,
                       al->name, what);
        return NULL;
    }
    char reason[160];
    if (al->can_run && !al->can_run(comm, a, reason, sizeof reason)) {
        ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: CCL_ALGO=%s cannot run this call: %s", what, comm->params.algo,
                       reason);
        return NULL;
    }
    a->plan.algo = algo;
    a->plan.chunk_bytes = algo == CCL__ALGO_RING ? comm->ring_chunk_bytes : comm->chunk_bytes;
    if (comm->algo_last[kind] != algo) {
        comm->algo_last[kind] = (signed char)algo;
        snprintf(comm->algo_why[kind], sizeof comm->algo_why[kind], "%s", why);
    }
    CCL_INFO(CCL__SUB_COLL, comm->rank, "%s #%u: %llu x %s on %d ranks: %s (%s), chunk %zu bytes", what, a->id.seq,
             (unsigned long long)a->id.count, ccl_dtype_name(a->id.dtype), comm->nranks, al->name, why,
             a->plan.chunk_bytes);
    return al->run[kind];
}
