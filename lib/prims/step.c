/* The step primitive: acquire every slot a step needs, run its copies and
 * reductions on the compute engine, then release and commit. */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/socket.h"
#include "prims/prims.h"
#include "prims/wait.h"

const char *ccl__op_kind_name(int kind) {
    static const char *const names[CCL__NUM_OP_KINDS] = {
        "?",      "all_reduce", "reduce_scatter", "all_gather", "broadcast",   "reduce",
        "all_to_all", "barrier", "send/recv", "gather", "scatter", "all_to_all_v"};
    return kind > 0 && kind < CCL__NUM_OP_KINDS ? names[kind] : "?";
}

/* By hand: snprintf's cost was a tenth of a small point-to-point
 * message's time, back when every call formatted its name. */
const char *ccl__prims_what_format(struct ccl__prims *p) {
    const char *name = p->name ? p->name : "?";
    long seq = p->name_seq;
    size_t at = strnlen(name, sizeof(p->what) - (seq >= 0 ? 14 : 1)); /* " #" and 10 digits, then the end */
    memcpy(p->what, name, at);
    if (seq >= 0) {
        char digits[10];
        int k = 0;
        unsigned long v = (unsigned long)seq;
        do digits[k++] = (char)('0' + v % 10);
        while ((v /= 10) != 0 && k < 10);
        p->what[at++] = ' ';
        p->what[at++] = '#';
        while (k > 0) p->what[at++] = digits[--k];
    }
    p->what[at] = '\0';
    p->what_ready = 1;
    return p->what;
}

ccl_status_t ccl__prims_init(struct ccl__prims *p, struct ccl_comm *comm, const struct ccl__coll_id *id,
                             size_t chunk_bytes, int mem) {
    p->comm = comm;
    p->id = *id;
    p->esize = ccl_dtype_size(id->dtype);
    p->reduce = (unsigned)id->op < CCL_NUM_OPS ? ccl__reduce_get(id->dtype, id->op) : NULL;
    p->chunk_elems = p->esize ? chunk_bytes / p->esize : 0;
    if (p->chunk_elems == 0) p->chunk_elems = 1;
    p->mem = mem;
    p->caller_mem = mem == CCL__MEM_HOST && comm->caller_mem;
    p->trace_kind = id->kind;
    p->trace_seq = id->seq;
    ccl__prims_name(p, ccl__op_kind_name(id->kind), (long)id->seq);
    p->compute = ccl__compute_for(mem, comm->slot_kinds);
    if (p->compute) return CCL_OK;
    int slots = mem; /* the slot kind named: the last one the connections use */
    for (int k = 0; k < CCL__NUM_MEM_KINDS; k++)
        if (comm->slot_kinds & (1u << k)) slots = k;
    return ccl__set_error(comm, CCL_ERR_UNSUPPORTED, "%s: no compute engine serves %s buffers with %s slots",
                          ccl__prims_what(p), ccl__mem_kind_name(mem), ccl__mem_kind_name(slots));
}

/* ---- checking what arrived ---- */

