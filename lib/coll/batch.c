/* Running batches: the calls of one communicator that run as one
 * operation (a single call, or everything a group recorded for that
 * communicator), queued on the executor or inline. Which calls form a
 * batch, and how it is dispatched, is issue.c's. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "device/device.h"
#include "device/pipeline.h"
#include "core/flight.h"
#include "core/log.h"
#include "core/status.h"
#include "core/socket.h"
#include "plan/plan.h"

struct batch_op {
    struct ccl__op base;
    struct ccl__call *calls;
    int n;
    struct ccl__p2p_xfer *xfers;
    int nxfers;
    const char *what; /* how errors name the transfers */
    struct ccl__stream_link *link; /* a stream-ordered batch's stream, else NULL */
};

/* The algorithm, with the call's host buffers made known to the steps,
 * which may send from them in place of slots (prims/caller_mem.c). */
static ccl_status_t run_algo(struct ccl_comm *comm, ccl__algo_fn fn, const struct ccl__coll_args *a) {
    if (a->mem != CCL__MEM_HOST || !comm->caller_mem) return fn(comm, a);
    size_t sb, rb;
    ccl__coll_span(comm, a, &sb, &rb);
    ccl__prims_call_bufs(comm, a->sendbuf, sb, a->recvbuf, rb);
    ccl_status_t st = fn(comm, a);
    ccl__prims_call_bufs_end(comm);
    return st;
}

static ccl_status_t run_planned(struct ccl_comm *comm, struct ccl__coll_args *a);

/* Whether a call tries the zero-copy path (algo/zero_copy.c): the same
 * answer on every rank called alike (the communicator's allocations are
 * made and freed collectively, in call order; CCL_ZERO_COPY_MIN, or the
 * model, decides by the call's size alike); whether it runs there is the
 * path's own agreement. */
static int zero_copy_wanted(struct ccl_comm *comm, const struct ccl__coll_args *a) {
    if (!comm->nmems || !comm->windows || !comm->params.zero_copy || !ccl__zero_copy_fits(a->id.kind) ||
        a->block_stride)
        return 0;
    size_t bytes = a->id.count * ccl_dtype_size(a->id.dtype);
    if (comm->params.zero_copy_min >= 0) return bytes >= (size_t)comm->params.zero_copy_min;
    /* the model's bytes: a block for reduce-scatter, a rank's share for all-gather (cost.h) */
    return ccl__plan_model_zero_copy_pays(comm, a->id.kind, bytes);
}

/* Calls with nothing to move never reach an algorithm: every algorithm
 * may assume at least two ranks and (barrier aside) some data. A
 * premultiplied sum is a sum of inputs scaled here, where the call runs
 * (a group's or a stream's call reads its input then, not when issued). */
static ccl_status_t run_coll(struct ccl_comm *comm, const struct ccl__coll_args *call) {
    struct ccl__coll_args a = *call;
    int kind = a.id.kind;
    /* Before the count-0 shortcut: a rank called with nothing to move
     * must still find out that the others were not. */
    if (comm->nranks > 1 && comm->params.check && !a.agreed) CCL_CHECK(ccl__check_args_agree(comm, &a));
    void *scratch = NULL;
    if (a.id.op == CCL__OP_PREMUL_SUM) CCL_CHECK(ccl__premul_apply(comm, &a, &scratch));
    ccl_status_t st = CCL_OK;
    if (comm->nranks == 1) {
        if (kind != CCL__K_BARRIER && !(kind == CCL__K_REDUCE && !a.recvbuf)) ccl__algo_local_copy(&a, a.id.count);
    } else if (a.id.count != 0 || kind == CCL__K_BARRIER) {
        int done = 0;
        if (zero_copy_wanted(comm, &a)) st = ccl__zero_copy_try(comm, &a, &done);
        if (st == CCL_OK && !done) st = run_planned(comm, &a); /* a is this call's own copy: the plan may fill it in */
    }
    free(scratch);
    return st;
}

