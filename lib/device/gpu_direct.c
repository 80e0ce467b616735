/*
 * The GPU-resident path: collectives on device buffers of ranks that share
 * one GPU, run by one kernel on that GPU instead of being staged through
 * host memory (see gpu_direct.h).
 *
 * Ranks on one GPU take turns on it (their contexts are time-sliced), so
 * splitting the work among them buys nothing: the leader (rank 0) reads
 * every rank's input and writes every rank's output in one kernel, through
 * CUDA IPC mappings of the peers' buffers.
 *
 * Every wait is on the host. A GPU waiting on another process's work (a
 * stream waiting on a word another context's stream writes) waits until
 * the waiting context's turn on the GPU ends: on an H200, a stream-ordered
 * all-reduce of 64 MiB between two ranks took 2.3 ms a call that way; the
 * same call without a stream, waited for on the host, 0.15 ms. So a call
 * runs in three steps:
 *   1. every rank waits for the work before the call (its stream's, or the
 *      legacy default stream's for a call without one), so its buffers are
 *      ready;
 *   2. the ranks trade one small record (the engine's own all-gather on
 *      host memory, stamped with the call's number; the whole try runs on
 *      the communicator's executor): each rank's buffers as IPC handles and
 *      offsets, and whether they can go this way at all. The path is taken
 *      only when every rank says yes, else every rank stages the call, so
 *      the ranks always agree;
 *   3. the leader runs the kernel, waits for it and stores the call's
 *      number in each peer's go word, in shared memory (the control pages
 *      of the direct path's windows); each peer waits for its word. A
 *      leader that cannot map a peer's buffer says so with the go word,
 *      and every rank stages the call.
 * A call returns with its results written, stream-ordered or not. Every
 * wait goes through ccl__wait with a spin budget (host_wait): a peer's
 * wait checks every 100 ms that the leader is alive, and a failed
 * communicator lets every waiter go (plain stores: safe from any thread).
 */
#include "device/gpu_direct.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "algo/algo.h"
#include "device/device.h"
#include "device/state.h"
#include "core/log.h"
#include "core/socket.h"
#include "device/kernels.h"
#include "prims/wait.h"
#include "transports/transport.h"

/* A rank's word in its window's control page (algo.h: CCL__WINDOW_GPU_WORDS). */
struct gpu_words {
    _Alignas(64) _Atomic uint32_t go;     /* the leader is done with call `go` */
    _Alignas(64) _Atomic uint32_t staged; /* and did not run call `staged`: it is to be staged */
};
#define RELEASED 0xffffffffu /* every wait passes */
#define LEADER 0
#define IPC_CACHE 64

/* What a rank tells the others about one call. */
struct call_record {
    uint32_t ok; /* its buffers can go this way */
    uint32_t pad;
    CCL__CUipcMemHandle send, recv; /* the allocations holding its buffers */
    uint64_t send_at, recv_at;      /* the buffers' offsets in them */
    uint64_t send_base, recv_base;  /* the allocations' addresses in the rank's process: one allocation
                                     * (in place) is opened once */
    uint64_t send_id, recv_id;      /* their buffer ids there: the leader's key for what it opened (a
                                     * handle's bytes might come back for a later allocation) */
};

/* One allocation this process exported (cuIpcGetMemHandle costs a call
 * into the kernel driver): found again by its buffer id, which CUDA never
 * gives to another allocation in the process. */
struct exported {
    unsigned long long id;
    CCL__CUipcMemHandle h;
};

struct ccl__gpu_direct {
    uint32_t seq;       /* calls that tried this way so far, the same on every rank */
    unsigned ran;       /* and ran on the GPU (ccl_comm_describe) */
    int cannot_open;    /* the leader: an IPC open failed, it says no from now on */
    struct {
        int rank;
        uint64_t id; /* the allocation's buffer id in rank's process */
        CUdeviceptr base;
    } opened[IPC_CACHE]; /* peers' allocations opened here (the leader) */
    int nopened;
    struct exported exported[IPC_CACHE]; /* this rank's, round robin */
    int nexported;
};

