/*
 * Communicator life cycle: create (bootstrap, plan, transports in phases
 * separated by rounds through the root), destroy, abort.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coll/coll.h"
#include "device/device.h"
#include "device/gpu_direct.h"
#include "device/pipeline.h"
#include "core/boot_pair.h"
#include "core/bootstrap.h"
#include "core/cma.h"
#include "core/log.h"
#include "core/flight.h"
#include "core/status.h"
#include "core/trace.h"
#include "plan/plan.h"
#include "plan/tune.h"
#include "prims/regcache.h"
#include "transports/manager.h"

/* An argument init refuses before anything is made: its sentence is kept
 * for ccl_comm_last_error(NULL), the one place a caller without a
 * communicator can read why. */
#define refuse_init(rank, ...) ccl__init_failed((rank), CCL_ERR_INVALID_ARGUMENT, "", __VA_ARGS__)

ccl_status_t ccl__make_id(struct ccl__unique_id *uid) {
    const struct ccl__params *prm = ccl__params_get();
    /* the transports' knobs too: a bad value is warned about now, with the library's own */
    for (int t = 0; t < ccl__ntransports; t++) (void)ccl__transport_knobs(ccl__transports[t]);
    ccl_status_t st = ccl__boot_make_id(uid, prm->ifname, prm->timeout_s, ccl__conns_record_bytes());
    if (st != CCL_OK)
        return ccl__init_failed(-1, st, "", "ccl_get_unique_id: cannot start the bootstrap root (%s)",
                                ccl_status_string(st));
    return CCL_OK;
}

CCL_API ccl_status_t ccl_get_unique_id(ccl_unique_id_t *id) {
    if (!id) return refuse_init(-1, "ccl_get_unique_id: id is NULL");
    struct ccl__unique_id uid;
    CCL_CHECK(ccl__make_id(&uid));
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, &uid, sizeof(uid));
    return CCL_OK;
}

/* The communicator failed: every transport tells its peers, and ranks
 * waiting on the GPU-resident path's words are let go (core calls this
 * one hook; it cannot name what lies above it). */
static void on_fail(struct ccl_comm *comm, ccl_status_t st) {
    ccl__conns_poison(comm, st);
    ccl__device_failed(comm);
}

static void comm_free(struct ccl_comm *comm) {
    if (!comm) return;
    ccl__status_release(comm); /* out of the registry already: the server cannot be describing it */
    ccl__exec_destroy(comm);
    ccl__flight_free(comm);
    ccl__user_regs_free(comm); /* handles the application did not deregister */
    ccl__device_free(comm);    /* nothing queued is left to stage or release */
    comm->gpu_direct = 0;      /* a late failure releases no words: they go with the windows below */
    ccl__reg_clear(comm);      /* registrations belong to the transports: first */
    ccl__mem_free_all(comm);   /* shared allocations the application did not free (registered ones too) */
    ccl__conns_teardown(comm);
    ccl__pair_close(comm);
    explicit_bzero(comm->secret, sizeof(comm->secret));
    if (comm->event_fd >= 0) close(comm->event_fd);
    pthread_mutex_destroy(&comm->err_lock);
    pthread_mutex_destroy(&comm->made_ops.lock);
    pthread_mutex_destroy(&comm->mem_lock);
    free(comm->made_ops.slots);
    free(comm->peers);
    free(comm->blobs);
    free(comm->conns);
    free(comm->scratch_conns);
    free(comm->staged);
    free(comm->ring);
    ccl__plan_model_free(comm);
    free(comm->windows);
    free(comm->fold_scratch);
    free(comm->host_first);
    free(comm->across);
    free(comm->identity);
    free(comm->send_seq);
    free(comm->recv_seq);
    free(comm->left_out);
    if (comm->grow_uid) explicit_bzero(comm->grow_uid, sizeof(*comm->grow_uid));
    free(comm->grow_uid);
    comm->magic = 0;
    free(comm);
}

