/*
 * The shared-memory transport: ranks on one host exchange slots through
 * FIFOs in POSIX shared memory, with no system call on the data path except
 * a futex wake when the peer sleeps.
 *
 * Each rank owns one segment "/<CCL_SHM_PREFIX>-<32 random hex>":
 *
 *   header  magic, comm id, secret, geometry, this rank's wake words,
 *           fifo_offset[nranks] (0: that sender has no FIFO here)
 *   FIFO p  one per peer p that uses shm with this rank: the direction p -> us
 *   window  CCL_SHM_WINDOW_BYTES every peer on the host may read and write
 *           in place: the direct path (algo/direct.c lays it out)
 *
 * so a rank receives in its own segment and sends into the receiver's. The
 * wake words in the header are where peers ring this rank (shared_wake
 * offers them; the connection manager points comm->wake at them). The name is unlinked in setup_done, after every peer
 * has attached, so a crash later leaves nothing in /dev/shm.
 */
#ifndef CCL_TRANSPORT_SHM_H
#define CCL_TRANSPORT_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wake.h"
#include "transports/transport.h"

extern const struct ccl__transport ccl__transport_shm;

/* CCL_SHM_* (read in shm.c). */
struct ccl__shm_knobs {
    size_t slot_bytes;   /* CCL_SHM_SLOT_BYTES: bytes per FIFO slot, a multiple of 64 */
    size_t window_bytes; /* CCL_SHM_WINDOW_BYTES: the direct path's window per rank, whole pages, 0 none */
    char prefix[32];     /* CCL_SHM_PREFIX: start of /dev/shm segment names */
    size_t single_copy_bytes; /* CCL_SHM_SINGLE_COPY_BYTES: point-to-point messages from this size move in one
                               * copy (0: never) */
    size_t single_copy_max;   /* CCL_SHM_SINGLE_COPY_MAX_BYTES: and up to this size */
    int single_copy_told;     /* CCL_SHM_SINGLE_COPY_BYTES was set: the planner keeps it (else it decides) */
};
static inline struct ccl__shm_knobs *ccl__shm_knobs(const struct ccl_comm *comm) {
    return (struct ccl__shm_knobs *)ccl__tknobs(comm, &ccl__transport_shm);
}

/* ---- private to transports/shm (and its white-box test) ---- */

/* The FIFO's counter the receiver writes, on a line of its own: the
 * sender reads it only when its cached copy says the FIFO is full. (What
 * the sender has committed is in each message's own meta line.) */
struct ccl__shm_fifo_ctrl {
    _Alignas(64) _Atomic uint64_t tail; /* messages released, written by the receiver */
};

/* Payloads this small travel inside their meta line. */
#define CCL__SHM_INLINE_BYTES 24
#define CCL__SHM_INLINE_AT UINT64_MAX /* the offset of a payload in its meta line */

/* One message's meta on its own line: the sender fills meta i+1 while the
 * receiver reads meta i. The sender stores `seq` last, with release: the
 * receiver polls this one line, which brings the message's meta, and a
 * small payload too, in one transfer between cores. (A counter of its
 * own, then the meta, then the data were three transfers one after the
 * other: an 8-byte ping-pong took 0.81 us here against 0.52, medians of 6
 * alternating runs.) */
struct ccl__shm_meta_line {
    _Alignas(64) _Atomic uint64_t seq; /* 1 + the message's number in the FIFO, once it is committed */
    struct ccl__slot_meta m;
    uint64_t offset; /* where the message's data starts in the data area, or CCL__SHM_INLINE_AT */
    uint8_t inline_data[CCL__SHM_INLINE_BYTES];
};
_Static_assert(sizeof(struct ccl__shm_meta_line) == 64, "a message's meta is one cache line");