static struct gpu_words *words_of(struct ccl_comm *comm, int rank) {
    return (struct gpu_words *)(comm->windows[rank] + CCL__WINDOW_GPU_WORDS);
}

void ccl__gpu_identity(uint8_t uuid[16], uint8_t *usable) {
    *usable = 0;
    memset(uuid, 0, 16);
    const struct ccl__cu *cu = ccl__cuda_in_process() ? ccl__cuda() : NULL;
    CUcontext ctx = NULL;
    CUdevice dev;
    CCL__CUuuid id;
    if (!cu || !cu->has_ipc || !ccl__cuda_have_kernels() || !ccl__params_get()->cuda_direct) return;
    if (cu->CtxGetCurrent(&ctx) != CCL__CUDA_SUCCESS || !ctx || cu->CtxGetDevice(&dev) != CCL__CUDA_SUCCESS ||
        cu->DeviceGetUuid(&id, dev) != CCL__CUDA_SUCCESS)
        return;
    memcpy(uuid, id.bytes, 16);
    *usable = 1;
}

void ccl__gpu_direct_plan(struct ccl_comm *comm) {
    comm->gpu_direct = 0;
    if (!comm->windows || comm->nranks < 2 || comm->nranks > CCL_FOLD_MAX) return;
    /* One GPU, and one PID namespace: a container's ranks may share the
     * host's memory and GPU, but CUDA IPC between PID namespaces is not
     * something to count on. */
    for (int p = 0; p < comm->nranks; p++)
        if (!comm->peers[p].gpu_usable || memcmp(comm->peers[p].gpu_uuid, comm->peers[0].gpu_uuid, 16) != 0 ||
            !comm->peers[p].pid_ns || comm->peers[p].pid_ns != comm->peers[0].pid_ns)
            return;
    comm->gpu_direct = 1;
    CCL_INFO(CCL__SUB_PLAN, comm->rank, "GPU-resident path: every rank on one GPU; device collectives run there");
}

void ccl__gpu_direct_release(struct ccl_comm *comm) {
    if (!comm->gpu_direct || !comm->windows) return;
    for (int r = 0; r < comm->nranks; r++) atomic_store_explicit(&words_of(comm, r)->go, RELEASED, memory_order_release);
}

/* Kinds this path runs. */
static int kind_fits(int kind) {
    return kind == CCL__K_ALL_REDUCE || kind == CCL__K_REDUCE || kind == CCL__K_REDUCE_SCATTER ||
           kind == CCL__K_ALL_GATHER || kind == CCL__K_BROADCAST;
}

ccl_status_t ccl__gpu_direct_ready(struct ccl_comm *comm) {
    struct ccl__device_state *d = ccl__device_state(comm);
    if (!d || (!d->gpu && !(d->gpu = calloc(1, sizeof(*d->gpu)))))
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "GPU-resident path: out of memory");
    return CCL_OK;
}

/* The allocation holding p as an IPC handle, p's offset in it and its
 * address here; 0 when it cannot be shared (pool or virtual-memory
 * allocations, say). */
static int share(const struct ccl__cu *cu, struct ccl__gpu_direct *g, const void *p, CCL__CUipcMemHandle *h,
                 uint64_t *at, uint64_t *base_out, uint64_t *id_out) {
    CUdeviceptr base = 0, a = (CUdeviceptr)(uintptr_t)p;
    size_t bytes = 0;
    unsigned long long id = 0;
    if (cu->MemGetAddressRange(&base, &bytes, a) != CCL__CUDA_SUCCESS ||
        cu->PointerGetAttribute(&id, CCL__CU_POINTER_ATTRIBUTE_BUFFER_ID, a) != CCL__CUDA_SUCCESS || !id)
        return 0;
    *at = a - base;
    *base_out = base;
    *id_out = id;
    for (int i = 0; i < IPC_CACHE; i++)
        if (g->exported[i].id == id) {
            *h = g->exported[i].h;
            return 1;
        }
    if (cu->IpcGetMemHandle(h, base) != CCL__CUDA_SUCCESS) return 0;
    struct exported *e = &g->exported[g->nexported++ % IPC_CACHE];
    e->id = id;
    e->h = *h;
    return 1;
}

