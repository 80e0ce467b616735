/*
 * Executing operations in issue order. Each communicator has a queue and a
 * progress thread (started on first use) that runs queued operations while
 * the caller computes. A blocking call on an idle communicator runs inline
 * in the caller's thread instead, saving a thread hand-off, which keeps the
 * small-message latency of blocking calls low. Only one thread at a time
 * runs a communicator's operations, so the data path needs no locks.
 */
#ifndef CCL_EXEC_H
#define CCL_EXEC_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/comm.h"

struct ccl__op;
typedef ccl_status_t (*ccl__op_run_fn)(struct ccl__op *op);

/* Completion state of one operation as the user sees it. */
struct ccl_request {
    _Atomic int done;
    ccl_status_t status;
    struct ccl__exec *exec;
    _Atomic uint32_t magic; /* CCL__REQUEST_LIVE: handed to the user (ccl__request_new), not yet waited;
                             * CCL__REQUEST_CLAIMED: a thread is waiting on it, and retires it next */
};
#define CCL__REQUEST_LIVE 0x52455131u
#define CCL__REQUEST_CLAIMED 0x52455132u

/* An operation; the layer above defines what it carries (it embeds this as
 * the first member and provides run and release). */
struct ccl__op {
    struct ccl__op *next;
    struct ccl_comm *comm;
    ccl__op_run_fn run;
    void (*release)(struct ccl__op *op);
    struct ccl_request **reqs; /* completed together when the op finishes */
    int nreqs;
    int even_if_failed;        /* run on a failed communicator too (else it completes with the failure) */
};

ccl_status_t ccl__exec_create(struct ccl_comm *comm);
/* Runs what is queued, stops the thread, frees. */
void ccl__exec_destroy(struct ccl_comm *comm);

void ccl__request_init(struct ccl_request *req, struct ccl_comm *comm);
/* A request for the user (heap), and its end. A retired request is not
 * given back to malloc: it waits behind the next CCL__REQUESTS_KEPT
 * retirements before it is reused, so a second ccl_wait or ccl_test on it
 * finds it not live (CCL_ERR_INVALID_USAGE) instead of freed memory. */
#define CCL__REQUESTS_KEPT 256
struct ccl_request *ccl__request_new(struct ccl_comm *comm);
void ccl__request_retire(struct ccl_request *req);
int ccl__request_live(const struct ccl_request *req);
/* Makes the calling thread the request's one waiter: 1, or 0 when it is
 * not live (waited already, or another thread is waiting on it). */
int ccl__request_claim(struct ccl_request *req);
/* Queue op (its reqs complete when it finishes). With inline_ok, an idle
 * communicator runs it right here. Takes ownership of op. */
void ccl__exec_submit(struct ccl_comm *comm, struct ccl__op *op, int inline_ok);
/* The allocation-free path of a blocking call: if the communicator is idle
 * (nothing queued or running), claim it and return 1; the caller runs its
 * operation and then calls ccl__exec_inline_done. Returns 0 otherwise. */
int ccl__exec_try_inline(struct ccl_comm *comm);
void ccl__exec_inline_done(struct ccl_comm *comm);
/* Blocks until req is done; returns its status. Does not free it. */
ccl_status_t ccl__request_wait(struct ccl_request *req);
/* Runs fn(comm, arg) on the communicator's executor, after everything
 * issued before and before anything issued after; waits for it. */
void ccl__exec_call(struct ccl_comm *comm, void (*fn)(struct ccl_comm *comm, void *arg), void *arg);
/* Wake the progress thread and any waiter (after an abort). */
void ccl__exec_kick(struct ccl_comm *comm);

#endif
