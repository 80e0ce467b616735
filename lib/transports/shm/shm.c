/* The shared-memory transport's data path, liveness check and ops table
 * (set-up is in shm_setup.c; the layout is described in shm.h).
 *
 * Each FIFO is single-producer single-consumer: the sender alone writes
 * the metas and the slots, the receiver alone writes tail. Release/acquire
 * on each meta's seq and on tail orders the slot contents, so no lock is
 * needed. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/cma.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/params.h"
#include "transports/shm/shm.h"

static inline struct ccl__shm_conn *shm_conn(struct ccl__conn *c) { return (struct ccl__shm_conn *)c; }

static inline void end_advance(struct ccl__shm_end *e) {
    e->pos++;
    e->idx = e->idx + 1 == e->depth ? 0 : e->idx + 1;
}

#define NOT_RING SIZE_MAX

/* Reads the receiver's tail again; the ring bytes it freed are the head
 * after its last released message, still in `ends` (its slot there is
 * only reused by the message depth later, which needs this very release). */
static ccl_status_t sender_refresh(struct ccl__conn *c, struct ccl__shm_end *e) {
    /* Acquire: the receiver's reads of the bytes we are about to reuse
     * happen before our writes to them. */
    uint64_t tail = atomic_load_explicit(&e->ctrl->tail, memory_order_acquire);
    if (tail - e->seen > e->pos - e->seen)
        return ccl__set_error(c->comm, CCL_ERR_REMOTE,
                              "shm: rank %d released %llu messages from rank %d, which sent %llu", c->peer,
                              (unsigned long long)tail, c->comm->rank, (unsigned long long)e->pos);
    if (tail != e->seen) e->freed = e->ends[(tail - 1) % e->depth];
    e->seen = tail;
    return CCL_OK;
}

/* Places the next message of up to `bytes` (shm.h): 1 with e->at, room
 * and skip set, 0 when the ring has no room for it yet. */
static int place(struct ccl__shm_end *e, size_t bytes) {
    e->skip = NOT_RING;
    if (!e->spread) {
        e->at = e->ring_at + (size_t)e->idx * e->stride, e->room = e->stride;
        return 1;
    }
    if (bytes < CCL__SHM_HOT_BYTES) {
        e->at = (size_t)e->idx * e->hot_stride, e->room = e->hot_stride;
        return 1;
    }
    size_t need = ccl__shm_line_up(bytes), r = (size_t)(e->head % e->span), skip = e->span - r < need ? e->span - r : 0;
    if (e->head - e->freed + skip + need > e->span) return 0;
    e->at = e->ring_at + (skip ? 0 : r), e->room = need, e->skip = skip;
    return 1;
}

static int page_reserved(const struct ccl__shm_end *e, size_t pg) { return (int)(e->reserved[pg / 64] >> (pg % 64) & 1); }

/* Reserves the pages of [at, at + bytes) of the data area that are not yet:
 * a tmpfs page written for the first time with /dev/shm full is a SIGBUS,
 * so the room is claimed here, where it can fail with a sentence. */
static ccl_status_t reserve_pages(struct ccl__conn *c, struct ccl__shm_end *e, size_t at, size_t bytes) {
    size_t last = (at + bytes - 1) / CCL__SHM_PAGE;
    for (size_t pg = at / CCL__SHM_PAGE; pg <= last; pg++) {
        if (page_reserved(e, pg)) continue;
        size_t end = pg + 1; /* one fallocate for each run of pages not yet reserved */
        while (end <= last && !page_reserved(e, end)) end++;
        int err = ccl__shm_reserve(e->fd, e->file_at + pg * CCL__SHM_PAGE, (end - pg) * CCL__SHM_PAGE);
        if (err == ENOSPC)
            return ccl__set_error(c->comm, CCL_ERR_NO_MEMORY,
                                  "shm: /dev/shm is full: no room for %zu more bytes of the FIFO to rank %d; enlarge "
                                  "/dev/shm, run fewer ranks per host, or lower CCL_SLOTS or CCL_SHM_SLOT_BYTES",
                                  (end - pg) * CCL__SHM_PAGE, c->peer);
        if (err == EOPNOTSUPP) { /* a /dev/shm that cannot reserve: write as it comes */
            e->pages_left = 0;
            return CCL_OK;
        }
        if (err != 0)
            return ccl__set_error(c->comm, CCL_ERR_SYSTEM, "shm: cannot reserve the FIFO to rank %d: %s", c->peer,
                                  strerror(err));
        e->pages_left -= end - pg;
        for (; pg < end; pg++) e->reserved[pg / 64] |= 1ull << (pg % 64);
    }
    return CCL_OK;
}

