/* Point-to-point transfers on the step engine, progressed together: every
 * transfer that is first in line for its (peer, direction) moves whatever
 * chunks it can, so the order in which a group lists its sends and
 * receives never matters. Each chunk is one step (a send to, or a receive
 * from, one peer) of a context stamped with the message's own number.
 * Over a transport that can, a large message (or one in memory the
 * application registered) goes zero-copy instead: one slot carries the
 * sender's offer and the receiver moves the bytes itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/socket.h"
#include "prims/prims.h"
#include "prims/regcache.h"
#include "prims/wait.h"

struct lane {
    struct ccl__p2p_xfer *x;
    struct ccl__prims p;
    struct ccl__step step;
    struct ccl__step_state st;
    int busy;         /* step holds the chunk being moved */
    int zc;           /* 0: undecided, 1: zero-copy under way, -1: slots */
    int zc_offered;   /* sender: the offer is in the FIFO */
    struct ccl__reg *reg; /* zero-copy: this side's registration, held until done */
    double zc_t0;
    int next_in_line; /* the lane after this one on its (peer, direction), or -1 */
    int stamp_owed;   /* a collective's transfer of nothing: its one empty step is still to move */
};

/* Runs of at most this many transfers among at most this many ranks keep
 * their lanes and queues on the stack. */
#define P2P_FEW_LANES 2
#define P2P_FEW_RANKS 64

/* Lanes queue per (peer, direction) in issue order; only each queue's head
 * moves, so a poll costs the number of queues with work left, not the
 * number of transfers (thousands of small messages to one peer stay
 * linear). */
struct p2p_run {
    struct ccl_comm *comm;
    struct lane *lanes;
    int n;
    int *head, *tail; /* [2 * nranks]: per queue (2 * peer + is_send) its first and last lane */
    int *queues;      /* the queues that still have lanes */
    int nqueues;
    int *send_peers;  /* [nranks]: the peers sent to, for the flush */
    int nsend_peers;
    struct ccl__conn **waiting; /* the connections something is still owed on */
    int nwaiting;
};

/* Sends to self are copied straight into the matching receive from self
 * (k-th send with k-th receive). */
static ccl_status_t match_self(struct ccl_comm *comm, struct ccl__p2p_xfer *x, int n, const char *what) {
    int r = comm->rank, j = 0; /* j: where the search for the next receive from self resumes */
    for (int i = 0; i < n; i++) {
        if (x[i].peer != r || !x[i].is_send) continue;
        while (j < n && !(x[j].peer == r && !x[j].is_send)) j++;
        size_t bytes = x[i].bytes;
        if (j == n || x[j].bytes != bytes) {
            ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: a send to self has no receive from self of %zu bytes",
                           what, bytes);
            return CCL_ERR_INVALID_USAGE;
        }
        if (bytes) memmove(x[j].buf, x[i].buf, bytes);
        x[i].matched = x[j].matched = 1;
        x[i].done_bytes = x[j].done_bytes = bytes;
        j++;
    }
    for (int i = 0; i < n; i++)
        if (x[i].peer == r && !x[i].matched) {
            ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "%s: a receive from self has no matching send to self", what);
            return CCL_ERR_INVALID_USAGE;
        }
    return CCL_OK;
}

/* The trace labels of a lane's piece `round`, `done` bytes into its
 * transfer: the collective's it was made for, or a point-to-point call's. */
static void label_piece(struct lane *l, uint32_t round, size_t done) {
    const struct ccl__p2p_label *lab = l->x->label;
    if (!lab) {
        ccl__prims_at(&l->p, CCL__TR_DIRECT, CCL__TR_P2P, 0, CCL__TR_P2P, 0, 0, round, done);
        return;
    }
    const struct ccl__prims_trace *t = &lab->tr;
    ccl__prims_at(&l->p, t->algo, t->recv_phase, t->recv_step, t->send_phase, t->send_step, t->chunk, t->round + round,
                  t->offset + done);
}

