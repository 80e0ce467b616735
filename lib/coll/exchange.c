/* Gather, scatter and the uneven all-to-all: collectives that reduce
 * nothing and move each block once, between one pair of ranks. Each is a
 * set of point-to-point transfers issued as one batch (so they progress
 * together, like a group of sends and receives) under the collective's own
 * name; a block a rank keeps is copied in order with the rest. */
#include <stdint.h>
#include <stdlib.h>

#include "coll/coll.h"

enum { BLOCKING = 0, ASYNC = 1 };

struct plan {
    struct ccl__call *calls;
    int n;
    struct ccl__coll_id id; /* the call; its number is taken when it is issued */
};

/* count: the call's count argument (0 for all_to_all_v, whose counts are
 * per pair); root -1 where there is none. */
static ccl_status_t plan_alloc(ccl_comm_t *comm, struct plan *p, int max, int kind, size_t count, ccl_dtype_t dtype,
                               int root, const char *what) {
    p->n = 0;
    p->id = (struct ccl__coll_id){.kind = kind, .count = count, .dtype = dtype, .op = CCL_SUM, .root = root};
    p->calls = calloc((size_t)max, sizeof(*p->calls));
    if (!p->calls) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory", what);
    return CCL_OK;
}

static void plan_add(ccl_comm_t *comm, struct plan *p, int is_send, int peer, const void *buf, size_t count,
                     ccl_dtype_t dtype) {
    p->calls[p->n++] = (struct ccl__call){
        .comm = comm,
        .is_p2p = 1,
        .xfer = {.peer = peer, .is_send = is_send, .buf = (void *)buf, .count = count, .dtype = dtype},
    };
}

/* Every transfer carries the call's identity and number (a collective's
 * number, the same on every rank), so a rank whose call differs fails in
 * it, and a transfer left over from one call is never taken by the next. */
static ccl_status_t issue(ccl_comm_t *comm, struct plan *p, ccl_request_t **req_out, const char *what) {
    p->id.seq = comm->coll_seq++;
    for (int i = 0; i < p->n; i++) p->calls[i].xfer.coll = p->id;
    ccl_status_t st = ccl__issue_calls(comm, p->calls, p->n, req_out, what);
    free(p->calls);
    return st;
}

/* The way back: the data of a gather goes to the root, of a scatter from
 * it; each pair of root and rank also passes the call's stamp (an empty
 * transfer) the other way. So every rank hears from the rank it believes
 * is the root, within the call: ranks that disagree on the root fail in
 * it (or wait, and time out naming who is missing), and none comes
 * through this call and the next as if nothing had happened. */
static void add_stamps(ccl_comm_t *comm, struct plan *p, int root, int root_sends, ccl_dtype_t dtype) {
    int n = comm->nranks;
    if (comm->rank != root) {
        plan_add(comm, p, !root_sends, root, NULL, 0, dtype);
        return;
    }
    for (int i = 1; i < n; i++) plan_add(comm, p, root_sends, (root + i) % n, NULL, 0, dtype);
}

static ccl_status_t check_common(ccl_comm_t *comm, int async, ccl_request_t **req, ccl_dtype_t dtype,
                                 const char *what) {
    CCL_CHECK(ccl__check_comm(comm, what));
    CCL_CHECK(ccl__check_req(comm, async, req, what));
    return ccl__check_dtype(comm, dtype, what);
}

static ccl_status_t check_rooted(ccl_comm_t *comm, const void *many, const void *one, size_t count, ccl_dtype_t dtype,
                                 int root, const char *many_name, const char *one_name, const char *what) {
    if (root < 0 || root >= comm->nranks)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: root %d is not a rank (0..%d)", what, root,
                              comm->nranks - 1);
    CCL_CHECK(ccl__check_count(comm, count, (size_t)comm->nranks, dtype, what));
    if (count && !one)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: %s is NULL with count %zu", what, one_name, count);
    if (count && root == comm->rank && !many)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: %s is NULL on the root with count %zu", what,
                              many_name, count);
    return CCL_OK;
}

static ccl_status_t gather(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype, int root,
                           ccl_comm_t *comm, int async, ccl_request_t **req) {
    const char *what = "gather";
    CCL_CHECK(check_common(comm, async, req, dtype, what));
    CCL_CHECK(check_rooted(comm, recvbuf, sendbuf, count, dtype, root, "recvbuf", "sendbuf", what));
    int n = comm->nranks;
    size_t block = count * ccl_dtype_size(dtype);
    struct plan p;
    CCL_CHECK(plan_alloc(comm, &p, 2 * n, CCL__K_GATHER, count, dtype, root, what));
    plan_add(comm, &p, 1, root, sendbuf, count, dtype);
    if (comm->rank == root)
        for (int i = 0; i < n; i++) plan_add(comm, &p, 0, i, (char *)recvbuf + (size_t)i * block, count, dtype);
    add_stamps(comm, &p, root, 1, dtype);
    return issue(comm, &p, req, what);
}

