/* The TCP transport's data path, liveness check and ops table (set-up is in
 * tcp_setup.c; the framing is described in tcp.h).
 *
 * Everything here is non-blocking and moves as much as the socket takes in
 * one system call: sends gather every staged frame into one sendmsg, reads
 * scatter straight into the receive slots (the rest of the current frame
 * plus the next frame's header; while frames are small, also a few KiB into
 * the stash, so one call takes many frames), and a short read or write ends
 * the loop because it means the kernel has nothing more for us right now. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/log.h"
#include "transports/tcp/tcp.h"

#define HDR_BYTES sizeof(struct ccl__slot_meta)
/* Frames gathered into one sendmsg at most (two iovecs each). */
#define MAX_GATHER 64

static inline struct ccl__tcp_conn *tcp_conn(struct ccl__conn *c) { return (struct ccl__tcp_conn *)c; }

static const char *peer_host(const struct ccl__tcp_conn *c) {
    const struct ccl_comm *comm = c->base.comm;
    return comm->peers ? comm->peers[c->base.peer].hostname : "?";
}

/* Records the first failure of this connection. When the communicator has
 * already failed (poison shut our own sockets, or an abort), its message is
 * the one worth keeping, so it is not overwritten. */
ccl_status_t ccl__tcp_fail(struct ccl__tcp_conn *c, ccl_status_t st, const char *fmt, ...) {
    if (c->failed) return c->failed;
    c->failed = st;
    struct ccl_comm *comm = c->base.comm;
    if (ccl__comm_health(comm) < 0) return st;
    char msg[CCL__ERR_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    CCL_INFO(CCL__SUB_NET, comm->rank, "tcp: %s", msg);
    return ccl__set_error(comm, st, "%s", msg);
}

static ccl_status_t fail_closed(struct ccl__tcp_conn *c) {
    return ccl__tcp_fail(c, CCL_ERR_REMOTE, "rank %d (%.64s) closed its connection", c->base.peer, peer_host(c));
}

/* The peer's host stopped answering: a cut link, a dead host or a
 * partition, told apart from a live peer that is merely late. */
ccl_status_t ccl__tcp_fail_unreachable(struct ccl__tcp_conn *c, double silent_s) {
    const struct ccl__params *prm = &c->base.comm->params;
    ccl__comm_blame(c->base.comm, c->base.peer, CCL__CULPRIT_UNREACHABLE);
    if (silent_s > 0)
        return ccl__tcp_fail(c, CCL_ERR_REMOTE,
                         "rank %d (%.64s) cannot be reached: its host has acknowledged nothing for %.1f s "
                         "(CCL_LINK_TIMEOUT=%g); the link or the host is down",
                         c->base.peer, peer_host(c), silent_s, prm->link_timeout_s);
    return ccl__tcp_fail(c, CCL_ERR_REMOTE,
                     "rank %d (%.64s) cannot be reached: its host stopped answering keepalives "
                     "(CCL_LINK_TIMEOUT=%g); the link or the host is down",
                     c->base.peer, peer_host(c), prm->link_timeout_s);
}

/* An error from send/recv other than EAGAIN/EINTR. */
static ccl_status_t fail_io(struct ccl__tcp_conn *c, int err, const char *what) {
    switch (err) {
    case EPIPE:
    case ECONNRESET:
    case ENOTCONN:
    case ESHUTDOWN: return fail_closed(c);
    case ETIMEDOUT: return ccl__tcp_fail_unreachable(c, 0);
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
        return ccl__tcp_fail(c, CCL_ERR_REMOTE, "connection to rank %d (%.64s) failed: %s", c->base.peer, peer_host(c),
                         strerror(err));
    default:
        return ccl__tcp_fail(c, CCL_ERR_SYSTEM, "tcp %s to rank %d (%.64s): %s", what, c->base.peer, peer_host(c),
                         strerror(err));
    }
}

/* The peer said goodbye: it will read nothing more, so anything we still
 * want to send can never arrive. */
static ccl_status_t fail_if_peer_done(struct ccl__tcp_conn *c) {
    return c->peer_done ? fail_closed(c) : CCL_OK;
}

/* ---- sending ---- */

static void sent_bytes(struct ccl__tcp_conn *c, size_t n) {
    while (n > 0) {
        size_t frame = HDR_BYTES + c->send_meta[c->send_head].bytes;
        size_t rest = frame - c->send_off;
        if (n < rest) {
            c->send_off += n;
            return;
        }
        n -= rest;
        c->send_off = 0;
        c->send_head = c->send_head + 1 == c->nslots ? 0 : c->send_head + 1;
        c->send_count--;
    }
}

static ccl_status_t write_frames(struct ccl__tcp_conn *c, int *moved) {
    struct iovec iov[2 * MAX_GATHER];
    while (c->send_count > 0) {
        int n = 0;
        size_t want = 0, skip = c->send_off;
        unsigned s = c->send_head;
        for (unsigned i = 0; i < c->send_count && i < MAX_GATHER; i++) {
            uint8_t *hdr = (uint8_t *)&c->send_meta[s];
            const uint8_t *payload = c->send_buf + (size_t)s * c->base.slot_bytes;
            if (i == 0 && c->head_from) payload = c->head_from;
            size_t hlen = HDR_BYTES, plen = c->send_meta[s].bytes;
            if (skip >= HDR_BYTES) {
                payload += skip - HDR_BYTES;
                plen -= skip - HDR_BYTES;
                hlen = 0;
            } else {
                hdr += skip;
                hlen -= skip;
            }
            skip = 0;
            if (hlen) iov[n++] = (struct iovec){.iov_base = hdr, .iov_len = hlen};
            if (plen) iov[n++] = (struct iovec){.iov_base = (void *)payload, .iov_len = plen};
            want += hlen + plen;
            s = s + 1 == c->nslots ? 0 : s + 1;
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            *moved = 1;
            sent_bytes(c, (size_t)w);
            if ((size_t)w < want) return CCL_OK; /* the socket buffer is full */
            continue;
        }
        int err = w < 0 ? errno : EAGAIN;
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) return CCL_OK;
        return fail_io(c, err, "send");
    }
    return CCL_OK;
}