static struct ccl_comm *comm_alloc(int nranks, int rank) {
    struct ccl_comm *comm = calloc(1, sizeof(*comm));
    if (!comm) return NULL;
    comm->magic = CCL__COMM_MAGIC;
    comm->rank = rank;
    comm->nranks = nranks;
    comm->stream_bytes = SIZE_MAX; /* until the planner says (ccl__plan_direct) */
    comm->params = *ccl__params_get();
    pthread_mutex_init(&comm->err_lock, NULL);
    pthread_mutex_init(&comm->made_ops.lock, NULL);
    pthread_mutex_init(&comm->mem_lock, NULL);
    comm->wake = &comm->local_wake;
    comm->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    comm->boot_fd = -1;
    comm->on_fail = on_fail;
    comm->conns = calloc((size_t)nranks, sizeof(*comm->conns));
    comm->scratch_conns = calloc((size_t)nranks, sizeof(*comm->scratch_conns));
    comm->staged = calloc((size_t)nranks, sizeof(*comm->staged));
    comm->send_seq = calloc((size_t)nranks, sizeof(uint32_t));
    comm->recv_seq = calloc((size_t)nranks, sizeof(uint32_t));
    if (!comm->conns || !comm->scratch_conns || !comm->staged || !comm->send_seq || !comm->recv_seq ||
        ccl__conns_alloc(comm) != CCL_OK || ccl__exec_create(comm) != CCL_OK) {
        comm_free(comm);
        return NULL;
    }
    return comm;
}

/* The plan (a bad CCL_ALGO or CCL_TRANSPORT anywhere fails init
 * everywhere: the manager's first round carries the status), then the
 * transports. */
static ccl_status_t setup_transports(struct ccl_comm *comm, int root_fd, ccl_status_t st) {
    uint8_t **use = calloc((size_t)ccl__ntransports, sizeof(*use));
    if (!use && st == CCL_OK) st = CCL_ERR_NO_MEMORY;
    for (int t = 0; t < ccl__ntransports && st == CCL_OK; t++)
        if (!(use[t] = calloc((size_t)comm->nranks, 1))) st = CCL_ERR_NO_MEMORY;
    if (st == CCL_OK) st = ccl__plan_parse_algo(comm, "init");
    if (st == CCL_OK) st = ccl__plan_ring(comm);
    if (st == CCL_OK) st = ccl__plan_transports(comm, use);
    st = ccl__conns_setup(comm, root_fd, st, use);
    for (int t = 0; use && t < ccl__ntransports; t++) free(use[t]);
    free(use);
    return st;
}

static ccl_status_t comm_setup(struct ccl_comm *comm, const struct ccl__unique_id *uid) {
    int root_fd = -1;
    CCL_CHECK(ccl__boot_connect(comm, uid, ccl__conns_record_bytes(), &root_fd));
    comm->boot_fd = root_fd;
    struct ccl__peer_info self = {.rank = comm->rank, .pid = getpid(), .cma_probe = ccl__cma_probe_addr()};
    snprintf(self.host_id, sizeof(self.host_id), "%s", comm->params.host_id);
    snprintf(self.machine_id, sizeof(self.machine_id), "%s", comm->params.machine_id);
    gethostname(self.hostname, sizeof(self.hostname) - 1);
    struct stat ns;
    if (stat("/proc/self/ns/pid", &ns) == 0) self.pid_ns = (uint32_t)ns.st_ino;
    self.direct_window_bytes = (uint32_t)comm->params.direct_window_bytes;
    /* A bad CCL_TOPO_FILE is reported in the first set-up round, so that
     * every rank's init fails, not only this one's after a timeout. */
    ccl_status_t topo_st = ccl__plan_local_topology(comm, &self);
    ccl__tune_local(comm, &self);
    ccl__gpu_identity(self.gpu_uuid, &self.gpu_usable);
    ccl__pipe_wish(&self.device_ctx, &self.device_piece_bytes);
    ccl_status_t st = ccl__pair_listen(comm, &self.pair_addr);
    if (st == CCL_OK) ccl__status_listen(comm, &self.status_addr);
    if (st == CCL_OK) st = ccl__conns_join(comm, root_fd, &self);
    /* Pinned before the transports set up: their buffers are first touched,
     * and the nearest RDMA device chosen, from where the rank will run. A
     * bad CCL_BIND fails every rank's init through the first round. */
    if (st == CCL_OK && topo_st == CCL_OK) topo_st = ccl__plan_bind(comm);
    if (st == CCL_OK) st = setup_transports(comm, root_fd, topo_st);
    for (int p = 0; p < comm->nranks && st == CCL_OK; p++)
        if (comm->conns[p]) {
            comm->slot_kinds |= 1u << comm->conns[p]->slot_mem;
            comm->caller_mem |= comm->conns[p]->t->send_commit_from || comm->conns[p]->t->recv_into;
            comm->cpu_adapter |= comm->conns[p]->cpu_adapter != 0;
        }
    if (st == CCL_OK) st = ccl__plan_direct(comm);
    if (st == CCL_OK) st = ccl__plan_single_copy(comm);
    if (st == CCL_OK) ccl__gpu_direct_plan(comm);
    if (st == CCL_OK) ccl__pipe_plan(comm);
    if (st == CCL_OK) ccl__plan_waiting(comm);
    if (st == CCL_OK) st = ccl__plan_model(comm);
    /* The model's probe (the tuning file's check, or the figures it lacks)
     * is a collective, and ranks leave a collective one after another: a
     * rank that left it first and failed, or exited, at once would fail the
     * others' probe. A last round through the root, carrying each rank's
     * status, ends init on every rank together, and with one verdict. */
    if (comm->set_up) st = ccl__boot_round(comm, root_fd, st);
    if (st == CCL_OK && CCL__LOG_ON(CCL__LOG_INFO, CCL__SUB_INIT)) {
        char links[160];
        ccl__conns_summary(comm, links, sizeof(links));
        CCL_INFO(CCL__SUB_INIT, comm->rank, "comm %016llx: rank %d of %d on %s ready: %s",
                 (unsigned long long)comm->comm_id, comm->rank, comm->nranks, self.hostname, links);
    }
    comm->boot_fd = -1;
    close(root_fd);
    return st;
}