static ccl_status_t mismatch(struct ccl__prims *p, int peer, const struct ccl__slot_meta *m, size_t want_bytes) {
    const struct ccl__coll_id *id = &p->id;
    if (id->kind == CCL__K_P2P && m->kind == CCL__K_P2P)
        ccl__set_error(p->comm, CCL_ERR_INVALID_USAGE,
                       "%s: rank %d sent message #%u with count %llu of %s; this rank receives #%u with count %llu "
                       "of %s (%zu bytes expected in this slot, %u came)",
                       ccl__prims_what(p), peer, m->seq, (unsigned long long)m->count,
                       ccl_dtype_name((ccl_dtype_t)m->dtype), id->seq, (unsigned long long)id->count,
                       ccl_dtype_name(id->dtype), want_bytes, m->bytes);
    else if (id->kind == CCL__K_P2P)
        ccl__set_error(p->comm, CCL_ERR_INVALID_USAGE,
                       "%s: expected a message from rank %d but it is running %s #%u: calls were issued in a "
                       "different order",
                       ccl__prims_what(p), peer, ccl__op_kind_name(m->kind), m->seq);
    else if (ccl__kind_is_exchange(id->kind) && m->kind == id->kind && m->seq == id->seq && m->count != id->count)
        ccl__set_error(p->comm, CCL_ERR_INVALID_USAGE,
                       "%s: rank %d sends %llu elements (%llu bytes) to this rank, which receives %llu (%llu bytes) "
                       "from it",
                       ccl__prims_what(p), peer, (unsigned long long)m->count,
                       (unsigned long long)(m->count * p->esize), (unsigned long long)id->count,
                       (unsigned long long)(id->count * p->esize));
    else if (m->kind != CCL__K_P2P && (int32_t)(m->seq - id->seq) < 0)
        /* What a call that sent and was not received leaves behind: the
         * ranks disagreed on it (two believed they were the root). */
        ccl__set_error(p->comm, CCL_ERR_INVALID_USAGE,
                       "%s: a message of rank %d's %s #%u (count %llu, root %d) was never received here: the ranks "
                       "disagreed on that call's root, counts or peers",
                       ccl__prims_what(p), peer, ccl__op_kind_name(m->kind), m->seq, (unsigned long long)m->count,
                       (int)m->root);
    else if (m->kind == id->kind && m->seq == id->seq && m->count != id->count)
        ccl__set_error(p->comm, CCL_ERR_INVALID_USAGE, "%s: count %llu differs from rank %d's count %llu",
                       ccl__prims_what(p), (unsigned long long)id->count, peer, (unsigned long long)m->count);
    else if (m->kind == id->kind && m->seq == id->seq)
        ccl__set_error(p->comm, CCL_ERR_INVALID_USAGE,
                       "%s: arguments differ from rank %d's (dtype %s/%s, op %s/%s, root %d/%d, slice %zu/%u bytes)",
                       ccl__prims_what(p), peer, ccl_dtype_name(id->dtype), ccl_dtype_name((ccl_dtype_t)m->dtype),
                       ccl_op_name(id->op), ccl_op_name((ccl_op_t)m->op), id->root, (int)m->root, want_bytes,
                       m->bytes);
    else
        ccl__set_error(p->comm, CCL_ERR_INVALID_USAGE,
                       "%s: rank %d is running %s #%u (count %llu) instead: calls were issued in a different order",
                       ccl__prims_what(p), peer, ccl__op_kind_name(m->kind), m->seq, (unsigned long long)m->count);
    return ccl__comm_fail(p->comm, CCL_ERR_INVALID_USAGE);
}

static int meta_matches(const struct ccl__prims *p, const struct ccl__slot_meta *m, size_t bytes) {
    const struct ccl__coll_id *id = &p->id;
    return m->bytes == bytes && m->kind == id->kind && m->seq == id->seq && m->count == id->count &&
           m->dtype == (uint8_t)id->dtype && (id->kind == CCL__K_P2P || (m->op == (uint8_t)id->op && m->root == id->root));
}

struct ccl__slot_meta ccl__prims_stamp(const struct ccl__prims *p, size_t bytes) {
    return (struct ccl__slot_meta){.bytes = (uint32_t)bytes,
                                   .kind = (uint16_t)p->id.kind,
                                   .dtype = (uint8_t)p->id.dtype,
                                   .op = (uint8_t)p->id.op,
                                   .seq = p->id.seq,
                                   .root = p->id.root,
                                   .count = p->id.count};
}

ccl_status_t ccl__prims_check_meta(struct ccl__prims *p, int peer, const struct ccl__slot_meta *m, size_t bytes) {
    return meta_matches(p, m, bytes) ? CCL_OK : mismatch(p, peer, m, bytes);
}

/* ---- tracing: each step records its receives, reduction and sends ---- */

void ccl__prims_trace(struct ccl__prims *p, int kind, int peer, double t0, double t1, size_t bytes) {
    struct ccl__trace *t = p->comm->trace;
    struct ccl__conn *c = p->comm->conns[peer];
    int recv_side = kind != CCL__TR_SEND;
    struct ccl__trace_event e = {
        .t0 = t0, .t1 = t1, .kind = (uint8_t)kind, .coll = (uint8_t)p->trace_kind, .algo = p->tr.algo,
        .phase = recv_side ? p->tr.recv_phase : p->tr.send_phase,
        .transport = kind == CCL__TR_REDUCE ? CCL__TR_LOCAL : (uint8_t)ccl__transport_index(c->t), .peer = peer, .seq = p->trace_seq,
        .step = recv_side ? p->tr.recv_step : p->tr.send_step, .chunk = p->tr.chunk, .round = p->tr.round,
        .offset = p->tr.offset + p->comm->trace_base, .bytes = bytes};
    if (kind == CCL__TR_SEND) e.link_seq = t->sent[peer]++;
    else if (kind == CCL__TR_RECV) e.link_seq = t->received[peer]++;
    ccl__trace_add(t, &e);
}

