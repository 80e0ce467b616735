/* ctest: TIMEOUT 180 */
/*
 * White-box test of the shared-memory transport. Ranks are forked processes
 * with hand-built communicators (the transport rig, transport_rig.h); they
 * exchange peer infos and barriers through the rig's channel and drive the
 * transport's phases directly, the way the library does at init. Children never call Check:
 * they count failures (EXPECT) and exit with the count.
 */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <linux/futex.h>
#include <limits.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/params.h"
#include "harness.h"
#include "transports/manager.h"
#include "transports/shm/shm.h"
#include "transports/transport.h"
#include "transport_rig.h"

#define MAX_RANKS 3
#define STALL_S 30.0
#define SECRET_BYTE 0x5a

static const struct ccl__transport *const shm = &ccl__transport_shm;

/* ---- ranks as processes (the transport rig) ---- */

/* This run's segment prefix: every rank's, set before the ranks fork. */
static char run_prefix[32];

static void barrier(struct rig_rank *c) { rig_barrier(c); }

/* This rank's shm blob in the hand-built communicator's table. */
static uint8_t *my_blob(struct ccl_comm *comm) {
    return (uint8_t *)ccl__peer_blob(comm, comm->rank, shm);
}

/* The bootstrap's job: every rank's info and shm blob to every rank. */
static void allgather_info(struct rig_rank *c, struct ccl_comm *comm, const struct ccl__peer_info *mine) {
    rig_exchange(c, comm, shm, mine);
}

/* A failed run must not leave its segments for the next one. */
static void remove_segments(const char *prefix) {
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    char name[300];
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            snprintf(name, sizeof(name), "/%s", e->d_name);
            shm_unlink(name);
        }
    closedir(d);
}

/* Forks nranks ranks running body, waits for them, and asserts that each
 * exited 0 and that no segment with this run's prefix is left. */
static void run_ranks(int nranks, const char *tag, rig_body_fn body, const void *arg, enum rig_reap reap) {
    snprintf(run_prefix, sizeof(run_prefix), "shmt%d-%s", (int)getpid(), tag);
    struct rig_run run = {.nranks = nranks, .tag = tag, .body = {body}, .arg = arg, .reap = reap,
                          .ignore_sigpipe = 1};
    rig_run(&run);
    int left = harness_shm_count(run_prefix);
    if (left) remove_segments(run_prefix);
    ck_assert_msg(left == 0, "%d /dev/shm entries named %s* left behind", left, run_prefix);
}

/* ---- a hand-built communicator ---- */

/* The private wake words again (as the connection manager does), then
 * the transport's teardown. */
static void shm_down(struct ccl_comm *comm) {
    ccl__conns_private_wake(comm);
    shm->teardown(comm);
}

static struct ccl_comm *comm_new(const struct rig_rank *c, uint64_t comm_id, int slots, size_t slot_bytes) {
    struct ccl_comm *comm = rig_comm_new(c, comm_id, slots, 0, SECRET_BYTE);
    snprintf(ccl__shm_knobs(comm)->prefix, sizeof(ccl__shm_knobs(comm)->prefix), "%s", run_prefix);
    ccl__shm_knobs(comm)->slot_bytes = slot_bytes;
    return comm;
}

static void comm_free(struct ccl_comm *comm) { rig_comm_free(comm); }

/* As init reports it: pids are compared only within one PID namespace. */
static uint32_t own_pid_ns(void) {
    struct stat sb;
    return stat("/proc/self/ns/pid", &sb) == 0 ? (uint32_t)sb.st_ino : 0;
}

/* local_init, the info exchange, setup: returns setup's status. */
static ccl_status_t up_to_setup(struct rig_rank *c, struct ccl_comm *comm, const uint8_t *use) {
    struct ccl__peer_info me = {.rank = c->rank, .pid = getpid(), .ncores = 1, .pid_ns = own_pid_ns()};
    snprintf(me.host_id, sizeof(me.host_id), "%s", comm->params.host_id);
    gethostname(me.hostname, sizeof(me.hostname) - 1);
    me.transport_mask = 1u << ccl__transport_index(shm);
    EXPECT_OK(&c->t, shm->local_init(comm, my_blob(comm)));
    allgather_info(c, comm, &me);
    ccl_status_t st = shm->setup(comm, use);
    if (st == CCL_OK) ccl__conns_share_wake(comm); /* as the connection manager does */
    return st;
}

/* Every phase up to setup_done, each followed by a barrier as in the
 * library. Rank 0 checks /dev/shm on the way. */
static void bring_up(struct rig_rank *c, struct ccl_comm *comm, const uint8_t *use) {
    EXPECT_OK(&c->t, up_to_setup(c, comm, use));
    barrier(c);
    if (c->rank == 0) EXPECT(&c->t, harness_shm_count(run_prefix) == c->nranks, "one segment per rank");
    EXPECT_OK(&c->t, shm->connect(comm, use, comm->conns));
    barrier(c);
    EXPECT_OK(&c->t, shm->setup_done(comm));
    barrier(c);
    if (c->rank == 0) EXPECT(&c->t, harness_shm_count(run_prefix) == 0, "segments are unlinked after setup_done");
    for (int p = 0; p < c->nranks; p++)
        EXPECT(&c->t, (comm->conns[p] != NULL) == (p != c->rank && use[p]), "conns[%d] set iff used", p);
}

