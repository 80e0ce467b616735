/* ctest: TIMEOUT 600 LABELS faults */
/*
 * Faults: a rank killed with SIGKILL in the middle of a large all_reduce
 * loop (by the parent, or by a thread of its own), and ccl_comm_abort from
 * another thread while a collective waits (test_faults_boot.c has the
 * bootstrap faults).
 * Every surviving rank must get an error, not a hang, within the deadline,
 * and nothing may be left in /dev/shm.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"
#include "util.h"

#define FAULT_CCL_TIMEOUT "20"
#define FAULT_CCL_TIMEOUT_S 20.0
#define LOOP_COUNT ((size_t)4 << 20) /* 16 MiB of float32 per call */
#define LOOP_LIMIT_S 120.0

enum killer { PARENT_KILLS, VICTIM_KILLS_ITSELF };

struct kill_case {
    struct matrix_config cfg;
    int victim;
    enum killer killer;
    size_t count; /* elements of each all-reduce; 0: LOOP_COUNT */
};

static const struct kill_case kill_cases[] = {
    {{4, "shm", 0, "4 ranks shm", NULL}, 2, PARENT_KILLS, 0},
    {{3, "tcp", 0, "3 ranks tcp", NULL}, 1, PARENT_KILLS, 0},
    {{4, "tcp", 1, "4 ranks tcp, one host each", NULL}, 3, VICTIM_KILLS_ITSELF, 0},
    {{4, NULL, 2, "4 ranks auto, 2 hosts x 2 ranks", NULL}, 0, VICTIM_KILLS_ITSELF, 0},
    {{5, "shm", 0, "5 ranks shm", NULL}, 4, VICTIM_KILLS_ITSELF, 0},
    /* The other algorithms, each killed mid-call too. */
    {{5, "shm", 0, "5 ranks shm, tree", "allreduce:tree"}, 3, PARENT_KILLS, 0},
    {{4, "tcp", 0, "4 ranks tcp, rhd", "allreduce:rhd"}, 1, VICTIM_KILLS_ITSELF, 0},
    {{3, NULL, 2, "3 ranks auto, hosts of 2 and 1, rd", "allreduce:rd"}, 2, PARENT_KILLS, 0},
    {{4, "shm", 0, "4 ranks shm, direct", "direct"}, 1, PARENT_KILLS, 0},
    {{3, "shm", 0, "3 ranks shm, direct", "direct"}, 0, VICTIM_KILLS_ITSELF, 0},
    /* Tiny all-reduces (the direct path's lines, algo/lines.c): the
     * survivors wait on the dead rank's line. */
    {{3, "shm", 0, "3 ranks shm, tiny all-reduces", "direct"}, 1, PARENT_KILLS, 2},
    {{4, "shm", 0, "4 ranks shm, tiny all-reduces", "direct"}, 3, VICTIM_KILLS_ITSELF, 5},
};
/* Under CCL_TEST_MATRIX=ib (inside tools/rdma-vm.sh): the same over RDMA,
 * alone and mixed with shared memory inside each host. */
static const struct kill_case ib_kill_cases[] = {
    {{3, "ib", 1, "3 ranks ib, one host each", NULL}, 1, PARENT_KILLS, 0},
    {{4, NULL, 2, "4 ranks auto (shm + ib), 2 hosts x 2", NULL}, 3, VICTIM_KILLS_ITSELF, 0},
    {{4, "ib", 2, "4 ranks ib, 2 hosts x 2, tree", "allreduce:tree"}, 0, PARENT_KILLS, 0},
};

static const struct kill_case *kill_list(int *n) {
    const char *m = getenv("CCL_TEST_MATRIX");
    if (m && strcmp(m, "ib") == 0) {
        *n = (int)(sizeof ib_kill_cases / sizeof ib_kill_cases[0]);
        return ib_kill_cases;
    }
    *n = (int)(sizeof kill_cases / sizeof kill_cases[0]);
    return kill_cases;
}

static int is_peer_failure(ccl_status_t st) { return st == CCL_ERR_REMOTE || st == CCL_ERR_TIMEOUT; }

/* The victim's thread: dies a little after the loop is running, most
 * likely in the middle of a call. */