static ccl_status_t tcp_send_acquire(struct ccl__conn *base, size_t bytes, void **buf) {
    (void)bytes; /* frames are as long as their payload wherever they sit */
    struct ccl__tcp_conn *c = tcp_conn(base);
    if (c->failed) return c->failed;
    int linked = 0;
    ccl_status_t st = c->fd < 0 ? ccl__tcp_link_advance(c, &linked) : fail_if_peer_done(c);
    if (st != CCL_OK) return st;
    if (c->send_count == c->nslots) {
        int moved = 0;
        if ((st = write_frames(c, &moved)) < 0) return st;
        if (c->send_count == c->nslots) return CCL_INPROGRESS;
    }
    unsigned s = (c->send_head + c->send_count) % c->nslots;
    *buf = c->send_buf + (size_t)s * base->slot_bytes;
    return CCL_OK;
}

/* Puts frame m in the next slot, after the checks every commit makes;
 * *slot is where its payload goes. */
static ccl_status_t stage_frame(struct ccl__tcp_conn *c, const struct ccl__slot_meta *m, uint8_t **slot) {
    if (c->failed) return c->failed;
    ccl_status_t st = fail_if_peer_done(c);
    if (st < 0) return st;
    if (c->send_count == c->nslots || m->bytes > c->base.slot_bytes)
        return ccl__set_error(c->base.comm, CCL_ERR_INTERNAL,
                              "tcp: commit of %u bytes to rank %d (%u of %u slots staged, slots hold %zu)", m->bytes,
                              c->base.peer, c->send_count, c->nslots, c->base.slot_bytes);
    unsigned s = (c->send_head + c->send_count) % c->nslots;
    c->send_meta[s] = *m;
    c->send_count++;
    *slot = c->send_buf + (size_t)s * c->base.slot_bytes;
    return CCL_OK;
}

