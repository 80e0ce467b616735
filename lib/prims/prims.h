/*
 * The data engine: every algorithm is a sequence of steps, and a step is
 * one primitive: receive a chunk from a set of peers, reduce it with local
 * data and/or copy it, send the result to a set of peers. Rings, trees,
 * recursive doubling, the direct and hierarchical algorithms and
 * point-to-point are all written in it.
 *
 * A step waits (spin, yield, sleep, with a deadline) until every slot it
 * needs is there, hands its copies and reductions to the compute engine of
 * its memory kinds (prims/compute.h), and commits its sends and releases
 * its receives only once that work has completed. Chunks stream through
 * each connection's FIFO of slots, so while one chunk is on the wire the
 * next is being reduced: that is the pipeline. Chunk size comes from the
 * per-call plan, not from communicator state.
 *
 * Every slot carries the operation's identity (kind, sequence number,
 * count, dtype, op, root); a receiver that sees another operation's slot
 * fails the communicator with a message naming both, instead of mixing data.
 */
#ifndef CCL_PRIMS_H
#define CCL_PRIMS_H

#include <stddef.h>
#include <stdint.h>

#include "ccl.h"
#include "core/comm.h"
#include "core/trace.h"
#include "prims/compute.h"
#include "reduce/reduce.h"
#include "transports/transport.h"

enum ccl__op_kind {
    CCL__K_ALL_REDUCE = 1,
    CCL__K_REDUCE_SCATTER,
    CCL__K_ALL_GATHER,
    CCL__K_BROADCAST,
    CCL__K_REDUCE,
    CCL__K_ALL_TO_ALL,
    CCL__K_BARRIER,
    CCL__K_P2P,
    /* Collectives made of point-to-point transfers (coll/exchange.c):
     * their transfers carry the call's identity, not a pair's number. */
    CCL__K_GATHER,
    CCL__K_SCATTER,
    CCL__K_ALL_TO_ALL_V,
};
#define CCL__NUM_OP_KINDS 12
static inline int ccl__kind_is_exchange(int kind) { return kind >= CCL__K_GATHER && kind <= CCL__K_ALL_TO_ALL_V; }
const char *ccl__op_kind_name(int kind);

/* What a call is; stamped on each slot and checked on receipt. */
struct ccl__coll_id {
    int kind;
    uint32_t seq;
    uint64_t count;
    ccl_dtype_t dtype;
    ccl_op_t op;
    int root;
};

/* Where the next step sits in its algorithm, for the trace: the receive
 * half moves data sent in recv_step, the send half data of send_step. */
struct ccl__prims_trace {
    uint8_t algo, recv_phase, send_phase;
    int recv_step, send_step;
    int chunk;
    uint32_t round;
    uint64_t offset;
};

/* One call's engine context. */
struct ccl__prims {
    struct ccl_comm *comm;
    struct ccl__coll_id id;
    size_t esize;
    ccl__reduce_fn reduce;
    size_t chunk_elems;         /* elements per step at most (the plan's chunk) */
    int mem;                    /* memory kind of the call's buffers */
    int caller_mem;             /* host buffers, and a connection that can use them in place of slots */
    const struct ccl__compute *compute;
    /* "all_reduce #12", for messages: formatted from name and name_seq
     * only when a message or a wait asks (ccl__prims_what), since every
     * call names its context and most never say the name. */
    const char *name;
    long name_seq;
    char what[48];
    int what_ready;
    int trace_kind;             /* the collective the trace files it under (id.kind unless told) */
    uint32_t trace_seq;         /* and its call number there (id.seq unless told) */
    struct ccl__prims_trace tr; /* meaningful only while tracing */
};

/* Tell the trace where the next step is; one branch when tracing is off. */
static inline void ccl__prims_at(struct ccl__prims *p, int algo, int recv_phase, int recv_step, int send_phase,
                                 int send_step, int chunk, uint32_t round, uint64_t offset) {
    if (__builtin_expect(p->comm->trace != NULL, 0))
        p->tr = (struct ccl__prims_trace){.algo = (uint8_t)algo, .recv_phase = (uint8_t)recv_phase,
                                          .send_phase = (uint8_t)send_phase, .recv_step = recv_step,
                                          .send_step = send_step, .chunk = chunk, .round = round, .offset = offset};
}

