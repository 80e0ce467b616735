/* The public collective and point-to-point calls and their async twins:
 * check the communicator and arguments, then issue. */
#include <stdlib.h>

#include "coll/coll.h"

/* The async twins pass ASYNC with the user's req pointer, which must not be
 * NULL; the blocking calls pass BLOCKING. */
enum { BLOCKING = 0, ASYNC = 1 };

/* The stream of a _stream twin's call (NULL for the others). */
struct on {
    ccl_stream_t stream;
};

/* The checks every collective passes before it is issued, the library's
 * own (ccl__own_all_gather) included. */
static ccl_status_t issue_coll(struct ccl__call *call, int async, ccl_request_t **req, const char *what) {
    CCL_CHECK(ccl__check_comm(call->comm, what));
    CCL_CHECK(ccl__check_req(call->comm, async, req, what));
    CCL_CHECK(ccl__op_take(call->comm, &call->coll, what));
    CCL_CHECK(ccl__check_coll(call->comm, &call->coll, what));
    return ccl__issue(call, req);
}

static ccl_status_t coll_on(int kind, const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype,
                            ccl_op_t op, int root, ccl_comm_t *comm, int async, ccl_request_t **req, const char *what,
                            const struct on *on) {
    struct ccl__call call = {.comm = comm, .on_stream = on != NULL, .stream = on ? on->stream : NULL};
    call.coll = (struct ccl__coll_args){
        .id = {.kind = kind, .count = count, .dtype = dtype, .op = op, .root = root},
        .sendbuf = sendbuf,
        .recvbuf = recvbuf,
    };
    return issue_coll(&call, async, req, what);
}

static ccl_status_t p2p_on(int is_send, void *buf, size_t count, ccl_dtype_t dtype, int peer, ccl_comm_t *comm,
                           int async, ccl_request_t **req, const char *what, const struct on *on) {
    CCL_CHECK(ccl__check_comm(comm, what));
    CCL_CHECK(ccl__check_req(comm, async, req, what));
    CCL_CHECK(ccl__check_p2p(comm, buf, count, dtype, peer, what));
    struct ccl__call call = {.comm = comm, .is_p2p = 1, .on_stream = on != NULL, .stream = on ? on->stream : NULL};
    call.xfer = (struct ccl__p2p_xfer){.peer = peer, .is_send = is_send, .buf = buf, .count = count, .dtype = dtype};
    return ccl__issue(&call, req);
}

static ccl_status_t coll(int kind, const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype, ccl_op_t op,
                         int root, ccl_comm_t *comm, int async, ccl_request_t **req, const char *what) {
    return coll_on(kind, sendbuf, recvbuf, count, dtype, op, root, comm, async, req, what, NULL);
}

ccl_status_t ccl__own_all_gather(const void *sendbuf, void *recvbuf, size_t bytes, ccl_comm_t *comm,
                                 const char *what) {
    struct ccl__call call = {.comm = comm};
    call.coll = (struct ccl__coll_args){
        .id = {.kind = CCL__K_ALL_GATHER, .count = bytes, .dtype = CCL_UINT8, .op = CCL_SUM, .root = -1},
        .sendbuf = sendbuf,
        .recvbuf = recvbuf,
        .planner_only = 1,
    };
    return issue_coll(&call, BLOCKING, NULL, what);
}

static ccl_status_t p2p(int is_send, void *buf, size_t count, ccl_dtype_t dtype, int peer, ccl_comm_t *comm,
                        int async, ccl_request_t **req, const char *what) {
    return p2p_on(is_send, buf, count, dtype, peer, comm, async, req, what, NULL);
}

ccl_status_t ccl__own_send(const void *buf, size_t bytes, int peer, ccl_comm_t *comm, const char *what) {
    return p2p(1, (void *)buf, bytes, CCL_UINT8, peer, comm, BLOCKING, NULL, what);
}
ccl_status_t ccl__own_recv(void *buf, size_t bytes, int peer, ccl_comm_t *comm, const char *what) {
    return p2p(0, buf, bytes, CCL_UINT8, peer, comm, BLOCKING, NULL, what);
}

