/* The RDMA transport's memory registration and zero-copy transfers (the
 * protocol is described in ib.h): the sender offers its registered buffer
 * in a slot, the receiver reads it into its own in pieces of
 * CCL_IB_PULL_BYTES and tells the sender when every read is in. Nothing
 * here blocks. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "core/comm.h"
#include "core/log.h"
#include "transports/ib/ib.h"

static inline struct ccl__ib_conn *ib_conn(struct ccl__conn *c) { return (struct ccl__ib_conn *)c; }

ccl_status_t ccl__ib_reg(struct ccl_comm *comm, void *addr, size_t bytes, void **handle) {
    struct ccl__ib_state *s = ccl__ib_state(comm);
    if (!s || !s->pd) return ccl__set_error(comm, CCL_ERR_INTERNAL, "ib: registering memory without a device");
    /* Remote read for a buffer a sender offers; local write for one a
     * receiver reads into. Nothing writes into a caller's memory from
     * afar. */
    struct ibv_mr *mr = ibv_reg_mr(s->pd, addr, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
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

size_t ccl__ib_zc_min_bytes(const void *knobs) { return ((const struct ccl__ib_knobs *)knobs)->zcopy_bytes; }

ccl_status_t ccl__ib_zc_offer(struct ccl__conn *base, const struct ccl__slot_meta *m, const void *buf, size_t bytes,
                              void *reg) {
    struct ccl__ib_conn *c = ib_conn(base);
    if (c->failed) return c->failed;
    if (c->zc_offered != c->zc_pulled)
        return ccl__set_error(base->comm, CCL_ERR_INTERNAL, "ib: a second zero-copy offer to rank %d", base->peer);
    /* The offer is an ordinary slot: its stamp, then where to read. Taking
     * it links a pair marked for first use, whose read depth is known only
     * then; an untaken slot is given again on the next ask. */
    void *payload;
    ccl_status_t st = ccl__transport_ib.send_acquire(base, sizeof(struct ccl__ib_zc_offer), &payload);
    if (st != CCL_OK) return st; /* CCL_INPROGRESS: still linking, or no free slot yet */
    if (!c->rd_depth)
        return ccl__ib_conn_fail(c, CCL_ERR_UNSUPPORTED,
                                 "this rank's adapter and rank %d's cannot both do RDMA reads, which zero-copy needs (set "
                                 "CCL_IB_ZCOPY_BYTES=0 and register nothing)",
                                 base->peer);
    const struct ibv_mr *mr = reg;
    struct ccl__ib_zc_offer offer = {.addr = (uintptr_t)buf, .bytes = bytes, .rkey = mr->rkey};
    struct ccl__slot_meta stamp = *m;
    stamp.bytes = sizeof(offer);
    memcpy(payload, &offer, sizeof(offer));
    CCL_CHECK(ccl__transport_ib.send_commit(base, &stamp));
    c->zc_offered++;
    return CCL_OK;
}

/* Posts the pull's next reads while the send queue has room, at most
 * rd_depth in flight (all pieces but the last are whole, so bytes in
 * flight count them). */
static ccl_status_t post_reads(struct ccl__ib_conn *c) {
    size_t piece = ccl__ib_knobs(c->base.comm)->pull_bytes;
    while (c->pull_posted < c->pull_bytes && c->sq_busy < c->sq_depth &&
           c->pull_posted - c->pull_done < (size_t)c->rd_depth * piece) {
        size_t left = c->pull_bytes - c->pull_posted;
        uint32_t len = left < piece ? (uint32_t)left : (uint32_t)piece;
        struct ibv_sge sge = {.addr = c->pull_local + c->pull_posted, .length = len, .lkey = c->pull_lkey};
        struct ibv_send_wr wr = {
            .wr_id = CCL__IB_WR_ID(CCL__IB_WR_PULL, c->base.peer, len),
            .sg_list = &sge,
            .num_sge = 1,
            .opcode = IBV_WR_RDMA_READ,
            .send_flags = IBV_SEND_SIGNALED,
            .wr.rdma = {.remote_addr = c->pull_remote + c->pull_posted, .rkey = c->pull_rkey},
        };
        struct ibv_send_wr *bad = NULL;
        int rc = ibv_post_send(c->qp, &wr, &bad);
        if (rc)
            return ccl__ib_conn_fail(c, CCL_ERR_SYSTEM, "posting a read of %u bytes from rank %d: %s", len,
                                     c->base.peer, strerror(rc));
        c->sq_busy++;
        c->pull_posted += len;
    }
    return CCL_OK;
}

ccl_status_t ccl__ib_zc_take(struct ccl__conn *base, void *buf, size_t bytes, void *reg) {
    struct ccl__ib_conn *c = ib_conn(base);
    if (c->failed) return c->failed;
    if (c->zc_taken != c->zc_told || c->arrived == c->released)
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
    c->pull_remote = offer.addr;
    c->pull_rkey = offer.rkey;
    c->pull_local = (uintptr_t)buf;
    c->pull_lkey = mr->lkey;
    c->pull_bytes = bytes;
    c->pull_posted = c->pull_done = 0;
    c->zc_taken++;
    CCL_CHECK(ccl__transport_ib.recv_release(base)); /* the offer is copied out: its slot is free */
    return post_reads(c);
}

/* Tells the sender its buffer is free, when the send queue has room. */
static ccl_status_t post_pulled(struct ccl__ib_conn *c) {
    if (c->sq_busy >= c->sq_depth) return CCL_OK;
    CCL_CHECK(ccl__ib_post_write(c, CCL__IB_WR_PULLED, CCL__IB_IMM(CCL__IB_IMM_PULLED, c->zc_taken), 0, 0));
    c->zc_told = c->zc_taken;
    return CCL_OK;
}

ccl_status_t ccl__ib_zc_done(struct ccl__conn *base, int is_send) {
    struct ccl__ib_conn *c = ib_conn(base);
    int moved = 0;
    CCL_CHECK(ccl__ib_progress_all(c, &moved));
    if (is_send) return c->zc_pulled == c->zc_offered ? CCL_OK : CCL_INPROGRESS;
    if (c->zc_told == c->zc_taken) return CCL_OK;
    CCL_CHECK(post_reads(c));
    if (c->pull_done < c->pull_bytes) return CCL_INPROGRESS;
    /* Every read is in: the bytes are in our buffer. The notice needs
     * only be posted: the adapter delivers it, and teardown waits for it
     * to leave (sends_pending). */
    CCL_CHECK(post_pulled(c));
    return c->zc_told == c->zc_taken ? CCL_OK : CCL_INPROGRESS;
}