/* This rank's record: ok when every buffer the call touches here is
 * device memory of comm's context that IPC can share (the leader's own
 * need not be shared: it reads and writes them itself). */
static void my_record(const struct ccl_comm *comm, const struct ccl__cu *cu, struct ccl__gpu_direct *g,
                      const struct ccl__call *c, struct call_record *rec) {
    memset(rec, 0, sizeof(*rec));
    if (g->cannot_open) return;
    size_t need_send, need_recv;
    int leader = comm->rank == LEADER;
    ccl__coll_extent(comm, &c->coll, &need_send, &need_recv);
    if ((need_send && !(c->device & CCL__DEV_SEND)) || (need_recv && !(c->device & CCL__DEV_RECV))) return;
    if (!leader && need_send &&
        !share(cu, g, c->coll.sendbuf, &rec->send, &rec->send_at, &rec->send_base, &rec->send_id))
        return;
    if (!leader && need_recv &&
        !share(cu, g, c->coll.recvbuf, &rec->recv, &rec->recv_at, &rec->recv_base, &rec->recv_id))
        return;
    rec->ok = 1;
}

/* The leader's address of rank's buffer: the peer's allocation (buffer id
 * id there) opened once (IPC) and kept. */
static ccl_status_t peer_address(struct ccl_comm *comm, const struct ccl__cu *cu, struct ccl__gpu_direct *g, int rank,
                                 const CCL__CUipcMemHandle *h, uint64_t id, uint64_t at, void **out) {
    for (int i = 0; i < g->nopened; i++)
        if (g->opened[i].rank == rank && g->opened[i].id == id) {
            *out = (void *)(uintptr_t)(g->opened[i].base + at);
            return CCL_OK;
        }
    if (g->nopened == IPC_CACHE) {
        /* Full: every kernel that read them has completed (each call waits
         * for its own), so all are closed; a later call opens again. */
        for (int i = 0; i < g->nopened; i++) cu->IpcCloseMemHandle(g->opened[i].base);
        g->nopened = 0;
    }
    CUdeviceptr base;
    CUresult r = cu->IpcOpenMemHandle(&base, *h, CCL__CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r != CCL__CUDA_SUCCESS) return ccl__device_fail(comm, r, "cuIpcOpenMemHandle", "GPU-resident path");
    g->opened[g->nopened].rank = rank;
    g->opened[g->nopened].id = id;
    g->opened[g->nopened++].base = base;
    *out = (void *)(uintptr_t)(base + at);
    return CCL_OK;
}

/* The leader's kernel arguments for the call, every rank's buffers
 * mapped; *groups the kernel's groups. */