CCL_API ccl_status_t ccl_all_reduce(const void *s, void *r, size_t count, ccl_dtype_t dt, ccl_op_t op,
                                    ccl_comm_t *comm) {
    return coll(CCL__K_ALL_REDUCE, s, r, count, dt, op, -1, comm, BLOCKING, NULL, "all_reduce");
}
CCL_API ccl_status_t ccl_all_reduce_async(const void *s, void *r, size_t count, ccl_dtype_t dt, ccl_op_t op,
                                          ccl_comm_t *comm, ccl_request_t **req) {
    return coll(CCL__K_ALL_REDUCE, s, r, count, dt, op, -1, comm, ASYNC, req, "all_reduce");
}

CCL_API ccl_status_t ccl_reduce_scatter(const void *s, void *r, size_t recvcount, ccl_dtype_t dt, ccl_op_t op,
                                        ccl_comm_t *comm) {
    return coll(CCL__K_REDUCE_SCATTER, s, r, recvcount, dt, op, -1, comm, BLOCKING, NULL, "reduce_scatter");
}
CCL_API ccl_status_t ccl_reduce_scatter_async(const void *s, void *r, size_t recvcount, ccl_dtype_t dt, ccl_op_t op,
                                              ccl_comm_t *comm, ccl_request_t **req) {
    return coll(CCL__K_REDUCE_SCATTER, s, r, recvcount, dt, op, -1, comm, ASYNC, req, "reduce_scatter");
}

CCL_API ccl_status_t ccl_all_gather(const void *s, void *r, size_t sendcount, ccl_dtype_t dt, ccl_comm_t *comm) {
    return coll(CCL__K_ALL_GATHER, s, r, sendcount, dt, CCL_SUM, -1, comm, BLOCKING, NULL, "all_gather");
}
CCL_API ccl_status_t ccl_all_gather_async(const void *s, void *r, size_t sendcount, ccl_dtype_t dt, ccl_comm_t *comm,
                                          ccl_request_t **req) {
    return coll(CCL__K_ALL_GATHER, s, r, sendcount, dt, CCL_SUM, -1, comm, ASYNC, req, "all_gather");
}

CCL_API ccl_status_t ccl_broadcast(const void *s, void *r, size_t count, ccl_dtype_t dt, int root, ccl_comm_t *comm) {
    return coll(CCL__K_BROADCAST, s, r, count, dt, CCL_SUM, root, comm, BLOCKING, NULL, "broadcast");
}
CCL_API ccl_status_t ccl_broadcast_async(const void *s, void *r, size_t count, ccl_dtype_t dt, int root,
                                         ccl_comm_t *comm, ccl_request_t **req) {
    return coll(CCL__K_BROADCAST, s, r, count, dt, CCL_SUM, root, comm, ASYNC, req, "broadcast");
}

CCL_API ccl_status_t ccl_reduce(const void *s, void *r, size_t count, ccl_dtype_t dt, ccl_op_t op, int root,
                                ccl_comm_t *comm) {
    return coll(CCL__K_REDUCE, s, r, count, dt, op, root, comm, BLOCKING, NULL, "reduce");
}
CCL_API ccl_status_t ccl_reduce_async(const void *s, void *r, size_t count, ccl_dtype_t dt, ccl_op_t op, int root,
                                      ccl_comm_t *comm, ccl_request_t **req) {
    return coll(CCL__K_REDUCE, s, r, count, dt, op, root, comm, ASYNC, req, "reduce");
}

CCL_API ccl_status_t ccl_all_to_all(const void *s, void *r, size_t count, ccl_dtype_t dt, ccl_comm_t *comm) {
    return coll(CCL__K_ALL_TO_ALL, s, r, count, dt, CCL_SUM, -1, comm, BLOCKING, NULL, "all_to_all");
}
CCL_API ccl_status_t ccl_all_to_all_async(const void *s, void *r, size_t count, ccl_dtype_t dt, ccl_comm_t *comm,
                                          ccl_request_t **req) {
    return coll(CCL__K_ALL_TO_ALL, s, r, count, dt, CCL_SUM, -1, comm, ASYNC, req, "all_to_all");
}

