/* The RDMA transport's set-up: two queue pairs (one per direction of
 * requests) and two registered FIFOs per peer (setup), their numbers,
 * GIDs and keys traded over the pair channel and the queue pairs brought
 * to ready-to-send (connect), poison and teardown. Every rank posts its receives before it reports connect done,
 * and the manager's bootstrap round after connect keeps every rank from
 * writing before all of them can take writes. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/boot_pair.h"
#include "core/comm.h"
#include "core/log.h"
#include "transports/ib/ib.h"

/* A request the peer's adapter does not acknowledge is sent again after
 * the local ack timeout, 4.096 us * 2^exponent, up to RETRY_COUNT times;
 * then it fails the queue pair (the link or the peer's host is gone). The
 * nominal tries fill half of CCL_LINK_TIMEOUT (CCL_TIMEOUT when that is
 * 0), the promise tcp keeps: an adapter may wait longer than nominal
 * (soft-RoCE up to four times), and a port that goes down fails the
 * connection at the budget anyway (check_port in ib.c). At the default
 * 10 s that is 537 ms a try. A quarter of the budget, 268 ms a try, was
 * too short for a loaded host: soft-RoCE in the test VM retried 3 to 6
 * times per 11 all-reduces of 4 MiB, and once ran out of tries against a
 * healthy peer ("transport retry counter exceeded"); at 1.07 s a try it
 * retried twice. Six retries, not the field's maximum of
 * seven: soft-RoCE takes seven to mean "retry forever", and a cable pulled
 * under a rank that was only sending then failed no call at all. */
#define RETRY_COUNT 6
#define ACK_TIMEOUT_MIN 14 /* 67 ms: below, a busy host retries for nothing */
#define ACK_TIMEOUT_MAX 24 /* 69 s */

static uint8_t ack_timeout_exponent(const struct ccl_comm *comm) {
    double per_try_s = ccl__ib_link_budget_s(comm) / (2 * (RETRY_COUNT + 1));
    uint8_t t = ACK_TIMEOUT_MIN;
    while (t < ACK_TIMEOUT_MAX && 4.096e-6 * (double)(1u << (t + 1)) <= per_try_s) t++;
    return t;
}

int ccl__ib_can_connect(const struct ccl__peer_info *a, const struct ccl__peer_info *b) {
    (void)a;
    (void)b;
    return 5; /* above tcp, below shared memory on one host */
}

static void *alloc_fifo(size_t bytes) {
    void *p = NULL;
    return posix_memalign(&p, 4096, bytes) == 0 ? memset(p, 0, bytes) : NULL;
}

static void conn_free(struct ccl__ib_conn *c) {
    if (!c) return;
    for (unsigned k = 1; k < CCL__IB_MAX_LANES; k++) {
        if (c->lane_qp[k]) ibv_destroy_qp(c->lane_qp[k]);
        if (c->lane_rqp[k]) ibv_destroy_qp(c->lane_rqp[k]);
    }
    if (c->qp) ibv_destroy_qp(c->qp);
    if (c->rqp) ibv_destroy_qp(c->rqp);
    free(c->landed);
    if (c->send_mr) ibv_dereg_mr(c->send_mr);
    if (c->recv_mr) ibv_dereg_mr(c->recv_mr);
    free(c->send_fifo);
    free(c->recv_fifo);
    free(c);
}

/* A new queue pair to INIT, on our port, with the remote access given. */
static int to_init(const struct ccl__ib_state *s, struct ibv_qp *qp, int access) {
    struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = s->port,
                               .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | access};
    return ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* Lanes 1.. of a connection (ib.h): each carries nslots / lanes slot
 * writes at most, and receives as many. */