static ccl_status_t fold_plan(struct ccl_comm *comm, const struct ccl__cu *cu, struct ccl__gpu_direct *g,
                              const struct ccl__call *c, const struct call_record *all, struct ccl_fold_args *a,
                              unsigned *groups) {
    const struct ccl__coll_args *x = &c->coll;
    int n = comm->nranks, root = x->id.root;
    void *send[CCL_FOLD_MAX] = {0}, *recv[CCL_FOLD_MAX] = {0};
    for (int r = 0; r < n; r++) {
        if (r == comm->rank) {
            send[r] = (void *)x->sendbuf;
            recv[r] = x->recvbuf;
            continue;
        }
        size_t s, v;
        ccl__coll_extent_of(comm, x, r, &s, &v);
        if (s) CCL_CHECK(peer_address(comm, cu, g, r, &all[r].send, all[r].send_id, all[r].send_at, &send[r]));
        if (v && s && all[r].recv_base == all[r].send_base) /* one allocation (in place): opened once */
            recv[r] = (char *)send[r] - all[r].send_at + all[r].recv_at;
        else if (v)
            CCL_CHECK(peer_address(comm, cu, g, r, &all[r].recv, all[r].recv_id, all[r].recv_at, &recv[r]));
    }
    memset(a, 0, sizeof(*a));
    a->n = x->id.count;
    a->divisor = x->id.op == CCL_AVG ? n : 0;
    *groups = 1;
    switch (x->id.kind) {
    case CCL__K_ALL_REDUCE: /* every input folded into every output */
        for (int r = 0; r < n; r++) a->src[r] = send[r], a->dst[r] = recv[r];
        a->nsrc = a->ndst = n;
        break;
    case CCL__K_REDUCE:
        for (int r = 0; r < n; r++) a->src[r] = send[r];
        a->dst[0] = recv[root];
        a->nsrc = n, a->ndst = 1;
        break;
    case CCL__K_REDUCE_SCATTER: /* group g: block g of every input into rank g's output */
        for (int r = 0; r < n; r++) a->src[r] = send[r], a->dst[r] = recv[r];
        a->nsrc = a->ndst = n, a->src_step = x->id.count, a->dst_one = 1;
        *groups = (unsigned)n;
        break;
    case CCL__K_ALL_GATHER: /* group g: rank g's input into block g of every output */
        for (int r = 0; r < n; r++) a->src[r] = send[r], a->dst[r] = recv[r];
        a->nsrc = a->ndst = n, a->src_one = 1, a->dst_step = x->id.count, a->divisor = 0;
        *groups = (unsigned)n;
        break;
    default: /* CCL__K_BROADCAST: the root's input into every output */
        a->src[0] = send[root];
        for (int r = 0; r < n; r++) a->dst[r] = recv[r];
        a->nsrc = 1, a->ndst = n, a->divisor = 0;
        break;
    }
    size_t es = ccl_dtype_size(x->id.dtype);
    int aligned = (a->src_step * es) % 16 == 0 && (a->dst_step * es) % 16 == 0;
    for (int k = 0; k < CCL_FOLD_MAX; k++)
        aligned &= ((uintptr_t)a->src[k] % 16 == 0) && ((uintptr_t)a->dst[k] % 16 == 0);
    a->vector = aligned;
    return CCL_OK;
}

/* What a host wait waits for. */
struct host_wait {
    struct ccl_comm *comm;
    const struct ccl__cu *cu;
    CUstream s;           /* a stream to go idle, or */
    _Atomic uint32_t *go; /* a go word to reach seq */
    uint32_t seq;
};

static ccl_status_t host_wait_poll(void *ctx, int *moved) {
    struct host_wait *w = ctx;
    (void)moved;
    if (w->go) return atomic_load_explicit(w->go, memory_order_acquire) >= w->seq ? CCL_OK : CCL_INPROGRESS;
    CUresult r = w->cu->StreamQuery(w->s);
    if (r == CCL__CUDA_SUCCESS) return CCL_OK;
    return r == CCL__CUDA_ERROR_NOT_READY ? CCL_INPROGRESS
                                          : ccl__device_fail(w->comm, r, "cuStreamQuery", "GPU-resident path");
}

/* Every peer's liveness and failures, as seen from here: the first
 * failure found fails the communicator. */
static ccl_status_t check_peers(struct ccl_comm *comm) {
    ccl_status_t st = ccl__check_failures(comm, "GPU-resident path");
    for (int p = 0; p < comm->nranks && st == CCL_OK; p++)
        if (comm->conns[p] && (st = comm->conns[p]->t->check_peer(comm->conns[p])) < 0) ccl__comm_fail(comm, st);
    return st;
}

struct reason_wait {
    struct ccl_comm *comm;
    double until;
};

static ccl_status_t reason_poll(void *ctx, int *moved) {
    struct reason_wait *w = ctx;
    (void)moved;
    ccl_status_t st = check_peers(w->comm);
    return st < 0 ? st : ccl__now() < w->until ? CCL_INPROGRESS : CCL_OK;
}

/* A go word released (ccl__gpu_direct_release): some rank's communicator
 * failed, and the call did not run. Its reason comes by its transport,
 * which may trail the word a moment (a second at most); the call fails
 * either way. */