static ccl_status_t tcp_send_commit(struct ccl__conn *base, const struct ccl__slot_meta *m) {
    struct ccl__tcp_conn *c = tcp_conn(base);
    uint8_t *slot = NULL;
    ccl_status_t st = stage_frame(c, m, &slot);
    if (st < 0) return st;
    int moved = 0;
    return write_frames(c, &moved);
}

/* With nothing staged ahead of it, the frame is written straight from the
 * caller's memory; only what the socket does not take now is copied into
 * the slot, to leave from there. Behind staged frames it is copied whole:
 * the stream's order is theirs first. */
static ccl_status_t tcp_send_commit_from(struct ccl__conn *base, const struct ccl__slot_meta *m, const void *payload,
                                         void *reg) {
    (void)reg; /* sockets read the caller's memory as it is */
    struct ccl__tcp_conn *c = tcp_conn(base);
    uint8_t *slot = NULL;
    ccl_status_t st = stage_frame(c, m, &slot);
    if (st < 0) return st;
    int moved = 0;
    if (c->send_count > 1) {
        memcpy(slot, payload, m->bytes);
        return write_frames(c, &moved);
    }
    c->head_from = payload;
    st = write_frames(c, &moved);
    c->head_from = NULL;
    if (c->send_count > 0) { /* the socket is full: the rest leaves from the slot */
        size_t from = c->send_off > HDR_BYTES ? c->send_off - HDR_BYTES : 0;
        memcpy(slot + from, (const uint8_t *)payload + from, m->bytes - from);
    }
    return st;
}

/* ---- receiving ---- */

static void frame_complete(struct ccl__tcp_conn *c, uint32_t bytes) {
    if (c->ext_state == CCL__TCP_EXT_FILLING) c->ext_state = CCL__TCP_EXT_READY;
    c->recv_ready++;
    c->recv_got = 0;
    c->last_bytes = bytes;
}

/* Accounts n bytes that were placed, in order, where the filling frame (and
 * the ones after it) expect them. */
static ccl_status_t received_bytes(struct ccl__tcp_conn *c, size_t n) {
    while (n > 0) {
        unsigned f = (c->recv_head + c->recv_ready) % c->nslots;
        const struct ccl__slot_meta *m = &c->recv_meta[f];
        if (c->recv_got < HDR_BYTES) {
            size_t take = HDR_BYTES - c->recv_got < n ? HDR_BYTES - c->recv_got : n;
            c->recv_got += take;
            n -= take;
            if (c->recv_got < HDR_BYTES) return CCL_OK;
            /* The frame a receiver asked for in its own memory: only if it
             * is the size that receiver expects. */
            if (c->ext_state == CCL__TCP_EXT_WANTED)
                c->ext_state = m->bytes == c->ext_bytes ? CCL__TCP_EXT_FILLING : CCL__TCP_EXT_NONE;
            if (m->bytes == CCL__TCP_GOODBYE_BYTES) {
                c->peer_done = 1;
                c->recv_got = 0;
                c->stash_len = c->stash_off = 0; /* nothing after a goodbye counts */
                return CCL_OK;
            }
            if (m->bytes > c->base.slot_bytes)
                return ccl__tcp_fail(c, CCL_ERR_REMOTE,
                                 "rank %d (%.64s) sent a malformed frame: %u payload bytes, slots hold %zu",
                                 c->base.peer, peer_host(c), m->bytes, c->base.slot_bytes);
            if (m->bytes == 0) frame_complete(c, 0);
        } else {
            size_t rest = HDR_BYTES + m->bytes - c->recv_got;
            size_t take = rest < n ? rest : n;
            c->recv_got += take;
            n -= take;
            if (take == rest) frame_complete(c, m->bytes);
        }
    }
    return CCL_OK;
}