static void *suicide_thread(void *arg) {
    (void)arg;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    harness_child_send("dying %.6f", harness_now());
    raise(SIGKILL);
    return NULL;
}

static int body_kill_loop(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct kill_case *kc = arg;
    struct harness_tally t = {rank, 0};
    size_t count = kc->count ? kc->count : LOOP_COUNT;
    float *in = malloc(count * 4), *out = malloc(count * 4);
    if (!in || !out) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    for (size_t i = 0; i < count; i++) in[i] = (float)(i % 100);
    double end = harness_now() + LOOP_LIMIT_S;
    int iterations = 0;
    ccl_status_t st = CCL_OK;
    while (harness_now() < end) {
        st = ccl_all_reduce(in, out, count, CCL_FLOAT32, CCL_SUM, comm);
        if (st != CCL_OK) break;
        if (++iterations == 1) harness_child_send("started");
        /* The victim arms its death after its second call, not its first:
         * that call's result holds every rank's input, so every rank has
         * returned from its first call and said "started". Armed after the
         * first, a slow rank (soft-RoCE under emulation) could still be in
         * its first call when the victim died, and report an error where
         * the parent waits for "started". */
        if (iterations == 2 && rank == kc->victim && kc->killer == VICTIM_KILLS_ITSELF) {
            pthread_t th;
            if (pthread_create(&th, NULL, suicide_thread, NULL) != 0) raise(SIGKILL);
        }
    }
    double when = harness_now();
    harness_child_send("error %d %.6f", (int)st, when);
    if (rank == kc->victim) {
        harness_fail(&t, __FILE__, __LINE__, "the victim was not killed");
    } else {
        EXPECT(&t, is_peer_failure(st), "after %d iterations the loop ended with %s, expected a remote failure or a "
               "timeout", iterations, ccl_status_string(st));
        EXPECT(&t, ccl_comm_last_error(comm)[0] != '\0', "no last error after %s", ccl_status_string(st));
        /* On one host every survivor names the rank that died, not the
         * survivor that noticed first and told the rest. */
        char victim[24];
        snprintf(victim, sizeof victim, "rank %d ", kc->victim);
        if (kc->cfg.transport && strcmp(kc->cfg.transport, "shm") == 0 && st == CCL_ERR_REMOTE)
            EXPECT(&t, strstr(ccl_comm_last_error(comm), victim) != NULL, "the error names another rank than the "
                   "victim, %d: \"%s\"", kc->victim, ccl_comm_last_error(comm));
        /* Later calls fail too, and at once. */
        double t0 = harness_now();
        ccl_status_t later = ccl_barrier(comm);
        EXPECT(&t, later < 0, "a barrier after the failure returned %s", ccl_status_string(later));
        EXPECT(&t, harness_now() - t0 < 5.0, "a barrier on the failed communicator took %.1f s", harness_now() - t0);
    }
    free(in);
    free(out);
    return t.fails;
}

/* Parent: wait until every rank runs, kill the victim (or wait for it to
 * die), then time how long each survivor needed to notice. */
static int parent_kill(struct harness_run *run, void *arg) {
    const struct kill_case *kc = arg;
    int fails = 0;
    char msg[HARNESS_MSG_BYTES];
    for (int r = 0; r < run->nranks; r++) {
        if (harness_recv(run, r, msg, sizeof msg, run->start + 60) != 0 || strcmp(msg, "started") != 0) {
            fprintf(stderr, "parent: rank %d never reported that its loop started\n", r);
            return 1;
        }
    }
    double died;
    if (kc->killer == PARENT_KILLS) {
        died = harness_now();
        kill(run->pid[kc->victim], SIGKILL);
    } else if (harness_recv(run, kc->victim, msg, sizeof msg, harness_now() + 30) != 0 ||
               sscanf(msg, "dying %lf", &died) != 1) {
        fprintf(stderr, "parent: the victim never said it was dying\n");
        return 1;
    }
    double worst = 0;
    for (int r = 0; r < run->nranks; r++) {
        if (r == kc->victim) continue;
        int st = 0;
        double when = 0;
        double deadline = died + FAULT_CCL_TIMEOUT_S + 15;
        if (harness_recv(run, r, msg, sizeof msg, deadline) != 0 || sscanf(msg, "error %d %lf", &st, &when) != 2) {
            fprintf(stderr, "parent: rank %d reported no error within %.0f s of the kill\n", r, deadline - died);
            fails++;
            continue;
        }
        if (when - died > worst) worst = when - died;
        if (when - died > FAULT_CCL_TIMEOUT_S + 5) {
            fprintf(stderr, "parent: rank %d needed %.1f s to notice the death\n", r, when - died);
            fails++;
        }
    }
    fprintf(stderr, "[faults] kill -9 of rank %d of %d (%s, %s): survivors saw an error after at most %.3f s\n",
            kc->victim, run->nranks, kc->cfg.name, kc->killer == PARENT_KILLS ? "parent kills" : "kills itself",
            worst);
    return fails;
}

