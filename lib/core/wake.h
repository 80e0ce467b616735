/*
 * How a rank that waits for data or space is woken, and how failures reach
 * it. The words live in this rank's shared-memory segment when the shm
 * transport is up (peers ring them across processes) and in the
 * communicator otherwise. Futex calls are never "private" for that reason.
 */
#ifndef CCL_WAKE_H
#define CCL_WAKE_H

#include <stdatomic.h>
#include <stdint.h>

struct ccl__wake_words {
    _Alignas(64) _Atomic uint32_t bell;     /* bumped by anyone who may unblock us */
    _Atomic uint32_t sleeping;              /* waiters that may sleep on bell (announced) */
    _Alignas(64) _Atomic int32_t fail_rank; /* rank + 1 of the rank that failed first, 0 none */
    _Atomic int32_t fail_status;            /* its status */
    _Atomic int32_t fail_by;                /* rank + 1 of the rank that told (it found fail_rank dead) */
    _Atomic int32_t fail_cause;             /* enum ccl__culprit_cause: what the teller found */
};

/* What a rank found wrong with the peer it blames. */
enum ccl__culprit_cause {
    CCL__CULPRIT_FAILED = 0,  /* it failed (or what happened to it is unknown) */
    CCL__CULPRIT_EXITED,      /* its process is gone */
    CCL__CULPRIT_UNREACHABLE, /* its host stopped answering: a cut link or a dead host */
};

/* After publishing what may unblock a (possibly remote) rank: bump its
 * bell and wake it, when one of its waiters announced that it may sleep.
 * A rank whose waiters all spin is not touched: the bell's line stays in
 * every core's cache, and a message costs no write across cores for it. */
void ccl__wake_ring(struct ccl__wake_words *w);
/* A waiter about to sleep on w's bell announces it, then looks at what it
 * waits for once more before it sleeps (prims/wait.c); withdraw when it
 * stops sleeping. */
void ccl__wake_announce(struct ccl__wake_words *w);
void ccl__wake_withdraw(struct ccl__wake_words *w);
/* Moves a rank's wake state from one place to another (its communicator's
 * words and its shm segment's): the bell and everything a failure wrote. */
void ccl__wake_copy(struct ccl__wake_words *to, struct ccl__wake_words *from);
/* Tell a (possibly remote) rank that `rank` failed with `status`, as rank
 * `by` found (by == rank: it failed itself), and what `by` found. */
void ccl__wake_fail(struct ccl__wake_words *w, int rank, int by, int status, enum ccl__culprit_cause cause);

#endif
