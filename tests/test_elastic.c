/* ctest: TIMEOUT 900 */
/*
 * Elastic communicators: revoke, shrink and grow, with real processes and
 * real kills, over shm, tcp and mixed hosts. After every shrink or grow
 * the new communicator must pass a correctness matrix (all-reduce of every
 * dtype and op at awkward counts, all-gather and broadcast, bit-exact
 * against references computed here) on every rank, and nothing may be left
 * in /dev/shm.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "matrix.h"
#include "ref.h"
#include "util.h"

/* CCL_TIMEOUT: how long a silent rank is waited for (and a stopped one,
 * STOP_TIMEOUT: healthy ranks come to that shrink up to a second apart,
 * since each timed-out wait first gives the stopped rank a second to say
 * where it is, and a loaded machine adds its own delays; the timeout
 * leaves them room); the RDMA VM emulates its CPUs, and its inits alone
 * take seconds. */
static const char *ELASTIC_TIMEOUT = "3", *STOP_TIMEOUT = "3";

static const struct matrix_config host_configs[] = {
    {3, "shm", 0, "3 ranks shm", NULL},
    {5, "shm", 0, "5 ranks shm", NULL},
    {4, "tcp", 0, "4 ranks tcp", NULL},
    {4, NULL, 2, "4 ranks auto, 2 hosts x 2", NULL},
};
/* CCL_TEST_MATRIX=ib (tests/rdma_suite.sh, in the RDMA VM): the same
 * cases over the RDMA transport, each rank a host of its own, and mixed. */
static const struct matrix_config ib_configs[] = {
    {3, "ib", 1, "3 ranks ib", NULL},
    {5, "ib", 1, "5 ranks ib", NULL},
    {4, "ib", 1, "4 ranks ib", NULL},
    {4, NULL, 2, "4 ranks auto (shm in a host, ib across), 2 hosts x 2", NULL},
};
static const struct matrix_config *elastic_configs = host_configs;
#define NCONFIGS ((int)(sizeof host_configs / sizeof host_configs[0]))

/* ---- the correctness matrix on a new communicator ---- */