static ccl_status_t released_by_failure(struct ccl_comm *comm) {
    struct reason_wait w = {.comm = comm, .until = ccl__now() + 1.0};
    int none = 0;
    ccl_status_t st = ccl__wait_with(comm, "GPU-resident path", NULL, &none, reason_poll, &w,
                                     &(struct ccl__wait_opts){.nap_s = 1e-3});
    if (st < 0) return st;
    ccl__set_error(comm, CCL_ERR_REMOTE, "GPU-resident path: another rank's communicator failed during the call (its "
                                         "reason did not reach this rank)");
    return ccl__comm_fail(comm, CCL_ERR_REMOTE);
}

/* The budget of a host wait: it spins for the first SPIN_S (a call of
 * 64 MiB takes about a tenth of that on an H200; a sleep, however short,
 * lasts some 60 us), then yields until YIELD_S, then naps NAP_S at a time
 * (nothing rings a bell when a kernel ends). */
#define SPIN_S 1e-3
#define YIELD_S 10e-3
#define NAP_S 10e-6

/* Waits through ccl__wait for a go word from the leader (its liveness
 * checked every 100 ms: a dead leader fails the communicator) or for a
 * stream to go idle. A stream is waited for even when the communicator
 * fails meanwhile: the kernel may still read and write the buffers, and
 * it waits on nothing, so it ends; but no wait outlasts CCL_TIMEOUT (a
 * kernel that long is a GPU gone wrong, a leader that long without a word
 * is stopped or stuck). */
static ccl_status_t host_wait(struct ccl_comm *comm, struct host_wait *w, const char *what) {
    w->comm = comm;
    int one = w->go && comm->conns[LEADER] ? 1 : 0;
    struct ccl__wait_opts o = {.spin_s = SPIN_S, .yield_s = YIELD_S - SPIN_S, .nap_s = NAP_S, .through_failures = !w->go};
    ccl_status_t st = ccl__wait_with(comm, what, &comm->conns[LEADER], &one, host_wait_poll, w, &o);
    if (st < 0) return st;
    /* A stream's wait went on through failures: whatever failed meanwhile,
     * here or at a peer, fails the call now. */
    st = w->go ? ccl__comm_health(comm) : check_peers(comm);
    if (st < 0 || !w->go || atomic_load_explicit(w->go, memory_order_acquire) != RELEASED) return st;
    return released_by_failure(comm);
}

/* The leader could not map a peer's buffer: every rank stages the call
 * (the peers learn it with their go word), and the leader's records say
 * no from now on, so later calls are staged at once. */
static ccl_status_t cannot_open(struct ccl_comm *comm, struct ccl__gpu_direct *g, uint32_t seq) {
    CCL_WARN(CCL__SUB_ALL, comm->rank, "%s; device buffers are staged from now on", comm->last_error);
    g->cannot_open = 1;
    for (int p = 0; p < comm->nranks; p++)
        if (p != comm->rank) {
            atomic_store_explicit(&words_of(comm, p)->staged, seq, memory_order_relaxed);
            atomic_store_explicit(&words_of(comm, p)->go, seq, memory_order_release);
        }
    return 1;
}

/* Step 3: the leader runs the kernel on stream s and waits for it, then
 * lets the peers go; a peer waits for that. 1: the call is to be staged. */
static ccl_status_t run(struct ccl_comm *comm, const struct ccl__cu *cu, struct ccl__gpu_direct *g,
                        const struct ccl__call *c, const struct call_record *all, CUstream s) {
    uint32_t seq = ++g->seq;
    int me = comm->rank, n = comm->nranks;
    if (me != LEADER) {
        struct gpu_words *w = words_of(comm, me);
        CCL_CHECK(host_wait(comm, &(struct host_wait){.go = &w->go, .seq = seq},
                            "GPU-resident path: no word from rank 0, which runs the call's kernel"));
        if (atomic_load_explicit(&w->staged, memory_order_relaxed) == seq) return 1;
        g->ran++;
        return CCL_OK;
    }
    struct ccl_fold_args a;
    unsigned groups;
    if (fold_plan(comm, cu, g, c, all, &a, &groups) < 0) return cannot_open(comm, g, seq);
    char why[300];
    if (ccl__cuda_fold(c->coll.id.dtype, c->coll.id.op, &a, groups, s, why, sizeof why) < 0)
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "GPU-resident path: %s", why);
    CCL_CHECK(host_wait(comm, &(struct host_wait){.cu = cu, .s = s},
                        "GPU-resident path: the call's kernel"));
    for (int p = 0; p < n; p++)
        if (p != me) atomic_store_explicit(&words_of(comm, p)->go, seq, memory_order_release);
    g->ran++;
    return CCL_OK;
}