static ccl_status_t shm_send_acquire(struct ccl__conn *c, size_t bytes, void **buf) {
    struct ccl__shm_end *e = &shm_conn(c)->send;
    if (bytes > c->slot_bytes)
        return ccl__set_error(c->comm, CCL_ERR_INTERNAL, "shm: a %zu-byte message for a %zu-byte slot to rank %d",
                              bytes, c->slot_bytes, c->peer);
    if (bytes <= CCL__SHM_INLINE_BYTES) { /* in its meta line */
        if (e->pos - e->seen >= e->depth) {
            CCL_CHECK(sender_refresh(c, e));
            if (e->pos - e->seen >= e->depth) return CCL_INPROGRESS;
        }
        e->at = CCL__SHM_INLINE_AT, e->room = CCL__SHM_INLINE_BYTES, e->skip = NOT_RING;
        *buf = e->meta[e->idx].inline_data;
        return CCL_OK;
    }
    if (e->pos - e->seen >= e->depth || !place(e, bytes)) {
        CCL_CHECK(sender_refresh(c, e));
        if (e->pos - e->seen >= e->depth || !place(e, bytes)) return CCL_INPROGRESS;
    }
    if (e->pages_left && bytes) CCL_CHECK(reserve_pages(c, e, e->at, bytes));
    *buf = e->data + e->at;
    return CCL_OK;
}

static ccl_status_t shm_send_commit(struct ccl__conn *c, const struct ccl__slot_meta *m) {
    struct ccl__shm_conn *s = shm_conn(c);
    struct ccl__shm_end *e = &s->send;
    if (m->bytes > e->room)
        return ccl__set_error(c->comm, CCL_ERR_INTERNAL, "shm: commit of %u bytes into %zu acquired for rank %d",
                              m->bytes, e->room, c->peer);
    struct ccl__shm_meta_line *ml = &e->meta[e->idx];
    ml->m = *m;
    ml->offset = e->at;
    if (e->skip != NOT_RING) e->head += e->skip + ccl__shm_line_up(m->bytes);
    e->ends[e->idx] = e->head;
    end_advance(e);
    atomic_store_explicit(&ml->seq, e->pos, memory_order_release);
    ccl__wake_ring(s->peer_wake);
    return CCL_OK;
}

static ccl_status_t shm_recv_acquire(struct ccl__conn *c, const void **buf, struct ccl__slot_meta *m) {
    struct ccl__shm_end *e = &shm_conn(c)->recv;
    const struct ccl__shm_meta_line *ml = &e->meta[e->idx];
    uint64_t seq = atomic_load_explicit(&ml->seq, memory_order_acquire);
    if (seq != e->pos + 1) {
        uint64_t before = e->pos + 1 > e->depth ? e->pos + 1 - e->depth : 0; /* the line's message a lap ago */
        if (seq == before) return CCL_INPROGRESS;
        return ccl__set_error(c->comm, CCL_ERR_REMOTE,
                              "shm: rank %d's FIFO to rank %d is corrupt (message %llu where %llu or %llu belongs)",
                              c->peer, c->comm->rank, (unsigned long long)seq, (unsigned long long)(e->pos + 1),
                              (unsigned long long)before);
    }
    *m = ml->m;
    uint64_t off = ml->offset;
    if (m->bytes > c->slot_bytes)
        return ccl__set_error(c->comm, CCL_ERR_REMOTE, "shm: rank %d sent a slot of %u bytes (slots hold %zu)",
                              c->peer, m->bytes, c->slot_bytes);
    if (off == CCL__SHM_INLINE_AT) {
        if (m->bytes > CCL__SHM_INLINE_BYTES)
            return ccl__set_error(c->comm, CCL_ERR_REMOTE, "shm: rank %d sent %u bytes inside a message's meta (%d fit)",
                                  c->peer, m->bytes, CCL__SHM_INLINE_BYTES);
        *buf = ml->inline_data;
        return CCL_OK;
    }
    if (off % 64 || off > e->data_bytes || m->bytes > e->data_bytes - off)
        return ccl__set_error(c->comm, CCL_ERR_REMOTE,
                              "shm: rank %d placed %u bytes at offset %llu of its %zu-byte FIFO to rank %d", c->peer,
                              m->bytes, (unsigned long long)off, e->data_bytes, c->comm->rank);
    *buf = e->data + off;
    return CCL_OK;
}

static ccl_status_t shm_recv_release(struct ccl__conn *c) {
    struct ccl__shm_conn *s = shm_conn(c);
    struct ccl__shm_end *e = &s->recv;
    end_advance(e);
    atomic_store_explicit(&e->ctrl->tail, e->pos, memory_order_release);
    ccl__wake_ring(s->peer_wake); /* the sender may be waiting for room */
    return CCL_OK;
}