/* "CCL_ALGO=..." for a configuration that forces one, else NULL. */
static const char *algo_env(const struct matrix_config *cfg, char *buf, size_t n) {
    if (!cfg->algo) return NULL;
    snprintf(buf, n, "CCL_ALGO=%s", cfg->algo);
    return buf;
}

START_TEST(kill_during_all_reduce) {
    int ncases;
    const struct kill_case *kc = &kill_list(&ncases)[_i];
    char env[96];
    struct harness_run run = {
        .env = algo_env(&kc->cfg, env, sizeof env),
        .nranks = kc->cfg.nranks,
        .body = body_kill_loop,
        .arg = (void *)kc,
        .transport = kc->cfg.transport,
        .ranks_per_host = kc->cfg.ranks_per_host,
        .ccl_timeout = FAULT_CCL_TIMEOUT,
        .deadline_s = 150,
        .parent = parent_kill,
        .lenient_destroy = 1,
    };
    util_run_clean(&run, 1ull << kc->victim, "%s", kc->cfg.name);
    int vs = run.status[kc->victim];
    ck_assert_msg(!run.hung[kc->victim] && WIFSIGNALED(vs) && WTERMSIG(vs) == SIGKILL,
                  "%s: the victim (rank %d) did not die of SIGKILL (status 0x%x)", kc->cfg.name, kc->victim, vs);
    ck_assert_msg(run.shm_leftovers == 0, "%s: %d /dev/shm entries left after the kill", kc->cfg.name,
                  run.shm_leftovers);
}
END_TEST

/* ---- ccl_comm_abort from another thread ---- */

#define ABORTER 0
#define LATE_RANK 1
#define ABORT_COUNT ((size_t)1 << 20)

static void *abort_thread(void *arg) {
    ccl_comm_t *comm = arg;
    /* Give the main thread time to be inside its all_reduce; if it is not
     * there yet, the call must still come back aborted. */
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return (void *)(intptr_t)ccl_comm_abort(comm);
}