ccl_status_t ccl__comm_create(ccl_comm_t **out, int nranks, const struct ccl__unique_id *uid, int rank,
                              const struct ccl__comm_options *opt) {
    struct ccl_comm *comm = comm_alloc(nranks, rank);
    if (!comm) return CCL_ERR_NO_MEMORY;
    if (opt && opt->timeout_s > 0) {
        comm->params.timeout_s = opt->timeout_s;
        snprintf(comm->params.timeout_source, sizeof comm->params.timeout_source, "%s",
                 opt->timeout_source ? opt->timeout_source : "config.timeout_s");
    }
    if (opt && opt->algo) {
        snprintf(comm->params.algo, sizeof comm->params.algo, "%s", opt->algo);
        comm->params.algo_too_long = 0;
        snprintf(comm->params.algo_source, sizeof comm->params.algo_source, "%s", opt->algo_source);
    }
    comm->parent = opt ? opt->parent : NULL;
    ccl_status_t st = comm_setup(comm, uid);
    comm->parent = NULL;
    /* A root in this process (this rank's, or a split's lowest rank's)
     * answers the last round to one rank after another: had this rank
     * heard first and its process exited, the root would have gone before
     * the others heard. A failed init waits a moment only: a root still
     * telling latecomers waits for them up to its timeout. */
    ccl__boot_root_wait(uid->secret, ccl__now() + (st == CCL_OK ? comm->params.timeout_s : 1.0));
    if (st == CCL_OK) st = ccl__registry_add(comm);
    if (st == CCL_OK && ccl__flight_init(comm) != 0)
        CCL_WARN(CCL__SUB_INIT, rank, "flight recorder: out of memory: this communicator records no calls");
    if (st == CCL_OK) ccl__status_publish(comm);
    if (st == CCL_OK && comm->params.trace[0]) st = ccl__trace_begin(comm);
    if (st != CCL_OK) {
        /* The message lives in the comm we are about to free: log it. */
        CCL_WARN(CCL__SUB_INIT, rank, "ccl_comm_init_rank failed (%s): %s", ccl_status_string(st), comm->last_error);
        ccl__note_init_failure(comm->last_error);
        ccl__registry_remove(comm); /* where the trace's start failed after it was added */
        comm_free(comm);
        return st;
    }
    ccl__device_adopt_current(comm);
    *out = comm;
    return CCL_OK;
}

static ccl_status_t init_rank(ccl_comm_t **comm, int nranks, ccl_unique_id_t id, int rank,
                              const ccl_config_t *config);

CCL_API ccl_status_t ccl_comm_init_rank(ccl_comm_t **comm, int nranks, ccl_unique_id_t id, int rank) {
    return init_rank(comm, nranks, id, rank, NULL);
}

