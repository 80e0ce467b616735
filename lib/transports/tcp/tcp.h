/*
 * The TCP transport: one socket per pair of ranks, full duplex, for ranks
 * on different hosts (or on one host when CCL_TRANSPORT=tcp).
 *
 * On the wire each slot is a frame: a struct ccl__slot_meta, then meta.bytes
 * payload bytes. The sender stages up to `slots` frames and writes them with
 * one sendmsg; the receiver reads ahead into up to `slots` receive slots, so
 * the payload lands once in the slot the caller reads (no extra copy). A
 * frame whose payload lies in the caller's memory leaves straight from
 * there when nothing is queued ahead of it (send_commit_from), and one the
 * caller asked for before it began arriving lands straight in its memory
 * (recv_into): then the slots are not touched at all.
 *
 * Set-up: every rank listens on its bootstrap address (the blob carries a
 * union ccl__sa), connects to each lower-ranked peer it connects at init
 * and sends a hello proving it knows the communicator's secret, then
 * accepts its higher-ranked peers. Connections that fail the hello are
 * logged and dropped; they never make set-up fail or wait.
 *
 * Pairs the planner marks for first use (CCL_CONNECT=lazy: all but the
 * rings' and trees') get a connection without a socket or slots at init;
 * the first call that waits on one links it (tcp_link.c): the higher rank
 * dials with the same hello, the lower takes it from its listener, which
 * stays open for the communicator's life. A 4096-rank job then holds a
 * handful of sockets per rank instead of 4095, and a pair that is never
 * used costs nothing.
 */
#ifndef CCL_TRANSPORT_TCP_H
#define CCL_TRANSPORT_TCP_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/socket.h"
#include "transports/transport.h"

extern const struct ccl__transport ccl__transport_tcp;

/* CCL_TCP_* (read in tcp.c). */
struct ccl__tcp_knobs {
    size_t slot_bytes;   /* CCL_TCP_SLOT_BYTES: bytes per staging slot, a multiple of 64 */
    size_t socket_bytes; /* CCL_TCP_SOCKET_BYTES: both socket buffers of a connection (0: autotuned) */
};
static inline struct ccl__tcp_knobs *ccl__tcp_knobs(const struct ccl_comm *comm) {
    return (struct ccl__tcp_knobs *)ccl__tknobs(comm, &ccl__transport_tcp);
}

/* ---- private to transports/tcp (and its white-box test) ---- */

/* A frame header whose `bytes` holds this value is not a slot: the peer tore
 * down cleanly and will send nothing more. A crash never sends it, which is
 * how a hang-up after it is told apart from a failure. */
#define CCL__TCP_GOODBYE_BYTES UINT32_MAX

/* The first bytes on every connection, from the connecting (higher) rank. */
#define CCL__TCP_HELLO_MAGIC 0x6f6c6548u /* "Helo" */
#define CCL__TCP_HELLO_VERSION 1u
struct ccl__tcp_hello {
    uint32_t magic;
    uint32_t version;
    uint64_t comm_id;
    int32_t rank;
    uint32_t reserved;
    uint8_t secret[CCL__SECRET_BYTES];
};

/* A hello with this magic is a liveness probe, not a connection: the
 * lower rank of a pair waiting for the higher one's dial checks this way
 * that the higher one is still there (tcp_link.c), and closes it. */
#define CCL__TCP_PROBE_MAGIC 0x65626f50u /* "Probe" */

/* One recvmsg can take several small frames: what lies past the frame being
 * filled goes to a stash of this size and is copied into its slots. A copy
 * of a few KiB costs less than a system call per frame. */
#define CCL__TCP_STASH_BYTES 4096

struct ccl__tcp_conn {
    struct ccl__conn base;
    int fd; /* -1 until linked: a pair connected on first use, or one set-up has not reached yet */
    /* Linking on first use (tcp_link.c): since when a call waits for it,
     * the higher rank's dial on its way, the lower rank's probe of the
     * higher one and when the next is due. */
    double link_since, next_probe, probe_since;
    int dial_fd, probe_fd;
    unsigned nslots;
    ccl_status_t failed; /* sticky: the first failure, CCL_OK while healthy */
    int peer_done;       /* the peer's goodbye arrived: no more frames will come */

    /* Frames committed and not yet fully written, oldest at send_head. */
    uint8_t *send_buf; /* nslots * slot_bytes */
    struct ccl__slot_meta *send_meta;
    unsigned send_head, send_count;
    size_t send_off; /* bytes of the oldest frame (header included) already written */
    const uint8_t *head_from; /* while send_commit_from writes: the oldest frame's payload, in the caller's memory */

    /* Complete frames, oldest at recv_head; the frame after them is filling. */
    uint8_t *recv_buf;
    struct ccl__slot_meta *recv_meta;
    unsigned recv_head, recv_ready;
    size_t recv_got;     /* bytes of the filling frame (header included) received */
    uint32_t last_bytes; /* payload size of the last complete frame */

    /* A receiver that asked for the next frame in its own memory
     * (recv_into): while WANTED, the filling frame's header decides; while
     * FILLING, its payload goes to ext; once READY, the frame at the head
     * has its payload there. At most one frame at a time. */
    enum { CCL__TCP_EXT_NONE, CCL__TCP_EXT_WANTED, CCL__TCP_EXT_FILLING, CCL__TCP_EXT_READY } ext_state;
    uint8_t *ext;
    size_t ext_bytes;