static int body_abort(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float *in = calloc(ABORT_COUNT, 4), *out = calloc(ABORT_COUNT, 4);
    if (!in || !out) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < ABORT_COUNT; i++) in[i] = 1.0f;
    char msg[HARNESS_MSG_BYTES];
    if (rank == ABORTER) {
        pthread_t th;
        if (pthread_create(&th, NULL, abort_thread, comm) != 0) {
            harness_fail(&t, __FILE__, __LINE__, "pthread_create failed");
            goto out;
        }
        double t0 = harness_now();
        ccl_status_t st = ccl_all_reduce(in, out, ABORT_COUNT, CCL_FLOAT32, CCL_SUM, comm);
        double waited = harness_now() - t0;
        void *ret = NULL;
        pthread_join(th, &ret);
        EXPECT(&t, (ccl_status_t)(intptr_t)ret == CCL_OK, "ccl_comm_abort returned %s",
               ccl_status_string((ccl_status_t)(intptr_t)ret));
        EXPECT(&t, st == CCL_ERR_ABORTED, "the waiting all_reduce returned %s after %.2f s, expected %s",
               ccl_status_string(st), waited, ccl_status_string(CCL_ERR_ABORTED));
        EXPECT(&t, ccl_comm_last_error(comm)[0] != '\0', "no last error after the abort");
        /* Later calls: aborted, at once. */
        EXPECT_STATUS(&t, CCL_ERR_ABORTED, ccl_all_reduce(in, out, 16, CCL_FLOAT32, CCL_SUM, comm));
        EXPECT_STATUS(&t, CCL_ERR_ABORTED, ccl_barrier(comm));
        ccl_request_t *req = NULL;
        ccl_status_t ast = ccl_barrier_async(comm, &req);
        if (ast == CCL_OK) ast = ccl_wait(req);
        EXPECT(&t, ast == CCL_ERR_ABORTED, "barrier_async after the abort: %s", ccl_status_string(ast));
        fprintf(stderr, "[faults] abort: the waiting all_reduce returned %s after %.3f s\n", ccl_status_string(st),
                waited);
        harness_child_send("aborted");
    } else {
        if (rank == LATE_RANK && harness_child_recv(msg, sizeof msg, 60) != 0) {
            harness_fail(&t, __FILE__, __LINE__, "never told that rank %d aborted", ABORTER);
            goto out;
        }
        double t0 = harness_now();
        ccl_status_t st = ccl_all_reduce(in, out, ABORT_COUNT, CCL_FLOAT32, CCL_SUM, comm);
        double waited = harness_now() - t0;
        if (st == CCL_OK) {
            /* Everything this rank needed from the aborter may have left it
             * before the abort (rhd's last steps need not touch it): then
             * the result must be whole, and the next call must fail. */
            size_t bad = 0;
            for (size_t i = 0; i < ABORT_COUNT; i++) bad += out[i] != (float)nranks;
            EXPECT(&t, bad == 0, "all_reduce finished despite the abort with %zu wrong elements", bad);
            ccl_status_t next = ccl_barrier(comm);
            EXPECT(&t, next == CCL_ERR_REMOTE || next == CCL_ERR_ABORTED || next == CCL_ERR_TIMEOUT,
                   "the barrier after an aborted rank returned %s", ccl_status_string(next));
        } else {
            EXPECT(&t, st == CCL_ERR_REMOTE || st == CCL_ERR_ABORTED || st == CCL_ERR_TIMEOUT,
                   "all_reduce with an aborted rank returned %s after %.2f s", ccl_status_string(st), waited);
        }
        if (rank == LATE_RANK || rank == nranks - 1)
            fprintf(stderr, "[faults] abort: rank %d%s got %s after %.3f s\n", rank,
                    rank == LATE_RANK ? " (called after the abort)" : "", ccl_status_string(st), waited);
    }
out:
    free(in);
    free(out);
    return t.fails;
}

static int parent_abort(struct harness_run *run, void *arg) {
    (void)arg;
    char msg[HARNESS_MSG_BYTES];
    if (harness_recv(run, ABORTER, msg, sizeof msg, run->start + 90) != 0) {
        fprintf(stderr, "parent: rank %d never reported its abort\n", ABORTER);
        return 1;
    }
    return harness_send(run, LATE_RANK, "go") == 0 ? 0 : 1;
}

static const struct matrix_config abort_configs[] = {
    {3, "shm", 0, "3 ranks shm", NULL},
    {4, "tcp", 0, "4 ranks tcp", NULL},
    {4, NULL, 2, "4 ranks auto, 2 hosts x 2 ranks", NULL},
    {4, "shm", 0, "4 ranks shm, tree", "tree"},
    {3, "shm", 0, "3 ranks shm, direct", "direct"},
    {4, "tcp", 0, "4 ranks tcp, rhd", "allreduce:rhd"},
};

START_TEST(abort_while_waiting) {
    const struct matrix_config *cfg = &abort_configs[_i];
    char env[96];
    struct harness_run run = {
        .env = algo_env(cfg, env, sizeof env),
        .nranks = cfg->nranks,
        .body = body_abort,
        .transport = cfg->transport,
        .ranks_per_host = cfg->ranks_per_host,
        .ccl_timeout = FAULT_CCL_TIMEOUT,
        .deadline_s = 120,
        .parent = parent_abort,
        .lenient_destroy = 1,
    };
    util_run_clean(&run, 0, "abort on %s", cfg->name);
}
END_TEST

/* ---- a rank that leaves right after its last call is not a death ---- */

/* The root arrives late, so its predecessor in the reduction blocks on a
 * full FIFO towards it while the first rank, which has committed all it
 * had to give, returns, destroys its communicator and exits. The others
 * must finish the call: what a rank committed before it left is still
 * theirs to read, and a wait blocked on someone else does not depend on
 * it. */
