/* The RDMA transport's memory registration and zero-copy transfers (the
 * protocol is described in ib.h): the sender offers its message in a
 * slot, the receiver grants its registered buffer, the sender writes into
 * it in pieces of CCL__IB_PUSH_BYTES. Nothing here blocks. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "core/comm.h"
#include "core/log.h"
#include "transports/ib/ib.h"


static inline struct ccl__ib_conn *ib_conn(struct ccl__conn *c) { return (struct ccl__ib_conn *)c; }

/* The grant box of one of c's FIFOs: the stride past its last slot. */
#define GRANT_BOX_SLOT(c) ((size_t)(c)->nslots)
static uint8_t *grant_box(const struct ccl__ib_conn *c, uint8_t *fifo) { return fifo + GRANT_BOX_SLOT(c) * c->stride; }

ccl_status_t ccl__ib_reg(struct ccl_comm *comm, void *addr, size_t bytes, void **handle) {
    struct ccl__ib_state *s = ccl__ib_state(comm);
    if (!s || !s->pd) return ccl__set_error(comm, CCL_ERR_INTERNAL, "ib: registering memory without a device");
    /* Remote write for the buffer a receiver grants (which needs local
     * write too); a sender's buffer is only read by its own adapter. */
    struct ibv_mr *mr = ibv_reg_mr(s->pd, addr, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr)
        return ccl__set_error(comm, CCL_ERR_SYSTEM, "ib: cannot register %zu bytes at %p on %s: %s%s", bytes, addr,
                              s->dev, strerror(errno),
                              errno == ENOMEM || errno == EPERM ? " (is the locked-memory limit, ulimit -l, too low?)"
                                                                : "");
    *handle = mr;
    return CCL_OK;
}

void ccl__ib_dereg(struct ccl_comm *comm, void *handle) {
    (void)comm;
    if (handle) ibv_dereg_mr(handle);
}

size_t ccl__ib_zc_min_bytes(const struct ccl__params *params) { return params->ib_zcopy_bytes; }

ccl_status_t ccl__ib_zc_offer(struct ccl__conn *base, const struct ccl__slot_meta *m, const void *buf, size_t bytes,
                              void *reg) {
    struct ccl__ib_conn *c = ib_conn(base);
    if (c->failed) return c->failed;
    if (c->zc_offered != c->zc_pushed)
        return ccl__set_error(base->comm, CCL_ERR_INTERNAL, "ib: a second zero-copy offer to rank %d", base->peer);
    /* The offer is an ordinary slot: its stamp, then the message's size. */
    void *payload;
    ccl_status_t st = ccl__transport_ib.send_acquire(base, sizeof(struct ccl__ib_zc_offer), &payload);
    if (st != CCL_OK) return st; /* CCL_INPROGRESS: no free slot yet */
    struct ccl__ib_zc_offer offer = {.bytes = bytes};
    struct ccl__slot_meta stamp = *m;
    stamp.bytes = sizeof(offer);
    memcpy(payload, &offer, sizeof(offer));
    CCL_CHECK(ccl__transport_ib.send_commit(base, &stamp));
    const struct ibv_mr *mr = reg;
    c->push_local = (uintptr_t)buf;
    c->push_lkey = mr->lkey;
    c->offer_bytes = bytes;
    c->pushing = 0;
    c->zc_offered++;
    return CCL_OK;
}

/* The grant the peer wrote into our grant box, for the offer under way. */
static ccl_status_t read_grant(struct ccl__ib_conn *c) {
    struct ccl__ib_zc_grant g;
    memcpy(&g, grant_box(c, c->recv_fifo), sizeof(g));
    if (g.bytes != c->offer_bytes)
        return ccl__ib_conn_fail(c, CCL_ERR_REMOTE, "rank %d granted %llu bytes for an offer of %zu", c->base.peer,
                                 (unsigned long long)g.bytes, c->offer_bytes);
    c->push_remote = g.addr;
    c->push_rkey = g.rkey;
    c->push_posted = c->push_done = 0;
    c->pushing = 1;
    return CCL_OK;
}

/* Posts the push's next pieces while the send queue has room; the last
 * one carries the immediate that tells the receiver it has landed. */
