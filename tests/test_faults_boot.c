/* ctest: TIMEOUT 300 LABELS faults */
/*
 * Bootstrap faults. A rank whose copy of the unique id has a wrong secret:
 * its init fails, and so does everyone else's (the root never sees a full
 * set), within CCL_TIMEOUT, with no crash or hang. Strangers connecting to
 * the root while the ranks join (closing at once, random bytes, a truncated
 * or wrong-secret hello, silence held open): init still succeeds and a
 * collective works; so it does behind a thousand silent connections. Two
 * processes claiming one rank: every init fails, naming both addresses;
 * one claiming a rank after the job formed hears who holds it. A rank that
 * never starts: every other init fails at CCL_TIMEOUT naming it. A rank
 * killed in each phase of set-up: every other init fails within a second,
 * naming it, with nothing left in /dev/shm.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/boot_proto.h"
#include "core/bootstrap.h"
#include "core/socket.h"
#include "harness.h"
#include "transports/manager.h"
#include "ref.h"
#include "util.h"

/* ---- wrong secret ---- */

#define BAD_RANK 1

static void corrupt_secret(int rank, int nranks, ccl_unique_id_t *id, void *arg) {
    (void)nranks;
    (void)arg;
    if (rank != BAD_RANK) return;
    struct ccl__unique_id uid;
    memcpy(&uid, id->internal, sizeof uid);
    uid.secret[5] ^= 0x40;
    memcpy(id->internal, &uid, sizeof uid);
}

static int init_must_fail(int rank, ccl_status_t st, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    EXPECT(&t, st < 0, "init %s with a wrong secret on rank %d", st == CCL_OK ? "succeeded" : "did not fail",
           BAD_RANK);
    fprintf(stderr, "[faults] wrong secret on rank %d: rank %d's init returned %s\n", BAD_RANK, rank,
            ccl_status_string(st));
    return t.fails;
}

static const char *const secret_transports[] = {"shm", "tcp", "ib"};

/* shm and tcp; ib too under CCL_TEST_MATRIX=ib (inside tools/rdma-vm.sh):
 * there a rank with a wrong secret must be refused before any queue pair
 * number reaches it, and the others give up as promptly. */
static int wrong_secret_cases(void) {
    const char *m = getenv("CCL_TEST_MATRIX");
    return m && strcmp(m, "ib") == 0 ? 3 : 2;
}

START_TEST(wrong_secret) {
    struct harness_run run = {
        .nranks = 3,
        .transport = secret_transports[_i],
        .ccl_timeout = "3",
        .deadline_s = 30, /* CCL_TIMEOUT 3 s: anything near this is a hang */
        .setup = corrupt_secret,
        .init_check = init_must_fail,
    };
    util_run_clean(&run, 0, "wrong secret (%s)", secret_transports[_i]);
    ck_assert_msg(run.elapsed_s < 20, "wrong secret: the ranks needed %.1f s to give up", run.elapsed_s);
}
END_TEST

/* ---- garbage at the root ---- */

#define HELD 3

static void wait_for_go(int rank, int nranks, ccl_unique_id_t *id, void *arg) {
    (void)nranks;
    (void)id;
    (void)arg;
    char msg[HARNESS_MSG_BYTES];
    if (harness_child_recv(msg, sizeof msg, 60) != 0) fprintf(stderr, "[rank %d] no go from the parent\n", rank);
}

