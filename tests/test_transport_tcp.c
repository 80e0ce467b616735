/* ctest: TIMEOUT 180 */
/*
 * White-box test of the TCP transport. Two ranks are forked processes with
 * hand-built communicators (the transport rig, transport_rig.h); they
 * exchange peer infos and barriers through the rig's channel and drive the
 * transport's phases the way the library does at init. Children never call
 * Check: they count failures (EXPECT) and exit with the count. SIGPIPE
 * keeps its default action (kill), so a write to a dead peer that raised
 * it would fail the test.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/params.h"
#include "core/socket.h"
#include "harness.h"
#include "transports/manager.h"
#include "transports/tcp/tcp.h"
#include "transports/transport.h"
#include "transport_rig.h"
#include "util.h"

#define RUN_DEADLINE_S 90.0
#define COMM_ID 0x0123456789abcdefull
#define SECRET_BYTE 0xa5

static const struct ccl__transport *const tcp = &ccl__transport_tcp;

/* ---- two ranks as processes (the transport rig) ---- */

static void chan_send(struct rig_rank *c, const void *buf, size_t n) { rig_send(c, 1 - c->rank, buf, n); }
static void chan_recv(struct rig_rank *c, void *buf, size_t n) { rig_recv(c, 1 - c->rank, buf, n); }
static void barrier(struct rig_rank *c) { rig_barrier(c); }

/* Rank 0 runs body0, rank 1 body1; each exits 0, or dies of SIGKILL where
 * killed_mask says so. SIGPIPE keeps its default action. */
static void run_pair(const char *tag, rig_body_fn body0, rig_body_fn body1, const void *arg, unsigned killed_mask) {
    struct rig_run run = {.nranks = 2, .tag = tag, .body = {body0, body1}, .arg = arg, .killed_mask = killed_mask,
                          .reap = RIG_REAP_ANY_ORDER, .deadline_s = RUN_DEADLINE_S};
    rig_run(&run);
}

/* ---- a hand-built communicator ---- */

/* Rank r's tcp blob in the communicator's table (written by local_init
 * for this rank, carried by the test's channel for the other). */
static uint8_t *blob_of(struct ccl_comm *comm, int r) { return (uint8_t *)ccl__peer_blob(comm, r, tcp); }

static struct ccl_comm *comm_new(int rank, size_t slot_bytes, int slots, double timeout_s) {
    struct rig_rank me = {.rank = rank, .nranks = 2};
    struct ccl_comm *comm = rig_comm_new(&me, COMM_ID, slots, timeout_s, SECRET_BYTE);
    ccl__tcp_knobs(comm)->slot_bytes = slot_bytes;
    return comm;
}

static void comm_free(struct ccl_comm *comm) {
    tcp->teardown(comm);
    rig_comm_free(comm);
}

static int error_says(struct ccl_comm *comm, const char *words) { return strstr(comm->last_error, words) != NULL; }

/* local_init, the info exchange and setup, then a barrier. */
static void up_to_setup(struct rig_rank *c, struct ccl_comm *comm, uint8_t *use, uint8_t when) {
    struct ccl__peer_info *me = &comm->peers[c->rank];
    me->rank = c->rank;
    me->pid = getpid();
    snprintf(me->hostname, sizeof(me->hostname), "host-of-rank-%d", c->rank);
    EXPECT_OK(&c->t, tcp->local_init(comm, blob_of(comm, c->rank)));
    me->transport_mask = 1u << ccl__transport_index(tcp);
    chan_send(c, me, sizeof(*me));
    chan_send(c, blob_of(comm, c->rank), CCL__TRANSPORT_BLOB_BYTES);
    chan_recv(c, &comm->peers[1 - c->rank], sizeof(*me));
    chan_recv(c, blob_of(comm, 1 - c->rank), CCL__TRANSPORT_BLOB_BYTES);
    use[c->rank] = 0;
    use[1 - c->rank] = tcp->can_connect(&comm->peers[0], &comm->peers[1]) > 0 ? when : 0;
    EXPECT(&c->t, use[1 - c->rank], "both ranks have tcp");
    EXPECT_OK(&c->t, tcp->setup(comm, use));
    barrier(c);
}

/* connect, barrier, setup_done, barrier: the rest of the set-up. */
static void finish_setup(struct rig_rank *c, struct ccl_comm *comm, const uint8_t *use) {
    EXPECT_OK(&c->t, tcp->connect(comm, use, comm->conns));
    barrier(c);
    EXPECT_OK(&c->t, tcp->setup_done(comm));
    struct ccl__conn *cn = comm->conns[1 - c->rank];
    EXPECT(&c->t, cn && cn->t == tcp && cn->comm == comm && cn->peer == 1 - c->rank, "conn to the peer");
    EXPECT(&c->t, cn && cn->slot_bytes == ccl__tcp_knobs(comm)->slot_bytes, "slot size from params");
    EXPECT(&c->t, comm->conns[c->rank] == NULL, "no conn to self");
    /* CCL_TCP_SOCKET_BYTES (4 MiB by default) fixes both buffers of the
     * connection where the kernel's caps allow it: the kernel keeps twice
     * the request. */
    struct ccl__tcp_conn *tc = (struct ccl__tcp_conn *)cn;
    if (use[1 - c->rank] == CCL__USE_ON_FIRST_USE) {
        EXPECT(&c->t, tc && tc->fd < 0 && !tc->send_buf && !tc->recv_buf,
               "a pair linked on first use has no socket and no slots before it");
        return;
    }
    char why[128];
    int probe = socket(AF_INET, SOCK_STREAM, 0), rcv = 0;
    socklen_t len = sizeof(rcv);
    if (cn && probe >= 0 && ccl__sock_buffers(probe, ccl__tcp_knobs(comm)->socket_bytes, why, sizeof(why))) {
        getsockopt(((struct ccl__tcp_conn *)cn)->fd, SOL_SOCKET, SO_RCVBUF, &rcv, &len);
        EXPECT(&c->t, (size_t)rcv == 2 * ccl__tcp_knobs(comm)->socket_bytes, "connection's receive buffer %d, want 2 x %zu",
               rcv, ccl__tcp_knobs(comm)->socket_bytes);
    }
    if (probe >= 0) close(probe);
}

