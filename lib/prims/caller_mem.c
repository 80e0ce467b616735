/* Sends straight from the caller's memory over transports that need it
 * registered (ib): which registration a step's send may use, and the rule
 * that keeps the caller's memory unchanged while an adapter reads it.
 *
 * A transport that copies (tcp) takes the caller's memory whenever the
 * step offers it; one whose adapter reads registered memory (ib) takes it
 * only where a registration of the call's buffer is at hand, since making
 * one costs a system call and pinning: the whole buffer is registered at
 * the first step that may use it, when that pays (below), and held until
 * the call ends. Such an adapter reads the payload after the commit
 * returns, so a later step of the call that writes that memory first
 * waits for those reads to complete (on soft-RoCE they are done when the
 * post returns; on hardware, within a round trip). */
#include "core/log.h"
#include "prims/prims.h"
#include "prims/regcache.h"

void ccl__prims_call_bufs(struct ccl_comm *comm, const void *sendbuf, size_t send_bytes, const void *recvbuf,
                          size_t recv_bytes) {
    comm->call_bufs[0] = (struct ccl__call_buf){.buf = send_bytes ? sendbuf : NULL, .bytes = send_bytes};
    comm->call_bufs[1] = (struct ccl__call_buf){.buf = recv_bytes ? recvbuf : NULL, .bytes = recv_bytes};
}

void ccl__prims_call_bufs_end(struct ccl_comm *comm) {
    for (int k = 0; k < 2; k++) {
        if (comm->call_bufs[k].reg) ccl__reg_put(comm, comm->call_bufs[k].reg);
        comm->call_bufs[k] = (struct ccl__call_buf){0};
    }
    comm->reading = 0;
}

static int holds(const struct ccl__call_buf *b, uintptr_t lo, size_t bytes) {
    uintptr_t at = (uintptr_t)b->buf;
    return b->buf && lo >= at && lo + bytes <= at + b->bytes;
}

/* Registering pays where the buffer is registered already (pinned by
 * ccl_comm_register, or kept by CCL_REG_CACHE=1 for later calls) or as
 * large as the transport's zero-copy messages: in the soft-RoCE VM a MiB
 * registers and deregisters in about 120 us and copies in about 530. */
static int worth_registering(struct ccl_comm *comm, const struct ccl__transport *t, const struct ccl__call_buf *b) {
    size_t zc = t->zc_min_bytes ? t->zc_min_bytes(ccl__tknobs(comm, t)) : 0;
    return comm->params.reg_cache || (zc && b->bytes >= zc) || ccl__reg_is_pinned(comm, t, b->buf, b->bytes);
}

void *ccl__prims_caller_reg(struct ccl_comm *comm, const struct ccl__transport *t, const void *from, size_t bytes) {
    for (int k = 0; k < 2; k++) {
        struct ccl__call_buf *b = &comm->call_bufs[k];
        if (!holds(b, (uintptr_t)from, bytes)) continue;
        if (b->reg) {
            if (b->reg->t == t) return b->reg->handle;
            continue;
        }
        if (b->tried) continue;
        b->tried = 1;
        if (!worth_registering(comm, t, b)) continue;
        if (ccl__reg_get(comm, t, b->buf, b->bytes, &b->reg) != CCL_OK) {
            b->reg = NULL;
            CCL_INFO(CCL__SUB_COLL, comm->rank, "sends from %zu bytes at %p go through slots: %s", b->bytes, b->buf,
                     comm->last_error);
            continue;
        }
        return b->reg->handle;
    }
    return NULL;
}

/* Kept per buffer: a ring's steps write one buffer while reading the
 * other, and a range spanning both would cover the gap between them. */
void ccl__prims_note_reading(struct ccl_comm *comm, const void *from, size_t bytes) {
    uintptr_t lo = (uintptr_t)from, hi = lo + bytes;
    for (int k = 0; k < 2; k++) {
        struct ccl__call_buf *b = &comm->call_bufs[k];
        if (!holds(b, lo, bytes)) continue;
        if (!b->reading_hi || lo < b->reading_lo) b->reading_lo = lo;
        if (hi > b->reading_hi) b->reading_hi = hi;
        comm->reading = 1;
        return;
    }
}

struct ccl__conn *ccl__prims_still_reading(struct ccl_comm *comm, const void *dst, size_t bytes) {
    uintptr_t d = (uintptr_t)dst;
    int overlaps = 0;
    for (int k = 0; k < 2 && d && bytes; k++) {
        const struct ccl__call_buf *b = &comm->call_bufs[k];
        overlaps |= b->reading_hi && d < b->reading_hi && d + bytes > b->reading_lo;
    }
    if (!overlaps) return NULL;
    for (int i = 0; i < comm->nstaged; i++) {
        struct ccl__conn *c = comm->staged[i];
        if (!c->t->reg || !c->t->send_commit_from || c->t->flushed(c)) continue;
        int moved = 0;
        /* a failure is the wait's to report, on this connection */
        if (c->t->progress(c, &moved) < 0 || !c->t->flushed(c)) return c;
    }
    /* every read is done: nothing to wait for until the next such send */
    for (int k = 0; k < 2; k++) comm->call_bufs[k].reading_lo = comm->call_bufs[k].reading_hi = 0;
    comm->reading = 0;
    return NULL;
}
