/*
 * The one wait routine every path uses (collective steps, point-to-point,
 * groups, flushes): poll, and between polls spin a little, then yield, then
 * sleep on what the connections say to wait on (a futex bell peers ring, a
 * socket). Every wait has a deadline (CCL_TIMEOUT seconds without
 * progress), notices local aborts and remote failures, and checks every
 * 100 ms that the peers it waits on are alive.
 */
#ifndef CCL_WAIT_H
#define CCL_WAIT_H

#include "core/comm.h"

struct ccl__conn;

/* One poll: CCL_OK when done, CCL_INPROGRESS to wait more (*moved set when
 * something advanced, which restarts the deadline), or a failure. */
typedef ccl_status_t (*ccl__poll_fn)(void *ctx, int *moved);

/* Polls until done or failed. conns[0 .. *nconns) are the connections the
 * wait depends on (progressed, slept on, checked for liveness); the poll
 * may change them between calls, NULL entries are skipped. `what` names
 * the operation in timeout messages. */
ccl_status_t ccl__wait(struct ccl_comm *comm, const char *what, struct ccl__conn *const *conns, const int *nconns,
                       ccl__poll_fn poll, void *ctx);

/* How a wait on work that rings no bell differs (a GPU's stream, a word a
 * stream or another rank's kernel leader stores). Zeroed fields keep the
 * communicator's own behaviour. */
struct ccl__wait_opts {
    double spin_s;  /* spin at least this long before yielding (a budget: a 64 MiB kernel takes ~0.1 ms) */
    double yield_s; /* then yield at least this long before sleeping */
    double nap_s;   /* the longest one sleep: nothing will ring the bell when this work ends */
    /* A failure of the communicator does not end the wait, only the work
     * or CCL_TIMEOUT does: a kernel or copy that still reads and writes
     * the caller's buffers must end before the call may return. */
    int through_failures;
    /* The wait runs outside the communicator's executor (at issue, in the
     * caller's thread, while the executor may be running): it progresses
     * no connection, learns nothing into the communicator, answers no
     * peer, and naps instead of sleeping on the communicator's bell. */
    int detached;
    /* The wait may sit through a peer's long copy (a single-copy or
     * zero-copy read of a whole buffer): it teaches the communicator no
     * longer yield (a rank that learnt to yield for milliseconds, its peer
     * put on its core by the scheduler, waited a whole time slice for the
     * peer's copy to end: 2 ranks, 1 MiB broadcasts took 1.5-5.6 ms where
     * they take 0.09). */
    int no_learn;
};
ccl_status_t ccl__wait_with(struct ccl_comm *comm, const char *what, struct ccl__conn *const *conns, const int *nconns,
                            ccl__poll_fn poll, void *ctx, const struct ccl__wait_opts *opts);

/* Records that c holds committed bytes a stream transport has not sent
 * yet. Every wait keeps such connections moving, whatever it waits on:
 * otherwise a rank that finished its sends and waits on a receive could
 * hold the very bytes its peers need to send theirs, and a cycle of such
 * ranks would never move again. */
void ccl__note_staged(struct ccl_comm *comm, struct ccl__conn *c);

/* The longest one sleep of a wait with left_s to go before its deadline:
 * 50 ms, or 1 ms while an adapter is working on this rank's requests (a
 * transport's in_flight). Soft-RoCE in the test VM moved a 16 MiB
 * zero-copy exchange 3-5x slower when both ranks slept until the
 * completion's event: after a 50 ms sleep the reads were still not done
 * (the emulated adapter's work stalls while the hypervisor halts the
 * idle vCPUs), while ranks that looked every millisecond, or spun, saw
 * them through at once (bench/NOTES.md). Such work is due within
 * moments, so looking often costs little; a rank with nothing in flight
 * still sleeps until something arrives. */
double ccl__wait_sleep_cap(double left_s, int in_flight);

/* How long waits yield before sleeping, after an idle stretch of
 * stretch_s that did or did not sleep; it stays within [base_s, max_s].
 * Waking a sleeping rank can take far longer than the yield (measured on a
 * 2-vCPU VM: 300-500 us, the hypervisor halts an idle vCPU). Then the peer
 * it answers falls asleep too, and every later handoff costs a sleep and a
 * slow wake: 2-rank 8-byte all-reduces ran at 570 us a call for a whole
 * run (8 runs in 30) where they take 1 us. So a stretch that slept and
 * ended within max_s doubles the yield, at least to twice its length (that
 * wait would have ended awake); one that slept longer halves it (the peer
 * was really away: sleeping was right); one that ended awake gives back a
 * little, so that one slow wake does not keep a rank yielding for long. */
double ccl__wait_next_yield(double yield_s, double base_s, double max_s, int slept, double stretch_s);

/* This communicator's failure, or a peer's that reached it (a failing
 * rank writes its rank and status into its peers' wake words): the
 * communicator fails naming that rank, in an error that starts with
 * `what`. */
ccl_status_t ccl__check_failures(struct ccl_comm *comm, const char *what);

/* Rings every peer's bell (the transport's wake): after publishing
 * something peers may wait on outside any FIFO (a direct-path window). */
void ccl__wake_peers(struct ccl_comm *comm);

#endif
