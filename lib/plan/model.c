/*
 * The cost model of one communicator: the job's shape, built from the
 * peer table and the plan exactly alike on every rank, and figures every
 * rank holds alike (tune.c), so every rank picks the same algorithm for a
 * call without a word exchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "plan/cost.h"
#include "plan/plan.h"
#include "plan/tune.h"

struct ccl__cost_state {
    struct ccl__job_shape shape;
    struct ccl__figures fig;
    /* The last call of each kind: trainers repeat sizes, and a repeat
     * skips the model. */
    struct {
        size_t bytes;
        struct ccl__cost_pick pick;
        /* and whether the zero-copy path pays at zc_bytes (-1: not asked) */
        size_t zc_bytes;
        int zc_pays;
    } last[CCL__MAX_OP_KINDS];
    /* The same for a call whose algorithm CCL_ALGO fixed: its chunk. */
    struct {
        size_t bytes, chunk;
        int algo;
    } forced[CCL__MAX_OP_KINDS];
};

/* The link class of the transport connecting a and b: its own for a
 * network or device transport, -1 for shared memory (the places decide).
 * A pair no transport connects counts as the slowest network link. */
static int pair_transport_class(void *ctx, int a, int b) {
    int t = ccl__plan_pair_transport(ctx, a, b);
    if (t < 0) return CCL__LINK_UNCONNECTED;
    const char *c = ccl__transports[t]->link_class;
    return c ? ccl__link_by_name(c) : -1;
}

int ccl__plan_shm_class(const struct ccl__place *p, const struct ccl__place *q) {
    if (p->package >= 0 && q->package >= 0 && p->package != q->package) return CCL__LINK_XPACKAGE;
    if (p->numa >= 0 && q->numa >= 0 && p->numa != q->numa) return CCL__LINK_XNUMA;
    return CCL__LINK_NUMA; /* unknown places count as one NUMA node: nothing says otherwise */
}

/* Ranks per CPU on the busiest machine, at least 1. Its CPUs are those
 * its ranks share, pinned or not (counting a pinned rank's one CPU made a
 * second communicator of a pinned 2-rank job see 2 ranks per CPU where its
 * first saw 1, and choose otherwise). */
static double oversubscription(int n, const struct ccl__peer_info *peers) {
    double worst = 1;
    for (int r = 0; r < n; r++) {
        int index, local = ccl__plan_machine_ranks_of(n, peers, r, &index);
        if (index != 0) continue; /* each machine once, from its first rank */
        int cpus = ccl__plan_machine_cpus(n, peers, r);
        if (cpus > 0 && (double)local / cpus > worst) worst = (double)local / cpus;
    }
    return worst;
}

int ccl__plan_shape(int n, const struct ccl__peer_info *peers, const int *ring, int (*pair_class)(void *, int, int),
                    void *ctx, struct ccl__job_shape *out) {
    uint8_t *cls = malloc((size_t)n * (size_t)n);
    int *host_of = malloc(sizeof(int) * (size_t)n), *core_of = malloc(sizeof(int) * (size_t)n);
    struct ccl__place *places = malloc(sizeof(*places) * (size_t)n);
    int ok = cls && host_of && core_of && places;
    if (ok) {
        ccl__plan_places(n, peers, places);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                int c = i == j ? 0 : pair_class(ctx, i, j);
                cls[i * n + j] = (uint8_t)(c >= 0 ? c : ccl__plan_shm_class(&places[i], &places[j]));
            }
        /* Hosts numbered in ring order, as plan_hosts does. */
        int nhosts = 0;
        for (int i = 0; i < n; i++) {
            int r = ring[i], h = -1;
            for (int k = 0; k < i && h < 0; k++)
                if (strcmp(peers[ring[k]].host_id, peers[r].host_id) == 0) h = host_of[ring[k]];
            host_of[r] = h >= 0 ? h : nhosts++;
        }
        for (int r = 0; r < n; r++) core_of[r] = places[r].core;
        ccl__cost_shape(out, n, cls, ring, host_of, core_of);
        out->oversub = oversubscription(n, peers);
    }
    free(cls), free(host_of), free(core_of), free(places);
    return ok ? 0 : -1;
}

