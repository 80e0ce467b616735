/* ctest: TIMEOUT 300 LABELS faults */
/*
 * The pair channel (core/boot_pair.h): messages between two ranks after
 * set-up, the seam RDMA queue-pair numbers and device memory handles
 * travel through.
 *
 * - Every pair, both ways, at once: sizes 0, 1, an odd one and the
 *   largest, several tags received in another order than sent, two
 *   messages under one tag kept in order, bit-exact; 1 MiB to every peer
 *   before anyone receives (nobody may deadlock on a full socket).
 * - Strangers at a rank's pair listener (closing at once, junk, a wrong
 *   magic, a truncated hello held open, a hello with a zero secret that
 *   claims a real rank, one addressed to another rank): all dropped, and
 *   the real ranks' messages still arrive.
 * - A peer killed after sending one message: its message is still
 *   delivered, then receiving from it and sending to it fail with
 *   CCL_ERR_REMOTE naming it, long before CCL_TIMEOUT.
 * - Ranks that disagree on a message's size, a message nobody sends
 *   (CCL_ERR_TIMEOUT naming the silent rank), bad arguments.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/boot_pair.h"
#include "core/comm.h"
#include "harness.h"
#include "util.h"

/* The bytes `from` sends `to` under tag: a pattern no other message shares. */
static uint8_t pattern(int from, int to, uint32_t tag, size_t i) {
    uint32_t x = (uint32_t)(from * 131 + to * 31 + (int)tag * 7) ^ (uint32_t)(i * 2654435761u);
    return (uint8_t)(x >> 11);
}

static void fill(uint8_t *buf, size_t n, int from, int to, uint32_t tag) {
    for (size_t i = 0; i < n; i++) buf[i] = pattern(from, to, tag, i);
}

static size_t mismatches(const uint8_t *buf, size_t n, int from, int to, uint32_t tag) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += buf[i] != pattern(from, to, tag, i);
    return bad;
}

/* ---- every pair, both ways ---- */

static const size_t sizes[] = {0, 1, 4099, CCL__PAIR_MAX_BYTES};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define TAG_SAME 100 /* two messages under one tag: the first has size 3, the second 5 */

static int body_all_pairs(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    uint8_t *buf = malloc(CCL__PAIR_MAX_BYTES);
    if (!buf) return 1;
    /* Everything to every peer first, tags in one order ... */
    for (int p = 0; p < nranks; p++) {
        if (p == rank) continue;
        for (size_t k = 0; k < NSIZES; k++) {
            fill(buf, sizes[k], rank, p, (uint32_t)k);
            EXPECT_OK(&t, ccl__pair_send(comm, p, (uint32_t)k, buf, sizes[k]));
        }
        fill(buf, 3, rank, p, TAG_SAME);
        EXPECT_OK(&t, ccl__pair_send(comm, p, TAG_SAME, buf, 3));
        fill(buf, 5, rank, p, TAG_SAME + 1);
        EXPECT_OK(&t, ccl__pair_send(comm, p, TAG_SAME, buf, 5));
    }
    /* ... then received in the reverse order, peers in reverse too. */
    for (int p = nranks - 1; p >= 0; p--) {
        if (p == rank) continue;
        EXPECT_OK(&t, ccl__pair_recv(comm, p, TAG_SAME, buf, 3));
        EXPECT(&t, mismatches(buf, 3, p, rank, TAG_SAME) == 0, "first message under one tag from rank %d", p);
        EXPECT_OK(&t, ccl__pair_recv(comm, p, TAG_SAME, buf, 5));
        EXPECT(&t, mismatches(buf, 5, p, rank, TAG_SAME + 1) == 0, "second message under one tag from rank %d", p);
        for (size_t k = NSIZES; k-- > 0;) {
            memset(buf, 0xee, sizes[k]);
            if (EXPECT_OK(&t, ccl__pair_recv(comm, p, (uint32_t)k, buf, sizes[k])) != CCL_OK) continue;
            size_t bad = mismatches(buf, sizes[k], p, rank, (uint32_t)k);
            EXPECT(&t, bad == 0, "%zu of %zu bytes wrong from rank %d", bad, sizes[k], p);
        }
    }
    /* An exchange with every peer, ring order (each both sends and waits). */
    uint8_t *theirs = malloc(CCL__PAIR_MAX_BYTES);
    for (int d = 1; theirs && d < nranks; d++) {
        int to = (rank + d) % nranks, from = (rank - d + nranks) % nranks;
        fill(buf, 777, rank, to, 9);
        EXPECT_OK(&t, ccl__pair_send(comm, to, 9, buf, 777));
        EXPECT_OK(&t, ccl__pair_recv(comm, from, 9, theirs, 777));
        EXPECT(&t, mismatches(theirs, 777, from, rank, 9) == 0, "ring message from rank %d", from);
    }
    if (theirs && nranks > 1) {
        int peer = rank ^ 1;
        if (peer < nranks) {
            fill(buf, 64, rank, peer, 11);
            EXPECT_OK(&t, ccl__pair_exchange(comm, peer, 11, buf, theirs, 64));
            EXPECT(&t, mismatches(theirs, 64, peer, rank, 11) == 0, "exchange with rank %d", peer);
        }
    }
    free(theirs);
    free(buf);
    /* The communicator is untouched by all this. */
    EXPECT_OK(&t, ccl_barrier(comm));
    return t.fails;
}