static ccl_status_t scatter(const void *sendbuf, void *recvbuf, size_t count, ccl_dtype_t dtype, int root,
                            ccl_comm_t *comm, int async, ccl_request_t **req) {
    const char *what = "scatter";
    CCL_CHECK(check_common(comm, async, req, dtype, what));
    CCL_CHECK(check_rooted(comm, sendbuf, recvbuf, count, dtype, root, "sendbuf", "recvbuf", what));
    int n = comm->nranks;
    size_t block = count * ccl_dtype_size(dtype);
    struct plan p;
    CCL_CHECK(plan_alloc(comm, &p, 2 * n, CCL__K_SCATTER, count, dtype, root, what));
    if (comm->rank == root)
        for (int i = 0; i < n; i++)
            plan_add(comm, &p, 1, (root + 1 + i) % n, (const char *)sendbuf + (size_t)((root + 1 + i) % n) * block,
                     count, dtype);
    plan_add(comm, &p, 0, root, recvbuf, count, dtype);
    add_stamps(comm, &p, root, 0, dtype);
    return issue(comm, &p, req, what);
}

/* One side of an uneven all-to-all: every count and displacement in
 * range, a buffer wherever something moves. */
static ccl_status_t check_side(ccl_comm_t *comm, const void *buf, const size_t *counts, const size_t *displs,
                               ccl_dtype_t dtype, const char *side, const char *what, int *moves) {
    if (!counts || !displs)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: %scounts or %sdispls is NULL", what, side, side);
    *moves = 0;
    for (int p = 0; p < comm->nranks; p++) {
        CCL_CHECK(ccl__check_count(comm, counts[p], 1, dtype, what));
        /* The block's end, in bytes, fits in a signed 64-bit offset; the
         * displacement is bounded first, so the subtraction cannot wrap. */
        size_t most = (size_t)INT64_MAX / ccl_dtype_size(dtype);
        if (displs[p] > most || counts[p] > most - displs[p])
            return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT,
                                  "%s: %sdispls[%d] = %zu plus %scounts[%d] = %zu overflows the byte size", what, side,
                                  p, displs[p], side, p, counts[p]);
        *moves |= counts[p] != 0;
    }
    if (*moves && !buf)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: %sbuf is NULL with data to move", what, side);
    return CCL_OK;
}

static ccl_status_t all_to_all_v(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                 const size_t *recvcounts, const size_t *rdispls, ccl_dtype_t dtype, ccl_comm_t *comm,
                                 int async, ccl_request_t **req) {
    const char *what = "all_to_all_v";
    CCL_CHECK(check_common(comm, async, req, dtype, what));
    int sends, recvs;
    CCL_CHECK(check_side(comm, sendbuf, sendcounts, sdispls, dtype, "send", what, &sends));
    CCL_CHECK(check_side(comm, recvbuf, recvcounts, rdispls, dtype, "recv", what, &recvs));
    if (sends && recvs && sendbuf == recvbuf)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "%s: in-place is not supported (sendbuf == recvbuf)",
                              what);
    int n = comm->nranks, r = comm->rank;
    size_t es = ccl_dtype_size(dtype);
    struct plan p;
    CCL_CHECK(plan_alloc(comm, &p, 2 * n, CCL__K_ALL_TO_ALL_V, 0, dtype, -1, what));
    /* Start with the next peer, as the even all-to-all does. */
    for (int i = 0; i < n; i++) {
        int to = (r + i) % n, from = ccl__mod(r - i, n);
        plan_add(comm, &p, 1, to, (const char *)sendbuf + sdispls[to] * es, sendcounts[to], dtype);
        plan_add(comm, &p, 0, from, (char *)recvbuf + rdispls[from] * es, recvcounts[from], dtype);
    }
    return issue(comm, &p, req, what);
}

CCL_API ccl_status_t ccl_gather(const void *s, void *r, size_t sendcount, ccl_dtype_t dt, int root, ccl_comm_t *comm) {
    return gather(s, r, sendcount, dt, root, comm, BLOCKING, NULL);
}
CCL_API ccl_status_t ccl_gather_async(const void *s, void *r, size_t sendcount, ccl_dtype_t dt, int root,
                                      ccl_comm_t *comm, ccl_request_t **req) {
    return gather(s, r, sendcount, dt, root, comm, ASYNC, req);
}
CCL_API ccl_status_t ccl_scatter(const void *s, void *r, size_t recvcount, ccl_dtype_t dt, int root,
                                 ccl_comm_t *comm) {
    return scatter(s, r, recvcount, dt, root, comm, BLOCKING, NULL);
}
CCL_API ccl_status_t ccl_scatter_async(const void *s, void *r, size_t recvcount, ccl_dtype_t dt, int root,
                                       ccl_comm_t *comm, ccl_request_t **req) {
    return scatter(s, r, recvcount, dt, root, comm, ASYNC, req);
}
CCL_API ccl_status_t ccl_all_to_all_v(const void *s, const size_t *sendcounts, const size_t *sdispls, void *r,
                                      const size_t *recvcounts, const size_t *rdispls, ccl_dtype_t dt,
                                      ccl_comm_t *comm) {
    return all_to_all_v(s, sendcounts, sdispls, r, recvcounts, rdispls, dt, comm, BLOCKING, NULL);
}
CCL_API ccl_status_t ccl_all_to_all_v_async(const void *s, const size_t *sendcounts, const size_t *sdispls, void *r,
                                            const size_t *recvcounts, const size_t *rdispls, ccl_dtype_t dt,
                                            ccl_comm_t *comm, ccl_request_t **req) {
    return all_to_all_v(s, sendcounts, sdispls, r, recvcounts, rdispls, dt, comm, ASYNC, req);
}
