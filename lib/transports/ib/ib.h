/*
 * The RDMA verbs transport (libibverbs): two reliable-connected queue
 * pairs per pair of ranks (below; more with slot lanes, CCL_IB_QPS), for
 * ranks on different hosts (or any ranks when CCL_TRANSPORT=ib), on
 * InfiniBand or RoCE adapters, soft-RoCE included.
 *
 * Each direction of a connection is a FIFO of `slots` slots in registered
 * memory on the receiver. A slot is a struct ccl__slot_meta followed by the
 * payload; the sender fills its own registered copy of the slot and writes
 * header and payload into the receiver's slot with one RDMA WRITE WITH
 * IMMEDIATE, whose immediate (the slot's number) raises a completion on the
 * receiver. Credits (the count of slots the receiver has released) ride
 * back in the head of every slot written the other way, so traffic both
 * ways (a send/recv pair, a ring of two) needs no writes of its own for
 * them; otherwise the receiver returns them in a zero-length WRITE WITH
 * IMMEDIATE (the count in the immediate), once half the FIFO is released
 * or once it has waited a moment for anything (at once, in a job where it also
 * has peers on other transports). RC delivers in order, so slot n is
 * always slot n mod `slots`.
 *
 * Large point-to-point messages go zero-copy (the zc_* operations of
 * transport.h), pulled by the receiver:
 *   1. the sender's slot carries an offer: the address, key and size of
 *      its registered buffer;
 *   2. the receiver, once its call reaches the offer, RDMA READs the
 *      message straight into its own registered buffer, in pieces of
 *      CCL_IB_PULL_BYTES (256 KiB), at most CCL__IB_PULL_DEPTH in flight;
 *   3. when every read has completed it tells the sender, with a
 *      zero-length WRITE WITH IMMEDIATE, that the buffer is free.
 * The offer travels in order with the slots, so a receiver that expects
 * something else finds out from the offer's stamp, as from any slot.
 * Pulling costs one small message less than a rendezvous of writes (no
 * grant goes back before the data moves), and soft-RoCE, the adapter the
 * test suite runs on, answers a read from its softirq work, where packets
 * go out in batches, while a write's packets each leave inside the
 * sender's ibv_post_send; bench/NOTES.md has the trials.
 *
 * Each connection is two queue pairs, one per direction of requests, as
 * NCCL's one-way connections are: a rank posts everything it asks of the
 * peer (slot writes, credits, reads, notices) on `qp`, and the peer's
 * requests arrive on `rqp`, which carries the receives and answers the
 * peer's reads. Over one queue pair the two directions' reads took turns
 * on soft-RoCE, which counts the read responses a queue pair sends
 * against that queue pair's own requests in flight. Only `rqp` answers
 * reads, and only from a queue pair that proved the job secret (below):
 * the buffers a rank offers are readable by the rank it offers them to
 * and, while they stay registered, by its other peers, never by a
 * stranger.
 *
 * Every connection of a communicator shares one completion queue, with a
 * completion channel whose descriptor waits poll(), so an idle rank sleeps
 * instead of spinning.
 *
 * Set-up trades queue-pair numbers, GIDs and the receive FIFO's address and
 * key over the pair channel (core/boot_pair.h) rather than through
 * librdmacm: that channel already proves the job secret on every
 * connection, so only members learn a queue pair to talk to, and an RC
 * queue pair accepts packets from its one connected remote queue pair only.
 * It also needs no IP address on the RDMA device: InfiniBand without IPoIB
 * works the same way. Under CCL_CONNECT=lazy only the pairs the ring and
 * the trees use are set up at init; the others build their queue pairs and
 * trade their records in the waits of the call that first needs them
 * (ib_link.c).
 *
 * Liveness: a verbs peer that dies leaves no trace on our queue pair until
 * we write to it (and then only after the retries run out), so a waiting
 * rank asks the pair channel, whose TCP connection the peer's kernel closes
 * when the process dies. A rank that fails (an error, an abort) sends
 * every peer a failure notice, a zero-length WRITE WITH IMMEDIATE with its
 * status, and each peer fails its communicator naming that rank.
 */
#ifndef CCL_TRANSPORT_IB_H
#define CCL_TRANSPORT_IB_H

#include <infiniband/verbs.h>
#include <stdint.h>

