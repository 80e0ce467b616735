/* The algorithm and chunking of each call: CCL_ALGO when it names one,
 * else the cost model's cheapest (plan/cost.c). */
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

int ccl__plan_coll_by_name(const char *s, size_t len) {
    char flat[32];
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < sizeof flat; i++)
        if (s[i] != '_') flat[k++] = s[i];
    flat[k] = 0;
    for (size_t i = 0; i < sizeof coll_names / sizeof coll_names[0]; i++)
        if (strcmp(flat, coll_names[i].name) == 0) return coll_names[i].kind;
    return -1;
}

static ccl_status_t bad_algo(struct ccl_comm *comm, const char *what, const char *spec, size_t len) {
    return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                          "%s: %s=%s: '%.*s' is not an algorithm (ring, tree, rd, rhd, bruck, pairwise, "
                          "direct, hier, single_copy, auto) or collective:algorithm",
                          what, comm->params.algo_source, comm->params.algo, (int)len, spec);
}

/* "auto": the planner's choice, nothing forced. */
static int names_auto(const char *s, size_t len) { return len == 4 && memcmp(s, "auto", 4) == 0; }

ccl_status_t ccl__plan_parse_algo(struct ccl_comm *comm, const char *what) {
    memset(comm->algo_forced, -1, sizeof comm->algo_forced);
    memset(comm->algo_last, -1, sizeof comm->algo_last);
    if (comm->params.algo_too_long)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: %s='%s...' is longer than %zu characters", what,
                              comm->params.algo_source, comm->params.algo, sizeof comm->params.algo - 1);
    const char *s = comm->params.algo;
    while (*s) {
        size_t len = strcspn(s, ",");
        const char *colon = memchr(s, ':', len);
        if (!colon && !names_auto(s, len)) { /* a plain "auto" forces nothing */
            int algo = ccl__algo_by_name(s, len);
            if (algo < 0) return bad_algo(comm, what, s, len);
            /* One name: every collective it runs. */
            for (int k = 1; k < CCL__NUM_OP_KINDS; k++)
                if (k != CCL__K_P2P && (!ccl__algos[algo] || ccl__algos[algo]->run[k])) comm->algo_forced[k] = (signed char)algo;
        } else if (colon) {
            int kind = ccl__plan_coll_by_name(s, (size_t)(colon - s));
            size_t alen = len - (size_t)(colon - s) - 1;
            int open = names_auto(colon + 1, alen);
            int algo = open ? -1 : ccl__algo_by_name(colon + 1, alen);
            if (kind < 0 || (algo < 0 && !open)) return bad_algo(comm, what, s, len);
            comm->algo_forced[kind] = (signed char)algo;
        }
        s += len;
        if (*s == ',') s++;
    }
    return CCL_OK;
}

/* Why the model picked p (the why string is written only when someone
 * reads it: a formatted float costs as much as a small call's work). */
static void model_why(const struct ccl__cost_pick *p, char *why, size_t whylen) {
    if (p->next >= 0)
        snprintf(why, whylen, "cheapest: %.2f us; %s %.2f us", p->us, ccl__algo_names[p->next], p->next_us);
    else snprintf(why, whylen, "the only one: %.2f us", p->us);
}

ccl__algo_fn ccl__plan_call(struct ccl_comm *comm, struct ccl__coll_args *a) {
    int kind = a->id.kind, algo = a->planner_only ? -1 : comm->algo_forced[kind];
    char why[64];
    memcpy(why, comm->params.algo_source, sizeof comm->params.algo_source); /* NUL-terminated, and cheap per call */
    if (a->block_stride && a->block_stride != a->id.count) {
        /* a piece of a cut call: its blocks lie apart, which only the ring
         * takes (every rank cut alike, so every rank runs it) */
        algo = CCL__ALGO_RING;
        snprintf(why, sizeof why, "a piece of a cut call");
    }
    const char *what = ccl__op_kind_name(kind);
    struct ccl__cost_pick pick = {.algo = -1};
    size_t bytes = a->id.count * ccl_dtype_size(a->id.dtype);
    if (algo < 0) {
        /* the model's cheapest for a call CCL_ALGO leaves open */
        pick = ccl__plan_model_choose(comm, kind, bytes);
        algo = pick.algo;
    }
    if (algo < 0) {
        ccl__set_error(comm, CCL_ERR_INTERNAL, "%s: no algorithm runs this call", what);
        return NULL;
    }
    const struct ccl__algo *al = ccl__algos[algo];
    if (!al) {
        ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: %s=%s: %s is not available in this version of libccl",
                       what, comm->params.algo_source, comm->params.algo, ccl__algo_names[algo]);
        return NULL;
    }
    if (!al->run[kind]) {
        ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: %s=%s: %s does not run %s", what,
                       comm->params.algo_source, comm->params.algo, al->name, what);
        return NULL;
    }
    char reason[160];
    if (al->can_run && !al->can_run(comm, a, reason, sizeof reason)) {
        ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: %s=%s cannot run this call: %s", what,
                       comm->params.algo_source, comm->params.algo, reason);
        return NULL;
    }
    a->plan.algo = algo;
    /* The chunk the model runs this algorithm with (or CCL_CHUNK_BYTES):
     * never more than a slot of the links it uses, which the model's
     * shape holds (ring_chunk_bytes, chunk_bytes). */
    a->plan.chunk_bytes = pick.algo >= 0 ? pick.chunk : ccl__plan_model_chunk(comm, kind, algo, bytes);
    int logged = CCL__LOG_ON(CCL__LOG_INFO, CCL__SUB_COLL);
    if (pick.algo >= 0 && (logged || comm->algo_last[kind] != algo)) model_why(&pick, why, sizeof why);
    if (comm->algo_last[kind] != algo) {
        comm->algo_last[kind] = (signed char)algo;
        snprintf(comm->algo_why[kind], sizeof comm->algo_why[kind], "%s", why);
    }
    if (logged)
        CCL_INFO(CCL__SUB_COLL, comm->rank, "%s #%u: %llu x %s on %d ranks: %s (%s), chunk %zu bytes (%llu of them)",
                 what, a->id.seq, (unsigned long long)a->id.count, ccl_dtype_name(a->id.dtype), comm->nranks,
                 al->name, why, a->plan.chunk_bytes,
                 (unsigned long long)(bytes ? (bytes + a->plan.chunk_bytes - 1) / a->plan.chunk_bytes : 0));
    return al->run[kind];
}