static void all_but_self(const struct rig_rank *c, uint8_t *use) {
    for (int p = 0; p < c->nranks; p++) use[p] = p != c->rank;
}

/* ---- slot contents ---- */

static uint32_t msg_bytes(int src, int dst, int i, uint32_t slot) {
    switch (i % 8) {
    case 0: return 0;
    case 1: return slot;
    case 2: return 1;
    case 3: return slot - 1;
    default: break;
    }
    uint32_t h = (uint32_t)(src + 1) * 73856093u ^ (uint32_t)(dst + 1) * 19349663u ^ (uint32_t)i * 83492791u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return h % (slot + 1);
}

static void fill(uint8_t *p, uint32_t n, int src, int dst, int i) {
    uint32_t x = (uint32_t)(src + 1) * 2654435761u ^ (uint32_t)(dst + 1) * 40503u ^ (uint32_t)i * 2246822519u;
    for (uint32_t k = 0; k < n; k++) {
        x = x * 1664525u + 1013904223u;
        p[k] = (uint8_t)(x >> 24);
    }
}

static struct ccl__slot_meta msg_meta(int src, int dst, int i, uint32_t slot) {
    uint32_t n = msg_bytes(src, dst, i, slot);
    return (struct ccl__slot_meta){
        .bytes = n, .kind = 3, .dtype = (uint8_t)dst, .op = (uint8_t)src, .seq = (uint32_t)i, .root = src,
        .count = (uint64_t)n * 3 + 1};
}

static void send_msg(struct rig_rank *c, struct ccl__conn *cn, void *buf, int dst, int i) {
    struct ccl__slot_meta m = msg_meta(c->rank, dst, i, (uint32_t)cn->slot_bytes);
    fill(buf, m.bytes, c->rank, dst, i);
    EXPECT_OK(&c->t, shm->send_commit(cn, &m));
}

/* Checks a received slot against what src's message i must hold. */
static int check_msg(struct rig_rank *c, const void *buf, const struct ccl__slot_meta *m, int src, int i,
                     uint8_t *scratch, size_t slot) {
    struct ccl__slot_meta want = msg_meta(src, c->rank, i, (uint32_t)slot);
    if (memcmp(m, &want, sizeof(want)) != 0) {
        EXPECT(&c->t, 0, "slot %d from rank %d: meta seq %u bytes %u root %d, expected seq %u bytes %u root %d", i,
               src, m->seq, m->bytes, m->root, want.seq, want.bytes, want.root);
        return 0;
    }
    /* A slot starts on a line; a payload small enough to ride in its
     * message's meta line sits 8-byte aligned inside it. */
    uintptr_t align = want.bytes <= CCL__SHM_INLINE_BYTES ? 8 : 64;
    EXPECT(&c->t, ((uintptr_t)buf & (align - 1)) == 0, "slot buffer %p of %u bytes is %zu-byte aligned", buf,
           want.bytes, (size_t)align);
    fill(scratch, want.bytes, src, c->rank, i);
    if (memcmp(buf, scratch, want.bytes) != 0) {
        uint32_t k = 0;
        while (((const uint8_t *)buf)[k] == scratch[k]) k++;
        EXPECT(&c->t, 0, "slot %d from rank %d (%u bytes) differs at byte %u", i, src, want.bytes, k);
        return 0;
    }
    return 1;
}

/* Messages [first, last) both ways with every used peer at once. */
static void stream(struct rig_rank *c, struct ccl_comm *comm, const uint8_t *use, int first, int last) {
    int sent[MAX_RANKS], got[MAX_RANKS];
    size_t slot = ccl__shm_knobs(comm)->slot_bytes;
    uint8_t *scratch = malloc(slot + 1);
    if (!scratch) abort();
    for (int p = 0; p < c->nranks; p++) sent[p] = got[p] = first;
    double stalled_since = harness_now();
    for (;;) {
        int busy = 0, moved = 0;
        for (int p = 0; p < c->nranks; p++) {
            if (p == c->rank || !use[p]) continue;
            struct ccl__conn *cn = comm->conns[p];
            if (sent[p] < last) {
                busy = 1;
                void *buf;
                ccl_status_t st = shm->send_acquire(cn, msg_bytes(c->rank, p, sent[p], (uint32_t)slot), &buf);
                if (st == CCL_OK) {
                    send_msg(c, cn, buf, p, sent[p]++);
                    moved = 1;
                } else if (st != CCL_INPROGRESS) {
                    EXPECT(&c->t, 0, "send_acquire to %d: %s", p, ccl_status_string(st));
                    goto out;
                }
            }
            if (got[p] < last) {
                busy = 1;
                const void *buf;
                struct ccl__slot_meta m;
                ccl_status_t st = shm->recv_acquire(cn, &buf, &m);
                if (st == CCL_OK) {
                    if (!check_msg(c, buf, &m, p, got[p], scratch, slot)) goto out;
                    EXPECT_OK(&c->t, shm->recv_release(cn));
                    got[p]++;
                    moved = 1;
                } else if (st != CCL_INPROGRESS) {
                    EXPECT(&c->t, 0, "recv_acquire from %d: %s (%s)", p, ccl_status_string(st), comm->last_error);
                    goto out;
                }
            }
        }
        if (!busy) break;
        if (moved) {
            stalled_since = harness_now();
        } else if (harness_now() - stalled_since > STALL_S) {
            EXPECT(&c->t, 0, "stream stalled");
            goto out;
        } else {
            sched_yield();
        }
    }
out:
    free(scratch);
}

