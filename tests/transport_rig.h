/*
 * The transport suites' rig (the conformance rig a new transport's suite
 * starts from): ranks as forked processes with hand-built communicators,
 * the bootstrap's part played by a socket pair between every two ranks,
 * and the transport's phases driven the way init drives them. A rank never
 * calls Check: it counts failures (EXPECT on its tally) and exits with the
 * count; the parent asserts how every rank ended.
 */
#ifndef CCL_TEST_TRANSPORT_RIG_H
#define CCL_TEST_TRANSPORT_RIG_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/peer.h"
#include "harness.h"
#include "transports/transport.h"

#define RIG_MAX_RANKS 4

struct rig_rank {
    int rank, nranks;
    int chan[RIG_MAX_RANKS]; /* to each other rank (-1 for itself) */
    const void *arg;
    struct harness_tally t;
};

typedef void (*rig_body_fn)(struct rig_rank *c);

enum rig_reap { RIG_REAP_IN_RANK_ORDER, RIG_REAP_ANY_ORDER };

struct rig_run {
    int nranks;
    const char *tag;                 /* names the run in failures */
    rig_body_fn body[RIG_MAX_RANKS]; /* rank r runs body[r], or body[0] where that is NULL */
    const void *arg;
    unsigned killed_mask;  /* ranks that are to die of SIGKILL, not exit 0 */
    enum rig_reap reap;    /* in rank order, or as they end (a rank waits for one that exits later) */
    double deadline_s;     /* every rank killed past it, and the run fails (0: 90 s) */
    int ignore_sigpipe;    /* 1: SIGPIPE ignored in the ranks (else its default: it kills, and the test sees it) */
};

/* Forks the ranks, waits for them (killing all at the deadline) and asserts
 * that each exited 0, or died of SIGKILL where killed_mask says so. */
void rig_run(const struct rig_run *run);

/* The rig's own channel (never SIGPIPE): a peer that is gone ends this
 * rank with its failures. */
void rig_send(struct rig_rank *c, int peer, const void *buf, size_t n);
void rig_recv(struct rig_rank *c, int peer, void *buf, size_t n);
void rig_barrier(struct rig_rank *c);

/* A communicator as init leaves it before the transports' set-up: every
 * table allocated, every transport's knobs read (the caller may change
 * them, ccl__shm_knobs and friends), no bootstrap root. */
struct ccl_comm *rig_comm_new(const struct rig_rank *c, uint64_t comm_id, int slots, double timeout_s,
                              uint8_t secret_byte);
/* Frees what rig_comm_new made (the transports' teardown is the caller's). */
void rig_comm_free(struct ccl_comm *comm);

/* The bootstrap's job for transport t: mine (with t's bit in its mask) and
 * t's blob (local_init wrote it) to every rank, theirs into comm->peers
 * and comm->blobs. */
void rig_exchange(struct rig_rank *c, struct ccl_comm *comm, const struct ccl__transport *t,
                  const struct ccl__peer_info *mine);

#endif