static void check_all_reduce(struct harness_tally *t, ccl_comm_t *comm, const char *what) {
    int rank = -1, n = 0;
    ccl_comm_rank(comm, &rank);
    ccl_comm_size(comm, &n);
    static const size_t counts[] = {0, 1, 7, 1031};
    size_t cap = 1031 * 8;
    uint8_t *in = malloc(cap), *out = malloc(cap), *want = malloc(cap);
    if (!in || !out || !want) {
        harness_fail(t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    for (int d = 0; d < CCL_NUM_DTYPES && t->fails < 3; d++)
        for (int op = 0; op < CCL_NUM_OPS; op++) {
            if (!ref_op_applies((ccl_dtype_t)d, (ccl_op_t)op)) continue;
            for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
                size_t c = counts[k];
                struct ref_case rc = {(ccl_dtype_t)d, (ccl_op_t)op, n, 0xe1a5u + 131u * (uint64_t)d + 7u * (uint64_t)op + c};
                ref_reduce_input(&rc, rank, 0, c, in);
                ref_reduce_expected(&rc, 0, c, want);
                ccl_status_t st = ccl_all_reduce(in, out, c, (ccl_dtype_t)d, (ccl_op_t)op, comm);
                EXPECT(t, st == CCL_OK, "%s: all_reduce %s %s count %zu: %s (%s)", what, ccl_dtype_name((ccl_dtype_t)d),
                       ccl_op_name((ccl_op_t)op), c, ccl_status_string(st), ccl_comm_last_error(comm));
                if (st != CCL_OK) goto out;
                size_t bad = ref_first_diff((ccl_dtype_t)d, out, want, c);
                EXPECT(t, bad == SIZE_MAX, "%s: all_reduce %s %s count %zu: element %zu differs", what,
                       ccl_dtype_name((ccl_dtype_t)d), ccl_op_name((ccl_op_t)op), c, bad);
            }
        }
out:
    free(in);
    free(out);
    free(want);
}

static void check_gather_bcast(struct harness_tally *t, ccl_comm_t *comm, const char *what) {
    int rank = -1, n = 0;
    ccl_comm_rank(comm, &rank);
    ccl_comm_size(comm, &n);
    const size_t block = 4099; /* bytes: prime */
    uint8_t *mine = malloc(block), *all = malloc(block * (size_t)n), *want = malloc(block);
    if (!mine || !all || !want) {
        harness_fail(t, __FILE__, __LINE__, "out of memory");
        goto out;
    }
    ref_bytes(0x5eed, rank, 0, block, mine);
    if (EXPECT_OK(t, ccl_all_gather(mine, all, block, CCL_UINT8, comm)) != CCL_OK) goto out;
    for (int r = 0; r < n; r++) {
        ref_bytes(0x5eed, r, 0, block, want);
        EXPECT(t, memcmp(all + (size_t)r * block, want, block) == 0, "%s: all_gather block of rank %d differs", what,
               r);
    }
    int root = n - 1;
    ref_bytes(0xb0b, root, 0, block, want);
    if (rank == root) memcpy(mine, want, block);
    else memset(mine, 0, block);
    if (EXPECT_OK(t, ccl_broadcast(mine, mine, block, CCL_UINT8, root, comm)) == CCL_OK)
        EXPECT(t, memcmp(mine, want, block) == 0, "%s: broadcast from rank %d differs", what, root);
out:
    free(mine);
    free(all);
    free(want);
}

static void check_comm(struct harness_tally *t, ccl_comm_t *comm, const char *what) {
    check_all_reduce(t, comm, what);
    if (!t->fails) check_gather_bcast(t, comm, what);
}

/* The shape a survivor's new communicator must have: ranks in old order
 * without `out` (bit r). */
static void expect_shape(struct harness_tally *t, ccl_comm_t *nc, int old_rank, int old_n, uint64_t out,
                         const char *what) {
    int want_rank = 0, want_n = 0;
    for (int r = 0; r < old_n; r++)
        if (!(out >> r & 1)) want_n++, want_rank += r < old_rank;
    int rank = -1, n = -1;
    ccl_comm_rank(nc, &rank);
    ccl_comm_size(nc, &n);
    EXPECT(t, rank == want_rank && n == want_n, "%s: rank %d of %d, expected %d of %d", what, rank, n, want_rank,
           want_n);
}

static void expect_failed(struct harness_tally *t, ccl_comm_t *old, uint64_t out, const char *what) {
    int ranks[HARNESS_MAX_RANKS], nf = -1;
    EXPECT_OK(t, ccl_comm_failed_ranks(old, ranks, HARNESS_MAX_RANKS, &nf));
    uint64_t got = 0;
    for (int i = 0; i < nf && i < HARNESS_MAX_RANKS; i++) got |= 1ull << ranks[i];
    EXPECT(t, got == out, "%s: failed_ranks gave mask 0x%llx, expected 0x%llx", what, (unsigned long long)got,
           (unsigned long long)out);
}

/* ---- revoke ---- */

#define BIG ((size_t)1 << 20)

static int body_revoke(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float *buf = calloc(BIG, sizeof(float));
    ccl_comm_t *nc = NULL;
    if (!buf) return 1;
    EXPECT_OK(&t, ccl_all_reduce(buf, buf, 1024, CCL_FLOAT32, CCL_SUM, comm));
    int revoker = nranks - 1;
    if (rank == revoker) {
        /* The others are inside an all-reduce that cannot finish without
         * this rank: the revoke must end it everywhere. */
        usleep(200 * 1000);
        EXPECT_OK(&t, ccl_comm_revoke(comm));
        EXPECT_OK(&t, ccl_comm_revoke(comm)); /* idempotent */
    } else {
        double t0 = harness_now();
        ccl_status_t st = ccl_all_reduce(buf, buf, BIG, CCL_FLOAT32, CCL_SUM, comm);
        EXPECT(&t, st == CCL_ERR_REVOKED, "all_reduce during the revoke returned %s (%s)", ccl_status_string(st),
               ccl_comm_last_error(comm));
        EXPECT(&t, harness_now() - t0 < 2.5, "the revoke took %.2f s to end the all_reduce", harness_now() - t0);
        char want[32];
        snprintf(want, sizeof want, "rank %d revoked", revoker);
        EXPECT(&t, strstr(ccl_comm_last_error(comm), want) != NULL, "the error does not name the revoker: %s",
               ccl_comm_last_error(comm));
    }
    /* Later calls fail at once, with the same status. */
    EXPECT_STATUS(&t, CCL_ERR_REVOKED, ccl_barrier(comm));
    ccl_status_t aerr = CCL_OK;
    EXPECT_OK(&t, ccl_comm_get_async_error(comm, &aerr));
    EXPECT(&t, aerr == CCL_ERR_REVOKED, "async error %s", ccl_status_string(aerr));
    /* A revoked communicator still shrinks: here, to all of its ranks. */
    if (EXPECT_OK(&t, ccl_comm_shrink(comm, NULL, 0, &nc)) == CCL_OK) {
        expect_shape(&t, nc, rank, nranks, 0, "shrink after revoke");
        expect_failed(&t, comm, 0, "shrink after revoke");
        check_comm(&t, nc, "shrunk after revoke");
        EXPECT_OK(&t, ccl_comm_destroy(nc));
    }
    free(buf);
    return t.fails;
}

START_TEST(revoke_then_shrink) {
    const struct matrix_config *cfg = &elastic_configs[_i];
    struct harness_run run = {.nranks = cfg->nranks, .body = body_revoke, .transport = cfg->transport,
                              .ranks_per_host = cfg->ranks_per_host, .ccl_timeout = ELASTIC_TIMEOUT,
                              .deadline_s = 240, .lenient_destroy = 1};
    util_run_clean(&run, 0, "revoke, %s", cfg->name);
}
END_TEST

/* ---- a rank killed in a collective; survivors shrink ---- */

struct kill_case {
    int cfg;
    int nvictims; /* the last ranks die; 2: at once */
};

static int body_kill(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct kill_case *kc = arg;
    struct harness_tally t = {rank, 0};
    float *buf = calloc(BIG, sizeof(float));
    if (!buf) return 1;
    int first_victim = nranks - kc->nvictims;
    uint64_t out = 0;
    for (int r = first_victim; r < nranks; r++) out |= 1ull << r;
    EXPECT_OK(&t, ccl_all_reduce(buf, buf, 1024, CCL_FLOAT32, CCL_SUM, comm));
    harness_child_send("ready");
    ccl_status_t st = CCL_OK;
    for (int i = 0; i < 10000 && st == CCL_OK; i++) st = ccl_all_reduce(buf, buf, BIG / 4, CCL_FLOAT32, CCL_SUM, comm);
    EXPECT(&t, st == CCL_ERR_REMOTE || st == CCL_ERR_REVOKED || st == CCL_ERR_TIMEOUT,
           "all_reduce with a dead rank returned %s", ccl_status_string(st));
    ccl_comm_t *nc = NULL;
    double t0 = harness_now();
    if (EXPECT_OK(&t, ccl_comm_shrink(comm, NULL, 0, &nc)) == CCL_OK) {
        double took = harness_now() - t0;
        if (rank == 0) fprintf(stderr, "[elastic] %s: shrink after %d kill(s) took %.1f ms\n",
                               elastic_configs[kc->cfg].name, kc->nvictims, took * 1e3);
        expect_shape(&t, nc, rank, nranks, out, "shrink after a kill");
        expect_failed(&t, comm, out, "shrink after a kill");
        check_comm(&t, nc, "shrunk after a kill");
        EXPECT_OK(&t, ccl_comm_destroy(nc));
    } else {
        fprintf(stderr, "[rank %d] shrink: %s\n", rank, ccl_comm_last_error(comm));
    }
    free(buf);
    return t.fails;
}

static int parent_kill(struct harness_run *run, void *arg) {
    const struct kill_case *kc = arg;
    char msg[HARNESS_MSG_BYTES];
    for (int r = 0; r < run->nranks; r++)
        if (harness_recv(run, r, msg, sizeof msg, run->start + 60) != 0) {
            fprintf(stderr, "parent: rank %d never got ready\n", r);
            return 1;
        }
    usleep(50 * 1000);
    for (int r = run->nranks - kc->nvictims; r < run->nranks; r++) kill(run->pid[r], SIGKILL);
    return 0;
}

static const struct kill_case kill_cases[] = {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {1, 2}, {2, 2}};

START_TEST(shrink_after_kill) {
    const struct kill_case *kc = &kill_cases[_i];
    const struct matrix_config *cfg = &elastic_configs[kc->cfg];
    struct harness_run run = {.nranks = cfg->nranks, .body = body_kill, .arg = (void *)kc,
                              .transport = cfg->transport, .ranks_per_host = cfg->ranks_per_host,
                              .ccl_timeout = ELASTIC_TIMEOUT, .deadline_s = 240, .parent = parent_kill,
                              .lenient_destroy = 1};
    uint64_t dead = 0;
    for (int r = cfg->nranks - kc->nvictims; r < cfg->nranks; r++) dead |= 1ull << r;
    util_run_clean(&run, dead, "%d kill(s), %s", kc->nvictims, cfg->name);
    ck_assert_msg(run.shm_leftovers == 0, "%d /dev/shm entries left", run.shm_leftovers);
}
END_TEST

/* ---- a rank killed in every phase of the shrink itself ---- */

struct phase_case {
    int cfg;
    int victim;
    const char *phase;
    int late; /* a survivor that sleeps a moment at late_at (0: none; rank 0 is never late) */
    const char *late_at;
};

static int body_shrink_phase(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct phase_case *pc = arg;
    struct harness_tally t = {rank, 0};
    ccl_comm_t *nc = NULL;
    /* A healthy communicator shrunk "by the failed": the victim dies in
     * the shrink, and the others must agree to leave it out. */
    if (EXPECT_OK(&t, ccl_comm_shrink(comm, NULL, 0, &nc)) == CCL_OK) {
        expect_shape(&t, nc, rank, nranks, 1ull << pc->victim, pc->phase);
        expect_failed(&t, comm, 1ull << pc->victim, pc->phase);
        check_comm(&t, nc, pc->phase);
        EXPECT_OK(&t, ccl_comm_destroy(nc));
    } else {
        fprintf(stderr, "[rank %d] shrink (victim %d at %s): %s\n", rank, pc->victim, pc->phase,
                ccl_comm_last_error(comm));
    }
    if (rank == pc->victim) harness_fail(&t, __FILE__, __LINE__, "the victim lived through %s", pc->phase);
    return t.fails;
}

/* Rank 0 coordinates; the others report. In the last case the
 * coordinator dies holding the new communicator's bootstrap root while
 * rank 2 is a moment late to it: rank 1 finds the root gone at once,
 * rank 2 is refused, and must not spend the timeout retrying (the new
 * coordinator would leave it out as silent). */
static const struct phase_case phase_cases[] = {
    {0, 1, "shrink-report", 0, NULL},  {0, 2, "shrink-wait", 0, NULL},    {0, 0, "shrink-decide", 0, NULL},
    {0, 0, "shrink-decided", 0, NULL}, {0, 1, "shrink-create", 0, NULL},  {2, 0, "shrink-decided", 0, NULL},
    {2, 3, "shrink-wait", 0, NULL},    {3, 0, "shrink-decide", 0, NULL},
    {2, 0, "shrink-decided", 2, "shrink-create"},
};

START_TEST(kill_in_shrink) {
    const struct phase_case *pc = &phase_cases[_i];
    const struct matrix_config *cfg = &elastic_configs[pc->cfg];
    char kill_env[64], late_env[64];
    snprintf(kill_env, sizeof kill_env, "CCL_TEST_KILL_AT=%s", pc->phase);
    const char *rank_env[HARNESS_MAX_RANKS] = {0};
    rank_env[pc->victim] = kill_env;
    if (pc->late) {
        snprintf(late_env, sizeof late_env, "CCL_TEST_STALL_AT=%s", pc->late_at);
        rank_env[pc->late] = late_env;
    }
    struct harness_run run = {.nranks = cfg->nranks, .body = body_shrink_phase, .arg = (void *)pc,
                              .transport = cfg->transport, .ranks_per_host = cfg->ranks_per_host,
                              .ccl_timeout = ELASTIC_TIMEOUT, .deadline_s = 240, .rank_env = rank_env,
                              .lenient_destroy = 1};
    util_run_clean(&run, 1ull << pc->victim, "rank %d killed at %s%s%s, %s", pc->victim, pc->phase,
                   pc->late ? ", one survivor late to " : "", pc->late ? pc->late_at : "", cfg->name);
}
END_TEST

/* ---- a rank stopped past the timeout, resumed later ---- */

#define STOPPED 1

static int body_stopped(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    float *buf = calloc(BIG, sizeof(float));
    if (!buf) return 1;
    EXPECT_OK(&t, ccl_all_reduce(buf, buf, 1024, CCL_FLOAT32, CCL_SUM, comm));
    harness_child_send("ready");
    char msg[HARNESS_MSG_BYTES];
    if (rank == STOPPED) harness_child_recv(msg, sizeof msg, 60); /* the parent stops this process meanwhile */
    ccl_status_t st = ccl_all_reduce(buf, buf, BIG, CCL_FLOAT32, CCL_SUM, comm);
    EXPECT(&t, st != CCL_OK, "all_reduce with a stopped rank succeeded");
    ccl_comm_t *nc = NULL;
    st = ccl_comm_shrink(comm, NULL, 0, &nc);
    if (rank == STOPPED) {
        EXPECT(&t, st == CCL_ERR_REVOKED && nc == NULL, "the resumed rank's shrink returned %s: %s",
               ccl_status_string(st), ccl_comm_last_error(comm));
        EXPECT(&t, strstr(ccl_comm_last_error(comm), "left out") != NULL, "it was not told it was left out: %s",
               ccl_comm_last_error(comm));
    } else {
        EXPECT(&t, st == CCL_OK, "shrink: %s (%s)", ccl_status_string(st), ccl_comm_last_error(comm));
    }
    if (rank != STOPPED && nc) {
        expect_shape(&t, nc, rank, nranks, 1ull << STOPPED, "shrink past a stopped rank");
        check_comm(&t, nc, "shrunk past a stopped rank");
        /* The stopped rank resumes while this communicator works on. */
        if (rank == 0) harness_child_send("shrunk");
        for (int i = 0; i < 20; i++) check_gather_bcast(&t, nc, "while the stopped rank resumes");
        EXPECT_OK(&t, ccl_comm_destroy(nc));
    }
    free(buf);
    return t.fails;
}

static int parent_stop(struct harness_run *run, void *arg) {
    (void)arg;
    char msg[HARNESS_MSG_BYTES];
    for (int r = 0; r < run->nranks; r++)
        if (harness_recv(run, r, msg, sizeof msg, run->start + 60) != 0) return 1;
    kill(run->pid[STOPPED], SIGSTOP);
    harness_send(run, STOPPED, "go");
    int fails = harness_recv(run, 0, msg, sizeof msg, harness_now() + 60) != 0;
    kill(run->pid[STOPPED], SIGCONT);
    return fails;
}

START_TEST(stopped_rank_left_out) {
    const struct matrix_config *cfg = &elastic_configs[_i];
    struct harness_run run = {.nranks = cfg->nranks, .body = body_stopped, .transport = cfg->transport,
                              .ranks_per_host = cfg->ranks_per_host, .ccl_timeout = STOP_TIMEOUT, .deadline_s = 240,
                              .parent = parent_stop, .lenient_destroy = 1};
    util_run_clean(&run, 0, "stopped rank, %s", cfg->name);
}
END_TEST

/* ---- shrink with an exclude list ---- */

static int body_exclude(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    int disagree = arg != NULL;
    struct harness_tally t = {rank, 0};
    int leaver = nranks - 1;
    if (rank == leaver) {
        /* Left out: makes no shrink call; its communicator is revoked. */
        ccl_status_t st = ccl_barrier(comm);
        EXPECT(&t, st == CCL_ERR_REVOKED, "the excluded rank's barrier returned %s", ccl_status_string(st));
        return t.fails;
    }
    /* With disagree, rank 1 names another rank (a survivor) than the rest. */
    int ex = disagree && rank == 1 ? leaver - 1 : leaver;
    ccl_comm_t *nc = NULL;
    ccl_status_t st = ccl_comm_shrink(comm, &ex, 1, &nc);
    if (disagree) {
        EXPECT(&t, st == CCL_ERR_INVALID_USAGE && nc == NULL, "shrink with lists that differ returned %s (%s)",
               ccl_status_string(st), ccl_comm_last_error(comm));
        EXPECT(&t, strstr(ccl_comm_last_error(comm), "exclude list") != NULL, "error: %s",
               ccl_comm_last_error(comm));
    } else if (EXPECT_OK(&t, st) == CCL_OK) {
        expect_shape(&t, nc, rank, nranks, 1ull << leaver, "shrink with a list");
        expect_failed(&t, comm, 1ull << leaver, "shrink with a list");
        check_comm(&t, nc, "shrunk by a list");
        EXPECT_OK(&t, ccl_comm_destroy(nc));
    }
    return t.fails;
}

START_TEST(shrink_by_list) {
    struct harness_run run = {.nranks = 4, .body = body_exclude, .transport = _i ? "tcp" : "shm",
                              .ccl_timeout = ELASTIC_TIMEOUT, .deadline_s = 240, .lenient_destroy = 1};
    util_run_clean(&run, 0, "shrink by list, %s", _i ? "tcp" : "shm");
}
END_TEST

START_TEST(shrink_lists_disagree) {
    struct harness_run run = {.nranks = 5, .body = body_exclude, .arg = (void *)1, .transport = "shm",
                              .ccl_timeout = ELASTIC_TIMEOUT, .deadline_s = 240, .lenient_destroy = 1};
    util_run_clean(&run, 0, "shrink lists disagree");
}
END_TEST

/* ---- bad arguments ---- */

static int body_args(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    (void)arg;
    struct harness_tally t = {rank, 0};
    ccl_comm_t *nc = (ccl_comm_t *)&t;
    int self = rank, big = nranks, two[2] = {0, 0}, nf = -1;
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_shrink(comm, NULL, 0, NULL));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_shrink(comm, &self, 1, &nc));
    EXPECT(&t, nc == NULL, "a refused shrink left *newcomm set");
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_shrink(comm, &big, 1, &nc));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_shrink(comm, NULL, 2, &nc));
    if (rank != 0) EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_shrink(comm, two, 2, &nc));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_failed_ranks(comm, NULL, 1, &nf));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_failed_ranks(comm, NULL, 0, NULL));
    EXPECT_OK(&t, ccl_comm_failed_ranks(comm, NULL, 0, &nf));
    EXPECT(&t, nf == 0, "a healthy communicator has %d failed ranks", nf);
    ccl_unique_id_t id;
    if (rank != 0) EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_comm_grow_id(comm, &id));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_grow_id(comm, NULL));
    /* A grow without rank 0's id fails on every rank, together. */
    EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_comm_grow(comm, nranks + 1, NULL, -1, &nc));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_grow(NULL, 2, NULL, 1, &nc));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_ARGUMENT, ccl_comm_grow(NULL, 2, &id, 2, &nc));
    /* Still healthy after all of that. */
    check_gather_bcast(&t, comm, "after refused calls");
    /* Rank 0 revokes while the others wait in a barrier it never joins. */
    if (rank == 0) EXPECT_OK(&t, ccl_comm_revoke(comm));
    EXPECT_STATUS(&t, CCL_ERR_REVOKED, ccl_barrier(comm));
    EXPECT_STATUS(&t, CCL_ERR_INVALID_USAGE, ccl_comm_revoke((ccl_comm_t *)&t));
    return t.fails;
}