/* when: CCL__USE_AT_INIT, or CCL__USE_ON_FIRST_USE for a pair linked by
 * the first call that waits on it. */
static struct ccl__conn *bring_up_as(struct rig_rank *c, struct ccl_comm *comm, uint8_t when) {
    uint8_t use[2];
    up_to_setup(c, comm, use, when);
    finish_setup(c, comm, use);
    if (c->t.fails) exit(c->t.fails > 100 ? 100 : c->t.fails);
    return comm->conns[1 - c->rank];
}

static struct ccl__conn *bring_up(struct rig_rank *c, struct ccl_comm *comm) {
    return bring_up_as(c, comm, CCL__USE_AT_INIT);
}

/* ---- frame contents ---- */

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint32_t frame_bytes(int src, int i, uint32_t slot) {
    switch (i % 8) {
    case 0: return 0;
    case 1: return slot;
    case 2: return 1;
    case 3: return slot - 1;
    default: return (uint32_t)(mix(((uint64_t)src << 32) | (uint32_t)i) % (slot + 1u));
    }
}

static struct ccl__slot_meta frame_meta(int src, int i, uint32_t slot) {
    return (struct ccl__slot_meta){.bytes = frame_bytes(src, i, slot), .kind = (uint16_t)(i * 7 + src),
                                   .dtype = (uint8_t)(i % 10), .op = (uint8_t)(i % 5), .seq = (uint32_t)i,
                                   .root = src, .count = ((uint64_t)src << 48) ^ ((uint64_t)i * 1000003u)};
}

/* Every 8-byte word differs by position, frame and sender, so a misplaced,
 * shifted or stale byte shows. */
static void fill(uint8_t *p, uint32_t n, int src, int i) {
    uint64_t seed = mix(((uint64_t)(src + 1) << 40) ^ (uint64_t)i);
    uint32_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t v = seed + (uint64_t)k * 0x9e3779b97f4a7c15ull;
        memcpy(p + k, &v, 8);
    }
    for (; k < n; k++) p[k] = (uint8_t)(seed >> (8 * (k % 8))) ^ (uint8_t)k;
}

struct pump {
    int nsend, nrecv; /* frames to send and to receive */
    int sent, received;
    uint8_t *scratch; /* slot_bytes, to rebuild expected contents */
    /* The caller's memory instead of slots (send_commit_from, recv_into):
     * frames are built in out and asked for in in (slot_bytes each). Every
     * fifth receive asks for a size one byte off, which the transport must
     * refuse: that frame lands in a slot, and in stays as it was. */
    int caller_mem;
    uint8_t *out, *in;
};

static void check_frame(struct rig_rank *c, struct pump *p, const void *buf, const struct ccl__slot_meta *m,
                        int src, size_t slot) {
    struct ccl__slot_meta want = frame_meta(src, p->received, (uint32_t)slot);
    if (memcmp(m, &want, sizeof(want)) != 0) {
        EXPECT(&c->t, 0, "frame %d: meta seq %u bytes %u kind %u count %llu, expected seq %u bytes %u kind %u",
               p->received, m->seq, m->bytes, m->kind, (unsigned long long)m->count, want.seq, want.bytes, want.kind);
        return;
    }
    fill(p->scratch, want.bytes, src, p->received);
    EXPECT(&c->t, memcmp(buf, p->scratch, want.bytes) == 0, "frame %d (%u bytes): payload differs", p->received,
           want.bytes);
}

/* Sends and receives at once until both counts are done and everything is
 * written, sleeping in poll() on wait_fd when nothing moves. Returns CCL_OK
 * or the first failure the transport reported. */
static ccl_status_t pump_run(struct rig_rank *c, struct ccl__conn *cn, struct pump *p, double timeout_s) {
    double deadline = ccl__now() + timeout_s;
    uint32_t slot = (uint32_t)cn->slot_bytes;
    ccl_status_t st;
    while (p->sent < p->nsend || p->received < p->nrecv || !tcp->flushed(cn)) {
        int moved = 0;
        if (p->sent < p->nsend) {
            void *buf;
            st = tcp->send_acquire(cn, cn->slot_bytes, &buf);
            if (st == CCL_OK) {
                struct ccl__slot_meta m = frame_meta(c->rank, p->sent, slot);
                fill(p->caller_mem ? p->out : buf, m.bytes, c->rank, p->sent);
                st = p->caller_mem ? tcp->send_commit_from(cn, &m, p->out, NULL) : tcp->send_commit(cn, &m);
                /* what the transport kept, it copied: the caller's memory is free again */
                if (p->caller_mem) memset(p->out, 0xa5, m.bytes);
                if (st < 0) return st;
                p->sent++;
                moved = 1;
            } else if (st != CCL_INPROGRESS) {
                return st;
            }
        }
        if (p->received < p->nrecv) {
            const void *buf;
            struct ccl__slot_meta m;
            uint32_t want = frame_bytes(cn->peer, p->received, slot);
            int refused = p->received % 5 == 4 && want > 0;
            if (p->caller_mem && (st = tcp->recv_into(cn, p->in, refused ? want - 1 : want)) < 0) return st;
            st = tcp->recv_acquire(cn, &buf, &m);
            if (st == CCL_OK) {
                if (p->caller_mem)
                    EXPECT(&c->t, !refused || buf != p->in, "frame %d: a hint of the wrong size was taken",
                           p->received);
                check_frame(c, p, buf, &m, cn->peer, slot);
                if (p->caller_mem) memset(p->in, 0x5a, slot);
                EXPECT_OK(&c->t, tcp->recv_release(cn));
                p->received++;
                moved = 1;
            } else if (st != CCL_INPROGRESS) {
                return st;
            }
        }
        int pm = 0;
        if ((st = tcp->progress(cn, &pm)) < 0) return st;
        if (moved || pm) continue;
        if (ccl__now() > deadline) {
            EXPECT(&c->t, 0, "stalled: sent %d of %d, received %d of %d", p->sent, p->nsend, p->received, p->nrecv);
            return CCL_ERR_TIMEOUT;
        }
        struct pollfd pf = {.events = 0};
        pf.fd = tcp->wait_fd(cn, &pf.events);
        EXPECT(&c->t, pf.fd >= 0, "tcp has a descriptor to wait on");
        poll(&pf, 1, 100);
        if ((st = tcp->check_peer(cn)) < 0) return st;
    }
    return CCL_OK;
}

