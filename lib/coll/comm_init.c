/*
 * Communicator life cycle: create (bootstrap, plan, transports in phases
 * separated by rounds through the root), destroy, abort.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "coll/coll.h"
#include "core/bootstrap.h"
#include "core/log.h"
#include "core/trace.h"
#include "plan/plan.h"

CCL_API ccl_status_t ccl_get_unique_id(ccl_unique_id_t *id) {
    if (!id) return CCL_ERR_INVALID_ARGUMENT;
    const struct ccl__params *prm = ccl__params_get();
    struct ccl__unique_id uid;
    ccl_status_t st = ccl__boot_make_id(&uid, prm->ifname, prm->timeout_s);
    if (st != CCL_OK) {
        CCL_WARN(CCL__SUB_BOOT, -1, "ccl_get_unique_id: cannot start the bootstrap root (%s)", ccl_status_string(st));
        return st;
    }
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, &uid, sizeof(uid));
    return CCL_OK;
}

static void poison_peers(struct ccl_comm *comm, ccl_status_t st) {
    for (int t = 0; t < CCL__NUM_TRANSPORTS; t++)
        if (comm->tstate[t]) ccl__transports[t]->poison(comm, st);
}

static void comm_free(struct ccl_comm *comm) {
    if (!comm) return;
    ccl__exec_destroy(comm);
    for (int t = 0; t < CCL__NUM_TRANSPORTS; t++)
        if (comm->tstate[t]) ccl__transports[t]->teardown(comm);
    if (comm->event_fd >= 0) close(comm->event_fd);
    pthread_mutex_destroy(&comm->err_lock);
    free(comm->peers);
    free(comm->conns);
    free(comm->scratch_conns);
    free(comm->staged);
    free(comm->ring);
    free(comm->windows);
    free(comm->host_first);
    free(comm->across);
    free(comm->identity);
    free(comm->send_seq);
    free(comm->recv_seq);
    comm->magic = 0;
    free(comm);
}

static struct ccl_comm *comm_alloc(int nranks, int rank) {
    struct ccl_comm *comm = calloc(1, sizeof(*comm));
    if (!comm) return NULL;
    comm->magic = CCL__COMM_MAGIC;
    comm->rank = rank;
    comm->nranks = nranks;
    comm->params = *ccl__params_get();
    pthread_mutex_init(&comm->err_lock, NULL);
    comm->wake = &comm->local_wake;
    comm->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    comm->on_fail = poison_peers;
    comm->conns = calloc((size_t)nranks, sizeof(*comm->conns));
    comm->scratch_conns = calloc((size_t)nranks, sizeof(*comm->scratch_conns));
    comm->staged = calloc((size_t)nranks, sizeof(*comm->staged));
    comm->send_seq = calloc((size_t)nranks, sizeof(uint32_t));
    comm->recv_seq = calloc((size_t)nranks, sizeof(uint32_t));
    if (!comm->conns || !comm->scratch_conns || !comm->staged || !comm->send_seq || !comm->recv_seq || ccl__exec_create(comm) != CCL_OK) {
        comm_free(comm);
        return NULL;
    }
    return comm;
}

/* The transport phases; each ends in a round so every rank learns whether
 * every other rank got through it. */
static ccl_status_t setup_transports(struct ccl_comm *comm, int root_fd, uint8_t *use[CCL__NUM_TRANSPORTS]) {
    uint32_t mine = comm->peers[comm->rank].transport_mask; /* the ones whose local_init worked */
    ccl_status_t st = ccl__plan_parse_algo(comm); /* a bad CCL_ALGO anywhere fails init everywhere */
    if (st == CCL_OK) st = ccl__plan_transports(comm, use);
    for (int t = 0; t < CCL__NUM_TRANSPORTS && st == CCL_OK; t++)
        if (mine & (1u << t)) st = ccl__transports[t]->setup(comm, use[t]);
    CCL_CHECK(ccl__boot_round(comm, root_fd, st));
    for (int t = 0; t < CCL__NUM_TRANSPORTS && st == CCL_OK; t++)
        if (mine & (1u << t)) st = ccl__transports[t]->connect(comm, use[t], comm->conns);
    CCL_CHECK(ccl__boot_round(comm, root_fd, st));
    for (int t = 0; t < CCL__NUM_TRANSPORTS && st == CCL_OK; t++)
        if (mine & (1u << t)) st = ccl__transports[t]->setup_done(comm);
    return ccl__boot_round(comm, root_fd, st);
}