static ccl_status_t run_planned(struct ccl_comm *comm, struct ccl__coll_args *call) {
    struct ccl__coll_args a = *call;
    int kind = a.id.kind;
    ccl__algo_fn fn = ccl__plan_call(comm, &a);
    /* A forced algorithm that cannot run this call is refused before
     * anything is sent, on every rank alike (what it needs is the same
     * everywhere): the call fails, the communicator stays usable. */
    if (!fn) return CCL_ERR_UNSUPPORTED;
    comm->flight_algo = a.plan.algo;
    if (!CCL__LOG_ON(CCL__LOG_TRACE, CCL__SUB_PLAN)) return run_algo(comm, fn, &a);
    /* CCL_DEBUG=TRACE: the model's prediction against this rank's time
     * (predicted only here: untraced calls never ask for it). */
    double predicted = ccl__plan_model_predict(comm, kind, a.plan.algo, a.id.count * ccl_dtype_size(a.id.dtype),
                                               a.plan.chunk_bytes);
    double t0 = ccl__now();
    ccl_status_t st = run_algo(comm, fn, &a);
    CCL_TRACE(CCL__SUB_PLAN, comm->rank, "%s #%u: %llu x %s: %s predicted %.3f us, measured %.1f us (chunk %zu)",
              ccl__op_kind_name(kind), a.id.seq, (unsigned long long)a.id.count, ccl_dtype_name(a.id.dtype),
              ccl__algo_names[a.plan.algo], predicted, (ccl__now() - t0) * 1e6, a.plan.chunk_bytes);
    return st;
}

/* CCL_CHECK for a gather, scatter or all_to_all_v: its transfers lie side
 * by side in calls[0..n), each stamped with the call; the ranks compare
 * the call once, and all_to_all_v's counts too, before anything moves. */
static ccl_status_t check_exchange(struct ccl_comm *comm, const struct ccl__call *calls, int n) {
    const struct ccl__coll_id *id = &calls[0].xfer.coll;
    struct ccl__coll_args a = {.id = *id, .planner_only = 1};
    CCL_CHECK(ccl__check_args_agree(comm, &a));
    if (id->kind != CCL__K_ALL_TO_ALL_V) return CCL_OK;
    size_t ranks = (size_t)comm->nranks;
    uint64_t *counts = calloc(2 * ranks, sizeof(uint64_t));
    if (!counts) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "CCL_CHECK: out of memory");
    for (int i = 0; i < n; i++) {
        const struct ccl__p2p_xfer *x = &calls[i].xfer;
        counts[(x->is_send ? 0 : ranks) + (size_t)x->peer] = x->count;
    }
    ccl_status_t st = ccl__check_counts_agree(comm, id->seq, counts, counts + ranks);
    free(counts);
    return st;
}

/* A gather's, scatter's or all_to_all_v's transfer, under CCL_CHECK. */
static int check_wanted(const struct ccl_comm *comm, const struct ccl__call *c) {
    return comm->params.check && comm->nranks > 1 && c->is_p2p && c->xfer.coll.kind;
}

static int same_exchange(const struct ccl__call *a, const struct ccl__call *b) {
    return a->is_p2p && b->is_p2p && a->xfer.coll.kind && a->xfer.coll.kind == b->xfer.coll.kind &&
           a->xfer.coll.seq == b->xfer.coll.seq;
}

/* Elements [off, off + n) of a call: of its count in every buffer
 * (all-reduce, broadcast, reduce), and of every rank's block in a
 * reduce-scatter's sendbuf and an all-gather's recvbuf, whose blocks stay
 * the whole call's count apart. */
static struct ccl__coll_args piece_of(const struct ccl__coll_args *a, size_t off, size_t n) {
    struct ccl__coll_args p = *a;
    size_t at = off * ccl_dtype_size(a->id.dtype);
    if (p.sendbuf) p.sendbuf = (const char *)p.sendbuf + at;
    if (p.recvbuf) p.recvbuf = (char *)p.recvbuf + at;
    if (a->id.kind == CCL__K_REDUCE_SCATTER || a->id.kind == CCL__K_ALL_GATHER) p.block_stride = a->id.count;
    p.id.count = n;
    p.agreed = 1;
    return p;
}