/* ---- streaming ---- */

static int stranger(struct rig_rank *c, const union ccl__sa *at, const void *bytes, size_t n, int then_close);

struct stream_cfg {
    size_t slot_bytes;
    int slots;
    int frames;
    int caller_mem; /* frames from and into the caller's memory */
    int lazy;       /* the pair is linked by the pump, with a stranger at the listener first */
};

static const struct stream_cfg stream_cfgs[] = {
    {64 << 10, 4, 3000, 0, 0}, /* the common shape */
    {4096, 1, 3000, 0, 0},     /* one slot: no read-ahead, no gathering */
    {64, 3, 6000, 0, 0},       /* tiny slots: many frames per system call */
    {1 << 20, 8, 300, 0, 0},   /* big slots: frames larger than socket buffers */
    {64 << 10, 4, 3000, 1, 0}, /* the same from and into the caller's memory */
    {4096, 1, 3000, 1, 0},
    {64, 3, 6000, 1, 0},       /* with the stash taking small frames */
    {1 << 20, 8, 300, 1, 0},   /* partial writes: the rest copied into the slot */
    {64 << 10, 4, 3000, 0, 1}, /* linked on first use */
    {1 << 20, 8, 300, 1, 1},
};

/* Both ranks stream at once; then rank 0 tears down and rank 1 checks that
 * a goodbye is not a failure but a receive after it is. */
static void stream_body(struct rig_rank *c) {
    const struct stream_cfg *cfg = c->arg;
    struct ccl_comm *comm = comm_new(c->rank, cfg->slot_bytes, cfg->slots, 30);
    struct ccl__conn *cn = bring_up_as(c, comm, cfg->lazy ? CCL__USE_ON_FIRST_USE : CCL__USE_AT_INIT);
    if (cfg->lazy && c->rank == 1) { /* the listener stays open after set-up: strangers go, the peer links */
        union ccl__sa at;
        memcpy(&at, blob_of(comm, 0), sizeof(at));
        uint32_t junk[4] = {0xabababab, 1, 2, 3};
        int fd = stranger(c, &at, junk, sizeof(junk), 0);
        if (fd >= 0) close(fd);
    }
    struct pump p = {.nsend = cfg->frames, .nrecv = cfg->frames, .scratch = malloc(cfg->slot_bytes),
                     .caller_mem = cfg->caller_mem, .out = malloc(cfg->slot_bytes), .in = malloc(cfg->slot_bytes)};
    EXPECT_OK(&c->t, pump_run(c, cn, &p, 30));
    EXPECT(&c->t, p.received == cfg->frames && p.sent == cfg->frames, "all frames through");
    barrier(c);
    EXPECT_OK(&c->t, tcp->check_peer(cn));
    barrier(c); /* no goodbye may be in flight while the peer is checked */
    char b = 'x';
    if (c->rank == 0) {
        comm_free(comm);
        chan_send(c, &b, 1);
    } else {
        chan_recv(c, &b, 1);
        struct pollfd pf = {.fd = -1};
        pf.fd = tcp->wait_fd(cn, &pf.events);
        EXPECT(&c->t, pf.events == POLLIN, "nothing queued, a slot free: wait for input only (events %#x)",
               (unsigned)pf.events);
        EXPECT(&c->t, poll(&pf, 1, 5000) == 1, "the goodbye arrives");
        EXPECT_OK(&c->t, tcp->check_peer(cn));
        const void *buf;
        struct ccl__slot_meta m;
        EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, tcp->recv_acquire(cn, &buf, &m));
        EXPECT(&c->t, error_says(comm, "rank 0 (host-of-rank-0) closed its connection"), "error: %s",
               comm->last_error);
        void *sbuf;
        EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, tcp->send_acquire(cn, cn->slot_bytes, &sbuf));
        comm_free(comm);
    }
    free(p.scratch);
    free(p.out);
    free(p.in);
}

START_TEST(stream_both_ways) {
    char tag[80];
    snprintf(tag, sizeof(tag), "stream %zu bytes x %d slots%s%s", stream_cfgs[_i].slot_bytes, stream_cfgs[_i].slots,
             stream_cfgs[_i].caller_mem ? " (caller's memory)" : "", stream_cfgs[_i].lazy ? " (on first use)" : "");
    run_pair(tag, stream_body, stream_body, &stream_cfgs[_i], 0);
}
END_TEST

/* Rank 1 reads nothing for a while: rank 0's sends back up until
 * send_acquire says INPROGRESS, with POLLOUT wanted; rank 1's slots fill
 * and it stops wanting POLLIN. Then everything drains, intact. */