/* Names the context "NAME #SEQ", or NAME alone when seq < 0 (cut to
 * fit); ccl__prims_what returns the name, formatting it the first time. */
static inline void ccl__prims_name(struct ccl__prims *p, const char *name, long seq) {
    p->name = name;
    p->name_seq = seq;
    p->what_ready = 0;
}
const char *ccl__prims_what_format(struct ccl__prims *p);
static inline const char *ccl__prims_what(const struct ccl__prims *p) {
    /* The cache is the context's own, written by the thread that runs it. */
    return p->what_ready ? p->what : ccl__prims_what_format((struct ccl__prims *)p);
}
/* chunk_bytes: the plan's chunk, never more than a slot of any link the
 * call uses and the same on every rank (every rank must cut alike). */
ccl_status_t ccl__prims_init(struct ccl__prims *p, struct ccl_comm *comm, const struct ccl__coll_id *id,
                             size_t chunk_bytes, int mem);

/* The identity a slot of `bytes` carries for this call, and the check of
 * one that came from `peer` (a mismatch fails the communicator, naming
 * both operations). Paths that move data without slots (the direct
 * algorithm's windows) publish and check the same identity. */
struct ccl__slot_meta ccl__prims_stamp(const struct ccl__prims *p, size_t bytes);
/* Records one trace event of `kind` (enum ccl__trace_kind) with peer,
 * under the labels ccl__prims_at set: for paths that move data without
 * steps (the direct algorithm's window reads). Tracing must be on. */
void ccl__prims_trace(struct ccl__prims *p, int kind, int peer, double t0, double t1, size_t bytes);
ccl_status_t ccl__prims_check_meta(struct ccl__prims *p, int peer, const struct ccl__slot_meta *m, size_t bytes);

#define CCL__STEP_MAX_PEERS 16

/* One step. The result is
 *   nrecv == 0:        src
 *   copy (!reduce):    what recv[0] sent
 *   reduce:            src OP recv[0] OP recv[1] ...  (src last with
 *                      src_last; without src, the received data alone)
 * in exactly that order, so ranks that compute the same element compute it
 * alike. The result lands in dst (when given) and goes to every send peer;
 * with div > 1 it is divided once reduced (finishing CCL_AVG). */
struct ccl__step {
    const void *src;
    void *dst;
    size_t n; /* elements, <= chunk_elems */
    int nrecv, nsend;
    int recv[CCL__STEP_MAX_PEERS];
    int send[CCL__STEP_MAX_PEERS];
    uint8_t reduce;
    uint8_t src_last;
    /* dst is output that nobody reads again soon (a large call's, past
     * the caches): a step that only copies writes it past them, and fills
     * its send slots from the copy's source, still in the caches. */
    uint8_t stream_dst;
    int div;
};

/* Runs one step to completion (blocking, with every wait's checks). */
ccl_status_t ccl__prims_step(struct ccl__prims *p, const struct ccl__step *s);

/* Shorthands for the common steps. */
ccl_status_t ccl__prims_send(struct ccl__prims *p, int to, const void *src, size_t n);
ccl_status_t ccl__prims_recv(struct ccl__prims *p, int from, void *dst, size_t n);
/* dst <- from OP src (src after the received data with src_last). */
ccl_status_t ccl__prims_recv_reduce(struct ccl__prims *p, int from, const void *src, void *dst, size_t n,
                                    int src_last);

/* A step in progress, for callers that drive several at once. */
struct ccl__step_state {
    int started; /* slots acquired and compute work submitted */
    struct ccl__conn *blocked; /* the connection whose slot the last try could not have */
    struct ccl__compute_ticket ticket;
    const void *in[CCL__STEP_MAX_PEERS];
    void *out[CCL__STEP_MAX_PEERS];
    const void *from; /* where the result already lies in the caller's memory, or NULL */
    unsigned direct;  /* bit i: send i commits straight from `from`, not from out[i] */
    void *from_reg[CCL__STEP_MAX_PEERS]; /* for send i, the registration of `from` its transport needs */
    double t0, ta, tc; /* trace times: entered, acquired, computed */
};
/* Moves the step as far as it can now: CCL_OK when it has completed,
 * CCL_INPROGRESS when it waits for slots or compute (*moved set when it
 * advanced), or a failure (the communicator has failed). */