/* Bytes rounded up to whole cache lines: slots and messages start on one. */
static inline size_t ccl__shm_line_up(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* Messages below this many bytes always go to the hot area (below). */
#define CCL__SHM_HOT_BYTES 16384
#define CCL__SHM_MAX_DEPTH 64 /* CCL_SLOTS' largest value */
#define CCL__SHM_PAGE 4096u   /* the unit in which FIFO data is reserved in /dev/shm */

/* One end of a FIFO. `pos` is this end's own message counter (messages
 * committed for the sender, released for the receiver); the sender's
 * `seen` caches the receiver's tail, so that line is only read again when
 * the cache says full.
 *
 * Where a message's data goes is the sender's choice, written in its meta:
 * - a rank that shares its core with other ranks of the host (or is not
 *   bound) uses fixed slots, message i in slot i % depth of the ring area:
 *   the lines a peer on the same core just read are still in the core's
 *   caches, and writing them again is cheap;
 * - a rank alone on its core sends messages of CCL__SHM_HOT_BYTES or more
 *   through the ring area as a ring of bytes: each takes its own bytes
 *   (rounded up to a line) right after the previous one, back at the start
 *   when it does not fit before the end. Every size then cycles through the
 *   whole area before reusing a line, where fixed slots cycle a half-slot
 *   message through half of it; a line the receiver read recently sits in
 *   the other core's cache, and writing it again first takes it back from
 *   there (measured on 2 ranks: a 64 KiB exchange in 128 KiB slots took as
 *   long as a 128 KiB one). Smaller messages go to the hot area, slot
 *   i % depth of it, where the same few lines come round again (walking the
 *   ring, they would find every line cold: 0.5 us became 0.7 for 8 bytes).
 * The ring area holds depth + 1 slots: depth messages of any sizes then
 * always fit, whatever the end of the area skipped. */
struct ccl__shm_end {
    struct ccl__shm_fifo_ctrl *ctrl;
    struct ccl__shm_meta_line *meta;
    uint8_t *data;
    size_t data_bytes; /* hot area, then ring area */
    size_t hot_stride; /* a hot slot: CCL__SHM_HOT_BYTES, or a whole slot if that is smaller */
    size_t ring_at;    /* where the ring area starts */
    size_t span;       /* the ring area's bytes */
    size_t stride;     /* a slot: slot_bytes rounded up to 64 */
    uint32_t depth;
    uint32_t idx; /* pos % depth */
    uint64_t pos;
    uint64_t seen;
    /* The sender's side alone: */
    int spread;      /* messages of CCL__SHM_HOT_BYTES or more go through the ring of bytes */
    uint64_t head;   /* ring bytes used so far, skipped ends included */
    uint64_t freed;  /* of those, the ones the receiver has released */
    size_t at;       /* the acquired slot: its offset in the data area, */
    size_t room;     /* the bytes it may take */
    size_t skip;     /* and the ring bytes it skipped at the end (NOT_RING: not in the ring) */
    uint64_t ends[CCL__SHM_MAX_DEPTH]; /* head after each message in flight, by idx */
    /* The data's pages in /dev/shm, reserved as they are first written
     * (shm_setup.c says why): the segment's file, where the data starts in
     * it, one bit per page reserved, and how many pages are not yet. */
    int fd;
    uint64_t file_at;
    uint64_t *reserved;
    size_t pages_left;
};

struct ccl__shm_conn {
    struct ccl__conn base;
    struct ccl__shm_end send; /* in the peer's segment */
    struct ccl__shm_end recv; /* in ours */
    struct ccl__wake_words *peer_wake;
    int peer_fd; /* the peer's segment, to probe its liveness lock; -1: don't */
    uint64_t offered; /* the send FIFO's position just past our last single-copy offer */
};

/* A single-copy offer (shm.c): where the sender's buffer lies in its
 * process; the receiver reads it through cross-memory attach and only
 * then releases the offer's slot, which tells the sender it is done. */
struct ccl__shm_offer {
    uint64_t addr, bytes;
};

/* Reserves [off, off + len) of a segment's file (posix_fallocate): 0, ENOSPC
 * when /dev/shm is full, EOPNOTSUPP when this /dev/shm cannot reserve (its
 * pages are then taken as they are written), or another errno. */
int ccl__shm_reserve(int fd, uint64_t off, uint64_t len);

/* Set-up phases, poison and teardown (shm_setup.c). */
ccl_status_t ccl__shm_local_init(struct ccl_comm *comm, uint8_t blob[CCL__TRANSPORT_BLOB_BYTES]);
ccl_status_t ccl__shm_setup(struct ccl_comm *comm, const uint8_t *use);
ccl_status_t ccl__shm_connect(struct ccl_comm *comm, const uint8_t *use, struct ccl__conn **conns);
ccl_status_t ccl__shm_setup_done(struct ccl_comm *comm);
void ccl__shm_teardown(struct ccl_comm *comm);
/* 1 when nobody holds the liveness lock on a segment (shm_setup.c): its
 * creator has gone, even as a zombie or with its pid reused. */
int ccl__shm_lock_free(int fd);
void ccl__shm_poison(struct ccl_comm *comm, int status);
void *ccl__shm_window(struct ccl_comm *comm, int rank, size_t *bytes);
struct ccl__wake_words *ccl__shm_shared_wake(struct ccl_comm *comm);

#endif