#define LEAVER_ROOT 2
#define LEAVER_COUNT ((size_t)3 * 1024) /* 12 KiB of float32: three 4 KiB slots, one more than a FIFO holds */

struct leaver_case {
    const char *name, *transport, *env;
};

static const struct leaver_case leaver_cases[] = {
    {"3 ranks shm, ring", "shm", "CCL_ALGO=reduce:ring CCL_SLOTS=2 CCL_SHM_SLOT_BYTES=4096"},
    {"3 ranks shm, tree", "shm", "CCL_ALGO=reduce:tree CCL_SLOTS=2 CCL_SHM_SLOT_BYTES=4096"},
    {"3 ranks tcp, ring", "tcp", "CCL_ALGO=reduce:ring CCL_SLOTS=2 CCL_TCP_SLOT_BYTES=4096"},
};
#define LEAVER_CASES ((int)(sizeof leaver_cases / sizeof leaver_cases[0]))

static int body_leaver(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    struct ref_case rc = {CCL_FLOAT32, CCL_SUM, nranks, 77};
    size_t bytes = LEAVER_COUNT * sizeof(float);
    float *send = malloc(bytes), *recv = malloc(bytes), *want = malloc(bytes);
    ck_assert_ptr_nonnull(send);
    ck_assert_ptr_nonnull(recv);
    ck_assert_ptr_nonnull(want);
    ref_reduce_input(&rc, rank, 0, LEAVER_COUNT, send);
    if (rank == LEAVER_ROOT) {
        struct timespec ts = {0, 400 * 1000 * 1000}; /* past the waiters' first liveness checks */
        nanosleep(&ts, NULL);
    }
    ccl_status_t st = ccl_reduce(send, recv, LEAVER_COUNT, CCL_FLOAT32, CCL_SUM, LEAVER_ROOT, comm);
    EXPECT(&t, st == CCL_OK, "reduce returned %s: %s", ccl_status_string(st), ccl_comm_last_error(comm));
    if (st == CCL_OK && rank == LEAVER_ROOT) {
        ref_reduce_expected(&rc, 0, LEAVER_COUNT, want);
        EXPECT(&t, memcmp(recv, want, bytes) == 0, "the root's result differs from the reference");
    }
    free(send);
    free(recv);
    free(want);
    return t.fails; /* rank 0 destroys and exits at once; the others may still be inside the call */
}

START_TEST(leaver_is_not_a_death) {
    const struct leaver_case *lc = &leaver_cases[_i];
    struct harness_run run = {
        .env = lc->env,
        .nranks = 3,
        .body = body_leaver,
        .transport = lc->transport,
        .ccl_timeout = FAULT_CCL_TIMEOUT,
        .deadline_s = 60,
    };
    util_run_clean(&run, 0, "%s", lc->name);
}
END_TEST

/* ---- a timeout names the rank that is behind ---- */

/* Rank 2 stays in its own code past CCL_TIMEOUT (as a rank does that
 * skipped a call, or called with count 0 and went on). The others wait in
 * an all-reduce; whichever times out first must follow "waiting on" to
 * rank 2 and say that it is not inside the library. */
#define BEHIND_RANK 2
#define BEHIND_TIMEOUT "2"
#define BEHIND_SLEEP_S 6

struct behind_case {
    const char *name, *transport, *env;
    int set_in_code; /* the timeout set by ccl_comm_set_timeout, CCL_TIMEOUT left at the faults' 20 s */
};

static const struct behind_case behind_cases[] = {
    {"3 ranks shm, ring", "shm", "CCL_ALGO=allreduce:ring", 0},
    {"4 ranks tcp, ring", "tcp", "CCL_ALGO=allreduce:ring", 0},
    {"3 ranks shm, ring, timeout set in code", "shm", "CCL_ALGO=allreduce:ring", 1},
};
#define BEHIND_CASES ((int)(sizeof behind_cases / sizeof behind_cases[0]))