/* Sends `depth` slots to every peer without receiving: the FIFOs must take
 * exactly that many. Then receives them and checks a repeated acquire
 * returns the same slot. Messages [0, depth). */
static void fill_to_depth(struct rig_rank *c, struct ccl_comm *comm, const uint8_t *use) {
    int depth = comm->params.slots;
    size_t slot = ccl__shm_knobs(comm)->slot_bytes;
    uint8_t *scratch = malloc(slot + 1);
    if (!scratch) abort();
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank || !use[p]) continue;
        for (int i = 0; i < depth; i++) {
            void *buf = NULL;
            uint32_t n = msg_bytes(c->rank, p, i, (uint32_t)slot);
            if (EXPECT_OK(&c->t, shm->send_acquire(comm->conns[p], n, &buf)) != CCL_OK) break;
            send_msg(c, comm->conns[p], buf, p, i);
        }
        void *buf;
        EXPECT_STATUS(&c->t, CCL_INPROGRESS, shm->send_acquire(comm->conns[p], 0, &buf));
    }
    barrier(c);
    for (int p = 0; p < c->nranks; p++) {
        if (p == c->rank || !use[p]) continue;
        struct ccl__conn *cn = comm->conns[p];
        for (int i = 0; i < depth; i++) {
            const void *b1, *b2;
            struct ccl__slot_meta m1, m2;
            if (EXPECT_OK(&c->t, shm->recv_acquire(cn, &b1, &m1)) != CCL_OK) break;
            EXPECT_OK(&c->t, shm->recv_acquire(cn, &b2, &m2));
            EXPECT(&c->t, b1 == b2 && m1.seq == m2.seq, "a repeated recv_acquire returns the same slot");
            check_msg(c, b1, &m1, p, i, scratch, slot);
            EXPECT_OK(&c->t, shm->recv_release(cn));
        }
        const void *b;
        struct ccl__slot_meta m;
        EXPECT_STATUS(&c->t, CCL_INPROGRESS, shm->recv_acquire(cn, &b, &m));
        int moved = -1;
        short events = 99;
        EXPECT_OK(&c->t, shm->progress(cn, &moved));
        EXPECT(&c->t, moved == 0, "progress moves nothing");
        EXPECT(&c->t, shm->flushed(cn) == 1, "always flushed");
        EXPECT(&c->t, shm->wait_fd(cn, &events) == -1, "no descriptor to poll");
        EXPECT(&c->t, cn->t == shm && cn->peer == p && cn->comm == comm && cn->slot_bytes == slot, "conn head");
    }
    barrier(c); /* nobody streams before everyone saw its FIFOs empty */
    free(scratch);
}

/* ---- bodies ---- */

struct stream_spec {
    int spread; /* the ranks own their cores: mid-size messages walk the ring of bytes (shm.h) */
    int slots;
    size_t slot_bytes;
    int messages;
    uint8_t use[MAX_RANKS][MAX_RANKS]; /* all zero: every pair */
};

static void body_stream(struct rig_rank *c) {
    const struct stream_spec *s = c->arg;
    struct ccl_comm *comm = comm_new(c, 0x1234abcd, s->slots, s->slot_bytes);
    comm->own_core = s->spread;
    uint8_t use[MAX_RANKS] = {0};
    int any = 0;
    for (int p = 0; p < c->nranks; p++) any |= s->use[c->rank][p];
    if (any) memcpy(use, s->use[c->rank], sizeof(use)); else all_but_self(c, use);

    bring_up(c, comm, use);
    EXPECT(&c->t, comm->wake != &comm->local_wake, "comm->wake points into the segment");
    uint32_t bell0 = atomic_load(&comm->wake->bell);
    if (c->t.fails == 0) fill_to_depth(c, comm, use);
    if (c->t.fails == 0) stream(c, comm, use, s->slots, s->messages);
    /* This rank polled and never announced a sleep: peers ring only a
     * rank that may sleep, so no write of theirs crossed to its bell. */
    EXPECT(&c->t, atomic_load(&comm->wake->bell) == bell0, "peers left the bell of a rank that never slept alone");
    barrier(c);
    shm_down(comm);
    EXPECT(&c->t, comm->wake == &comm->local_wake, "teardown restores the private wake words");
    EXPECT(&c->t, *ccl__tstate(comm, shm) == NULL, "teardown clears the state");
    comm_free(comm);
}

/* Sleeps on this rank's bell as the library's waiter does (announced and
 * armed before the barrier, so a ring that comes first is not lost) and
 * checks that a peer's action rang it. */
static void sleep_until_rung(struct rig_rank *c, struct ccl_comm *comm, const char *why) {
    ccl__wake_announce(comm->wake);
    uint32_t armed = atomic_load(&comm->wake->bell);
    barrier(c);
    double t0 = harness_now();
    struct timespec ts = {.tv_sec = 10};
    long r = syscall(SYS_futex, &comm->wake->bell, FUTEX_WAIT, armed, &ts, NULL, 0);
    int err = errno;
    ccl__wake_withdraw(comm->wake);
    EXPECT(&c->t, r == 0 || err == EAGAIN, "%s: futex wait ended by a wake, not %s", why, strerror(err));
    EXPECT(&c->t, harness_now() - t0 < 5, "%s: woken promptly", why);
    EXPECT(&c->t, atomic_load(&comm->wake->bell) != armed, "%s: bell bumped", why);
}