/* The next chunk of a lane's transfer as a step. */
static void next_step(struct lane *l) {
    struct ccl__p2p_xfer *x = l->x;
    size_t es = l->p.esize, left = x->bytes - x->done_bytes;
    size_t n = left / es < l->p.chunk_elems ? left / es : l->p.chunk_elems;
    char *at = (char *)x->buf + x->done_bytes;
    l->step = x->is_send ? (struct ccl__step){.src = at, .n = n, .nsend = 1, .send = {x->peer}}
                         : (struct ccl__step){.dst = at, .n = n, .nrecv = 1, .recv = {x->peer}};
    l->st.started = 0; /* the rest of the state is written before it is read */
    if (__builtin_expect(l->p.comm->trace != NULL, 0)) {
        uint32_t round = (uint32_t)(x->done_bytes / (l->p.chunk_elems * es));
        label_piece(l, round, x->done_bytes);
        l->st.t0 = ccl__now();
    }
    l->busy = 1;
}

size_t ccl__p2p_zc_min_bytes(const struct ccl_comm *comm, const struct ccl__transport *t) {
    if (!t->zc_offer) return 0;
    if (t->zc_by_cma) return comm->single_copy ? comm->cma_p2p_bytes : 0;
    return t->zc_min_bytes(ccl__tknobs(comm, t));
}

static int wants_zc(struct ccl_comm *comm, const struct ccl__conn *c, const struct ccl__p2p_xfer *x) {
    if (c->t->zc_by_cma && !comm->single_copy) return 0;
    size_t bytes = x->bytes, min = ccl__p2p_zc_min_bytes(comm, c->t);
    if (c->t->zc_max_bytes && bytes > c->t->zc_max_bytes(ccl__tknobs(comm, c->t))) return 0;
    return (min && bytes >= min) || (bytes > c->slot_bytes && ccl__reg_is_pinned(comm, c->t, x->buf, bytes));
}

/* Decides, at a transfer's first byte, whether it goes zero-copy: the
 * sender by size and registration (a registration that fails falls back
 * to slots), the receiver by what the slot at the head says. */
static ccl_status_t zc_start(struct lane *l, int *moved) {
    struct ccl__p2p_xfer *x = l->x;
    struct ccl_comm *comm = l->p.comm;
    struct ccl__conn *c = comm->conns[x->peer];
    size_t bytes = x->bytes;
    l->zc = -1;
    if (!c->t->zc_offer || x->done_bytes) return CCL_OK;
    if (x->is_send) {
        if (!wants_zc(comm, c, x)) return CCL_OK;
        if (c->t->zc_by_cma) {
            l->reg = NULL; /* the kernel checks the pages at the read */
        } else if (ccl__reg_get(comm, c->t, x->buf, bytes, &l->reg) != CCL_OK) {
            CCL_INFO(CCL__SUB_P2P, comm->rank, "%s: %zu bytes to rank %d go through slots: %s",
                     ccl__prims_what(&l->p), bytes, x->peer, comm->last_error);
            return CCL_OK;
        }
    } else {
        const void *slot;
        struct ccl__slot_meta m;
        ccl_status_t st = c->t->recv_acquire(c, &slot, &m);
        if (st != CCL_OK) {
            l->zc = 0; /* nothing here yet: decide when it is */
            return st;
        }
        if (!(m.kind & CCL__SLOT_ZC_OFFER)) return CCL_OK;
        m.kind = (uint16_t)(m.kind & ~CCL__SLOT_ZC_OFFER);
        CCL_CHECK(ccl__prims_check_meta(&l->p, x->peer, &m, m.bytes));
        l->reg = NULL;
        if (!c->t->zc_by_cma) st = ccl__reg_get(comm, c->t, x->buf, bytes, &l->reg);
        if (st == CCL_OK) st = c->t->zc_take(c, x->buf, bytes, l->reg ? l->reg->handle : NULL);
        if (st != CCL_OK) return st;
        *moved = 1;
    }
    l->zc = 1;
    if (__builtin_expect(comm->trace != NULL, 0)) {
        label_piece(l, 0, 0);
        l->zc_t0 = ccl__now();
    }
    return CCL_OK;
}

