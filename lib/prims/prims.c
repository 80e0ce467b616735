/* Ring steps: acquire the slots a step needs, move one slice, release. */
#include "prims/prims.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/socket.h"
#include "prims/wait.h"

const char *ccl__op_kind_name(int kind) {
    static const char *const names[] = {"?",      "all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                        "reduce", "all_to_all", "barrier",        "send/recv"};
    return kind > 0 && kind <= CCL__K_P2P ? names[kind] : "?";
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

void ccl__prims_init(struct ccl__prims *p, struct ccl_comm *comm, int prev, int next, const struct ccl__coll_id *id) {
    p->comm = comm;
    p->conns[0] = prev >= 0 ? comm->conns[prev] : NULL;
    p->conns[1] = next >= 0 ? comm->conns[next] : NULL;
    p->id = *id;
    p->esize = ccl_dtype_size(id->dtype);
    p->reduce = (unsigned)id->op < CCL_NUM_OPS ? ccl__reduce_get(id->dtype, id->op) : NULL;
    /* The ring's chunk, not this rank's own links: every rank must cut the
     * data identically. It never exceeds a slot of any link on the ring. */
    size_t slot = comm->ring_chunk_bytes;
    for (int i = 0; i < 2; i++)
        if (p->conns[i]) slot = min_sz(slot, p->conns[i]->slot_bytes);
    p->slice_elems = slot / p->esize;
    snprintf(p->what, sizeof(p->what), "%s #%u", ccl__op_kind_name(id->kind), id->seq);
}

static void stamp(const struct ccl__prims *p, struct ccl__slot_meta *m, size_t bytes) {
    *m = (struct ccl__slot_meta){.bytes = (uint32_t)bytes,
                                 .kind = (uint16_t)p->id.kind,
                                 .dtype = (uint8_t)p->id.dtype,
                                 .op = (uint8_t)p->id.op,
                                 .seq = p->id.seq,
                                 .root = p->id.root,
                                 .count = p->id.count};
}

static ccl_status_t mismatch(struct ccl__prims *p, const struct ccl__slot_meta *m, size_t want_bytes) {
    int peer = p->conns[0]->peer;
    if (m->kind == p->id.kind && m->seq == p->id.seq && m->count != p->id.count)
        ccl__set_error(p->comm, CCL_ERR_INVALID_USAGE, "%s: count %llu differs from rank %d's count %llu", p->what,
                       (unsigned long long)p->id.count, peer, (unsigned long long)m->count);
    else if (m->kind == p->id.kind && m->seq == p->id.seq)
        ccl__set_error(p->comm, CCL_ERR_INVALID_USAGE,
                       "%s: arguments differ from rank %d's (dtype %s/%s, op %s/%s, root %d/%d, slice %zu/%u bytes)",
                       p->what, peer, ccl_dtype_name(p->id.dtype), ccl_dtype_name((ccl_dtype_t)m->dtype),
                       ccl_op_name(p->id.op), ccl_op_name((ccl_op_t)m->op), p->id.root, (int)m->root, want_bytes,
                       m->bytes);
    else
        ccl__set_error(p->comm, CCL_ERR_INVALID_USAGE,
                       "%s: rank %d is running %s #%u (count %llu) instead: calls were issued in a different order",
                       p->what, peer, ccl__op_kind_name(m->kind), m->seq, (unsigned long long)m->count);
    return ccl__comm_fail(p->comm, CCL_ERR_INVALID_USAGE);
}

/* Wait until the receive slot (if rbuf) and the send slot (if sbuf) are
 * available. */
static ccl_status_t acquire(struct ccl__prims *p, const void **rbuf, void **sbuf, size_t bytes) {
    struct ccl__conn *rc = rbuf ? p->conns[0] : NULL, *sc = sbuf ? p->conns[1] : NULL;
    int need_r = rc != NULL, need_s = sc != NULL;
    struct ccl__waiter w;
    int waiting = 0;
    for (;;) {
        int moved = 0;
        if (need_r) {
            struct ccl__slot_meta m;
            ccl_status_t st = rc->t->recv_acquire(rc, rbuf, &m);
            if (st == CCL_OK) {
                if (m.bytes != bytes || m.kind != p->id.kind || m.seq != p->id.seq || m.count != p->id.count ||
                    m.dtype != p->id.dtype || m.op != (uint8_t)p->id.op || m.root != p->id.root)
                    return mismatch(p, &m, bytes);
                need_r = 0;
                moved = 1;
            } else if (st < 0) {
                return ccl__comm_fail(p->comm, st);
            }
        }
        if (need_s) {
            ccl_status_t st = sc->t->send_acquire(sc, sbuf);
            if (st == CCL_OK) need_s = 0, moved = 1;
            else if (st < 0) return ccl__comm_fail(p->comm, st);
        }
        if (!need_r && !need_s) return CCL_OK;
        for (int i = 0; i < 2; i++) {
            struct ccl__conn *c = p->conns[i];
            int m = 0;
            if (!c) continue;
            ccl_status_t st = c->t->progress(c, &m);
            if (st < 0) return ccl__comm_fail(p->comm, st);
            moved |= m;
        }
        if (!waiting) {
            ccl__waiter_init(&w, p->comm, p->conns, 2, p->what);
            waiting = 1;
        }
        if (moved) {
            ccl__waiter_progress(&w);
            continue;
        }
        ccl_status_t st = ccl__waiter_idle(&w);
        if (st < 0) return st;
        ccl__waiter_arm(&w);
    }
}

static ccl_status_t commit(struct ccl__prims *p, size_t bytes) {
    struct ccl__slot_meta m;
    stamp(p, &m, bytes);
    struct ccl__conn *c = p->conns[1];
    ccl_status_t st = c->t->send_commit(c, &m);
    return st < 0 ? ccl__comm_fail(p->comm, st) : CCL_OK;
}

static ccl_status_t release(struct ccl__prims *p) {
    struct ccl__conn *c = p->conns[0];
    ccl_status_t st = c->t->recv_release(c);
    return st < 0 ? ccl__comm_fail(p->comm, st) : CCL_OK;
}

/* ---- tracing: each step records its receive, reduction and send ---- */

enum { TR_RECV = 1, TR_REDUCE = 2, TR_SEND = 4 };

static inline int tracing(const struct ccl__prims *p) { return __builtin_expect(p->comm->trace != NULL, 0); }
static inline double tnow(int on) { return on ? ccl__now() : 0; }

static void trace_one(struct ccl__prims *p, int kind, int dir, double t0, double t1, size_t bytes) {
    struct ccl__trace *t = p->comm->trace;
    struct ccl__conn *c = p->conns[dir];
    int recv_side = kind != CCL__TR_SEND;
    struct ccl__trace_event e = {
        .t0 = t0, .t1 = t1, .kind = (uint8_t)kind, .coll = (uint8_t)p->id.kind, .algo = p->tr.algo,
        .phase = recv_side ? p->tr.recv_phase : p->tr.send_phase,
        .transport = kind == CCL__TR_REDUCE ? CCL__TR_LOCAL : (uint8_t)c->t->id, .peer = c->peer, .seq = p->id.seq,
        .step = recv_side ? p->tr.recv_step : p->tr.send_step, .chunk = p->tr.chunk, .round = p->tr.round,
        .offset = p->tr.offset, .bytes = bytes};
    if (kind == CCL__TR_SEND) e.link_seq = t->sent[c->peer]++;
    else if (kind == CCL__TR_RECV) e.link_seq = t->received[c->peer]++;
    ccl__trace_add(t, &e);
}

/* t0: step entered; ta: slots acquired; tr: data reduced/copied; t1: done. */
static void trace_step(struct ccl__prims *p, int what, double t0, double ta, double tr, double t1, size_t bytes) {
    if (what & TR_RECV) trace_one(p, CCL__TR_RECV, 0, t0, tr, bytes);
    if (what & TR_REDUCE) trace_one(p, CCL__TR_REDUCE, 0, ta, tr, bytes);
    if (what & TR_SEND) trace_one(p, CCL__TR_SEND, 1, what & TR_RECV ? tr : t0, t1, bytes);
}

ccl_status_t ccl__prims_send(struct ccl__prims *p, const void *src, size_t n) {
    size_t bytes = n * p->esize;
    int tr = tracing(p);
    double t0 = tnow(tr);
    void *out;
    CCL_CHECK(acquire(p, NULL, &out, bytes));
    memcpy(out, src, bytes);
    CCL_CHECK(commit(p, bytes));
    if (tr) trace_step(p, TR_SEND, t0, t0, t0, ccl__now(), bytes);
    return CCL_OK;
}

ccl_status_t ccl__prims_recv(struct ccl__prims *p, void *dst, size_t n) {
    size_t bytes = n * p->esize;
    int tr = tracing(p);
    double t0 = tnow(tr);
    const void *in;
    CCL_CHECK(acquire(p, &in, NULL, bytes));
    memcpy(dst, in, bytes);
    CCL_CHECK(release(p));
    if (tr) {
        double t1 = ccl__now();
        trace_step(p, TR_RECV, t0, t1, t1, t1, bytes);
    }
    return CCL_OK;
}

ccl_status_t ccl__prims_recv_reduce_send(struct ccl__prims *p, const void *src, size_t n) {
    size_t bytes = n * p->esize;
    int tr = tracing(p);
    double t0 = tnow(tr);
    const void *in;
    void *out;
    CCL_CHECK(acquire(p, &in, &out, bytes));
    double ta = tnow(tr);
    p->reduce(out, in, src, n);
    double tr_done = tnow(tr);
    CCL_CHECK(release(p));
    CCL_CHECK(commit(p, bytes));
    if (tr) trace_step(p, TR_RECV | TR_REDUCE | TR_SEND, t0, ta, tr_done, ccl__now(), bytes);
    return CCL_OK;
}

/* dst <- prev OP src (then /= div), and next <- dst when `send`. */
static ccl_status_t recv_reduce_copy(struct ccl__prims *p, const void *src, void *dst, size_t n, int div, int send) {
    size_t bytes = n * p->esize;
    int tr = tracing(p);
    double t0 = tnow(tr);
    const void *in;
    void *out = NULL;
    CCL_CHECK(acquire(p, &in, send ? &out : NULL, bytes));
    double ta = tnow(tr);
    p->reduce(dst, in, src, n);
    if (div > 1) ccl__reduce_div(dst, n, p->id.dtype, div);
    double tr_done = tnow(tr);
    CCL_CHECK(release(p));
    if (send) {
        memcpy(out, dst, bytes);
        CCL_CHECK(commit(p, bytes));
    }
    if (tr) trace_step(p, TR_RECV | TR_REDUCE | (send ? TR_SEND : 0), t0, ta, tr_done, ccl__now(), bytes);
    return CCL_OK;
}

ccl_status_t ccl__prims_recv_reduce_copy(struct ccl__prims *p, const void *src, void *dst, size_t n, int div) {
    return recv_reduce_copy(p, src, dst, n, div, 0);
}

ccl_status_t ccl__prims_recv_reduce_copy_send(struct ccl__prims *p, const void *src, void *dst, size_t n, int div) {
    return recv_reduce_copy(p, src, dst, n, div, 1);
}

ccl_status_t ccl__prims_recv_copy_send(struct ccl__prims *p, void *dst, size_t n) {
    size_t bytes = n * p->esize;
    int tr = tracing(p);
    double t0 = tnow(tr);
    const void *in;
    void *out;
    CCL_CHECK(acquire(p, &in, &out, bytes));
    memcpy(out, in, bytes);
    memcpy(dst, in, bytes);
    double tc = tnow(tr);
    CCL_CHECK(release(p));
    CCL_CHECK(commit(p, bytes));
    if (tr) trace_step(p, TR_RECV | TR_SEND, t0, tc, tc, ccl__now(), bytes);
    return CCL_OK;
}

ccl_status_t ccl__prims_copy_send(struct ccl__prims *p, const void *src, void *dst, size_t n) {
    if (dst && dst != src) memcpy(dst, src, n * p->esize);
    return ccl__prims_send(p, src, n);
}

ccl_status_t ccl__prims_flush(struct ccl__prims *p) {
    struct ccl__conn *c = p->conns[1];
    if (!c || c->t->flushed(c)) return CCL_OK;
    struct ccl__waiter w;
    ccl__waiter_init(&w, p->comm, &p->conns[1], 1, p->what);
    while (!c->t->flushed(c)) {
        ccl__waiter_arm(&w);
        int moved = 0;
        ccl_status_t st = c->t->progress(c, &moved);
        if (st < 0) return ccl__comm_fail(p->comm, st);
        if (moved) ccl__waiter_progress(&w);
        else if ((st = ccl__waiter_idle(&w)) < 0) return st;
    }
    return CCL_OK;
}