static int body_behind(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    const struct behind_case *bc = arg;
    struct harness_tally t = {rank, 0};
    if (bc->set_in_code) EXPECT_OK(&t, ccl_comm_set_timeout(comm, atof(BEHIND_TIMEOUT)));
    if (rank == BEHIND_RANK) {
        struct timespec ts = {BEHIND_SLEEP_S, 0};
        nanosleep(&ts, NULL);
        return t.fails;
    }
    float buf[1000] = {0};
    ccl_status_t st = ccl_all_reduce(buf, buf, 1000, CCL_FLOAT32, CCL_SUM, comm);
    const char *why = ccl_comm_last_error(comm);
    EXPECT(&t, st == CCL_ERR_TIMEOUT || st == CCL_ERR_REMOTE, "all_reduce returned %s", ccl_status_string(st));
    char want[64];
    snprintf(want, sizeof want, "rank %d is behind: it is not inside a libccl call", BEHIND_RANK);
    int named = st == CCL_ERR_TIMEOUT && strstr(why, want) != NULL;
    harness_child_send("named %d", named);
    if (st == CCL_ERR_TIMEOUT) fprintf(stderr, "[faults] rank %d timed out: %s\n", rank, why);
    if (st == CCL_ERR_TIMEOUT) EXPECT(&t, named, "the timeout does not name rank %d as behind: %s", BEHIND_RANK, why);
    /* and says where the timeout came from */
    const char *source = bc->set_in_code ? "(timeout " BEHIND_TIMEOUT " s, set by ccl_comm_set_timeout)"
                                         : "(CCL_TIMEOUT=" BEHIND_TIMEOUT ")";
    if (st == CCL_ERR_TIMEOUT) EXPECT(&t, strstr(why, source) != NULL, "the timeout does not say %s: %s", source, why);
    return t.fails;
}

static int parent_behind(struct harness_run *run, void *arg) {
    (void)arg;
    int named = 0;
    for (int r = 0; r < run->nranks; r++) {
        if (r == BEHIND_RANK) continue;
        char msg[HARNESS_MSG_BYTES];
        int n = 0;
        if (harness_recv(run, r, msg, sizeof msg, run->start + 40) == 0 && sscanf(msg, "named %d", &n) == 1) named += n;
    }
    if (named == 0) fprintf(stderr, "parent: no rank's timeout named rank %d as the one behind\n", BEHIND_RANK);
    return named == 0;
}

START_TEST(timeout_names_rank_behind) {
    const struct behind_case *bc = &behind_cases[_i];
    struct harness_run run = {
        .nranks = bc->transport[0] == 't' ? 4 : 3,
        .body = body_behind,
        .arg = (void *)bc,
        .transport = bc->transport,
        .env = bc->env,
        .ccl_timeout = bc->set_in_code ? FAULT_CCL_TIMEOUT : BEHIND_TIMEOUT,
        .parent = parent_behind,
        .lenient_destroy = 1,
        .deadline_s = 60,
    };
    util_run_clean(&run, 0, "%s, rank %d behind", bc->name, BEHIND_RANK);
}
END_TEST

/* ---- a rank killed before the pairs it shares are first used ----
 * Over tcp (and ib, under CCL_TEST_MATRIX=ib), pairs beyond the rings'
 * and trees' connect when a call first needs them (CCL_CONNECT=lazy): a
 * dead rank has no socket or queue pair there to close.
 * 7 ranks, one host each; after a barrier (the pairs set-up linked) the
 * victim dies, and the others' first all-to-all needs every pair: each
 * survivor must fail within seconds (a refused dial, or the probe of the
 * dead rank's listener), long before CCL_TIMEOUT, and the all-to-all of
 * the same ranks with every pair linked first must fail alike. Where a
 * survivor has no linked pair to hear it from, the link names the dead
 * rank itself. */

#define FIRST_USE_RANKS 7
#define FIRST_USE_VICTIM 3
#define FIRST_USE_COUNT 1000 /* float32 per block */

/* The victim's pairs with ranks 0, 1 and 6 are first-use pairs (its
 * ring neighbours are 2 and 4, its tree neighbours 2, 4 and 5): those
 * ranks receive from it alone, so only the link itself can tell them it
 * is dead. Over tcp, 0 and 1, the lower ranks of their pairs, probe its
 * listener, and 6 dials it; over ib each sends the victim its queue
 * pairs' record on the pair channel, whose dial is refused. */
static int receives_from_victim_alone(int rank) { return rank == 0 || rank == 1 || rank == 6; }

