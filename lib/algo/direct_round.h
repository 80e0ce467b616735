/*
 * The direct path's rounds (direct.c), for the algorithms built on them:
 * the direct collectives over the shared windows, and the zero-copy path
 * over shared allocations (zero_copy.c). A round g: begin (nobody reads
 * the buffer of round g - 2 any more), post (this rank's input and the
 * call's identity are out), await the peers' posts, then the algorithm's
 * own steps, each published as a counter peers wait on, and end (this
 * rank's reads of peers' memory are over).
 */
#ifndef CCL_ALGO_DIRECT_ROUND_H
#define CCL_ALGO_DIRECT_ROUND_H

#include <stddef.h>
#include <stdint.h>

#include "algo/algo.h"
#include "prims/prims.h"

/* CCL__DIRECT_FREE: the peer no longer reads the buffer of round `want` + 2; it has
 * published done >= want, or posted >= want + 1 (a rank posts a round
 * only after it finished the one before, so in the steady state the line
 * it must read anyway answers, and `done` is never fetched). */
enum ccl__direct_flag { CCL__DIRECT_POSTED, CCL__DIRECT_REDUCED, CCL__DIRECT_DONE, CCL__DIRECT_FREE };

struct ccl__direct {
    struct ccl__prims p; /* the call's identity and compute engine */
    struct ccl_comm *comm;
    int n, r;
    size_t area; /* bytes of one in or out area */
    uint64_t g;  /* the current round */
    uint64_t g0; /* the round before the call's first (trace: the call's round number is g - 1 - g0) */
    /* Its rounds read whole buffers at a time (single-copy, zero-copy):
     * their waits teach the communicator's waits nothing (wait.h). */
    int long_reads;
};

ccl_status_t ccl__direct_init(struct ccl__direct *d, struct ccl_comm *comm, const struct ccl__coll_args *a);
/* Starts the next round, read by `reader` (-1: every peer). */
ccl_status_t ccl__direct_begin(struct ccl__direct *d, int reader);
/* This rank's data for the round (bytes of it, for the identity) is in
 * place: settle, publish the call's identity and posted = the round. */
ccl_status_t ccl__direct_post(struct ccl__direct *d, size_t bytes);
/* Waits for rank's (-1: every peer's) post of this round and checks that
 * it belongs to the same call. */
ccl_status_t ccl__direct_await_posted(struct ccl__direct *d, size_t bytes, int rank);
/* Publishes counter f = the current round and rings every peer. */
void ccl__direct_publish(const struct ccl__direct *d, enum ccl__direct_flag f);
/* Waits until rank's (-1: every peer's) counter f reaches want. */
ccl_status_t ccl__direct_wait(const struct ccl__direct *d, enum ccl__direct_flag f, uint64_t want, int rank);
/* Waits for the compute engine's work submitted so far. */
ccl_status_t ccl__direct_settle(const struct ccl__direct *d);
/* This rank's reads of peers' memory for the round are over. */
ccl_status_t ccl__direct_end(struct ccl__direct *d);
/* The trace of a round (CCL_TRACE): nothing is sent, so the owner of a
 * piece records a send to each rank that reads it (reader -1: every peer)
 * when it publishes, and the reader a receive (and a reduction: reduced)
 * when it reads; both in the same order, so a replay pairs them. A piece
 * is labelled by phase, step, chunk and its offset in the buffer.
 * trace_now: the time, when tracing (else 0, at no cost). */
void ccl__direct_trace_published(struct ccl__direct *d, int reader, int phase, int step, int chunk,
                                 size_t off_bytes, size_t bytes, double t0);
void ccl__direct_trace_read(struct ccl__direct *d, int owner, int reduced, int phase, int step, int chunk,
                            size_t off_bytes, size_t bytes, double t0);
double ccl__direct_trace_now(const struct ccl__direct *d);
/* How a round writes into the call's output (output_bytes in all): past
 * the caches once the output is larger than they hold
 * (comm->stream_bytes), where a normal store reads each line from memory
 * first; not where this rank has just read those lines in the call (an
 * all-reduce in place copied them into its window): there a normal store
 * hits the cache and a non-temporal one evicts the line (measured, 4
 * ranks in place, 4-64 MiB: 1.2-1.7x slower). */
typedef void (*ccl__copy_fn)(void *dst, const void *src, size_t bytes);
ccl__copy_fn ccl__direct_out_copy(const struct ccl__direct *d, size_t output_bytes, int output_was_read);
/* rank's control page (the start of its window). */
uint8_t *ccl__direct_ctrl_page(const struct ccl__direct *d, int rank);

#endif
