/*
 * Revoke, and which ranks are lost (docs/elastic.md).
 *
 * A revoke must reach every rank with its own status, whatever the
 * transports: shm's wake words carry a status, but a TCP peer only sees
 * its socket close. So the revoking rank first says so to every peer on
 * the pair channel, then fails its communicator, whose poison shuts the
 * links; a peer that then sees a link close finds the notice waiting
 * (core/error.c) and fails with CCL_ERR_REVOKED, not as if a peer died.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "coll/coll.h"
#include "core/boot_pair.h"
#include "core/exec.h"
#include "core/log.h"

/* How long the notice may take to reach one peer: a dead peer refuses at
 * once; only a cut link costs this. */
#define NOTICE_S 0.5

void ccl__comm_revoke(ccl_comm_t *comm, const uint8_t *tell, const char *why) {
    if (ccl__comm_health(comm) == CCL_OK) {
        int32_t me = comm->rank;
        for (int p = 0; p < comm->nranks; p++)
            if (p != comm->rank && comm->pairs && (!tell || tell[p]))
                (void)ccl__pair_send_within(comm, p, CCL__PAIR_TAG_REVOKE, &me, sizeof me, NOTICE_S);
        ccl__set_error(comm, CCL_ERR_REVOKED, "%s", why);
    }
    ccl__comm_fail(comm, CCL_ERR_REVOKED);
    ccl__comm_wake_waiters(comm);
}

void ccl__comm_wake_waiters(ccl_comm_t *comm) {
    ccl__wake_ring(comm->wake);
    uint64_t one = 1;
    if (comm->event_fd >= 0 && write(comm->event_fd, &one, sizeof(one)) < 0) { /* already signalled */
    }
    ccl__exec_kick(comm);
}

CCL_API ccl_status_t ccl_comm_revoke(ccl_comm_t *comm) {
    CCL_CHECK(ccl__check_comm(comm, "comm_revoke"));
    char why[96];
    snprintf(why, sizeof why, "rank %d revoked the communicator (ccl_comm_revoke): shrink it or destroy it",
             comm->rank);
    ccl__comm_revoke(comm, NULL, why);
    CCL_INFO(CCL__SUB_INIT, comm->rank, "comm %016llx revoked", (unsigned long long)comm->comm_id);
    return CCL_OK;
}

CCL_API ccl_status_t ccl_comm_failed_ranks(ccl_comm_t *comm, int *ranks, int max, int *nfailed) {
    CCL_CHECK(ccl__check_comm(comm, "comm_failed_ranks"));
    if (!nfailed || max < 0 || (max > 0 && !ranks))
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "comm_failed_ranks: %s",
                              !nfailed ? "nfailed is NULL" : max < 0 ? "max is negative" : "ranks is NULL with max > 0");
    int n = 0;
    for (int p = 0; p < comm->nranks; p++) {
        int lost = comm->left_out ? comm->left_out[p] : p != comm->rank && !ccl__pair_alive(comm, p, NOTICE_S);
        if (!lost) continue;
        if (n < max) ranks[n] = p;
        n++;
    }
    *nfailed = n;
    return CCL_OK;
}
