/*
 * The transport interface. A transport moves slots of bytes between two
 * ranks; it knows nothing of collectives. Each direction of a connection is
 * a FIFO of `slots` slots of `slot_bytes` each, with a small header per slot
 * (struct ccl__slot_meta) that lets the receiver check that both sides are
 * running the same operation.
 *
 * Adding a transport: a folder under transports/, a `const struct
 * ccl__transport`, and one line in registry.c. Nothing outside its folder
 * names it: the connection manager (manager.c) runs every registered
 * transport's life cycle, the planner picks one per pair by score and
 * costs the pair by the transport's link_class, and a refusal of a
 * transport this build lacks says why through the registry.
 * What a transport must trade pair by pair beyond its blob (queue-pair
 * numbers, memory keys, device handles) goes through the pair channel
 * (core/boot_pair.h), at set-up or later.
 */
#ifndef CCL_TRANSPORT_H
#define CCL_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ccl.h"
#include "core/comm.h"
#include "core/peer.h"

/* The planner's use[p] for a pair a transport serves (0: not served):
 * connect it at set-up, or, where the transport can, when a call first
 * needs it (transports that cannot treat both alike). The same on both
 * ranks of a pair. */
enum { CCL__USE_ON_FIRST_USE = 1, CCL__USE_AT_INIT = 2 };

/* Which operation a slot belongs to; compared on receipt. */
struct ccl__slot_meta {
    uint32_t bytes;  /* payload bytes in this slot (<= slot_bytes) */
    uint16_t kind;   /* enum ccl__op_kind (prims/prims.h) */
    uint8_t dtype;
    uint8_t op;
    uint32_t seq;    /* collective number, or p2p message number for the pair */
    int32_t root;
    uint64_t count;  /* the call's count argument */
};

/* Common head of every connection; transports extend it. */
struct ccl__conn {
    const struct ccl__transport *t;
    struct ccl_comm *comm;
    int peer;
    size_t slot_bytes;
    int slot_mem; /* memory kind of the slots (prims/compute.h); 0 is host */
    int staged;   /* listed in comm->staged (prims/wait.h) */
    int cpu_adapter; /* the link's adapter is software on this machine's CPUs (soft-RoCE, siw) */
};

struct ccl__transport {
    const char *name;
    /* The planner's link class for a pair this transport connects, by the
     * class's name (plan/cost.c's ccl__link_names: "tcp", "rdma"); NULL
     * for shared memory, whose class the two ranks' places decide. */
    const char *link_class;
    /* Score > 0 if this transport can connect a and b (higher wins); 0 if
     * not. Asked only about ranks where this transport's local_init worked. */
    int (*can_connect)(const struct ccl__peer_info *a, const struct ccl__peer_info *b);

    /* Set-up, in four phases separated by bootstrap exchanges/barriers:
     * local_init before the peer table exists (fill our blob: what peers
     * need to reach us, CCL__TRANSPORT_BLOB_BYTES at most; peers read it
     * with ccl__peer_blob), setup after it
     * (create what peers will attach to; use[p] != 0 marks peers this
     * transport serves, CCL__USE_*), connect after every rank's setup (fill conns[p]),
     * setup_done after every rank connected (drop names, listeners). */
    ccl_status_t (*local_init)(struct ccl_comm *comm, uint8_t blob[CCL__TRANSPORT_BLOB_BYTES]);
    ccl_status_t (*setup)(struct ccl_comm *comm, const uint8_t *use);
    ccl_status_t (*connect)(struct ccl_comm *comm, const uint8_t *use, struct ccl__conn **conns);
    ccl_status_t (*setup_done)(struct ccl_comm *comm);
    /* Frees every connection and the state; safe after a failed set-up. */
    void (*teardown)(struct ccl_comm *comm);