static ccl_status_t post_pushes(struct ccl__ib_conn *c) {
    while (c->push_posted < c->offer_bytes && c->sq_busy < c->sq_depth &&
           c->push_posted - c->push_done < (size_t)CCL__IB_PUSH_DEPTH * CCL__IB_PUSH_BYTES) {
        size_t left = c->offer_bytes - c->push_posted;
        uint32_t len = left < CCL__IB_PUSH_BYTES ? (uint32_t)left : CCL__IB_PUSH_BYTES;
        int last = len == left;
        struct ibv_sge sge = {.addr = c->push_local + c->push_posted, .length = len, .lkey = c->push_lkey};
        struct ibv_send_wr wr = {
            .wr_id = CCL__IB_WR_ID(CCL__IB_WR_PUSH, c->base.peer, len),
            .sg_list = &sge,
            .num_sge = 1,
            .opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
            .send_flags = IBV_SEND_SIGNALED,
            .imm_data = last ? htonl(CCL__IB_IMM(CCL__IB_IMM_ZC, CCL__IB_ZC_LANDED |
                                                                     ((c->zc_pushed + 1) & CCL__IB_ZC_COUNT_MASK)))
                             : 0,
            .wr.rdma = {.remote_addr = c->push_remote + c->push_posted, .rkey = c->push_rkey},
        };
        struct ibv_send_wr *bad = NULL;
        int rc = ibv_post_send(c->qp, &wr, &bad);
        if (rc)
            return ccl__ib_conn_fail(c, CCL_ERR_SYSTEM, "posting a write of %u bytes to rank %d: %s", len,
                                     c->base.peer, strerror(rc));
        c->sq_busy++;
        c->push_posted += len;
    }
    return CCL_OK;
}

/* The grant for the offer at the head, when the send queue has room. */
static ccl_status_t post_grant(struct ccl__ib_conn *c) {
    if (!c->grant_owed || c->sq_busy >= c->sq_depth) return CCL_OK;
    CCL_CHECK(ccl__ib_post_write(c, CCL__IB_WR_GRANT, CCL__IB_IMM(CCL__IB_IMM_ZC, c->zc_taken & CCL__IB_ZC_COUNT_MASK),
                                 GRANT_BOX_SLOT(c), sizeof(struct ccl__ib_zc_grant)));
    c->grant_owed = 0;
    return CCL_OK;
}

ccl_status_t ccl__ib_zc_take(struct ccl__conn *base, void *buf, size_t bytes, void *reg) {
    struct ccl__ib_conn *c = ib_conn(base);
    if (c->failed) return c->failed;
    if (c->zc_taken != c->zc_landed || c->arrived == c->released)
        return ccl__set_error(base->comm, CCL_ERR_INTERNAL, "ib: zero-copy take from rank %d without an offer",
                              base->peer);
    const uint8_t *at = c->recv_fifo + (c->released % c->nslots) * c->stride;
    struct ccl__slot_meta m;
    struct ccl__ib_zc_offer offer;
    memcpy(&m, at, sizeof(m));
    memcpy(&offer, at + CCL__IB_HDR_BYTES, sizeof(offer));
    if (m.bytes != sizeof(offer) || offer.bytes != bytes)
        return ccl__ib_conn_fail(c, CCL_ERR_REMOTE, "rank %d offered %llu bytes (in a slot of %u); this rank receives %zu",
                                 base->peer, (unsigned long long)offer.bytes, m.bytes, bytes);
    const struct ibv_mr *mr = reg;
    struct ccl__ib_zc_grant g = {.addr = (uintptr_t)buf, .bytes = bytes, .rkey = mr->rkey};
    memcpy(grant_box(c, c->send_fifo), &g, sizeof(g));
    c->zc_taken++;
    c->grant_owed = 1;
    CCL_CHECK(ccl__transport_ib.recv_release(base)); /* the offer is copied out: its slot is free */
    return post_grant(c);
}

ccl_status_t ccl__ib_zc_done(struct ccl__conn *base, int is_send) {
    struct ccl__ib_conn *c = ib_conn(base);
    int moved = 0;
    CCL_CHECK(ccl__ib_progress_all(c, &moved));
    if (!is_send) {
        CCL_CHECK(post_grant(c));
        return c->zc_landed == c->zc_taken ? CCL_OK : CCL_INPROGRESS;
    }
    if (c->zc_pushed == c->zc_offered) return CCL_OK;
    if (!c->pushing) {
        if (c->zc_granted == c->zc_pushed) return CCL_INPROGRESS; /* no grant yet */
        CCL_CHECK(read_grant(c));
    }
    CCL_CHECK(post_pushes(c));
    if (c->push_done < c->offer_bytes) return CCL_INPROGRESS;
    /* Every write is acknowledged: the bytes are in the receiver's buffer. */
    c->zc_pushed++;
    c->pushing = 0;
    return CCL_OK;
}