CCL_API ccl_status_t ccl_comm_init_rank_config(ccl_comm_t **comm, int nranks, ccl_unique_id_t id, int rank,
                                               const ccl_config_t *config) {
    return init_rank(comm, nranks, id, rank, config);
}

static ccl_status_t init_rank(ccl_comm_t **comm, int nranks, ccl_unique_id_t id, int rank,
                              const ccl_config_t *config) {
    if (!comm) return refuse_init(rank, "ccl_comm_init_rank: comm (where the communicator goes) is NULL");
    *comm = NULL;
    if (nranks <= 0 || rank < 0 || rank >= nranks)
        return refuse_init(rank, "ccl_comm_init_rank: rank %d is out of range for %d ranks (0..%ld)", rank, nranks,
                           (long)nranks - 1);
    struct ccl__unique_id uid;
    memcpy(&uid, id.internal, sizeof(uid));
    if (uid.magic != CCL__UID_MAGIC)
        return refuse_init(rank, "ccl_comm_init_rank: the id was not made by ccl_get_unique_id (a foreign or "
                                 "corrupted id)");
    struct ccl__comm_options opt = {0, NULL, NULL, "config.algo", NULL};
    if (config) {
        /* Fields past what the caller's version of the struct has keep their defaults. */
        if (config->size < sizeof(size_t))
            return refuse_init(rank, "ccl_comm_init_rank_config: config.size %zu: start from CCL_CONFIG_INIT",
                               config->size);
        if (config->size >= offsetof(ccl_config_t, timeout_s) + sizeof(double)) opt.timeout_s = config->timeout_s;
        if (!(opt.timeout_s >= 0) || opt.timeout_s > 1e9)
            return refuse_init(rank, "ccl_comm_init_rank_config: timeout_s %g is not a number of seconds from 0 "
                                     "to 1e9", opt.timeout_s);
        if (config->size >= offsetof(ccl_config_t, algo) + sizeof(const char *)) opt.algo = config->algo;
        size_t algo_max = sizeof(((struct ccl__params *)0)->algo) - 1;
        if (opt.algo && strlen(opt.algo) > algo_max)
            return refuse_init(rank, "ccl_comm_init_rank_config: algo is longer than %zu characters", algo_max);
    }
    if ((uid.flags & CCL__UID_ROOT_AT_RANK0) && rank == 0) /* an id from an address: its root is rank 0's to start */
        CCL_CHECK(ccl__root_start_at(&uid, rank, "ccl_comm_init_rank", ""));
    return ccl__comm_create(comm, nranks, &uid, rank, &opt);
}

CCL_API ccl_status_t ccl_comm_destroy(ccl_comm_t *comm) {
    if (!comm) return CCL_ERR_INVALID_ARGUMENT;
    if (!ccl__registry_has(comm)) return CCL_ERR_INVALID_USAGE;
    /* CCL_TRACE: write the trace while the communicator still works (every
     * rank destroys, so every rank takes part in the gather). */
    ccl_status_t st = CCL_OK;
    if (comm->trace && comm->params.trace[0]) st = ccl__trace_end(comm, comm->params.trace);
    else if (comm->trace) ccl__trace_destroy(comm->trace);
    if (st != CCL_OK) {
        /* The communicator is about to go, and its sentence with it: say
         * it, and keep it where a caller without one reads errors. */
        CCL_WARN(CCL__SUB_INIT, comm->rank, "ccl_comm_destroy: %s", comm->last_error);
        ccl__note_init_failure(comm->last_error);
    }
    ccl__registry_remove(comm);
    ccl__group_forget(comm); /* calls this thread's open group recorded on it will not run */
    comm_free(comm);         /* waits for queued operations first */
    return st;
}

CCL_API ccl_status_t ccl_comm_abort(ccl_comm_t *comm) {
    CCL_CHECK(ccl__check_comm(comm, "abort"));
    ccl__set_error(comm, CCL_ERR_ABORTED, "communicator aborted by ccl_comm_abort");
    atomic_store(&comm->aborted, 1);
    ccl__comm_fail(comm, CCL_ERR_ABORTED);
    ccl__comm_wake_waiters(comm);
    return CCL_OK;
}