/* ---- single-copy point-to-point (transport.h's zero-copy, through
 * cross-memory attach) ---- */

static size_t shm_zc_min_bytes(const void *knobs) {
    return ((const struct ccl__shm_knobs *)knobs)->single_copy_bytes;
}

static int shm_zc_min_told(const void *knobs) { return ((const struct ccl__shm_knobs *)knobs)->single_copy_told; }

static size_t shm_zc_max_bytes(const void *knobs) { return ((const struct ccl__shm_knobs *)knobs)->single_copy_max; }

static ccl_status_t shm_zc_offer(struct ccl__conn *c, const struct ccl__slot_meta *m, const void *buf, size_t bytes,
                                 void *reg) {
    (void)reg;
    void *slot;
    ccl_status_t st = shm_send_acquire(c, sizeof(struct ccl__shm_offer), &slot);
    if (st != CCL_OK) return st;
    struct ccl__shm_offer o = {(uint64_t)(uintptr_t)buf, bytes};
    memcpy(slot, &o, sizeof o);
    struct ccl__slot_meta mm = *m;
    mm.bytes = sizeof o;
    CCL_CHECK(shm_send_commit(c, &mm));
    shm_conn(c)->offered = shm_conn(c)->send.pos;
    return CCL_OK;
}

/* The whole read, here: it is this rank's work, and nothing else of the
 * transfer is left to wait for. */
static ccl_status_t shm_zc_take(struct ccl__conn *c, void *buf, size_t bytes, void *reg) {
    (void)reg;
    struct ccl_comm *comm = c->comm;
    const struct ccl__peer_info *pi = &comm->peers[c->peer];
    const void *slot;
    struct ccl__slot_meta m;
    CCL_CHECK(shm_recv_acquire(c, &slot, &m));
    struct ccl__shm_offer o;
    if (m.bytes != sizeof o)
        return ccl__set_error(comm, CCL_ERR_REMOTE, "shm: rank %d's single-copy offer has %u bytes, not %zu", c->peer,
                              m.bytes, sizeof o);
    memcpy(&o, slot, sizeof o);
    if (o.bytes != bytes)
        return ccl__set_error(comm, CCL_ERR_INVALID_USAGE, "shm: rank %d sends %llu bytes where rank %d receives %zu",
                              c->peer, (unsigned long long)o.bytes, comm->rank, bytes);
    int err = ccl__cma_read(pi->pid, buf, o.addr, bytes);
    if (err) return ccl__cma_failed(comm, "shm: a single-copy receive", c->peer, err, 0, o.addr, bytes);
    return shm_recv_release(c);
}

static ccl_status_t shm_zc_done(struct ccl__conn *c, int is_send) {
    if (!is_send) return CCL_OK; /* the take read every byte */
    struct ccl__shm_end *e = &shm_conn(c)->send;
    if (e->seen < shm_conn(c)->offered) CCL_CHECK(sender_refresh(c, e));
    return e->seen >= shm_conn(c)->offered ? CCL_OK : CCL_INPROGRESS;
}

static ccl_status_t shm_progress(struct ccl__conn *c, int *moved) {
    (void)c;
    *moved = 0; /* a commit is already in the peer's memory */
    return CCL_OK;
}

static int shm_flushed(struct ccl__conn *c) {
    (void)c;
    return 1;
}

static int shm_wait_fd(struct ccl__conn *c, short *events) {
    (void)c;
    *events = 0;
    return -1;
}

/* A pid names the peer only inside its own PID namespace: a container's
 * rank may share our /dev/shm and not our pids. The segment lock works
 * across them. */
static int pid_comparable(const struct ccl_comm *comm, const struct ccl__peer_info *pi) {
    const struct ccl__peer_info *me = &comm->peers[comm->rank];
    return pi->pid > 0 && me->pid_ns != 0 && pi->pid_ns == me->pid_ns;
}

static ccl_status_t shm_check_peer(struct ccl__conn *c) {
    struct ccl_comm *comm = c->comm;
    const struct ccl__peer_info *pi = &comm->peers[c->peer];
    int hn = (int)sizeof(pi->hostname);
    if (pid_comparable(comm, pi) && kill(pi->pid, 0) != 0 && errno == ESRCH) {
        ccl__comm_blame(comm, c->peer, CCL__CULPRIT_EXITED);
        return ccl__set_error(comm, CCL_ERR_REMOTE, "rank %d (pid %d on %.*s) exited", c->peer, pi->pid, hn,
                              pi->hostname);
    }
    if (ccl__shm_lock_free(shm_conn(c)->peer_fd)) {
        ccl__comm_blame(comm, c->peer, CCL__CULPRIT_EXITED);
        return ccl__set_error(comm, CCL_ERR_REMOTE, "rank %d (pid %d on %.*s) exited or left the communicator",
                              c->peer, pi->pid, hn, pi->hostname);
    }
    return CCL_OK;
}