#include "transports/transport.h"

extern const struct ccl__transport ccl__transport_ib;

/* CCL_IB_* (read in ib.c). */
struct ccl__ib_knobs {
    size_t slot_bytes;  /* CCL_IB_SLOT_BYTES: bytes per FIFO slot, a multiple of 64 */
    char hca[64];       /* CCL_IB_HCA: RDMA device ("mlx5_0" or "mlx5_0:1"; "" the first active) */
    int gid_index;      /* CCL_IB_GID_INDEX */
    int qps;            /* CCL_IB_QPS: queue pairs a connection's slots are spread over */
    size_t pull_bytes;  /* CCL_IB_PULL_BYTES: a zero-copy read's piece, at least 4096 */
    size_t zcopy_bytes; /* CCL_IB_ZCOPY_BYTES: smallest zero-copy message (0: registered buffers only) */
};
static inline struct ccl__ib_knobs *ccl__ib_knobs(const struct ccl_comm *comm) {
    return (struct ccl__ib_knobs *)ccl__tknobs(comm, &ccl__transport_ib);
}

/* ---- private to transports/ib ---- */

/* An immediate's top two bits say what it is; the rest is a count (or,
 * in a failure notice, the status). A zero-copy immediate counts the
 * offers the receiver has pulled whole. */
#define CCL__IB_IMM_KIND(imm) ((imm) >> 30)
enum { CCL__IB_IMM_SLOT = 0, CCL__IB_IMM_PULLED = 1, CCL__IB_IMM_CREDIT = 2, CCL__IB_IMM_FAIL = 3 };
#define CCL__IB_COUNT_MASK 0x3fffffffu
#define CCL__IB_IMM(kind, n) (((uint32_t)(kind) << 30) | ((uint32_t)(n) & CCL__IB_COUNT_MASK))

/* What heads every slot: the engine's stamp, then the writer's credits
 * for the other direction (its `released` count when it wrote). */
struct ccl__ib_slot_head {
    struct ccl__slot_meta meta;
    uint64_t released;
};
#define CCL__IB_HDR_BYTES sizeof(struct ccl__ib_slot_head)

/* A zero-copy offer: the payload of an offer slot, where the receiver
 * reads the message from. */
struct ccl__ib_zc_offer {
    uint64_t addr;
    uint64_t bytes;
    uint32_t rkey;
    uint32_t pad;
};
/* Writes up to this size (a slot's head and a small payload) travel inside
 * the request (IBV_SEND_INLINE): the adapter need not fetch them from
 * registered memory, one step less on the small-message path. */
#define CCL__IB_INLINE_BYTES 256u

/* A pull is cut in reads of CCL_IB_PULL_BYTES, 256 KiB unless set, at
 * most CCL__IB_PULL_DEPTH in flight. The send queue processes its
 * requests in order, so slots and credits for other calls get through
 * between the pieces; and at a 1 KiB MTU a read of 1 MiB (1024 packets)
 * is eight times the 128 unacknowledged packets soft-RoCE lets a queue
 * pair have outstanding: send/recv of 4 MiB took 153 ms pulled in 1 MiB
 * pieces, 78 ms in 256 KiB ones (bench/NOTES.md). At a 4 KiB MTU, pieces of
 * 256 packets (1 MiB) made send/recv of 8 MiB faster but of 1 and 4 MiB
 * slower, so the size stays in bytes. The peer's queue pair must answer
 * this many reads at once (max_dest_rd_atomic); a device that allows
 * fewer gets fewer. */
#define CCL__IB_PULL_DEPTH 4u
/* An offered buffer stays registered this long after its last use: a
 * duplicate of the receiver's last read request (sent when its
 * retransmission timer, 67 ms, fired before a late response came) may
 * still be on the wire after the pull completed, and met by a
 * deregistered region it would put both queue pairs in the error state.
 * A few retry periods, with room for a loaded host. */
#define CCL__IB_REG_LINGER_S 2.0

/* What each rank publishes in its bootstrap blob. */
#define CCL__IB_BLOB_MAGIC 0x56424925u /* "%IBV" */
struct ccl__ib_blob {
    uint32_t magic;
    uint8_t port;
    uint8_t link_layer;
    uint16_t lid;
    uint8_t gid[16];
    char dev[32];
    uint32_t lanes; /* slot lanes of its connections (ccl__ib_lanes) */
};