/* Where the next bytes of the stream belong: the rest of the filling
 * frame's header, else the rest of its payload. */
static struct iovec filling_part(struct ccl__tcp_conn *c) {
    unsigned f = (c->recv_head + c->recv_ready) % c->nslots;
    if (c->recv_got < HDR_BYTES)
        return (struct iovec){.iov_base = (uint8_t *)&c->recv_meta[f] + c->recv_got,
                              .iov_len = HDR_BYTES - c->recv_got};
    size_t off = c->recv_got - HDR_BYTES;
    if (c->ext_state == CCL__TCP_EXT_FILLING)
        return (struct iovec){.iov_base = c->ext + off, .iov_len = c->recv_meta[f].bytes - off};
    return (struct iovec){.iov_base = c->recv_buf + (size_t)f * c->base.slot_bytes + off,
                          .iov_len = c->recv_meta[f].bytes - off};
}

/* Copies stashed bytes into free slots; some stay only if the slots fill. */
static ccl_status_t absorb_stash(struct ccl__tcp_conn *c) {
    while (c->stash_off < c->stash_len && c->recv_ready < c->nslots && !c->peer_done && !c->failed) {
        struct iovec to = filling_part(c);
        size_t take = c->stash_len - c->stash_off;
        if (take > to.iov_len) take = to.iov_len;
        memcpy(to.iov_base, c->stash + c->stash_off, take);
        c->stash_off += (uint32_t)take;
        ccl_status_t st = received_bytes(c, take);
        if (st < 0) return st;
    }
    if (c->stash_off == c->stash_len) c->stash_len = c->stash_off = 0;
    return c->failed;
}

static ccl_status_t read_frames(struct ccl__tcp_conn *c, int *moved) {
    int drained = 0;
    for (;;) {
        if (c->stash_len) {
            ccl_status_t st = absorb_stash(c);
            if (st < 0) return st;
            if (c->stash_len) return CCL_OK; /* every slot is full */
        }
        if (c->failed) return c->failed;
        if (drained || c->peer_done || c->recv_ready == c->nslots) return CCL_OK;
        struct iovec iov[3];
        int n = 0;
        iov[n++] = filling_part(c);
        /* Once the header is in, the next frame's header may follow the
         * payload straight into its own slot's header. */
        if (c->recv_got >= HDR_BYTES && c->recv_ready + 1 < c->nslots) {
            unsigned f = (c->recv_head + c->recv_ready) % c->nslots;
            unsigned next = f + 1 == c->nslots ? 0 : f + 1;
            iov[n++] = (struct iovec){.iov_base = &c->recv_meta[next], .iov_len = HDR_BYTES};
        }
        size_t direct = 0;
        for (int i = 0; i < n; i++) direct += iov[i].iov_len;
        int stash = c->last_bytes < CCL__TCP_STASH_BYTES;
        if (stash) iov[n++] = (struct iovec){.iov_base = c->stash, .iov_len = CCL__TCP_STASH_BYTES};
        size_t want = direct + (stash ? CCL__TCP_STASH_BYTES : 0);
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t r = recvmsg(c->fd, &msg, MSG_DONTWAIT);
        if (r > 0) {
            *moved = 1;
            size_t placed = (size_t)r < direct ? (size_t)r : direct;
            if ((size_t)r > direct) c->stash_len = (uint32_t)((size_t)r - direct);
            ccl_status_t st = received_bytes(c, placed);
            if (st < 0) return st;
            drained = (size_t)r < want; /* the kernel had no more for now */
            continue;
        }
        if (r == 0) return fail_closed(c);
        int err = errno;
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) return CCL_OK;
        return fail_io(c, err, "recv");
    }
}