static ccl_status_t lanes_new(struct ccl_comm *comm, struct ccl__ib_state *s, struct ccl__ib_conn *c) {
    unsigned per_lane = c->nslots / c->lanes;
    struct ibv_qp_init_attr qa = {
        .send_cq = s->cq,
        .recv_cq = s->cq,
        .cap = {.max_send_wr = per_lane + 1, .max_recv_wr = 1, .max_send_sge = 2, .max_recv_sge = 1,
                .max_inline_data = c->max_inline},
        .qp_type = IBV_QPT_RC,
    };
    struct ibv_qp_init_attr ra = {
        .send_cq = s->cq,
        .recv_cq = s->cq,
        .cap = {.max_send_wr = 1, .max_recv_wr = per_lane + 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    for (unsigned k = 1; k < c->lanes; k++) {
        c->lane_qp[k] = ibv_create_qp(s->pd, &qa);
        c->lane_rqp[k] = c->lane_qp[k] ? ibv_create_qp(s->pd, &ra) : NULL;
        if (!c->lane_rqp[k])
            return ccl__set_error(comm, CCL_ERR_SYSTEM,
                                  "ib: cannot create the queue pairs of lane %u of %u for rank %d on %s: %s (fewer "
                                  "lanes: CCL_IB_QPS)",
                                  k, c->lanes, c->base.peer, s->dev, strerror(errno));
        if (to_init(s, c->lane_qp[k], 0) || to_init(s, c->lane_rqp[k], IBV_ACCESS_REMOTE_WRITE))
            return ccl__set_error(comm, CCL_ERR_SYSTEM, "ib: lane %u to rank %d: INIT: %s", k, c->base.peer,
                                  strerror(errno));
    }
    return CCL_OK;
}

/* A connection to peer with nothing on the adapter yet: what the data
 * path may ask of it before it is built (ccl__ib_conn_build). */
static ccl_status_t conn_alloc(struct ccl_comm *comm, struct ccl__ib_state *s, int peer, struct ccl__ib_conn **out) {
    struct ccl__ib_conn *c = calloc(1, sizeof(*c));
    if (!c) return CCL_ERR_NO_MEMORY;
    *out = c;
    c->base = (struct ccl__conn){.t = &ccl__transport_ib, .comm = comm, .peer = peer,
                                 .slot_bytes = ccl__ib_knobs(comm)->slot_bytes, .cpu_adapter = s->software};
    return CCL_OK;
}

ccl_status_t ccl__ib_conn_build(struct ccl_comm *comm, struct ccl__ib_state *s, struct ccl__ib_conn *c) {
    size_t slot = c->base.slot_bytes;
    unsigned depth = (unsigned)comm->params.slots;
    int peer = c->base.peer;
    c->nslots = depth;
    c->lanes = ccl__ib_lanes(comm);
    c->landed = calloc(depth, 1);
    if (!c->landed) return CCL_ERR_NO_MEMORY;
    c->stride = (CCL__IB_HDR_BYTES + slot + 63) & ~(size_t)63;
    /* The slots' writes, as many credits, a pull's reads and the notice
     * that ends it. */
    c->sq_depth = 2 * depth + 2 + CCL__IB_PULL_DEPTH + 1;
    if (c->sq_depth > s->max_qp_wr) c->sq_depth = s->max_qp_wr;
    size_t bytes = (size_t)depth * c->stride;
    c->send_fifo = alloc_fifo(bytes);
    c->recv_fifo = alloc_fifo(bytes);
    if (!c->send_fifo || !c->recv_fifo) return CCL_ERR_NO_MEMORY;
    c->send_mr = ibv_reg_mr(s->pd, c->send_fifo, bytes, IBV_ACCESS_LOCAL_WRITE);
    c->recv_mr = ibv_reg_mr(s->pd, c->recv_fifo, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!c->send_mr || !c->recv_mr)
        return ccl__set_error(comm, CCL_ERR_SYSTEM,
                              "ib: cannot register %zu bytes of FIFO for rank %d on %s: %s (is the locked-memory "
                              "limit, ulimit -l, too low?)",
                              2 * bytes, peer, s->dev, strerror(errno));
    /* Ours to ask on: one more send than the data path's, the failure
     * notice (ccl__ib_poison); two pieces to a write: a slot's head and a
     * payload in the caller's memory. Nothing arrives on it but answers. */
    struct ibv_qp_init_attr qa = {
        .send_cq = s->cq,
        .recv_cq = s->cq,
        .cap = {.max_send_wr = c->sq_depth + 1, .max_recv_wr = 1, .max_send_sge = 2, .max_recv_sge = 1,
                .max_inline_data = CCL__IB_INLINE_BYTES},
        .qp_type = IBV_QPT_RC,
    };
    c->qp = ibv_create_qp(s->pd, &qa);
    if (!c->qp) { /* a device that inlines less, or nothing */
        qa.cap.max_inline_data = 0;
        c->qp = ibv_create_qp(s->pd, &qa);
    }
    c->max_inline = c->qp ? qa.cap.max_inline_data : 0;
    /* The peer's to ask on: a receive for each write with immediate it
     * may have in flight, its notice included; it sends nothing. */
    struct ibv_qp_init_attr ra = {
        .send_cq = s->cq,
        .recv_cq = s->cq,
        .cap = {.max_send_wr = 1, .max_recv_wr = c->sq_depth + 1, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    if (c->qp) c->rqp = ibv_create_qp(s->pd, &ra);
    if (!c->qp || !c->rqp)
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "ib: cannot create queue pairs for rank %d on %s: %s", peer,
                              s->dev, strerror(errno));
    if (to_init(s, c->qp, 0))
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "ib: queue pair for rank %d: INIT: %s", peer, strerror(errno));
    if (to_init(s, c->rqp, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ))
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "ib: answering queue pair for rank %d: INIT: %s", peer,
                              strerror(errno));
    c->lane_qp[0] = c->qp;
    c->lane_rqp[0] = c->rqp;
    return lanes_new(comm, s, c);
}

/* Every rank with an RDMA device published its lanes; where two differ,
 * every rank fails with the same sentence. */
static ccl_status_t lanes_agree(struct ccl_comm *comm) {
    int first = -1;
    struct ccl__ib_blob a, b;
    for (int p = 0; p < comm->nranks; p++) {
        memcpy(&b, ccl__peer_blob(comm, p, &ccl__transport_ib), sizeof(b));
        if (b.magic != CCL__IB_BLOB_MAGIC) continue;
        if (first < 0) {
            first = p, a = b;
            continue;
        }
        if (b.lanes != a.lanes)
            return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                                  "ib: rank %d spreads slots over %u queue pairs, rank %d over %u (CCL_IB_QPS, and "
                                  "CCL_SLOTS, which the lanes divide, must be the same on every rank)",
                                  first, a.lanes, p, b.lanes);
    }
    return CCL_OK;
}