static int stranger_connect(const struct ccl__unique_id *uid) {
    int fd = socket(uid->root.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, &uid->root.sa, ccl__sa_len(&uid->root)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_bytes(int fd, const void *buf, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* the root may hang up on us: that is its right */
        buf = (const uint8_t *)buf + w;
        n -= (size_t)w;
    }
}

/* Every kind of stranger; the ones in held[] stay connected (silent) until
 * the ranks are done joining. Returns how many connections failed. */
static int strangers(const struct ccl__unique_id *uid, int nranks, int held[HELD]) {
    int failed = 0;
    uint8_t junk[100000];
    ref_bytes(0x6a756e6b, 0, 0, sizeof junk, junk);
    struct ccl__boot_hello hello = {.magic = CCL__BOOT_MAGIC, .version = CCL__BOOT_VERSION, .nranks = nranks};
    memcpy(hello.secret, uid->secret, sizeof hello.secret);
    struct ccl__boot_hello wrong = hello;
    wrong.secret[0] ^= 1;
    struct ccl__boot_hello zeros;
    memset(&zeros, 0, sizeof zeros);
    /* Strangers that know the secret but not the rules: a record too big
     * to take, one of another build's size, a rank out of range. */
    struct ccl__boot_hello huge = hello, other_build = hello, out_of_range = hello;
    huge.record_bytes = UINT32_MAX;
    other_build.record_bytes = (uint32_t)ccl__conns_record_bytes() + 8;
    other_build.rank = nranks - 1;
    out_of_range.record_bytes = (uint32_t)ccl__conns_record_bytes();
    out_of_range.rank = nranks + 5;

    for (int k = 0; k < 12; k++) {
        int fd = stranger_connect(uid);
        if (fd < 0) {
            failed++;
            continue;
        }
        switch (k) {
        case 0: break;                                                      /* connect, close */
        case 1: send_bytes(fd, junk, 200); break;                           /* a little junk */
        case 2: send_bytes(fd, junk, sizeof junk); break;                   /* a lot of junk */
        case 3: send_bytes(fd, &hello, sizeof hello / 2); break;            /* truncated hello */
        case 4: send_bytes(fd, &wrong, sizeof wrong); break;                /* wrong secret */
        case 5: send_bytes(fd, &zeros, sizeof zeros); break;                /* bad magic */
        case 6: send_bytes(fd, &hello, 6); held[0] = fd; fd = -1; break;    /* truncated, kept open */
        case 7: held[1] = fd; fd = -1; break;                               /* silent, kept open */
        case 9: send_bytes(fd, &huge, sizeof huge); break;
        case 10:
            send_bytes(fd, &other_build, sizeof other_build);
            send_bytes(fd, junk, other_build.record_bytes);
            break;
        case 11:
            send_bytes(fd, &out_of_range, sizeof out_of_range);
            send_bytes(fd, junk, out_of_range.record_bytes);
            break;
        default: send_bytes(fd, junk, 3); held[2] = fd; fd = -1; break;     /* 3 bytes, kept open */
        }
        if (fd >= 0) close(fd);
    }
    return failed;
}

struct garbage_case {
    const char *transport;
    int strangers_first; /* garbage before any rank connects, or while they do */
};

static const struct garbage_case garbage_cases[] = {{"shm", 1}, {"tcp", 0}, {NULL, 1}};

/* Parent side: every rank may start its init now. Returns the failures. */
static int release_ranks(struct harness_run *run) {
    int fails = 0;
    for (int r = 0; r < run->nranks; r++) fails += harness_send(run, r, "go") != 0;
    return fails;
}

/* Parent side: every rank reports a finished init within within_s of the
 * run's start. Returns the failures. */
static int await_inits(struct harness_run *run, double within_s) {
    char msg[HARNESS_MSG_BYTES];
    int fails = 0;
    for (int r = 0; r < run->nranks; r++)
        if (harness_recv(run, r, msg, sizeof msg, run->start + within_s) != 0) {
            fprintf(stderr, "parent: rank %d never reported a finished init\n", r);
            fails++;
        }
    return fails;
}

static int parent_garbage(struct harness_run *run, void *arg) {
    const struct garbage_case *gc = arg;
    const struct ccl__unique_id *uid = (const void *)run->id.internal;
    int held[HELD] = {-1, -1, -1}, fails = 0;
    if (!gc->strangers_first) fails += release_ranks(run);
    int failed = strangers(uid, run->nranks, held);
    if (failed) fprintf(stderr, "parent: %d stranger connections could not even connect\n", failed);
    if (gc->strangers_first) fails += release_ranks(run);
    fails += await_inits(run, 90);
    for (int k = 0; k < HELD; k++)
        if (held[k] >= 0) close(held[k]);
    return fails;
}

static int body_after_garbage(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    harness_child_send("inited");
    int32_t in[1000], out[1000];
    for (int i = 0; i < 1000; i++) in[i] = i * (rank + 1);
    EXPECT_OK(&t, ccl_all_reduce(in, out, 1000, CCL_INT32, CCL_SUM, comm));
    int bad = 0;
    for (int i = 0; i < 1000; i++) bad += out[i] != i * nranks * (nranks + 1) / 2;
    EXPECT(&t, bad == 0, "all_reduce after the strangers: %d elements wrong", bad);
    return t.fails;
}

START_TEST(garbage_at_root) {
    const struct garbage_case *gc = &garbage_cases[_i];
    struct harness_run run = {
        .nranks = 4,
        .transport = gc->transport,
        .ccl_timeout = "30",
        .deadline_s = 120,
        .setup = wait_for_go,
        .body = body_after_garbage,
        .arg = (void *)gc,
        .parent = parent_garbage,
    };
    util_run_clean(&run, 0, "garbage at the root (%s, %s)", gc->transport ? gc->transport : "auto",
                   gc->strangers_first ? "before the ranks" : "among them");
    fprintf(stderr, "[faults] garbage at the root (%s): init and all_reduce fine, %.2f s\n",
            gc->transport ? gc->transport : "auto", run.elapsed_s);
}
END_TEST

/* ---- a crowd of silent strangers at the root ----
 * More silent connections than the root keeps places for, all made before
 * any rank connects and held open: the ranks still join at once (before,
 * the root read only the first 256 connections, so the ranks waited behind
 * strangers until CCL_TIMEOUT). */

#define CROWD 1000

static int parent_crowd(struct harness_run *run, void *arg) {
    (void)arg;
    const struct ccl__unique_id *uid = (const void *)run->id.internal;
    int *fds = malloc(sizeof(int) * CROWD), fails = 0, opened = 0;
    if (!fds) return 1;
    for (int k = 0; k < CROWD; k++)
        if ((fds[k] = stranger_connect(uid)) >= 0) opened++;
    double t0 = harness_now();
    fails += release_ranks(run);
    fails += await_inits(run, 60);
    fprintf(stderr, "[faults] %d silent strangers held at the root: every rank joined %.2f s after they started\n",
            opened, harness_now() - t0);
    if (opened < CROWD / 2) {
        fprintf(stderr, "parent: only %d of %d strangers could connect\n", opened, CROWD);
        fails++;
    }
    for (int k = 0; k < CROWD; k++)
        if (fds[k] >= 0) close(fds[k]);
    free(fds);
    return fails;
}

START_TEST(silent_crowd_at_root) {
    util_raise_fd_limit(4 * CROWD);
    struct harness_run run = {
        .nranks = 3,
        .transport = secret_transports[_i],
        .ccl_timeout = "8", /* below the root's 10 s wait for a hello: the crowd must not be waited out */
        .deadline_s = 60,
        .setup = wait_for_go,
        .body = body_after_garbage,
        .parent = parent_crowd,
    };
    util_run_clean(&run, 0, "a crowd of %d silent strangers at the root (%s)", CROWD, secret_transports[_i]);
}
END_TEST

/* ---- two processes claim one rank ---- */

static const int dup_claims[3] = {0, 1, 1};

static int init_duplicate(int rank, ccl_status_t st, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    const char *why = ccl_comm_last_error(NULL);
    EXPECT(&t, st == CCL_ERR_INVALID_USAGE, "process %d (claiming rank %d): init returned %s, expected %s", rank,
           dup_claims[rank], ccl_status_string(st), ccl_status_string(CCL_ERR_INVALID_USAGE));
    EXPECT(&t, strstr(why, "rank 1 of 3 was claimed twice, from ") != NULL, "the error does not name the claim: \"%s\"",
           why);
    /* both addresses: "from A and from B" */
    const char *a = strstr(why, "from "), *b = a ? strstr(a + 5, " and from ") : NULL;
    EXPECT(&t, a && b && b > a + 5 && strchr(b + 10, ':') != NULL, "the error does not give two addresses: \"%s\"",
           why);
    if (rank == 0) fprintf(stderr, "[faults] duplicate rank: \"%s\"\n", why);
    return t.fails;
}

START_TEST(duplicate_rank) {
    struct harness_run run = {
        .nranks = 3,
        .transport = secret_transports[_i],
        .claim = dup_claims,
        .ccl_timeout = "20",
        .deadline_s = 60,
        .init_check = init_duplicate,
    };
    util_run_clean(&run, 0, "two processes claiming rank 1 (%s)", secret_transports[_i]);
    ck_assert_msg(run.elapsed_s < 10, "a duplicate claim took %.1f s to fail every rank (CCL_TIMEOUT 20)",
                  run.elapsed_s);
}
END_TEST

/* ---- a rank that never starts ----
 * Rank 2 of 3 exits before its init: the root's timeout names it (and the
 * root's address) in every joined rank's error, not "wrong unique id". */

#define NEVER_STARTED 2

static void never_start(int rank, int nranks, ccl_unique_id_t *id, void *arg) {
    (void)nranks, (void)id, (void)arg;
    if (rank == NEVER_STARTED) _exit(0);
}

static int init_names_missing(int rank, ccl_status_t st, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    const char *why = ccl_comm_last_error(NULL);
    EXPECT(&t, st == CCL_ERR_TIMEOUT, "rank %d: init returned %s, expected %s", rank, ccl_status_string(st),
           ccl_status_string(CCL_ERR_TIMEOUT));
    EXPECT(&t, strstr(why, "2 of 3 ranks joined") && strstr(why, "never connected to the bootstrap root at ") &&
                   strstr(why, ": rank 2"),
           "rank %d's error does not name rank 2 as missing: \"%s\"", rank, why);
    fprintf(stderr, "[faults] rank %d never started: rank %d: \"%s\"\n", NEVER_STARTED, rank, why);
    return t.fails;
}

START_TEST(rank_never_started) {
    struct harness_run run = {
        .nranks = 3,
        .transport = "shm",
        .ccl_timeout = "2",
        .deadline_s = 30,
        .setup = never_start,
        .init_check = init_names_missing,
    };
    util_run_clean(&run, 0, "rank %d never started", NEVER_STARTED);
}
END_TEST

/* ---- a rank claimed again once the job formed ----
 * Spoken to the root by hand: one rank of one joins and answers its
 * set-up rounds; a second process claiming that rank, queued while the
 * rounds ran, hears that the rank was taken and from where. */

/* 0 once n bytes arrived within a few seconds. */
static int recv_exactly(int fd, void *buf, size_t n) { return ccl__sock_recv_all(fd, buf, n, ccl__now() + 5) == CCL_OK ? 0 : -1; }

START_TEST(late_claim_after_the_job_formed) {
    struct ccl__unique_id uid;
    size_t record = ccl__conns_record_bytes();
    ck_assert_int_eq(ccl__boot_make_id(&uid, NULL, 10.0, record), CCL_OK);
    struct ccl__boot_hello hello = {.magic = CCL__BOOT_MAGIC, .version = CCL__BOOT_VERSION, .nranks = 1, .rank = 0,
                                    .record_bytes = (uint32_t)record};
    memcpy(hello.secret, uid.secret, sizeof hello.secret);
    uint8_t *rec = calloc(1, record);
    ck_assert_ptr_nonnull(rec);
    int first = stranger_connect(&uid);
    ck_assert_int_ge(first, 0);
    send_bytes(first, &hello, sizeof hello);
    send_bytes(first, rec, record);
    struct ccl__boot_table_hdr h;
    ck_assert_int_eq(recv_exactly(first, &h, sizeof h), 0);
    ck_assert_int_eq(h.status, CCL_OK);
    ck_assert_int_eq(recv_exactly(first, rec, record), 0);
    /* The job formed; the second claimant connects while its rounds run. */
    int late = stranger_connect(&uid);
    ck_assert_int_ge(late, 0);
    send_bytes(late, &hello, sizeof hello);
    send_bytes(late, rec, record);
    for (int round = 0; round < CCL__BOOT_ROUNDS; round++) {
        struct ccl__boot_round_msg m = {.status = CCL_OK, .rank = 0};
        send_bytes(first, &m, sizeof m);
        ck_assert_int_eq(recv_exactly(first, &m, sizeof m), 0);
        ck_assert_int_eq(m.status, CCL_OK);
    }
    struct ccl__boot_table_hdr refused;
    ck_assert_msg(recv_exactly(late, &refused, sizeof refused) == 0, "the late claimant's connection was closed "
                  "without a word");
    refused.msg[sizeof refused.msg - 1] = 0;
    fprintf(stderr, "[faults] a rank claimed after the job formed: \"%s\"\n", refused.msg);
    ck_assert_int_eq(refused.status, CCL_ERR_INVALID_USAGE);
    const char *from = strstr(refused.msg, "rank 0 of 1 was already claimed, from ");
    ck_assert_msg(from && strchr(from, ':'),
                  "the refusal does not say who holds the rank: \"%s\"", refused.msg);
    close(late), close(first), free(rec);
    ccl__boot_root_wait(uid.secret, ccl__now() + 5);
}
END_TEST

/* ---- a rank killed in every set-up phase ---- */

/* The victim dies (CCL_TEST_KILL_AT) in one phase of set-up. Every other
 * rank's init must fail within a second, naming it, and nothing may stay
 * in /dev/shm: the victim's segment, if it made one, is removed by the
 * survivors. */
#define SETUP_VICTIM 1
#define SETUP_NOTICE_S 1.0

struct setup_kill_case {
    const char *phase;
    const char *transport; /* NULL: auto, hosts of 2 */
    int nranks;
    const char *late_at; /* the last rank stalls here: it meets the ruins of a survivor that already failed */
};

static const struct setup_kill_case setup_kills[] = {
    {"joined", "shm", 3, NULL},  {"setup", "shm", 3, NULL},   {"connected", "shm", 3, NULL},
    {"joined", "tcp", 3, NULL},  {"setup", "tcp", 3, NULL},   {"connect", "tcp", 3, NULL},
    {"connected", "tcp", 3, NULL}, {"setup", NULL, 4, NULL},  {"connect", NULL, 4, NULL},
    {"connected", NULL, 4, NULL}, {"segment", "shm", 3, NULL}, {"segment", NULL, 4, NULL},
    /* The survivor rank 0 is told first and removes its segment; the late
     * rank 2 then finds it gone, and must still name rank 1. */
    {"connected", "shm", 3, "connecting"},
    /* The same on tcp: rank 0 has closed its listener when rank 2 dials. */
    {"connect", "tcp", 3, "connecting"},
};
#define SETUP_KILLS ((int)(sizeof setup_kills / sizeof setup_kills[0]))

static int init_after_victim(int rank, ccl_status_t st, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    harness_child_send("init %d %.6f", (int)st, harness_now());
    const char *why = ccl_comm_last_error(NULL);
    EXPECT(&t, st == CCL_ERR_REMOTE, "init returned %s: %s", ccl_status_string(st), why);
    char victim[16];
    snprintf(victim, sizeof victim, "rank %d", SETUP_VICTIM);
    EXPECT(&t, strstr(why, victim) != NULL, "the error does not name %s: \"%s\"", victim, why);
    return t.fails;
}

static int parent_setup_kill(struct harness_run *run, void *arg) {
    const struct setup_kill_case *kc = arg;
    siginfo_t info;
    memset(&info, 0, sizeof info);
    /* WNOWAIT: the harness reaps it later. */
    if (waitid(P_PID, (id_t)run->pid[SETUP_VICTIM], &info, WEXITED | WNOWAIT) != 0) return 1;
    double died = harness_now(), worst = 0;
    int fails = 0;
    for (int r = 0; r < run->nranks; r++) {
        if (r == SETUP_VICTIM) continue;
        char msg[HARNESS_MSG_BYTES];
        int st = 0;
        double when = 0;
        if (harness_recv(run, r, msg, sizeof msg, died + 30) != 0 || sscanf(msg, "init %d %lf", &st, &when) != 2) {
            fprintf(stderr, "parent: rank %d's init did not return after the victim died\n", r);
            fails++;
            continue;
        }
        if (when - died > worst) worst = when - died;
    }
    fprintf(stderr, "[faults] rank %d killed at set-up phase '%s' (%d ranks, %s%s%s): every other init failed within "
            "%.3f s\n", SETUP_VICTIM, kc->phase, run->nranks, kc->transport ? kc->transport : "auto, hosts of 2",
            kc->late_at ? ", the last rank late at " : "", kc->late_at ? kc->late_at : "", worst);
    if (worst > SETUP_NOTICE_S + (kc->late_at ? 0.2 : 0)) {
        fprintf(stderr, "parent: survivors needed %.2f s (want under %.1f s; CCL_TIMEOUT is 30)\n", worst,
                SETUP_NOTICE_S);
        fails++;
    }
    return fails;
}

START_TEST(killed_in_setup) {
    const struct setup_kill_case *kc = &setup_kills[_i];
    char kill_at[48];
    snprintf(kill_at, sizeof kill_at, "CCL_TEST_KILL_AT=%s", kc->phase);
    const char *rank_env[HARNESS_MAX_RANKS] = {0};
    rank_env[SETUP_VICTIM] = kill_at;
    char stall_at[48];
    snprintf(stall_at, sizeof stall_at, "CCL_TEST_STALL_AT=%s", kc->late_at ? kc->late_at : "");
    if (kc->late_at) rank_env[kc->nranks - 1] = stall_at;
    struct harness_run run = {
        .nranks = kc->nranks,
        .transport = kc->transport,
        .ranks_per_host = kc->transport ? 0 : 2,
        .arg = (void *)kc,
        .rank_env = rank_env,
        .init_check = init_after_victim,
        .parent = parent_setup_kill,
        .ccl_timeout = "30",
        .deadline_s = 60,
    };
    util_run_clean(&run, 1u << SETUP_VICTIM, "rank %d killed at '%s'", SETUP_VICTIM, kc->phase);
    int vs = run.status[SETUP_VICTIM];
    ck_assert_msg(WIFSIGNALED(vs) && WTERMSIG(vs) == SIGKILL, "the victim did not die at '%s' (status 0x%x)",
                  kc->phase, vs);
    ck_assert_msg(run.shm_leftovers == 0, "'%s': %d /dev/shm entries left behind", kc->phase, run.shm_leftovers);
}
END_TEST

/* Every rank of a host dies while making its segment: no survivor there
 * removes a name, so none may exist before the segment is complete (and a
 * complete one with a free lock is swept at once by the next set-up). */
START_TEST(host_killed_making_segments) {
    const char *rank_env[HARNESS_MAX_RANKS] = {"CCL_TEST_KILL_AT=segment", "CCL_TEST_KILL_AT=segment"};
    struct harness_run run = {
        .nranks = 2,
        .transport = "shm",
        .rank_env = rank_env,
        .ccl_timeout = "10",
        .deadline_s = 30,
    };
    harness_run(&run);
    for (int r = 0; r < run.nranks; r++)
        ck_assert_msg(WIFSIGNALED(run.status[r]) && WTERMSIG(run.status[r]) == SIGKILL,
                      "rank %d did not die at 'segment' (status 0x%x)", r, run.status[r]);
    ck_assert_msg(run.shm_leftovers == 0, "%d /dev/shm entries outlived the ranks that were making them",
                  run.shm_leftovers);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("faults_boot");
    util_add_loop_case(s, "wrong_secret", wrong_secret, wrong_secret_cases(), 60);
    util_add_loop_case(s, "garbage_at_root", garbage_at_root, (int)(sizeof garbage_cases / sizeof garbage_cases[0]),
                       150);
    util_add_loop_case(s, "silent_crowd_at_root", silent_crowd_at_root, 2, 90);
    util_add_loop_case(s, "duplicate_rank", duplicate_rank, 2, 90);
    TCase *tc = tcase_create("rank_never_started");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, rank_never_started);
    tcase_add_test(tc, late_claim_after_the_job_formed);
    suite_add_tcase(s, tc);
    util_add_loop_case(s, "killed_in_setup", killed_in_setup, SETUP_KILLS, 90);
    tc = tcase_create("host_killed_making_segments");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, host_killed_making_segments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return harness_main(suite()); }