/* Whether point-to-point messages move single-copy through the kernel
 * (comm->cma_p2p_bytes, and with it the ring's whole blocks): as the
 * transport is set where the user set it; else off where init's read of a
 * 1 MiB message in one call ran at less than half the local copy's speed.
 * The slots move a message as two copies, the sender's and the
 * receiver's, at best overlapped on two cores (memcpy's rate) and at worst
 * on one (half of it): a read slower than half a memcpy loses to them
 * wherever the ranks run. On the 2-core development machine the kernel's
 * copy once ran at two thirds of memcpy's speed and single-copy won from
 * 512 KiB (transports/shm/shm.c); under a later kernel it read 1 MiB at
 * 10-12 GB/s against memcpy's 38, and 2 ranks' 1 MiB send/recv took 2.9x
 * as long single-copy, their ring all-reduce at 1-4 MiB 1.6-2x. Every rank
 * holds the same figures, so all decide alike. */
static void plan_p2p_single_copy(struct ccl_comm *comm, const struct ccl__cost_state *s) {
    const struct ccl__transport *t = NULL;
    for (int i = 0; i < ccl__ntransports && !t; i++)
        if (ccl__transports[i]->zc_by_cma && ccl__transports[i]->zc_offer) t = ccl__transports[i];
    comm->cma_p2p_bytes = 0;
    if (!t || !comm->single_copy) return;
    const void *k = ccl__tknobs(comm, t);
    size_t set = t->zc_min_bytes(k);
    comm->cma_p2p_bytes = set;
    if (!set || (t->zc_min_told && t->zc_min_told(k)) || comm->cma_msg_bytes_per_us <= 0) return;
    double read = comm->cma_msg_bytes_per_us, copy = s->fig.copy_bytes_per_us;
    if (!ccl__cost_kernel_read_pays(&s->fig, read)) comm->cma_p2p_bytes = 0;
    if (comm->rank == 0)
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "single-copy point-to-point: %s: the kernel read %.0f KiB at %.2f GB/s, "
                 "memcpy %.2f GB/s%s", comm->cma_p2p_bytes ? "on" : "off", comm->cma_msg_bytes / 1024, read / 1e3,
                 copy / 1e3, comm->cma_p2p_bytes ? "" : " (CCL_SHM_SINGLE_COPY_BYTES sets a size)");
}

ccl_status_t ccl__plan_model(struct ccl_comm *comm) {
    struct ccl__cost_state *s = calloc(1, sizeof(*s));
    if (!s) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    comm->cost = s;
    for (int k = 0; k < CCL__MAX_OP_KINDS; k++) s->last[k].pick.algo = s->last[k].zc_pays = s->forced[k].algo = -1;
    if (ccl__plan_shape(comm->nranks, comm->peers, comm->ring, pair_transport_class, comm, &s->shape) != 0)
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "init: out of memory");
    s->shape.windows = comm->windows != NULL;
    s->shape.single_copy = comm->single_copy;
    s->shape.ring_chunk = comm->ring_chunk_bytes;
    s->shape.any_chunk = comm->chunk_bytes;
    s->shape.window_area = comm->windows ? ccl__direct_area(comm->window_bytes) : 0;
    CCL_CHECK(ccl__tune_figures(comm, &s->shape, &s->fig));
    plan_p2p_single_copy(comm, s);
    ccl__plan_ring_zc(comm);
    /* Waits may learn to yield through a chunk's step over the slowest link (plan.h). */
    ccl__plan_waiting_links(comm, comm->ring_chunk_bytes,
                            ccl__cost_step_us(&s->shape, &s->fig, s->shape.ring_links | s->shape.all_links,
                                              (double)comm->ring_chunk_bytes));
    if (comm->rank == 0 && CCL__LOG_ON(CCL__LOG_INFO, CCL__SUB_PLAN)) {
        char line[512];
        ccl__tune_describe(&s->fig, s->shape.ring_links | s->shape.all_links, line, sizeof line);
        CCL_INFO(CCL__SUB_PLAN, comm->rank, "model: %d ranks, %d hosts, %.2f ranks per CPU; %s", comm->nranks,
                 s->shape.nhosts, s->shape.oversub, line);
    }
    return CCL_OK;
}