static void body_futex_wake(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(c, 77, 2, 4096);
    uint8_t use[MAX_RANKS];
    all_but_self(c, use);
    bring_up(c, comm, use);
    struct ccl__conn *cn = comm->conns[1 - c->rank];
    void *sbuf;
    const void *rbuf;
    struct ccl__slot_meta m = {.bytes = 0};
    if (c->rank == 0) {
        /* A commit wakes the receiver. */
        sleep_until_rung(c, comm, "data");
        EXPECT_OK(&c->t, shm->recv_acquire(cn, &rbuf, &m));
        EXPECT(&c->t, m.seq == 42, "got the slot");
        EXPECT_OK(&c->t, shm->recv_release(cn));
        /* A release wakes a sender waiting for room. */
        for (int i = 0; i < comm->params.slots; i++) {
            EXPECT_OK(&c->t, shm->send_acquire(cn, 0, &sbuf));
            EXPECT_OK(&c->t, shm->send_commit(cn, &m));
        }
        EXPECT_STATUS(&c->t, CCL_INPROGRESS, shm->send_acquire(cn, 0, &sbuf));
        sleep_until_rung(c, comm, "room");
        EXPECT_OK(&c->t, shm->send_acquire(cn, 0, &sbuf));
    } else {
        barrier(c);
        usleep(100 * 1000); /* let rank 0 fall asleep */
        EXPECT_OK(&c->t, shm->send_acquire(cn, 0, &sbuf));
        m.seq = 42;
        EXPECT_OK(&c->t, shm->send_commit(cn, &m));
        barrier(c);
        usleep(100 * 1000);
        EXPECT_OK(&c->t, shm->recv_acquire(cn, &rbuf, &m));
        EXPECT_OK(&c->t, shm->recv_release(cn));
    }
    barrier(c);
    shm_down(comm);
    comm_free(comm);
}

static void body_poison(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(c, 99, 2, 4096);
    uint8_t use[MAX_RANKS];
    all_but_self(c, use);
    bring_up(c, comm, use);
    int culprit = c->nranks - 1;
    if (c->rank == culprit) shm->poison(comm, CCL_ERR_SYSTEM);
    barrier(c);
    int want = c->rank == culprit ? 0 : culprit + 1;
    EXPECT(&c->t, atomic_load(&comm->wake->fail_rank) == want, "fail_rank %d, expected %d",
           atomic_load(&comm->wake->fail_rank), want);
    if (want) EXPECT(&c->t, atomic_load(&comm->wake->fail_status) == CCL_ERR_SYSTEM, "fail_status");
    barrier(c);
    shm_down(comm);
    EXPECT(&c->t, atomic_load(&comm->local_wake.fail_rank) == want, "the failure survives teardown");
    comm_free(comm);
}

static void body_check_peer(struct rig_rank *c) {
    const enum rig_reap *reap = c->arg;
    struct ccl_comm *comm = comm_new(c, 5, 2, 4096);
    uint8_t use[MAX_RANKS];
    all_but_self(c, use);
    bring_up(c, comm, use);
    int other = 1 - c->rank;
    EXPECT_OK(&c->t, shm->check_peer(comm->conns[other]));
    barrier(c);
    if (c->rank == 1) _exit(c->t.fails); /* a crash: no teardown */

    pid_t dead = comm->peers[1].pid;
    if (*reap == RIG_REAP_ANY_ORDER) /* the parent reaps it: wait until the pid is gone */
        for (double t0 = harness_now(); kill(dead, 0) == 0 && harness_now() - t0 < 10;) usleep(1000);
    ccl_status_t st = CCL_OK;
    for (double t0 = harness_now(); st == CCL_OK && harness_now() - t0 < 3;) {
        st = shm->check_peer(comm->conns[1]);
        if (st == CCL_OK) usleep(1000);
    }
    EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, st);
    char want[64];
    snprintf(want, sizeof(want), "rank 1 (pid %d on ", (int)dead);
    EXPECT(&c->t, strstr(comm->last_error, want) && strstr(comm->last_error, "exited"), "message: %s",
           comm->last_error);
    /* Unreaped, the pid still exists: only the segment lock tells. */
    if (*reap == RIG_REAP_IN_RANK_ORDER)
        EXPECT(&c->t, strstr(comm->last_error, "left the communicator"), "message: %s", comm->last_error);
    else
        EXPECT(&c->t, !strstr(comm->last_error, "left the communicator"), "message: %s", comm->last_error);
    shm_down(comm);
    comm_free(comm);
}

enum failure {
    FAIL_ASYMMETRIC_USE, /* 3 ranks: rank 2 does not use shm with rank 0, which does */
    FAIL_PEER_NO_SETUP,  /* rank 1 stops after local_init */
    FAIL_OTHER_COMM,     /* rank 1 belongs to another communicator */
    FAIL_GEOMETRY,       /* rank 1 has a different CCL_SLOTS */
    FAIL_NO_CONNECT,     /* everyone tears down right after setup */
};

static const struct {
    enum failure f;
    int nranks;
    const char *tag;
    ccl_status_t st; /* what rank 0's connect returns (the culprit's too, if it connects) */
    const char *text;
} failures[] = {
    {FAIL_ASYMMETRIC_USE, 3, "fa", CCL_ERR_INTERNAL, "no FIFO"},
    {FAIL_PEER_NO_SETUP, 2, "fn", CCL_ERR_REMOTE, "does not exist"},
    {FAIL_OTHER_COMM, 2, "fo", CCL_ERR_REMOTE, "another communicator"},
    {FAIL_GEOMETRY, 2, "fg", CCL_ERR_INVALID_USAGE, "CCL_SLOTS"},
    {FAIL_NO_CONNECT, 2, "fc", CCL_OK, NULL},
};