/* A call the communicator cuts into pieces (device/pipeline.h): compared
 * across the ranks once, whole, then run piece by piece, its device
 * buffers staged piece by piece where this rank's allow it. */
static ccl_status_t run_cut(struct ccl_comm *comm, const struct ccl__call *c, size_t per) {
    struct ccl__coll_args whole = c->coll;
    if (comm->nranks > 1 && comm->params.check && !whole.agreed) CCL_CHECK(ccl__check_args_agree(comm, &whole));
    struct ccl__pipe *pipe = c->pipe; /* ordered on its stream already */
    if (!pipe && c->piped) CCL_CHECK(ccl__pipe_start(comm, c, per, &pipe));
    const struct ccl__coll_args *a = pipe ? ccl__pipe_args(pipe) : &c->coll;
    ccl_status_t st = CCL_OK;
    size_t count = a->id.count, i = 0;
    for (size_t off = 0; st == CCL_OK && off < count; i++, off += per) {
        if (pipe) st = ccl__pipe_ready(comm, pipe, i);
        struct ccl__coll_args piece = piece_of(a, off, count - off < per ? count - off : per);
        comm->trace_base = (uint64_t)off * ccl_dtype_size(a->id.dtype);
        if (st == CCL_OK) st = run_coll(comm, &piece);
        if (st == CCL_OK && pipe) st = ccl__pipe_done(comm, pipe, i);
    }
    comm->trace_base = 0;
    ccl_status_t end = ccl__pipe_end(comm, pipe, st == CCL_OK);
    if (st == CCL_ERR_INVALID_USAGE) {
        /* a piece's mismatch names the piece's count: say which piece of what */
        char was[CCL__ERR_BYTES];
        pthread_mutex_lock(&comm->err_lock);
        memcpy(was, comm->last_error, sizeof was);
        pthread_mutex_unlock(&comm->err_lock);
        ccl__replace_error(comm, st, "%s (piece %zu of %zu of this rank's call of %zu elements: calls this large "
                           "run in pieces of %zu elements on a communicator with a CUDA context, CCL_DEVICE_PIECE_BYTES)",
                           was, i, (count + per - 1) / per, count, per);
    }
    return st < 0 ? st : end;
}

/* A collective, whole or in pieces. */
static ccl_status_t run_call(struct ccl_comm *comm, const struct ccl__call *c) {
    size_t per = ccl__pipe_piece_elems(comm, &c->coll);
    return per ? run_cut(comm, c, per) : run_coll(comm, &c->coll);
}

/* A collective, with its flight recorder entry. */
static ccl_status_t run_recorded(struct ccl_comm *comm, const struct ccl__call *c) {
    if (!c->flight) return run_call(comm, c);
    comm->flight_algo = -1;
    ccl__flight_running(comm->flight, c->flight, ccl__status_steps(comm));
    ccl_status_t st = run_call(comm, c);
    ccl__flight_end(comm->flight, c->flight, st, comm->flight_algo);
    return st;
}

/* The batch's transfers' flight recorder entries (one per ticket). */
static void flight_transfers(struct batch_op *b, int running, ccl_status_t st) {
    uint64_t last = 0;
    for (int i = 0; i < b->n; i++) {
        const struct ccl__call *c = &b->calls[i];
        if (!c->is_p2p || !c->flight || c->flight == last) continue;
        last = c->flight;
        if (running) ccl__flight_running(b->base.comm->flight, c->flight, ccl__status_steps(b->base.comm));
        else ccl__flight_end(b->base.comm->flight, c->flight, st, -1);
    }
}

/* Point-to-point transfers first, all together (so a group's sends and
 * receives can never deadlock on each other), then collectives in issue
 * order (every rank issues those in the same order). */