static void backpressure_body(struct rig_rank *c) {
    const int slots = 4, frames = 2000; /* ~64 MB: more than socket buffers hold */
    struct ccl_comm *comm = comm_new(c->rank, 64 << 10, slots, 30);
    struct ccl__conn *cn = bring_up(c, comm);
    struct pump p = {.scratch = malloc(64 << 10)};
    char b = 'g';
    struct pollfd pf = {.fd = -1};
    if (c->rank == 0) {
        void *buf;
        ccl_status_t st = CCL_OK;
        for (double end = ccl__now() + 10; p.sent < frames && ccl__now() < end;) {
            if ((st = tcp->send_acquire(cn, cn->slot_bytes, &buf)) != CCL_OK) break;
            struct ccl__slot_meta m = frame_meta(0, p.sent, 64 << 10);
            fill(buf, m.bytes, 0, p.sent);
            EXPECT_OK(&c->t, tcp->send_commit(cn, &m));
            p.sent++;
        }
        EXPECT_STATUS(&c->t, CCL_INPROGRESS, st);
        EXPECT(&c->t, p.sent < frames, "the socket took all %d frames", p.sent);
        EXPECT(&c->t, !tcp->flushed(cn), "frames wait to be written");
        pf.fd = tcp->wait_fd(cn, &pf.events);
        EXPECT(&c->t, pf.events & POLLOUT, "waits for room to write");
        chan_send(c, &b, 1);
        p.nsend = frames;
        EXPECT_OK(&c->t, pump_run(c, cn, &p, 30));
    } else {
        chan_recv(c, &b, 1);
        /* Read ahead (without consuming) until every slot holds a frame. */
        int moved = 0, moved_once = 0;
        for (double end = ccl__now() + 5; ccl__now() < end;) {
            EXPECT_OK(&c->t, tcp->progress(cn, &moved));
            moved_once |= moved;
            pf.fd = tcp->wait_fd(cn, &pf.events);
            if (!(pf.events & POLLIN)) break;
            poll(&pf, 1, 100);
        }
        EXPECT(&c->t, moved_once, "frames were waiting");
        EXPECT(&c->t, !(pf.events & POLLIN), "all %d slots full: no reading wanted (events %#x)", slots,
               (unsigned)pf.events);
        p.nrecv = frames;
        EXPECT_OK(&c->t, pump_run(c, cn, &p, 30));
    }
    barrier(c);
    comm_free(comm);
    free(p.scratch);
}

START_TEST(backpressure) { run_pair("backpressure", backpressure_body, backpressure_body, NULL, 0); }
END_TEST

/* ---- the caller's memory, step by step ---- */

#define BIG_FRAME (1u << 20)

/* Polls recv_acquire (progressing) until a frame is there. */
static ccl_status_t await_frame(struct ccl__conn *cn, const void **buf, struct ccl__slot_meta *m) {
    for (double end = ccl__now() + 10; ccl__now() < end;) {
        ccl_status_t st = tcp->recv_acquire(cn, buf, m);
        if (st != CCL_INPROGRESS) return st;
        struct pollfd pf = {.events = 0};
        pf.fd = tcp->wait_fd(cn, &pf.events);
        poll(&pf, 1, 100);
    }
    return CCL_ERR_TIMEOUT;
}

/* Commits frame i of BIG_FRAME bytes from the caller's memory, which is
 * scribbled over at once: the transport must have what it still needs. */
static void send_big_from_caller(struct rig_rank *c, struct ccl__conn *cn, uint8_t *out, int i, uint32_t bytes) {
    void *slot;
    EXPECT_OK(&c->t, tcp->send_acquire(cn, cn->slot_bytes, &slot));
    struct ccl__slot_meta m = frame_meta(0, i, BIG_FRAME);
    m.bytes = bytes;
    fill(out, bytes, 0, i);
    EXPECT_OK(&c->t, tcp->send_commit_from(cn, &m, out, NULL));
    memset(out, 0xa5, bytes);
}

static void expect_big(struct rig_rank *c, struct ccl__conn *cn, const uint8_t *in, int i, uint32_t bytes,
                       int in_caller) {
    const void *buf;
    struct ccl__slot_meta m;
    EXPECT_OK(&c->t, await_frame(cn, &buf, &m));
    EXPECT(&c->t, m.bytes == bytes && m.seq == (uint32_t)i, "frame %d: %u bytes, seq %u", i, m.bytes, m.seq);
    EXPECT(&c->t, (buf == in) == in_caller, "frame %d: in %s, expected %s", i,
           buf == in ? "the caller's memory" : "a slot", in_caller ? "the caller's memory" : "a slot");
    uint8_t *want = malloc(BIG_FRAME);
    fill(want, bytes, 0, i);
    EXPECT(&c->t, memcmp(buf, want, bytes) == 0, "frame %d: payload differs", i);
    free(want);
    EXPECT_OK(&c->t, tcp->recv_release(cn));
}

/* Rank 0 sends, rank 1 receives, in rounds the channel keeps in step:
 * 1. a frame asked for before it was sent lands in the caller's memory;
 * 2. asked for with the wrong size, it lands in a slot, the memory untouched;
 * 3. a hint withdrawn before anything arrived leaves the frame to a slot;
 * 4. a frame larger than the socket buffers, sent from the caller's memory
 *    while nobody reads: the rest is copied, the caller's memory reused;
 * 5. a receive withdrawn once part of its frame is in the caller's memory
 *    fails the connection, instead of losing those bytes silently. */