CCL_API ccl_status_t ccl_barrier(ccl_comm_t *comm) {
    return coll(CCL__K_BARRIER, NULL, NULL, 0, CCL_UINT8, CCL_SUM, -1, comm, BLOCKING, NULL, "barrier");
}
CCL_API ccl_status_t ccl_barrier_async(ccl_comm_t *comm, ccl_request_t **req) {
    return coll(CCL__K_BARRIER, NULL, NULL, 0, CCL_UINT8, CCL_SUM, -1, comm, ASYNC, req, "barrier");
}

CCL_API ccl_status_t ccl_send(const void *buf, size_t count, ccl_dtype_t dt, int peer, ccl_comm_t *comm) {
    return p2p(1, (void *)buf, count, dt, peer, comm, BLOCKING, NULL, "send");
}
CCL_API ccl_status_t ccl_send_async(const void *buf, size_t count, ccl_dtype_t dt, int peer, ccl_comm_t *comm,
                                    ccl_request_t **req) {
    return p2p(1, (void *)buf, count, dt, peer, comm, ASYNC, req, "send");
}
CCL_API ccl_status_t ccl_recv(void *buf, size_t count, ccl_dtype_t dt, int peer, ccl_comm_t *comm) {
    return p2p(0, buf, count, dt, peer, comm, BLOCKING, NULL, "recv");
}
CCL_API ccl_status_t ccl_recv_async(void *buf, size_t count, ccl_dtype_t dt, int peer, ccl_comm_t *comm,
                                    ccl_request_t **req) {
    return p2p(0, buf, count, dt, peer, comm, ASYNC, req, "recv");
}

static ccl_status_t recv_any(void *buf, size_t count, ccl_dtype_t dtype, ccl_comm_t *comm, int *source, int async,
                             ccl_request_t **req) {
    const char *what = "recv_any";
    CCL_CHECK(ccl__check_comm(comm, what));
    CCL_CHECK(ccl__check_req(comm, async, req, what));
    /* peer 0 stands in for the range check; the engine picks the real one */
    CCL_CHECK(ccl__check_p2p(comm, buf, count, dtype, 0, what));
    if (!source) return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: source is NULL", what);
    if (count == 0)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                              "%s: count 0 (a send of nothing moves nothing, so there is no message to take)", what);
    if (ccl__group_open())
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "%s: not inside a group (its peer is known only when it runs; name the peer with "
                              "ccl_recv)", what);
    if (comm->nranks == 1)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: no other rank can send to the only rank", what);
    struct ccl__call call = {.comm = comm, .is_p2p = 1};
    call.xfer = (struct ccl__p2p_xfer){
        .peer = CCL__ANY_SOURCE, .source = source, .is_send = 0, .buf = buf, .count = count, .dtype = dtype};
    return ccl__issue(&call, req);
}

CCL_API ccl_status_t ccl_recv_any(void *buf, size_t count, ccl_dtype_t dt, ccl_comm_t *comm, int *source) {
    return recv_any(buf, count, dt, comm, source, BLOCKING, NULL);
}
CCL_API ccl_status_t ccl_recv_any_async(void *buf, size_t count, ccl_dtype_t dt, ccl_comm_t *comm, int *source,
                                        ccl_request_t **req) {
    return recv_any(buf, count, dt, comm, source, ASYNC, req);
}

CCL_API ccl_status_t ccl_test(ccl_request_t *req, int *done) {
    if (!req || !done) return CCL_ERR_INVALID_ARGUMENT;
    if (!ccl__request_live(req)) return CCL_ERR_INVALID_USAGE; /* waited, or being waited on */
    *done = atomic_load_explicit(&req->done, memory_order_acquire);
    return *done ? req->status : CCL_INPROGRESS;
}

CCL_API ccl_status_t ccl_wait(ccl_request_t *req) {
    if (!req) return CCL_ERR_INVALID_ARGUMENT;
    /* One waiter: a second thread would wait on a request the first one
     * retires under it. */
    if (!ccl__request_claim(req)) return CCL_ERR_INVALID_USAGE; /* waited, or being waited on */
    ccl_status_t st = ccl__request_wait(req);
    ccl__request_retire(req);
    return st;
}