struct pairs_case {
    int nranks;
    const char *transport;
    int host_per_rank;
};

static const struct pairs_case pairs_cases[] = {{2, "shm", 0}, {3, "tcp", 1}, {5, NULL, 0}, {4, "tcp", 0}};

START_TEST(all_pairs) {
    const struct pairs_case *pc = &pairs_cases[_i];
    struct harness_run run = {.nranks = pc->nranks,
                              .transport = pc->transport,
                              .host_per_rank = pc->host_per_rank,
                              .ccl_timeout = "60",
                              .deadline_s = 150,
                              .body = body_all_pairs};
    util_run_clean(&run, 0, "pair messages, %d ranks (%s)", pc->nranks, pc->transport ? pc->transport : "auto");
}
END_TEST

/* ---- strangers ---- */

static int dial_raw(const union ccl__sa *a) {
    int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, &a->sa, ccl__sa_len(a)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static void send_raw(int fd, const void *buf, size_t n) {
    while (n) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* dropped: that is the point */
        buf = (const uint8_t *)buf + w, n -= (size_t)w;
    }
}

#define NHELD 3

/* Rank 2 plays every stranger at rank 0's listener, then tells rank 0,
 * which only then lets rank 1 (the rank the forged hello claims to be)
 * send: a forged claim that got through would shut rank 1 out. */