static void caller_memory_body(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(c->rank, BIG_FRAME, 4, 30);
    ccl__tcp_knobs(comm)->socket_bytes = 64 << 10; /* a big frame cannot be in flight whole */
    struct ccl__conn *cn = bring_up(c, comm);
    uint8_t *mem = malloc(BIG_FRAME);
    char b = 'g';
    if (c->rank == 0) {
        for (int round = 1; round <= 3; round++) {
            chan_recv(c, &b, 1);
            send_big_from_caller(c, cn, mem, round, 50000);
            EXPECT(&c->t, tcp->flushed(cn), "round %d: 50000 bytes went straight from the caller's memory", round);
        }
        send_big_from_caller(c, cn, mem, 4, BIG_FRAME);
        EXPECT(&c->t, !tcp->flushed(cn), "round 4: the socket took the whole frame");
        chan_send(c, &b, 1);
        struct pump p = {0};
        EXPECT_OK(&c->t, pump_run(c, cn, &p, 30)); /* writes the rest */
        chan_recv(c, &b, 1);
        send_big_from_caller(c, cn, mem, 5, BIG_FRAME);
        struct pump q = {0};
        pump_run(c, cn, &q, 30); /* the peer fails its side: how this ends is not the point */
        chan_recv(c, &b, 1);
    } else {
        const size_t hdr = sizeof(struct ccl__slot_meta);
        struct ccl__tcp_conn *tc = (struct ccl__tcp_conn *)cn;
        memset(mem, 0x5a, BIG_FRAME);
        EXPECT_OK(&c->t, tcp->recv_into(cn, mem, 50000));
        chan_send(c, &b, 1);
        expect_big(c, cn, mem, 1, 50000, 1);

        memset(mem, 0x5a, BIG_FRAME);
        EXPECT_OK(&c->t, tcp->recv_into(cn, mem, 49999));
        chan_send(c, &b, 1);
        expect_big(c, cn, mem, 2, 50000, 0);
        EXPECT(&c->t, mem[0] == 0x5a && mem[49999] == 0x5a, "a refused hint left the caller's memory alone");

        EXPECT_OK(&c->t, tcp->recv_into(cn, mem, 50000));
        EXPECT_OK(&c->t, tcp->recv_into(cn, NULL, 0));
        chan_send(c, &b, 1);
        expect_big(c, cn, mem, 3, 50000, 0);

        chan_recv(c, &b, 1);
        expect_big(c, cn, mem, 4, BIG_FRAME, 0);

        EXPECT_OK(&c->t, tcp->recv_into(cn, mem, BIG_FRAME));
        chan_send(c, &b, 1);
        int moved = 0;
        for (double end = ccl__now() + 10; tc->recv_got <= hdr && ccl__now() < end;) {
            EXPECT_OK(&c->t, tcp->progress(cn, &moved));
            poll(NULL, 0, 1);
        }
        EXPECT(&c->t, tc->recv_got > hdr && tc->recv_ready == 0, "part of frame 5 arrived (%zu bytes)", tc->recv_got);
        EXPECT_STATUS(&c->t, CCL_ERR_INTERNAL, tcp->recv_into(cn, NULL, 0));
        EXPECT(&c->t, error_says(comm, "abandoned in mid-frame"), "error: %s", comm->last_error);
        const void *buf;
        struct ccl__slot_meta m;
        EXPECT_STATUS(&c->t, CCL_ERR_INTERNAL, tcp->recv_acquire(cn, &buf, &m));
        chan_send(c, &b, 1);
    }
    comm_free(comm);
    free(mem);
}

START_TEST(caller_memory) { run_pair("caller's memory", caller_memory_body, caller_memory_body, NULL, 0); }
END_TEST

/* ---- strangers at set-up ---- */

static int stranger(struct rig_rank *c, const union ccl__sa *at, const void *bytes, size_t n, int then_close) {
    int fd = -1;
    EXPECT_OK(&c->t, ccl__sock_connect(at, ccl__now() + 5, &fd));
    if (fd >= 0 && n) EXPECT_OK(&c->t, ccl__sock_send_all(fd, bytes, n, ccl__now() + 5));
    if (fd >= 0 && then_close) shutdown(fd, SHUT_WR);
    return fd;
}

/* The acceptor must have closed fd: end-of-file (or a reset) soon. */
static void expect_dropped(struct rig_rank *c, int fd, const char *what) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    char b;
    EXPECT(&c->t, poll(&pf, 1, 5000) == 1, "%s: still open", what);
    ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT);
    EXPECT(&c->t, r == 0 || (r < 0 && errno == ECONNRESET), "%s: read gave %zd (%s), not end-of-file", what, r,
           r < 0 ? strerror(errno) : "data");
    close(fd);
}

static void strangers_rank0(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(0, 4096, 4, 30);
    uint8_t use[2];
    up_to_setup(c, comm, use, CCL__USE_AT_INIT);
    double t0 = ccl__now();
    finish_setup(c, comm, use);
    double took = ccl__now() - t0;
    EXPECT(&c->t, took < 3.0, "set-up took %.2f s: a silent stranger delayed it", took);
    struct pump p = {.nsend = 100, .nrecv = 100, .scratch = malloc(4096)};
    EXPECT_OK(&c->t, pump_run(c, comm->conns[1], &p, 20));
    barrier(c);
    comm_free(comm);
    free(p.scratch);
}

static void strangers_rank1(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(1, 4096, 4, 30);
    uint8_t use[2];
    up_to_setup(c, comm, use, CCL__USE_AT_INIT);
    union ccl__sa at;
    memcpy(&at, blob_of(comm, 0), sizeof(at));
    struct ccl__tcp_hello good = {.magic = CCL__TCP_HELLO_MAGIC, .version = CCL__TCP_HELLO_VERSION,
                                  .comm_id = COMM_ID, .rank = 1};
    memset(good.secret, SECRET_BYTE, sizeof(good.secret));
    struct ccl__tcp_hello h;
    uint8_t garbage[100];
    memset(garbage, 0xab, sizeof(garbage));
    struct {
        const char *what;
        int fd;
    } s[9];
    int n = 0;
    h = good, h.secret[CCL__SECRET_BYTES - 1] ^= 1;
    s[n].what = "wrong secret", s[n++].fd = stranger(c, &at, &h, sizeof(h), 0);
    s[n].what = "garbage", s[n++].fd = stranger(c, &at, garbage, sizeof(garbage), 0);
    s[n].what = "silent", s[n++].fd = stranger(c, &at, NULL, 0, 0);
    h = good, h.comm_id ^= 1;
    s[n].what = "wrong comm id", s[n++].fd = stranger(c, &at, &h, sizeof(h), 0);
    h = good, h.rank = 7;
    s[n].what = "rank out of range", s[n++].fd = stranger(c, &at, &h, sizeof(h), 0);
    h = good, h.rank = 0;
    s[n].what = "unexpected rank", s[n++].fd = stranger(c, &at, &h, sizeof(h), 0);
    h = good, h.version = 99;
    s[n].what = "wrong version", s[n++].fd = stranger(c, &at, &h, sizeof(h), 0);
    s[n].what = "half a hello, then close", s[n++].fd = stranger(c, &at, &good, 20, 1);
    s[n].what = "half a hello, then silence", s[n++].fd = stranger(c, &at, &good, 20, 0);
    finish_setup(c, comm, use);
    for (int i = 0; i < n; i++)
        if (s[i].fd >= 0) expect_dropped(c, s[i].fd, s[i].what);
    struct pump p = {.nsend = 100, .nrecv = 100, .scratch = malloc(4096)};
    EXPECT_OK(&c->t, pump_run(c, comm->conns[0], &p, 20));
    barrier(c);
    comm_free(comm);
    free(p.scratch);
}