/* Drives a zero-copy transfer: CCL_OK once this side is done. */
static ccl_status_t zc_move(struct lane *l, int *moved) {
    struct ccl__p2p_xfer *x = l->x;
    struct ccl_comm *comm = l->p.comm;
    struct ccl__conn *c = comm->conns[x->peer];
    size_t bytes = x->bytes;
    if (x->is_send && !l->zc_offered) {
        struct ccl__slot_meta m = ccl__prims_stamp(&l->p, 0);
        m.kind = (uint16_t)(m.kind | CCL__SLOT_ZC_OFFER);
        ccl_status_t st = c->t->zc_offer(c, &m, x->buf, bytes, l->reg ? l->reg->handle : NULL);
        if (st != CCL_OK) return st; /* CCL_INPROGRESS: no free slot yet */
        l->zc_offered = 1;
        *moved = 1;
    }
    ccl_status_t st = c->t->zc_done(c, x->is_send);
    if (st != CCL_OK) return st;
    ccl__reg_put(comm, l->reg);
    l->reg = NULL;
    x->done_bytes = bytes;
    *moved = 1;
    if (__builtin_expect(comm->trace != NULL, 0))
        ccl__prims_trace(&l->p, x->is_send ? CCL__TR_SEND : CCL__TR_RECV, x->peer, l->zc_t0, ccl__now(), bytes);
    return CCL_OK;
}

/* Moves one lane's transfer as far as it can: CCL_OK once it is done. */
static ccl_status_t move_lane(struct lane *l, int *moved) {
    struct ccl__p2p_xfer *x = l->x;
    while (x->done_bytes < x->bytes || l->stamp_owed) {
        ccl_status_t st;
        if (l->zc == 0 && (st = zc_start(l, moved)) != CCL_OK) return st;
        if (l->zc == 1) {
            if ((st = zc_move(l, moved)) != CCL_OK) return st;
            continue;
        }
        if (!l->busy) next_step(l);
        if ((st = ccl__step_try(&l->p, &l->step, &l->st, moved)) != CCL_OK) return st;
        x->done_bytes += l->step.n * l->p.esize;
        l->busy = l->stamp_owed = 0;
        *moved = 1;
    }
    return CCL_OK;
}

/* Moves the head of every queue as far as it can; a head that finishes
 * hands over to the next lane of its queue at once. */
static ccl_status_t poll_lanes(void *ctx, int *moved) {
    struct p2p_run *r = ctx;
    int kept = 0;
    r->nwaiting = 0;
    for (int i = 0; i < r->nqueues; i++) {
        int q = r->queues[i], at = r->head[q];
        while (at >= 0) {
            ccl_status_t st = move_lane(&r->lanes[at], moved);
            if (st == CCL_INPROGRESS) break;
            /* Every failure of a lane fails the communicator here, once:
             * a peer waiting on this rank hears of it, and the call
             * reports the communicator's first failure (an abort stays an
             * abort), whichever step, offer, read or receive met it. */
            if (st < 0) return ccl__comm_fail(r->comm, st);
            at = r->lanes[at].next_in_line;
        }
        r->head[q] = at;
        if (at < 0) continue;
        r->queues[kept++] = q;
        /* a peer's two queues sit side by side in the list: list its connection once */
        struct ccl__conn *c = r->comm->conns[q / 2];
        if (!r->nwaiting || r->waiting[r->nwaiting - 1] != c) r->waiting[r->nwaiting++] = c;
    }
    r->nqueues = kept;
    return kept ? CCL_INPROGRESS : CCL_OK;
}

