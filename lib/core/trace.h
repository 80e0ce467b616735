/*
 * The trace sink: prims and algorithms append one event per chunk movement
 * and per reduction to a per-rank buffer (no I/O on the data path). With
 * tracing off, comm->trace is NULL and recording costs one predictable
 * branch. Writing the merged file is the API layer's job (coll/trace_out.c).
 */
#ifndef CCL_TRACE_H
#define CCL_TRACE_H

#include <stddef.h>
#include <stdint.h>

enum ccl__trace_kind { CCL__TR_SEND = 0, CCL__TR_RECV = 1, CCL__TR_REDUCE = 2 };
enum ccl__trace_algo {
    CCL__TR_RING = 0,
    CCL__TR_CHAIN = 1,
    CCL__TR_DIRECT = 2,
    CCL__TR_TREE = 3,
    CCL__TR_RD = 4,
    CCL__TR_RHD = 5,
    CCL__TR_BRUCK = 6,
    CCL__TR_PAIRWISE = 7,
    CCL__TR_HIER = 8
};
enum ccl__trace_phase {
    CCL__TR_REDUCE_SCATTER = 0,
    CCL__TR_ALL_GATHER = 1,
    CCL__TR_BROADCAST = 2,
    CCL__TR_REDUCE_PHASE = 3,
    CCL__TR_P2P = 4
};
#define CCL__TR_LOCAL 255 /* transport field of a reduction */

struct ccl__trace_event {
    double t0, t1;     /* ccl__now() seconds, this rank's clock */
    uint8_t kind;      /* enum ccl__trace_kind */
    uint8_t coll;      /* enum ccl__op_kind */
    uint8_t algo;      /* enum ccl__trace_algo */
    uint8_t phase;     /* enum ccl__trace_phase */
    uint8_t transport; /* transport registry index, or CCL__TR_LOCAL */
    uint8_t pad[3];
    int32_t peer;
    uint32_t seq;
    int32_t step;
    int32_t chunk;
    uint32_t round;
    uint32_t pad2;
    uint64_t offset;   /* bytes into the collective's buffer */
    uint64_t bytes;
    uint64_t link_seq; /* n-th traced slot on this (sender, receiver) direction */
};

struct ccl__trace {
    struct ccl__trace_event *ev;
    size_t n, cap, max, dropped;
    uint64_t *sent, *received; /* [nranks] traced slots per peer, for link_seq */
};

struct ccl__trace *ccl__trace_create(int nranks, size_t max_events);
void ccl__trace_destroy(struct ccl__trace *t);
/* Appends; counts a drop when full (never blocks or fails the operation). */
void ccl__trace_add(struct ccl__trace *t, const struct ccl__trace_event *e);

#endif