static ccl_status_t comm_setup(struct ccl_comm *comm, const struct ccl__unique_id *uid) {
    int root_fd = -1;
    CCL_CHECK(ccl__boot_connect(comm, uid, &root_fd));
    struct ccl__peer_info self = {.rank = comm->rank, .pid = getpid()};
    snprintf(self.host_id, sizeof(self.host_id), "%s", comm->params.host_id);
    snprintf(self.machine_id, sizeof(self.machine_id), "%s", comm->params.machine_id);
    gethostname(self.hostname, sizeof(self.hostname) - 1);
    ccl__plan_local_topology(&self);
    for (int t = 0; t < CCL__NUM_TRANSPORTS; t++) {
        ccl_status_t st = ccl__transports[t]->local_init(comm, self.blob[t]);
        if (st == CCL_OK) self.transport_mask |= 1u << t;
        else CCL_INFO(CCL__SUB_INIT, comm->rank, "transport %s unavailable here (%s)", ccl__transports[t]->name,
                      ccl_status_string(st));
    }
    uint8_t *use[CCL__NUM_TRANSPORTS] = {0};
    ccl_status_t st = ccl__boot_exchange(comm, root_fd, &self);
    for (int t = 0; t < CCL__NUM_TRANSPORTS && st == CCL_OK; t++)
        if (!(use[t] = calloc((size_t)comm->nranks, 1))) st = CCL_ERR_NO_MEMORY;
    if (st == CCL_OK) st = setup_transports(comm, root_fd, use);
    for (int p = 0; p < comm->nranks && st == CCL_OK; p++)
        if (comm->conns[p]) comm->slot_kinds |= 1u << comm->conns[p]->slot_mem;
    if (st == CCL_OK) st = ccl__plan_ring(comm);
    if (st == CCL_OK) st = ccl__plan_direct(comm);
    if (st == CCL_OK) ccl__plan_waiting(comm);
    if (st == CCL_OK && CCL__LOG_ON(CCL__LOG_INFO, CCL__SUB_INIT)) {
        int counts[CCL__NUM_TRANSPORTS] = {0};
        for (int t = 0; t < CCL__NUM_TRANSPORTS; t++)
            for (int p = 0; p < comm->nranks; p++) counts[t] += use[t][p];
        CCL_INFO(CCL__SUB_INIT, comm->rank, "comm %016llx: rank %d of %d on %s ready: shm to %d peers, tcp to %d peers",
                 (unsigned long long)comm->comm_id, comm->rank, comm->nranks, self.hostname,
                 counts[CCL__TRANSPORT_SHM], counts[CCL__TRANSPORT_TCP]);
    }
    for (int t = 0; t < CCL__NUM_TRANSPORTS; t++) free(use[t]);
    close(root_fd);
    return st;
}

ccl_status_t ccl__comm_create(ccl_comm_t **out, int nranks, const struct ccl__unique_id *uid, int rank) {
    struct ccl_comm *comm = comm_alloc(nranks, rank);
    if (!comm) return CCL_ERR_NO_MEMORY;
    ccl_status_t st = comm_setup(comm, uid);
    if (st == CCL_OK) st = ccl__registry_add(comm);
    if (st == CCL_OK && comm->params.trace[0]) st = ccl__trace_begin(comm);
    if (st != CCL_OK) {
        /* The message lives in the comm we are about to free: log it. */
        CCL_WARN(CCL__SUB_INIT, rank, "ccl_comm_init_rank failed (%s): %s", ccl_status_string(st), comm->last_error);
        comm_free(comm);
        return st;
    }
    *out = comm;
    return CCL_OK;
}

CCL_API ccl_status_t ccl_comm_init_rank(ccl_comm_t **comm, int nranks, ccl_unique_id_t id, int rank) {
    if (!comm) return CCL_ERR_INVALID_ARGUMENT;
    *comm = NULL;
    if (nranks <= 0 || rank < 0 || rank >= nranks) {
        CCL_WARN(CCL__SUB_INIT, rank, "ccl_comm_init_rank: rank %d / nranks %d out of range", rank, nranks);
        return CCL_ERR_INVALID_ARGUMENT;
    }
    struct ccl__unique_id uid;
    memcpy(&uid, id.internal, sizeof(uid));
    if (uid.magic != CCL__UID_MAGIC) {
        CCL_WARN(CCL__SUB_INIT, rank, "ccl_comm_init_rank: the id was not made by ccl_get_unique_id");
        return CCL_ERR_INVALID_ARGUMENT;
    }
    return ccl__comm_create(comm, nranks, &uid, rank);
}

CCL_API ccl_status_t ccl_comm_destroy(ccl_comm_t *comm) {
    if (!comm) return CCL_ERR_INVALID_ARGUMENT;
    if (!ccl__registry_has(comm)) return CCL_ERR_INVALID_USAGE;
    /* CCL_TRACE: write the trace while the communicator still works (every
     * rank destroys, so every rank takes part in the gather). */
    ccl_status_t st = CCL_OK;
    if (comm->trace && comm->params.trace[0]) st = ccl__trace_end(comm, comm->params.trace);
    else if (comm->trace) ccl__trace_destroy(comm->trace);
    ccl__registry_remove(comm);
    comm_free(comm); /* waits for queued operations first */
    return st;
}

CCL_API ccl_status_t ccl_comm_abort(ccl_comm_t *comm) {
    CCL_CHECK(ccl__check_comm(comm, "abort"));
    ccl__set_error(comm, CCL_ERR_ABORTED, "communicator aborted by ccl_comm_abort");
    atomic_store(&comm->aborted, 1);
    ccl__comm_fail(comm, CCL_ERR_ABORTED);
    ccl__wake_ring(comm->wake);
    uint64_t one = 1;
    if (comm->event_fd >= 0 && write(comm->event_fd, &one, sizeof(one)) < 0) { /* already signalled */
    }
    ccl__exec_kick(comm);
    return CCL_OK;
}