static int lane_queue(const struct lane *l) { return 2 * l->x->peer + (l->x->is_send != 0); }

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Queues the lanes in issue order; the queue list is in peer order. Only
 * the queues the lanes use are touched, so one send costs the same among
 * 2 ranks as among 1000. */
static void queue_lanes(struct p2p_run *r) {
    for (int i = 0; i < r->n; i++) r->head[lane_queue(&r->lanes[i])] = -1;
    for (int i = 0; i < r->n; i++) {
        struct lane *l = &r->lanes[i];
        int q = lane_queue(l);
        l->next_in_line = -1;
        if (r->head[q] < 0) {
            r->head[q] = i;
            r->queues[r->nqueues++] = q;
        } else {
            r->lanes[r->tail[q]].next_in_line = i;
        }
        r->tail[q] = i;
    }
    if (r->nqueues > 1) qsort(r->queues, (size_t)r->nqueues, sizeof(int), cmp_int);
}

/* The peers the lanes send to, each once, before the wait consumes the
 * queue list: only their connections can hold unsent bytes at the end,
 * since every call ends with all of them flushed. */
static void note_send_peers(struct p2p_run *r) {
    for (int i = 0; i < r->nqueues; i++)
        if (r->queues[i] & 1) r->send_peers[r->nsend_peers++] = r->queues[i] / 2;
}

/* What a lane still holds once its run ended: after a failure, the
 * registration of a zero-copy transfer and the step it was in. Bytes may
 * still be on their way into a failed receive's buffer (an RDMA read of
 * this rank's in flight): its registration goes at once
 * (ccl__reg_put_revoked). */
static void release_lane(struct lane *l, ccl_status_t run_status) {
    if (l->reg && run_status < 0 && !l->x->is_send) ccl__reg_put_revoked(l->p.comm, l->reg);
    else if (l->reg) ccl__reg_put(l->p.comm, l->reg);
    l->reg = NULL;
    if (run_status < 0 && l->busy) ccl__step_abandon(&l->p, &l->step);
}

/* A receive from any source takes the first peer, counting from the one
 * after this rank, whose connection holds, at its head, the point-to-point
 * message this rank expects from it next. Looking does not consume: the
 * receive then takes that slot as any receive would. A peer whose head is
 * a collective's slot is not sending to this rank now (its messages come
 * in order). */
struct any_source {
    struct ccl_comm *comm;
    int found;
};

static ccl_status_t poll_any_source(void *ctx, int *moved) {
    struct any_source *a = ctx;
    struct ccl_comm *comm = a->comm;
    (void)moved;
    for (int k = 1; k < comm->nranks; k++) {
        int p = (comm->rank + k) % comm->nranks;
        struct ccl__conn *c = comm->conns[p];
        const void *payload;
        struct ccl__slot_meta m;
        ccl_status_t r = c->t->recv_acquire(c, &payload, &m);
        if (r == CCL_INPROGRESS) continue;
        if (r < 0) return ccl__comm_fail(comm, r);
        if (m.kind == CCL__K_P2P && m.seq == comm->recv_seq[p]) {
            a->found = p;
            return CCL_OK;
        }
    }
    return CCL_INPROGRESS;
}

static ccl_status_t pick_source(struct ccl_comm *comm, struct ccl__p2p_xfer *x, const char *what) {
    struct any_source a = {.comm = comm, .found = -1}; /* ccl_recv_any refused a one-rank comm */
    int n = 0;
    for (int p = 0; p < comm->nranks; p++)
        if (p != comm->rank) comm->scratch_conns[n++] = comm->conns[p];
    CCL_CHECK(ccl__wait(comm, what, comm->scratch_conns, &n, poll_any_source, &a));
    x->peer = a.found;
    return CCL_OK;
}

