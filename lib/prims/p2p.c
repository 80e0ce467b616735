/* Point-to-point transfers progressed together: every transfer that is
 * first in line for its (peer, direction) moves whatever slots it can, so
 * the order in which a group lists its sends and receives never matters. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/socket.h"
#include "prims/prims.h"
#include "prims/wait.h"

static ccl_status_t p2p_mismatch(struct ccl_comm *comm, const struct ccl__p2p_xfer *x,
                                 const struct ccl__slot_meta *m, size_t want, const char *what) {
    if (m->kind != CCL__K_P2P)
        ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                       "%s: expected a message from rank %d but it is running %s #%u: calls were issued in a "
                       "different order",
                       what, x->peer, ccl__op_kind_name(m->kind), m->seq);
    else
        ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                       "%s: rank %d sent message #%u with count %llu of %s; this rank receives #%u with count %zu "
                       "of %s (%zu bytes expected in this slot, %u came)",
                       what, x->peer, m->seq, (unsigned long long)m->count, ccl_dtype_name((ccl_dtype_t)m->dtype),
                       x->seq, x->count, ccl_dtype_name(x->dtype), want, m->bytes);
    return ccl__comm_fail(comm, CCL_ERR_INVALID_USAGE);
}

static void trace_slot(struct ccl_comm *comm, const struct ccl__p2p_xfer *x, int kind, const struct ccl__conn *c,
                       double t0, size_t bytes) {
    struct ccl__trace *t = comm->trace;
    size_t slice = c->slot_bytes / ccl_dtype_size(x->dtype) * ccl_dtype_size(x->dtype);
    struct ccl__trace_event e = {.t0 = t0, .t1 = ccl__now(), .kind = (uint8_t)(x->is_send ? CCL__TR_SEND : CCL__TR_RECV),
                                 .coll = (uint8_t)kind, .algo = CCL__TR_DIRECT, .phase = CCL__TR_P2P,
                                 .transport = (uint8_t)c->t->id, .peer = x->peer, .seq = x->seq,
                                 .round = (uint32_t)(x->done_bytes / slice), .offset = x->done_bytes, .bytes = bytes};
    e.link_seq = x->is_send ? t->sent[x->peer]++ : t->received[x->peer]++;
    ccl__trace_add(t, &e);
}

/* Moves as many slots of x as possible now; *moved set when any did. */
static ccl_status_t step(struct ccl_comm *comm, struct ccl__p2p_xfer *x, int kind, int *moved, const char *what) {
    struct ccl__conn *c = comm->conns[x->peer];
    size_t esize = ccl_dtype_size(x->dtype), total = x->count * esize;
    size_t slice = c->slot_bytes / esize * esize;
    while (x->done_bytes < total) {
        size_t bytes = total - x->done_bytes < slice ? total - x->done_bytes : slice;
        double t0 = comm->trace ? ccl__now() : 0;
        struct ccl__slot_meta m;
        ccl_status_t st;
        if (x->is_send) {
            void *out;
            st = c->t->send_acquire(c, &out);
            if (st == CCL_INPROGRESS) return CCL_OK;
            if (st < 0) return st;
            memcpy(out, (const char *)x->buf + x->done_bytes, bytes);
            m = (struct ccl__slot_meta){.bytes = (uint32_t)bytes, .kind = CCL__K_P2P, .dtype = (uint8_t)x->dtype,
                                        .seq = x->seq, .root = -1, .count = x->count};
            if ((st = c->t->send_commit(c, &m)) < 0) return st;
        } else {
            const void *in;
            st = c->t->recv_acquire(c, &in, &m);
            if (st == CCL_INPROGRESS) return CCL_OK;
            if (st < 0) return st;
            if (m.kind != CCL__K_P2P || m.seq != x->seq || m.count != x->count || m.dtype != x->dtype ||
                m.bytes != bytes)
                return p2p_mismatch(comm, x, &m, bytes, what);
            memcpy((char *)x->buf + x->done_bytes, in, bytes);
            if ((st = c->t->recv_release(c)) < 0) return st;
        }
        if (__builtin_expect(comm->trace != NULL, 0)) trace_slot(comm, x, kind, c, t0, bytes);
        x->done_bytes += bytes;
        *moved = 1;
    }
    return CCL_OK;
}

/* Sends to self are copied straight into the matching receive from self
 * (k-th send with k-th receive). */