START_TEST(strangers_dropped) { run_pair("strangers", strangers_rank0, strangers_rank1, NULL, 0); }
END_TEST

/* Many more silent strangers than rank 0 keeps places for, all connected
 * before the real peer: the oldest are evicted at once, so the real peer
 * gets in without waiting for them to time out (before, places were freed
 * only after half a second of silence: 1000 strangers delayed set-up 8 s). */
#define FLOOD 1000

static void flood_rank0(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(0, 4096, 4, 30);
    uint8_t use[2];
    up_to_setup(c, comm, use, CCL__USE_AT_INIT);
    double t0 = ccl__now();
    finish_setup(c, comm, use);
    double took = ccl__now() - t0;
    EXPECT(&c->t, took < 3.0, "set-up took %.2f s behind %d silent strangers", took, FLOOD);
    barrier(c);
    comm_free(comm);
}

static void flood_rank1(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(1, 4096, 4, 30);
    uint8_t use[2];
    up_to_setup(c, comm, use, CCL__USE_AT_INIT);
    union ccl__sa at;
    memcpy(&at, blob_of(comm, 0), sizeof(at));
    static int fds[FLOOD];
    util_raise_fd_limit(2 * FLOOD + 256);
    for (int i = 0; i < FLOOD; i++) fds[i] = stranger(c, &at, NULL, 0, 0);
    finish_setup(c, comm, use);
    barrier(c);
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0) close(fds[i]);
    comm_free(comm);
}

START_TEST(stranger_flood) { run_pair("stranger flood", flood_rank0, flood_rank1, NULL, 0); }
END_TEST

/* ---- failures ---- */

/* Rank 1 sends frames bigger than rank 0's slots (its own slots are
 * bigger): rank 0 must call that garbage, not overrun its buffer. */
static void malformed_body(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(c->rank, c->rank == 0 ? 4096 : 8192, 4, 30);
    struct ccl__conn *cn = bring_up(c, comm);
    char b = 'm';
    if (c->rank == 1) {
        void *buf;
        EXPECT_OK(&c->t, tcp->send_acquire(cn, cn->slot_bytes, &buf));
        memset(buf, 1, 8000);
        struct ccl__slot_meta m = {.bytes = 8000, .seq = 1};
        EXPECT_OK(&c->t, tcp->send_commit(cn, &m));
        EXPECT(&c->t, tcp->flushed(cn), "one small frame is written at once");
        chan_recv(c, &b, 1);
    } else {
        const void *buf;
        struct ccl__slot_meta m;
        ccl_status_t st = CCL_INPROGRESS;
        for (double end = ccl__now() + 5; st == CCL_INPROGRESS && ccl__now() < end;)
            st = tcp->recv_acquire(cn, &buf, &m);
        EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, st);
        EXPECT(&c->t, error_says(comm, "malformed"), "error: %s", comm->last_error);
        void *sbuf;
        EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, tcp->send_acquire(cn, cn->slot_bytes, &sbuf)); /* the failure sticks */
        EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, tcp->check_peer(cn));
        chan_send(c, &b, 1);
    }
    comm_free(comm);
}

START_TEST(malformed_frame) { run_pair("malformed", malformed_body, malformed_body, NULL, 0); }
END_TEST

/* How rank 0 uses the connection while rank 1 dies of SIGKILL mid-stream:
 * only receiving, only sending, or both. */
struct kill_cfg {
    int rank0_sends, rank0_receives;
};
static const struct kill_cfg kill_cfgs[] = {{0, 1}, {1, 0}, {1, 1}};

static void killed_body(struct rig_rank *c) {
    const struct kill_cfg *k = c->arg;
    struct ccl_comm *comm = comm_new(c->rank, 16 << 10, 4, 30);
    struct ccl__conn *cn = bring_up(c, comm);
    struct pump p = {.scratch = malloc(16 << 10)};
    if (c->rank == 1) {
        p.nsend = 200;
        EXPECT_OK(&c->t, pump_run(c, cn, &p, 20));
        fflush(NULL);
        raise(SIGKILL);
    }
    p.nsend = k->rank0_sends ? 1 << 30 : 0;
    p.nrecv = k->rank0_receives ? 1 << 30 : 0;
    double t0 = ccl__now();
    EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, pump_run(c, cn, &p, 20));
    EXPECT(&c->t, ccl__now() - t0 < 10, "noticed the death after %.1f s", ccl__now() - t0);
    EXPECT(&c->t, error_says(comm, "rank 1 (host-of-rank-1)"), "error: %s", comm->last_error);
    EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, tcp->check_peer(cn));
    int moved;
    EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, tcp->progress(cn, &moved));
    comm_free(comm);
    free(p.scratch);
}

START_TEST(killed_peer) { run_pair("killed peer", killed_body, killed_body, &kill_cfgs[_i], 1u << 1); }
END_TEST

