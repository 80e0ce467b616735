/* The RDMA transport's data path, completions, waiting and ops table
 * (set-up is in ib_setup.c, the device in ib_dev.c; the protocol is
 * described in ib.h).
 *
 * Nothing here blocks. Completions of every connection arrive on the one
 * shared queue, so whichever connection is progressed drains it for all. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/boot_pair.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/socket.h"
#include "transports/ib/ib.h"

#define POLL_BATCH 32

static inline struct ccl__ib_conn *ib_conn(struct ccl__conn *c) { return (struct ccl__ib_conn *)c; }

static const char *peer_host(const struct ccl__ib_conn *c) {
    const struct ccl_comm *comm = c->base.comm;
    return comm->peers ? comm->peers[c->base.peer].hostname : "?";
}

/* The first failure of this connection sticks; a communicator that has
 * already failed keeps its own message (ours is a consequence). */
ccl_status_t ccl__ib_conn_fail(struct ccl__ib_conn *c, ccl_status_t st, const char *fmt, ...) {
    if (c->failed) return c->failed;
    c->failed = st;
    struct ccl_comm *comm = c->base.comm;
    if (ccl__comm_health(comm) < 0) return st;
    char msg[CCL__ERR_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return ccl__set_error(comm, st, "ib: %s", msg);
}

/* ---- posting ---- */

ccl_status_t ccl__ib_post_recv(struct ccl__ib_conn *c, unsigned lane) {
    /* No scatter list: a WRITE WITH IMMEDIATE places its bytes itself and
     * only takes the request for its completion. */
    struct ibv_recv_wr wr = {.wr_id = CCL__IB_WR_ID(CCL__IB_WR_RECV, c->base.peer, lane)}, *bad = NULL;
    int rc = ibv_post_recv(c->lane_rqp[lane], &wr, &bad);
    if (rc)
        return ccl__ib_conn_fail(c, CCL_ERR_SYSTEM, "posting a receive for rank %d (%.64s): %s", c->base.peer, peer_host(c),
                         strerror(rc));
    c->rq_posted++;
    return CCL_OK;
}

ccl_status_t ccl__ib_post_write(struct ccl__ib_conn *c, int kind, uint32_t imm, uint64_t slot, uint32_t bytes) {
    return ccl__ib_post_write_from(c, kind, imm, slot, bytes, NULL, 0, NULL);
}

/* The slot's first `bytes` from our copy of it, then (when from_bytes)
 * the rest from registered memory elsewhere: one write, landing whole in
 * the peer's slot. A slot write goes on its slot's lane, anything else on
 * lane 0. */
ccl_status_t ccl__ib_post_write_from(struct ccl__ib_conn *c, int kind, uint32_t imm, uint64_t slot, uint32_t bytes,
                                     const void *from, uint32_t from_bytes, const struct ibv_mr *from_mr) {
    int data = kind == CCL__IB_WR_DATA || kind == CCL__IB_WR_DATA_FROM;
    unsigned lane = data ? (unsigned)(slot % c->lanes) : 0;
    struct ibv_sge sge[2] = {
        {.addr = (uintptr_t)(c->send_fifo + slot * c->stride), .length = bytes, .lkey = c->send_mr->lkey},
        {.addr = (uintptr_t)from, .length = from_bytes, .lkey = from_mr ? from_mr->lkey : 0}};
    int nsge = (bytes ? 1 : 0) + (from_bytes ? 1 : 0);
    struct ibv_send_wr wr = {
        .wr_id = CCL__IB_WR_ID(kind, c->base.peer, lane),
        .sg_list = nsge ? (bytes ? sge : sge + 1) : NULL,
        .num_sge = nsge,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED | (bytes && !from_bytes && bytes <= c->max_inline ? IBV_SEND_INLINE : 0),
        .imm_data = htonl(imm),
        .wr.rdma = {.remote_addr = c->remote_addr + slot * c->stride, .rkey = c->remote_rkey},
    };
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(c->lane_qp[lane], &wr, &bad);
    if (rc)
        return ccl__ib_conn_fail(c, CCL_ERR_SYSTEM, "posting a write to rank %d (%.64s): %s", c->base.peer, peer_host(c),
                         strerror(rc));
    c->sq_busy++;
    c->lane_sent[lane] += data;
    c->from_posted += kind == CCL__IB_WR_DATA_FROM;
    return CCL_OK;
}

/* Tells the peer how many slots we have released, when the send queue has
 * room; otherwise a later call does (the count is cumulative, so credits
 * never need a request each). Unless `now`, only once half the FIFO is
 * released: until then the count may ride back in a slot of ours. */
static ccl_status_t send_credit(struct ccl__ib_conn *c, int now) {
    uint64_t owed = c->released - c->credit_sent;
    if (!owed || c->failed) return c->failed;
    struct ccl__ib_state *s = ccl__ib_state(c->base.comm);
    if (!now && s->lazy_credits && owed < (c->nslots + 1) / 2) {
        if (!s->owing) s->dry_polls = 0;
        s->owing = 1;
        return CCL_OK;
    }
    if (c->sq_busy >= c->sq_depth) { /* the completion that frees room sends it */
        s->owing = 1;
        return CCL_OK;
    }
    CCL_CHECK(ccl__ib_post_write(c, CCL__IB_WR_CREDIT, CCL__IB_IMM(CCL__IB_IMM_CREDIT, c->released), 0, 0));
    c->credit_sent = c->released;
    c->credit_writes++;
    return CCL_OK;
}

/* A rank that waits, for anything, returns every credit it owes: a peer
 * may be waiting for them to send what this rank waits for. Not at the
 * first look that finds nothing: a call's receive is often polled just
 * before its send goes out, and that send carries them for free. */
#define DRY_POLLS_BEFORE_CREDITS 8
static void send_owed_credits(struct ccl__ib_state *s, int moved, int now) {
    if (!s->owing) return;
    if (moved) s->dry_polls = 0;
    if (!now && (moved || ++s->dry_polls < DRY_POLLS_BEFORE_CREDITS)) return;
    s->owing = 0;
    for (int p = 0; p < s->nranks; p++) {
        struct ccl__ib_conn *c = s->conns[p];
        if (c) send_credit(c, 1);
    }
}

/* ---- completions ---- */

static const char *wr_name(int kind) {
    static const char *const names[] = {"?",     "slot write", "credit", "receive", "zero-copy read",
                                        "zero-copy done notice", "failure notice",
                                        "slot write from the caller's memory"};
    return kind >= 0 && kind < (int)(sizeof(names) / sizeof(names[0])) ? names[kind] : "?";
}

static ccl_status_t wc_failed(struct ccl__ib_conn *c, const struct ibv_wc *wc) {
    const struct ccl__peer_info *pi = &c->base.comm->peers[c->base.peer];
    if (wc->status == IBV_WC_WR_FLUSH_ERR)
        return ccl__ib_conn_fail(c, CCL_ERR_REMOTE, "the queue pair to rank %d (%.64s) went to the error state", c->base.peer,
                         pi->hostname);
    if (wc->status == IBV_WC_RETRY_EXC_ERR || wc->status == IBV_WC_RNR_RETRY_EXC_ERR)
        return ccl__ib_conn_fail(c, CCL_ERR_REMOTE,
                         "rank %d (%.64s, pid %d) stopped answering: %s (it failed, or the link is down)",
                         c->base.peer, pi->hostname, (int)pi->pid, ibv_wc_status_str(wc->status));
    if (wc->status == IBV_WC_LOC_QP_OP_ERR) /* soft-RoCE reports a send it could not put on its link so */
        return ccl__ib_conn_fail(c, CCL_ERR_REMOTE,
                                 "a %s to rank %d (%.64s) could not leave this adapter: %s (is its link down?)",
                                 wr_name((int)(wc->wr_id & 0xff)), c->base.peer, pi->hostname,
                                 ibv_wc_status_str(wc->status));
    return ccl__ib_conn_fail(c, CCL_ERR_REMOTE, "a %s to or from rank %d (%.64s) failed: %s (vendor error 0x%x)",
                             wr_name((int)(wc->wr_id & 0xff)), c->base.peer, pi->hostname,
                             ibv_wc_status_str(wc->status), wc->vendor_err);
}

/* A peer's failure notice: the whole communicator fails, naming it. */
static ccl_status_t peer_failed(struct ccl__ib_conn *c, uint32_t code) {
    const struct ccl__peer_info *pi = &c->base.comm->peers[c->base.peer];
    ccl_status_t theirs = -(ccl_status_t)code;
    ccl__ib_conn_fail(c, CCL_ERR_REMOTE, "rank %d (pid %d on %.64s) failed (%s) and left the communicator",
                      c->base.peer, (int)pi->pid, pi->hostname, ccl_status_string(theirs));
    return ccl__comm_fail(c->base.comm, CCL_ERR_REMOTE);
}

/* A cumulative count from the peer (credits, finished pulls), in the bits
 * of `mask`: what it adds to *had, which may never pass `issued` (the
 * slots or offers this side has sent). */
static ccl_status_t take_count(struct ccl__ib_conn *c, uint32_t n, uint32_t mask, uint64_t *had, uint64_t issued,
                               const char *what) {
    uint64_t gained = (n - (uint32_t)*had) & mask;
    if (gained > issued - *had)
        return ccl__ib_conn_fail(c, CCL_ERR_REMOTE, "rank %d (%.64s) returned %llu %s for %llu outstanding",
                                 c->base.peer, peer_host(c), (unsigned long long)gained, what,
                                 (unsigned long long)(issued - *had));
    *had += gained;
    return CCL_OK;
}

/* The credits in the head of the slot taken next: cumulative, never past
 * the slots we have sent. A count behind what we know is stale, not
 * wrong: a credit write on lane 0 may overtake a slot on another lane. */
static ccl_status_t take_slot_credits(struct ccl__ib_conn *c) {
    uint64_t r;
    memcpy(&r, c->recv_fifo + (c->arrived % c->nslots) * c->stride + offsetof(struct ccl__ib_slot_head, released),
           sizeof(r));
    if (r > c->sent)
        return ccl__ib_conn_fail(c, CCL_ERR_REMOTE, "rank %d (%.64s) returned credits for %llu slots (had %llu, sent %llu)",
                                 c->base.peer, peer_host(c), (unsigned long long)r, (unsigned long long)c->credits,
                                 (unsigned long long)c->sent);
    if (r > c->credits) c->credits = r;
    return CCL_OK;
}

/* Slot n (its low bits in the immediate) landed on `lane`: each lane
 * delivers its own slots in order (n mod lanes == lane), and a slot is
 * taken only once every slot before it has landed. */
static ccl_status_t slot_landed(struct ccl__ib_conn *c, uint32_t n, unsigned lane) {
    uint64_t expect = lane < c->lanes ? c->lane_arrived[lane] * c->lanes + lane : c->arrived;
    if (lane >= c->lanes || n != (uint32_t)(expect & CCL__IB_COUNT_MASK) || expect - c->released >= c->nslots)
        return ccl__ib_conn_fail(c, CCL_ERR_REMOTE, "rank %d (%.64s) wrote slot %u out of turn (expected %llu)",
                                 c->base.peer, peer_host(c), n, (unsigned long long)expect);
    c->lane_arrived[lane]++;
    c->landed[expect % c->nslots] = 1;
    while (c->landed[c->arrived % c->nslots]) {
        c->landed[c->arrived % c->nslots] = 0;
        CCL_CHECK(take_slot_credits(c));
        c->arrived++;
    }
    return CCL_OK;
}

static ccl_status_t on_completion(struct ccl__ib_state *s, const struct ibv_wc *wc) {
    int peer = (int)((wc->wr_id >> 8) & 0xffffff), kind = (int)(wc->wr_id & 0xff);
    struct ccl__ib_conn *c = peer < s->nranks ? s->conns[peer] : NULL;
    if (!c) return CCL_OK; /* a connection being torn down */
    if (kind == CCL__IB_WR_NOTICE) { /* outside the data path's counts */
        __atomic_add_fetch(&s->notices_done, 1, __ATOMIC_RELAXED);
        return CCL_OK;
    }
    unsigned lane = (unsigned)(wc->wr_id >> 32); /* of a slot write or a receive */
    if (kind == CCL__IB_WR_RECV) c->rq_posted--;
    else c->sq_busy--;
    if (wc->status != IBV_WC_SUCCESS) return wc_failed(c, wc);
    if (kind == CCL__IB_WR_DATA || kind == CCL__IB_WR_DATA_FROM) {
        c->lane_done[lane]++;
        c->send_done++;
        c->from_done += kind == CCL__IB_WR_DATA_FROM;
        return CCL_OK;
    }
    if (kind == CCL__IB_WR_PULL) {
        c->pull_done += (size_t)(wc->wr_id >> 32);
        return CCL_OK;
    }
    if (kind == CCL__IB_WR_PULLED) c->told_done++;
    if (kind == CCL__IB_WR_CREDIT || kind == CCL__IB_WR_PULLED) return send_credit(c, 1);
    /* A write with immediate from the peer: a slot, credits, the end of a
     * pull of our offer, or its failure. */
    uint32_t imm = ntohl(wc->imm_data), n = imm & CCL__IB_COUNT_MASK;
    switch (CCL__IB_IMM_KIND(imm)) {
    case CCL__IB_IMM_FAIL:
        return peer_failed(c, n);
    case CCL__IB_IMM_PULLED:
        CCL_CHECK(take_count(c, n, CCL__IB_COUNT_MASK, &c->zc_pulled, c->zc_offered, "zero-copy pulls"));
        break;
    case CCL__IB_IMM_CREDIT:
        /* A slot on another lane may have brought a later count already. */
        if (((n - (uint32_t)c->credits) & CCL__IB_COUNT_MASK) > c->nslots &&
            (((uint32_t)c->credits - n) & CCL__IB_COUNT_MASK) <= c->nslots)
            break;
        CCL_CHECK(take_count(c, n, CCL__IB_COUNT_MASK, &c->credits, c->sent, "credits"));
        break;
    default:
        CCL_CHECK(slot_landed(c, n, lane));
    }
    return ccl__ib_post_recv(c, lane);
}

/* Takes every completion already queued; *moved when any. A failure of
 * one connection is recorded there and reported by its own calls. */
static void drain_cq(struct ccl__ib_state *s, int *moved) {
    struct ibv_wc wc[POLL_BATCH];
    int n;
    while ((n = ibv_poll_cq(s->cq, POLL_BATCH, wc)) > 0) {
        *moved = 1;
        for (int i = 0; i < n; i++) on_completion(s, &wc[i]);
        if (n < POLL_BATCH) break;
    }
}

/* Our slot writes and pull notices still on their way: a write the
 * adapter has not yet delivered dies with its queue pair, and a rank whose
 * last call returned while its last one was in flight may destroy the
 * communicator at once. */
static int sends_pending(const struct ccl__ib_state *s) {
    for (int p = 0; s->conns && p < s->nranks; p++) {
        const struct ccl__ib_conn *c = s->conns[p];
        if (c && !c->failed && (c->send_done != c->sent || c->told_done != c->zc_told)) return 1;
    }
    return 0;
}

void ccl__ib_flush(struct ccl__ib_state *s, int healthy) {
    int moved = 0;
    /* A dead peer fails the writes to it once the adapter's retries run
     * out (well under 2 s); a failed communicator's peers need no more
     * data, and its notices are best effort. */
    double give_up = ccl__now() + (healthy ? 2.0 : 0.2);
    while ((__atomic_load_n(&s->notices_done, __ATOMIC_RELAXED) < __atomic_load_n(&s->notices_posted, __ATOMIC_RELAXED) ||
            (healthy && sends_pending(s))) &&
           ccl__now() < give_up) {
        drain_cq(s, &moved);
        sched_yield();
    }
}

/* The channel's event (and our own kick) once waiting is over. Only an
 * armed queue raises events, and only wait_fd kicks: while spinning there
 * is nothing to take, and no system call is made. */
static void take_events(struct ccl__ib_state *s) {
    struct ibv_cq *cq;
    void *ctx;
    if (s->kicked) {
        uint64_t v;
        ssize_t r = read(s->kick_fd, &v, sizeof(v));
        (void)r;
        s->kicked = 0;
    }
    while (s->armed && ibv_get_cq_event(s->chan, &cq, &ctx) == 0) {
        s->armed = 0;
        if (++s->cq_events >= 64) {
            ibv_ack_cq_events(s->cq, s->cq_events);
            s->cq_events = 0;
        }
    }
}

ccl_status_t ccl__ib_progress_all(struct ccl__ib_conn *c, int *moved) {
    struct ccl__ib_state *s = ccl__ib_state(c->base.comm);
    int got = 0;
    take_events(s);
    drain_cq(s, &got);
    send_owed_credits(s, got, 0);
    *moved |= got;
    return c->failed;
}

/* ---- the slot interface ---- */

/* A slot is free on both sides (its lane has completed the write that
 * last carried our copy) and the send queue has room. */
static int slot_free(const struct ccl__ib_conn *c) {
    unsigned lane = (unsigned)(c->sent % c->lanes);
    return c->sent - c->credits < c->nslots && c->lane_sent[lane] - c->lane_done[lane] < c->nslots / c->lanes;
}

static int can_send(const struct ccl__ib_conn *c) { return slot_free(c) && c->sq_busy < c->sq_depth; }

/* A pair marked for first use links now (ib_link.c): CCL_OK once linked. */
static ccl_status_t linked(struct ccl__ib_conn *c) {
    int moved = 0;
    return c->link == CCL__IB_LINKED ? CCL_OK : ccl__ib_link_advance(c, &moved);
}

static ccl_status_t ib_send_acquire(struct ccl__conn *base, size_t bytes, void **buf) {
    (void)bytes; /* fixed slots: a write moves only the payload it commits */
    struct ccl__ib_conn *c = ib_conn(base);
    int moved = 0;
    if (c->failed) return c->failed;
    ccl_status_t st = linked(c); /* CCL_INPROGRESS too: nothing goes out before the pair is linked */
    if (st != CCL_OK) return st;
    if (!can_send(c)) {
        CCL_CHECK(ccl__ib_progress_all(c, &moved));
        if (!can_send(c)) return CCL_INPROGRESS;
    }
    *buf = c->send_fifo + (c->sent % c->nslots) * c->stride + CCL__IB_HDR_BYTES;
    return CCL_OK;
}

/* The slot send_acquire gave: its head (with our credits) and its
 * payload, from the slot or from the caller's registered memory. */
static ccl_status_t commit_slot(struct ccl__conn *base, const struct ccl__slot_meta *m, const void *from,
                                const struct ibv_mr *from_mr) {
    struct ccl__ib_conn *c = ib_conn(base);
    if (c->failed) return c->failed;
    if (!slot_free(c) || m->bytes > base->slot_bytes)
        return ccl__set_error(base->comm, CCL_ERR_INTERNAL, "ib: commit of %u bytes to rank %d without a free slot",
                              m->bytes, base->peer);
    uint64_t slot = c->sent % c->nslots;
    struct ccl__ib_slot_head head = {.meta = *m, .released = c->released};
    memcpy(c->send_fifo + slot * c->stride, &head, CCL__IB_HDR_BYTES);
    c->credit_sent = c->released; /* on their way with the slot */
    uint32_t imm = CCL__IB_IMM(CCL__IB_IMM_SLOT, c->sent);
    if (from && m->bytes)
        CCL_CHECK(ccl__ib_post_write_from(c, CCL__IB_WR_DATA_FROM, imm, slot, (uint32_t)CCL__IB_HDR_BYTES, from,
                                          m->bytes, from_mr));
    else CCL_CHECK(ccl__ib_post_write(c, CCL__IB_WR_DATA, imm, slot, (uint32_t)CCL__IB_HDR_BYTES + m->bytes));
    c->sent++;
    return CCL_OK;
}

static ccl_status_t ib_send_commit(struct ccl__conn *base, const struct ccl__slot_meta *m) {
    return commit_slot(base, m, NULL, NULL);
}

/* Saves the copy into the slot where the payload is registered: the
 * adapter gathers the head from the slot and the payload from where it
 * lies. Unregistered, it is copied as send_commit's would be. */
static ccl_status_t ib_send_commit_from(struct ccl__conn *base, const struct ccl__slot_meta *m, const void *payload,
                                        void *reg) {
    if (!reg) {
        struct ccl__ib_conn *c = ib_conn(base);
        memcpy(c->send_fifo + (c->sent % c->nslots) * c->stride + CCL__IB_HDR_BYTES, payload, m->bytes);
    }
    return commit_slot(base, m, reg ? payload : NULL, reg);
}

static ccl_status_t ib_recv_acquire(struct ccl__conn *base, const void **buf, struct ccl__slot_meta *m) {
    struct ccl__ib_conn *c = ib_conn(base);
    if (c->failed) return c->failed;
    ccl_status_t st = linked(c); /* CCL_INPROGRESS too: nothing goes out before the pair is linked */
    if (st != CCL_OK) return st;
    if (c->arrived == c->released) {
        int moved = 0;
        CCL_CHECK(ccl__ib_progress_all(c, &moved));
        if (c->arrived == c->released) return CCL_INPROGRESS;
    }
    const uint8_t *slot = c->recv_fifo + (c->released % c->nslots) * c->stride;
    memcpy(m, slot, sizeof(*m));
    if (m->bytes > base->slot_bytes)
        return ccl__ib_conn_fail(c, CCL_ERR_REMOTE, "rank %d (%.64s) wrote a malformed slot: %u payload bytes, slots hold %zu",
                         base->peer, peer_host(c), m->bytes, base->slot_bytes);
    *buf = slot + CCL__IB_HDR_BYTES;
    return CCL_OK;
}

static ccl_status_t ib_recv_release(struct ccl__conn *base) {
    struct ccl__ib_conn *c = ib_conn(base);
    if (c->arrived == c->released)
        return ccl__set_error(base->comm, CCL_ERR_INTERNAL, "ib: release with no slot acquired from rank %d",
                              base->peer);
    c->released++;
    return send_credit(c, 0);
}

static ccl_status_t ib_progress(struct ccl__conn *base, int *moved) {
    struct ccl__ib_conn *c = ib_conn(base);
    *moved = 0;
    if (c->link != CCL__IB_LINKED) {
        ccl_status_t st = ccl__ib_link_advance(c, moved);
        if (st != CCL_OK && st != CCL_INPROGRESS) return st;
    }
    return ccl__ib_progress_all(c, moved);
}

/* A posted write is the adapter's to deliver: nothing on this side has
 * to run for it to arrive, and our copy of its slot is not reused until
 * its completion is in (can_send), so a call need not wait for the
 * peer's acknowledgement before it returns. Waiting for it cost a round
 * trip per call where the data takes one way (8 B send/recv on
 * soft-RoCE: 2x). A write that fails later fails the connection, which
 * the next call on it reports; teardown waits for the last writes. */
static int ib_flushed(struct ccl__conn *base) {
    /* Writes that read the caller's memory are the exception: the caller
     * may change it once its call returns. */
    const struct ccl__ib_conn *c = ib_conn(base);
    return c->failed || c->from_done == c->from_posted;
}

/* The kick descriptor, made readable: a waiter polling it looks again at
 * once instead of sleeping. */
static int kick(struct ccl__ib_state *s) {
    uint64_t one = 1;
    if (write(s->kick_fd, &one, sizeof(one)) < 0) return s->chan->fd;
    s->kicked = 1;
    return s->kick_fd;
}

/* A pair still linking waits for the peer's next word on the pair
 * channel: its connection to us, or the listener it will dial. The look
 * here takes any word already read in, which would never wake a poll. */
static int link_wait_fd(struct ccl__ib_conn *c) {
    int moved = 0;
    if (ccl__ib_link_advance(c, &moved) == CCL_INPROGRESS && !moved) {
        int fd = ccl__pair_wait_fd(c->base.comm, c->base.peer);
        if (fd >= 0) return fd;
    }
    return kick(ccl__ib_state(c->base.comm)); /* linked, failed or further: look again at once */
}

/* Arms the completion queue, then looks once more: completions that came
 * in before arming raise no event, so when there are any the waiter gets
 * the kick descriptor, already readable, instead of sleeping on them. */
static int ib_wait_fd(struct ccl__conn *base, short *events) {
    struct ccl__ib_state *s = ccl__ib_state(base->comm);
    *events = POLLIN;
    if (ib_conn(base)->link != CCL__IB_LINKED) return link_wait_fd(ib_conn(base));
    send_owed_credits(s, 0, 1); /* before sleeping, whatever the count */
    if (!s->armed) {
        if (ibv_req_notify_cq(s->cq, 0) != 0) return s->kick_fd; /* cannot arm: poll briefly */
        s->armed = 1;
        int moved = 0;
        drain_cq(s, &moved);
        if (moved) return kick(s);
    }
    return s->chan->fd;
}

/* Zero-copy work the adapters are still doing for this rank: a pull's
 * reads, or an offered buffer the peer has not finished reading. Slot
 * writes are left out: counting them too made 2-rank all-reduce in the
 * soft-RoCE VM no faster at 16 MiB and slower at 1 MiB (bench/NOTES.md). */
static int ib_in_flight(const struct ccl__conn *base) {
    const struct ccl__ib_conn *c = (const struct ccl__ib_conn *)base;
    return !c->failed && (c->pull_done < c->pull_bytes || c->zc_offered != c->zc_pulled);
}

/* Called while a waiter is idle: what has arrived counts first (a peer
 * that wrote its last slot and exited is not a failure until that slot
 * is read), then whether the peer's process still holds its pair
 * channel. */
/* This rank's own port. A cable pulled under its adapter takes the port
 * out of the active state, and retries alone find that late: soft-RoCE,
 * whose peer's carrier went with it, kept retrying for 15 s with
 * CCL_LINK_TIMEOUT=5. A port may flap; one that stays down for the link
 * budget fails the connection. Looked at only while idle, a tenth of a
 * second apart (the wait routine's liveness period). */
static ccl_status_t check_port(struct ccl__ib_conn *c) {
    struct ccl__ib_state *s = ccl__ib_state(c->base.comm);
    struct ibv_port_attr pa;
    if (ibv_query_port(s->ctx, s->port, &pa) != 0 || pa.state == IBV_PORT_ACTIVE) {
        s->port_down_since = 0;
        return CCL_OK;
    }
    double now = ccl__now(), budget = ccl__ib_link_budget_s(c->base.comm);
    if (s->port_down_since == 0) s->port_down_since = now;
    if (now - s->port_down_since < budget) return CCL_OK;
    ccl__comm_blame(c->base.comm, c->base.peer, CCL__CULPRIT_UNREACHABLE);
    return ccl__ib_conn_fail(c, CCL_ERR_REMOTE,
                             "this rank's adapter %s port %u has been %s for %.1f s (CCL_LINK_TIMEOUT=%g): rank %d "
                             "(%.64s) cannot be reached",
                             s->dev, s->port, ibv_port_state_str(pa.state), now - s->port_down_since,
                             c->base.comm->params.link_timeout_s, c->base.peer, peer_host(c));
}

static ccl_status_t ib_check_peer(struct ccl__conn *base) {
    struct ccl__ib_conn *c = ib_conn(base);
    int moved = 0;
    CCL_CHECK(ccl__ib_progress_all(c, &moved));
    CCL_CHECK(check_port(c));
    if (c->link != CCL__IB_LINKED) return ccl__ib_link_check(c);
    if (c->arrived == c->released && ccl__pair_gone(base->comm, base->peer)) {
        const struct ccl__peer_info *pi = &base->comm->peers[base->peer];
        ccl__comm_blame(base->comm, base->peer, CCL__CULPRIT_EXITED);
        return ccl__ib_conn_fail(c, CCL_ERR_REMOTE, "rank %d (pid %d on %.64s) exited or left the communicator", base->peer,
                         (int)pi->pid, pi->hostname);
    }
    return CCL_OK;
}

static void ib_knobs_load(void *knobs) {
    struct ccl__ib_knobs *k = knobs;
    k->slot_bytes = (size_t)ccl__env_long("CCL_IB_SLOT_BYTES", 256 << 10, 4096, 64 << 20) & ~(size_t)63;
    ccl__env_str("CCL_IB_HCA", "", k->hca, sizeof k->hca);
    k->gid_index = (int)ccl__env_long("CCL_IB_GID_INDEX", 0, 0, 255);
    k->qps = (int)ccl__env_long("CCL_IB_QPS", 1, 1, 8);
    /* 0: 256 KiB, the pieces soft-RoCE pulled fastest at 1 and 4 MiB (ib.h) */
    long pull = ccl__env_long("CCL_IB_PULL_BYTES", 0, 0, 1L << 30);
    k->pull_bytes = pull == 0 ? (size_t)256 << 10 : (size_t)(pull < 4096 ? 4096 : pull);
    k->zcopy_bytes = (size_t)ccl__env_long("CCL_IB_ZCOPY_BYTES", 512 << 10, 0, 1L << 40);
}

static size_t ib_slot_bytes(const void *knobs) { return ((const struct ccl__ib_knobs *)knobs)->slot_bytes; }

const struct ccl__transport ccl__transport_ib = {
    .name = "ib",
    .link_class = "rdma",
    .knobs_bytes = sizeof(struct ccl__ib_knobs),
    .knobs_load = ib_knobs_load,
    .can_connect = ccl__ib_can_connect,
    .local_init = ccl__ib_local_init,
    .setup = ccl__ib_setup,
    .connect = ccl__ib_connect,
    .setup_done = ccl__ib_setup_done,
    .teardown = ccl__ib_teardown,
    .send_acquire = ib_send_acquire,
    .send_commit = ib_send_commit,
    .send_commit_from = ib_send_commit_from,
    .recv_acquire = ib_recv_acquire,
    .recv_release = ib_recv_release,
    .progress = ib_progress,
    .flushed = ib_flushed,
    .wait_fd = ib_wait_fd,
    .in_flight = ib_in_flight,
    .check_peer = ib_check_peer,
    .poison = ccl__ib_poison,
    .slot_bytes = ib_slot_bytes,
    .reg = ccl__ib_reg,
    .dereg = ccl__ib_dereg,
    .reg_linger_s = CCL__IB_REG_LINGER_S,
    .zc_min_bytes = ccl__ib_zc_min_bytes,
    .zc_offer = ccl__ib_zc_offer,
    .zc_take = ccl__ib_zc_take,
    .zc_done = ccl__ib_zc_done,
};