static void body_failure(struct rig_rank *c) {
    const __typeof__(failures[0]) *w = c->arg;
    int culprit = c->rank == c->nranks - 1;
    struct ccl_comm *comm =
        comm_new(c, culprit && w->f == FAIL_OTHER_COMM ? 2 : 1, culprit && w->f == FAIL_GEOMETRY ? 3 : 4, 4096);
    uint8_t use[MAX_RANKS];
    all_but_self(c, use);
    if (culprit && w->f == FAIL_ASYMMETRIC_USE) use[0] = 0;

    if (culprit && w->f == FAIL_PEER_NO_SETUP) {
        struct ccl__peer_info me = {.rank = c->rank, .pid = getpid(), .pid_ns = own_pid_ns()};
        EXPECT_OK(&c->t, shm->local_init(comm, my_blob(comm)));
        allgather_info(c, comm, &me);
        shm_down(comm);
        barrier(c); /* the others' setup */
        barrier(c); /* their connect */
        barrier(c); /* their teardown */
        comm_free(comm);
        return;
    }
    EXPECT_OK(&c->t, up_to_setup(c, comm, use));
    barrier(c);
    if (w->f == FAIL_NO_CONNECT) {
        if (c->rank == 0) EXPECT(&c->t, harness_shm_count(run_prefix) == c->nranks, "every segment exists");
    } else {
        int fails = c->rank == 0 || (culprit && w->f != FAIL_ASYMMETRIC_USE);
        ccl_status_t want = fails ? w->st : CCL_OK;
        EXPECT_STATUS(&c->t, want, shm->connect(comm, use, comm->conns));
        if (fails) {
            EXPECT(&c->t, strstr(comm->last_error, w->text), "message \"%s\" mentions \"%s\"", comm->last_error,
                   w->text);
            for (int p = 0; p < c->nranks; p++)
                EXPECT(&c->t, comm->conns[p] == NULL, "no connection handed out after a failed connect");
        }
    }
    barrier(c);
    shm_down(comm);
    barrier(c);
    if (c->rank == 0) EXPECT(&c->t, harness_shm_count(run_prefix) == 0, "teardown removed every segment");
    comm_free(comm);
}

/* ---- tests ---- */

START_TEST(stream_two_ranks) {
    /* 4000 is not a multiple of 64: slots are padded apart. */
    static const struct stream_spec s = {.slots = 4, .slot_bytes = 4000, .messages = 3000};
    run_ranks(2, "st2", body_stream, &s, RIG_REAP_IN_RANK_ORDER);
}
END_TEST

START_TEST(stream_three_ranks) {
    static const struct stream_spec s = {.slots = 3, .slot_bytes = 9000, .messages = 2000};
    run_ranks(3, "st3", body_stream, &s, RIG_REAP_IN_RANK_ORDER);
}
END_TEST

START_TEST(stream_three_ranks_partial) {
    /* Ranks 0 and 2 do not use shm with each other: no FIFO between them. */
    static const struct stream_spec s = {
        .slots = 2, .slot_bytes = 64 << 10, .messages = 300, .use = {{0, 1, 0}, {1, 0, 1}, {0, 1, 0}}};
    run_ranks(3, "stp", body_stream, &s, RIG_REAP_IN_RANK_ORDER);
}
END_TEST

START_TEST(stream_two_ranks_spread) {
    /* Sizes from 0 to the slot: some go to the hot area, the rest round
     * the ring of bytes, skipping its end now and then. */
    static const struct stream_spec s = {.spread = 1, .slots = 4, .slot_bytes = 30000, .messages = 3000};
    run_ranks(2, "sr2", body_stream, &s, RIG_REAP_IN_RANK_ORDER);
}
END_TEST

START_TEST(stream_three_ranks_spread) {
    static const struct stream_spec s = {.spread = 1, .slots = 2, .slot_bytes = 64 << 10, .messages = 1000};
    run_ranks(3, "sr3", body_stream, &s, RIG_REAP_IN_RANK_ORDER);
}
END_TEST

/* Where messages land (shm.h): rank 1 sends sizes[], rank 0 checks each
 * one's offset in the data area against where[]. */
struct placement_spec {
    int spread;
    int n;
    uint32_t sizes[8];
    long where[8]; /* from the ring area's start; -1 - k: hot slot k; INLINE: in its meta line */
};

#define INLINE LONG_MIN