/* The _stream twins: the call carries its stream, in a group of its own
 * ended on that stream (inside an open group, the group's end orders each
 * communicator's calls on the stream they name). */
static void group_open(void) { ccl__group_begin(); }

static ccl_status_t on_stream(ccl_status_t call_st, ccl_stream_t stream) {
    ccl_status_t st = ccl__group_end_on(stream);
    return call_st < 0 ? call_st : st;
}

CCL_API ccl_status_t ccl_all_reduce_stream(const void *s, void *r, size_t count, ccl_dtype_t dt, ccl_op_t op,
                                           ccl_comm_t *comm, ccl_stream_t stream) {
    group_open();
    return on_stream(coll_on(CCL__K_ALL_REDUCE, s, r, count, dt, op, -1, comm, BLOCKING, NULL, "all_reduce", &(struct on){stream}), stream);
}
CCL_API ccl_status_t ccl_reduce_scatter_stream(const void *s, void *r, size_t recvcount, ccl_dtype_t dt, ccl_op_t op,
                                               ccl_comm_t *comm, ccl_stream_t stream) {
    group_open();
    return on_stream(coll_on(CCL__K_REDUCE_SCATTER, s, r, recvcount, dt, op, -1, comm, BLOCKING, NULL, "reduce_scatter", &(struct on){stream}), stream);
}
CCL_API ccl_status_t ccl_all_gather_stream(const void *s, void *r, size_t sendcount, ccl_dtype_t dt, ccl_comm_t *comm,
                                           ccl_stream_t stream) {
    group_open();
    return on_stream(coll_on(CCL__K_ALL_GATHER, s, r, sendcount, dt, CCL_SUM, -1, comm, BLOCKING, NULL, "all_gather", &(struct on){stream}), stream);
}
CCL_API ccl_status_t ccl_broadcast_stream(const void *s, void *r, size_t count, ccl_dtype_t dt, int root,
                                          ccl_comm_t *comm, ccl_stream_t stream) {
    group_open();
    return on_stream(coll_on(CCL__K_BROADCAST, s, r, count, dt, CCL_SUM, root, comm, BLOCKING, NULL, "broadcast", &(struct on){stream}), stream);
}
CCL_API ccl_status_t ccl_reduce_stream(const void *s, void *r, size_t count, ccl_dtype_t dt, ccl_op_t op, int root,
                                       ccl_comm_t *comm, ccl_stream_t stream) {
    group_open();
    return on_stream(coll_on(CCL__K_REDUCE, s, r, count, dt, op, root, comm, BLOCKING, NULL, "reduce", &(struct on){stream}), stream);
}
CCL_API ccl_status_t ccl_all_to_all_stream(const void *s, void *r, size_t count, ccl_dtype_t dt, ccl_comm_t *comm,
                                           ccl_stream_t stream) {
    group_open();
    return on_stream(coll_on(CCL__K_ALL_TO_ALL, s, r, count, dt, CCL_SUM, -1, comm, BLOCKING, NULL, "all_to_all", &(struct on){stream}), stream);
}
CCL_API ccl_status_t ccl_send_stream(const void *buf, size_t count, ccl_dtype_t dt, int peer, ccl_comm_t *comm,
                                     ccl_stream_t stream) {
    group_open();
    return on_stream(p2p_on(1, (void *)buf, count, dt, peer, comm, BLOCKING, NULL, "send", &(struct on){stream}), stream);
}
CCL_API ccl_status_t ccl_recv_stream(void *buf, size_t count, ccl_dtype_t dt, int peer, ccl_comm_t *comm,
                                     ccl_stream_t stream) {
    group_open();
    return on_stream(p2p_on(0, buf, count, dt, peer, comm, BLOCKING, NULL, "recv", &(struct on){stream}), stream);
}

CCL_API ccl_status_t ccl_comm_get_async_error(const ccl_comm_t *comm, ccl_status_t *err) {
    if (!err) return CCL_ERR_INVALID_ARGUMENT;
    CCL_CHECK(ccl__check_comm(comm, "get_async_error"));
    *err = (ccl_status_t)atomic_load(&comm->failed_status);
    return CCL_OK;
}