static int body_strangers(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    (void)nranks;
    struct harness_tally t = {rank, 0};
    uint8_t buf[256];
    int held[NHELD] = {-1, -1, -1};
    if (rank == 2) {
        const union ccl__sa *target = &comm->peers[0].pair_addr;
        struct ccl__pair_hello zero = {
            .magic = CCL__PAIR_MAGIC, .version = CCL__PAIR_VERSION, .comm_id = comm->comm_id, .from = 1, .to = 0};
        struct ccl__pair_hello elsewhere = zero;
        memcpy(elsewhere.secret, comm->secret, sizeof elsewhere.secret); /* an insider, at the wrong rank */
        elsewhere.to = 1;
        elsewhere.from = 2;
        uint8_t junk[5000];
        fill(junk, sizeof junk, 7, 7, 7);
        for (int k = 0; k < 7; k++) {
            int fd = dial_raw(target);
            EXPECT(&t, fd >= 0, "stranger %d could not reach rank 0's pair listener", k);
            if (fd < 0) continue;
            switch (k) {
            case 0: break;                                            /* connect, close */
            case 1: send_raw(fd, junk, sizeof junk); break;           /* junk */
            case 2: send_raw(fd, &(uint32_t){0xdeadbeef}, 4); break;  /* wrong magic */
            case 3: send_raw(fd, &zero, 10); held[0] = fd, fd = -1; break; /* truncated, held open */
            case 4: held[1] = fd, fd = -1; break;                     /* silent, held open */
            case 5: send_raw(fd, &zero, sizeof zero); held[2] = fd, fd = -1; break; /* claims rank 1, no secret */
            default: send_raw(fd, &elsewhere, sizeof elsewhere); break; /* addressed to rank 1 */
            }
            if (fd >= 0) close(fd);
        }
        EXPECT_OK(&t, ccl__pair_send(comm, 0, 1, "done", 5));
    }
    if (rank == 0) {
        /* Taking rank 2's message takes in every stranger before it. */
        EXPECT_OK(&t, ccl__pair_recv(comm, 2, 1, buf, 5));
        EXPECT_OK(&t, ccl__pair_send(comm, 1, 2, "go", 3));
        memset(buf, 0, sizeof buf);
        EXPECT_OK(&t, ccl__pair_recv(comm, 1, 5, buf, 200));
        EXPECT(&t, mismatches(buf, 200, 1, 0, 5) == 0, "rank 1's message after the strangers");
        fill(buf, 100, 0, 2, 6);
        EXPECT_OK(&t, ccl__pair_send(comm, 2, 6, buf, 100));
    }
    if (rank == 1) {
        EXPECT_OK(&t, ccl__pair_recv(comm, 0, 2, buf, 3));
        fill(buf, 200, 1, 0, 5);
        EXPECT_OK(&t, ccl__pair_send(comm, 0, 5, buf, 200));
    }
    if (rank == 2) {
        EXPECT_OK(&t, ccl__pair_recv(comm, 0, 6, buf, 100));
        EXPECT(&t, mismatches(buf, 100, 0, 2, 6) == 0, "rank 0's answer to rank 2");
    }
    EXPECT_OK(&t, ccl_barrier(comm));
    for (int k = 0; k < NHELD; k++)
        if (held[k] >= 0) close(held[k]);
    return t.fails;
}

static const char *const stranger_transports[] = {"shm", "tcp"};

START_TEST(strangers) {
    struct harness_run run = {.nranks = 3,
                              .transport = stranger_transports[_i],
                              .ccl_timeout = "30",
                              .deadline_s = 90,
                              .body = body_strangers};
    util_run_clean(&run, 0, "strangers at the pair listener (%s)", stranger_transports[_i]);
}
END_TEST

/* ---- a peer killed ---- */

#define VICTIM 2

static int body_killed(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    (void)nranks;
    struct harness_tally t = {rank, 0};
    uint8_t buf[64];
    if (rank == VICTIM) {
        fill(buf, sizeof buf, VICTIM, 0, 1);
        EXPECT_OK(&t, ccl__pair_send(comm, 0, 1, buf, sizeof buf));
        EXPECT_OK(&t, ccl__pair_recv(comm, 1, 2, buf, 1)); /* rank 1 is about to wait on us */
        raise(SIGKILL);
    }
    if (rank == 1) EXPECT_OK(&t, ccl__pair_send(comm, VICTIM, 2, "x", 1));
    double t0 = harness_now();
    if (rank == 0) {
        ccl_status_t st = ccl__pair_recv(comm, VICTIM, 1, buf, sizeof buf);
        EXPECT(&t, st == CCL_OK, "the message rank %d sent before it died: %s", VICTIM, ccl_comm_last_error(comm));
        EXPECT(&t, mismatches(buf, sizeof buf, VICTIM, 0, 1) == 0, "the message rank %d sent before it died", VICTIM);
    }
    /* Rank 0 learns from the connection the victim made; rank 1 from the
     * one it made itself. */
    EXPECT_STATUS(&t, CCL_ERR_REMOTE, ccl__pair_recv(comm, VICTIM, 3, buf, 8));
    const char *err = ccl_comm_last_error(comm);
    EXPECT(&t, strstr(err, "rank 2") != NULL, "the error names the dead rank: \"%s\"", err);
    EXPECT_STATUS(&t, CCL_ERR_REMOTE, ccl__pair_send(comm, VICTIM, 4, buf, 8));
    double took = harness_now() - t0;
    EXPECT(&t, took < 10, "noticing the dead peer took %.1f s (CCL_TIMEOUT is 60)", took);
    fprintf(stderr, "[rank %d] dead peer noticed in %.3f s: %s\n", rank, took, ccl_comm_last_error(comm));
    /* The survivors still talk. */
    int other = 1 - rank;
    EXPECT_OK(&t, ccl__pair_exchange(comm, other, 5, &rank, buf, sizeof rank));
    EXPECT(&t, memcmp(buf, &other, sizeof other) == 0, "survivors' exchange");
    return t.fails;
}