/* Slot writes may be spread over several queue pairs per direction,
 * `lanes` of them (CCL_IB_QPS): slot n goes on lane n mod lanes, lane 0
 * being the asking queue pair, which alone carries credits, reads and
 * notices. An adapter works a queue pair's requests one after another
 * and holds it while its window of unacknowledged packets is full (128
 * on soft-RoCE, 64 handed to the link at once): several queue pairs keep
 * more of a large transfer moving, as NCCL's
 * NCCL_IB_QPS_PER_CONNECTION does. Lanes complete out of order with
 * each other, in order within one; the receiver takes slots in slot
 * order (a slot that lands early waits, flagged in `landed`), and the
 * sender reuses its copy of a slot only once its lane has completed the
 * write that last carried it. */
#define CCL__IB_MAX_LANES 8
/* CCL_IB_QPS, lowered to divide the slots, so that each slot keeps one
 * lane. Every rank publishes it; set-up fails on all of them when two
 * differ. */
static inline unsigned ccl__ib_lanes(const struct ccl_comm *comm) {
    unsigned lanes = (unsigned)ccl__ib_knobs(comm)->qps;
    while (lanes > 1 && comm->params.slots % (int)lanes) lanes--;
    return lanes;
}

/* What two ranks trade over the pair channel for their queue pairs. */
#define CCL__IB_PAIR_TAG 0x49425150u /* "IBQP" */
struct ccl__ib_qp_info {
    uint32_t qpn, psn;   /* the queue pair this rank asks on (lane 0) */
    uint32_t rqpn, rpsn; /* the one it answers on (lane 0) */
    uint32_t rd_depth;   /* reads its rqp answers at once */
    uint32_t lane_qpn[CCL__IB_MAX_LANES], lane_psn[CCL__IB_MAX_LANES]; /* lanes 1..: our slots to the peer */
    uint32_t lane_rqpn[CCL__IB_MAX_LANES], lane_rpsn[CCL__IB_MAX_LANES]; /* the peer's slots to us */
    uint16_t lid;
    uint8_t port, mtu;
    uint8_t gid[16];
    uint64_t fifo_addr; /* the receive FIFO the peer writes into */
    uint32_t fifo_rkey;
    uint32_t nslots;
    uint64_t stride, slot_bytes;
};

/* Pairs linked on first use (CCL_CONNECT=lazy, ib_link.c) trade the same
 * record under a tag of their own, then a word saying their receives are
 * posted: only then may the other side write. */
#define CCL__IB_LINK_TAG 0x49424c4bu  /* "IBLK" */
#define CCL__IB_READY_TAG 0x49425244u /* "IBRD" */
/* Where a connection stands: linked (set-up's pairs, and first-use ones
 * once linked), or a stage of linking on first use. */
enum { CCL__IB_LINKED = 0, CCL__IB_LINK_IDLE, CCL__IB_LINK_SENT, CCL__IB_LINK_READY_SENT };

/* wr_id: the peer in the high bits, what the request was in the low byte. */
enum { CCL__IB_WR_DATA = 1, CCL__IB_WR_CREDIT = 2, CCL__IB_WR_RECV = 3, CCL__IB_WR_PULL = 4, CCL__IB_WR_PULLED = 5,
       CCL__IB_WR_NOTICE = 6, CCL__IB_WR_DATA_FROM = 7 /* a slot whose payload is read from the caller's memory */ };
/* wr_id = length << 32 | peer << 8 | kind (a read's length counts on
 * completion; a slot write's or a receive's "length" is its lane). */
#define CCL__IB_WR_ID(kind, peer, len) (((uint64_t)(len) << 32) | ((uint64_t)(uint32_t)(peer) << 8) | (uint64_t)(kind))