ccl_status_t ccl__gpu_direct_try(struct ccl_comm *comm, const struct ccl__call *c, int ordered, void *stream,
                                 int *done) {
    *done = 0;
    if (!comm->gpu_direct || c->is_p2p) return CCL_OK;
    /* A premultiplied sum's scaling is the staged path's (coll/ops.c). */
    if (!kind_fits(c->coll.id.kind) || c->coll.id.count == 0 || c->coll.id.op == CCL__OP_PREMUL_SUM) return CCL_OK;
    const struct ccl__cu *cu = ccl__cuda();
    const char *what = ccl__op_kind_name(c->coll.id.kind);
    /* A device buffer binds comm to its context (classify did), a stream
     * must be of that context too. */
    if (ordered) {
        CUcontext sctx = NULL;
        CUresult r = stream ? cu->StreamGetCtx(stream, &sctx) : cu->CtxGetCurrent(&sctx);
        if (r == CCL__CUDA_SUCCESS && sctx) CCL_CHECK(ccl__device_bind(comm, sctx, what));
    }
    struct ccl__gpu_direct *g = comm->device->gpu; /* ccl__gpu_direct_ready made it */
    CUcontext prev = NULL, ctx = comm->device->ctx;
    cu->CtxGetCurrent(&prev);
    if (ctx && prev != ctx) cu->CtxSetCurrent(ctx);
    /* Step 1 (a call without a stream followed the legacy default stream
     * at issue already: classify). */
    ccl_status_t st = CCL_OK;
    if (ordered)
        st = host_wait(comm, &(struct host_wait){.cu = cu, .s = stream},
                       "GPU-resident path: the work queued before the call on its stream");
    struct call_record mine, *all = calloc((size_t)comm->nranks, sizeof(*all));
    if (!all && st == CCL_OK) st = ccl__set_error(comm, CCL_ERR_NO_MEMORY, "GPU-resident path: out of memory");
    if (ctx && st == CCL_OK) my_record(comm, cu, g, c, &mine);
    else memset(&mine, 0, sizeof(mine)); /* (a failed rank still trades, saying no: nobody waits for it) */
    /* Step 2. */
    if (all) {
        ccl_status_t ag = ccl__ring_gather_bytes(comm, c->coll.id.seq | CCL__SEQ_GPU_TRADE, &mine, all, sizeof(mine));
        if (st == CCL_OK) st = ag;
    }
    int every = st == CCL_OK;
    for (int r = 0; r < comm->nranks && every; r++) every = all[r].ok;
    if (every) {
        CUstream s = stream;
        st = ordered ? CCL_OK : ccl__device_stream(comm, &s);
        if (st == CCL_OK) st = run(comm, cu, g, c, all, s);
        /* Peers may wait on this rank: failing lets them go. */
        if (st < 0) ccl__comm_fail(comm, st);
        *done = st != 1;
        if (st == 1) st = CCL_OK;
    }
    if (ctx && prev != ctx) cu->CtxSetCurrent(prev);
    free(all);
    return st;
}

unsigned ccl__gpu_direct_calls(const struct ccl_comm *comm) {
    return comm->device && comm->device->gpu ? comm->device->gpu->ran : 0;
}

void ccl__gpu_direct_free(struct ccl_comm *comm) {
    struct ccl__device_state *d = comm->device;
    struct ccl__gpu_direct *g = d ? d->gpu : NULL;
    if (!g) return;
    const struct ccl__cu *cu = ccl__cuda();
    /* Every call waited for its kernel: nothing reads the mappings now. */
    if (cu && d->ctx && cu->CtxSetCurrent(d->ctx) == CCL__CUDA_SUCCESS)
        for (int i = 0; i < g->nopened; i++) cu->IpcCloseMemHandle(g->opened[i].base);
    free(g);
    d->gpu = NULL;
}