static int shm_can_connect(const struct ccl__peer_info *a, const struct ccl__peer_info *b) {
    if (!a->host_id[0] || strncmp(a->host_id, b->host_id, sizeof(a->host_id)) != 0) return 0;
    return 10;
}

static void shm_knobs_load(void *knobs) {
    struct ccl__shm_knobs *k = knobs;
    k->slot_bytes = (size_t)ccl__env_long("CCL_SHM_SLOT_BYTES", 128 << 10, 4096, 64 << 20) & ~(size_t)63;
    /* 0, or at least 64 KiB (the window holds four staging areas); whole pages */
    long window = ccl__env_long("CCL_SHM_WINDOW_BYTES", 2 << 20, 0, 1L << 30);
    if (window > 0 && window < (64 << 10)) {
        CCL_WARN(CCL__SUB_ENV, -1, "CCL_SHM_WINDOW_BYTES=%s is below the window's least, 65536 (0 turns it off); "
                 "using 65536", getenv("CCL_SHM_WINDOW_BYTES"));
        window = 64 << 10;
    }
    k->window_bytes = (size_t)window & ~(size_t)4095;
    /* One copy by the receiver against two by both ranks at once through
     * the slots, which pipeline a message over the two cores: measured on
     * 2 ranks of the 2-core development machine (time single-copy /
     * slots, 3 runs), ping-pong 0.63-0.69 at 512 KiB, 0.74-0.78 at 1 MiB,
     * 1.01-1.04 at 2 MiB, 1.02-1.13 at 4 MiB and 1.5-2.2 at 16 MiB, where
     * the kernel's copy (no vector registers, and every page pinned) runs
     * at two thirds of memcpy's speed; both ways at once 0.53-0.68 at
     * 512 KiB, 0.70-0.93 at 1 MiB, 1.0-1.15 at 2 MiB. Where the kernel's
     * copy is slower than that the slots win (on the same machine under a
     * later kernel: 2-3x at 512 KiB-2 MiB), so unless the size is given the
     * planner keeps it only where init's probe of a message-sized read runs
     * at half memcpy's speed or more (plan/model.c). */
    k->single_copy_told = getenv("CCL_SHM_SINGLE_COPY_BYTES") != NULL;
    k->single_copy_bytes = (size_t)ccl__env_long("CCL_SHM_SINGLE_COPY_BYTES", 512 << 10, 0, 1L << 40);
    k->single_copy_max = (size_t)ccl__env_long("CCL_SHM_SINGLE_COPY_MAX_BYTES", 2 << 20, 0, 1L << 40);
    ccl__env_str("CCL_SHM_PREFIX", "ccl", k->prefix, sizeof k->prefix);
}

static size_t shm_slot_bytes(const void *knobs) { return ((const struct ccl__shm_knobs *)knobs)->slot_bytes; }

static void shm_wake(struct ccl__conn *c) { ccl__wake_ring(shm_conn(c)->peer_wake); }

const struct ccl__transport ccl__transport_shm = {
    .name = "shm",
    .knobs_bytes = sizeof(struct ccl__shm_knobs),
    .knobs_load = shm_knobs_load,
    .can_connect = shm_can_connect,
    .local_init = ccl__shm_local_init,
    .setup = ccl__shm_setup,
    .connect = ccl__shm_connect,
    .setup_done = ccl__shm_setup_done,
    .teardown = ccl__shm_teardown,
    .send_acquire = shm_send_acquire,
    .send_commit = shm_send_commit,
    .recv_acquire = shm_recv_acquire,
    .recv_release = shm_recv_release,
    .progress = shm_progress,
    .flushed = shm_flushed,
    .wait_fd = shm_wait_fd,
    .check_peer = shm_check_peer,
    .poison = ccl__shm_poison,
    .slot_bytes = shm_slot_bytes,
    .window = ccl__shm_window,
    .wake = shm_wake,
    .shared_wake = ccl__shm_shared_wake,
    .zc_min_bytes = shm_zc_min_bytes,
    .zc_min_told = shm_zc_min_told,
    .zc_max_bytes = shm_zc_max_bytes,
    .zc_offer = shm_zc_offer,
    .zc_take = shm_zc_take,
    .zc_done = shm_zc_done,
    .zc_by_cma = 1,
};