struct ccl__ib_conn {
    struct ccl__conn base;
    int link;                    /* CCL__IB_LINKED, or how far linking on first use has got */
    double link_since;           /* ccl__now() when linking began */
    struct ccl__ib_qp_info mine; /* what this side sent while linking */
    struct ibv_qp *qp;  /* our requests to the peer */
    struct ibv_qp *rqp; /* the peer's requests to us: receives, and answers to its reads */
    /* Slot lanes: lane_qp[k] carries our slots n with n mod lanes == k,
     * lane_rqp[k] receives the peer's; lane 0 is qp and rqp. */
    unsigned lanes;
    struct ibv_qp *lane_qp[CCL__IB_MAX_LANES], *lane_rqp[CCL__IB_MAX_LANES];
    uint64_t lane_sent[CCL__IB_MAX_LANES], lane_done[CCL__IB_MAX_LANES]; /* slot writes posted, completed */
    uint64_t lane_arrived[CCL__IB_MAX_LANES]; /* the peer's slots landed on each lane */
    uint8_t *landed; /* [nslots]: slot n mod nslots landed, not yet taken in order */
    unsigned nslots;
    size_t stride; /* header + slot, rounded to a cache line */
    ccl_status_t failed;

    uint8_t *send_fifo; /* our copies of the slots we write, registered */
    struct ibv_mr *send_mr;
    uint8_t *recv_fifo; /* where the peer writes its slots, registered for remote writes */
    struct ibv_mr *recv_mr;
    uint64_t remote_addr;
    uint32_t remote_rkey;

    /* Counters since set-up; slot n lives at n mod nslots on both sides. */
    uint64_t sent;        /* slots posted to the peer */
    uint64_t send_done;   /* of those, completed here (our copy is free again) */
    uint64_t from_posted, from_done; /* of those, payloads read from the caller's memory: posted, completed */
    uint64_t credits;     /* slots the peer has released */
    uint64_t arrived;     /* slots the peer has written to us */
    uint64_t released;    /* of those, released by our caller */
    uint64_t credit_sent; /* `released` as last told to the peer */
    uint64_t credit_writes; /* credits returned in writes of their own (the rest rode in slots) */
    unsigned sq_busy, sq_depth; /* send requests posted and not completed */
    uint32_t max_inline;        /* the most bytes a write may carry inline (0: none) */
    unsigned rd_depth;          /* reads in flight at most (the peer's rqp answers that many) */
    unsigned rq_posted;

    /* Zero-copy, as sender: offers posted, and of those, pulled whole
     * (the receiver said so). One offer at a time. */
    uint64_t zc_offered, zc_pulled;
    /* As receiver: offers taken, and of those, the ones whose sender has
     * been told they were read whole (a notice each; a notice the full
     * send queue held back waits) and whose notice has completed
     * (teardown waits for them); the pull under way. */
    uint64_t zc_taken, zc_told, told_done;
    uint64_t pull_remote, pull_local;
    uint32_t pull_rkey, pull_lkey;
    size_t pull_bytes, pull_posted, pull_done;
};

/* Per-communicator state (ccl__tstate(comm, &ccl__transport_ib)). */
struct ccl__ib_state {
    int nranks;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    int cq_size;
    int software;       /* the device is software (sysfs's virtual tree): its work runs on our CPUs */
    unsigned cq_events; /* channel events taken and not yet acknowledged */
    int armed;          /* the CQ will raise an event on the next completion */
    int lazy_credits;   /* every peer of this rank is on ib: credits may wait (ib_setup.c) */
    int owing;          /* some connection has released slots it has not yet told its peer of */
    int dry_polls;      /* looks at the queue since the last that found something (ib.c) */
    int kick_fd;        /* eventfd: readable when completions came in while arming */
    int kicked;         /* kick_fd holds a count to read */
    uint8_t port, link_layer;
    enum ibv_mtu mtu;
    int gid_index;
    union ibv_gid gid;
    uint16_t lid;
    uint32_t max_qp_wr;
    uint32_t max_rd; /* reads a queue pair may have in flight, and answer, at once (the device's limits) */
    int notices_posted, notices_done; /* failure notices (atomic: posted by whichever thread fails) */
    char dev[32];
    double port_down_since; /* ccl__now() when an idle look first found the port not active; 0: active */
    struct ccl__ib_conn **conns; /* [nranks], owned here */
};

/* How long a link may leave this rank's writes unanswered, or its own port
 * down, before it counts as cut: CCL_LINK_TIMEOUT, or CCL_TIMEOUT when
 * that is 0. */
static inline double ccl__ib_link_budget_s(const struct ccl_comm *comm) {
    return comm->params.link_timeout_s > 0 ? comm->params.link_timeout_s : comm->params.timeout_s;
}

