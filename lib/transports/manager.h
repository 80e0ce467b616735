/*
 * The connection manager: the one place that runs every registered
 * transport through its life cycle (local_init, setup, connect,
 * setup_done, then poison and teardown), builds this rank's bootstrap
 * record (its peer info plus every transport's blob) and moves the
 * communicator's wake words into memory peers can reach. Callers never
 * name a transport.
 */
#ifndef CCL_TRANSPORT_MANAGER_H
#define CCL_TRANSPORT_MANAGER_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/peer.h"

/* The per-transport tables, before anything else: comm->tstate, and
 * comm->tknobs with every transport's knobs read from the environment. */
ccl_status_t ccl__conns_alloc(struct ccl_comm *comm);
/* Frees both (after every transport's teardown); what alloc left
 * half-made too. */
void ccl__conns_free(struct ccl_comm *comm);

/* Bytes of one rank's bootstrap record: the same on every rank. */
size_t ccl__conns_record_bytes(void);

/* Runs every transport's local_init (a failure only leaves that transport
 * out of self->transport_mask), then trades records with every rank
 * through the bootstrap root: fills comm->peers and comm->blobs. */
ccl_status_t ccl__conns_join(struct ccl_comm *comm, int root_fd, struct ccl__peer_info *self);

/* use[t][p] != 0: transport t (registry index) serves peer p. setup,
 * connect and setup_done for every transport that initialised here, each
 * phase closed by a bootstrap round so every rank learns whether every
 * other got through it; fills comm->conns. `planned` is the status of the
 * plan that made use[]: a failure there skips every phase but still takes
 * part in the rounds, so every rank fails together. */
ccl_status_t ccl__conns_setup(struct ccl_comm *comm, int root_fd, ccl_status_t planned, uint8_t *const *use);

/* After setup: the first transport (registry order) that offers shared
 * wake words gets the communicator's, with anything already recorded in
 * the private words. ccl__conns_private_wake moves back, keeping any
 * failure peers reported; before teardown. Both are part of
 * ccl__conns_setup and ccl__conns_teardown. */
void ccl__conns_share_wake(struct ccl_comm *comm);
void ccl__conns_private_wake(struct ccl_comm *comm);

/* How many peers transport t (registry index) serves. */
int ccl__conns_served(const struct ccl_comm *comm, int t);

/* "shm to 3 peers, tcp to 0 peers": for the INFO line. */
void ccl__conns_summary(const struct ccl_comm *comm, char *buf, size_t n);

/* This rank failed: every transport tells its peers. */
void ccl__conns_poison(struct ccl_comm *comm, ccl_status_t status);

/* Back to private wake words, then every transport's teardown; safe after
 * a failed or partial set-up. */
void ccl__conns_teardown(struct ccl_comm *comm);

#endif