    /* Data path. Non-blocking: CCL_INPROGRESS means "not now, wait".
     * send_acquire: a slot for the next message, which will carry at most
     * `bytes` of payload (<= slot_bytes; the commit may carry fewer): a
     * transport may place small and large messages apart. Until the
     * commit, asking again with the same bytes gives the same slot. */
    ccl_status_t (*send_acquire)(struct ccl__conn *c, size_t bytes, void **buf);
    ccl_status_t (*send_commit)(struct ccl__conn *c, const struct ccl__slot_meta *m);
    ccl_status_t (*recv_acquire)(struct ccl__conn *c, const void **buf, struct ccl__slot_meta *m);
    ccl_status_t (*recv_release)(struct ccl__conn *c);
    /* The caller's memory instead of a slot (both NULL when the transport
     * has none: where the slots are what the peer reads, as shm's, there
     * is no copy to save). For stream transports, whose slots are only
     * staging on each side of the socket, they save a copy per chunk.
     * send_commit_from: commits the slot send_acquire gave with its
     * m->bytes of payload at `payload` (host memory the caller may change
     * once this returns) instead of in the slot: the transport writes what
     * it can straight from there and copies only the rest into the slot.
     * reg: where the transport needs registered memory (reg below), the
     * handle of a registration covering the payload, else NULL. Such a
     * transport's adapter reads the payload after this returns: the caller
     * keeps it unchanged until flushed() (prims/caller_mem.c sees to it).
     * recv_into: the caller wants the next frame, if it carries `bytes`
     * of payload, at buf (host memory); when that frame has not begun
     * arriving yet, the transport reads it there instead of into a slot,
     * and recv_acquire then returns buf as its payload. A hint: any frame
     * may still arrive in a slot. buf NULL withdraws it (a step abandoned
     * because the communicator failed); a frame already partly read into
     * the caller's memory then fails the connection, since its bytes are
     * gone with that memory. */
    ccl_status_t (*send_commit_from)(struct ccl__conn *c, const struct ccl__slot_meta *m, const void *payload,
                                     void *reg);
    ccl_status_t (*recv_into)(struct ccl__conn *c, void *buf, size_t bytes);
    /* Moves staged bytes (stream transports); *moved != 0 if anything moved. */
    ccl_status_t (*progress)(struct ccl__conn *c, int *moved);
    /* 1 when every committed slot needs nothing more from this process to
     * reach the peer (has left it, or is an adapter's to deliver). */
    int (*flushed)(struct ccl__conn *c);
    /* A descriptor to poll() while waiting, with events; -1 if none. */
    int (*wait_fd)(struct ccl__conn *c, short *events);
    /* Optional: 1 while an adapter is working on this rank's requests on c
     * (zero-copy reads, an offered buffer not yet read), asked after
     * wait_fd. A waiter then sleeps in short naps (prims/wait.h says why)
     * and, where software adapters crowd the CPUs, does not spin
     * (ccl__plan_spin_rule). */
    int (*in_flight)(const struct ccl__conn *c);
    /* CCL_OK, or CCL_ERR_REMOTE with the error set when the peer is gone. */
    ccl_status_t (*check_peer)(struct ccl__conn *c);
    /* This rank failed: make every peer of this transport notice quickly. */
    void (*poison)(struct ccl_comm *comm, int status);
    /* The transport's own environment knobs (CCL_SHM_*, CCL_TCP_*,
     * CCL_IB_*): a struct of knobs_bytes that knobs_load fills, with the
     * rules every knob follows (core/params.h: ccl__env_long and friends).
     * The process reads them once (ccl__transport_knobs), and each
     * communicator copies them at init (comm->tknobs, ccl__tknobs). */
    size_t knobs_bytes;
    void (*knobs_load)(void *knobs);
    /* Capacity of one slot with these knobs: the planner cuts ring chunks
     * to the smallest slot on the ring. */
    size_t (*slot_bytes)(const void *knobs);

    /* The direct path (both NULL when the transport has none). window():
     * the shared window `rank` exposes, as mapped in this process (this
     * rank's own for comm->rank), with its size; NULL when that rank has
     * none reachable here. Peers read and write a window in place; what is
     * in it is the algorithm's business. wake(): ring the peer's bell, so a
     * peer waiting on a window wakes up. */
    void *(*window)(struct ccl_comm *comm, int rank, size_t *bytes);
    void (*wake)(struct ccl__conn *c);
    /* Wake words in memory peers can reach (NULL when the transport has
     * none): once setup succeeded, the manager moves the communicator's
     * words there, so that peers ring this rank's bell and report their
     * failures straight into it. Valid until teardown. */
    struct ccl__wake_words *(*shared_wake)(struct ccl_comm *comm);

    /* Memory registration (both NULL when the transport needs none, as shm
     * and tcp): make [addr, addr + bytes) something peers may read or
     * write through this transport (an RDMA memory region, a device IPC
     * handle); *handle is the transport's key for it. Callers go through
     * the registration cache (prims/regcache.h), never straight here. */
    ccl_status_t (*reg)(struct ccl_comm *comm, void *addr, size_t bytes, void **handle);
    void (*dereg)(struct ccl_comm *comm, void *handle);
    /* How long a registration must outlive its last use (0: not at all).
     * An RDMA peer that wrote into a buffer may still send a duplicate of
     * its last request (its retransmission timer fired while the
     * acknowledgement was merely late); met by a deregistered region, that
     * request can put both queue pairs in the error state. */
    double reg_linger_s;