static ccl_status_t tcp_recv_acquire(struct ccl__conn *base, const void **buf, struct ccl__slot_meta *m) {
    struct ccl__tcp_conn *c = tcp_conn(base);
    if (c->failed) return c->failed;
    int moved = 0;
    if (c->fd < 0) {
        ccl_status_t st = ccl__tcp_link_advance(c, &moved);
        if (st != CCL_OK) return st;
    }
    if (c->recv_ready == 0) {
        ccl_status_t st = read_frames(c, &moved);
        if (st < 0) return st;
        if (c->recv_ready == 0) return c->peer_done ? fail_closed(c) : CCL_INPROGRESS;
    }
    *m = c->recv_meta[c->recv_head];
    *buf = c->ext_state == CCL__TCP_EXT_READY ? c->ext : c->recv_buf + (size_t)c->recv_head * base->slot_bytes;
    return CCL_OK;
}

/* Only the frame that will be at the head once it arrives, and only
 * before its payload began landing in a slot: the frame after the head
 * must be free to be read ahead into slots. */
static ccl_status_t tcp_recv_into(struct ccl__conn *base, void *buf, size_t bytes) {
    struct ccl__tcp_conn *c = tcp_conn(base);
    if (!buf) {
        int placed = c->ext_state == CCL__TCP_EXT_READY ||
                     (c->ext_state == CCL__TCP_EXT_FILLING && c->recv_got > HDR_BYTES);
        c->ext_state = CCL__TCP_EXT_NONE;
        if (!placed) return CCL_OK;
        return ccl__tcp_fail(c, CCL_ERR_INTERNAL, "a receive from rank %d was abandoned in mid-frame", base->peer);
    }
    if (c->failed) return c->failed;
    if (c->fd < 0) return CCL_OK; /* not linked yet: the first frames use the slots */
    if (c->ext_state == CCL__TCP_EXT_FILLING || c->ext_state == CCL__TCP_EXT_READY) {
        if (c->ext == buf && c->ext_bytes == bytes) return CCL_OK; /* the same step, trying again */
        return ccl__set_error(base->comm, CCL_ERR_INTERNAL,
                              "tcp: a second receive from rank %d asked for a frame in its memory", base->peer);
    }
    c->ext_state = CCL__TCP_EXT_NONE;
    if (c->recv_ready > 0 || c->peer_done || bytes == 0 || bytes > base->slot_bytes) return CCL_OK;
    if (c->recv_got < HDR_BYTES)
        c->ext_state = CCL__TCP_EXT_WANTED;
    else if (c->recv_got == HDR_BYTES && c->recv_meta[c->recv_head].bytes == bytes)
        c->ext_state = CCL__TCP_EXT_FILLING;
    c->ext = buf;
    c->ext_bytes = bytes;
    return CCL_OK;
}

static ccl_status_t tcp_recv_release(struct ccl__conn *base) {
    struct ccl__tcp_conn *c = tcp_conn(base);
    if (c->recv_ready == 0)
        return ccl__set_error(base->comm, CCL_ERR_INTERNAL, "tcp: release with no slot acquired from rank %d",
                              base->peer);
    if (c->ext_state == CCL__TCP_EXT_READY) c->ext_state = CCL__TCP_EXT_NONE; /* it was the head */
    c->recv_head = c->recv_head + 1 == c->nslots ? 0 : c->recv_head + 1;
    c->recv_ready--;
    /* Stashed bytes may now fit: place them before anyone polls, since
     * poll() cannot see them. */
    return c->stash_len ? absorb_stash(c) : CCL_OK;
}

/* ---- progress and waiting ---- */