static ccl_status_t match_self(struct ccl_comm *comm, struct ccl__p2p_xfer *x, int n, const char *what) {
    int r = comm->rank;
    for (int i = 0; i < n; i++) {
        if (x[i].peer != r || !x[i].is_send || x[i].matched) continue;
        int j = 0;
        while (j < n && !(x[j].peer == r && !x[j].is_send && !x[j].matched)) j++;
        size_t bytes = x[i].count * ccl_dtype_size(x[i].dtype);
        if (j == n || x[j].count * ccl_dtype_size(x[j].dtype) != bytes) {
            ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: a send to self has no receive from self of %zu bytes",
                           what, bytes);
            return CCL_ERR_INVALID_USAGE;
        }
        if (bytes) memmove(x[j].buf, x[i].buf, bytes);
        x[i].matched = x[j].matched = 1;
        x[i].done_bytes = x[j].done_bytes = bytes;
    }
    for (int i = 0; i < n; i++)
        if (x[i].peer == r && !x[i].matched) {
            ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: a receive from self has no matching send to self", what);
            return CCL_ERR_INVALID_USAGE;
        }
    return CCL_OK;
}

/* Waits until every connection has sent what was committed; only the
 * unflushed ones count as waited on (see `waiting` below). */
static ccl_status_t flush_all(struct ccl_comm *comm, struct ccl__conn **conns, struct ccl__conn **waiting, int nc,
                              const char *what) {
    struct ccl__waiter w;
    ccl__waiter_init(&w, comm, waiting, nc, what);
    for (;;) {
        ccl__waiter_arm(&w);
        int pending = 0, moved = 0;
        for (int i = 0; i < nc; i++) {
            waiting[i] = NULL;
            if (conns[i]->t->flushed(conns[i])) continue;
            waiting[i] = conns[i];
            pending = 1;
            int m = 0;
            ccl_status_t st = conns[i]->t->progress(conns[i], &m);
            if (st < 0) return ccl__comm_fail(comm, st);
            moved |= m;
        }
        if (!pending) return CCL_OK;
        if (moved) ccl__waiter_progress(&w);
        else {
            ccl_status_t st = ccl__waiter_idle(&w);
            if (st < 0) return st;
        }
    }
}

ccl_status_t ccl__p2p_run(struct ccl_comm *comm, struct ccl__p2p_xfer *x, int n, int kind, const char *what) {
    for (int i = 0; i < n; i++) {
        x[i].done_bytes = 0;
        x[i].matched = 0;
        if (x[i].peer == comm->rank) continue;
        x[i].seq = x[i].is_send ? comm->send_seq[x[i].peer]++ : comm->recv_seq[x[i].peer]++;
    }
    CCL_CHECK(match_self(comm, x, n, what));
    /* The distinct connections involved, for waiting and flushing. */
    struct ccl__conn **conns = malloc(sizeof(*conns) * (n > 0 ? (size_t)n : 1u) * 2);
    if (!conns) return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory", what);
    /* waiting[k]: conns[k] while something is still owed on it, else NULL. A
     * peer that delivered everything and left is not a failure, so the
     * waiter must not check its liveness. */
    struct ccl__conn **waiting = conns + (n > 0 ? n : 1);
    int nc = 0;
    for (int i = 0; i < n; i++) {
        struct ccl__conn *c = x[i].peer == comm->rank ? NULL : comm->conns[x[i].peer];
        int seen = !c;
        for (int k = 0; k < nc && !seen; k++) seen = conns[k] == c;
        if (!seen) conns[nc++] = c;
    }
    struct ccl__waiter w;
    ccl__waiter_init(&w, comm, waiting, nc, what);
    ccl_status_t st = CCL_OK;
    for (;;) {
        ccl__waiter_arm(&w);
        int moved = 0, left = 0;
        for (int k = 0; k < nc; k++) waiting[k] = NULL;
        for (int i = 0; i < n && st == CCL_OK; i++) {
            size_t total = x[i].count * ccl_dtype_size(x[i].dtype);
            if (x[i].done_bytes == total) continue;
            for (int k = 0; k < nc; k++)
                if (conns[k] == comm->conns[x[i].peer]) waiting[k] = conns[k];
            /* only the first unfinished transfer per (peer, direction) */
            int first = 1;
            for (int k = 0; k < i && first; k++)
                first = !(x[k].peer == x[i].peer && x[k].is_send == x[i].is_send &&
                          x[k].done_bytes < x[k].count * ccl_dtype_size(x[k].dtype));
            left = 1;
            if (first) st = step(comm, &x[i], kind, &moved, what);
        }
        for (int k = 0; k < nc && st == CCL_OK; k++) {
            int m = 0;
            st = conns[k]->t->progress(conns[k], &m);
            moved |= m;
        }
        if (st < 0) {
            st = ccl__comm_fail(comm, st);
            break;
        }
        if (!left) break;
        if (moved) ccl__waiter_progress(&w);
        else if ((st = ccl__waiter_idle(&w)) < 0) break;
    }
    if (st == CCL_OK) st = flush_all(comm, conns, waiting, nc, what);
    free(conns);
    return st;
}