static void trace_step(struct ccl__prims *p, const struct ccl__step *s, const struct ccl__step_state *st,
                       size_t bytes) {
    double t1 = ccl__now();
    for (int i = 0; i < s->nrecv; i++) ccl__prims_trace(p, CCL__TR_RECV, s->recv[i], st->t0, st->tc, bytes);
    /* One reduction per input, so every received piece is tied to the
     * arithmetic that consumed it (a tree node adds each child's data). */
    for (int i = 0; s->reduce && i < s->nrecv; i++) ccl__prims_trace(p, CCL__TR_REDUCE, s->recv[i], st->ta, st->tc, bytes);
    for (int i = 0; i < s->nsend; i++) ccl__prims_trace(p, CCL__TR_SEND, s->send[i], s->nrecv ? st->tc : st->t0, t1, bytes);
}

/* ---- the step ---- */

/* A step that only copies what it receives into the caller's memory asks
 * for it there, saving the copy out of a slot where the transport can. */
static int receives_into_dst(const struct ccl__prims *p, const struct ccl__step *s, size_t bytes) {
    return p->caller_mem && s->nrecv == 1 && !s->reduce && s->dst && bytes;
}

/* Every slot, or none: a step that cannot have them all takes nothing. */
static ccl_status_t acquire_all(struct ccl__prims *p, const struct ccl__step *s, struct ccl__step_state *st,
                                size_t bytes) {
    struct ccl_comm *comm = p->comm;
    if (__builtin_expect(comm->reading, 0) && s->dst) {
        struct ccl__conn *c = ccl__prims_still_reading(comm, s->dst, bytes);
        if (c) return st->blocked = c, CCL_INPROGRESS;
    }
    for (int i = 0; i < s->nrecv; i++) {
        struct ccl__conn *c = comm->conns[s->recv[i]];
        struct ccl__slot_meta m;
        if (c->t->recv_into && receives_into_dst(p, s, bytes)) {
            ccl_status_t r = c->t->recv_into(c, s->dst, bytes);
            if (r < 0) return ccl__comm_fail(comm, r);
        }
        ccl_status_t r = c->t->recv_acquire(c, &st->in[i], &m);
        if (r == CCL_INPROGRESS) return st->blocked = c, r;
        if (r < 0) return ccl__comm_fail(comm, r);
        if (!meta_matches(p, &m, bytes)) return mismatch(p, s->recv[i], &m, bytes);
    }
    for (int i = 0; i < s->nsend; i++) {
        struct ccl__conn *c = comm->conns[s->send[i]];
        ccl_status_t r = c->t->send_acquire(c, bytes, &st->out[i]);
        if (r == CCL_INPROGRESS) return st->blocked = c, r;
        if (r < 0) return ccl__comm_fail(comm, r);
    }
    return CCL_OK;
}

/* Elements [off, off + n) of a step's data work: the result into target,
 * then from there into every send slot. */
static void submit_piece(struct ccl__prims *p, const struct ccl__step *s, struct ccl__step_state *st, void *target,
                         int stream, size_t off, size_t n) {
    const struct ccl__compute *cu = p->compute;
    size_t boff = off * p->esize, bytes = n * p->esize;
    char *t = (char *)target + boff;
    const char *src = s->src ? (const char *)s->src + boff : NULL;
    /* Where the sends copy from: the result, or where a streamed copy
     * read it (the result itself went past the caches). */
    const char *result = t;
    if (s->nrecv == 0) {
        if (t != src) (stream ? cu->copy_streaming : cu->copy)(t, src, bytes);
        if (stream) result = src;
    } else if (!s->reduce) {
        const char *in = (const char *)st->in[0] + boff;
        if (t != in) (stream ? cu->copy_streaming : cu->copy)(t, in, bytes); /* the transport may have put it in place */
        if (stream) result = in;
    } else {
        const void *ops[CCL__STEP_MAX_PEERS + 1] = {0};
        int k = 0;
        if (src && !s->src_last) ops[k++] = src;
        for (int i = 0; i < s->nrecv; i++) ops[k++] = (const char *)st->in[i] + boff;
        if (src && s->src_last) ops[k++] = src;
        if (k == 1) cu->copy(t, ops[0], bytes);
        else cu->reduce(p->reduce, t, ops[0], ops[1], n);
        for (int j = 2; j < k; j++) cu->reduce(p->reduce, t, t, ops[j], n);
    }
    if (s->div > 1) cu->divide(t, n, p->id.dtype, s->div);
    for (int i = 0; i < s->nsend; i++)
        if (!(st->direct >> i & 1) && st->out[i] != target) cu->copy((char *)st->out[i] + boff, result, bytes);
}