static ccl_status_t run_calls(struct batch_op *b) {
    struct ccl_comm *comm = b->base.comm;
    b->nxfers = 0;
    for (int i = 0; i < b->n; i++) {
        const struct ccl__call *c = &b->calls[i];
        if (!c->is_p2p) continue;
        if (check_wanted(comm, c) && (i == 0 || !same_exchange(c - 1, c))) {
            int end = i + 1;
            while (end < b->n && same_exchange(c, &b->calls[end])) end++;
            CCL_CHECK(check_exchange(comm, c, end - i));
        }
        b->xfers[b->nxfers++] = c->xfer;
    }
    if (b->nxfers) {
        if (comm->flight) flight_transfers(b, 1, CCL_OK);
        ccl_status_t st = ccl__p2p_run(comm, b->xfers, b->nxfers, CCL__K_P2P, b->what);
        if (comm->flight) flight_transfers(b, 0, st);
        CCL_CHECK(st);
    }
    for (int i = 0; i < b->n; i++)
        if (!b->calls[i].is_p2p) CCL_CHECK(run_recorded(comm, &b->calls[i]));
    return CCL_OK;
}

/* A stream-ordered batch first waits for its stream; device buffers are
 * staged around the run (device/device.h). */
static ccl_status_t batch_run(struct ccl__op *base) {
    struct batch_op *b = (struct batch_op *)base;
    struct ccl_comm *comm = base->comm;
    if (b->link) CCL_CHECK(ccl__stream_link_wait(comm, b->link));
    for (int i = 0; i < b->n; i++) b->calls[i].piped = ccl__pipe_fits(comm, &b->calls[i]);
    struct ccl__stage *stage;
    CCL_CHECK(ccl__stage_in(comm, b->calls, b->n, &stage));
    ccl_status_t st = run_calls(b);
    ccl_status_t out = ccl__stage_out(comm, stage, st == CCL_OK);
    return st < 0 ? st : out;
}

/* A blocking call on an idle communicator: run it here, with nothing
 * allocated (this is the small-message latency path). */
ccl_status_t ccl__run_inline(struct ccl__call *call) {
    struct ccl_comm *comm = call->comm;
    ccl_status_t st = ccl__comm_health(comm);
    comm->flight_algo = -1;
    if (st == CCL_OK && !call->is_p2p) {
        st = run_call(comm, call); /* host buffers: cut as every rank cuts, never staged */
    } else if (st == CCL_OK) {
        /* a gather's or scatter's one transfer (a rank that is not the root) */
        if (check_wanted(comm, call)) st = check_exchange(comm, call, 1);
        if (st == CCL_OK) st = ccl__p2p_run(comm, &call->xfer, 1, CCL__K_P2P, "send/recv");
    }
    ccl__flight_end(comm->flight, call->flight, st, comm->flight_algo);
    ccl__exec_inline_done(comm);
    return st;
}

static void batch_release(struct ccl__op *base) {
    struct batch_op *b = (struct batch_op *)base;
    ccl__stream_link_release(b->link); /* run or not, the stream goes on */
    free(b->calls);
    free(b->xfers);
    free(b->base.reqs);
    free(b);
}

ccl_status_t ccl__submit_batch(struct ccl_comm *comm, struct ccl__call *calls, int n, struct ccl_request *blocking_req,
                               int inline_ok, const char *what, struct ccl__stream_link *link) {
    struct batch_op *b = calloc(1, sizeof(*b));
    if (!b) {
        ccl__stream_link_release(link);
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "out of memory queueing an operation");
    }
    b->link = link;
    b->calls = malloc(sizeof(*calls) * (size_t)n);
    b->xfers = malloc(sizeof(*b->xfers) * (size_t)n);
    b->base.reqs = malloc(sizeof(*b->base.reqs) * (size_t)(n + 1));
    if (!b->calls || !b->xfers || !b->base.reqs) {
        batch_release(&b->base);
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "out of memory queueing an operation");
    }
    memcpy(b->calls, calls, sizeof(*calls) * (size_t)n);
    b->n = n;
    b->what = what ? what : n == 1 ? "send/recv" : "group";
    for (int i = 0; i < n; i++)
        if (calls[i].req) b->base.reqs[b->base.nreqs++] = calls[i].req;
    if (blocking_req) b->base.reqs[b->base.nreqs++] = blocking_req;
    b->base.comm = comm;
    b->base.run = batch_run;
    b->base.release = batch_release;
    ccl__exec_submit(comm, &b->base, inline_ok && blocking_req != NULL);
    return CCL_OK;
}