/* A pair linked on first use whose peer dies before that use: the rank
 * left fails within seconds, naming the dead rank, whichever side it is.
 * The lower rank (rank 0) has no socket to see the death on: its probe of
 * rank 1's listener is refused. The higher rank's dial is refused. */
static void killed_before_use_body(struct rig_rank *c) {
    const int *victim = c->arg;
    struct ccl_comm *comm = comm_new(c->rank, 16 << 10, 4, 30);
    struct ccl__conn *cn = bring_up_as(c, comm, CCL__USE_ON_FIRST_USE);
    barrier(c);
    if (c->rank == *victim) {
        fflush(NULL);
        raise(SIGKILL);
    }
    char b;
    EXPECT(&c->t, recv(c->chan[1 - c->rank], &b, 1, 0) == 0, "the victim's channel closes as it dies");
    struct pump p = {.nrecv = 1, .scratch = malloc(16 << 10)};
    double t0 = ccl__now();
    EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, pump_run(c, cn, &p, 20));
    double took = ccl__now() - t0;
    EXPECT(&c->t, took < 5, "noticed the death after %.1f s", took);
    char says[64];
    snprintf(says, sizeof(says), "rank %d (host-of-rank-%d) is gone", *victim, *victim);
    EXPECT(&c->t, error_says(comm, says), "error: %s", comm->last_error);
    int culprit = (int)atomic_load(&comm->culprit), cause = (int)atomic_load(&comm->culprit_cause);
    EXPECT(&c->t, culprit == *victim + 1 && cause == CCL__CULPRIT_EXITED,
           "the dead rank is blamed as exited (culprit %d, cause %d)", culprit, cause);
    comm_free(comm);
    free(p.scratch);
}

static const int victims[] = {0, 1};

START_TEST(killed_before_first_use) {
    run_pair(victims[_i] ? "higher rank killed before first use" : "lower rank killed before first use",
             killed_before_use_body, killed_before_use_body, &victims[_i], 1u << victims[_i]);
}
END_TEST

/* Rank 0 fails (its communicator is marked failed first, as ccl__comm_fail
 * does) and poisons: rank 1, blocked on a receive, hears of it at once,
 * and rank 0's own error message is not replaced by the hang-up. */
static void poison_body(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(c->rank, 16 << 10, 4, 30);
    struct ccl__conn *cn = bring_up(c, comm);
    double when;
    if (c->rank == 0) {
        atomic_store(&comm->failed_status, CCL_ERR_ABORTED);
        snprintf(comm->last_error, sizeof(comm->last_error), "aborted by the test");
        barrier(c);
        when = ccl__now();
        tcp->poison(comm, CCL_ERR_ABORTED);
        chan_send(c, &when, sizeof(when));
        int moved;
        ccl_status_t st = CCL_OK;
        for (int i = 0; i < 100 && st == CCL_OK; i++) st = tcp->progress(cn, &moved);
        EXPECT(&c->t, st < 0, "own progress fails after poison");
        EXPECT(&c->t, error_says(comm, "aborted by the test"), "message kept: %s", comm->last_error);
        barrier(c);
    } else {
        struct pump p = {.nrecv = 1 << 30};
        barrier(c);
        EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, pump_run(c, cn, &p, 20));
        double now = ccl__now();
        chan_recv(c, &when, sizeof(when));
        EXPECT(&c->t, now - when < 2.0, "noticed the poison after %.2f s", now - when);
        barrier(c);
    }
    comm_free(comm);
}

START_TEST(poison_wakes_peer) { run_pair("poison", poison_body, poison_body, NULL, 0); }
END_TEST

/* connect must give up at CCL_TIMEOUT (0.5 s in these tests), not much
 * later, with an error naming the missing rank in `names_missing`'s words. */
static void expect_connect_timeout(struct rig_rank *c, struct ccl_comm *comm, const uint8_t *use,
                                   const char *names_missing) {
    double t0 = ccl__now();
    EXPECT_STATUS(&c->t, CCL_ERR_TIMEOUT, tcp->connect(comm, use, comm->conns));
    double took = ccl__now() - t0;
    EXPECT(&c->t, took >= 0.45 && took < 3.0, "gave up after %.2f s", took);
    EXPECT(&c->t, error_says(comm, names_missing), "error: %s", comm->last_error);
}

/* Rank 1 never connects: rank 0's accept gives up at CCL_TIMEOUT and says
 * who is missing; both tear down without trouble (rank 1 never connected). */
static void accept_timeout_body(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(c->rank, 4096, 4, 0.5);
    uint8_t use[2];
    up_to_setup(c, comm, use, CCL__USE_AT_INIT);
    char b = 't';
    if (c->rank == 0) {
        expect_connect_timeout(c, comm, use, "rank(s) 1 never connected");
        EXPECT(&c->t, comm->conns[1] == NULL, "no conn");
        chan_send(c, &b, 1);
    } else {
        chan_recv(c, &b, 1);
    }
    comm_free(comm);
}

START_TEST(accept_timeout) { run_pair("accept timeout", accept_timeout_body, accept_timeout_body, NULL, 0); }
END_TEST

/* Rank 0's listener is gone before rank 1 connects: rank 1 retries the
 * refused connection until CCL_TIMEOUT, then names rank 0. */
static void dial_timeout_body(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(c->rank, 4096, 4, 0.5);
    uint8_t use[2];
    up_to_setup(c, comm, use, CCL__USE_AT_INIT);
    char b = 'd';
    if (c->rank == 0) {
        EXPECT_OK(&c->t, tcp->setup_done(comm));
        chan_send(c, &b, 1);
        chan_recv(c, &b, 1);
    } else {
        chan_recv(c, &b, 1);
        expect_connect_timeout(c, comm, use, "rank 0 (host-of-rank-0)");
        chan_send(c, &b, 1);
    }
    comm_free(comm);
}

START_TEST(dial_timeout) { run_pair("dial timeout", dial_timeout_body, dial_timeout_body, NULL, 0); }
END_TEST