/* Where the step's result lies in the caller's memory once computed (dst,
 * or the src a step only sends), and which sends may go from there: those
 * over a transport that copies out of the caller's memory itself, or
 * reads it where it is registered (prims/caller_mem.c). The rest get
 * their slot filled. */
static void plan_direct_sends(const struct ccl__prims *p, const struct ccl__step *s, struct ccl__step_state *st,
                              size_t bytes) {
    st->direct = 0;
    st->from = NULL;
    if (!p->caller_mem || !bytes) return;
    st->from = s->dst ? s->dst : s->nrecv == 0 && s->div <= 1 ? s->src : NULL;
    int have_bufs = ccl__prims_has_call_bufs(p->comm);
    for (int i = 0; st->from && i < s->nsend; i++) {
        const struct ccl__transport *t = p->comm->conns[s->send[i]]->t;
        if (!t->send_commit_from || (t->reg && !have_bufs)) continue;
        st->from_reg[i] = t->reg ? ccl__prims_caller_reg(p->comm, t, st->from, bytes) : NULL;
        if (!t->reg || st->from_reg[i]) st->direct |= 1u << i;
    }
}

/* Hands the step's copies and reductions to the compute engine. */
static ccl_status_t submit(struct ccl__prims *p, const struct ccl__step *s, struct ccl__step_state *st, size_t bytes) {
    const struct ccl__compute *cu = p->compute;
    plan_direct_sends(p, s, st, bytes);
    void *target = s->dst;
    for (int i = 0; !target && i < s->nsend; i++)
        if (!(st->direct >> i & 1)) target = st->out[i];
    if (!target && s->nrecv && bytes)
        return ccl__set_error(p->comm, CCL_ERR_INTERNAL, "%s: a step receives with nowhere to put the data",
                              ccl__prims_what(p));
    if (target && s->n) {
        /* only a plain copy into dst streams (a reduction or a division
         * would read the lines back) */
        int stream = s->stream_dst && cu->copy_streaming && target == s->dst && (s->nrecv == 0 || !s->reduce) &&
                     s->div <= 1;
        size_t piece = cu->piece_bytes ? cu->piece_bytes / p->esize : s->n;
        if (piece == 0) piece = 1;
        for (size_t o = 0; o < s->n; o += piece)
            submit_piece(p, s, st, target, stream, o, s->n - o < piece ? s->n - o : piece);
    }
    st->ticket = cu->fence();
    return CCL_OK;
}

static ccl_status_t finish(struct ccl__prims *p, const struct ccl__step *s, const struct ccl__step_state *st,
                           size_t bytes) {
    struct ccl_comm *comm = p->comm;
    for (int i = 0; i < s->nrecv; i++) {
        struct ccl__conn *c = comm->conns[s->recv[i]];
        ccl_status_t r = c->t->recv_release(c);
        if (r < 0) return ccl__comm_fail(comm, r);
    }
    struct ccl__slot_meta m = ccl__prims_stamp(p, bytes);
    for (int i = 0; i < s->nsend; i++) {
        struct ccl__conn *c = comm->conns[s->send[i]];
        int direct = st->direct >> i & 1;
        ccl_status_t r = direct ? c->t->send_commit_from(c, &m, st->from, st->from_reg[i]) : c->t->send_commit(c, &m);
        if (r < 0) return ccl__comm_fail(comm, r);
        if (direct && st->from_reg[i]) ccl__prims_note_reading(comm, st->from, bytes);
        ccl__note_staged(comm, c);
    }
    return CCL_OK;
}

ccl_status_t ccl__step_try(struct ccl__prims *p, const struct ccl__step *s, struct ccl__step_state *st, int *moved) {
    size_t bytes = s->n * p->esize;
    int tracing = __builtin_expect(p->comm->trace != NULL, 0);
    if (!st->started) {
        st->blocked = NULL;
        ccl_status_t r = acquire_all(p, s, st, bytes);
        if (r != CCL_OK) return r;
        if (tracing) st->ta = ccl__now();
        CCL_CHECK(submit(p, s, st, bytes));
        st->started = 1;
        *moved = 1;
    }
    if (!p->compute->done(st->ticket)) return CCL_INPROGRESS;
    if (tracing) st->tc = ccl__now();
    CCL_CHECK(finish(p, s, st, bytes));
    if (tracing) trace_step(p, s, st, bytes);
    return CCL_OK;
}