    /* While frames are small, a read also takes up to CCL__TCP_STASH_BYTES
     * past the frame being filled; they are copied into place from here.
     * Bytes wait here only while every receive slot is full. */
    uint32_t stash_len, stash_off;
    uint8_t stash[CCL__TCP_STASH_BYTES];
};

/* Per-communicator state (ccl__tstate(comm, &ccl__transport_tcp)). The descriptors
 * are atomic because poison may run on another thread (ccl_comm_abort)
 * while set-up or the data path runs. */
struct ccl__tcp_state {
    int nranks;
    _Atomic int listen_fd;
    union ccl__sa addr;           /* where listen_fd listens */
    struct ccl__tcp_conn **conns; /* [nranks], owned here */
    _Atomic int *fds;             /* [nranks] conns[p]->fd, or -1 */
    int dropped;                  /* connections refused (strangers) */
    uint8_t *use;                 /* [nranks] the planner's use[] (CCL__USE_*), 0 for peers of other transports */
    int serving_lazy;             /* set-up is over: hellos of pairs linked on first use are welcome */
    int npend;                    /* accepted connections whose hello is not complete */
    struct ccl__tcp_pending *pend; /* [CCL__TCP_MAX_PENDING] */
};

/* An accepted connection whose hello has not fully arrived. */
struct ccl__tcp_pending {
    int fd;
    double since;
    size_t got;
    char from[80];
    struct ccl__tcp_hello hello;
};
#define CCL__TCP_MAX_PENDING 64
/* A pending connection that has not sent its whole hello by then goes. */
#define CCL__TCP_HELLO_TIMEOUT_S 5.0

/* Data path (tcp.c). */
/* A connection to peer without a socket or slots yet (fd -1). */
ccl_status_t ccl__tcp_conn_new(struct ccl_comm *comm, int peer, struct ccl__tcp_conn **out);
/* Gives c its socket (a connection that passed the hello) and its slots.
 * On failure fd is still the caller's. */
ccl_status_t ccl__tcp_conn_link(struct ccl__tcp_conn *c, int fd);
/* Says goodbye when nothing is left to send, then closes and frees. */
void ccl__tcp_conn_free(struct ccl__tcp_conn *c);
/* Records c's first failure with a sentence (kept only when the
 * communicator has not failed already); returns st. */
ccl_status_t ccl__tcp_fail(struct ccl__tcp_conn *c, ccl_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The peer's host stopped answering for silent_s seconds (0: keepalive). */
ccl_status_t ccl__tcp_fail_unreachable(struct ccl__tcp_conn *c, double silent_s);

/* Accepting (tcp_accept.c): without blocking, takes what waits on the
 * listener, reads the hellos that arrived and links the connections they
 * prove into s->conns; strangers, probes and connections whose hello is
 * late are closed. *adopted counts the links made. */
ccl_status_t ccl__tcp_serve(struct ccl_comm *comm, struct ccl__tcp_state *s, int *adopted);
/* Drops every pending connection (set-up over or failed, or teardown). */
void ccl__tcp_drop_pending(struct ccl_comm *comm, struct ccl__tcp_state *s, const char *why);
/* Sends this rank's hello on fd (magic: a connection or a probe), its
 * secret wiped from memory after. */
ccl_status_t ccl__tcp_hello_send(const struct ccl_comm *comm, int fd, uint32_t magic, double deadline);
/* The peer's listening address from its blob; 0 if it has none. */
int ccl__tcp_peer_addr(const struct ccl_comm *comm, int peer, union ccl__sa *addr);

/* Linking on first use (tcp_link.c), for a connection whose fd is -1:
 * CCL_OK once linked, CCL_INPROGRESS while not yet (*moved set when it
 * just linked), or the failure. */
ccl_status_t ccl__tcp_link_advance(struct ccl__tcp_conn *c, int *moved);
/* What to poll while not linked (the dial, or the listener). */
int ccl__tcp_link_wait_fd(struct ccl__tcp_conn *c, short *events);
/* Liveness while not linked: the higher rank's dial says it; the lower
 * rank probes the higher one's listener after a second of waiting. */
ccl_status_t ccl__tcp_link_check(struct ccl__tcp_conn *c);

/* Set-up phases, poison and teardown (tcp_setup.c). */
int ccl__tcp_can_connect(const struct ccl__peer_info *a, const struct ccl__peer_info *b);
ccl_status_t ccl__tcp_local_init(struct ccl_comm *comm, uint8_t blob[CCL__TRANSPORT_BLOB_BYTES]);
ccl_status_t ccl__tcp_setup(struct ccl_comm *comm, const uint8_t *use);
ccl_status_t ccl__tcp_connect(struct ccl_comm *comm, const uint8_t *use, struct ccl__conn **conns);
ccl_status_t ccl__tcp_setup_done(struct ccl_comm *comm);
void ccl__tcp_teardown(struct ccl_comm *comm);
void ccl__tcp_poison(struct ccl_comm *comm, int status);

#endif