ccl_status_t ccl__step_try(struct ccl__prims *p, const struct ccl__step *s, struct ccl__step_state *st, int *moved);
/* A step left unfinished because the communicator failed: withdraws what
 * it asked of its connections (a receive into the caller's memory). */
void ccl__step_abandon(struct ccl__prims *p, const struct ccl__step *s);

/* The collective about to run sends from (sendbuf) and into (recvbuf):
 * memory a transport that needs registrations may send from in place of
 * its slots; ccl__prims_call_bufs_end lets their registrations go once
 * the call is over. */
void ccl__prims_call_bufs(struct ccl_comm *comm, const void *sendbuf, size_t send_bytes, const void *recvbuf,
                          size_t recv_bytes);
void ccl__prims_call_bufs_end(struct ccl_comm *comm);
/* Whether the running call has buffers to register at all: point-to-point
 * calls have none, and their small messages skip the lookup below. */
static inline int ccl__prims_has_call_bufs(const struct ccl_comm *comm) {
    return comm->call_bufs[0].buf || comm->call_bufs[1].buf;
}
/* (prims/caller_mem.c, for the step) The handle of a registration with
 * t covering [from, from + bytes) of the call's buffers, made now when it
 * pays; NULL when the send goes through a slot. */
void *ccl__prims_caller_reg(struct ccl_comm *comm, const struct ccl__transport *t, const void *from, size_t bytes);
/* [from, from + bytes), in one of the call's buffers, went to an adapter
 * that reads it later. */
void ccl__prims_note_reading(struct ccl_comm *comm, const void *from, size_t bytes);
/* A connection whose adapter may still read caller memory that a step
 * writing [dst, dst + bytes) would change (the step waits on it), or NULL. */
struct ccl__conn *ccl__prims_still_reading(struct ccl_comm *comm, const void *dst, size_t bytes);

/* Waits until everything this rank sent has left the process (stream
 * transports): the end of every call. */
ccl_status_t ccl__prims_flush(struct ccl_comm *comm, const char *what);
/* The same for the connections to some peers, each listed once: those a
 * call sent to (every call ends flushed, so the others have nothing left). */
ccl_status_t ccl__prims_flush_peers(struct ccl_comm *comm, const int *peers, int n, const char *what);

/* Point-to-point transfers that progress together (groups, all-to-all). */
/* Where a transfer made for a collective shows in the trace: that call's
 * number, and the labels ccl__prims_at gives its first piece (round and
 * offset grow with each piece after it). */
struct ccl__p2p_label {
    uint32_t seq;
    struct ccl__prims_trace tr;
};

/* A receive's peer when it takes whichever peer sends first. */
#define CCL__ANY_SOURCE (-2)

struct ccl__p2p_xfer {
    int peer;             /* or CCL__ANY_SOURCE: the engine picks it, then writes it to *source */
    int *source;
    int is_send;
    void *buf;            /* const for sends */
    size_t count;
    ccl_dtype_t dtype;
    const struct ccl__p2p_label *label; /* NULL: a point-to-point call of its own */
    /* The collective the transfer belongs to (kind 0: none, a
     * point-to-point call). Its chunks are stamped with the call's kind,
     * number and root and the sender's count, so a receiver whose call
     * differs fails in that call, and a transfer of nothing still sends
     * its stamp (a receiver of 0 elements meets a sender of 4). */
    struct ccl__coll_id coll;
    /* filled by the engine */
    size_t bytes;         /* count times the size of dtype */
    size_t done_bytes;
    uint32_t seq;
    int matched;          /* for self transfers */
};
/* The smallest point-to-point message that moves zero-copy over t on this
 * communicator (0: none, but memory the application registered): the
 * transport's setting, or for a kernel-copy transport the planner's
 * verdict (comm->cma_p2p_bytes). */
size_t ccl__p2p_zc_min_bytes(const struct ccl_comm *comm, const struct ccl__transport *t);

/* Runs every transfer to completion. Transfers to one peer in one
 * direction complete in the order given; nothing else is ordered, so a
 * group of sends and receives in any order cannot deadlock. */
ccl_status_t ccl__p2p_run(struct ccl_comm *comm, struct ccl__p2p_xfer *x, int n, int kind, const char *what);

#endif