static void body_placement(struct rig_rank *c) {
    const struct placement_spec *s = c->arg;
    struct ccl_comm *comm = comm_new(c, 4242, 4, 64 << 10);
    comm->own_core = s->spread;
    uint8_t use[MAX_RANKS];
    all_but_self(c, use);
    bring_up(c, comm, use);
    struct ccl__conn *cn = comm->conns[1 - c->rank];
    const struct ccl__shm_end *e = &((struct ccl__shm_conn *)cn)->recv;
    for (int i = 0; i < s->n; i++) {
        if (c->rank == 1) {
            void *buf;
            struct ccl__slot_meta m = {.bytes = s->sizes[i], .seq = (uint32_t)i};
            ccl_status_t st;
            while ((st = shm->send_acquire(cn, m.bytes, &buf)) == CCL_INPROGRESS) sched_yield();
            if (EXPECT_OK(&c->t, st) != CCL_OK) break;
            memset(buf, i + 1, m.bytes);
            EXPECT_OK(&c->t, shm->send_commit(cn, &m));
        } else {
            const void *buf;
            struct ccl__slot_meta m;
            ccl_status_t st;
            while ((st = shm->recv_acquire(cn, &buf, &m)) == CCL_INPROGRESS) sched_yield();
            if (EXPECT_OK(&c->t, st) != CCL_OK) break;
            if (s->where[i] == INLINE) {
                const void *line = e->meta[i % e->depth].inline_data;
                EXPECT(&c->t, buf == line && m.seq == (uint32_t)i, "message %d (%u bytes) at %p, expected in its meta "
                       "line at %p", i, m.bytes, buf, line);
            } else {
                long off = (long)((const uint8_t *)buf - e->data), want = s->where[i];
                want = want < 0 ? (-1 - want) * (long)e->hot_stride : (long)e->ring_at + want;
                EXPECT(&c->t, off == want && m.seq == (uint32_t)i, "message %d (%u bytes) at offset %ld, expected %ld",
                       i, m.bytes, off, want);
            }
            EXPECT(&c->t, m.bytes == 0 || ((const uint8_t *)buf)[m.bytes - 1] == i + 1, "message %d's data", i);
            /* Released at once: the sender's room is the ring's, not the metas'. */
            EXPECT_OK(&c->t, shm->recv_release(cn));
        }
    }
    barrier(c);
    shm_down(comm);
    comm_free(comm);
}

START_TEST(placement_fixed_slots) {
    /* Not alone on its core: slot i % 4 of the ring area, whatever the
     * size, but for payloads of 24 bytes or less, which ride in their
     * meta line. */
    static const struct placement_spec s = {.n = 8,
                                            .sizes = {100, 65536, 20000, 1, 20000, 0, 25, 24},
                                            .where = {0, 65536, 131072, INLINE, 0, INLINE, 131072, INLINE}};
    run_ranks(2, "plf", body_placement, &s, RIG_REAP_IN_RANK_ORDER);
}
END_TEST

/* A peer that scribbles on its FIFO's meta lines (a bug, or memory that
 * is not libccl's any more): the receiver refuses what no sender of this
 * FIFO could have written and names the peer, and never reads outside the
 * line for a payload that claims to ride in it. */
/* Once rank 1 has written its line: rank 0's receive is refused, and the
 * error says `why`. */
static void expect_refused(struct rig_rank *c, struct ccl_comm *comm, struct ccl__conn *cn, const char *why) {
    barrier(c);
    if (c->rank == 0) {
        const void *buf;
        struct ccl__slot_meta m;
        EXPECT_STATUS(&c->t, CCL_ERR_REMOTE, shm->recv_acquire(cn, &buf, &m));
        EXPECT(&c->t, strstr(comm->last_error, why) != NULL, "says \"%s\": %s", why, comm->last_error);
    }
    barrier(c);
}

static void body_corrupt_meta(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(c, 4343, 4, 64 << 10);
    uint8_t use[MAX_RANKS];
    all_but_self(c, use);
    bring_up(c, comm, use);
    struct ccl__conn *cn = comm->conns[1 - c->rank];
    struct ccl__shm_meta_line *line = &((struct ccl__shm_conn *)cn)->send.meta[0];
    if (c->rank == 1) atomic_store(&line->seq, 7); /* message 6's number, in the line of messages 0, 4, 8... */
    expect_refused(c, comm, cn, "rank 1's FIFO to rank 0 is corrupt");
    if (c->rank == 1) {
        line->m = (struct ccl__slot_meta){.bytes = CCL__SHM_INLINE_BYTES + 1};
        line->offset = CCL__SHM_INLINE_AT;
        atomic_store(&line->seq, 1);
    }
    expect_refused(c, comm, cn, "inside a message's meta");
    shm_down(comm);
    comm_free(comm);
}

START_TEST(corrupt_meta_refused) { run_ranks(2, "cm", body_corrupt_meta, NULL, RIG_REAP_IN_RANK_ORDER); }
END_TEST

START_TEST(placement_ring_of_bytes) {
    /* Alone on its core: 16 KiB and up one after another (20000 takes
     * 20032), smaller in hot slot i % 4; the last does not fit before the
     * ring's end (5 x 64 KiB) and starts it again. */
    static const struct placement_spec s = {
        .spread = 1,
        .n = 8,
        .sizes = {20000, 16384, 16383, 65536, 65536, 65536, 65536, 65536},
        .where = {0, 20032, -3, 36416, 101952, 167488, 233024, 0}};
    run_ranks(2, "plr", body_placement, &s, RIG_REAP_IN_RANK_ORDER);
}
END_TEST

START_TEST(futex_wake_crosses_processes) { run_ranks(2, "fut", body_futex_wake, NULL, RIG_REAP_IN_RANK_ORDER); }
END_TEST

START_TEST(poison_reaches_every_peer) { run_ranks(3, "poi", body_poison, NULL, RIG_REAP_IN_RANK_ORDER); }
END_TEST

START_TEST(check_peer_sees_zombie) {
    static const enum rig_reap r = RIG_REAP_IN_RANK_ORDER;
    run_ranks(2, "cpz", body_check_peer, &r, r);
}
END_TEST

