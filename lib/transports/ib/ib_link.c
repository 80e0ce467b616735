/* Linking an RDMA pair on its first use (CCL_CONNECT=lazy), from inside
 * the waits of the call that first needs it. Nothing here waits on the
 * peer: each look takes the next stage if it can and returns.
 *
 * The two ranks of a pair get there in their own time. Each, at its first
 * look, builds its queue pairs and FIFOs and sends their record over the
 * pair channel (SENT). Once the peer's record is here, it brings its queue
 * pairs to ready-to-send against it, every receive posted, and sends the
 * ready word (READY_SENT). Once the peer's ready word is here, the peer's
 * queue pairs take writes too: linked. A write before that could meet a
 * queue pair still in INIT, which drops its packets, and the adapter's
 * retries would run out against a live peer.
 *
 * A dead peer fails the call as on a linked pair: the pair channel's
 * connection to it closes with its process (ccl__pair_gone); a peer whose
 * host cannot be reached fails the send of this rank's record within
 * CCL_LINK_TIMEOUT. */
#include "core/boot_pair.h"
#include "core/comm.h"
#include "core/log.h"
#include "transports/ib/ib.h"

/* A failed stage fails the connection for good; a peer whose pair channel
 * refused or closed is blamed as exited, as on a linked pair. */
static ccl_status_t stuck(struct ccl__ib_conn *c, ccl_status_t st) {
    if (st == CCL_ERR_REMOTE && ccl__pair_gone(c->base.comm, c->base.peer))
        ccl__comm_blame(c->base.comm, c->base.peer, CCL__CULPRIT_EXITED);
    if (!c->failed) c->failed = st;
    return st;
}

/* The peer's record, then its ready word: 1 when here, 0 not yet. */
static int take(struct ccl__ib_conn *c, uint32_t tag, void *buf, size_t bytes) {
    return ccl__pair_take(c->base.comm, c->base.peer, tag, buf, bytes);
}

ccl_status_t ccl__ib_link_advance(struct ccl__ib_conn *c, int *moved) {
    struct ccl_comm *comm = c->base.comm;
    struct ccl__ib_state *s = ccl__ib_state(comm);
    double budget = ccl__ib_link_budget_s(comm);
    ccl_status_t st = CCL_OK;
    if (c->failed) return c->failed;
    if (c->link == CCL__IB_LINK_IDLE) {
        c->link_since = ccl__now();
        st = ccl__ib_conn_build(comm, s, c);
        if (st == CCL_OK) {
            ccl__ib_qp_info_fill(s, c, &c->mine);
            st = ccl__pair_send_within(comm, c->base.peer, CCL__IB_LINK_TAG, &c->mine, sizeof(c->mine), budget);
        }
        if (st != CCL_OK) return stuck(c, st);
        c->link = CCL__IB_LINK_SENT;
        *moved = 1;
    }
    if (c->link == CCL__IB_LINK_SENT) {
        struct ccl__ib_qp_info theirs;
        int got = take(c, CCL__IB_LINK_TAG, &theirs, sizeof(theirs));
        if (got <= 0) return got < 0 ? stuck(c, got) : CCL_INPROGRESS;
        uint32_t ready = 1;
        st = ccl__ib_qp_link(comm, s, c, &c->mine, &theirs, "on first use");
        if (st == CCL_OK) st = ccl__pair_send_within(comm, c->base.peer, CCL__IB_READY_TAG, &ready, sizeof(ready), budget);
        if (st != CCL_OK) return stuck(c, st);
        c->link = CCL__IB_LINK_READY_SENT;
        *moved = 1;
    }
    uint32_t ready;
    int got = take(c, CCL__IB_READY_TAG, &ready, sizeof(ready));
    if (got <= 0) return got < 0 ? stuck(c, got) : CCL_INPROGRESS;
    c->link = CCL__IB_LINKED;
    *moved = 1;
    CCL_INFO(CCL__SUB_NET, comm->rank, "ib: the pair with rank %d linked on first use in %.3f s", c->base.peer,
             ccl__now() - c->link_since);
    return CCL_OK;
}

ccl_status_t ccl__ib_link_check(struct ccl__ib_conn *c) {
    struct ccl_comm *comm = c->base.comm;
    int peer = c->base.peer;
    if (c->failed) return c->failed;
    if (c->link == CCL__IB_LINK_IDLE || !ccl__pair_gone(comm, peer)) return CCL_OK;
    const struct ccl__peer_info *pi = &comm->peers[peer];
    ccl__comm_blame(comm, peer, CCL__CULPRIT_EXITED);
    return ccl__ib_conn_fail(c, CCL_ERR_REMOTE,
                             "rank %d (pid %d on %.64s) exited or left the communicator before the pair was first "
                             "used (this rank waited %.1f s to link it)",
                             peer, (int)pi->pid, pi->hostname, ccl__now() - c->link_since);
}
