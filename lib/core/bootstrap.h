/*
 * Bootstrap: how ranks find each other. ccl_get_unique_id starts a root (a
 * listening socket and a thread) and packs its address and a random secret
 * into the unique id. Every rank connects to the root, proves it knows the
 * secret and sends its peer info; the root answers with everyone's. After
 * that the root serves barriers ("rounds") until set-up is finished, then
 * goes away: data connections are made peer to peer by the transports.
 */
#ifndef CCL_BOOTSTRAP_H
#define CCL_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "ccl.h"
#include "core/comm.h"
#include "core/socket.h"

#define CCL__UID_MAGIC 0x31444943u /* "CID1" */
/* uid.flags: no root runs for this id yet; rank 0 starts it at init, on
 * uid.root (ccl_unique_id_from_address). */
#define CCL__UID_ROOT_AT_RANK0 0x1u

/* The layout behind ccl_unique_id_t (fits in CCL_UNIQUE_ID_BYTES). */
struct ccl__unique_id {
    uint32_t magic;
    uint32_t flags;
    union ccl__sa root;                    /* where the root listens */
    uint8_t secret[CCL__SECRET_BYTES];     /* random, never printed */
    /* A grow's id (ccl_comm_grow): the growing communicator's own ranks
     * also hold this, which proves to the root that they are its ranks;
     * the newcomers' copy has zeros here. */
    uint8_t member_token[CCL__SECRET_BYTES];
};

/* How many set-up rounds the root serves after the peer-info exchange. */
#define CCL__BOOT_ROUNDS 4

/* Start a root listening on *addr (port 0 picks one) with this secret; it
 * serves one communicator and exits (on success, failure or timeout).
 * Every rank's record must be record_bytes long (this build's size): a
 * rank of another build is refused with a message that says so. */
ccl_status_t ccl__boot_root_start(union ccl__sa *addr, const uint8_t secret[CCL__SECRET_BYTES], double timeout_s,
                                  size_t record_bytes);

/* As ccl__boot_root_start, on a socket already listening (a launcher's,
 * inherited by rank 0), which the root takes and closes when it ends. */
ccl_status_t ccl__boot_root_start_on(int lfd, const uint8_t secret[CCL__SECRET_BYTES], double timeout_s,
                                     size_t record_bytes);

/* A grow's root: as ccl__boot_root_start, but a rank below members_below
 * (one of the growing communicator's ranks) is admitted only with
 * member_token as well; anyone else claiming such a rank is refused and
 * named in the log, and the others go on. */
ccl_status_t ccl__boot_root_start_members(union ccl__sa *addr, const uint8_t secret[CCL__SECRET_BYTES],
                                          const uint8_t member_token[CCL__SECRET_BYTES], int members_below,
                                          double timeout_s, size_t record_bytes);

/* Returns once the root this process runs for the id with this secret
 * has given every rank its last answer and ended, or at the deadline;
 * at once when this process runs no such root. A rank calls it before
 * it leaves init: its process may exit right after, and the root with
 * it, while other ranks still wait for their answer. */
void ccl__boot_root_wait(const uint8_t secret[CCL__SECRET_BYTES], double deadline);

/* Fill a unique id: secret from getrandom, root on this host. */
ccl_status_t ccl__boot_make_id(struct ccl__unique_id *uid, const char *ifname, double timeout_s,
                               size_t record_bytes);

/* A grow's id (members' copy: with the token), its root on this host
 * admitting ranks below members_below only with the token. */
ccl_status_t ccl__boot_make_grow_id(struct ccl__unique_id *uid, int members_below, const char *ifname,
                                    double timeout_s, size_t record_bytes);

/* Join, step 1: connect to the root, prove the secret and announce the
 * size of this rank's record (the same on every rank). Sets
 * comm->boot_addr to the numeric IP this host used to reach the root, the
 * address other ranks can reach this one at. */
ccl_status_t ccl__boot_connect(struct ccl_comm *comm, const struct ccl__unique_id *uid, size_t record_bytes,
                               int *root_fd);
/* Join, step 2: send this rank's record, receive everyone's (nranks
 * records, rank order) into *table (malloc'd here) and comm->comm_id. What
 * a record holds is the caller's business. The connection stays open for
 * rounds. */
ccl_status_t ccl__boot_exchange(struct ccl_comm *comm, int root_fd, const void *record, size_t record_bytes,
                                void **table);
/* A barrier through the root that also carries a status: every rank sends
 * its status; all get CCL_OK only if every rank sent CCL_OK, otherwise the
 * first failure (and which rank) comes back to all. */
ccl_status_t ccl__boot_round(struct ccl_comm *comm, int root_fd, ccl_status_t mine);
/* Which monotonic clock this process reads: its kernel's boot (the same in
 * every container of a machine, whatever CCL_HOST_ID says) and its time
 * namespace, which may shift that clock. Ranks with equal ids need no
 * estimated offset between their trace clocks. */
void ccl__boot_clock_id(char *dst, size_t n);
/* For set-up steps that wait on peers: CCL_ERR_REMOTE once the root has
 * answered the current round early, i.e. some rank failed or died (the
 * round that follows names it); CCL_OK otherwise. Never blocks. */
ccl_status_t ccl__boot_told(struct ccl_comm *comm);

#endif