START_TEST(bad_arguments) {
    struct harness_run run = {.nranks = 3, .body = body_args, .transport = "shm", .ccl_timeout = ELASTIC_TIMEOUT,
                              .deadline_s = 60, .lenient_destroy = 1};
    util_run_clean(&run, 0, "bad arguments");
}
END_TEST

/* ---- grow ---- */

struct grow_case {
    const char *transport;
    int members, joiners;
    int cycles;   /* grow then shrink the newcomers out again, this many times */
    int intruder; /* the last joiner intrudes: 1 claims rank 0 (a member's) with the newcomers' id, as a rank
                   * left out earlier would; 2 claims the last newcomer's rank with a wrong secret */
};

/* The id's bytes that are used travel (a control message is short); the
 * rest are zeros, and checked to be. */
#define ID_USED 120

static void id_to_hex(const ccl_unique_id_t *id, char *hex) {
    for (size_t i = 0; i < ID_USED; i++) sprintf(hex + 2 * i, "%02x", (uint8_t)id->internal[i]);
}

static int hex_to_id(const char *hex, ccl_unique_id_t *id) {
    memset(id, 0, sizeof *id);
    for (size_t i = 0; i < ID_USED; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
        id->internal[i] = (char)v;
    }
    return 0;
}

static int count_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int body_grow_member(ccl_comm_t *comm, int rank, int nranks, void *arg) {
    const struct grow_case *gc = arg;
    struct harness_tally t = {rank, 0};
    int total = gc->members + gc->joiners - (gc->intruder != 0);
    int fds0 = -1, threads0 = -1;
    ccl_comm_t *mine = comm;
    for (int c = 0; c < gc->cycles && !t.fails; c++) {
        ccl_unique_id_t id;
        if (rank == 0) {
            if (EXPECT_OK(&t, ccl_comm_grow_id(comm, &id)) != CCL_OK) break;
            for (size_t i = ID_USED; i < sizeof id.internal; i++)
                EXPECT(&t, id.internal[i] == 0, "byte %zu of the grow id is not zero", i);
            char hex[2 * ID_USED + 8];
            strcpy(hex, "id ");
            id_to_hex(&id, hex + 3);
            harness_child_send("%s", hex);
        }
        ccl_comm_t *grown = NULL;
        if (EXPECT_OK(&t, ccl_comm_grow(comm, total, rank == 0 ? &id : NULL, -1, &grown)) != CCL_OK) {
            fprintf(stderr, "[rank %d] grow: %s\n", rank, ccl_comm_last_error(comm));
            break;
        }
        int r = -1, n = -1;
        ccl_comm_rank(grown, &r);
        ccl_comm_size(grown, &n);
        EXPECT(&t, r == rank && n == total, "grown: rank %d of %d, expected %d of %d", r, n, rank, total);
        if (c == 0 || c == gc->cycles - 1) check_comm(&t, grown, "grown");
        else check_gather_bcast(&t, grown, "grown");
        /* The newcomers leave again: shrink by list, they make no call. */
        int ex[HARNESS_MAX_RANKS], nex = 0;
        for (int k = nranks; k < total; k++) ex[nex++] = k;
        ccl_comm_t *back = NULL;
        if (EXPECT_OK(&t, ccl_comm_shrink(grown, ex, nex, &back)) == CCL_OK) {
            check_gather_bcast(&t, back, "shrunk back");
            if (comm != mine) EXPECT_OK(&t, ccl_comm_destroy(comm));
            comm = back;
        }
        ccl_comm_destroy(grown);
        if (c == 1) fds0 = count_dir("/proc/self/fd"), threads0 = count_dir("/proc/self/task");
    }
    if (gc->cycles > 2 && !t.fails) {
        /* A bootstrap root's thread is detached: it may still be on its
         * way out when its last answer has been given. A leak stays (and
         * grows with the cycles); a thread that is leaving is gone within
         * moments, so the counts get a second to settle. */
        int fds = count_dir("/proc/self/fd"), threads = count_dir("/proc/self/task");
        for (int k = 0; k < 100 && (fds > fds0 || threads > threads0); k++) {
            usleep(10 * 1000);
            fds = count_dir("/proc/self/fd"), threads = count_dir("/proc/self/task");
        }
        EXPECT(&t, fds <= fds0 && threads <= threads0, "after %d grow/shrink cycles: %d fds (%d after the second), "
               "%d threads (%d)", gc->cycles, fds, fds0, threads, threads0);
    }
    /* The harness destroys the communicator it made. */
    if (comm != mine) EXPECT_OK(&t, ccl_comm_destroy(comm));
    return t.fails;
}