ccl_status_t ccl__p2p_run(struct ccl_comm *comm, struct ccl__p2p_xfer *x, int n, int kind, const char *what) {
    for (int i = 0; i < n; i++)
        if (x[i].peer == CCL__ANY_SOURCE) CCL_CHECK(pick_source(comm, &x[i], what));
    for (int i = 0; i < n; i++) {
        x[i].bytes = x[i].count * ccl_dtype_size(x[i].dtype);
        x[i].done_bytes = 0;
        x[i].matched = 0;
        if (x[i].peer == comm->rank || x[i].coll.kind) continue;
        x[i].seq = x[i].is_send ? comm->send_seq[x[i].peer]++ : comm->recv_seq[x[i].peer]++;
    }
    CCL_CHECK(match_self(comm, x, n, what));
    struct p2p_run r = {.comm = comm, .waiting = comm->scratch_conns};
    /* A send, a receive or a pair of them among a few ranks (the
     * small-message latency path) allocates nothing. */
    struct lane few_lanes[P2P_FEW_LANES];
    int few_queues[7 * P2P_FEW_RANKS];
    int few = n <= P2P_FEW_LANES && comm->nranks <= P2P_FEW_RANKS;
    if (few) {
        r.lanes = few_lanes; /* each filled as it is taken, below */
        r.head = few_queues;
    } else {
        r.lanes = calloc(n > 0 ? (size_t)n : 1u, sizeof(*r.lanes));
        r.head = malloc(sizeof(int) * 7 * (size_t)comm->nranks);
    }
    if (!r.lanes || !r.head) {
        free(r.lanes);
        free(r.head);
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "%s: out of memory", what);
    }
    r.tail = r.head + 2 * comm->nranks;
    r.queues = r.tail + 2 * comm->nranks;
    r.send_peers = r.queues + 2 * comm->nranks;
    ccl_status_t st = CCL_OK;
    for (int i = 0; i < n && st == CCL_OK; i++) {
        if (x[i].peer == comm->rank) continue;
        struct lane *l = &r.lanes[r.n++];
        /* Field by field: zeroing a whole lane cost a small message a
         * twentieth of its time; the engine context is ccl__prims_init's,
         * the step and its state next_step's. */
        l->x = &x[i];
        l->busy = l->zc = l->zc_offered = 0;
        l->reg = NULL;
        /* A collective's transfer is stamped as that call (the sender's
         * count: the receiver compares its own); a point-to-point one with
         * the pair's message number. */
        struct ccl__coll_id id = {.kind = CCL__K_P2P, .seq = x[i].seq, .count = x[i].count, .dtype = x[i].dtype,
                                  .root = -1};
        if (x[i].coll.kind) id = x[i].coll, id.count = x[i].count, id.dtype = x[i].dtype;
        l->stamp_owed = x[i].coll.kind && x[i].bytes == 0;
        if (l->stamp_owed) l->zc = -1;
        st = ccl__prims_init(&l->p, comm, &id, comm->conns[x[i].peer]->slot_bytes, CCL__MEM_HOST);
        l->p.trace_kind = kind;
        if (x[i].label) l->p.trace_seq = x[i].label->seq;
        if (x[i].coll.kind) ccl__prims_name(&l->p, ccl__op_kind_name(x[i].coll.kind), (long)x[i].coll.seq);
        else ccl__prims_name(&l->p, what, -1);
    }
    if (st == CCL_OK) {
        queue_lanes(&r);
        note_send_peers(&r);
        st = ccl__wait(comm, what, r.waiting, &r.nwaiting, poll_lanes, &r);
    }
    if (st == CCL_OK) st = ccl__prims_flush_peers(comm, r.send_peers, r.nsend_peers, what);
    for (int i = 0; i < n && st == CCL_OK; i++)
        if (x[i].source) *x[i].source = x[i].peer;
    for (int i = 0; i < r.n; i++) release_lane(&r.lanes[i], st);
    if (!few) {
        free(r.lanes);
        free(r.head);
    }
    return st;
}
