/*
 * Primitives: pipelined steps on connections, the vocabulary algorithms are
 * written in. A ring step moves one slice (at most slice_elems elements)
 * from the previous rank and/or to the next one, reducing on the way; it
 * waits (spin, yield, sleep, with a deadline) until the slots it needs are
 * there. Slices stream through each connection's FIFO of slots, so while
 * one slice is on the wire the next is being reduced.
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
};
const char *ccl__op_kind_name(int kind);

/* What a collective call is; stamped on each slot and checked on receipt. */
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

struct ccl__prims {
    struct ccl_comm *comm;
    struct ccl__conn *conns[2]; /* [0] receive from (prev), [1] send to (next); either may be NULL */
    struct ccl__coll_id id;
    size_t esize;
    ccl__reduce_fn reduce;
    size_t slice_elems;         /* elements per slot on both connections */
    char what[48];              /* "all_reduce #12", for messages */
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

/* prev/next are ranks (-1 for none). */
void ccl__prims_init(struct ccl__prims *p, struct ccl_comm *comm, int prev, int next, const struct ccl__coll_id *id);

/* The steps; n <= p->slice_elems. `src`, `dst` are user or scratch memory. */
ccl_status_t ccl__prims_send(struct ccl__prims *p, const void *src, size_t n);
ccl_status_t ccl__prims_recv(struct ccl__prims *p, void *dst, size_t n);
/* next <- prev OP src */
ccl_status_t ccl__prims_recv_reduce_send(struct ccl__prims *p, const void *src, size_t n);
/* dst <- prev OP src, then dst /= div when div > 1 (finishing CCL_AVG) */
ccl_status_t ccl__prims_recv_reduce_copy(struct ccl__prims *p, const void *src, void *dst, size_t n, int div);
/* dst <- prev OP src (then /= div), next <- dst */
ccl_status_t ccl__prims_recv_reduce_copy_send(struct ccl__prims *p, const void *src, void *dst, size_t n, int div);
/* dst <- prev, next <- prev */
ccl_status_t ccl__prims_recv_copy_send(struct ccl__prims *p, void *dst, size_t n);
/* dst <- src (unless the same), next <- src */
ccl_status_t ccl__prims_copy_send(struct ccl__prims *p, const void *src, void *dst, size_t n);
/* Wait until everything sent has left this process (stream transports). */
ccl_status_t ccl__prims_flush(struct ccl__prims *p);

/* Point-to-point transfers that progress together (groups, all-to-all). */
struct ccl__p2p_xfer {
    int peer;
    int is_send;
    void *buf;            /* const for sends */
    size_t count;
    ccl_dtype_t dtype;
    /* filled by the engine */
    size_t done_bytes;
    uint32_t seq;
    int matched;          /* for self transfers */
};
/* Runs every transfer to completion. Transfers to one peer in one
 * direction complete in the order given; nothing else is ordered, so a
 * group of sends and receives in any order cannot deadlock. */
ccl_status_t ccl__p2p_run(struct ccl_comm *comm, struct ccl__p2p_xfer *x, int n, int kind, const char *what);

#endif