static int body_grow_joiner(int rank, int nranks, void *arg) {
    const struct grow_case *gc = arg;
    (void)nranks;
    struct harness_tally t = {rank, 0};
    int total = gc->members + gc->joiners - (gc->intruder != 0);
    int intruder = gc->intruder && rank == gc->members + gc->joiners - 1;
    for (int c = 0; c < (intruder ? 1 : gc->cycles) && !t.fails; c++) {
        char msg[HARNESS_MSG_BYTES + 300];
        if (harness_child_recv(msg, sizeof msg, 60) != 0 || strncmp(msg, "id ", 3) != 0) {
            harness_fail(&t, __FILE__, __LINE__, "no grow id from the parent");
            break;
        }
        ccl_unique_id_t id;
        hex_to_id(msg + 3, &id);
        ccl_comm_t *grown = NULL;
        int claim = rank;
        if (intruder && gc->intruder == 1) claim = 0;
        if (intruder && gc->intruder == 2) claim = total - 1, id.internal[50] ^= 0x5a; /* a byte of the secret */
        ccl_status_t st = ccl_comm_grow(NULL, total, &id, claim, &grown);
        if (intruder) {
            EXPECT(&t, st != CCL_OK && grown == NULL, "an intruder claiming rank %d joined the grow (%s)", claim,
                   ccl_status_string(st));
            break;
        }
        if (EXPECT_OK(&t, st) != CCL_OK) break;
        if (c == 0 || c == gc->cycles - 1) check_comm(&t, grown, "grown (newcomer)");
        else check_gather_bcast(&t, grown, "grown (newcomer)");
        /* Leaves: the members shrink it out; its communicator is revoked. */
        EXPECT_STATUS(&t, CCL_ERR_REVOKED, ccl_barrier(grown));
        ccl_comm_destroy(grown);
    }
    return t.fails;
}