double ccl__plan_estimate_us(struct ccl_comm *comm, int kind, size_t bytes) {
    if (!comm->cost) return 0;
    int algo = comm->algo_forced[kind];
    if (algo >= 0) {
        double us = ccl__plan_model_predict(comm, kind, algo, bytes, 0);
        return us > 0 ? us : 0;
    }
    struct ccl__cost_pick p = ccl__plan_model_choose(comm, kind, bytes);
    return p.algo >= 0 && p.us > 0 ? p.us : 0;
}

double ccl__plan_estimate_p2p_us(struct ccl_comm *comm, int peer, size_t bytes) {
    if (!comm->cost || peer < 0 || peer >= comm->nranks || peer == comm->rank) return 0;
    int c = pair_transport_class(comm, comm->rank, peer);
    if (c < 0) { /* shared memory: the two ranks' places decide */
        struct ccl__place pl[2];
        struct ccl__peer_info two[2] = {comm->peers[comm->rank], comm->peers[peer]};
        ccl__plan_places(2, two, pl);
        c = ccl__plan_shm_class(&pl[0], &pl[1]);
    }
    return ccl__cost_step_us(&comm->cost->shape, &comm->cost->fig, 1u << c, (double)bytes);
}

const struct ccl__figures *ccl__plan_model_figures(const struct ccl_comm *comm) {
    return comm->cost ? &comm->cost->fig : NULL;
}

void ccl__plan_model_free(struct ccl_comm *comm) {
    free(comm->cost);
    comm->cost = NULL;
}

struct ccl__cost_pick ccl__plan_model_choose(struct ccl_comm *comm, int kind, size_t bytes) {
    struct ccl__cost_state *s = comm->cost;
    if (s->last[kind].pick.algo >= 0 && s->last[kind].bytes == bytes) return s->last[kind].pick;
    struct ccl__cost_pick p = ccl__cost_choose(&s->shape, &s->fig, kind, bytes, comm->params.chunk_bytes);
    s->last[kind].bytes = bytes;
    s->last[kind].pick = p;
    return p;
}

int ccl__plan_model_zero_copy_pays(struct ccl_comm *comm, int kind, size_t bytes) {
    struct ccl__cost_state *s = comm->cost;
    /* Asked before every call on a communicator with shared allocations:
     * a repeat must cost nothing (working it out again made 8-byte
     * all-reduces on 2 ranks 0.1-0.2 us slower, a third of their time). */
    if (s->last[kind].zc_pays >= 0 && s->last[kind].zc_bytes == bytes) return s->last[kind].zc_pays;
    double zc = ccl__cost_zero_copy_us(&s->shape, &s->fig, kind, bytes);
    struct ccl__cost_pick p = ccl__plan_model_choose(comm, kind, bytes);
    s->last[kind].zc_bytes = bytes;
    s->last[kind].zc_pays = zc >= 0 && (p.algo < 0 || zc < p.us);
    return s->last[kind].zc_pays;
}

size_t ccl__plan_model_chunk(struct ccl_comm *comm, int kind, int algo, size_t bytes) {
    struct ccl__cost_state *s = comm->cost;
    if (s->forced[kind].algo == algo && s->forced[kind].bytes == bytes) return s->forced[kind].chunk;
    size_t chunk = 0;
    ccl__cost_predict_chunk(&s->shape, &s->fig, kind, algo, bytes, comm->params.chunk_bytes, &chunk);
    s->forced[kind].algo = algo;
    s->forced[kind].bytes = bytes;
    s->forced[kind].chunk = chunk;
    return chunk;
}

double ccl__plan_model_predict(const struct ccl_comm *comm, int kind, int algo, size_t bytes, size_t chunk) {
    return ccl__cost_predict_chunk(&comm->cost->shape, &comm->cost->fig, kind, algo, bytes, chunk, NULL);
}