START_TEST(check_peer_sees_reaped_pid) {
    static const enum rig_reap r = RIG_REAP_ANY_ORDER;
    run_ranks(2, "cpr", body_check_peer, &r, r);
}
END_TEST

/* Rank 1 dies right after set-up made its segment (its name still in
 * /dev/shm) and rank 0 does not clean up either, as when every rank of a
 * job is killed during set-up. The next set-up on this host removes the
 * orphan, and only it: rank 0's own segment, alive and locked, stays. */
static int name_exists(const char *name) {
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

static void body_orphan(struct rig_rank *c) {
    struct ccl_comm *comm = comm_new(c, 7, 2, 4096);
    uint8_t use[MAX_RANKS];
    all_but_self(c, use);
    EXPECT_OK(&c->t, up_to_setup(c, comm, use));
    barrier(c);
    if (c->rank == 1) _exit(c->t.fails); /* killed in set-up: no teardown */
    char orphan[CCL__TRANSPORT_BLOB_BYTES], mine[CCL__TRANSPORT_BLOB_BYTES];
    memcpy(orphan, ccl__peer_blob(comm, 1, shm), sizeof(orphan));
    memcpy(mine, ccl__peer_blob(comm, 0, shm), sizeof(mine));
    for (double t0 = harness_now(); kill(comm->peers[1].pid, 0) == 0 && harness_now() - t0 < 10;) usleep(1000);
    EXPECT(&c->t, name_exists(orphan), "rank 1's segment %s is not there to be orphaned", orphan);
    struct ccl_comm *next = comm_new(c, 8, 2, 4096);
    EXPECT_OK(&c->t, shm->local_init(next, my_blob(next)));
    EXPECT(&c->t, !name_exists(orphan), "the next set-up did not remove the orphan %s", orphan);
    EXPECT(&c->t, name_exists(mine), "the next set-up removed the live segment %s", mine);
    shm_down(next);
    comm_free(next);
    shm_down(comm);
    comm_free(comm);
}

START_TEST(orphan_removed_by_next_setup) { run_ranks(2, "orp", body_orphan, NULL, RIG_REAP_ANY_ORDER); }
END_TEST

START_TEST(failed_setups_leave_nothing) {
    run_ranks(failures[_i].nranks, failures[_i].tag, body_failure, &failures[_i], RIG_REAP_IN_RANK_ORDER);
}
END_TEST

/* In-process tests: one "rank" of a two-rank communicator. */
static struct ccl_comm *solo_comm(const char *prefix) {
    snprintf(run_prefix, sizeof(run_prefix), "%s", prefix);
    const struct rig_rank c = {.rank = 0, .nranks = 2};
    return comm_new(&c, 1, 4, 4096);
}

START_TEST(segment_names) {
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "shmt%d-nm", (int)getpid());
    struct ccl_comm *a = solo_comm(prefix), *b = solo_comm(prefix);
    uint8_t ba[CCL__TRANSPORT_BLOB_BYTES], bb[CCL__TRANSPORT_BLOB_BYTES];
    ck_assert_int_eq(shm->local_init(a, ba), CCL_OK);
    ck_assert_int_eq(shm->local_init(b, bb), CCL_OK);
    const char *na = (const char *)ba;
    size_t plen = strlen(prefix);
    ck_assert_uint_eq(strlen(na), 1 + plen + 1 + 32);
    ck_assert(na[0] == '/' && strncmp(na + 1, prefix, plen) == 0 && na[1 + plen] == '-');
    ck_assert_uint_eq(strspn(na + plen + 2, "0123456789abcdef"), 32);
    ck_assert_str_ne(na, (const char *)bb);
    ck_assert_int_eq(harness_shm_count(prefix), 0); /* local_init creates nothing */
    shm_down(a);
    shm_down(b);
    shm_down(b); /* twice is harmless */
    ck_assert_ptr_null(*ccl__tstate(a, shm));

    struct ccl_comm *d = solo_comm("");
    ck_assert_int_eq(shm->local_init(d, ba), CCL_OK);
    ck_assert_int_eq(strncmp(na, "/ccl-", 5), 0);
    shm_down(d);

    struct ccl_comm *bad = solo_comm("a/b");
    ck_assert_int_eq(shm->local_init(bad, ba), CCL_ERR_INVALID_USAGE);
    ck_assert_ptr_nonnull(strstr(bad->last_error, "CCL_SHM_PREFIX"));
    shm_down(bad);
    comm_free(a);
    comm_free(b);
    comm_free(d);
    comm_free(bad);
}
END_TEST

START_TEST(teardown_after_setup_unlinks) {
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "shmt%d-td", (int)getpid());
    struct ccl_comm *comm = solo_comm(prefix);
    uint8_t blob[CCL__TRANSPORT_BLOB_BYTES];
    const uint8_t use[2] = {0, 1};
    ck_assert_int_eq(shm->local_init(comm, blob), CCL_OK);
    ck_assert_int_eq(shm->setup(comm, use), CCL_OK);
    ck_assert_int_eq(harness_shm_count(prefix), 1);
    comm->peers[0].transport_mask = 1u << ccl__transport_index(shm);
    ccl__conns_share_wake(comm);
    ck_assert_ptr_eq(comm->wake, shm->shared_wake(comm));
    shm_down(comm);
    ck_assert_int_eq(harness_shm_count(prefix), 0);
    ck_assert_ptr_eq(comm->wake, &comm->local_wake);
    comm_free(comm);
}
END_TEST