static int parent_grow(struct harness_run *run, void *arg) {
    const struct grow_case *gc = arg;
    int fails = 0;
    char msg[HARNESS_MSG_BYTES + 300];
    int first_joiner = gc->members;
    for (int c = 0; c < gc->cycles; c++) {
        if (harness_recv(run, 0, msg, sizeof msg, harness_now() + 60) != 0 || strncmp(msg, "id ", 3) != 0) {
            fprintf(stderr, "parent: no grow id from rank 0 in cycle %d\n", c);
            return fails + 1;
        }
        for (int j = first_joiner; j < run->nranks; j++)
            if (!(gc->intruder && j == run->nranks - 1 && c > 0)) harness_send(run, j, "%s", msg);
    }
    return fails;
}

static const struct grow_case grow_cases[] = {
    {"shm", 2, 2, 1, 0}, {"tcp", 3, 2, 1, 0}, {NULL, 3, 2, 1, 1}, {"tcp", 2, 2, 1, 2}, {"shm", 3, 1, 200, 0},
};

START_TEST(grow_and_back) {
    struct grow_case ib_case, *gc = (struct grow_case *)&grow_cases[_i];
    if (elastic_configs == ib_configs) {
        /* Over RDMA, every rank a host; fewer cycles (the VM emulates its CPUs). */
        ib_case = *gc;
        ib_case.transport = "ib";
        if (ib_case.cycles > 20) ib_case.cycles = 20;
        gc = &ib_case;
    }
    struct harness_run run = {.nranks = gc->members + gc->joiners, .joiners = gc->joiners,
                              .body = body_grow_member, .joiner_body = body_grow_joiner, .arg = (void *)gc,
                              .transport = gc->transport,
                              .host_per_rank = gc->transport == NULL || strcmp(gc->transport, "ib") == 0,
                              .ccl_timeout = ELASTIC_TIMEOUT, .deadline_s = 600, .parent = parent_grow,
                              .lenient_destroy = 1};
    util_run_clean(&run, 0, "grow %d + %d, %d cycle(s)%s", gc->members, gc->joiners, gc->cycles,
                   gc->intruder ? ", with an intruder" : "");
}
END_TEST