struct step_wait {
    struct ccl__prims *p;
    const struct ccl__step *s;
    struct ccl__step_state st;
    struct ccl__conn *waiting[1];
    int nwaiting;
};

/* The wait depends on the one connection that keeps the step from its
 * slots (none while compute runs), never on the others: a peer that has
 * committed everything it owed this step and left is not a failure. */
static ccl_status_t poll_step(void *ctx, int *moved) {
    struct step_wait *w = ctx;
    ccl_status_t st = ccl__step_try(w->p, w->s, &w->st, moved);
    w->waiting[0] = w->st.blocked;
    w->nwaiting = st == CCL_INPROGRESS && w->st.blocked;
    return st;
}

ccl_status_t ccl__prims_step(struct ccl__prims *p, const struct ccl__step *s) {
    struct step_wait w = {.p = p, .s = s};
    if (__builtin_expect(p->comm->trace != NULL, 0)) w.st.t0 = ccl__now();
    int moved = 0;
    ccl_status_t st = poll_step(&w, &moved);
    if (st == CCL_INPROGRESS) st = ccl__wait(p->comm, ccl__prims_what(p), w.waiting, &w.nwaiting, poll_step, &w);
    if (st < 0) ccl__step_abandon(p, s);
    return st;
}

void ccl__step_abandon(struct ccl__prims *p, const struct ccl__step *s) {
    for (int i = 0; i < s->nrecv; i++) {
        struct ccl__conn *c = p->comm->conns[s->recv[i]];
        if (c->t->recv_into) (void)c->t->recv_into(c, NULL, 0);
    }
}

ccl_status_t ccl__prims_send(struct ccl__prims *p, int to, const void *src, size_t n) {
    return ccl__prims_step(p, &(struct ccl__step){.src = src, .n = n, .nsend = 1, .send = {to}});
}

ccl_status_t ccl__prims_recv(struct ccl__prims *p, int from, void *dst, size_t n) {
    return ccl__prims_step(p, &(struct ccl__step){.dst = dst, .n = n, .nrecv = 1, .recv = {from}});
}

ccl_status_t ccl__prims_recv_reduce(struct ccl__prims *p, int from, const void *src, void *dst, size_t n,
                                    int src_last) {
    return ccl__prims_step(p, &(struct ccl__step){.src = src, .dst = dst, .n = n, .nrecv = 1, .recv = {from},
                                                  .reduce = 1, .src_last = (uint8_t)src_last});
}

/* ---- flushing ---- */

struct flush_wait {
    struct ccl_comm *comm;
    struct ccl__conn **pending;
    int n;
};

/* Only unflushed connections are waited on: a peer that got everything
 * and left is not a failure. */
static ccl_status_t poll_flushed(void *ctx, int *moved) {
    (void)moved;
    struct flush_wait *f = ctx;
    int k = 0;
    for (int i = 0; i < f->n; i++)
        if (!f->pending[i]->t->flushed(f->pending[i])) f->pending[k++] = f->pending[i];
    f->n = k;
    return k ? CCL_INPROGRESS : CCL_OK;
}

/* Adds c to the connections still to flush, when it has bytes left. */
static void flush_note(struct flush_wait *f, struct ccl__conn *c) {
    if (c && !c->t->flushed(c)) f->pending[f->n++] = c;
}

static ccl_status_t flush_wait_all(struct flush_wait *f, const char *what) {
    return f->n ? ccl__wait(f->comm, what, f->pending, &f->n, poll_flushed, f) : CCL_OK;
}

ccl_status_t ccl__prims_flush_peers(struct ccl_comm *comm, const int *peers, int n, const char *what) {
    struct flush_wait f = {.comm = comm, .pending = comm->scratch_conns};
    for (int i = 0; i < n; i++) flush_note(&f, comm->conns[peers[i]]);
    return flush_wait_all(&f, what);
}

ccl_status_t ccl__prims_flush(struct ccl_comm *comm, const char *what) {
    struct flush_wait f = {.comm = comm, .pending = comm->scratch_conns};
    for (int r = 0; r < comm->nranks; r++) flush_note(&f, comm->conns[r]);
    return flush_wait_all(&f, what);
}