static ccl_status_t tcp_progress(struct ccl__conn *base, int *moved) {
    struct ccl__tcp_conn *c = tcp_conn(base);
    *moved = 0;
    if (c->failed) return c->failed;
    ccl_status_t st = CCL_OK;
    if (c->fd < 0 && (st = ccl__tcp_link_advance(c, moved)) != CCL_OK) return st == CCL_INPROGRESS ? CCL_OK : st;
    if (c->send_count > 0 && ((st = fail_if_peer_done(c)) < 0 || (st = write_frames(c, moved)) < 0)) return st;
    return read_frames(c, moved);
}

static int tcp_flushed(struct ccl__conn *base) { return tcp_conn(base)->send_count == 0; }

static int tcp_wait_fd(struct ccl__conn *base, short *events) {
    struct ccl__tcp_conn *c = tcp_conn(base);
    if (c->fd < 0) return ccl__tcp_link_wait_fd(c, events);
    short ev = 0;
    if (c->recv_ready < c->nslots && !c->peer_done) ev |= POLLIN;
    if (c->send_count > 0) ev |= POLLOUT;
    *events = ev;
    return c->fd;
}

/* Called while a waiter is idle. A hang-up is only a failure once nothing
 * the peer sent before it (possibly its goodbye) is left to read. */
static ccl_status_t tcp_check_peer(struct ccl__conn *base) {
    struct ccl__tcp_conn *c = tcp_conn(base);
    if (c->failed) return c->failed;
    if (c->fd < 0) return ccl__tcp_link_check(c);
    if (c->peer_done) return CCL_OK;
    double silent_s = 0, link_s = c->base.comm->params.link_timeout_s;
    if (link_s > 0 && ccl__sock_silent_s(c->fd, &silent_s) && silent_s > link_s)
        return ccl__tcp_fail_unreachable(c, silent_s);
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL))) return CCL_OK;
    if (c->recv_ready < c->nslots) {
        int moved = 0;
        ccl_status_t st = read_frames(c, &moved);
        if (st < 0 || c->peer_done) return st;
    }
    if (p.revents & POLLERR) {
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err) return fail_io(c, err, "connection");
    }
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return fail_closed(c);
    int unread = 0;
    if (ioctl(c->fd, FIONREAD, &unread) == 0 && unread == 0 && c->stash_len == 0) return fail_closed(c);
    return CCL_OK; /* data (perhaps the goodbye) waits for a free slot */
}

/* ---- life cycle ---- */

static void *alloc_slots(size_t bytes) {
    void *p = NULL;
    /* Page alignment gives the reduction kernels aligned payloads. */
    return posix_memalign(&p, 4096, bytes ? bytes : 1) == 0 ? p : NULL;
}

ccl_status_t ccl__tcp_conn_new(struct ccl_comm *comm, int peer, struct ccl__tcp_conn **out) {
    *out = NULL;
    size_t slot = ccl__tcp_knobs(comm)->slot_bytes;
    int depth = comm->params.slots;
    if (slot == 0 || slot >= CCL__TCP_GOODBYE_BYTES || depth < 1 || (size_t)depth > SIZE_MAX / 2 / slot)
        return ccl__set_error(comm, CCL_ERR_INVALID_ARGUMENT, "tcp: unusable slot geometry (%d slots of %zu bytes)",
                              depth, slot);
    struct ccl__tcp_conn *c = calloc(1, sizeof(*c));
    if (!c) return CCL_ERR_NO_MEMORY;
    c->base = (struct ccl__conn){.t = &ccl__transport_tcp, .comm = comm, .peer = peer, .slot_bytes = slot};
    c->fd = c->dial_fd = c->probe_fd = -1;
    c->nslots = (unsigned)depth;
    *out = c;
    return CCL_OK;
}