static int body_receive_from_dead(ccl_comm_t *comm, int rank, struct harness_tally *t, float *buf) {
    if (!receives_from_victim_alone(rank)) return 0;
    double t0 = harness_now();
    ccl_status_t st = ccl_recv(buf, FIRST_USE_COUNT, CCL_FLOAT32, FIRST_USE_VICTIM, comm);
    double took = harness_now() - t0;
    char says[48];
    snprintf(says, sizeof says, "rank %d (", FIRST_USE_VICTIM);
    /* tcp's dial or probe: "is gone"; ib's pair channel: "exited" */
    const char *why = ccl_comm_last_error(comm);
    EXPECT(t, st == CCL_ERR_REMOTE && strstr(why, says) && (strstr(why, "is gone") || strstr(why, "exited")),
           "a receive from the dead rank %d returned %s: \"%s\"", FIRST_USE_VICTIM, ccl_status_string(st),
           ccl_comm_last_error(comm));
    EXPECT(t, took < 5.0, "the receive took %.1f s to fail", took);
    fprintf(stderr, "[faults] rank %d killed before its first use: rank %d's receive from it failed after %.2f s: "
            "\"%s\"\n", FIRST_USE_VICTIM, rank, took, ccl_comm_last_error(comm));
    return 0;
}

/* tcp; ib under CCL_TEST_MATRIX=ib (inside tools/rdma-vm.sh), whose
 * pairs link on first use through the pair channel. */
static const char *first_use_transport(void) {
    const char *m = getenv("CCL_TEST_MATRIX");
    return m && strcmp(m, "ib") == 0 ? "ib" : "tcp";
}

static int body_killed_before_first_use(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const int *linked_first = arg;
    struct harness_tally t = {rank, 0};
    size_t n = (size_t)nranks * FIRST_USE_COUNT;
    float *in = calloc(n, sizeof(float)), *out = calloc(n, sizeof(float));
    if (!in || !out) {
        harness_fail(&t, __FILE__, __LINE__, "out of memory");
        return t.fails;
    }
    if (*linked_first == 1) EXPECT_OK(&t, ccl_all_to_all(in, out, FIRST_USE_COUNT, CCL_FLOAT32, comm));
    /* Not before the point-to-point case: the barrier's rounds would link
     * the victim's pairs with 0, 1 and 6 (init ends on every rank together). */
    if (*linked_first < 2) EXPECT_OK(&t, ccl_barrier(comm));
    if (rank == FIRST_USE_VICTIM) {
        fflush(NULL);
        raise(SIGKILL);
    }
    struct timespec ts = {0, 300 * 1000 * 1000}; /* the victim is gone, its listener closed */
    nanosleep(&ts, NULL);
    if (*linked_first == 2) {
        body_receive_from_dead(comm, rank, &t, out);
        free(in);
        free(out);
        return t.fails;
    }
    double t0 = harness_now();
    ccl_status_t st = ccl_all_to_all(in, out, FIRST_USE_COUNT, CCL_FLOAT32, comm);
    double took = harness_now() - t0;
    EXPECT(&t, st == CCL_ERR_REMOTE, "the all-to-all after rank %d died returned %s (%s)", FIRST_USE_VICTIM,
           ccl_status_string(st), ccl_comm_last_error(comm));
    EXPECT(&t, took < 8.0, "the all-to-all took %.1f s to fail (CCL_TIMEOUT is %s s)", took, FAULT_CCL_TIMEOUT);
    fprintf(stderr, "[faults] rank %d killed before %s: rank %d failed after %.2f s: \"%s\"\n", FIRST_USE_VICTIM,
            *linked_first ? "a second all-to-all" : "the first use of its pairs", rank, took,
            ccl_comm_last_error(comm));
    free(in);
    free(out);
    return t.fails;
}

START_TEST(killed_before_first_use) {
    static const int linked_first[3] = {0, 1, 2}; /* 2: point-to-point from the victim alone */
    struct harness_run run = {
        .nranks = FIRST_USE_RANKS,
        .body = body_killed_before_first_use,
        .arg = (void *)&linked_first[_i],
        .transport = first_use_transport(),
        .ranks_per_host = 1,
        .ccl_timeout = FAULT_CCL_TIMEOUT,
        .lenient_destroy = 1,
        .deadline_s = 60,
    };
    static const char *const when[3] = {"its pairs' first use", "a second all-to-all", "receives from it"};
    util_run_clean(&run, 1ull << FIRST_USE_VICTIM, "rank %d of %d killed before %s", FIRST_USE_VICTIM,
                   FIRST_USE_RANKS, when[_i]);
}
END_TEST