START_TEST(serving_nobody_creates_nothing) {
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "shmt%d-no", (int)getpid());
    struct ccl_comm *comm = solo_comm(prefix);
    uint8_t blob[CCL__TRANSPORT_BLOB_BYTES];
    struct ccl__conn *conns[2] = {NULL, NULL};
    const uint8_t use[2] = {0, 0};
    ck_assert_int_eq(shm->local_init(comm, blob), CCL_OK);
    ck_assert_int_eq(shm->setup(comm, use), CCL_OK);
    ck_assert_int_eq(harness_shm_count(prefix), 0);
    ck_assert_ptr_eq(comm->wake, &comm->local_wake);
    ck_assert_int_eq(shm->connect(comm, use, conns), CCL_OK);
    ck_assert(conns[0] == NULL && conns[1] == NULL);
    ck_assert_int_eq(shm->setup_done(comm), CCL_OK);
    shm->poison(comm, CCL_ERR_REMOTE); /* no peers: nothing to do */
    shm_down(comm);
    comm_free(comm);
}
END_TEST

START_TEST(impossible_geometry_is_refused) {
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "shmt%d-ge", (int)getpid());
    struct ccl_comm *comm = solo_comm(prefix);
    ccl__shm_knobs(comm)->slot_bytes = (size_t)1 << 40;
    uint8_t blob[CCL__TRANSPORT_BLOB_BYTES];
    const uint8_t use[2] = {0, 1};
    ck_assert_int_eq(shm->local_init(comm, blob), CCL_OK);
    ck_assert_int_eq(shm->setup(comm, use), CCL_ERR_INVALID_USAGE);
    ck_assert_ptr_nonnull(strstr(comm->last_error, "CCL_SHM_SLOT_BYTES"));
    shm_down(comm);
    ck_assert_int_eq(harness_shm_count(prefix), 0);
    comm_free(comm);
}
END_TEST

START_TEST(can_connect_same_host_only) {
    /* (Whether both ranks have shm at all is the planner's question.) */
    struct ccl__peer_info a = {0}, b = a;
    snprintf(a.host_id, sizeof(a.host_id), "hostA-boot1");
    snprintf(b.host_id, sizeof(b.host_id), "hostA-boot1");
    ck_assert_int_eq(shm->can_connect(&a, &b), 10);
    snprintf(b.host_id, sizeof(b.host_id), "hostB-boot1");
    ck_assert_int_eq(shm->can_connect(&a, &b), 0);
    ck_assert_int_eq(shm->can_connect(&b, &a), 0);
    b.host_id[0] = a.host_id[0] = 0;
    ck_assert_int_eq(shm->can_connect(&a, &b), 0);
}
END_TEST

START_TEST(ops_table_is_complete) {
    ck_assert_str_eq(shm->name, "shm");
    ck_assert_ptr_eq(ccl__transports[ccl__transport_index(shm)], shm);
    ck_assert_ptr_eq(ccl__transport_by_name("shm"), shm);
    ck_assert(shm->window && shm->wake && shm->shared_wake);
    ck_assert_ptr_null(shm->link_class); /* shared memory: the places decide */
    ck_assert(shm->knobs_load && shm->knobs_bytes == sizeof(struct ccl__shm_knobs) && shm->slot_bytes);
    ck_assert(shm->can_connect && shm->local_init && shm->setup && shm->connect && shm->setup_done &&
              shm->teardown && shm->send_acquire && shm->send_commit && shm->recv_acquire && shm->recv_release &&
              shm->progress && shm->flushed && shm->wait_fd && shm->check_peer && shm->poison);
}
END_TEST

static Suite *shm_suite(void) {
    Suite *s = suite_create("transport_shm");
    TCase *local = tcase_create("local");
    tcase_add_test(local, ops_table_is_complete);
    tcase_add_test(local, can_connect_same_host_only);
    tcase_add_test(local, segment_names);
    tcase_add_test(local, teardown_after_setup_unlinks);
    tcase_add_test(local, serving_nobody_creates_nothing);
    tcase_add_test(local, impossible_geometry_is_refused);
    suite_add_tcase(s, local);

    TCase *ranks = tcase_create("ranks");
    tcase_set_timeout(ranks, 90); /* sanitizers on two cores */
    tcase_add_test(ranks, stream_two_ranks);
    tcase_add_test(ranks, stream_three_ranks);
    tcase_add_test(ranks, stream_three_ranks_partial);
    tcase_add_test(ranks, stream_two_ranks_spread);
    tcase_add_test(ranks, stream_three_ranks_spread);
    tcase_add_test(ranks, placement_fixed_slots);
    tcase_add_test(ranks, placement_ring_of_bytes);
    tcase_add_test(ranks, futex_wake_crosses_processes);
    tcase_add_test(ranks, corrupt_meta_refused);
    tcase_add_test(ranks, poison_reaches_every_peer);
    tcase_add_test(ranks, check_peer_sees_zombie);
    tcase_add_test(ranks, check_peer_sees_reaped_pid);
    tcase_add_test(ranks, orphan_removed_by_next_setup);
    tcase_add_loop_test(ranks, failed_setups_leave_nothing, 0, (int)(sizeof(failures) / sizeof(failures[0])));
    suite_add_tcase(s, ranks);
    return s;
}

int main(void) { return harness_main(shm_suite()); }
