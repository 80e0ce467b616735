/*
 * The one issue path. A public call is checked, then issued here: inside a
 * group it is recorded (group.c); outside one it is a group of its own,
 * dispatched at once. Either way a communicator's calls reach
 * ccl__dispatch together, which decides how they run, once:
 *   1. a single collective on a communicator whose ranks share one GPU
 *      tries the GPU-resident path (on the executor, after the argument
 *      check under CCL_CHECK);
 *   2. calls that name a CUDA stream are ordered on it (a stream link);
 *   3. the rest runs as one batch (batch.c), inline when the caller waits
 *      for it on an idle communicator of a one-communicator group, else
 *      queued on the executor.
 * The allocation-free inline path of a single blocking host call skips
 * all of that when it cannot apply.
 */
#include <stdlib.h>

#include "coll/coll.h"
#include "core/flight.h"
#include "core/log.h"
#include "core/status.h"
#include "device/device.h"
#include "device/gpu_direct.h"

void ccl__call_complete(struct ccl__call *call, ccl_status_t st) {
    ccl__flight_end(call->comm->flight, call->flight, st, -1);
    if (call->req) {
        call->req->status = st;
        atomic_store_explicit(&call->req->done, 1, memory_order_release);
    }
}

/* The stream a batch is ordered on: the end's, else the one its calls
 * name (they must agree). *ordered = 0 runs it now: no stream, or the
 * default stream in a process without CUDA. */
static ccl_status_t batch_stream(struct ccl_comm *comm, struct ccl__call *b, int m, const struct ccl__group_end *end,
                                 int *ordered, struct ccl__stream_link **link) {
    int named = end->on_stream;
    void *stream = end->stream;
    for (int k = 0; k < m && !end->on_stream; k++) {
        if (!b[k].on_stream) continue;
        if (named && b[k].stream != stream)
            return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                                  "group: calls on one communicator name two CUDA streams; a group orders each "
                                  "communicator's calls on one stream");
        named = 1;
        stream = b[k].stream;
    }
    *ordered = 0;
    if (!named) return CCL_OK;
    char why[700];
    ccl_status_t st = ccl__stream_usable(stream, ordered, why, sizeof why);
    if (st < 0) return ccl__set_error(comm, st, "%s", why);
    return *ordered ? ccl__stream_link_new(comm, stream, b, m, link) : CCL_OK;
}

/* The GPU-resident try, run on the executor: its record trade and its
 * waits are the engine's own (device/gpu_direct.h). */
struct gpu_try {
    struct ccl__call *c;
    int ordered;
    void *stream;
    int done;
    ccl_status_t st;
};

static void gpu_try_run(struct ccl_comm *comm, void *arg) {
    struct gpu_try *g = arg;
    g->st = ccl__comm_health(comm);
    /* CCL_CHECK: before the ranks part ways on what they were called with
     * (a count of 0 here, another kind there); once: the staged path
     * that may follow does not check again. */
    if (g->st == CCL_OK && comm->params.check) {
        g->st = ccl__check_args_agree(comm, &g->c->coll);
        g->c->coll.agreed = g->st == CCL_OK;
    }
    if (g->st == CCL_OK) g->st = ccl__gpu_direct_try(comm, g->c, g->ordered, g->stream, &g->done);
}

/* Whether a call goes to the GPU-resident try: the same answer on every
 * rank that was called alike (whatever its buffers are). */
static int gpu_candidate(const struct ccl_comm *comm, const struct ccl__call *c) {
    return comm->gpu_direct && !c->is_p2p && !c->coll.planner_only;
}

/* A collective the GPU-resident path may take, on the stream the group
 * orders it on: its status, or 1 when it did not take it. Async calls
 * too (they complete before they return): whether a rank tries must not
 * depend on what differs between ranks. */
static ccl_status_t gpu_try(struct ccl_comm *comm, struct ccl__call *c, const struct ccl__group_end *end) {
    if (!gpu_candidate(comm, c)) return 1;
    struct gpu_try g = {.c = c, .stream = end->on_stream ? end->stream : c->stream};
    if (end->on_stream || c->on_stream) {
        char why[700];
        ccl_status_t st = ccl__stream_usable(g.stream, &g.ordered, why, sizeof why);
        if (st < 0) return ccl__set_error(comm, st, "%s", why);
    }
    CCL_CHECK(ccl__gpu_direct_ready(comm));
    ccl__exec_call(comm, gpu_try_run, &g);
    return g.st < 0 || g.done ? g.st : 1;
}