/* ccl_comm_create_group with a member killed before it: ranks 0 to 3 of 5
 * make a group led by rank 0; rank 4 makes no call. The victim is the
 * leader or a member; every living member fails within seconds, naming
 * it. */
#define GROUP_RANKS 5
struct group_kill {
    int victim;
    const char *transport;
};
static const struct group_kill group_kills[] = {{2, "tcp"}, {0, "tcp"}, {2, "shm"}, {0, "shm"}};
#define GROUP_KILL_CASES ((int)(sizeof group_kills / sizeof group_kills[0]))

static int body_group_kill(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)nranks;
    const struct group_kill *k = arg;
    struct harness_tally t = {rank, 0};
    EXPECT_OK(&t, ccl_barrier(comm));
    if (rank == k->victim) {
        fflush(NULL);
        raise(SIGKILL);
    }
    if (rank == GROUP_RANKS - 1) return t.fails; /* not a member */
    static const int members[4] = {0, 1, 2, 3};
    ccl_comm_t *g = NULL;
    double t0 = harness_now();
    ccl_status_t st = ccl_comm_create_group(comm, members, 4, &g);
    double took = harness_now() - t0;
    const char *why = ccl_comm_last_error(comm);
    char names[16];
    snprintf(names, sizeof names, "rank %d", k->victim);
    /* One host per rank over tcp, a member that hears of a member's death
     * from the leader hears it second-hand: the leader's communicator
     * failed and closed its links, and that is what such a member sees. */
    int second_hand = strcmp(k->transport, "tcp") == 0 && k->victim != 0 && rank != 0 &&
                      strstr(why, "rank 0 (") && strstr(why, "closed its connection");
    EXPECT(&t, st == CCL_ERR_REMOTE && g == NULL && (strstr(why, names) != NULL || second_hand),
           "create_group with rank %d dead returned %s: \"%s\"", k->victim, ccl_status_string(st), why);
    EXPECT(&t, took < 8.0, "create_group took %.1f s to fail (CCL_TIMEOUT is %s s)", took, FAULT_CCL_TIMEOUT);
    fprintf(stderr, "[faults] rank %d killed before create_group: rank %d failed after %.2f s: \"%s\"\n", k->victim,
            rank, took, why);
    if (g) ccl_comm_destroy(g);
    return t.fails;
}

START_TEST(killed_before_create_group) {
    const struct group_kill *k = &group_kills[_i];
    struct harness_run run = {
        .nranks = GROUP_RANKS,
        .body = body_group_kill,
        .arg = (void *)k,
        .transport = k->transport,
        .ranks_per_host = strcmp(k->transport, "tcp") == 0 ? 1 : 0,
        .ccl_timeout = FAULT_CCL_TIMEOUT,
        .lenient_destroy = 1,
        .deadline_s = 60,
    };
    util_run_clean(&run, 1ull << k->victim, "rank %d (%s) of %d killed before create_group", k->victim,
                   k->victim == 0 ? "the leader" : "a member", GROUP_RANKS);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("faults");
    int ncases;
    kill_list(&ncases);
    util_add_loop_case(s, "kill_during_all_reduce", kill_during_all_reduce, ncases, 200);
    util_add_loop_case(s, "abort_while_waiting", abort_while_waiting,
                       (int)(sizeof abort_configs / sizeof abort_configs[0]), 200);
    util_add_loop_case(s, "leaver_is_not_a_death", leaver_is_not_a_death, LEAVER_CASES, 100);
    util_add_loop_case(s, "timeout_names_rank_behind", timeout_names_rank_behind, BEHIND_CASES, 100);
    util_add_loop_case(s, "killed_before_first_use", killed_before_first_use, 3, 100);
    util_add_loop_case(s, "killed_before_create_group", killed_before_create_group, GROUP_KILL_CASES, 100);
    return s;
}

int main(void) { return harness_main(suite()); }