    /* Zero-copy point-to-point (all NULL when the transport has none).
     * Instead of streaming a large message through the slots, the sender
     * offers its registered buffer in one slot (its meta's kind carries
     * CCL__SLOT_ZC_OFFER), the receiver moves the bytes straight into its
     * own registered buffer and tells the sender. Only the sender chooses:
     * a receiver takes whatever the slot at the head says.
     * zc_min_bytes: the smallest message worth it (0: none, only memory
     * the application registered). zc_offer: takes a free slot
     * (CCL_INPROGRESS: none now) for the offer of bytes at buf, reg being
     * the cache's handle for it; m is the message's stamp. zc_take: the
     * slot at the head of the receive FIFO is an offer (recv_acquire just
     * returned it): checks its size against bytes, starts moving it into
     * buf (registered as reg), releases the slot. zc_done: CCL_OK once
     * this side's part of the last offer (is_send) or take is over: the
     * receiver has every byte. One offer and one take at a time per
     * connection. */
    size_t (*zc_min_bytes)(const void *knobs);
    /* 1 where the user set zc_min_bytes (NULL: never): a zero-copy through
     * the kernel's copy (zc_by_cma) is then kept as set, where otherwise the
     * planner keeps it only where init's read of a message runs at half
     * memcpy's speed or more (plan/model.c). */
    int (*zc_min_told)(const void *knobs);
    /* The largest message worth it (NULL: no limit). */
    size_t (*zc_max_bytes)(const void *knobs);
    /* Its zero-copy moves the bytes through the kernel's cross-memory
     * attach (no registration: reg NULL): only where init's probe found
     * that every rank may read every other (comm->single_copy). */
    int zc_by_cma;
    ccl_status_t (*zc_offer)(struct ccl__conn *c, const struct ccl__slot_meta *m, const void *buf, size_t bytes,
                             void *reg);
    ccl_status_t (*zc_take)(struct ccl__conn *c, void *buf, size_t bytes, void *reg);
    ccl_status_t (*zc_done)(struct ccl__conn *c, int is_send);
};

/* In a slot's meta kind: the slot is a zero-copy offer, not payload. */
#define CCL__SLOT_ZC_OFFER 0x8000u

/* Registry: every transport compiled in, in order of preference for
 * shared resources (the first that offers shared wake words gets them).
 * A transport's index is its place in this list: its bit in
 * ccl__peer_info.transport_mask, its slot in comm->tstate, its blob. */
extern const struct ccl__transport *const ccl__transports[];
extern const int ccl__ntransports;
const struct ccl__transport *ccl__transport_by_name(const char *name);
int ccl__transport_index(const struct ccl__transport *t);
/* "shm, tcp": for messages. */
void ccl__transport_names(char *buf, size_t n);
/* t's knobs as this process read them, once (NULL: out of memory); a
 * communicator copies them at init (comm->tknobs). */
const void *ccl__transport_knobs(const struct ccl__transport *t);
/* Why a transport libccl has is not in this build ("" when name is none
 * of libccl's), for the message that refuses CCL_TRANSPORT=name. */
const char *ccl__transport_missing_why(const char *name);

/* A transport's knobs as comm read them (its own struct); NULL for a
 * transport outside the registry (a test's stand-in) or before init. */
static inline void *ccl__tknobs(const struct ccl_comm *comm, const struct ccl__transport *t) {
    int i = ccl__transport_index(t);
    return i >= 0 && comm->tknobs ? comm->tknobs[i] : NULL;
}
/* A transport's private per-communicator state slot. */
static inline void **ccl__tstate(struct ccl_comm *comm, const struct ccl__transport *t) {
    return &comm->tstate[ccl__transport_index(t)];
}
/* What rank's local_init of transport t wrote (CCL__TRANSPORT_BLOB_BYTES). */
static inline const uint8_t *ccl__peer_blob(const struct ccl_comm *comm, int rank, const struct ccl__transport *t) {
    return comm->blobs + ((size_t)rank * (size_t)ccl__ntransports + (size_t)ccl__transport_index(t)) *
                             CCL__TRANSPORT_BLOB_BYTES;
}

#endif
