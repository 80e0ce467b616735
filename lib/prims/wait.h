/*
 * Waiting on connections without burning the machine: spin a little, then yield, then
 * sleep on the communicator's bell (a futex peers ring) or poll() the
 * connections' descriptors. Every wait has a deadline (CCL_TIMEOUT seconds
 * without progress) and notices local aborts and remote failures.
 *
 *   struct ccl__waiter w; ccl__waiter_init(&w, comm, conns, nconns);
 *   for (;;) {
 *       ccl__waiter_arm(&w);
 *       st = try(); if (done) break;
 *       if (made progress) { ccl__waiter_progress(&w); continue; }
 *       if ((st = ccl__waiter_idle(&w)) < 0) return st;
 *   }
 */
#ifndef CCL_WAIT_H
#define CCL_WAIT_H

#include <stdint.h>

#include "core/comm.h"

struct ccl__conn;

struct ccl__waiter {
    struct ccl_comm *comm;
    struct ccl__conn *const *conns; /* the connections this wait depends on */
    int nconns;
    uint32_t armed_bell;
    unsigned idle_rounds;
    double idle_since;    /* ccl__now() of the last progress */
    double next_check;    /* next liveness check of the peers */
    const char *what;     /* for the timeout message */
};

void ccl__waiter_init(struct ccl__waiter *w, struct ccl_comm *comm, struct ccl__conn *const *conns, int nconns,
                      const char *what);
/* Read the bell before trying, so a ring between try and sleep is not lost. */
void ccl__waiter_arm(struct ccl__waiter *w);
void ccl__waiter_progress(struct ccl__waiter *w);
/* Nothing moved: wait a bit. CCL_OK to retry, or a failure status (the
 * communicator's error message is set). */
ccl_status_t ccl__waiter_idle(struct ccl__waiter *w);

#endif