/* The slots come with the socket: a pair never used costs no memory. */
ccl_status_t ccl__tcp_conn_link(struct ccl__tcp_conn *c, int fd) {
    struct ccl_comm *comm = c->base.comm;
    size_t slot = c->base.slot_bytes, depth = c->nslots;
    c->send_buf = alloc_slots(depth * slot);
    c->recv_buf = alloc_slots(depth * slot);
    c->send_meta = calloc(depth, sizeof(*c->send_meta));
    c->recv_meta = calloc(depth, sizeof(*c->recv_meta));
    if (!c->send_buf || !c->recv_buf || !c->send_meta || !c->recv_meta)
        return ccl__set_error(comm, CCL_ERR_NO_MEMORY, "tcp: out of memory for the slots of rank %d's connection",
                              c->base.peer);
    int peer = c->base.peer;
    ccl__sock_nonblock(fd);
    ccl__sock_nodelay(fd);
    ccl__sock_keepalive(fd, comm->params.link_timeout_s);
    char why[128];
    size_t want = ccl__tcp_knobs(comm)->socket_bytes;
    if (ccl__sock_buffers(fd, want, why, sizeof(why)))
        CCL_TRACE(CCL__SUB_NET, comm->rank, "tcp: rank %d: socket buffers fixed at %zu bytes", peer, want);
    else if (want)
        CCL_INFO(CCL__SUB_NET, comm->rank, "tcp: rank %d: socket buffers left to the kernel's autotuning (%s)", peer,
                 why);
    c->fd = fd;
    struct ccl__tcp_state *s = *ccl__tstate(comm, &ccl__transport_tcp);
    atomic_store(&s->fds[peer], fd);
    return CCL_OK;
}

void ccl__tcp_conn_free(struct ccl__tcp_conn *c) {
    if (!c) return;
    if (c->fd >= 0) {
        if (!c->failed && c->send_count == 0) {
            struct ccl__slot_meta bye = {.bytes = CCL__TCP_GOODBYE_BYTES};
            /* Best effort: a peer that misses it sees a plain hang-up. */
            if (send(c->fd, &bye, sizeof(bye), MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
                CCL_TRACE(CCL__SUB_NET, c->base.comm->rank, "tcp: goodbye to rank %d: %s", c->base.peer,
                          strerror(errno));
        }
        close(c->fd);
    }
    if (c->dial_fd >= 0) close(c->dial_fd);
    if (c->probe_fd >= 0) close(c->probe_fd);
    free(c->send_buf);
    free(c->recv_buf);
    free(c->send_meta);
    free(c->recv_meta);
    free(c);
}

static void tcp_knobs_load(void *knobs) {
    struct ccl__tcp_knobs *k = knobs;
    k->slot_bytes = (size_t)ccl__env_long("CCL_TCP_SLOT_BYTES", 512 << 10, 4096, 64 << 20) & ~(size_t)63;
    k->socket_bytes = (size_t)ccl__env_long("CCL_TCP_SOCKET_BYTES", 4 << 20, 0, 1L << 30);
}

static size_t tcp_slot_bytes(const void *knobs) { return ((const struct ccl__tcp_knobs *)knobs)->slot_bytes; }

const struct ccl__transport ccl__transport_tcp = {
    .name = "tcp",
    .link_class = "tcp",
    .knobs_bytes = sizeof(struct ccl__tcp_knobs),
    .knobs_load = tcp_knobs_load,
    .can_connect = ccl__tcp_can_connect,
    .local_init = ccl__tcp_local_init,
    .setup = ccl__tcp_setup,
    .connect = ccl__tcp_connect,
    .setup_done = ccl__tcp_setup_done,
    .teardown = ccl__tcp_teardown,
    .send_acquire = tcp_send_acquire,
    .send_commit = tcp_send_commit,
    .send_commit_from = tcp_send_commit_from,
    .recv_into = tcp_recv_into,
    .recv_acquire = tcp_recv_acquire,
    .recv_release = tcp_recv_release,
    .progress = tcp_progress,
    .flushed = tcp_flushed,
    .wait_fd = tcp_wait_fd,
    .check_peer = tcp_check_peer,
    .poison = ccl__tcp_poison,
    .slot_bytes = tcp_slot_bytes,
};