/* Device, protection domain and completion queue (ib_dev.c). */
ccl_status_t ccl__ib_local_init(struct ccl_comm *comm, uint8_t blob[CCL__TRANSPORT_BLOB_BYTES]);
ccl_status_t ccl__ib_open_cq(struct ccl_comm *comm, struct ccl__ib_state *s, int nconns);
void ccl__ib_close_dev(struct ccl__ib_state *s);

/* Queue pairs and their set-up over the pair channel (ib_setup.c). */
int ccl__ib_can_connect(const struct ccl__peer_info *a, const struct ccl__peer_info *b);
ccl_status_t ccl__ib_setup(struct ccl_comm *comm, const uint8_t *use);
ccl_status_t ccl__ib_connect(struct ccl_comm *comm, const uint8_t *use, struct ccl__conn **conns);
ccl_status_t ccl__ib_setup_done(struct ccl_comm *comm);
void ccl__ib_teardown(struct ccl_comm *comm);
void ccl__ib_poison(struct ccl_comm *comm, int status);
/* Queue pairs and FIFOs for c (set-up's, or the first use's), what this
 * side tells the peer of them, and the queue pairs brought to
 * ready-to-send against the peer's record (receives posted first). */
ccl_status_t ccl__ib_conn_build(struct ccl_comm *comm, struct ccl__ib_state *s, struct ccl__ib_conn *c);
void ccl__ib_qp_info_fill(const struct ccl__ib_state *s, const struct ccl__ib_conn *c, struct ccl__ib_qp_info *out);
ccl_status_t ccl__ib_qp_link(struct ccl_comm *comm, struct ccl__ib_state *s, struct ccl__ib_conn *c,
                             const struct ccl__ib_qp_info *mine, const struct ccl__ib_qp_info *peer, const char *when);

/* Linking a pair on its first use, from inside the waits of the call that
 * first needs it (ib_link.c). Nothing blocks on the peer: CCL_INPROGRESS
 * until both sides can take writes, then CCL_OK; *moved when a stage
 * passed. link_check: CCL_ERR_REMOTE (error set) when the peer is gone. */
ccl_status_t ccl__ib_link_advance(struct ccl__ib_conn *c, int *moved);
ccl_status_t ccl__ib_link_check(struct ccl__ib_conn *c);

/* Data path (ib.c): posts one receive request on c's lane. */
ccl_status_t ccl__ib_post_recv(struct ccl__ib_conn *c, unsigned lane);

/* Memory registration and zero-copy (ib_zc.c). */
ccl_status_t ccl__ib_reg(struct ccl_comm *comm, void *addr, size_t bytes, void **handle);
void ccl__ib_dereg(struct ccl_comm *comm, void *handle);
size_t ccl__ib_zc_min_bytes(const void *knobs);
ccl_status_t ccl__ib_zc_offer(struct ccl__conn *c, const struct ccl__slot_meta *m, const void *buf, size_t bytes,
                              void *reg);
ccl_status_t ccl__ib_zc_take(struct ccl__conn *c, void *buf, size_t bytes, void *reg);
ccl_status_t ccl__ib_zc_done(struct ccl__conn *c, int is_send);
/* Waits (boundedly) for the failure notices, and when `healthy` for the
 * slot writes, to leave before teardown destroys their queue pairs. */
void ccl__ib_flush(struct ccl__ib_state *s, int healthy);
/* Shared by ib.c and ib_zc.c. */
ccl_status_t ccl__ib_post_write(struct ccl__ib_conn *c, int kind, uint32_t imm, uint64_t slot, uint32_t bytes);
ccl_status_t ccl__ib_post_write_from(struct ccl__ib_conn *c, int kind, uint32_t imm, uint64_t slot, uint32_t bytes,
                                     const void *from, uint32_t from_bytes, const struct ibv_mr *from_mr);
ccl_status_t ccl__ib_progress_all(struct ccl__ib_conn *c, int *moved);
ccl_status_t ccl__ib_conn_fail(struct ccl__ib_conn *c, ccl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static inline struct ccl__ib_state *ccl__ib_state(struct ccl_comm *comm) {
    return *ccl__tstate(comm, &ccl__transport_ib);
}

#endif