ccl_status_t ccl__ib_setup(struct ccl_comm *comm, const uint8_t *use) {
    struct ccl__ib_state *s = ccl__ib_state(comm);
    if (!s || !s->ctx) return ccl__set_error(comm, CCL_ERR_INTERNAL, "ib: setup without a device (local_init failed?)");
    CCL_CHECK(lanes_agree(comm));
    int n = 0;
    for (int p = 0; p < comm->nranks; p++) n += use[p] != 0;
    CCL_CHECK(ccl__ib_open_cq(comm, s, n));
    /* A pair marked for first use gets its queue pairs and FIFOs then
     * (ib_link.c): at many ranks, most pairs never trade a byte. */
    for (int p = 0; p < comm->nranks; p++) {
        if (!use[p]) continue;
        CCL_CHECK(conn_alloc(comm, s, p, &s->conns[p]));
        if (use[p] == CCL__USE_ON_FIRST_USE) s->conns[p]->link = CCL__IB_LINK_IDLE;
        else CCL_CHECK(ccl__ib_conn_build(comm, s, s->conns[p]));
    }
    return CCL_OK;
}

/* One queue pair of ours to its remote twin: `rd_out` reads it may have in
 * flight, `rd_in` it answers at once. */
struct qp_link {
    struct ibv_qp *qp;
    uint32_t dest_qpn, rq_psn, sq_psn;
    uint8_t rd_out, rd_in;
    const char *what;
};

static ccl_status_t to_rtr_rts(struct ccl_comm *comm, struct ccl__ib_state *s, struct ccl__ib_conn *c,
                               const struct ccl__ib_qp_info *mine, const struct ccl__ib_qp_info *peer,
                               const struct qp_link *l) {
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = (enum ibv_mtu)(peer->mtu < mine->mtu ? peer->mtu : mine->mtu),
        .dest_qp_num = l->dest_qpn,
        .rq_psn = l->rq_psn,
        .max_dest_rd_atomic = l->rd_in,
        .min_rnr_timer = 12,
        .ah_attr = {.dlid = peer->lid, .sl = 0, .src_path_bits = 0, .port_num = s->port},
    };
    if (s->link_layer == IBV_LINK_LAYER_ETHERNET || ccl__ib_knobs(comm)->gid_index > 0) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)s->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    if (ibv_modify_qp(l->qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "ib: %s to rank %d (%.64s): ready-to-receive: %s", l->what,
                              c->base.peer, comm->peers[c->base.peer].hostname, strerror(errno));
    struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTS, .timeout = ack_timeout_exponent(comm),
                            .retry_cnt = RETRY_COUNT,
                            .rnr_retry = 7, .sq_psn = l->sq_psn, .max_rd_atomic = l->rd_out};
    if (ibv_modify_qp(l->qp, &r,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC))
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "ib: %s to rank %d (%.64s): ready-to-send: %s", l->what,
                              c->base.peer, comm->peers[c->base.peer].hostname, strerror(errno));
    return CCL_OK;
}

static uint32_t random_psn(uint32_t fallback) {
    uint32_t psn;
    if (getrandom(&psn, sizeof(psn), 0) != sizeof(psn)) psn = fallback;
    return psn & 0xffffff;
}