static Suite *elastic_suite(void) {
    Suite *s = suite_create("elastic");
    util_add_loop_case(s, "revoke_then_shrink", revoke_then_shrink, NCONFIGS, 300);
    util_add_loop_case(s, "shrink_after_kill", shrink_after_kill, (int)(sizeof kill_cases / sizeof kill_cases[0]),
                       300);
    util_add_loop_case(s, "kill_in_shrink", kill_in_shrink, (int)(sizeof phase_cases / sizeof phase_cases[0]), 300);
    util_add_loop_case(s, "stopped_rank_left_out", stopped_rank_left_out, NCONFIGS, 300);
    util_add_loop_case(s, "shrink_by_list", shrink_by_list, 2, 120);
    util_add_loop_case(s, "shrink_lists_disagree", shrink_lists_disagree, 1, 120);
    util_add_loop_case(s, "bad_arguments", bad_arguments, 1, 120);
    util_add_loop_case(s, "grow_and_back", grow_and_back, (int)(sizeof grow_cases / sizeof grow_cases[0]), 600);
    return s;
}

int main(void) {
    const char *m = getenv("CCL_TEST_MATRIX");
    if (m && strcmp(m, "ib") == 0) elastic_configs = ib_configs, ELASTIC_TIMEOUT = "30", STOP_TIMEOUT = "15";
    return harness_main(elastic_suite());
}