ccl_status_t ccl__dispatch(struct ccl_comm *comm, struct ccl__call *calls, int n, const struct ccl__group_end *end,
                           int alone, struct ccl_request *w, int *must_wait, const char *what) {
    *must_wait = 0;
    ccl_status_t st = n == 1 ? gpu_try(comm, calls, end) : 1;
    if (st != 1) {
        ccl__call_complete(&calls[0], st); /* it ran already */
        return st;
    }
    struct ccl__stream_link *link = NULL;
    int ordered = 0, blocking = 0;
    st = batch_stream(comm, calls, n, end, &ordered, &link);
    if (st < 0) {
        for (int k = 0; k < n; k++) ccl__call_complete(&calls[k], st);
        return st;
    }
    for (int k = 0; k < n; k++) blocking |= calls[k].req == NULL;
    /* A stream-ordered batch is waited for by its stream, not here. */
    if (ordered || !blocking) w = NULL;
    if (w) ccl__request_init(w, comm);
    st = ccl__submit_batch(comm, calls, n, w, alone && !ordered, what, link);
    *must_wait = st == CCL_OK && w != NULL;
    return st;
}

/* The flight recorder's entries for calls being issued: one per
 * collective and per point-to-point call, one for a gather's, scatter's
 * or all_to_all_v's transfers together. Running when the caller runs the
 * call itself at once (the inline path may still fall back to the
 * executor: then it is running there a moment later). */
static void flight_record(struct ccl_comm *comm, struct ccl__call *calls, int n, int inline_run) {
    int state = inline_run ? CCL__FLIGHT_RUNNING : CCL__FLIGHT_ISSUED;
    for (int i = 0; i < n; i++) {
        struct ccl__call *c = &calls[i];
        const struct ccl__coll_id *id = c->is_p2p ? &c->xfer.coll : &c->coll.id;
        if (c->is_p2p && id->kind && i > 0 && calls[i - 1].is_p2p && calls[i - 1].xfer.coll.kind == id->kind &&
            calls[i - 1].xfer.coll.seq == id->seq) {
            c->flight = calls[i - 1].flight; /* the same exchange */
        } else if (c->is_p2p && !id->kind) {
            c->flight = ccl__flight_begin(comm->flight, CCL__K_P2P, 0, c->xfer.count, c->xfer.dtype, -1, c->xfer.peer,
                                          c->xfer.is_send, state, ccl__status_steps(comm));
        } else {
            int rooted = id->kind == CCL__K_BROADCAST || id->kind == CCL__K_REDUCE || id->kind == CCL__K_GATHER ||
                         id->kind == CCL__K_SCATTER;
            c->flight = ccl__flight_begin(comm->flight, id->kind, id->seq, id->count, id->dtype,
                                          ccl__kind_reduces(id->kind) ? (int)id->op : -1, rooted ? id->root : -1, 0,
                                          state, ccl__status_steps(comm));
        }
    }
}

ccl_status_t ccl__issue_calls(struct ccl_comm *comm, struct ccl__call *calls, int n, ccl_request_t **req_out,
                              const char *what) {
    ccl_status_t st = ccl__comm_health(comm);
    if (st < 0) return st;
    if (ccl__cuda_in_process())
        CCL_CHECK(ccl__device_classify(comm, calls, n, what ? what : calls[0].is_p2p ? "send/recv" : ccl__op_kind_name(calls[0].coll.id.kind)));
    struct ccl_request *req = NULL;
    if (req_out) {
        req = ccl__request_new(comm);
        if (!req) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "out of memory for a request");
    }
    calls[0].req = req; /* the batch completes it with the rest */
    for (int i = 0; i < n; i++)
        if (!calls[i].is_p2p) calls[i].coll.id.seq = comm->coll_seq++;
    int grouped = ccl__group_open();
    int inline_run = !grouped && !req && n == 1 && !calls[0].device && !gpu_candidate(comm, calls);
    if (comm->flight) flight_record(comm, calls, n, inline_run);
    if (grouped) {
        for (int i = 0; i < n && st == CCL_OK; i++) st = ccl__group_record(&calls[i]);
    } else if (inline_run && ccl__exec_try_inline(comm)) {
        return ccl__run_inline(calls);
    } else {
        /* A group of its own. */
        struct ccl_request local;
        int must_wait = 0;
        st = ccl__dispatch(comm, calls, n, &(struct ccl__group_end){0}, 1, &local, &must_wait, what);
        if (must_wait) {
            ccl_status_t w = ccl__request_wait(&local);
            if (st == CCL_OK) st = w;
        }
    }
    if (st < 0) {
        if (req) ccl__request_retire(req);
        return st;
    }
    if (req_out) *req_out = req;
    return CCL_OK;
}

ccl_status_t ccl__issue(struct ccl__call *call, ccl_request_t **req_out) {
    return ccl__issue_calls(call->comm, call, 1, req_out, NULL);
}