static uint32_t rd_depth_of(const struct ccl__ib_state *s) {
    return s->max_rd < CCL__IB_PULL_DEPTH ? s->max_rd : CCL__IB_PULL_DEPTH;
}

void ccl__ib_qp_info_fill(const struct ccl__ib_state *s, const struct ccl__ib_conn *c, struct ccl__ib_qp_info *out) {
    struct ccl__ib_qp_info mine = {.qpn = c->qp->qp_num, .psn = random_psn((uint32_t)c->base.peer),
                                   .rqpn = c->rqp->qp_num, .rpsn = random_psn((uint32_t)c->base.peer + 1),
                                   .rd_depth = rd_depth_of(s), .lid = s->lid, .port = s->port,
                                   .mtu = (uint8_t)s->mtu, .fifo_addr = (uintptr_t)c->recv_fifo,
                                   .fifo_rkey = c->recv_mr->rkey, .nslots = c->nslots, .stride = c->stride,
                                   .slot_bytes = c->base.slot_bytes};
    memcpy(mine.gid, s->gid.raw, 16);
    for (unsigned k = 1; k < c->lanes; k++) {
        mine.lane_qpn[k] = c->lane_qp[k]->qp_num;
        mine.lane_psn[k] = random_psn((uint32_t)c->base.peer + 2 * k);
        mine.lane_rqpn[k] = c->lane_rqp[k]->qp_num;
        mine.lane_rpsn[k] = random_psn((uint32_t)c->base.peer + 2 * k + 1);
    }
    *out = mine;
}

ccl_status_t ccl__ib_qp_link(struct ccl_comm *comm, struct ccl__ib_state *s, struct ccl__ib_conn *c,
                             const struct ccl__ib_qp_info *me, const struct ccl__ib_qp_info *them, const char *when) {
    uint32_t rd = rd_depth_of(s);
    struct ccl__ib_qp_info mine = *me, peer = *them;
    if (peer.nslots != mine.nslots || peer.stride != mine.stride || peer.slot_bytes != mine.slot_bytes)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE,
                              "ib: rank %d has %u slots of %llu bytes, rank %d %u of %llu (CCL_SLOTS and "
                              "CCL_IB_SLOT_BYTES must be the same on every rank)",
                              comm->rank, mine.nslots, (unsigned long long)mine.slot_bytes, c->base.peer, peer.nslots,
                              (unsigned long long)peer.slot_bytes);
    /* Our reads go no deeper than the peer answers. A device that answers
     * none cannot take zero-copy: a first offer to it fails, saying so. */
    c->rd_depth = peer.rd_depth < rd ? peer.rd_depth : rd;
    c->remote_addr = peer.fifo_addr;
    c->remote_rkey = peer.fifo_rkey;
    /* Receives first: the peer may write as soon as both are past the
     * bootstrap round that closes connect. */
    for (unsigned i = 0; i < c->sq_depth + 1; i++) CCL_CHECK(ccl__ib_post_recv(c, 0));
    for (unsigned k = 1; k < c->lanes; k++)
        for (unsigned i = 0; i < c->nslots / c->lanes + 1; i++) CCL_CHECK(ccl__ib_post_recv(c, k));
    struct qp_link ask = {.qp = c->qp, .dest_qpn = peer.rqpn, .rq_psn = peer.rpsn, .sq_psn = mine.psn,
                          .rd_out = (uint8_t)c->rd_depth, .rd_in = 0, .what = "queue pair"};
    struct qp_link answer = {.qp = c->rqp, .dest_qpn = peer.qpn, .rq_psn = peer.psn, .sq_psn = mine.rpsn,
                             .rd_out = 0, .rd_in = (uint8_t)rd, .what = "answering queue pair"};
    CCL_CHECK(to_rtr_rts(comm, s, c, &mine, &peer, &ask));
    CCL_CHECK(to_rtr_rts(comm, s, c, &mine, &peer, &answer));
    for (unsigned k = 1; k < c->lanes; k++) {
        struct qp_link out = {.qp = c->lane_qp[k], .dest_qpn = peer.lane_rqpn[k], .rq_psn = peer.lane_rpsn[k],
                              .sq_psn = mine.lane_psn[k], .what = "slot lane"};
        struct qp_link in = {.qp = c->lane_rqp[k], .dest_qpn = peer.lane_qpn[k], .rq_psn = peer.lane_psn[k],
                             .sq_psn = mine.lane_rpsn[k], .what = "receiving slot lane"};
        CCL_CHECK(to_rtr_rts(comm, s, c, &mine, &peer, &out));
        CCL_CHECK(to_rtr_rts(comm, s, c, &mine, &peer, &in));
    }
    uint8_t t = ack_timeout_exponent(comm);
    CCL_INFO(CCL__SUB_NET, comm->rank,
             "ib: connected to rank %d (qp %u -> %u, answering %u <- %u, slots over %u queue pairs, %u reads in "
             "flight; an unacknowledged request is tried %d times, %.0f ms apart), %s",
             c->base.peer, mine.qpn, peer.rqpn, mine.rqpn, peer.qpn, c->lanes, c->rd_depth, RETRY_COUNT + 1,
             4.096e-3 * (double)(1u << t), when);
    return CCL_OK;
}

