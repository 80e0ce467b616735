/*
 * The pair channel: bootstrap traffic between two ranks after set-up.
 * The root is gone once set-up ends, but transports still need to trade
 * things pair by pair (RDMA queue-pair numbers and memory keys, device
 * memory handles, a registered buffer's address), at init or in the
 * middle of a run. Every rank listens on one socket from init to destroy
 * and publishes its address in its bootstrap record; the first message to
 * a peer dials it and proves membership (secret, communicator id, ranks),
 * later ones reuse that connection, so messages between two ranks arrive
 * in the order they were sent. A receive takes the oldest message from
 * that peer with that tag; messages that nobody has asked for yet wait in
 * a queue. While a send or receive waits, it keeps reading every inbound
 * connection, so two ranks sending to each other at once cannot deadlock.
 * Strangers (wrong secret, garbage, silence, a second claim to a rank) are
 * logged and dropped without disturbing anyone.
 *
 * Thread-safe (one lock per communicator); for set-up traffic, not data.
 */
#ifndef CCL_BOOT_PAIR_H
#define CCL_BOOT_PAIR_H

#include <stddef.h>
#include <stdint.h>

#include "ccl.h"
#include "core/comm.h"
#include "core/socket.h"

/* The largest message; a bigger one is refused on both sides. */
#define CCL__PAIR_MAX_BYTES (1u << 20)

#define CCL__PAIR_MAGIC 0x52494150u /* "PAIR" */
#define CCL__PAIR_VERSION 1

/* First bytes on every connection: who is calling whom, and the proof.
 * Then messages: struct { uint32_t tag, bytes; } and the bytes. */
struct ccl__pair_hello {
    uint32_t magic;
    uint32_t version;
    uint8_t secret[CCL__SECRET_BYTES];
    uint64_t comm_id;
    int32_t from;
    int32_t to;
};

/* Listen on comm->boot_addr (an address peers reached the root from, so
 * they can reach us there too); *addr gets where. Before the record is
 * built; comm->pairs owns the socket from here to ccl__pair_close. */
ccl_status_t ccl__pair_listen(struct ccl_comm *comm, union ccl__sa *addr);

/* Send bytes (<= CCL__PAIR_MAX_BYTES) to peer under tag. Returns once the
 * bytes are on their way; CCL_ERR_REMOTE (error set, naming the peer) if
 * the peer is known to be gone, CCL_ERR_TIMEOUT after CCL_TIMEOUT. A peer
 * that died a moment ago may still take one send without complaint (TCP
 * learns of it from the reply): the next receive from it fails. */
ccl_status_t ccl__pair_send(struct ccl_comm *comm, int peer, uint32_t tag, const void *buf, size_t bytes);

/* ccl__pair_send, giving up on reaching the peer after `seconds` rather
 * than CCL_TIMEOUT (a link's budget: CCL_LINK_TIMEOUT). */
ccl_status_t ccl__pair_send_within(struct ccl_comm *comm, int peer, uint32_t tag, const void *buf, size_t bytes,
                                   double seconds);

/* Receive the oldest message from peer under tag; it must be exactly
 * bytes long (a different length is CCL_ERR_REMOTE: the two ranks
 * disagree). Waits at most CCL_TIMEOUT, and fails early when the peer
 * closed its side or the communicator failed. */
ccl_status_t ccl__pair_recv(struct ccl_comm *comm, int peer, uint32_t tag, void *buf, size_t bytes);

/* Send mine and receive the peer's under one tag: both sides call it. */
ccl_status_t ccl__pair_exchange(struct ccl_comm *comm, int peer, uint32_t tag, const void *mine, void *theirs,
                                size_t bytes);

/* Without blocking (and without waiting for the lock): takes the oldest
 * message under tag from any peer that is already here; 1 with *from and
 * buf filled, 0 if none (a message of the wrong size is dropped). For
 * answering questions from inside a wait. */
int ccl__pair_poll(struct ccl_comm *comm, uint32_t tag, int *from, void *buf, size_t bytes);

/* Without blocking (and without waiting for the lock): the oldest message
 * from peer under tag, if it is here. 1 with buf filled, 0 if not (yet),
 * CCL_ERR_REMOTE (error set) when its length is not `bytes`. For trades
 * made from inside a wait, which must never block on a peer. */
int ccl__pair_take(struct ccl_comm *comm, int peer, uint32_t tag, void *buf, size_t bytes);

/* What to poll() (POLLIN) while waiting for a message from peer: the
 * connection it dialled us on, else the listener it will dial; -1 when
 * that cannot be told now. */
int ccl__pair_wait_fd(struct ccl_comm *comm, int peer);

/* Without blocking (and without waiting for the lock): 1 when peer has
 * closed its side of the channel (its process exited, or it destroyed
 * its communicator), 0 otherwise or when that cannot be told now. For
 * transports whose own links do not show a dead peer (RDMA). */
int ccl__pair_gone(struct ccl_comm *comm, int peer);

/* From now on this channel's waits go on after the communicator failed
 * (they still end at their deadlines): a shrink agrees with the
 * survivors over it once the data path is gone. */
void ccl__pair_outlive_failure(struct ccl_comm *comm);

/* ccl__pair_recv with a deadline of its own (ccl__now() seconds). */
ccl_status_t ccl__pair_recv_until(struct ccl_comm *comm, int peer, uint32_t tag, void *buf, size_t bytes,
                                  double deadline);

/* Waits up to ms for a message under tag from any peer: 1 with *from and
 * buf filled, 0 if none came (one of another length is dropped). */
int ccl__pair_recv_any(struct ccl_comm *comm, uint32_t tag, int *from, void *buf, size_t bytes, int ms);

/* 0 when peer is gone: it closed its side of the channel, refuses
 * connections (its process exited, or it destroyed its communicator), or
 * cannot be reached within `seconds`; 1 otherwise (a process that is
 * alive, even stopped, has the kernel accept for it). */
int ccl__pair_alive(struct ccl_comm *comm, int peer, double seconds);

/* Tags of the library's own pair-channel messages. */
#define CCL__PAIR_TAG_WHERE_Q 0x57484552u /* "where are you?" (a timed-out wait asks) */
#define CCL__PAIR_TAG_WHERE_A 0x57484541u /* the answer, from inside a wait */
#define CCL__PAIR_TAG_REVOKE 0x52564b45u  /* "I revoked the communicator" (ccl_comm_revoke) */
#define CCL__PAIR_TAG_SHRINK_REPORT 0x53485250u /* a survivor to the shrink's coordinator */
#define CCL__PAIR_TAG_SHRINK_DECIDE 0x53485244u /* the coordinator's decision */
#define CCL__PAIR_TAG_SHRINK_LEFT 0x5348524cu   /* "the shrink left you out" */

/* Close every socket and drop queued messages. */
void ccl__pair_close(struct ccl_comm *comm);

#endif