START_TEST(peer_killed) {
    struct harness_run run = {.nranks = 3,
                              .transport = stranger_transports[_i],
                              .ccl_timeout = "60",
                              .deadline_s = 120,
                              .lenient_destroy = 1,
                              .body = body_killed};
    util_run_clean(&run, 1u << VICTIM, "a peer killed (%s)", stranger_transports[_i]);
    ck_assert_msg(WIFSIGNALED(run.status[VICTIM]) && WTERMSIG(run.status[VICTIM]) == SIGKILL,
                  "the victim was not killed");
}
END_TEST

/* ---- disagreement, silence, bad arguments ---- */

static int body_disagree(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    (void)nranks;
    struct harness_tally t = {rank, 0};
    uint8_t buf[16] = {0};
    if (rank == 0) {
        EXPECT_OK(&t, ccl__pair_send(comm, 1, 1, buf, 16));
        double t0 = harness_now();
        EXPECT_STATUS(&t, CCL_ERR_TIMEOUT, ccl__pair_recv(comm, 1, 2, buf, 4)); /* rank 1 never sends it */
        double took = harness_now() - t0;
        EXPECT(&t, took > 1.5 && took < 10, "a silent peer timed out after %.1f s (CCL_TIMEOUT 2)", took);
        EXPECT(&t, strstr(ccl_comm_last_error(comm), "rank 1") != NULL, "timeout names rank 1: \"%s\"",
               ccl_comm_last_error(comm));
    } else {
        EXPECT_STATUS(&t, CCL_ERR_REMOTE, ccl__pair_recv(comm, 0, 1, buf, 8));
        const char *err = ccl_comm_last_error(comm);
        EXPECT(&t, strstr(err, "rank 0 sent 16 bytes") && strstr(err, "expected 8"), "size mismatch: \"%s\"", err);
        usleep(2000000); /* rank 0 is waiting out CCL_TIMEOUT: meet it at the barrier well inside the next one */
    }
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl__pair_send(comm, rank, 1, buf, 1));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl__pair_recv(comm, 2, 1, buf, 1));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl__pair_send(comm, -1, 1, buf, 1));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl__pair_send(comm, 1 - rank, 1, buf, CCL__PAIR_MAX_BYTES + 1));
    EXPECT_OK(&t, ccl_barrier(comm));
    return t.fails;
}

START_TEST(disagree) {
    struct harness_run run = {
        .nranks = 2, .transport = "tcp", .ccl_timeout = "2", .deadline_s = 60, .body = body_disagree};
    util_run_clean(&run, 0, "ranks that disagree");
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("pair_channel");
    util_add_loop_case(s, "all_pairs", all_pairs, (int)(sizeof pairs_cases / sizeof pairs_cases[0]), 200);
    util_add_loop_case(s, "strangers", strangers, 2, 120);
    util_add_loop_case(s, "peer_killed", peer_killed, 2, 150);
    util_add_loop_case(s, "disagree", disagree, 1, 90);
    return s;
}

int main(void) { return harness_main(suite()); }