/* ---- in one process ---- */

struct aborter {
    struct ccl_comm *comm;
    double delay_s;
};

static void *abort_later(void *arg) {
    struct aborter *a = arg;
    struct timespec ts = {0, (long)(a->delay_s * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&a->comm->aborted, 1);
    tcp->poison(a->comm, CCL_ERR_ABORTED);
    return NULL;
}

/* ccl_comm_abort from another thread ends a set-up that waits for a peer. */
START_TEST(abort_during_accept) {
    struct ccl_comm *comm = comm_new(0, 4096, 4, 30);
    ck_assert_int_eq(tcp->local_init(comm, blob_of(comm, 0)), CCL_OK);
    uint8_t use[2] = {0, CCL__USE_AT_INIT};
    ck_assert_int_eq(tcp->setup(comm, use), CCL_OK);
    struct aborter a = {.comm = comm, .delay_s = 0.2};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, abort_later, &a), 0);
    double t0 = ccl__now();
    ck_assert_int_eq(tcp->connect(comm, use, comm->conns), CCL_ERR_ABORTED);
    double took = ccl__now() - t0;
    ck_assert_msg(took >= 0.15 && took < 2.0, "took %.2f s", took);
    pthread_join(th, NULL);
    comm_free(comm);
}
END_TEST

START_TEST(local_init_and_teardown) {
    /* The blob holds the listening address, on the bootstrap address. */
    struct ccl_comm *comm = comm_new(0, 4096, 4, 30);
    uint8_t blob[CCL__TRANSPORT_BLOB_BYTES];
    ck_assert_int_eq(tcp->local_init(comm, blob), CCL_OK);
    union ccl__sa a;
    memcpy(&a, blob, sizeof(a));
    char s[80];
    ccl__sa_str(&a, s, sizeof(s));
    ck_assert_msg(strncmp(s, "127.0.0.1:", 10) == 0 && ntohs(a.in.sin_port) != 0, "blob address %s", s);
    int fd;
    ck_assert_int_eq(ccl__sock_connect(&a, ccl__now() + 5, &fd), CCL_OK);
    close(fd);
    ck_assert_int_eq(tcp->local_init(comm, blob), CCL_ERR_INTERNAL);
    tcp->teardown(comm);
    ck_assert_ptr_null(*ccl__tstate(comm, tcp));
    tcp->teardown(comm); /* twice, and never set up: both harmless */
    tcp->poison(comm, CCL_ERR_ABORTED);

    /* An address that is not this host's: a status and a message. */
    snprintf(comm->boot_addr, sizeof(comm->boot_addr), "192.0.2.1");
    ck_assert_int_eq(tcp->local_init(comm, blob), CCL_ERR_SYSTEM);
    ck_assert_msg(error_says(comm, "cannot listen on 192.0.2.1"), "error: %s", comm->last_error);
    uint8_t use[2] = {0, CCL__USE_AT_INIT};
    ck_assert_int_eq(tcp->connect(comm, use, comm->conns), CCL_ERR_INTERNAL);
    tcp->teardown(comm);

    /* No bootstrap address: this host's own. */
    comm->boot_addr[0] = 0;
    ck_assert_int_eq(tcp->local_init(comm, blob), CCL_OK);
    memcpy(&a, blob, sizeof(a));
    ck_assert_int_eq(a.sa.sa_family, AF_INET);
    comm_free(comm);
}
END_TEST

START_TEST(can_connect_any_pair) {
    /* Any two ranks, on any hosts (whether both have tcp at all is the
     * planner's question), below shm's score on one host. */
    struct ccl__peer_info a = {0}, b = a;
    snprintf(a.host_id, sizeof(a.host_id), "hostA");
    snprintf(b.host_id, sizeof(b.host_id), "hostB");
    ck_assert_int_eq(tcp->can_connect(&a, &b), 1);
    ck_assert_int_eq(tcp->can_connect(&a, &a), 1);
    ck_assert_int_lt(tcp->can_connect(&a, &a), ccl__transport_by_name("shm")->can_connect(&a, &a));
    ck_assert_str_eq(tcp->name, "tcp");
    ck_assert_str_eq(tcp->link_class, "tcp");
    ck_assert(tcp->knobs_load && tcp->knobs_bytes == sizeof(struct ccl__tcp_knobs) && tcp->slot_bytes);
    ck_assert_ptr_eq(ccl__transport_by_name("tcp"), tcp);
    ck_assert_ptr_eq(ccl__transports[ccl__transport_index(tcp)], tcp);
}
END_TEST

static Suite *tcp_suite(void) {
    Suite *s = suite_create("transport_tcp");
    TCase *local = tcase_create("local");
    tcase_add_test(local, can_connect_any_pair);
    tcase_add_test(local, local_init_and_teardown);
    tcase_add_test(local, abort_during_accept);
    suite_add_tcase(s, local);
    TCase *data = tcase_create("data");
    tcase_add_loop_test(data, stream_both_ways, 0, (int)(sizeof(stream_cfgs) / sizeof(stream_cfgs[0])));
    tcase_add_test(data, backpressure);
    tcase_add_test(data, caller_memory);
    suite_add_tcase(s, data);
    TCase *faults = tcase_create("faults");
    tcase_add_test(faults, strangers_dropped);
    tcase_add_test(faults, stranger_flood);
    tcase_add_test(faults, malformed_frame);
    tcase_add_loop_test(faults, killed_peer, 0, (int)(sizeof(kill_cfgs) / sizeof(kill_cfgs[0])));
    tcase_add_loop_test(faults, killed_before_first_use, 0, 2);
    tcase_add_test(faults, poison_wakes_peer);
    tcase_add_test(faults, accept_timeout);
    tcase_add_test(faults, dial_timeout);
    suite_add_tcase(s, faults);
    return s;
}

int main(void) { return harness_main(tcp_suite()); }