static ccl_status_t connect_one(struct ccl_comm *comm, struct ccl__ib_state *s, struct ccl__ib_conn *c) {
    struct ccl__ib_qp_info mine, peer;
    ccl__ib_qp_info_fill(s, c, &mine);
    CCL_CHECK(ccl__pair_exchange(comm, c->base.peer, CCL__IB_PAIR_TAG, &mine, &peer, sizeof(peer)));
    return ccl__ib_qp_link(comm, s, c, &mine, &peer, "at init");
}

ccl_status_t ccl__ib_connect(struct ccl_comm *comm, const uint8_t *use, struct ccl__conn **conns) {
    struct ccl__ib_state *s = ccl__ib_state(comm);
    if (!s || !s->ctx) return ccl__set_error(comm, CCL_ERR_INTERNAL, "ib: connect without a device");
    ccl_status_t st = CCL_OK;
    int others = 0;
    for (int p = 0; p < comm->nranks && st == CCL_OK; p++) {
        if (use[p] && s->conns[p] && s->conns[p]->link == CCL__IB_LINKED) st = connect_one(comm, s, s->conns[p]);
        else if (!use[p] && p != comm->rank) others++;
    }
    /* Credits may wait for a slot going back (ib.h) only where every wait
     * of this rank polls this transport, which then returns what it owes
     * first: a rank waiting on a shared-memory or tcp peer alone would
     * hold them while its ib peers wait for them. */
    s->lazy_credits = others == 0;
    for (int p = 0; p < comm->nranks; p++)
        if (use[p] && s->conns[p]) conns[p] = &s->conns[p]->base;
    return st;
}

ccl_status_t ccl__ib_setup_done(struct ccl_comm *comm) {
    (void)comm;
    return CCL_OK;
}

void ccl__ib_teardown(struct ccl_comm *comm) {
    struct ccl__ib_state *s = ccl__ib_state(comm);
    if (!s) return;
    if (s->cq) ccl__ib_flush(s, ccl__comm_health(comm) >= 0);
    for (int p = 0; s->conns && p < s->nranks; p++) {
        conn_free(s->conns[p]);
        s->conns[p] = NULL;
    }
    ccl__ib_close_dev(s);
    free(s->conns);
    free(s);
    *ccl__tstate(comm, &ccl__transport_ib) = NULL;
}

/* May run on another thread than the data path (ccl_comm_abort): the
 * notice takes the send queue's spare entry and its completion is counted
 * apart, so it touches none of the data path's counters (verbs posting is
 * thread-safe); teardown lets it leave before destroying the queue pair.
 * Best effort: a queue pair that is not connected, or a full queue, sends
 * nothing, and the peer learns of us from the pair channel instead. */
void ccl__ib_poison(struct ccl_comm *comm, int status) {
    struct ccl__ib_state *s = ccl__ib_state(comm);
    if (!s) return;
    uint32_t code = status < 0 ? (uint32_t)-status : (uint32_t)-CCL_ERR_INTERNAL;
    for (int p = 0; s->conns && p < s->nranks; p++) {
        struct ccl__ib_conn *c = s->conns[p];
        if (!c || !c->qp || c->qp->state != IBV_QPS_RTS) continue;
        struct ibv_send_wr wr = {.wr_id = CCL__IB_WR_ID(CCL__IB_WR_NOTICE, p, 0),
                                 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                                 .send_flags = IBV_SEND_SIGNALED,
                                 .imm_data = htonl(CCL__IB_IMM(CCL__IB_IMM_FAIL, code)),
                                 .wr.rdma = {.remote_addr = c->remote_addr, .rkey = c->remote_rkey}};
        struct ibv_send_wr *bad = NULL;
        if (ibv_post_send(c->qp, &wr, &bad) != 0) continue;
        __atomic_add_fetch(&s->notices_posted, 1, __ATOMIC_RELAXED);
        CCL_INFO(CCL__SUB_NET, comm->rank, "ib: told rank %d that this rank failed", p);
    }
}
